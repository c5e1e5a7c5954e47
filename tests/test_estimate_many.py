"""estimate_many: equal to estimate() row by row, reasons for invalid rows, compiled ==
oracle on >= 10,000 seeded candidates over seven models (a VLM among them), and the kernels' own contract."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from batch_cases import columns_of, planted_rows, random_rows
from ndcost import Cluster, ExecSpec, Model, SpecError, _backend, estimate
from ndcost.kernels.columns import PART_NAMES
from ndcost.price.batch_result import BatchEstimate
from ndcost.price.candidates import Candidates
from ndcost.price.estimate_many import estimate_many
from ndcost.tables.memory import MEMORY_PARTS
from ndcost.tables.reasons import FIRST_INVALID, REASON_CODES, REASON_TABLE
from ndcost.tables.joint_rules import validate
from strategies import ND_PRICED, realistic

RTOL = 1e-12
PARITY_MODELS = ("llama3-70b", "qwen3-32b", "mixtral-8x7b", "deepseek-v3", "qwen3-next-80b-a3b", "qwen3-30b-a3b",
                 "qwen2.5-vl-7b")
STAGE_FIELDS = MEMORY_PARTS + ("total",)


def close(a, b) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= RTOL * max(abs(a), abs(b))


def _cands(model: Model, count: int, seed: int) -> Candidates:
    return Candidates.from_arrays(**columns_of(random_rows(model, count, seed=seed) + planted_rows(model)))


# --------------------------------------------------------------------------- == estimate(), row by row


@pytest.mark.parametrize("name", ND_PRICED)
def test_equals_estimate_per_row(backend_name, name):
    """Every output of every row == estimate(units="nd") of the row's spec on its own cluster."""
    model = Model.from_catalog(name)
    _, spec, cluster = realistic(name)
    rows = random_rows(model, 24 if backend_name == "python" else 60, seed=3) + planted_rows(model)
    cands = Candidates.from_arrays(**columns_of(rows))
    with _backend.use(backend_name):
        batch = estimate_many(model, cands, "h100-sxm", units="nd", stage_times=True, stage_memory=True)
        compared = 0
        for i in range(len(cands)):
            row = cands[i]
            own = Cluster("h100-sxm", num_devices=row.num_devices)
            try:
                single = estimate(model, row, own, units="nd")
            except SpecError:
                assert batch.reason[i] >= FIRST_INVALID, (i, REASON_TABLE[batch.reason[i]])
                assert math.isnan(batch.step_time[i]) and not batch.fits[i]
                continue
            assert batch.reason[i] in (0, REASON_CODES["no_fit"]), (i, REASON_TABLE[batch.reason[i]])
            assert close(batch.step_time[i], single.step_time)
            for part in PART_NAMES:
                assert close(batch.parts[part][i], single.parts[part]) or abs(
                    batch.parts[part][i] - single.parts[part]) <= RTOL * abs(single.step_time), part
            assert all(close(a, b) for a, b in zip(batch.stage_times[i][:row.pp], single.stage_times))
            assert np.isnan(batch.stage_times[i][row.pp:]).all()
            assert close(batch.peak_memory[i], single.memory.peak)
            assert bool(batch.fits[i]) is single.fits
            for stage, expected in zip(batch.stage_memory[i], single.memory.stages):
                assert all(close(stage[j], getattr(expected, field)) for j, field in enumerate(STAGE_FIELDS))
            compared += 1
        assert compared >= len(cands) // 2
        # The realistic strategy on its real cluster, as a list of ExecSpec.
        one = estimate_many(model, [spec], cluster, units="nd")
        single = estimate(model, spec, cluster, units="nd")
        assert close(one.step_time[0], single.step_time) and close(one.peak_memory[0], single.memory.peak)
        assert one.reason[0] == (0 if single.fits else REASON_CODES["no_fit"])


# --------------------------------------------------------------------------- reasons


def _reason(model: str, cluster: object, **fields) -> str:
    result = estimate_many(model, Candidates.from_arrays(**fields), cluster, units="nd", **_options(fields))
    return REASON_TABLE[int(result.reason[0])].name


