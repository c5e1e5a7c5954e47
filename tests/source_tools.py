"""The repository's code generators (tools/), loaded by the tests that check their output is current."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tool(name: str, *needed: str) -> ModuleType:
    """tools/<name>.py as a module; the test is skipped where the source tree is not there (an installed
    wheel), or lacks one of the *needed* paths (relative to the repository's root)."""
    path = ROOT / "tools" / f"{name}.py"
    if not path.exists() or not all((ROOT / other).exists() for other in needed):
        pytest.skip("source tree not available (installed wheel)")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
