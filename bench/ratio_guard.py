"""The benchmarks' one assertion: compiled at least MIN_RATIO x the oracle, side by side in one run.

The guard runs inside the benchmark that completes a pair (whichever backend is timed
second), not in a test of its own: pytest-benchmark's ``--benchmark-only`` skips every
test that times nothing, so a separate guard test would never run where it matters.
Absolute times are never asserted; the margin is wide (the target is 100x, the guard 20x)
so that a noisy machine cannot fail a good change.
"""
from __future__ import annotations

MIN_RATIO = 20.0
#: Seconds mode's batch, by issue 14's acceptance: >= 50x the oracle (measured ~140x on 2 cores).
SECONDS_MIN_RATIO = 50.0
BACKENDS = ("cython", "python")


def record(benchmark, medians: dict, key: tuple, backend: str, candidates: int) -> float | None:
    """Keep this benchmark's median under (key, backend) and its candidates per second in the JSON.

    Returns the median, or None under ``--benchmark-disable`` (the function ran once, untimed).
    """
    stats = getattr(benchmark, "stats", None)
    if stats is None:
        return None
    median = stats.stats.median
    medians[(key, backend)] = median
    benchmark.extra_info["candidates"] = candidates
    benchmark.extra_info["candidates_per_second"] = candidates / median if median > 0 else float("inf")
    return median


def guard(medians: dict, key: tuple, what: str, minimum: float = MIN_RATIO) -> None:
    """Assert compiled >= *minimum* x the oracle on *key* once both backends' medians are in."""
    compiled, oracle = (medians.get((key, backend)) for backend in BACKENDS)
    if compiled is None or oracle is None:
        return
    ratio = oracle / compiled
    assert ratio >= minimum, f"compiled {what} is only {ratio:.1f}x the oracle (guard {minimum:.0f}x, target 100x)"
