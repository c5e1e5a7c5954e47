"""`.ci/run` runs the README's test command exactly (what a newcomer waits for), then the slow tests."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not (ROOT / ".ci" / "run").exists(), reason="a source tree without .ci/ (an sdist)")
def test_ci_runs_the_readme_test_command_exactly():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = next(line for line in readme.splitlines()
                   if line.startswith('python -m pip install ".[test]" && python -m pytest'))
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    # .ci/run installs quietly (-q); otherwise the line is the README's
    assert command.replace("pip install ", "pip install -q ", 1) in ci.splitlines()
    assert 'python -m pytest -q -p no:cacheprovider -m slow' in ci
