"""The C enums of the kernel ABI are the ones ndcost/kernels/columns.py defines."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_generated_pxi_is_in_sync():
    pxi = ROOT / "cysrc/ndcost/kernels/columns.pxi"
    gen = ROOT / "tools/gen_columns.py"
    if not pxi.exists() or not gen.exists():
        pytest.skip("source tree not available (installed wheel)")
    spec = importlib.util.spec_from_file_location("gen_columns", gen)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert pxi.read_text() == module.render(), "run: python tools/gen_columns.py"
