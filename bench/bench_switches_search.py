"""All 256 switch settings + their dominance front of one MLA layer kind, and a full search."""
from __future__ import annotations

import numpy as np
import pytest

import ndcost
from ndcost import _backend
from ndcost.price.recompute_plan import kind_profile


@pytest.fixture(scope="module")
def mla_kernel_inputs():
    """The kernel inputs of DeepSeek-V3's MoE layer kind (attUp acts: 256 settings)."""
    model = ndcost.Model.from_catalog("deepseek-v3")
    spec = ndcost.ExecSpec(dp=64, pp=16, ep=64, global_batch_size=4096, seq_length=4096)
    profile = kind_profile(model, spec, ndcost.Cluster("h800", num_devices=1024), 1)
    plain = np.array(profile.plain.row(), dtype=np.float64)
    alone = np.array([profile.alone[name].row() for name in ndcost.SWITCHES], dtype=np.float64)
    settings = np.empty((256, plain.size))
    _backend.kernels.switch_settings(plain, alone, 0xFF, settings)
    # front criteria (memory per micro-batch, backward time, memory once) of the 256 settings + FULL
    full = np.array(profile.full.row(), dtype=np.float64)
    criteria = np.ascontiguousarray(np.vstack([settings, full])[:, [0, 2, 1]])
    return plain, alone, settings, criteria


@pytest.mark.benchmark(group="all 256 switch settings + dominance front (one MLA kind)")
def bench_switch_settings_and_front(benchmark, kernels, mla_kernel_inputs):
    plain, alone, settings, criteria = mla_kernel_inputs
    keep = np.empty(257, dtype=np.int64)
    always = np.array([0, 256], dtype=np.int64)

    def run():
        kernels.switch_settings(plain, alone, 0xFF, settings)
        kernels.dominance_front(criteria, 3, always, keep)

    benchmark(run)
    assert keep[0] == 1 and keep[256] == 1


@pytest.mark.benchmark(group="ndcost search deepseek-v3 --devices 1024 --device h800 (nd units)")
@pytest.mark.parametrize("backend", ["cython"])
def bench_full_search(benchmark, backend):
    model = ndcost.Model.from_catalog("deepseek-v3")
    cluster = ndcost.Cluster("h800", num_devices=1024)
    with _backend.use(backend):
        result = benchmark.pedantic(ndcost.search, args=(model, cluster),
                                    kwargs=dict(global_batch_size=4096, seq_length=4096, units="nd"),
                                    rounds=3, iterations=1)
    assert result.fitting + sum(result.rejected.values()) == result.space_size
