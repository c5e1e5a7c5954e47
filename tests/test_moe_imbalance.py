"""``ExecSpec.moe_imbalance``: the dropless straggler's load, priced in time and in memory.

A dropless (grouped-GEMM) MoE layer runs as slowly as its busiest expert-parallel rank. With a
router load over the mean of ``moe_imbalance``, that rank computes ``imbalance`` times the balanced
token-expert rows, sends and receives ``imbalance`` times the balanced all-to-all bytes, and keeps
``imbalance`` times the routed activations. Capacity mode already pads every expert to
``capacity_factor``, so the imbalance changes nothing there.
"""
from __future__ import annotations

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import SECONDS_CAND, SECONDS_LAYER, SECONDS_LAYER_FIELDS
from ndcost.tables.seconds import seconds_arrays
from ndcost.tables.joint_rules import validate

L = SECONDS_LAYER
ALL_TO_ALL = 2


def _setup(**changes):
    model = ndcost.Model.from_catalog("mixtral-8x7b")
    fields = dict(dp=8, tp=1, pp=1, ep=8, micro_batch_size=1, global_batch_size=64, seq_length=4096,
                  recompute="none", zero_stage=1, grouped_gemm=True)
    fields.update(changes)
    spec = ndcost.ExecSpec(**fields)
    cluster = ndcost.Cluster("h100-sxm", spec.num_devices)
    validate(model, spec, cluster)
    return model, spec, cluster


def _layers(kernels, **changes):
    a = seconds_arrays(*_setup(**changes))
    out = np.empty((a["kinds"].shape[0], len(SECONDS_LAYER_FIELDS)))
    kernels.seconds_layer_times(a["kinds"], a["skinds"], a["model"], a["smodel"], a["cand"], a["rate"], out)
    moe_row = int(np.argmax(out[:, L["ep_f"]]))   # the MoE layer kind: the only one with an all-to-all
    return a, out[moe_row]


def test_the_all_to_all_carries_the_busiest_ranks_bytes(kernels):
    a, balanced = _layers(kernels)
    _, skewed = _layers(kernels, moe_imbalance=1.5)
    cand, model = a["cand"], ndcost.Model.from_catalog("mixtral-8x7b")
    tokens = cand[SECONDS_CAND["b"]] * cand[SECONDS_CAND["s"]]
    routed = tokens * model.num_experts_per_tok * model.hidden_size * cand[SECONDS_CAND["bytes_c"]]
    stride = cand[SECONDS_CAND["t"]] * cand[SECONDS_CAND["cp"]]
    for load, layer in ((1.0, balanced), (1.5, skewed)):
        want = 2.0 * kernels.seconds_collective(ALL_TO_ALL, routed * load, 8.0, stride, a["rate"])
        assert layer[L["ep_f"]] == pytest.approx(want, rel=1e-12)
    assert skewed[L["ep_f"]] > 1.4 * balanced[L["ep_f"]]    # bandwidth-bound: close to x1.5


def test_the_expert_gemms_run_the_busiest_ranks_rows(kernels):
    _, balanced = _layers(kernels)
    _, skewed = _layers(kernels, moe_imbalance=2.0)
    # the attention half is unchanged, the expert half doubles: forward grows, but less than x2
    assert balanced[L["fw"]] < skewed[L["fw"]] < 2.0 * balanced[L["fw"]]
    assert balanced[L["bw"]] < skewed[L["bw"]] < 2.0 * balanced[L["bw"]]


def test_capacity_mode_ignores_the_imbalance(kernels):
    _, padded = _layers(kernels, grouped_gemm=False, capacity_factor=1.25)
    _, skewed = _layers(kernels, grouped_gemm=False, capacity_factor=1.25, moe_imbalance=2.0)
    np.testing.assert_array_equal(padded, skewed)


def test_routed_activations_grow_with_the_imbalance():
    base = ndcost.estimate(*_setup(), units="seconds")
    skewed = ndcost.estimate(*_setup(moe_imbalance=1.5), units="seconds")
    assert skewed.memory.peak > base.memory.peak
    assert skewed.step_time > base.step_time
    # same knob, capacity mode: nothing moves
    padded = ndcost.estimate(*_setup(grouped_gemm=False, capacity_factor=1.25), units="seconds")
    padded_skewed = ndcost.estimate(*_setup(grouped_gemm=False, capacity_factor=1.25, moe_imbalance=1.5),
                                    units="seconds")
    assert padded_skewed.memory.peak == padded.memory.peak
    assert padded_skewed.step_time == padded.step_time


def test_dense_models_ignore_it():
    model = ndcost.Model.from_catalog("llama3-8b")
    spec = dict(dp=8, micro_batch_size=1, global_batch_size=64, seq_length=4096, zero_stage=1)
    cluster = ndcost.Cluster("h100-sxm", 8)
    base = ndcost.estimate(model, ndcost.ExecSpec(**spec), cluster)
    skewed = ndcost.estimate(model, ndcost.ExecSpec(moe_imbalance=3.0, **spec), cluster)
    assert skewed.step_time == base.step_time and skewed.memory.peak == base.memory.peak


@pytest.mark.parametrize("bad", [0.5, float("nan"), float("inf"), True, "1.2", 1e9])
def test_bad_imbalance_is_a_spec_error(bad):
    with pytest.raises(ndcost.SpecError, match="moe_imbalance"):
        ndcost.ExecSpec(dp=8, micro_batch_size=1, global_batch_size=64, moe_imbalance=bad)


def test_a_bad_batch_row_gets_a_reason_and_the_rest_are_priced():
    model, cluster = ndcost.Model.from_catalog("mixtral-8x7b"), ndcost.Cluster("h100-sxm", 16)
    cands = ndcost.Candidates.from_arrays(dp=8, ep=8, pp=2, micro_batch_size=1, global_batch_size=64, seq_length=4096,
                                          recompute="full", zero_stage=1, moe_imbalance=[1.0, 0.5, 1.3])
    batch = ndcost.estimate_many(model, cands, cluster)
    assert batch.reason_names().tolist() == ["ok", "bad_moe_setting", "ok"]
    assert np.isfinite(batch.step_time[[0, 2]]).all() and np.isnan(batch.step_time[1])
    assert "moe_imbalance" in batch.explain(1)
    assert batch.step_time[2] > batch.step_time[0]
    # the batch prices the imbalance as the single estimate does
    one = ndcost.estimate(model, ndcost.ExecSpec(dp=8, ep=8, pp=2, micro_batch_size=1, global_batch_size=64,
                                                 seq_length=4096, recompute="full", zero_stage=1,
                                                 moe_imbalance=1.3), cluster)
    assert batch.step_time[2] == pytest.approx(one.step_time, rel=1e-9)
