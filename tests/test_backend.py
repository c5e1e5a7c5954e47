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
