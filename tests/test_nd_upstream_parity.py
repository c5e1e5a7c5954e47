"""ND units against HyperParallel's estimator where ndcost once differed (issue 26): one test per
divergence, each expected value built from upstream's behaviour as docs/ND_MODEL.md states it
(§1.6 the partition, §1.4 the factor sp, §2.3 the dispatch count), on both backends.

The expected scores are priced through ``nd_estimate`` on a Layout written out by hand from the
documented rule (which layers each stage holds, where the embedding and the output layer run), so
they do not go through the layout builders under test; the kernels under them were bit-exact with
upstream on every other configuration checked.
"""
from __future__ import annotations

import numpy as np
import pytest

import ndcost
from ndcost import Cluster, ExecSpec, Model, SpecError, _backend
from ndcost.nd import estimate_performance, model_from_nd, spec_from_nd
from ndcost.price.estimate import nd_estimate
from ndcost.tables.layout import Layout, build_layout
from ndcost.tables.layout_nd import nd_search_offset
from ndcost.tables.nd_tables import MOE_DISPATCH


def _hand_layout(model: Model, per_stage: list[dict[str, int]], emb: int, out: int) -> Layout:
    """A layout of *per_stage* layers ({kind name: count} per stage, one chunk), every layer plain."""
    kinds = [kind.name for kind in model.kinds]
    counts = np.zeros((len(per_stage), 1, len(kinds), 1))
    for s, layers in enumerate(per_stage):
        for name, n in layers.items():
            counts[s, 0, kinds.index(name), 0] = n
    return Layout(counts=counts, slot_option=np.array([0]), slot_mask=np.array([0xFF]), emb_stage=emb, emb_chunk=0,
                  out_stage=out, out_chunk=0, mtp_stage_counts=np.zeros(len(per_stage), dtype=np.int64),
                  positions=(), stages=())


def _expected(model: Model, spec: ExecSpec, per_stage: list[dict[str, int]], emb: int, out: int) -> float:
    cluster = Cluster("h800", num_devices=spec.num_devices)
    return nd_estimate(model, spec, cluster, _hand_layout(model, per_stage, emb, out))["step_time"]


def _nd(model: Model, spec: ExecSpec) -> float:
    return ndcost.estimate(model, spec, Cluster("h800", num_devices=spec.num_devices), units="nd").step_time


@pytest.fixture
def on_backend(backend_name):
    with _backend.use(backend_name):
        yield backend_name


# ---------------------------------------------------------------- 1. zero_bubble_v's output layer


def test_zero_bubble_v_prices_the_output_layer_on_the_last_stage(on_backend):
    """ND's generator puts the output layer in the last non-empty cell of its chunk-major scan, for
    zero_bubble_v as for 1F1B: the last stage (docs/ND_MODEL.md §1.6), though DualPipeV's V ends on stage 0."""
    model = Model.from_catalog("deepseek-v3")
    spec = ExecSpec(dp=8, ep=8, pp=2, vpp=2, pp_schedule="zero_bubble_v", offset=((1, 0), (0, 1)),
                    micro_batch_num=8, seq_length=4096)
    # 62 layers (61 + MTP), per = 15: chunk 0 holds 16 | 15, chunk 1 15 | 16. Model order runs chunk 0
    # (layers 0-30: the 3 dense ones on stage 0) then chunk 1 back up the V: stage 1 holds 31-46,
    # stage 0 47-61 (the MTP layer 61 a MoE layer, as the last body kind).
    stages = [{"dense": 3, "moe": 13 + 15}, {"moe": 15 + 16}]
    assert _nd(model, spec) == pytest.approx(_expected(model, spec, stages, emb=0, out=1), rel=1e-12)
    assert build_layout(model, spec, nd=True).out_stage == 1
    # where it runs (seconds mode's placement): stage 0, where the V ends
    assert build_layout(model, spec).out_stage == 0
    moved = _expected(model, spec, stages, emb=0, out=0)
    assert moved != pytest.approx(_nd(model, spec), rel=1e-6)


