"""Whatever a search loop, a config file or a person feeds ndcost, the answer is a result or a
SpecError (issue 13): never another exception, never a hang, never a changed input, and both
backends agree on every accepted spec.

A seeded property suite (hypothesis, derandomized, no example database) drives ExecSpec,
Cluster, Model.from_hf_config, Candidates.from_arrays, estimate and estimate_many with valid
values and with zero, negative, float, bool, None, strings, NaN, inf and huge ints:

* every call returns or raises SpecError, within CALL_LIMIT_S (a hang guard, not a benchmark);
* the arguments are unchanged afterwards (compared pickled, before and after);
* on every accepted spec the compiled backend equals the oracle to RTOL, in estimate() and in
  estimate_many();
* a batch with one bad row gives it a reason and prices the other rows bitwise as the batch
  without it.

Then the exact cases issue 13 reported, as regressions, each refused fast.
"""
from __future__ import annotations

import math
import pickle
import time

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ndcost import Candidates, Cluster, ExecSpec, Model, SpecError, _backend, estimate, estimate_many  # noqa: E402
from ndcost.kernels.columns import PART_NAMES  # noqa: E402
from ndcost.price.candidate_columns import FIELDS  # noqa: E402
from ndcost.limits import MAX_BATCH, MAX_DEVICES, MAX_LAYERS, MAX_SEQ_LENGTH  # noqa: E402
from ndcost.spec.model_catalog import catalog_entry  # noqa: E402
from ndcost.tables.reasons import FIRST_INVALID, REASON_CODES, REASON_TABLE  # noqa: E402
from test_estimate_many_hypothesis import strategies as valid_batches  # noqa: E402

