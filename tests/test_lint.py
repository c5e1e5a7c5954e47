"""The source tree lints clean of what pyflakes finds -- undefined names, unused imports and variables, f-strings
without fields -- through flake8's F checks as ``.flake8`` configures them (its per-file exceptions say why).
Style is not checked. Skipped where flake8 is not installed (the ``test`` extra installs it)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(os.environ.get("NDCOST_PURE_PYTHON") == "1", reason="the source does not depend on the backend: "
                    "linted once, on the compiled leg")
def test_pyflakes_finds_nothing():
    pytest.importorskip("flake8")
    if not (ROOT / ".flake8").is_file():
        pytest.skip("not a source checkout")
    done = subprocess.run([sys.executable, "-m", "flake8", "src", "tools", "bench", "tests"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
