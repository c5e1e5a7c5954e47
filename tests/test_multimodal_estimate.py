"""A vision-language model and a census, priced end to end (docs/ND_MODEL.md §2.13 step 5, §2.4).

ND prices a multimodal model by submodule, each on its own config and partitions, and sums the
per-stage lists (seed ``_submodule_parts``). ndcost prices the tower's blocks as kinds of one
model; these tests check that the sums come out as ND's: the model with its tower is the text
model plus the tower, stage by stage.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ndcost
from ndcost import _backend
from ndcost.kernels import columns as col
from ndcost.price.estimate import _nd_stage_sums
from ndcost.tables.layout import build_layout
from ndcost.tables.nd_tables import nd_candidate_vector, nd_kind_table, nd_model_vector
from ndcost.tables.derive import derive
from strategies import on_both_backends

VL = "qwen2.5-vl-7b"


def _spec(**changes):
    fields = dict(dp=4, tp=2, pp=4, global_batch_size=256, seq_length=8192, offset=(-4, 2, 1, 1),
                  sequence_parallel=True, recompute="selective")
    fields.update(changes)
    return ndcost.ExecSpec(**fields)


def _cluster(spec):
    return ndcost.Cluster("h100-sxm", num_devices=spec.num_devices)


def _tower_alone(model, spec, cluster, stage):
    """The ND walk of the tower's blocks alone, on *stage*, without embedding or output."""
    layout = build_layout(model, spec)
    counts = layout.stage_counts().copy()
    n_options = len(layout.slot_option)
    text_kinds = [k for k, kind in enumerate(model.kinds) if kind.module == "text"]
    for k in text_kinds:
        counts[:, k * n_options:(k + 1) * n_options] = 0.0
    counts[[s for s in range(layout.pp) if s != stage], :] = 0.0
    out = np.empty((layout.pp, len(col.STAGE_FIELDS)))
    cand = nd_candidate_vector(spec, derive(model, spec, cluster), cluster)
    _backend.kernels.nd_stage_sums(nd_kind_table(model), nd_model_vector(model), cand, counts,
                                   layout.slot_option, layout.slot_mask, -1, -1, out)
    return out


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("backend", [pytest.param("cython", marks=pytest.mark.cython), "python"])
def test_nd_stage_sums_are_the_text_model_plus_the_tower(recompute, backend):
    vl = ndcost.Model.from_catalog(VL)
    text = dataclasses.replace(vl, vision=None)
    spec = _spec(recompute=recompute)
    cluster = _cluster(spec)
    with _backend.use(backend):
        whole, _ = _nd_stage_sums(vl, spec, cluster, build_layout(vl, spec))
        text_only, _ = _nd_stage_sums(text, spec, cluster, build_layout(text, spec))
        tower = _tower_alone(vl, spec, cluster, build_layout(vl, spec).emb_stage)
    np.testing.assert_allclose(whole, text_only + tower, rtol=1e-12)
    assert tower[0, col.STAGE["comp"]] > 0 and np.all(tower[1:] == 0)


def test_tower_is_priced_at_its_own_width_in_nd_units():
    # The tower alone equals a plain 1280-wide model's 32 layers at ND's 1024 merged tokens.
    vl = ndcost.Model.from_catalog(VL)
    spec = _spec(recompute="none", pp=1, offset=None, dp=16, global_batch_size=256)
    cluster = _cluster(spec)
    tower = _tower_alone(vl, spec, cluster, 0)
    vit = ndcost.Model(name="vit", hidden_size=1280, num_hidden_layers=32, num_attention_heads=16,
                       intermediate_size=3420, vocab_size=8, attention_bias=True)
    vit_spec = dataclasses.replace(spec, seq_length=1024)
    layout = build_layout(vit, vit_spec)
    out = np.empty((1, len(col.STAGE_FIELDS)))
    _backend.kernels.nd_stage_sums(nd_kind_table(vit), nd_model_vector(vit),
                                   nd_candidate_vector(vit_spec, derive(vit, vit_spec, cluster), cluster),
                                   layout.stage_counts(), layout.slot_option, layout.slot_mask, -1, -1, out)
    comp = col.STAGE["comp"]
    assert tower[0, comp] == pytest.approx(out[0, comp], rel=1e-12)


def test_vlm_step_is_slower_than_its_text_model_and_the_backends_agree(ckernels):
    vl = ndcost.Model.from_catalog(VL)
    text = dataclasses.replace(vl, vision=None)
    spec = _spec()
    cluster = _cluster(spec)
    for units in ("nd", "seconds"):
        got = on_both_backends(lambda: ndcost.estimate(vl, spec, cluster, units=units))
        assert got["cython"].step_time == pytest.approx(got["python"].step_time, rel=1e-12)
        plain = ndcost.estimate(text, spec, cluster, units=units)
        assert got["python"].step_time > plain.step_time
        first = got["python"].stage_times[0]
        assert first > plain.stage_times[0]                        # the tower runs on stage 0
        assert got["python"].stage_times[1:] == pytest.approx(plain.stage_times[1:], rel=1e-12)