#: No call may take longer: a hang guard with a wide margin (every call here takes milliseconds).
CALL_LIMIT_S = 1.0
RTOL = 1e-12
FUZZ = settings(max_examples=200, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

#: Values of every kind a fuzzer or a typo produces: sizes at and past the bounds, floats that are
#: and are not integral, bools, None, strings, NaN, infinities, containers.
WILD = (0, -1, 1, 2, 3, 4, 8, 64, 1.5, 2.0, 1e9, 1e20, True, False, None, "x", "8", "", math.nan, math.inf,
        -math.inf, 2**24, 2**24 + 1, 2**31, 2**32, 2**40, 2**53 + 1, 2**63, 10**12, 10**30, -(2**63), [], {},
        [1, 2], (1, -1), {"a": 1}, 10**400, -(10**400))
wild = st.one_of(st.sampled_from(WILD), st.integers(-(2**70), 2**70), st.integers(-4, 70), st.floats())

MODEL_NAMES = ("llama3-8b", "qwen3-30b-a3b", "deepseek-v3", "qwen3-next-80b-a3b", "qwen2.5-vl-7b", "gpt3-175b",
               "mixtral-8x7b")


@pytest.fixture(scope="session")
def backends(request):
    """The backends to run: both, or the oracle alone under --no-cython (the pure leg)."""
    return ("cython", "python") if request.config.getoption("--cython") else ("python",)


def timed(call):
    """call()'s result, or the SpecError it raised; any other exception fails the test, and so
    does a call over CALL_LIMIT_S."""
    start = time.perf_counter()
    try:
        result = call()
    except SpecError as error:
        result = error
    elapsed = time.perf_counter() - start
    assert elapsed < CALL_LIMIT_S, f"{elapsed:.2f} s"
    return result


def frozen(value) -> bytes:
    """A snapshot of *value* to tell whether a call changed it."""
    return pickle.dumps(value)


def same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:      # not defined (ND's units' MFU, HFU, tokens/s)
        return a is b
    return (math.isnan(a) and math.isnan(b)) or a == b or abs(a - b) <= RTOL * max(abs(a), abs(b))


def assert_estimates_agree(a, b) -> None:
    """Two Estimate objects (compiled, oracle) agree on every number to RTOL."""
    assert a.fits == b.fits and a.units == b.units
    pairs = [(a.step_time, b.step_time), (a.mfu, b.mfu), (a.hfu, b.hfu), (a.tokens_per_second, b.tokens_per_second)]
    pairs += [(a.parts[name], b.parts[name]) for name in PART_NAMES]
    pairs += list(zip(a.stage_times, b.stage_times, strict=True))
    if a.memory is not None:
        pairs.append((a.memory.peak, b.memory.peak))
    for x, y in pairs:
        assert same(x, y), (x, y)


def assert_batches_agree(a, b) -> None:
    """Two BatchEstimates (compiled, oracle) agree: reasons and fits exactly, every number to RTOL."""
    np.testing.assert_array_equal(a.reason, b.reason)
    np.testing.assert_array_equal(a.fits, b.fits)
    for x, y in [(a.step_time, b.step_time), (a.peak_memory, b.peak_memory), (a.mfu, b.mfu),
                 (a.tokens_per_second, b.tokens_per_second)] + [(a.parts[p], b.parts[p]) for p in PART_NAMES]:
        np.testing.assert_allclose(x, y, rtol=RTOL, atol=0, equal_nan=True)


def price_everywhere(model, spec: ExecSpec, cluster, backends, note=event) -> None:
    """estimate() (seconds and ND units) and estimate_many() of an accepted spec on each backend:
    a result or a SpecError, in time; the backends agree where both price it. *note* records
    what happened (hypothesis' event; None outside a hypothesis test)."""
    for units in ("seconds", "nd"):
        singles, batches = {}, {}
        for backend in backends:
            with _backend.use(backend):
                singles[backend] = timed(lambda: estimate(model, spec, cluster, units=units))
                batches[backend] = timed(lambda: estimate_many(model, [spec], cluster, units=units))
        results = list(singles.values())
        if note is not None:
            note(f"{units}: {'refused by validate' if isinstance(results[0], SpecError) else 'priced'}")
        if isinstance(results[0], SpecError):
            # What estimate() refuses, the batch does not price (a rule's reason, or "undefined" for
            # a precision the device states no peak for).
            assert all(isinstance(result, SpecError) for result in results)
            assert all(batch.reason[0] != 0 and np.isnan(batch.step_time[0]) for batch in batches.values())
            continue
        for backend, single in singles.items():
            # The batch row is the single estimate (issue 13 saw them differ on peak memory).
            batch = batches[backend]
            assert batch.reason[0] < FIRST_INVALID and bool(batch.fits[0]) is single.fits
            assert same(float(batch.step_time[0]), single.step_time)
            assert same(float(batch.peak_memory[0]), single.memory.peak)
        # What a priced spec must satisfy (issue 13 #3): no negative part, in either unit (ND's
        # bubble is never negative, nd_combine), parts summing to the step; in seconds MFU <= HFU <= 1.
        for result in results:
            assert all(part >= 0 for part in result.parts.values()), dict(result.parts)
            assert sum(result.parts.values()) == pytest.approx(result.step_time, rel=1e-12)
            if units == "seconds":
                assert result.mfu <= result.hfu <= 1, (result.mfu, result.hfu)
        if len(backends) == 2:
            assert_estimates_agree(*results)
            assert_batches_agree(*batches.values())


# --------------------------------------------------------------------------- ExecSpec


#: A valid spec (llama3-8b on 16 devices), the base of the regression cases.
SPEC_BASE = dict(dp=4, tp=2, pp=2, micro_batch_size=1, global_batch_size=32, seq_length=4096,
                 sequence_parallel=True, recompute="selective")


@FUZZ
@given(valid_batches(), st.dictionaries(st.sampled_from(FIELDS), wild, max_size=2))
def test_exec_spec_and_estimate_take_anything(backends, case, changes):
    """A valid strategy of test_estimate_many_hypothesis with up to two fields replaced."""
    model, rows = case
    fields = {**rows[0], **changes}
    before = frozen(fields)
    spec = timed(lambda: ExecSpec(**fields))
    assert frozen(fields) == before
    event(f"ExecSpec: {'refused' if isinstance(spec, SpecError) else 'accepted'}")
    if isinstance(spec, SpecError):
        return
    cluster = timed(lambda: Cluster("h100-sxm", num_devices=spec.num_devices))
    if isinstance(cluster, SpecError):
        cluster = Cluster("h100-sxm", num_devices=spec.num_devices, devices_per_node=spec.num_devices)
    price_everywhere(model, spec, cluster, backends)


# --------------------------------------------------------------------------- Cluster


CLUSTER_KEYS = ("hbm_bytes", "hbm_bandwidth", "devices_per_node", "intra_node_bandwidth", "inter_node_bandwidth",
                "intra_node_latency", "inter_node_latency", "memory_reserve_bytes", "nd_devices_per_node",
                "nd_name", "peak_flops", "name", "bogus")


#: A device figure: anything, or a positive float of any magnitude (every one of them valid).
figure = st.one_of(wild, st.floats(min_value=5e-324, max_value=1e300),
                   st.dictionaries(st.sampled_from(("bf16", "fp8", "")), st.one_of(wild, st.floats(1e-300, 1e300)),
                                   max_size=2))


@FUZZ
@given(st.sampled_from(("h100-sxm", "a100-80g", "ascend-910c", "h100", "b200", "h800", "nope", None, 8)),
       st.one_of(st.sampled_from((1, 8, 16, 64, 1024, MAX_DEVICES)), st.sampled_from((1, 8, 2048)), wild),
       st.one_of(st.just({}), st.dictionaries(st.sampled_from(CLUSTER_KEYS), figure, max_size=2)))
def test_cluster_takes_anything(backends, device, num_devices, overrides):
    before = frozen(overrides)
    cluster = timed(lambda: Cluster(device, num_devices, **overrides))
    assert frozen(overrides) == before
    event(f"Cluster: {'refused' if isinstance(cluster, SpecError) else 'accepted'}")
    if isinstance(cluster, SpecError):
        return
    n = cluster.num_devices
    spec = ExecSpec(dp=n, global_batch_size=n, seq_length=2048)
    price_everywhere(Model.from_catalog("llama3-8b"), spec, cluster, backends)


# --------------------------------------------------------------------------- Model.from_hf_config


CONFIG_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
               "intermediate_size", "vocab_size", "num_experts", "n_routed_experts", "num_experts_per_tok",
               "moe_intermediate_size", "shared_expert_intermediate_size", "n_shared_experts", "first_k_dense_replace",
               "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
               "num_nextn_predict_layers", "layer_types", "full_attention_interval", "mlp_only_layers",
               "decoder_sparse_step", "moe_layer_freq", "linear_num_key_heads", "linear_key_head_dim",
               "linear_num_value_heads", "linear_value_head_dim", "linear_conv_kernel_dim", "tie_word_embeddings",
               "attention_bias", "mlp_bias", "model_type", "n_embd", "n_layer", "n_head", "n_positions",
               "vision_config", "text_config")
