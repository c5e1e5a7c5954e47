"""estimate(units="nd") end to end: ND's score of every catalog model, on both backends."""
from __future__ import annotations

import copy
import json
import math
import warnings

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import PART_NAMES
from ndcost.nd import estimate_performance
from ndcost.spec.ratios import _reset_missing_warnings

from strategies import ND_PRICED, on_both_backends, realistic


@pytest.mark.parametrize("name", ND_PRICED)
def test_every_catalog_model_prices_the_same_on_both_backends(ckernels, name):
    model, spec, cluster = realistic(name)
    results = on_both_backends(lambda: ndcost.estimate(model, spec, cluster, units="nd"))
    c, py = results["cython"], results["python"]
    assert math.isfinite(c.step_time) and c.step_time > 0
    assert c.step_time == pytest.approx(py.step_time, rel=1e-12)
    for part in PART_NAMES:
        assert c.parts[part] == pytest.approx(py.parts[part], rel=1e-12, abs=1e-12 * c.step_time)
    np.testing.assert_allclose(c.stage_times, py.stage_times, rtol=1e-12)
    assert c.memory.peak == pytest.approx(py.memory.peak, rel=1e-12)
    # the parts are the step taken apart
    assert sum(c.parts.values()) == pytest.approx(c.step_time, rel=1e-9)


def test_same_spec_twice_is_identical_and_inputs_stay_unchanged():
    model, spec, cluster = realistic("deepseek-v3")
    before = (copy.deepcopy(model), copy.deepcopy(spec), copy.deepcopy(cluster))
    first = ndcost.estimate(model, spec, cluster, units="nd")
    second = ndcost.estimate(model, spec, cluster, units="nd")
    assert first.step_time == second.step_time
    assert dict(first.parts) == dict(second.parts)
    assert (model, spec, cluster) == before


def test_folded_view_regroups_the_parts():
    model, spec, cluster = realistic("llama3-70b")
    e = ndcost.estimate(model, spec, cluster, units="nd")
    folded = e.folded
    assert set(folded) == {"comp", "dp_wait", "mp_wait", "ep_wait", "cp_wait", "pp_wait"}
    assert folded["comp"] == pytest.approx(e.parts["fw_compute"] + e.parts["bw_compute"] + e.parts["recompute"])
    assert sum(folded.values()) == pytest.approx(e.step_time, rel=1e-12)


def test_recompute_costs_a_third_of_its_compute():
    # full recompute re-runs the forward: ND charges it at (1 + BACKWARD_RATIO)^-1 of the re-run load
    model, spec, cluster = realistic("llama3-70b")
    none = ndcost.estimate(model, spec.replace(recompute="none"), cluster, units="nd")
    full = ndcost.estimate(model, spec.replace(recompute="full"), cluster, units="nd")
    assert none.parts["recompute"] == 0.0
    assert full.parts["recompute"] > 0.0
    assert full.step_time > none.step_time


def test_ratios_turn_the_score_into_milliseconds(tmp_path):
    model, spec, cluster = realistic("llama3-70b")
    plain = ndcost.estimate(model, spec, cluster, units="nd")
    ratios = {"COMPUTE": 1e-12, "DP_COMM": 2e-12, "MP_COMM": 3e-12, "EP_COMM": 1e-12, "CP_COMM": 1e-12,
              "PP_COMM": 5e-13, "DP_REDUCE": 1e-12, "BUBBLE": 4e-13}
    path = tmp_path / "ratios.json"
    path.write_text(json.dumps(ratios))
    e = ndcost.estimate(model, spec, cluster, units="nd", ratios=path)
    assert e.units == "nd_ms"
    expected = (sum(plain.parts[p] for p in ("fw_compute", "bw_compute", "recompute")) * 1e-12
                + plain.parts["dp_comm"] * 2e-12 + plain.parts["tp_comm"] * 3e-12
                + plain.parts["bubble"] * 4e-13 + plain.parts["dp_reduce"] * 1e-12)
    assert e.step_time == pytest.approx(expected, rel=1e-12)


def test_missing_ratios_fall_back_and_are_named_once():
    model, spec, cluster = realistic("llama3-70b")
    _reset_missing_warnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        e = ndcost.estimate(model, spec, cluster, units="nd", ratios={"COMPUTE": 2.0})
        ndcost.estimate(model, spec, cluster, units="nd", ratios={"COMPUTE": 2.0})
    plain = ndcost.estimate(model, spec, cluster, units="nd")
    assert e.step_time == pytest.approx(2.0 * plain.step_time, rel=1e-12)
    named = [str(w.message) for w in caught]
    assert sum("BUBBLE" in m for m in named) == 1


def test_a_ratios_file_without_compute_is_refused():
    model, spec, cluster = realistic("llama3-70b")
    with pytest.raises(ndcost.SpecError, match="COMPUTE"):
        ndcost.estimate(model, spec, cluster, units="nd", ratios={"DP_COMM": 1.0})


def test_stage_savings_lower_the_recompute_part():
    model, spec, cluster = realistic("llama3-70b")
    full = ndcost.estimate(model, spec.replace(recompute="full"), cluster, units="nd")
    saved = ndcost.estimate(model, spec.replace(recompute="full"), cluster, units="nd",
                            stage_savings=[1e12] * spec.pp)
    assert saved.parts["recompute"] == pytest.approx(full.parts["recompute"] - 1e12 * spec.resolved_micro_batch_num)
    with pytest.raises(ndcost.SpecError, match="stage_savings"):
        ndcost.estimate(model, spec, cluster, units="nd", stage_savings=[1.0])


def test_layer_times_split_forward_and_backward():
    model, spec, cluster = realistic("llama3-70b")
    fw, bw = ndcost.layer_times(model, spec, cluster, 0, "none")
    assert bw == pytest.approx(2 * fw, rel=1e-12)   # no recompute: backward is twice the forward
    fw_full, bw_full = ndcost.layer_times(model, spec, cluster, 0, "full")
    assert fw_full == fw and bw_full > bw
    assert ndcost.layer_times(model, spec, cluster, 0, "full") == (fw_full, bw_full)


def test_nd_compat_entry_point_matches_estimate():
    class Config:  # an ND cost-model config, attribute style
        d, t, p, vp, cp, ep, m, b, s = 8, 4, 2, 1, 1, 1, 8, 1, 4096
        h, a, n_kv, hff, n_lay, v = 4096, 32, 8, 14336, 32, 128256
        bytes_p, bytes_compute, has_op, sp = 2, 2, True, 4

    score = estimate_performance(Config(), device_type="A2")
    model = ndcost.Model(name="nd-config", hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, intermediate_size=14336, vocab_size=128256)
    spec = ndcost.ExecSpec(dp=8, tp=4, pp=2, micro_batch_num=8, seq_length=4096, sequence_parallel=True,
                           zero_stage=1, selective_rule="mindformers")
    ref = ndcost.estimate(model, spec, ndcost.Cluster("ascend-910b", num_devices=64), units="nd")
    assert score == pytest.approx(ref.step_time, rel=1e-12)
    total, parts = estimate_performance(Config(), device_type="A2", return_parts=True)
    assert sum(parts.values()) == pytest.approx(total, rel=1e-9)
