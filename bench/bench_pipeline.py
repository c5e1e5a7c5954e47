"""ND's pipeline formula: the per-call overhead of the smallest kernel."""
from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.benchmark(group="nd_pipeline_time, 16 stages")
def bench_nd_pipeline_time(benchmark, kernels):
    stages = np.random.default_rng(0).uniform(1.0, 2.0, 16)
    result = benchmark(kernels.nd_pipeline_time, stages, 64, 2)
    assert result > 0