def _options(fields: dict) -> dict:
    return {}


@pytest.mark.parametrize("model,cluster,fields,expected", [
    ("llama3-70b", Cluster("h100-sxm", 64), dict(dp=4, tp=8, pp=4, global_batch_size=64), "devices"),
    ("llama3-70b", "h100-sxm", dict(dp=8, tp=3, pp=1, global_batch_size=64), "tp_heads"),
    ("llama3-70b", "h100-sxm", dict(dp=4, tp=3, pp=1, global_batch_size=64), "whole_nodes"),
    ("qwen3-32b", "h100-sxm", dict(dp=1, tp=16, global_batch_size=4), "tp_kv_heads"),
    ("qwen3-next-80b-a3b", "h100-sxm", dict(dp=1, tp=4, global_batch_size=4), "tp_kv_heads"),
    ("llama3-70b", "h100-sxm", dict(dp=4, ep=2, global_batch_size=64), "ep_dense"),
    ("mixtral-8x7b", "h100-sxm", dict(dp=6, ep=3, global_batch_size=6), "ep_experts"),
    ("mixtral-8x7b", "h100-sxm", dict(dp=2, tp=2, ep=8, global_batch_size=8), "ep_grid"),
    ("mixtral-8x7b", "h100-sxm", dict(dp=2, tp=1, ep=2, etp=4, global_batch_size=8), "ep_grid"),
    ("llama3-8b", "h100-sxm", dict(dp=1, pp=64, global_batch_size=64), "pp_layers"),
    ("llama3-8b", "h100-sxm", dict(dp=1, pp=16, vpp=4, global_batch_size=64), "vpp_layers"),
    ("llama3-70b", "h100-sxm", dict(dp=2, pp=8, global_batch_size=8), "micro_batches_lt_pp"),
    ("llama3-70b", "h100-sxm", dict(dp=1, pp=4, vpp=2, global_batch_size=6), "micro_batches_not_multiple"),
    ("llama3-70b", "h100-sxm", dict(dp=1, tp=8, sequence_parallel=True, seq_length=4100, global_batch_size=4),
     "seq_sp"),
    ("llama3-70b", "h100-sxm", dict(dp=1, cp=4, seq_length=4100, global_batch_size=4), "seq_ring"),
    ("llama3-70b", "h100-sxm", dict(dp=1, tp=4, cp=4, cp_algo="ulysses", global_batch_size=4), "ulysses_heads"),
    ("llama3-70b", "h100-sxm", dict(dp=1, cp=4, cp_algo="ulysses", seq_length=4098, global_batch_size=4),
     "seq_ulysses"),
    ("llama3-70b", "h100-sxm", dict(dp=1, pp=2, offset=(1, 1), global_batch_size=4), "layout"),
    ("llama3-70b", "h100-sxm", dict(dp=1, pp=2, pp_partition=(40, 41), global_batch_size=4), "layout"),
    ("llama3-70b", "a100-80g", dict(dp=1, precision="fp8", global_batch_size=4), "no_fp8"),
    ("llama3-70b", "h100-sxm", dict(dp=8, global_batch_size=8, seq_length=8192), "no_fit"),
    ("llama3-70b", "h100-sxm", dict(dp=3, global_batch_size=8), "batch_not_divisible"),
    ("llama3-70b", "h100-sxm", dict(dp=1, tp=8, pp=4, vpp=2, global_batch_size=8, sequence_parallel=True,
                                    recompute="full"), "ok"),
])
def test_reason_codes(model, cluster, fields, expected):
    assert _reason(model, cluster, **fields) == expected


def test_cross_node_tp_is_a_reason_only_when_asked():
    cands = Candidates.from_arrays(dp=1, tp=16, global_batch_size=4, seq_length=4096)
    model = Model.from_catalog("gpt3-175b")
    kept = estimate_many(model, cands, "h100-sxm", units="nd")
    refused = estimate_many(model, cands, "h100-sxm", units="nd", allow_cross_node_tp=False)
    assert REASON_TABLE[kept.reason[0]].name != "tp_cross_node"
    assert REASON_TABLE[refused.reason[0]].name == "tp_cross_node"


