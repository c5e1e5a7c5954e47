"""Seconds mode over a batch: the vectorised candidate matrix == seconds_candidate_vector row by
row, seconds_batch == seconds_estimate() per row on every catalog model, compiled == oracle on
>= 3000 seeded candidates, infeasible rows NaN (never exceptions), and the kernels' own contract."""
from __future__ import annotations

import math

import numpy as np
import pytest

from batch_cases import columns_of, legal_tp, planted_rows, random_rows
from ndcost import Cluster, ExecSpec, Model, SpecError, _backend, models
from ndcost.kernels.columns import (
    KERNEL_REASON, LAYOUT, PART_NAMES, RATE_FIELDS, SECONDS_CAND_FIELDS, SECONDS_EXTRA_FIELDS, SECONDS_STAGE_FIELDS,
)
from ndcost.tables.formulas import ARRAY, derived_columns
from ndcost.price.candidates import Candidates
from ndcost.tables.derive import derive, model_constants
from ndcost.price.estimate_many import estimate_many
from ndcost.tables.nd_tables import nd_kind_table, nd_model_vector
from ndcost.tables.reasons import FIRST_INVALID, REASON_CODES, REASON_TABLE
from ndcost.spec.rates import SOFTWARE_PRESETS, Rates
from ndcost.tables.seconds import (
    Overlap, rates_vector, seconds_arrays, seconds_candidate_vector, seconds_estimate, seconds_kind_table,
    seconds_model_vector,
)
from ndcost.price.seconds_batch import (
    STEP_RATE_FIELDS, seconds_batch, seconds_candidate_columns, seconds_candidate_matrix, seconds_layouts,
)
from ndcost.tables.joint_rules import validate
from strategies import REALISTIC

RTOL = 1e-12
PARITY_MODELS = ("llama3-70b", "deepseek-v3", "qwen3-next-80b-a3b", "mixtral-8x7b", "gpt3-175b", "qwen2.5-vl-7b")
OUTPUTS = ("step_time", "mfu", "hfu", "tokens_per_second")
_N_SUMS = len(SECONDS_STAGE_FIELDS)


