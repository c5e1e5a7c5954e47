"""The package's layers import in one direction, and no module is long (issue 16; docs/ARCHITECTURE.md).

The layers, lowest first: the foundations every layer may use (``errors``, ``limits``, ``files``, ``suggest``,
``_version``), ``spec`` (what the user states), ``kernels`` (the kernel ABI and the pure-Python twins, with the
backend switch and the oracle's gathering module, which docs/ARCHITECTURE.md's backend switch keeps at the package's top), ``tables`` (specs
turned into the kernels' arrays), ``price`` (estimate, batches, plans, search; the ND drop-in ``ndcost.nd``),
``io`` (measured runs, calibration, validation, launch flags, plots) and ``cli``. A module imports from its own
layer and lower ones only; the graph is tests/test_import_graph.py's (imports inside functions count).
"""
from __future__ import annotations

import pytest

from test_import_graph import PACKAGE, PACKAGE_DIR, import_graph

LAYERS = ("base", "spec", "kernels", "tables", "price", "io", "cli")
#: Modules at the package's top and the layer each belongs to (a subpackage names its own).
TOP = {"errors": "base", "limits": "base", "files": "base", "suggest": "base", "_version": "base",
       "_backend": "kernels", "_kernels_py": "kernels", "_kernels_c": "kernels", "nd": "price"}
MAX_LINES = 600
GRAPH = import_graph()


def layer(name: str) -> str | None:
    """The layer of module *name*; None for the package itself (its public re-exports)."""
    parts = name.split(".")
    if len(parts) == 1:
        return None
    return parts[1] if parts[1] in LAYERS else TOP.get(parts[1], "unassigned")


def upward_imports(graph: dict) -> list[str]:
    return sorted(f"{name} ({layer(name)}) imports {target} ({layer(target)})"
                  for name, targets in graph.items() if layer(name) is not None
                  for target in targets if layer(target) is not None
                  and LAYERS.index(layer(target)) > LAYERS.index(layer(name)))


def test_every_module_has_a_layer():
    assert [name for name in GRAPH if layer(name) == "unassigned"] == []


def test_layers_import_downwards_only():
    assert upward_imports(GRAPH) == []


def test_no_module_imports_the_package_itself():
    """The package's __init__ imports every layer: a module importing it would close a cycle."""
    assert [name for name, targets in GRAPH.items() if PACKAGE in targets] == []


def test_an_upward_import_is_found():
    planted = {f"{PACKAGE}.spec.model": {f"{PACKAGE}.price.estimate"}, f"{PACKAGE}.price.estimate": set()}
    assert upward_imports(planted) == [f"{PACKAGE}.spec.model (spec) imports {PACKAGE}.price.estimate (price)"]


@pytest.mark.parametrize("path", sorted(PACKAGE_DIR.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_no_module_over_600_lines(path):
    lines = path.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{path.name} has {lines} lines: split it by concept"


#: Module names held by more than one layer, each the same concept at each layer's level (docs/ARCHITECTURE.md,
#: "Module names"): name -> the layers that hold it.
SHARED_NAMES = {
    "memory": {"kernels", "tables"}, "seconds": {"kernels", "tables"}, "formula_rows": {"kernels", "tables"},
    "seconds_batch": {"kernels", "price"}, "estimate": {"price", "cli"}, "search": {"price", "cli"},
    "calibrate": {"io", "cli"}, "compare": {"io", "cli"}, "plot": {"io", "cli"},
}


def test_a_module_name_means_one_thing_across_layers():
    """A name in two layers is one concept at two levels, listed above; "validate" is only the comparison with
    measured runs (the joint rules of a strategy are tables/joint_rules.py)."""
    held: dict = {}
    for path in PACKAGE_DIR.glob("*/*.py"):
        if path.stem != "__init__" and path.parent.name in LAYERS:
            held.setdefault(path.stem, set()).add(path.parent.name)
    shared = {name: layers for name, layers in held.items() if len(layers) > 1}
    assert shared == SHARED_NAMES
    assert {layer for name, layers in held.items() if name.startswith("validat") for layer in layers} <= {"io", "cli"}