def test_tower_parameters_sit_on_the_embedding_stage():
    vl = ndcost.Model.from_catalog(VL)
    text = dataclasses.replace(vl, vision=None)
    spec = _spec(recompute="full")
    cluster = _cluster(spec)
    with_tower = ndcost.estimate(vl, spec, cluster).memory.stages
    without = ndcost.estimate(text, spec, cluster).memory.stages
    # bf16 params over tp = 2: the 32 blocks and the patch embedding + merger.
    expected = (32 * vl.vision.block_parameters() + vl.vision.extra_parameters()) * 2 / 2
    assert with_tower[0].params - without[0].params == pytest.approx(expected, rel=1e-12)
    assert with_tower[0].activations > without[0].activations
    for s in range(1, 4):
        assert with_tower[s].total == pytest.approx(without[s].total, rel=1e-12)


def test_more_image_tokens_cost_more():
    vl = ndcost.Model.from_catalog(VL)
    spec = _spec()
    cluster = _cluster(spec)
    small = ndcost.estimate(vl, spec, cluster)
    large = ndcost.estimate(vl.with_vision_tokens(4 * vl.vision.tokens), spec, cluster)
    assert large.stage_times[0] > small.stage_times[0]
    assert large.memory.stages[0].activations > small.memory.stages[0].activations


def test_search_and_batch_price_a_vlm_like_one_estimate():
    vl = ndcost.Model.from_catalog(VL)
    spec = _spec()
    cluster = _cluster(spec)
    batch = ndcost.estimate_many(vl, ndcost.Candidates.from_specs([spec, _spec(recompute="full")]), cluster)
    one = ndcost.estimate(vl, spec, cluster)
    assert batch.step_time[0] == pytest.approx(one.step_time, rel=1e-12)
    assert batch.peak_memory[0] == pytest.approx(one.memory.peak, rel=1e-12)
    found = ndcost.search(vl, cluster, global_batch_size=256, seq_length=8192, top=3)
    assert found.results and all(np.isfinite(row.estimate.step_time) and row.estimate.fits for row in found.results)


# --------------------------------------------------------------------------- census

CENSUS = {"kinds": {"dense": {"selective_attention_mm": 0.5, "selective_ffn_mm": 1 / 3,
                              "saved": 6.0 * 3584, "saved_tp": 30.0 * 3584,
                              "selective": 2.0 * 3584, "selective_tp": 8.0 * 3584}}}


def _policy_spec(rule):
    return ndcost.ExecSpec(dp=8, tp=4, pp=1, global_batch_size=64, seq_length=4096, sequence_parallel=True,
                           recompute="selective", selective_rule=rule)


@pytest.mark.parametrize("units", ["nd", "seconds"])
def test_census_shares_price_the_policy_and_nothing_else(ckernels, units):
    base = ndcost.Model.from_catalog("qwen3-8b")
    census = base.with_census(CENSUS)
    cluster = ndcost.Cluster("h100-sxm", num_devices=32)
    policy = _policy_spec("hyperparallel")
    plain = ndcost.estimate(base, policy, cluster, units=units)
    priced = on_both_backends(lambda: ndcost.estimate(census, policy, cluster, units=units))
    assert priced["cython"].step_time == pytest.approx(priced["python"].step_time, rel=1e-12)
    # The policy recomputes a share of the projections too: more recompute, nothing else moves.
    assert priced["python"].parts["recompute"] > plain.parts["recompute"]
    assert priced["python"].parts["fw_compute"] == pytest.approx(plain.parts["fw_compute"], rel=1e-12)
    other = _policy_spec("megatron")
    assert ndcost.estimate(census, other, cluster, units=units).step_time == pytest.approx(
        ndcost.estimate(base, other, cluster, units=units).step_time, rel=1e-12)


def test_census_bytes_price_the_memory():
    from ndcost.tables.memory import memory_candidate_vector, memory_kind_table

    base = ndcost.Model.from_catalog("qwen3-8b")
    census = base.with_census(CENSUS)
    cluster = ndcost.Cluster("h100-sxm", num_devices=32)
    spec = _policy_spec("hyperparallel")
    tokens, tp = 4096 * 1 / 1, 4          # s x b / cp; sp = tp with sequence parallelism
    census_layer = tokens * (2.0 * 3584 / tp + 8.0 * 3584 / tp)   # selective/sp + selective_tp/tp
    formula_layer = _backend.kernels.kind_activation_bytes(
        memory_kind_table(base)[0], memory_candidate_vector(base, spec), col.OPTION_SELECTIVE, col.HYPER_POLICY_MASK)
    got = ndcost.estimate(census, spec, cluster).memory.stages[0].activations
    without = ndcost.estimate(base, spec, cluster).memory.stages[0].activations
    # pp = 1: one micro-batch in flight; every layer keeps the census's bytes instead of the formula's.
    assert got - without == pytest.approx(base.num_hidden_layers * (census_layer - formula_layer), rel=1e-9)


def test_planner_takes_the_policy_whole_from_the_census():
    from ndcost.price.recompute_plan import kind_profile

    base = ndcost.Model.from_catalog("qwen3-8b")
    census = base.with_census(CENSUS)
    spec = _policy_spec("megatron")
    cluster = ndcost.Cluster("h100-sxm", num_devices=32)
    profile = kind_profile(census, spec, cluster, 0)
    recomputed = frozenset({"headCast", "dropout", "softmax", "normOp", "gather", "ffAct"})
    assert recomputed in profile.whole
    assert profile.selective(recomputed) == profile.whole[recomputed]
    assert profile.plain.memory_per_micro_batch == pytest.approx(4096 * (6.0 * 3584 / 4 + 30.0 * 3584 / 4))
    assert kind_profile(base, spec, cluster, 0).whole == {}
    plan = ndcost.plan_recompute(census, spec, cluster)
    assert plan.feasible
