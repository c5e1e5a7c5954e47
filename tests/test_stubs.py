"""The compiled module, the oracle and the stub agree on names and signatures."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import ndcost

STUB = Path(ndcost.__file__).with_name("_kernels_c.pyi")


def _public(module):
    return sorted(name for name in module.__all__)


def _stub_functions():
    tree = ast.parse(STUB.read_text())
    return {
        node.name: [arg.arg for arg in node.args.args]
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
    }


@pytest.mark.cython
def test_compiled_and_oracle_export_the_same_names(ckernels, pykernels):
    compiled = sorted(n for n in dir(ckernels) if not n.startswith("_") and callable(getattr(ckernels, n))
                      and getattr(getattr(ckernels, n), "__module__", "") == "ndcost._kernels_c")
    assert compiled == _public(pykernels)


@pytest.mark.cython
def test_signatures_match(ckernels, pykernels):
    for name in _public(pykernels):
        c_params = list(inspect.signature(getattr(ckernels, name)).parameters)
        py_params = list(inspect.signature(getattr(pykernels, name)).parameters)
        assert c_params == py_params, name


def test_stub_lists_every_kernel_with_its_parameters(pykernels):
    stub = _stub_functions()
    assert sorted(stub) == _public(pykernels)
    for name, params in stub.items():
        assert params == list(inspect.signature(getattr(pykernels, name)).parameters), name


def test_stub_is_installed_next_to_the_package():
    assert STUB.exists()
    assert Path(ndcost.__file__).with_name("py.typed").exists()
