"""The C enums of the kernel ABI are the ones ndcost/kernels/columns.py defines."""
from __future__ import annotations

from pathlib import Path

from source_tools import tool

ROOT = Path(__file__).resolve().parents[1]


def test_generated_pxi_is_in_sync():
    module = tool("gen_columns", "cysrc/ndcost/kernels/columns.pxi")
    assert (ROOT / "cysrc/ndcost/kernels/columns.pxi").read_text() == module.render(), "run: python tools/gen_columns.py"
