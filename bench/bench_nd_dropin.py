"""The ND search loop's door: ``ndcost.nd.estimate_performance(cfg)`` with a fresh config object per
call (same model fields, changing strategy), beside ``estimate(units="nd")`` on a prepared spec.

Run: ``pytest bench/bench_nd_dropin.py --benchmark-only --benchmark-group-by=group``. Each call of the
drop-in prices one of 16 strategies of a Llama-3-70B-sized config; the per-call ratio of the two is
kept in ``extra_info`` (issue 16's target is 1.5x). Nothing is asserted: absolute times never are,
and the ratio is a target, not yet a guard.
"""
from __future__ import annotations

import itertools

import pytest

import ndcost
from ndcost import _backend
from ndcost.nd import estimate_performance, model_from_nd, spec_from_nd

STRATEGIES = [(t, p) for t in (1, 2, 4, 8) for p in (1, 2, 4, 8)]
MEDIANS: dict[str, float] = {}


class _Config:
    """An ND cost-model config as a search loop builds it: plain attributes, ND's field names."""

    def __init__(self, t: int, p: int) -> None:
        self.d, self.t, self.p, self.vp, self.m, self.b, self.s = 64 // (t * p), t, p, 1, 16, 1, 4096
        self.h, self.a, self.n_kv, self.hff, self.n_lay, self.v = 8192, 64, 8, 28672, 80, 128256
        self.bytes_p, self.bytes_compute, self.has_op, self.sp = 2, 2, True, t


@pytest.fixture(params=["cython", "python"], ids=["cython", "python"])
def api_backend(request):
    with _backend.use(request.param):
        yield request.param


def _ratio(benchmark) -> None:
    if "dropin" in MEDIANS and "estimate" in MEDIANS:
        benchmark.extra_info["dropin_over_estimate"] = MEDIANS["dropin"] / MEDIANS["estimate"]


def bench_nd_estimate_one(benchmark, api_backend):
    """estimate(units="nd"): one prepared candidate, the batch-of-one path."""
    cfg = _Config(8, 8)
    model, spec = model_from_nd(cfg), spec_from_nd(cfg)
    cluster = ndcost.Cluster("ascend-910b", num_devices=spec.num_devices)
    benchmark.group = f"ND drop-in vs estimate(nd), one candidate, {api_backend}"
    benchmark(ndcost.estimate, model, spec, cluster, units="nd", with_memory=False)
    if api_backend == "cython" and getattr(benchmark, "stats", None) is not None:
        MEDIANS["estimate"] = benchmark.stats.stats.median
        _ratio(benchmark)


def bench_nd_dropin_fresh_config(benchmark, api_backend):
    """estimate_performance(cfg) with a fresh config object every call, strategies cycling."""
    cycle = itertools.cycle(STRATEGIES)
    benchmark.group = f"ND drop-in vs estimate(nd), one candidate, {api_backend}"
    benchmark(lambda: estimate_performance(_Config(*next(cycle)), device_type="A2"))
    if api_backend == "cython" and getattr(benchmark, "stats", None) is not None:
        MEDIANS["dropin"] = benchmark.stats.stats.median
        _ratio(benchmark)
