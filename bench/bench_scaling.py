"""The default thread count against every count it could have picked, side by side in one run.

Run: ``pytest bench/bench_scaling.py --benchmark-only --benchmark-group-by=group`` (CI runs the batches
below a million: ``-k "not 1000000"``). For each batch size and unit, ``threads=None`` and every count 1..cores
(``bench/scaling.py``'s counts) are timed in every round, interleaved, best of the rounds (the benchmark
itself times the default again, for its report); ``extra_info`` holds each count's candidates per second, the count the default picked and the
CPU pressure of the run (``cpu_stall_s``: a figure taken while other jobs ran is the cores they left).

The guard is wide, as the other thread guard's: the default at least half as fast as the best count
measured (the target is as fast: "never slower than one thread, never slower than a smaller count it
could have picked"); a small batch, where the default is one thread, guards that no pool is started
for it. ``python bench/scaling.py`` writes the full table.
"""
from __future__ import annotations

import time

import pytest

from bench_estimate_many import batch, cpu_stall
from ndcost import _backend
from ndcost.price.estimate_many import estimate_many
from ndcost.price.threads import available_cores, plan
from scaling import thread_counts

#: Batch sizes: one the default prices on one thread, one it spreads, the acceptance's million.
SIZES = (2_000, 100_000, 1_000_000)
#: The default at least this fraction of the best count's throughput (a wide margin: a shared machine).
MIN_DEFAULT_SHARE = 0.5
ROUNDS = {2_000: 20, 100_000: 3, 1_000_000: 2}


@pytest.mark.parametrize("units", ["nd", "seconds"])
@pytest.mark.parametrize("size", SIZES, ids=[f"{size}" for size in SIZES])
def bench_threads_default(benchmark, size, units):
    model, cluster, cands = batch("llama3-70b", size)
    benchmark.group = f"estimate_many threads=None vs each count, llama3-70b {units}, {size:,} candidates"
    counts = thread_counts(available_cores()) + [None]
    best = {t: float("inf") for t in counts}
    stall = cpu_stall()
    with _backend.use("cython"):
        for _ in range(ROUNDS[size]):           # every count in every round: a busy spell hits them alike
            for t in counts:
                start = time.perf_counter()
                estimate_many(model, cands, cluster, units=units, threads=t)
                best[t] = min(best[t], time.perf_counter() - start)
        result = benchmark.pedantic(estimate_many, args=(model, cands, cluster),
                                    kwargs={"units": units, "threads": None}, rounds=ROUNDS[size], iterations=1)
    assert result.valid.all()
    if stall is not None:
        benchmark.extra_info["cpu_stall_s"] = cpu_stall() - stall
    benchmark.extra_info["default_threads"] = plan(size, None, None)[0]
    benchmark.extra_info.update({f"threads_{t or 'default'}_per_s": size / seconds for t, seconds in best.items()})
    default = best.pop(None)
    fastest = min(best.values())
    benchmark.extra_info["default_over_best"] = fastest / default
    assert fastest / default >= MIN_DEFAULT_SHARE, (
        f"threads=None prices {size:,} candidates at {fastest / default:.2f}x the best count "
        f"({min(best, key=best.get)} threads; guard {MIN_DEFAULT_SHARE}x, target 1x)")
