"""estimate(units="seconds") end to end on every catalog model, on both backends."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import PART_NAMES

from strategies import REALISTIC, on_both_backends, realistic


@pytest.mark.parametrize("name", sorted(REALISTIC))
def test_every_catalog_model_prices_the_same_on_both_backends(ckernels, name):
    model, spec, cluster = realistic(name)
    results = on_both_backends(lambda: ndcost.estimate(model, spec, cluster))
    c, py = results["cython"], results["python"]
    assert c.units == "seconds"
    assert math.isfinite(c.step_time) and c.step_time > 0
    assert c.step_time == pytest.approx(py.step_time, rel=1e-12)
    for part in PART_NAMES:
        assert c.parts[part] == pytest.approx(py.parts[part], rel=1e-12, abs=1e-15 * c.step_time)
    np.testing.assert_allclose(c.stage_times, py.stage_times, rtol=1e-12)
    assert sum(c.parts.values()) == pytest.approx(c.step_time, rel=1e-9)
    assert 0.0 < c.mfu < 1.0 and c.hfu >= c.mfu
    tokens = spec.resolved_global_batch_size * spec.seq_length
    assert c.tokens_per_second == pytest.approx(tokens / c.step_time, rel=1e-12)


def test_ratios_correct_seconds_part_by_part():
    model, spec, cluster = realistic("llama3-70b")
    plain = ndcost.estimate(model, spec, cluster)
    corrected = ndcost.estimate(model, spec, cluster, ratios={"COMPUTE": 1.1, "MP_COMM": 2.0, "BUBBLE": 1.0,
                                                                "PP_COMM": 1.0, "DP_COMM": 1.0, "DP_REDUCE": 1.0,
                                                                "EP_COMM": 1.0, "CP_COMM": 1.0})
    assert corrected.parts["tp_comm"] == pytest.approx(2.0 * plain.parts["tp_comm"], rel=1e-12)
    assert corrected.parts["fw_compute"] == pytest.approx(1.1 * plain.parts["fw_compute"], rel=1e-12)
    assert corrected.step_time == pytest.approx(sum(corrected.parts.values()), rel=1e-12)