@pytest.mark.parametrize("name", ["llama3-70b", "mixtral-8x7b", "deepseek-v3", "qwen3-next-80b-a3b"])
@pytest.mark.parametrize("fixed", [False, True], ids=["own-devices", "64-devices"])
def test_joint_reasons_match_validate(name, fixed):
    """On random rows, many broken on purpose: a row is priced iff validate() passes, and an
    invalid row's reason names the parameter validate raises first. On a device name every
    row is validated on its own devices; on a 64-device cluster the device count comes first."""
    model = Model.from_catalog(name)
    rng = np.random.default_rng(5)
    rows = []
    for row in random_rows(model, 400, seed=9):
        row = dict(row)
        if rng.random() < 0.25:
            row["tp"] = int(rng.choice((3, 5, 6, 16, 32)))
            row["sequence_parallel"] = False
        if rng.random() < 0.2 and model.is_moe:
            row["ep"] = int(rng.choice((3, 6, 512)))
        if rng.random() < 0.1:
            row["global_batch_size"] = row["micro_batch_size"] * row["dp"]     # one micro-batch
        if rng.random() < 0.1:
            row["seq_length"] = 4100
        rows.append(row)
    cands = Candidates.from_arrays(**columns_of(rows))
    target = Cluster("h100-sxm", num_devices=64) if fixed else "h100-sxm"
    result = estimate_many(model, cands, target, units="nd", with_memory=False)
    seen = set()
    for i in range(len(cands)):
        code = int(result.reason[i])
        try:
            spec = cands[i]
        except SpecError as error:
            assert code >= FIRST_INVALID and error.parameter.split(".")[0] in REASON_TABLE[code].parameters
            continue
        try:
            validate(model, spec, target if fixed else Cluster("h100-sxm", num_devices=spec.num_devices))
        except SpecError as error:   # Cluster's own rule (whole nodes) comes first on a bare device
            assert code >= FIRST_INVALID, (i, str(error))
            assert error.parameter in REASON_TABLE[code].parameters, (i, str(error), REASON_TABLE[code])
            seen.add(REASON_TABLE[code].name)
            continue
        assert code < FIRST_INVALID, (i, REASON_TABLE[code])
    assert ({"devices"} if fixed else {"whole_nodes", "tp_heads", "micro_batches_lt_pp"}) <= seen, seen


def test_invalid_rows_are_values_not_exceptions():
    model = Model.from_catalog("llama3-70b")
    cands = Candidates.from_arrays(dp=[8, 0, 8, 2], tp=[8, 8, 3, 8], pp=[2, 2, 2, 8],
                                   global_batch_size=[64, 64, 64, 16], sequence_parallel=True, recompute="full")
    result = estimate_many(model, cands, "h100-sxm", units="nd", stage_times=True, stage_memory=True)
    names = result.reason_names().tolist()
    assert names == ["ok", "bad_degree", "tp_heads", "ok"]
    invalid = result.reason >= FIRST_INVALID
    assert np.isnan(result.step_time[invalid]).all() and np.isnan(result.peak_memory[invalid]).all()
    assert not result.fits[invalid].any() and result.valid.tolist() == [True, False, False, True]
    assert all(np.isnan(result.parts[name][invalid]).all() for name in PART_NAMES)
    assert np.isnan(result.stage_times[invalid]).all() and np.isnan(result.stage_memory[invalid]).all()
    assert "heads" in result.explain(2) and result.row(0)["reason"] == 0
    assert result.best(1).tolist() == [int(np.argmin(np.where(result.ok, result.step_time, np.inf)))]


# --------------------------------------------------------------------------- compiled == oracle


