"""Benchmarks: both backends side by side, per-call overhead and throughput.

Run: ``pytest bench --benchmark-only --benchmark-group-by=group``. CI (``.ci/run``)
runs them timed, without the million-candidate batches, and keeps ``.ci-bench.json``;
only ratios measured in one run are ever asserted, never absolute times.
"""
from __future__ import annotations

import importlib

import pytest

BACKENDS = {"cython": "ndcost._kernels_c", "python": "ndcost._kernels_py"}


@pytest.fixture(params=list(BACKENDS), ids=list(BACKENDS))
def kernels(request):
    return importlib.import_module(BACKENDS[request.param])


def pytest_terminal_summary(terminalreporter):
    """Candidates per second of the estimate_many benchmarks, and compiled vs oracle, per batch."""
    from bench_estimate_many import MEDIANS

    if not MEDIANS:
        return
    write = terminalreporter.write_line
    terminalreporter.section("ndcost throughput (medians of this run)")
    keys = sorted({key for key, _ in MEDIANS}, key=str)
    for key in keys:
        label = f"estimate(), one candidate, {key[1]}" if key[0] == "one" else f"estimate_many, {key[1]}, {key[2]:,}"
        count = 1 if key[0] == "one" else key[2]
        cells = []
        for backend in ("cython", "python"):
            median = MEDIANS.get((key, backend))
            if median is not None:
                cells.append(f"{backend}: {median * 1e6 / count:9.3f} us/cand  {count / median:13,.0f} cand/s")
        ratio = ""
        if (key, "cython") in MEDIANS and (key, "python") in MEDIANS:
            ratio = f"  compiled = {MEDIANS[(key, 'python')] / MEDIANS[(key, 'cython')]:.0f}x oracle"
        if key[0] == "one" and key[1].endswith(", seconds"):
            nd_key = ("one", key[1][: -len(", seconds")])
            units = [f"{backend} seconds/nd = {MEDIANS[(key, backend)] / MEDIANS[(nd_key, backend)]:.2f}"
                     for backend in ("cython", "python") if (key, backend) in MEDIANS and (nd_key, backend) in MEDIANS]
            ratio += ("  " + ", ".join(units)) if units else ""
        write(f"{label:40s} " + " | ".join(cells) + ratio)