# ---------------------------------------------------------------- 2. an empty cell


@pytest.mark.parametrize("name, fields, stages, out", [
    # the offset: chunk 0 holds 20 | 20, chunk 1 40 | 0; the scan ends at (stage 0, chunk 1)
    ("llama3-70b", dict(pp=2, vpp=2, offset=((0, 0), (20, -20))), [{"dense": 60}, {"dense": 20}], 0),
    # an empty middle stage: the scan stops there, so the output joins stage 0, not stage 3
    ("llama3-8b", dict(pp=4, offset=(2, -8, 3, 3)), [{"dense": 10}, {}, {"dense": 11}, {"dense": 11}], 0),
])
def test_an_empty_cell_ends_the_scan_for_the_output_layer(on_backend, name, fields, stages, out):
    """ND's first_and_last_non_empty_stage walks chunk by chunk, the stages inside each, and stops at
    the first empty cell after a non-empty one (docs/ND_MODEL.md §1.6)."""
    model = Model.from_catalog(name)
    spec = ExecSpec(dp=2, micro_batch_num=8, seq_length=4096, **fields)
    assert _nd(model, spec) == pytest.approx(_expected(model, spec, stages, emb=0, out=out), rel=1e-12)


# ---------------------------------------------------------------- 3. sp without sequence_parallel


class SilentConfig:
    """ND's cost-model config: a field it does not hold reads 0 (docs/ND_MODEL.md §1.3)."""

    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)

    def __getattr__(self, name):
        return 0


def _dense_config(**more) -> SilentConfig:
    fields = dict(d=4, t=4, p=2, vp=1, cp=1, ep=1, m=8, b=1, s=4096, h=8192, a=64, n_kv=8, hff=28672, n_lay=80,
                  v=128256, n_exp=1, bytes_p=2, bytes_compute=2, cap_fact=1.0, has_fa=True, is_mtp_in_offset=True)
    fields.update(more)
    return SilentConfig(**fields)


def test_the_drop_in_reads_the_factor_sp_as_nd_s_op_table_does(on_backend):
    """ND's op table divides by the config's sp (derive's t with sequence parallelism, else 1); the
    flag sequence_parallel is only what derive() reads to set it (docs/ND_MODEL.md §1.4 step 1, §2.2)."""
    cfg = _dense_config()
    model, plain = model_from_nd(cfg), spec_from_nd(cfg)
    assert not plain.sequence_parallel                          # neither stated
    cluster = Cluster("ascend-910b", num_devices=plain.num_devices)
    expected_on, expected_off = (
        ndcost.estimate(model, plain.replace(sequence_parallel=flag), cluster, units="nd", with_memory=False).step_time
        for flag in (True, False))
    assert expected_on != expected_off
    # sp stated, sequence_parallel not (it reads 0): SP on
    assert estimate_performance(_dense_config(sp=4)) == pytest.approx(expected_on, rel=1e-12)
    # sp wins over a flag that says otherwise, as the op table never reads the flag
    assert estimate_performance(_dense_config(sp=1, sequence_parallel=True)) == pytest.approx(expected_off, rel=1e-12)
    # no sp (0): the flag decides
    assert estimate_performance(_dense_config(sequence_parallel=True)) == pytest.approx(expected_on, rel=1e-12)
    with pytest.raises(SpecError, match="'sp' parameter of estimate_performance must be 1 or t"):
        estimate_performance(_dense_config(sp=2))


# ---------------------------------------------------------------- 4. the dispatch count


def _moe_config(**more) -> SilentConfig:
    fields = dict(d=8, t=1, p=1, vp=1, cp=1, ep=8, m=4, b=1, s=4096, h=2048, a=16, n_kv=16, hff=10944, n_lay=27,
                  v=102400, n_exp=64, hff_exp=1408, n_shared_exp=2, n_chosen_exp=6, k_1st_dense=1, dc_kv=512,
                  dhr=64, qk_nope_head_dim=128, v_head_dim=128, dh=128, bytes_p=2, bytes_compute=2, cap_fact=1.0,
                  has_fa=True, is_mtp_in_offset=True, moe_dispatch=None)
    fields.update(more)
    return SilentConfig(**fields)