@pytest.mark.cython
def test_compiled_equals_oracle_on_10k_candidates():
    """>= 10,000 seeded candidates over seven models, a VLM among them (planted edges included): every output
    of the compiled kernels equals the oracle's to 1e-12 relative."""
    total = 0
    for seed, name in enumerate(PARITY_MODELS):
        model = Model.from_catalog(name)
        cands = _cands(model, 1700, seed=100 + seed)
        results = {}
        for backend in ("cython", "python"):
            with _backend.use(backend):
                results[backend] = estimate_many(model, cands, "h100-sxm", units="nd", stage_times=True,
                                                 stage_memory=True, chunk_size=4096)
        c, py = results["cython"], results["python"]
        np.testing.assert_array_equal(c.reason, py.reason)
        np.testing.assert_array_equal(c.fits, py.fits)
        for label, a, b in [("step_time", c.step_time, py.step_time), ("peak_memory", c.peak_memory, py.peak_memory),
                            ("stage_times", c.stage_times, py.stage_times),
                            ("stage_memory", c.stage_memory, py.stage_memory)] + [
                               (part, c.parts[part], py.parts[part]) for part in PART_NAMES]:
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=0, equal_nan=True, err_msg=f"{name} {label}")
        assert (c.reason == 0).any() and (c.reason == REASON_CODES["no_fit"]).any()
        total += len(cands)
    assert total >= 10_000


# --------------------------------------------------------------------------- options and API


def test_options_ratios_chunks_and_memory_switch():
    model = Model.from_catalog("qwen3-30b-a3b")
    cands = _cands(model, 80, seed=21)
    base = estimate_many(model, cands, "h100-sxm", units="nd")
    chunked = estimate_many(model, cands, "h100-sxm", units="nd", chunk_size=7)
    np.testing.assert_array_equal(base.step_time, chunked.step_time)
    np.testing.assert_array_equal(base.peak_memory, chunked.peak_memory)
    no_memory = estimate_many(model, cands, "h100-sxm", units="nd", with_memory=False)
    np.testing.assert_array_equal(base.step_time, no_memory.step_time)
    assert np.isnan(no_memory.peak_memory).all() and (no_memory.fits == (no_memory.reason == 0)).all()
    assert no_memory.stage_memory is None and no_memory.stage_times is None
    ratios = {name: 1e-12 * (i + 1) for i, name in enumerate(("COMPUTE", "DP_COMM", "DP_REDUCE", "MP_COMM", "EP_COMM",
                                                                "CP_COMM", "PP_COMM", "BUBBLE"))}
    options = dict(ratio_type="STATIC", rec_type="COMPUTE_ONLY", p2p=True)
    scaled = estimate_many(model, cands, "h100-sxm", units="nd", **options)
    for i in np.flatnonzero(scaled.valid)[:20]:
        spec = cands[int(i)]
        single = estimate(model, spec, Cluster("h100-sxm", spec.num_devices), units="nd", **options)
        assert close(scaled.step_time[i], single.step_time)
    with_ratios = estimate_many(model, cands, "h100-sxm", units="nd", ratios=ratios)
    assert with_ratios.units == "nd_ms"
    i = int(np.flatnonzero(with_ratios.valid)[0])
    spec = cands[i]
    single = estimate(model, spec, Cluster("h100-sxm", spec.num_devices), units="nd", ratios=ratios)
    assert close(with_ratios.step_time[i], single.step_time)


def test_arguments_are_checked():
    model = Model.from_catalog("llama3-8b")
    cands = Candidates.from_arrays(dp=2, global_batch_size=8)
    assert estimate_many(model, cands, "h100-sxm").units == "seconds"
    with pytest.raises(SpecError, match="units"):
        estimate_many(model, cands, "h100-sxm", units="ms")
    with pytest.raises(SpecError, match="candidates"):
        estimate_many(model, {"dp": 2}, "h100-sxm", units="nd")
    with pytest.raises(SpecError, match="cluster"):
        estimate_many(model, cands, 8, units="nd")
    with pytest.raises(SpecError, match="chunk_size"):
        estimate_many(model, cands, "h100-sxm", units="nd", chunk_size=0)
    result = estimate_many("llama3-8b", ExecSpec(dp=2, global_batch_size=8), "h100-sxm", units="nd")
    assert isinstance(result, BatchEstimate) and len(result) == 1
    for array in (result.step_time, result.parts["bubble"], result.reason, result.fits, result.peak_memory):
        with pytest.raises(ValueError):
            array[0] = 0


