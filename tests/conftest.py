"""Every numeric test runs on both backends through the ``kernels`` fixture.

The compiled half imports ``ndcost._kernels_c`` directly, bypassing the
selector, so a missing build fails loudly instead of silently testing Python
twice (propcache/multidict convention). ``--no-cython`` deselects it, for the
``NDCOST_PURE_PYTHON=1`` leg.
"""
from __future__ import annotations

import argparse
import importlib

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--cython",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the tests of the compiled backend (--no-cython skips them)",
    )


def pytest_collection_modifyitems(config, items):
    if config.getoption("--cython"):
        return
    skip = pytest.mark.skip(reason="--no-cython given")
    for item in items:
        if "cython" in item.keywords:
            item.add_marker(skip)


BACKEND_MODULES = {"cython": "ndcost._kernels_c", "python": "ndcost._kernels_py"}


@pytest.fixture(
    scope="session",
    params=[pytest.param("cython", marks=pytest.mark.cython), "python"],
    ids=["cython", "python"],
)
def backend_name(request):
    return request.param


@pytest.fixture(scope="session")
def kernels(backend_name):
    """The kernel module of one backend, imported directly."""
    return importlib.import_module(BACKEND_MODULES[backend_name])


@pytest.fixture(scope="session")
def ckernels(request):
    if not request.config.getoption("--cython"):
        pytest.skip("--no-cython given")
    return importlib.import_module("ndcost._kernels_c")


@pytest.fixture(scope="session")
def pykernels():
    return importlib.import_module("ndcost._kernels_py")


@pytest.fixture(autouse=True)
def _every_test_leaves_the_backend_it_found():
    """A test that swaps the kernels restores them (``_backend.use`` does; a monkeypatch of
    ``_backend.kernels`` inside ``use()`` once put the block's backend back at teardown, and every
    later test of the run priced on the oracle, three times slower)."""
    from ndcost import _backend

    before = _backend.kernels
    yield
    assert _backend.kernels is before, "this test left another kernels module in _backend.kernels"
