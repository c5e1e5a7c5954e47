"""Benchmarks: both backends side by side, per-call overhead and throughput.

Run: ``pytest bench --benchmark-only --benchmark-group-by=group``. The CI test
job runs them once with ``--benchmark-disable`` so that they cannot rot; only
ratios measured in one run are ever asserted, never absolute times.
"""
from __future__ import annotations

import importlib

import pytest

BACKENDS = {"cython": "ndcost._kernels_c", "python": "ndcost._kernels_py"}


@pytest.fixture(params=list(BACKENDS), ids=list(BACKENDS))
def kernels(request):
    return importlib.import_module(BACKENDS[request.param])