def test_empty_batch():
    result = estimate_many("llama3-8b", Candidates.from_arrays(dp=np.zeros(0, dtype=int), global_batch_size=8),
                           "h100-sxm", units="nd")
    assert len(result) == 0 and result.step_time.shape == (0,)


@pytest.mark.cython
def test_threads_price_the_same():
    model = Model.from_catalog("deepseek-v3")
    cands = _cands(model, 300, seed=31)
    with _backend.use("cython"):
        expected = estimate_many(model, cands, "h800", units="nd")
        results = [None] * 4

        def work(slot: int) -> None:
            results[slot] = estimate_many(model, cands, "h800", units="nd", chunk_size=64)

        threads = [threading.Thread(target=work, args=(slot,)) for slot in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for result in results:
        np.testing.assert_array_equal(result.step_time, expected.step_time)
        np.testing.assert_array_equal(result.peak_memory, expected.peak_memory)


# --------------------------------------------------------------------------- the kernels' contract


def _kernel_inputs(kernels_module, model: Model, spec: ExecSpec):
    from ndcost.tables.layout_pool import layout_piece, pack_layouts
    from ndcost.price.estimate import nd_options
    from ndcost.tables.layout import build_layout
    from ndcost.tables.memory import memory_candidate_vector, memory_kind_table, memory_model_vector
    from ndcost.tables.derive import derive
    from ndcost.tables.nd_tables import nd_candidate_vector, nd_kind_table, nd_model_vector

    pool = pack_layouts([layout_piece(build_layout(model, spec))])
    cluster = Cluster("h100-sxm", spec.num_devices)
    nd = dict(kinds=nd_kind_table(model), model=nd_model_vector(model),
              cands=nd_candidate_vector(spec, derive(model, spec), cluster).reshape(-1, 1),
              layout_index=np.zeros(1, dtype=np.int64), layouts=pool.layouts, pool=pool.pool,
              slot_pool=pool.slot_pool, options=nd_options("DYNAMIC", "WITH", False), ratios=np.zeros(0),
              reason=np.zeros(1, dtype=np.int64), out_step=np.empty(1), out_parts=np.empty((len(PART_NAMES), 1)),
              out_stage_times=np.empty((1, spec.pp)))
    memory = dict(kinds=memory_kind_table(model), model=memory_model_vector(model),
                  cands=memory_candidate_vector(model, spec).reshape(-1, 1), layout_index=np.zeros(1, dtype=np.int64),
                  layouts=pool.layouts, pool=pool.pool, slot_pool=pool.slot_pool, reserve=2.0**30,
                  capacity=80e9, reason=np.zeros(1, dtype=np.int64), out_peak=np.empty(1),
                  out_fits=np.empty(1, dtype=np.uint8), out_stages=np.empty((1, spec.pp, 8)))
    return nd, memory


def test_kernels_check_shapes_before_pricing(kernels):
    model = Model.from_catalog("llama3-8b")
    spec = ExecSpec(dp=2, pp=4, global_batch_size=16)
    nd, memory = _kernel_inputs(kernels, model, spec)
    kernels.nd_estimate_batch(**nd)
    kernels.memory_batch(**memory)
    assert nd["reason"][0] == 0 and nd["out_step"][0] > 0 and memory["out_peak"][0] > 0
    bad_layout = np.array(nd["layouts"])
    bad_layout[0, 0] = 5                                     # pp no longer the candidate's
    short_pool = nd["pool"][:3]
    for name, value, message in (("layout_index", np.array([1]), "layout_index"),
                                 ("layouts", bad_layout, "layout"), ("pool", short_pool, "pool"),
                                 ("out_stage_times", np.empty((1, 2)), "out_stage_times"),
                                 ("out_parts", np.empty((3, 1)), "out_parts"), ("cands", np.empty((1, 5)), "cands"),
                                 ("reason", np.zeros(2, dtype=np.int64), "reason")):
        with pytest.raises(ValueError, match=message):
            kernels.nd_estimate_batch(**{**nd, name: value})
    for name, value in (("layout_index", np.array([-1])), ("layouts", bad_layout), ("pool", short_pool),
                        ("out_stages", np.empty((1, 2, 8))), ("out_fits", np.empty(3, dtype=np.uint8)),
                        ("cands", np.empty((1, 5)))):
        with pytest.raises(ValueError):
            kernels.memory_batch(**{**memory, name: value})


def test_kernels_read_candidates_of_any_strides(kernels):
    """A candidate matrix whose candidates are contiguous (the transpose of a (rows, fields) array, what
    estimate_many's chunks pass) prices bit for bit as the field-major one."""
    model = Model.from_catalog("llama3-8b")
    spec = ExecSpec(dp=2, pp=4, global_batch_size=16)
    nd, memory = _kernel_inputs(kernels, model, spec)
    kernels.nd_estimate_batch(**nd)
    kernels.memory_batch(**memory)
    step, parts, peak = nd["out_step"].copy(), nd["out_parts"].copy(), memory["out_peak"].copy()
    for inputs in (nd, memory):
        inputs["cands"] = np.ascontiguousarray(inputs["cands"].T).T
        assert not inputs["cands"].flags.c_contiguous or inputs["cands"].shape[1] == 1
    kernels.nd_estimate_batch(**nd)
    kernels.memory_batch(**memory)
    assert nd["out_step"].tobytes() == step.tobytes() and nd["out_parts"].tobytes() == parts.tobytes()
    assert memory["out_peak"].tobytes() == peak.tobytes()


def test_kernels_skip_invalid_rows_and_flag_results(kernels):
    model = Model.from_catalog("llama3-8b")
    spec = ExecSpec(dp=2, pp=4, global_batch_size=16)
    nd, memory = _kernel_inputs(kernels, model, spec)
    invalid = REASON_CODES["tp_heads"]
    nd["reason"][0] = invalid
    nd["layout_index"] = np.array([99])                      # never read for an invalid row
    kernels.nd_estimate_batch(**nd)
    assert nd["reason"][0] == invalid and math.isnan(nd["out_step"][0]) and np.isnan(nd["out_parts"]).all()
    memory["capacity"] = 1.0                                  # nothing fits one byte
    kernels.memory_batch(**memory)
    assert memory["reason"][0] == REASON_CODES["no_fit"] and memory["out_fits"][0] == 0
    memory["reason"][0] = 0
    cands = np.array(memory["cands"])
    cands[1, 0] = 0.0                                         # a micro-batch of 0 sequences: undefined
    kernels.memory_batch(**{**memory, "cands": cands})
    assert memory["reason"][0] == REASON_CODES["undefined"] and math.isnan(memory["out_peak"][0])


def test_middle_stages_hold_the_static_bytes_of_their_layers():
    """The kernels' static bytes == memory.static_layer_bytes (its own restatement of ZeRO
    sharding) summed over a stage's layers, on stages that hold neither end."""
    from ndcost.tables.layout import build_layout
    from ndcost.tables.memory import static_layer_bytes

    for name in ("llama3-70b", "mixtral-8x7b", "deepseek-v3", "qwen3-next-80b-a3b"):
        model = Model.from_catalog(name)
        rows = [row for row in random_rows(model, 120, seed=41) if row["pp"] >= 4]
        cands = Candidates.from_arrays(**columns_of(rows))
        result = estimate_many(model, cands, "h100-sxm", units="nd", stage_memory=True)
        checked = 0
        for i in np.flatnonzero(result.valid):
            spec = cands[int(i)]
            if spec.schedule == "dualpipe":
                continue            # a device holds two stages (tests/test_ep_overlap_schedules.py)
            layout = build_layout(model, spec, nd=True)     # ND units: ND's placement
            per_kind = [static_layer_bytes(model, spec, k) for k in range(len(model.kinds))]
            for stage in range(spec.pp):
                if stage in (layout.emb_stage, layout.out_stage):
                    continue
                layers = layout.counts[stage].sum(axis=(0, 2))          # per kind
                expected = sum(layers[k] * per_kind[k] for k in range(len(per_kind)))
                np.testing.assert_allclose(result.stage_memory[i, stage, :3], expected, rtol=1e-12)
                checked += 1
        assert checked > 20, name
