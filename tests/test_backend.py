"""The backend switch: one environment variable, read at import."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import ndcost


def _backend_in_subprocess(env_value):
    env = dict(os.environ)
    env.pop("NDCOST_PURE_PYTHON", None)
    if env_value is not None:
        env["NDCOST_PURE_PYTHON"] = env_value
    out = subprocess.run(
        [sys.executable, "-c", "import ndcost; print(ndcost.BACKEND)"],
        env=env, capture_output=True, text=True, check=True,
    )
    return out.stdout.strip()


def test_backend_is_a_known_name():
    assert ndcost.BACKEND in ("cython", "python")


def test_pure_python_env_forces_the_oracle():
    assert _backend_in_subprocess("1") == "python"


@pytest.mark.cython
def test_compiled_backend_is_the_default(ckernels):
    assert _backend_in_subprocess(None) == "cython"
    assert _backend_in_subprocess("0") == "cython"


def _import_copy(tmp_path, with_broken_module: bool):
    """`import ndcost` from a copy of the package with no compiled core (a pure wheel's layout), or with
    a compiled core that cannot load (garbage bytes under the extension's name)."""
    import shutil
    import subprocess
    import sys
    from importlib.machinery import EXTENSION_SUFFIXES
    from pathlib import Path

    import ndcost

    source = Path(ndcost.__file__).parent
    target = tmp_path / "ndcost"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("_kernels_c*.so", "_kernels_c*.pyd", "__pycache__"))
    if with_broken_module:
        (target / f"_kernels_c{EXTENSION_SUFFIXES[0]}").write_bytes(b"not a shared object")
    env = {key: value for key, value in os.environ.items() if key != "NDCOST_PURE_PYTHON"}
    env["PYTHONPATH"] = str(tmp_path)
    return subprocess.run([sys.executable, "-W", "always", "-c", "import ndcost; print(ndcost.BACKEND)"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)


def test_a_pure_install_imports_silently(tmp_path):
    result = _import_copy(tmp_path, with_broken_module=False)
    assert result.returncode == 0 and result.stdout.strip() == "python"
    assert "RuntimeWarning" not in result.stderr, result.stderr


def test_a_compiled_core_that_does_not_load_says_so(tmp_path):
    result = _import_copy(tmp_path, with_broken_module=True)
    assert result.returncode == 0 and result.stdout.strip() == "python"
    assert "installed but does not load" in result.stderr
