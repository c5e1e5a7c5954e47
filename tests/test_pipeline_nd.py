"""ND's pipeline and P2P formulas, against hand-derived values (docs/ND_MODEL.md §2.8, §2.9, §6)."""
from __future__ import annotations

import math

import numpy as np
import pytest


def arr(*values):
    return np.array(values, dtype=np.float64)


def test_one_stage_is_its_time_per_micro_batch_times_m(kernels):
    # p = 1: S·m = 3.5·8
    assert kernels.nd_pipeline_time(arr(3.5), 8, 1) == 28.0


def test_one_chunk_per_stage(kernels):
    # p = 3, stages 1, 4, 2: S = 7, M = 4, m = 5 -> 7 + 4·4 = 23
    assert kernels.nd_pipeline_time(arr(1.0, 4.0, 2.0), 5, 1) == 23.0


def test_interleaved(kernels):
    # p = 2, vpp = 2, stages 2, 6, m = 4: extra = p(vpp-1) = 2;
    # S/vpp = 4; extra·M/vpp = 2·3 = 6; (m·vpp - extra - 1)·M/vpp = (8-2-1)·3 = 15 -> 25
    assert kernels.nd_pipeline_time(arr(2.0, 6.0), 4, 2) == 25.0
    # and it equals the closed form S/vpp + (m·vpp - 1)·M/vpp of docs/ND_MODEL.md §2.8
    assert kernels.nd_pipeline_time(arr(2.0, 6.0), 4, 2) == pytest.approx(8 / 2 + (4 * 2 - 1) * 6 / 2)


def test_degenerate_inputs_are_nan_not_errors(kernels):
    assert math.isnan(kernels.nd_pipeline_time(arr(), 4, 1))
    assert math.isnan(kernels.nd_pipeline_time(arr(1.0, 2.0), 0, 1))
    assert math.isnan(kernels.nd_pipeline_time(arr(1.0, 2.0), 4, 0))
    assert math.isnan(kernels.nd_p2p_count(0, 4, 1))
    assert math.isnan(kernels.nd_p2p_time(2, 4, 1, 1.0, 0.0, 0.002))


def test_straggler_is_the_last_slowest_stage(kernels):
    assert kernels.nd_straggler(arr(1.0, 5.0, 5.0, 2.0)) == 2
    assert kernels.nd_straggler(arr(7.0)) == 0


@pytest.mark.parametrize(
    "p, vp, m, expected",
    [
        # The upstream test table (docs/ND_MODEL.md §6, test_estimate_helpers.py)
        (1, 1, 4, 0),
        (2, 1, 4, 4 * 4),
        (4, 1, 4, 4 * 4 * 4 + 4 * 16 - 56),
        (2, 2, 4, 8 * 4 * 2 - 4 * 4),
        (4, 2, 4, 16 * 4 * 2 + 12),
        (8, 2, 4, 4 * 8 * 4 * 2 + 4 * 64 - 104),
    ],
)
def test_p2p_count_table(kernels, p, vp, m, expected):
    assert kernels.nd_p2p_count(p, m, vp) == expected


def test_p2p_time(kernels):
    # 0.002 · nb / p · M / sp with p = 2, m = 4 (nb = 16), M = 10, sp = 4 -> 0.002·16/2·10/4 = 0.04
    assert kernels.nd_p2p_time(2, 4, 1, 10.0, 4.0, 0.002) == pytest.approx(0.04, rel=1e-15)


def test_backends_agree_on_random_stages(ckernels, pykernels):
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = int(rng.integers(1, 17))
        stages = rng.uniform(0.1, 10.0, size=p)
        m = int(rng.integers(1, 64))
        vpp = int(rng.integers(1, 5))
        c = ckernels.nd_pipeline_time(stages, m, vpp)
        py = pykernels.nd_pipeline_time(stages, m, vpp)
        assert c == pytest.approx(py, rel=1e-12)
        assert ckernels.nd_straggler(stages) == pykernels.nd_straggler(stages)
        assert ckernels.nd_p2p_count(p, m, vpp) == pykernels.nd_p2p_count(p, m, vpp)