VISION_KEYS = ("depth", "hidden_size", "embed_dim", "num_heads", "intermediate_size", "out_hidden_size", "mlp_ratio",
               "patch_size", "temporal_patch_size", "spatial_merge_size", "in_channels", "window_size",
               "fullatt_block_indexes")


def _base_configs() -> dict[str, dict]:
    """The catalog's config.json of each fuzzed family, and a Qwen2-VL one (the catalog has a
    Qwen2.5-VL; Qwen2-VL states its tower as embed_dim and mlp_ratio)."""
    configs = {name: catalog_entry(name)["config"] for name in MODEL_NAMES}
    qwen2_vl = {**configs["qwen2.5-vl-7b"], "model_type": "qwen2_vl"}
    qwen2_vl["vision_config"] = {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "hidden_size": 3584,
                                 "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}
    return {**configs, "qwen2-vl": qwen2_vl}


BASE_CONFIGS = _base_configs()


def price_if_accepted(model, backends):
    """A model the constructor accepted prices everywhere on one device; a refusal is a SpecError."""
    event(f"Model: {'refused' if isinstance(model, SpecError) else 'accepted'}")
    if isinstance(model, SpecError):
        return
    spec = ExecSpec(dp=1, global_batch_size=1, seq_length=1024)
    price_everywhere(model, spec, Cluster("h100-sxm", num_devices=1), backends)


@FUZZ
@given(st.sampled_from(sorted(BASE_CONFIGS)), st.dictionaries(st.sampled_from(CONFIG_KEYS), wild, max_size=3),
       st.dictionaries(st.sampled_from(VISION_KEYS), wild, max_size=2))
def test_hf_config_takes_anything(backends, base, changes, vision_changes):
    config = {**BASE_CONFIGS[base], **changes}
    if vision_changes and isinstance(config.get("vision_config"), dict):
        config["vision_config"] = {**config["vision_config"], **vision_changes}
    before = frozen(config)
    model = timed(lambda: Model.from_hf_config(config))
    assert frozen(config) == before
    price_if_accepted(model, backends)


MODEL_FIELDS = tuple(name for name in Model.__dataclass_fields__ if name not in ("name", "census"))


@FUZZ
@given(st.sampled_from(MODEL_NAMES), st.dictionaries(st.sampled_from(MODEL_FIELDS), wild, max_size=3))
def test_model_from_dict_takes_anything(backends, model_name, changes):
    data = {**Model.from_catalog(model_name).to_dict(), **changes}
    before = frozen(data)
    model = timed(lambda: Model.from_dict(data))
    assert frozen(data) == before
    price_if_accepted(model, backends)


# --------------------------------------------------------------------------- Candidates + estimate_many


def object_columns(rows: list[dict]) -> dict[str, np.ndarray]:
    """Rows as object columns, each value stored as given (a list stays one value)."""
    columns = {}
    for name in sorted({name for row in rows for name in row}):
        array = np.empty(len(rows), dtype=object)
        for i, row in enumerate(rows):
            array[i] = row.get(name, ExecSpec.__dataclass_fields__[name].default)
        columns[name] = array
    return columns


@FUZZ
@given(valid_batches(), st.dictionaries(st.sampled_from(FIELDS), wild, min_size=1, max_size=3), st.data())
def test_one_bad_row_never_sinks_a_batch(backends, case, changes, data):
    model, rows = case
    bad_row = {**rows[0], **changes}
    at = data.draw(st.integers(0, len(rows)))
    with_bad = rows[:at] + [bad_row] + rows[at:]
    others = np.arange(len(with_bad)) != at
    columns, clean_columns = object_columns(with_bad), object_columns(rows)
    before = frozen(columns)
    cands = timed(lambda: Candidates.from_arrays(**columns))
    clean = Candidates.from_arrays(**clean_columns)
    assert frozen(columns) == before
    if isinstance(cands, SpecError):
        return
    event(f"bad row: {'refused' if cands.reason[at] >= FIRST_INVALID else 'valid'}")
    # The row's reason is ExecSpec's first error (valid iff ExecSpec accepts it, as Candidates promises).
    code = int(cands.reason[at])
    try:
        ExecSpec(**bad_row)
    except SpecError as error:
        assert code >= FIRST_INVALID and error.parameter.split(".")[0] in REASON_TABLE[code].parameters, str(error)
    else:
        assert code == 0, REASON_TABLE[code]
    for units in ("seconds", "nd"):
        results = {}
        for backend in backends:
            with _backend.use(backend):
                results[backend] = timed(lambda: estimate_many(model, cands, "h100-sxm", units=units))
                alone = estimate_many(model, clean, "h100-sxm", units=units)
            batch = results[backend]
            # The other rows, bitwise as without the bad one.
            np.testing.assert_array_equal(batch.reason[others], alone.reason)
            np.testing.assert_array_equal(batch.fits[others], alone.fits)
            for x, y in [(batch.step_time, alone.step_time), (batch.peak_memory, alone.peak_memory),
                         (batch.mfu, alone.mfu)] + [(batch.parts[p], alone.parts[p]) for p in PART_NAMES]:
                np.testing.assert_array_equal(x[others], y)
        if len(backends) == 2:
            assert_batches_agree(*results.values())


# --------------------------------------------------------------------------- the cases of issue 13


def _refused_fast(call, parameter: str | None = None) -> SpecError:
    start = time.perf_counter()
    with pytest.raises(SpecError) as raised:
        call()
    assert time.perf_counter() - start < CALL_LIMIT_S
    if parameter is not None:
        assert raised.value.parameter == parameter, str(raised.value)
    return raised.value


@pytest.mark.parametrize("column", [dict(vpp=[1, 2**40]), dict(pp=[2, 2**40]), dict(pp=[2, 10**6]),
                                    dict(pp=[2, MAX_LAYERS]), dict(vpp=[1, MAX_LAYERS]),
                                    dict(pp=[2, MAX_LAYERS], vpp=[1, MAX_LAYERS]),
                                    dict(pp=[2, 64], pp_partition=np.array([(16, 16), (1,) * 32 + (0,) * 32], dtype=object))])
def test_a_deep_pipeline_row_gets_a_reason_and_the_rest_is_priced(column):
    """Issue 13 #1: one row with vpp = 2**40 or pp = 2**40 exhausted memory in the layout, one
    with pp = 10**6 took 8 s. Now it has a reason, at once, and the other row's price is the
    price it has alone."""
    fields = dict(dp=[2, 2], pp=[2, 2], vpp=[1, 1], global_batch_size=[16, 16], seq_length=4096)
    fields.update(column)
    start = time.perf_counter()
    batch = estimate_many("llama3-8b", Candidates.from_arrays(**fields), "h100-sxm")
    assert time.perf_counter() - start < CALL_LIMIT_S
    alone = estimate_many("llama3-8b", Candidates.from_arrays(
        **{name: value[:1] if isinstance(value, (list, np.ndarray)) else value for name, value in fields.items()}),
        "h100-sxm")
    assert batch.reason[1] >= FIRST_INVALID
    assert batch.reason[0] == alone.reason[0] == 0 and batch.step_time[0] == alone.step_time[0]
    assert batch.peak_memory[0] == alone.peak_memory[0]


def test_deep_pipelines_are_refused_by_the_layout_itself():
    """No path lays out more pipeline cells than the model has layers: the layout refuses them
    before any work, and explain() lists the rule without counting layers per chunk."""
    from ndcost.tables.layout import build_layout
    from ndcost.tables.joint_rules import explain

    model = Model.from_catalog("llama3-8b")
    for pp, vpp, offset in ((MAX_LAYERS, 1, None), (2, MAX_LAYERS, (1, -1)), (33, 1, 0), (16, 3, None)):
        spec = ExecSpec(pp=pp, vpp=vpp, micro_batch_num=1, offset=offset,
                        pp_schedule="interleaved" if vpp > 1 else "1f1b")
        _refused_fast(lambda: build_layout(model, spec), "pp" if vpp == 1 else "vpp")
        assert any("layer count" in text for text in timed(lambda: explain(model, spec)))


def test_a_huge_layer_count_is_refused():
    """Issue 13 #2: num_hidden_layers = 10**12 in a config.json hung, 2**31 via Model too."""
    for model_type in ("llama", "qwen3_next", "qwen3_moe"):
        config = {**catalog_entry({"llama": "llama3-8b", "qwen3_next": "qwen3-next-80b-a3b",
                                   "qwen3_moe": "qwen3-30b-a3b"}[model_type])["config"], "num_hidden_layers": 10**12}
        error = _refused_fast(lambda: Model.from_hf_config(config), "num_hidden_layers")
        assert str(MAX_LAYERS) in str(error)
    fields = {**Model.from_catalog("llama3-8b").to_dict(), "num_hidden_layers": 2**31}
    _refused_fast(lambda: Model.from_dict(fields), "num_hidden_layers")
    _refused_fast(lambda: Model.from_dict({**fields, "num_hidden_layers": 32, "num_nextn_predict_layers": 2**31}),
                  "num_nextn_predict_layers")


@pytest.mark.parametrize("fields, parameter", [
    (dict(seq_length=1e20), "seq_length"),
    (dict(seq_length=MAX_SEQ_LENGTH + 1), "seq_length"),
    (dict(dp=1e9), "dp"),
    (dict(dp=10**9, global_batch_size=10**9), "dp"),
    (dict(global_batch_size=10**30), "global_batch_size"),
    (dict(dp=2**32, global_batch_size=2**32), "dp"),
    (dict(dp=2**12, tp=2**12, cp=2, global_batch_size=2**12), "dp*tp*pp*cp"),
    (dict(micro_batch_num=MAX_BATCH, micro_batch_size=2, global_batch_size=None), "micro_batch_num"),
    (dict(capacity_factor=1e300), "capacity_factor"),
])
def test_sizes_past_their_bounds_are_refused(fields, parameter):
    """Issue 13 #2: each is a SpecError naming the parameter and stating the bound, in
    ExecSpec, and a reason of the same parameter for a batch row."""
    spec_fields = {"global_batch_size": 64, **fields}
    error = _refused_fast(lambda: ExecSpec(**spec_fields), parameter)
    assert "at most" in str(error) or "integer >= 1" in str(error)
    cands = Candidates.from_arrays(**object_columns([spec_fields, SPEC_BASE]))
    code = int(cands.reason[0])
    assert code >= FIRST_INVALID and parameter in REASON_TABLE[code].parameters and cands.reason[1] == 0
    start = time.perf_counter()
    batch = estimate_many("llama3-8b", cands, "h100-sxm")
    assert time.perf_counter() - start < CALL_LIMIT_S and batch.reason[0] == code and batch.reason[1] == 0


def test_the_device_bound_is_the_same_for_a_cluster_and_a_spec():
    _refused_fast(lambda: Cluster("h100-sxm", num_devices=MAX_DEVICES + 8), "num_devices")
    _refused_fast(lambda: Cluster("h100-sxm", num_devices=8, devices_per_node=2**40), "devices_per_node")
    cluster = Cluster("h100-sxm", num_devices=MAX_DEVICES)
    spec = ExecSpec(dp=MAX_DEVICES, global_batch_size=MAX_DEVICES)
    assert spec.num_devices == cluster.num_devices
    cands = Candidates.from_arrays(dp=[MAX_DEVICES, 2**12], tp=[1, 2**12], cp=[1, 2], global_batch_size=MAX_DEVICES)
    assert cands.reason.tolist() == [0, REASON_CODES["too_many_devices"]]


@pytest.mark.cython
def test_the_largest_global_batch_prices_alike_on_both_backends():
    """Issue 13 #2: global_batch_size = 10**30 gave NaN peak memory compiled and a finite one in
    the oracle; dp >= 2**32 made estimate and estimate_many disagree. At the bounds, everything
    agrees."""
    model = Model.from_catalog("llama3-8b")
    for spec in (ExecSpec(dp=8, global_batch_size=MAX_BATCH, seq_length=MAX_SEQ_LENGTH // 64),
                 ExecSpec(dp=MAX_DEVICES, global_batch_size=MAX_BATCH)):
        cluster = Cluster("h100-sxm", num_devices=spec.num_devices)
        price_everywhere(model, spec, cluster, ("cython", "python"), note=None)
        single = estimate(model, spec, cluster)
        batch = estimate_many(model, [spec], cluster)
        assert math.isfinite(single.memory.peak) and same(single.memory.peak, float(batch.peak_memory[0]))


def test_search_refuses_sizes_past_their_bounds():
    """search() put global_batch_size into an int64 column (10**30 raised OverflowError)."""
    from ndcost import search

    model, cluster = Model.from_catalog("llama3-8b"), Cluster("h100-sxm", num_devices=64)
    _refused_fast(lambda: search(model, cluster, global_batch_size=10**30, seq_length=4096), "global_batch_size")
    _refused_fast(lambda: search(model, cluster, global_batch_size=64, seq_length=MAX_SEQ_LENGTH * 2), "seq_length")


# --------------------------------------------------------------------------- the seeded API fuzz (issue 25)
#
# Two hundred and more bad calls of the public API, drawn with a seed: each returns or raises SpecError
# within API_LIMIT_S (no other exception, no hang), and what it returns is finite and physical.

import random  # noqa: E402

import ndcost  # noqa: E402

API_LIMIT_S = 20.0
API_SEED = 25
BAD = (0, -1, 1.5, "x", "", None, math.nan, math.inf, -math.inf, 1e300, 1e-320, True, [], {}, (1, 2), 10**30,
       "8", object(), "nd", b"x", 2**63)


def _finite_estimate(e) -> None:
    assert math.isfinite(e.step_time) and e.step_time > 0, e.step_time
    assert all(math.isfinite(v) and v >= 0 for v in e.parts.values()), dict(e.parts)
    if e.mfu is not None:
        assert 0 < e.mfu <= e.hfu <= 1, (e.mfu, e.hfu)
    if e.memory is not None:
        for name in ("peak_allocated", "peak_reserved", "fixed_bytes", "usable_bytes", "headroom"):
            assert math.isfinite(getattr(e.memory, name)), name


def _check_result(result) -> None:
    if isinstance(result, ndcost.Estimate):
        _finite_estimate(result)
    elif isinstance(result, ndcost.SearchResult):
        for ranked in result.results:
            _finite_estimate(ranked.estimate)
    elif isinstance(result, ndcost.BatchEstimate):
        priced = result.valid
        assert np.isfinite(result.step_time[priced]).all()
    elif isinstance(result, ndcost.Comparison):
        assert math.isfinite(result.gap) and isinstance(result.tied, bool)


def _api_calls(count: int = 240) -> list[tuple[str, object]]:
    rng = random.Random(API_SEED)
    model, cluster = Model.from_catalog("llama3-8b"), Cluster("h100-sxm", num_devices=8)
    good = dict(dp=8, global_batch_size=64, seq_length=4096)
    spec = ExecSpec(**good)
    fields = sorted(ExecSpec.__dataclass_fields__) + ["foo", "tpp", "Dp"]
    makers = [
        ("ExecSpec", lambda v, f: ExecSpec(**{**good, f: v})),
        ("estimate units", lambda v, f: estimate(model, spec, cluster, units=v)),
        ("estimate ratios", lambda v, f: estimate(model, spec, cluster, ratios={"COMPUTE": v}, units="seconds")),
        ("estimate nd ratios", lambda v, f: estimate(model, spec, cluster, units="nd", ratios={"COMPUTE": v})),
        ("estimate rates", lambda v, f: estimate(model, spec, cluster, rates=v)),
        ("estimate model", lambda v, f: estimate(v, spec, cluster)),
        ("estimate cluster", lambda v, f: estimate(model, spec, v)),
        ("estimate spec", lambda v, f: estimate(model, v, cluster)),
        ("Cluster override", lambda v, f: Cluster("h100-sxm", 8, **{rng.choice(CLUSTER_KEYS): v})),
        ("Cluster peak", lambda v, f: Cluster("h100-sxm", 8, peak_flops={rng.choice(("bf16", "bogus", "fp8", "")): v})),
        ("Cluster devices", lambda v, f: Cluster("h100-sxm", v)),
        ("search kwarg", lambda v, f: ndcost.search(model, cluster, global_batch_size=64, seq_length=4096,
                                                    per_layer_recompute=0, balance=0,
                                                    **{rng.choice(("top", "progress", "threads", "memory_limit",
                                                                   "units", "software", "tp", "pp", "zero_stage",
                                                                   "recompute", "bogus")): v})),
        ("Candidates column", lambda v, f: estimate_many(model, Candidates.from_arrays(
            **{**good, f if f in FIELDS else "dp": [8, v, True, 1.0]}), cluster)),
        ("compare", lambda v, f: ndcost.compare(spec, v, model, cluster)),
        ("compare software", lambda v, f: ndcost.compare(spec, spec, model, cluster, software=v)),
        ("explain", lambda v, f: ndcost.explain(model, v, cluster)),
        ("plan_recompute", lambda v, f: ndcost.plan_recompute(model, ExecSpec(**{**good, "recompute": "full"}),
                                                              cluster, memory_limit=v)),
        ("balance_pipeline", lambda v, f: ndcost.balance_pipeline(model, ExecSpec(dp=2, pp=4, global_batch_size=64,
                                                                                  seq_length=4096), cluster, units=v)),
        ("Model.from_catalog", lambda v, f: Model.from_catalog(v)),
        ("load_rates", lambda v, f: ndcost.load_rates(v)),
        ("layer_times", lambda v, f: ndcost.layer_times(model, spec, cluster, v)),
        ("estimate_many cluster", lambda v, f: estimate_many(model, [spec], v)),
        ("estimate_many threads", lambda v, f: estimate_many(model, [spec], cluster, threads=v)),
        ("Model.from_hf_config", lambda v, f: Model.from_hf_config({**catalog_entry("llama3-8b")["config"],
                                                                   rng.choice(CONFIG_KEYS): v})),
        ("validate_runs", lambda v, f: __import__("ndcost.io.validation", fromlist=["x"]).validate_runs(v)),
        ("measured_error", lambda v, f: __import__("ndcost.io.measured_error", fromlist=["x"]).measured_error(v, v)),
        ("measured_error software", lambda v, f: __import__("ndcost.io.measured_error", fromlist=["x"]).measured_error(
            "h100-sxm", v)),
        ("model_error", lambda v, f: __import__("ndcost.io.measured_error", fromlist=["x"]).model_error(v)),
    ]
    calls = []
    for i in range(count):
        name, make = makers[i % len(makers)] if i < len(makers) else rng.choice(makers)
        value, field = rng.choice(BAD), rng.choice(fields)
        calls.append((f"{name}({field}={value!r})", lambda make=make, value=value, field=field: make(value, field)))
    return calls


def test_two_hundred_bad_api_calls():
    calls = _api_calls()
    assert len(calls) >= 200
    refused = 0
    for label, call in calls:
        start = time.perf_counter()
        try:
            result = call()
        except SpecError:
            refused += 1
        else:
            _check_result(result)
        assert time.perf_counter() - start < API_LIMIT_S, label
    assert refused >= 150, refused


def test_the_issue_25_api_cases():
    model, cluster = Model.from_catalog("llama3-8b"), Cluster("h100-sxm", num_devices=8)
    spec = ExecSpec(dp=8, global_batch_size=64, seq_length=4096)
    with pytest.raises(SpecError) as unknown:
        ExecSpec(tpp=2)
    assert isinstance(unknown.value, TypeError) and "did you mean 'tp'" in str(unknown.value)
    with pytest.raises(SpecError, match="progress"):
        ndcost.search(model, cluster, global_batch_size=64, seq_length=4096, progress=5)
    with pytest.raises(SpecError, match="bogus"):
        Cluster("h100-sxm", 8, peak_flops={"bogus": 1e15})
    mixed = Candidates.from_arrays(dp=8, global_batch_size=64, seq_length=4096, sequence_parallel=[True, False, 1])
    assert mixed.reason[0] == 0 and mixed.reason[1] == 0 and mixed.reason[2] != 0
    nd = estimate(model, spec, cluster, units="nd")
    assert nd.mfu is None and nd.hfu is None and nd.tokens_per_second is None
    namespace: dict = {}
    exec("from ndcost import *", namespace)
    assert {"estimate_many", "Candidates", "compare", "BatchEstimate"} <= set(namespace)
    with pytest.warns(ndcost.errors.InputWarning, match="left over"):
        estimate(model, ExecSpec(dp=2, pp=3, global_batch_size=32, seq_length=4096), "h100-sxm", units="nd")