def test_the_dispatch_is_charged_as_many_times_as_the_config_s_count(on_backend):
    """ND weighs the dispatch entry (MOE_DISPATCH·b·s·h·k·ep·bytes_p/t/cp, docs/ND_MODEL.md §2.3) by the
    layer's op count n_dispatch, which reads 0 where the config does not state it: a config that
    states moe_dispatch as None prices no dispatch at all."""
    none = estimate_performance(_moe_config(moe_dispatch=0.0))
    assert estimate_performance(_moe_config()) == pytest.approx(none, rel=1e-12)
    # One stage (p = 1), no recompute: the score is the stage times m, and each of the 26 MoE layers
    # adds the entry once per unit of its count.
    entry = MOE_DISPATCH * 1 * 4096 * 2048 * 6 * 8 * 2 / 1 / 1
    for count in (1, 2, 0.5):
        priced = estimate_performance(_moe_config(n_dispatch=count))
        assert priced - none == pytest.approx(4 * 26 * count * entry, rel=1e-12)
    # estimate(units="nd") prices a spec as ND does: no dispatch unless the spec states a count
    cfg = _moe_config()
    model, spec = model_from_nd(cfg), spec_from_nd(cfg)
    assert spec.moe_dispatch_count == 0.0
    once = spec.replace(moe_dispatch_count=1.0)
    assert _nd(model, spec) == pytest.approx(_nd(model, spec.replace(moe_dispatch=0.0)), rel=1e-12)
    assert _nd(model, once) > _nd(model, spec)


# ---------------------------------------------------------------- and the remainder without an offset


def test_without_an_offset_nd_places_per_layers_a_cell_and_drops_the_rest(on_backend):
    """ND's generator gives each cell lay // (pp*vpp) layers when no offset is stated; the rest are
    never placed (docs/ND_MODEL.md §1.6). Seconds mode spreads them (docs/ND_DIFFERENCES.md)."""
    model = Model.from_catalog("llama3-8b")                     # 32 layers on 3 stages: 10 each, 2 dropped
    spec = ExecSpec(dp=2, pp=3, micro_batch_num=8, seq_length=4096)
    stages = [{"dense": 10}, {"dense": 10}, {"dense": 10}]
    assert _nd(model, spec) == pytest.approx(_expected(model, spec, stages, emb=0, out=2), rel=1e-12)
    assert build_layout(model, spec, nd=True).layers_per_stage().tolist() == [10, 10, 10]
    assert build_layout(model, spec).layers_per_stage().tolist() == [11, 11, 10]


def test_nd_search_offset_is_the_balancing_adapter_s_default():
    """ND's search states BalancingAdapter.default_offset made valid (docs/ND_MODEL.md §1.6), traced by hand."""
    assert nd_search_offset(62, 16, 1) == (1,) * 14 + (0, 0)     # the first stages take the extras
    assert nd_search_offset(61, 4, 2) == ((1, 1, 1, 1), (0, 0, 0, 1))
    assert nd_search_offset(10, 2, 2) == ((1, 0), (0, 1))
    assert nd_search_offset(64, 8, 1) is None


def test_a_search_in_nd_units_places_every_layer_as_nd_s_search_does():
    model = Model.from_catalog("deepseek-v2-lite")           # 27 layers: pp 2 and 4 leave some over
    result = ndcost.search(model, Cluster("h100-sxm", num_devices=16), global_batch_size=64, seq_length=2048,
                           units="nd", top=5, per_layer_recompute=0, balance=0, pp=[2, 4], tp=1, ep=8)
    assert result.results
    for ranked in result.results:
        spec = ranked.spec
        assert spec.offset == nd_search_offset(27, spec.pp, spec.vpp)
        assert build_layout(model, spec, nd=True).counts.sum() == 27