def close(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= RTOL * max(abs(a), abs(b))


def _storage(cands: Candidates) -> dict:
    return {name: cands.storage(name) for name in cands.fields}


def _seconds_fields(rng: np.random.Generator, row: dict, fp8: bool = True) -> dict:
    """The fields only seconds mode reads, drawn at random on top of a strategy."""
    precision = str(rng.choice(("bf16", "fp16", "fp8") if fp8 else ("bf16", "fp16")))
    return dict(row, precision=precision, moe_dispatch_fp8=bool(row.get("moe_dispatch_fp8")) and precision == "fp8",
                fp8_activation_storage=bool(row.get("fp8_activation_storage")) and precision == "fp8",
                fp8_transpose_cache=row.get("fp8_transpose_cache", True) or precision != "fp8",
                tp_overlap=bool(rng.random() < 0.4), overlapped_grad_reduce=bool(rng.random() < 0.5),
                optimizer_states=int(rng.choice((1, 2))), optimizer_state_bytes=int(rng.choice((2, 4))),
                param_bytes=int(rng.choice((2, 4))), grad_bytes=int(rng.choice((2, 4))),
                compute_bytes=int(rng.choice((2, 2, 4))))


def variations(name: str, count: int, seed: int) -> list[ExecSpec]:
    """The realistic strategy of *name* and *count* valid ExecSpecs around it (some may break joint rules)."""
    model = Model.from_catalog(name)
    _, fields = REALISTIC[name]
    rng = np.random.default_rng(seed)
    layers = model.num_layers_with_mtp
    specs = [ExecSpec(**fields)]
    tries = 0
    while len(specs) < count + 1 and tries < 20 * count:
        tries += 1
        row = _seconds_fields(rng, dict(fields))
        row["zero_stage"] = int(rng.choice((0, 1, 2, 3)))
        row["deferred_grad_accumulation"] = bool(rng.random() < 0.2)
        row["recompute"] = str(rng.choice(("none", "full", "selective")))
        row["tp"] = int(rng.choice(legal_tp(model)))
        row["sequence_parallel"] = bool(row["tp"] > 1 and rng.random() < 0.7)
        pp = row.get("pp", 1)
        schedule = str(rng.choice(("1f1b", "interleaved", "zero_bubble_v", "gpipe", "seq1f1b"))) if pp > 1 else "1f1b"
        row["pp_schedule"] = schedule
        row["vpp"] = 2 if schedule in ("interleaved", "zero_bubble_v") and 2 * pp <= layers else 1
        if row["vpp"] == 1 and schedule in ("interleaved", "zero_bubble_v"):
            row["pp_schedule"] = "1f1b"
        row["seq_split"] = 2 if schedule == "seq1f1b" else 1
        if model.num_nextn_predict_layers:
            row["mtp_in_offset"] = bool(rng.random() < 0.5)
        row["emb_out_in_offset"] = bool(rng.random() < 0.3)
        row["tie_embeddings"] = None if rng.random() < 0.6 else bool(rng.random() < 0.5)
        if rng.random() < 0.25:
            row["cp"], row["cp_algo"] = 2, "ring"
        if model.is_moe and rng.random() < 0.3:
            row["grouped_gemm"], row["capacity_factor"] = False, 1.25
        try:
            specs.append(ExecSpec(**row))
        except SpecError:
            continue
    return specs


def _compare_row(batch: dict, i: int, single: dict) -> None:
    for name in OUTPUTS:
        assert close(float(batch[name][i]), single[name]), (i, name, batch[name][i], single[name])
    step = single["step_time"]
    for j, part in enumerate(PART_NAMES):
        got, want = float(batch["parts"][j][i]), single["parts"][part]
        assert close(got, want) or abs(got - want) <= RTOL * abs(step), (i, part, got, want)
    times = batch["stage_times"][i]
    pp = len(single["stage_times"])
    assert all(close(float(a), b) for a, b in zip(times[:pp], single["stage_times"])), i
    assert np.isnan(times[pp:]).all()


# --------------------------------------------------------------------------- the candidate matrix


def test_candidate_matrix_equals_seconds_candidate_vector_row_by_row():
    """>= 1000 random valid specs over six models (a VLM among them), default and stated overlap
    shares: every field equal."""
    compared = 0
    for m, name in enumerate(PARITY_MODELS):
        model = Model.from_catalog(name)
        rng = np.random.default_rng(100 + m)
        rows = [_seconds_fields(rng, row) for row in random_rows(model, 230, seed=10 + m)] + planted_rows(model)
        cands = Candidates.from_arrays(**columns_of(rows))
        c = _storage(cands)
        with np.errstate(all="ignore"):
            d = derived_columns(ARRAY, c, model_constants(model))
            assert set(seconds_candidate_columns(c, d)) == set(SECONDS_CAND_FIELDS)
            for overlap in (None, Overlap(dp_reduce=0.5, dp_gather=0.25, tp=1.0, cp=0.0, ep=0.75)):
                matrix = seconds_candidate_matrix(c, d, len(cands), overlap)
                for i in range(len(cands)):
                    if cands.reason[i]:
                        continue
                    spec = cands[i]
                    try:
                        derived = derive(model, spec)
                    except SpecError:         # no expert data-parallel rank: estimate_many's "expert_dp"
                        continue
                    expected = seconds_candidate_vector(model, spec, derived, overlap)
                    assert np.array_equal(matrix[:, i], expected), (name, i, [
                        f for f, a, b in zip(SECONDS_CAND_FIELDS, matrix[:, i], expected) if a != b])
                    compared += 1
    assert compared >= 2 * 1000


# --------------------------------------------------------------------------- == seconds_estimate(), row by row


@pytest.mark.parametrize("name", models())
def test_equals_seconds_estimate_per_row(name):
    """The realistic strategy, variations of it and random valid strategies: every output of every row
    equals seconds_estimate() of the row on its own cluster; a row validate() refuses is NaN."""
    model = Model.from_catalog(name)
    device, _ = REALISTIC[name]
    rng = np.random.default_rng(7)
    has_fp8 = Cluster(device, num_devices=1).device.peak_flops.get("fp8") is not None
    specs = variations(name, 30, seed=5) + [
        ExecSpec(**_seconds_fields(rng, row, fp8=has_fp8)) for row in random_rows(model, 16, seed=6) + planted_rows(model)]
    cands = Candidates.from_specs(specs)
    batch = seconds_batch(model, cands, device, stage_times=True)
    priced = 0
    for i, spec in enumerate(specs):
        own = Cluster(device, num_devices=spec.num_devices)
        try:
            validate(model, spec, own)
            derived = derive(model, spec)
        except SpecError:
            assert batch["reason"][i] >= FIRST_INVALID, (i, REASON_TABLE[batch["reason"][i]])
            assert math.isnan(batch["step_time"][i]) and np.isnan(batch["parts"][:, i]).all()
            assert all(math.isnan(batch[k][i]) for k in STEP_RATE_FIELDS)
            continue
        assert batch["reason"][i] == 0, (i, REASON_TABLE[batch["reason"][i]])
        _compare_row(batch, i, seconds_estimate(model, spec, own, derived=derived))
        priced += 1
    assert priced >= len(specs) // 2


def test_python_backend_equals_seconds_estimate():
    """The same through the oracle kernels, on a model with MTP, MLA and MoE."""
    name = "deepseek-v3"
    model = Model.from_catalog(name)
    device, _ = REALISTIC[name]
    specs = variations(name, 12, seed=9)
    cands = Candidates.from_specs(specs)
    with _backend.use("python"):
        batch = seconds_batch(model, cands, Cluster(device, num_devices=1), stage_times=True)
    for i, spec in enumerate(specs):
        if batch["reason"][i] >= FIRST_INVALID:
            continue
        _compare_row(batch, i, seconds_estimate(model, spec, Cluster(device, num_devices=spec.num_devices)))


def test_rates_and_overlap_reach_every_row():
    """Stated Rates (each training-software preset) and Overlap shares: still seconds_estimate() row by row."""
    name = "qwen3-30b-a3b"
    model = Model.from_catalog(name)
    rng = np.random.default_rng(11)
    specs = [ExecSpec(**_seconds_fields(rng, row, fp8=True)) for row in random_rows(model, 40, seed=12)]
    cands = Candidates.from_specs(specs)
    overlap = Overlap(dp_reduce=0.3, dp_gather=0.6, fsdp_prefetch=0.2, tp=0.5, cp=0.4, ep=1.0)
    for software in SOFTWARE_PRESETS:
        rates = Rates.for_software("h100-sxm", software)
        batch = seconds_batch(model, cands, "h100-sxm", rates=rates, overlap=overlap, stage_times=True)
        for i, spec in enumerate(specs):
            if batch["reason"][i] >= FIRST_INVALID:
                continue
            own = Cluster("h100-sxm", num_devices=spec.num_devices)
            _compare_row(batch, i, seconds_estimate(model, spec, own, rates=rates, overlap=overlap))


# --------------------------------------------------------------------------- compiled == oracle


@pytest.mark.cython
def test_compiled_equals_oracle_on_3000_candidates():
    """>= 3000 seeded candidates over six models, a VLM among them: every output and reason,
    compiled == oracle (1e-12)."""
    total = 0
    for m, name in enumerate(PARITY_MODELS):
        model = Model.from_catalog(name)
        rng = np.random.default_rng(200 + m)
        rows = [_seconds_fields(rng, row) for row in random_rows(model, 620, seed=20 + m)] + planted_rows(model)
        cands = Candidates.from_arrays(**columns_of(rows))
        out = {}
        for backend in ("cython", "python"):
            with _backend.use(backend):
                out[backend] = seconds_batch(model, cands, "h100-sxm", stage_times=True)
        c, p = out["cython"], out["python"]
        assert np.array_equal(c["reason"], p["reason"])
        for key in ("step_time", "parts", "stage_times") + STEP_RATE_FIELDS:
            np.testing.assert_allclose(c[key], p[key], rtol=RTOL, atol=0.0, equal_nan=True, err_msg=f"{name} {key}")
        priced = c["reason"] < FIRST_INVALID
        assert np.isfinite(c["step_time"][priced]).all() and (c["step_time"][priced] > 0).all()
        total += int(priced.sum())
    assert total >= 3000


def test_threads_price_the_same():
    """The kernel runs without the GIL: four threads at once give one thread's answer."""
    import threading

    model = Model.from_catalog("llama3-70b")
    cands = Candidates.from_arrays(**columns_of(random_rows(model, 3000, seed=8)))
    alone = seconds_batch(model, cands, "h100-sxm")
    results = [None] * 4

    def price(k):
        results[k] = seconds_batch(model, cands, "h100-sxm")

    threads = [threading.Thread(target=price, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        assert np.array_equal(result["step_time"], alone["step_time"], equal_nan=True)
        assert np.array_equal(result["reason"], alone["reason"])


# --------------------------------------------------------------------------- infeasible rows


def test_infeasible_rows_are_nan_with_estimate_manys_reasons():
    """Rows ExecSpec, validate or the layout refuse: NaN and the reason estimate_many gives, no exception."""
    model = Model.from_catalog("llama3-70b")
    base = dict(dp=2, tp=8, pp=4, global_batch_size=64, seq_length=4096, sequence_parallel=True)
    rows = [
        base,                                          # ok
        dict(base, dp=0),                              # ExecSpec: bad degree
        dict(base, tp=3, sequence_parallel=False),     # tp does not divide the heads
        dict(base, ep=2),                              # ep on a dense model
        dict(base, pp=128),                            # more stages than layers
        dict(base, pp_partition=(10, 10, 10, 10)),     # partition does not place 80 layers
        dict(base, precision="fp8"),                   # no fp8 on an A100
        dict(base, global_batch_size=4),               # fewer micro-batches than stages
    ]
    cands = Candidates.from_arrays(**columns_of(rows))
    batch = seconds_batch(model, cands, "a100-80g")
    nd = estimate_many(model, cands, "a100-80g", units="nd", with_memory=False)
    assert batch["reason"][0] == 0 and batch["step_time"][0] > 0
    assert (batch["reason"][1:] >= FIRST_INVALID).all()
    assert np.array_equal(batch["reason"][1:], nd.reason[1:])
    assert np.isnan(batch["step_time"][1:]).all() and np.isnan(batch["parts"][:, 1:]).all()
    assert all(np.isnan(batch[k][1:]).all() for k in STEP_RATE_FIELDS)


def test_rows_given_by_the_caller_are_updated_in_place():
    """Caller's reasons are kept (a skipped row is NaN), a row whose layout cannot be built gets "layout"."""
    model = Model.from_catalog("llama3-8b")
    base = dict(dp=2, tp=2, pp=2, global_batch_size=16, seq_length=4096)
    cands = Candidates.from_arrays(**columns_of([base, base, dict(base, pp_partition=(1, 2))]))
    rows = np.array([0, REASON_CODES["devices"], 0], dtype=np.int64)
    result = seconds_batch(model, cands, "h100-sxm", rows)
    assert result["reason"] is rows
    assert rows.tolist() == [0, REASON_CODES["devices"], REASON_CODES["layout"]]
    assert result["step_time"][0] > 0 and np.isnan(result["step_time"][1:]).all()


def test_chunks_of_columns_and_out_arrays_equal_one_call():
    """estimate_many's way: storage columns of a chunk (constants as scalars), its layout indices,
    the pool of the whole Candidates, results written into the caller's arrays."""
    model = Model.from_catalog("qwen3-30b-a3b")
    cands = Candidates.from_arrays(**columns_of(random_rows(model, 300, seed=4) + planted_rows(model)))
    whole = seconds_batch(model, cands, "h100-sxm", stage_times=True)
    n = len(cands)
    pool = seconds_layouts(model, cands)
    out = {"step_time": np.empty(n), "parts": np.empty((len(PART_NAMES), n)), "mfu": np.empty(n),
           "tokens_per_second": np.empty(n), "stage_times": np.empty((n, pool.pool.max_pp))}
    storage = _storage(cands)
    for start in range(0, n, 97):
        stop = min(n, start + 97)
        c = {name: column[0] if column.strides[0] == 0 else column[start:stop] for name, column in storage.items()}
        rows = np.array(whole["reason"][start:stop])
        chunk_out = {name: array[start:stop] if name != "parts" else array[:, start:stop] for name, array in out.items()}
        seconds_batch(model, c, "h100-sxm", rows, cands.layout_index[start:stop], pool, out=chunk_out)
        assert np.array_equal(rows, whole["reason"][start:stop])
    for name, array in out.items():
        assert np.array_equal(array, whole[name], equal_nan=True), name
    with pytest.raises(SpecError):
        seconds_batch(model, storage, "h100-sxm")          # columns need rows, layout_index, layout_pool


# --------------------------------------------------------------------------- the kernels' contract


def _kernel_args(name: str = "llama3-8b"):
    model = Model.from_catalog(name)
    base = dict(dp=2, tp=2, pp=2, global_batch_size=16, seq_length=4096)
    cands = Candidates.from_arrays(**columns_of([base, dict(base, precision="fp16"), dict(base, pp=4)]))
    c = _storage(cands)
    d = derived_columns(ARRAY, c, model_constants(model))
    pool = seconds_layouts(model, cands)
    cluster = Cluster("h100-sxm", num_devices=1)
    rates = np.stack([rates_vector(cluster, Rates.for_device(cluster.device), p) for p in ("bf16", "fp16")])
    n = len(cands)
    return dict(
        kinds=nd_kind_table(model), skinds=seconds_kind_table(model), model=nd_model_vector(model),
        smodel=seconds_model_vector(model), cands=seconds_candidate_matrix(c, d, n), rates=rates,
        rate_index=np.array([0, 1, 0], dtype=np.int64), layout_index=pool.row[cands.layout_index],
        layouts=pool.pool.layouts, pool=pool.pool.pool, slot_pool=pool.pool.slot_pool, extras=pool.extras,
        extras_at=pool.extras_at, reason=np.zeros(n, dtype=np.int64), out_step=np.empty(n),
        out_parts=np.empty((len(PART_NAMES), n)), out_rates=np.empty((len(STEP_RATE_FIELDS), n)),
        out_stage_times=np.empty((n, pool.pool.max_pp)), out_stage_sums=np.empty((n, pool.pool.max_pp, _N_SUMS)))


def test_kernels_check_shapes_before_pricing(kernels):
    bad = {
        "cands": lambda a: np.ascontiguousarray(a["cands"][:-1]),
        "skinds": lambda a: np.zeros((a["skinds"].shape[0] + 1, a["skinds"].shape[1])),
        "smodel": lambda a: a["smodel"][:-1].copy(),
        "rates": lambda a: np.ascontiguousarray(a["rates"][:, :-1]),
        "rate_index": lambda a: np.array([0, 2, 0], dtype=np.int64),            # past the rates rows
        "layout_index": lambda a: np.array([0, 0, 9], dtype=np.int64),
        "extras_at": lambda a: np.array([0, 10**6], dtype=np.int64),
        "out_parts": lambda a: np.empty((len(PART_NAMES) - 1, 3)),
        "out_rates": lambda a: np.empty((3, 3)),
        "out_stage_times": lambda a: np.empty((3, 1)),
        "out_stage_sums": lambda a: np.empty((3, a["out_stage_sums"].shape[1], _N_SUMS - 1)),
        "out_step": lambda a: np.empty(2),
    }
    for name, make in bad.items():
        args = _kernel_args()
        args[name] = make(args)
        with pytest.raises(ValueError):
            kernels.seconds_estimate_batch(**args)
    args = _kernel_args()
    kernels.seconds_estimate_batch(**args)
    assert (args["reason"] == 0).all() and (args["out_step"] > 0).all()


def test_kernels_skip_invalid_rows_and_flag_undefined(kernels):
    args = _kernel_args()
    args["reason"][1] = FIRST_INVALID + 3
    args["layout_index"][1] = -7                       # never read for a skipped row
    args["rate_index"][1] = 99
    rates = args["rates"].copy()
    rates[1] = np.nan
    args["rates"] = np.vstack([rates, np.zeros((1, len(RATE_FIELDS)))])
    args["rate_index"][2] = 2                         # a zero rates row: not priceable
    kernels.seconds_estimate_batch(**args)
    assert args["reason"].tolist() == [0, FIRST_INVALID + 3, KERNEL_REASON["undefined"]]
    assert args["out_step"][0] > 0 and np.isnan(args["out_step"][1:]).all()
    assert np.isnan(args["out_parts"][:, 1:]).all() and np.isnan(args["out_rates"][:, 1:]).all()
    assert np.isnan(args["out_stage_times"][1:]).all()
    assert np.isnan(args["out_stage_times"][0, args["layouts"][args["layout_index"][0], LAYOUT["pp"]]:]).all()
    # each stage's raw sums: a priced row's up to its pp, NaN past it and on the rows not priced
    pp = args["layouts"][args["layout_index"][0], LAYOUT["pp"]]
    assert np.isfinite(args["out_stage_sums"][0, :pp]).all() and np.isnan(args["out_stage_sums"][0, pp:]).all()
    assert np.isnan(args["out_stage_sums"][1:]).all()


def test_batch_stage_sums_are_seconds_stage_sums(kernels):
    """out_stage_sums holds, row for row, what seconds_stage_sums gives the candidate alone."""
    args = _kernel_args()
    kernels.seconds_estimate_batch(**args)
    for i in range(args["reason"].shape[0]):
        row = args["layouts"][args["layout_index"][i]]
        p, n_slots, k = row[LAYOUT["pp"]], row[LAYOUT["n_slots"]], args["kinds"].shape[0]
        counts = args["pool"][row[LAYOUT["counts_at"]]: row[LAYOUT["counts_at"]] + p * k * n_slots].reshape(p, -1)
        slots = args["slot_pool"][row[LAYOUT["slots_at"]]: row[LAYOUT["slots_at"]] + 2 * n_slots]
        at = args["extras_at"][args["layout_index"][i]]
        extras = args["extras"][at: at + p * len(SECONDS_EXTRA_FIELDS)]
        alone = np.empty((p, _N_SUMS))
        kernels.seconds_stage_sums(args["kinds"], args["skinds"], args["model"], args["smodel"],
                                   np.ascontiguousarray(args["cands"][:, i]), args["rates"][args["rate_index"][i]],
                                   np.ascontiguousarray(counts), slots[:n_slots].copy(), slots[n_slots:].copy(),
                                   extras.reshape(p, -1).copy(), alone)
        np.testing.assert_allclose(args["out_stage_sums"][i, :p], alone, rtol=RTOL, atol=0)


def test_step_rates_kernel(kernels):
    """seconds_estimate's MFU/HFU/tokens per second come from seconds_step_rates; NaN without a positive step."""
    model = Model.from_catalog("llama3-8b")
    spec = ExecSpec(dp=2, tp=2, pp=2, global_batch_size=16, seq_length=4096)
    cluster = Cluster("h100-sxm", num_devices=spec.num_devices)
    single = seconds_estimate(model, spec, cluster)
    a = seconds_arrays(model, spec, cluster)
    out = np.empty(len(STEP_RATE_FIELDS))
    kernels.seconds_step_rates(single["stage_sums"], a["cand"], a["rate"], single["step_time"], out)
    assert [close(float(x), single[k]) for x, k in zip(out, STEP_RATE_FIELDS)] == [True] * 4
    tokens = spec.resolved_global_batch_size * spec.seq_length
    assert close(float(out[2]), tokens / single["step_time"])
    for step in (0.0, -1.0, math.nan):
        kernels.seconds_step_rates(single["stage_sums"], a["cand"], a["rate"], step, out)
        assert np.isnan(out[:3]).all() and close(float(out[3]), single["model_flops"])
    with pytest.raises(ValueError):
        kernels.seconds_step_rates(single["stage_sums"], a["cand"], a["rate"], 1.0, np.empty(3))
