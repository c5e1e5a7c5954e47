"""The ND search loop's door: ``ndcost.nd.estimate_performance(cfg)`` with a fresh config object per
call (same model fields, changing strategy), beside ``estimate(units="nd")`` on prepared specs.

Run: ``pytest bench/bench_nd_dropin.py --benchmark-only --benchmark-group-by=group``. Each call of the
drop-in prices one of 16 strategies of a Llama-3-70B-sized config. Two baselines: estimate() on one
prepared strategy (issue 16's target: the drop-in at most 1.5x it), and estimate() cycling over the
same 16 prepared strategies (what the drop-in adds on top of pricing them; a changing strategy costs
estimate() itself a little more). A third drop-in benchmark prices a strategy never seen before on
every call: no cache entry, the spec built and validated (and estimate() meets a new spec object).
The compiled leg's ratios go to ``extra_info``, from the medians (``dropin_over_estimate``,
``dropin_over_estimate_same_strategies``, ``new_strategy_dropin_over_estimate``) and from the minima
(``..._min``: the least disturbed call on a shared machine).

A fourth baseline is estimate(units="nd") as called by default, memory priced too: the figure issue 16
quotes for estimate(nd) (``dropin_over_estimate_default``).

One ratio is asserted, with a wide margin: the drop-in at most MAX_DROPIN_RATIO (2.0) x estimate() on
the same strategies, from the minima or the medians, whichever is smaller (issue 16's target is 1.5x). Measured on 2026-12-04 (four runs,
2 cores): estimate() memory off ~4.5 us, drop-in ~6.6 us: 1.38-1.51x estimate() memory off on one
strategy (the like-for-like call: the drop-in prices no memory, as ND's does not), 1.15-1.20x
estimate() as called by default; the drop-in's own share is keying its cache by the config's
attribute names and values (~1 us) and its dispatch. The medians' ratios alone would be a poor guard: on the shared
2-core machine this was written on they moved between 0.8 and 1.8 from run to run. Absolute times are
never asserted.
"""
from __future__ import annotations

import itertools

import pytest

import ndcost
from ndcost import _backend
from ndcost.nd import estimate_performance, model_from_nd, spec_from_nd

STRATEGIES = [(t, p) for t in (1, 2, 4, 8) for p in (1, 2, 4, 8)]
#: The compiled leg's statistics ("median", "min") per benchmark ("dropin", "estimate", "cycling", ...).
STATS: dict[str, dict[str, float]] = {}
#: extra_info name -> (numerator, denominator) benchmarks.
RATIOS = {"dropin_over_estimate": ("dropin", "estimate"),
          "dropin_over_estimate_default": ("dropin", "estimate_default"),
          "dropin_over_estimate_same_strategies": ("dropin", "cycling"),
          "new_strategy_dropin_over_estimate": ("new_strategy", "estimate")}
#: The guard on the smaller of dropin_over_estimate_same_strategies_min and its medians' ratio (the target is 1.5).
MAX_DROPIN_RATIO = 2.0


class _Config:
    """An ND cost-model config as a search loop builds it: plain attributes, ND's field names."""

    def __init__(self, t: int, p: int, m: int = 16) -> None:
        self.d, self.t, self.p, self.vp, self.m, self.b, self.s = 64 // (t * p), t, p, 1, m, 1, 4096
        self.h, self.a, self.n_kv, self.hff, self.n_lay, self.v = 8192, 64, 8, 28672, 80, 128256
        self.bytes_p, self.bytes_compute, self.has_op, self.sp = 2, 2, True, t


def _prepared(t: int, p: int) -> tuple:
    cfg = _Config(t, p)
    model, spec = model_from_nd(cfg), spec_from_nd(cfg)
    return model, spec, ndcost.Cluster("ascend-910b", num_devices=spec.num_devices)


@pytest.fixture(params=["cython", "python"], ids=["cython", "python"])
def api_backend(request):
    with _backend.use(request.param):
        yield request.param


def _record(benchmark, api_backend: str, name: str) -> None:
    """Keep the compiled leg's statistics; write every ratio both of whose benchmarks have run."""
    stats = getattr(benchmark, "stats", None)
    if api_backend != "cython" or stats is None:
        return
    STATS[name] = {"median": stats.stats.median, "min": stats.stats.min}
    for ratio, (top, bottom) in RATIOS.items():
        if name in (top, bottom) and top in STATS and bottom in STATS:
            benchmark.extra_info[ratio] = STATS[top]["median"] / STATS[bottom]["median"]
            benchmark.extra_info[f"{ratio}_min"] = STATS[top]["min"] / STATS[bottom]["min"]
    # a real regression raises the ratio of the minima and of the medians alike; one round disturbed on a
    # loaded machine moves one of them (.ci/run read 2.08x from the minima once, 1.4-1.5x on reruns)
    both = [benchmark.extra_info.get(f"dropin_over_estimate_same_strategies{end}") for end in ("_min", "")]
    guarded = None if None in both else min(both)
    assert guarded is None or guarded <= MAX_DROPIN_RATIO, (
        f"the ND drop-in costs {guarded:.2f}x estimate(nd) on the same strategies "
        f"(guard {MAX_DROPIN_RATIO}x, target 1.5x)")


def bench_nd_estimate_one(benchmark, api_backend):
    """estimate(units="nd"): one prepared candidate, the batch-of-one path."""
    model, spec, cluster = _prepared(8, 8)
    benchmark.group = f"ND drop-in vs estimate(nd), one candidate, {api_backend}"
    benchmark(ndcost.estimate, model, spec, cluster, units="nd", with_memory=False)
    _record(benchmark, api_backend, "estimate")


def bench_nd_estimate_one_default(benchmark, api_backend):
    """estimate(units="nd") as called by default (memory priced too): issue 16's reference figure
    ("estimate(units="nd") ... with memory"); the drop-in prices no memory, as ND's does not."""
    model, spec, cluster = _prepared(8, 8)
    benchmark.group = f"ND drop-in vs estimate(nd), one candidate, {api_backend}"
    benchmark(ndcost.estimate, model, spec, cluster, units="nd")
    _record(benchmark, api_backend, "estimate_default")


def bench_nd_estimate_cycling(benchmark, api_backend):
    """estimate(units="nd") on the drop-in's 16 strategies, prepared, cycling as the drop-in does."""
    cycle = itertools.cycle([_prepared(t, p) for t, p in STRATEGIES])
    benchmark.group = f"ND drop-in vs estimate(nd), one candidate, {api_backend}"
    benchmark(lambda: ndcost.estimate(*next(cycle), units="nd", with_memory=False))
    _record(benchmark, api_backend, "cycling")


def bench_nd_dropin_fresh_config(benchmark, api_backend):
    """estimate_performance(cfg) with a fresh config object every call, strategies cycling."""
    cycle = itertools.cycle(STRATEGIES)
    benchmark.group = f"ND drop-in vs estimate(nd), one candidate, {api_backend}"
    benchmark(lambda: estimate_performance(_Config(*next(cycle)), device_type="A2"))
    _record(benchmark, api_backend, "dropin")


def bench_nd_dropin_new_strategy(benchmark, api_backend):
    """estimate_performance(cfg) on a strategy it has not seen (a new micro-batch count every call):
    a search that prices each candidate once builds and validates every ExecSpec (the Model is cached)."""
    counts = itertools.count(8)      # micro-batches >= pp (8)
    benchmark.group = f"ND drop-in vs estimate(nd), one candidate, {api_backend}"
    benchmark(lambda: estimate_performance(_Config(8, 8, next(counts)), device_type="A2"))
    _record(benchmark, api_backend, "new_strategy")
