"""The import graph of src/ndcost has no cycles.

Built from the AST (no module is imported), counting module-level AND function-level imports: a lazy
import inside a function still ties the two modules together, so it counts as an edge. Walks
``from . import x``, ``from .x import y``, ``from .kernels.x import y``, ``from ..pkg import x as y``, ``import ndcost.x`` and the same
forms inside functions; only imports under ``if TYPE_CHECKING:`` are left out (they never run: a type
checker's view, not a dependency). Cycles are reported as strongly connected components (Tarjan's algorithm).

Run as a script (``python tests/test_import_graph.py``) to print every component of more than one
module, or the edges of the graph with ``--edges``.
"""
import ast
import sys
from pathlib import Path

PACKAGE = "ndcost"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / "src" / PACKAGE


def module_name(path, root=PACKAGE_DIR):
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PACKAGE, *parts])


def package_of(name, path):
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def resolve_relative(package, level, target):
    base = package.split(".")
    if level > 1:
        base = base[:-(level - 1)]
    return ".".join(base + ([target] if target else []))


def _type_checking_only(node):
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def runtime_nodes(tree):
    """Every node of *tree* but the bodies of ``if TYPE_CHECKING:`` blocks (their ``else`` runs)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imported_modules(tree, name, path, known):
    """The ndcost modules that the module ``name`` (parsed as ``tree``) imports, at any depth."""
    package = package_of(name, path)
    found = set()

    def add(candidate):
        # `from .a import b` names module a.b when b is a submodule, else a name inside a.
        while candidate and candidate not in known:
            candidate = candidate.rpartition(".")[0]
        if candidate and candidate != name:
            found.add(candidate)

    for node in runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = resolve_relative(package, node.level, node.module)
            elif node.module and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
                base = node.module
            else:
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                add(submodule if submodule in known else base)
    return found


def import_graph(root=PACKAGE_DIR):
    paths = {module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    # A compiled module (its .pyi stub stands for the .so) is a node with no imports of its own.
    compiled = {module_name(stub, root) for stub in root.rglob("*.pyi")} - set(paths)
    known = set(paths) | compiled
    graph = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[name] = imported_modules(tree, name, path, known)
    graph.update({name: set() for name in compiled})
    return graph


def strongly_connected_components(graph):
    """Tarjan's algorithm, iterative (the graph is small, but recursion depth should not depend on it)."""
    index_of, lowlink, on_stack, stack, components = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index_of:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index_of[start] = lowlink[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index_of:
                    index_of[successor] = lowlink[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    lowlink[node] = min(lowlink[node], index_of[successor])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                lowlink[parent] = min(lowlink[parent], lowlink[node])
            if lowlink[node] == index_of[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def cycles(graph):
    return [component for component in strongly_connected_components(graph) if len(component) > 1]


def test_the_graph_sees_every_import_form():
    graph = import_graph()
    # One edge of each form the walk must understand, from modules that are stable homes of them.
    assert f"{PACKAGE}.kernels.pipeline" in graph[f"{PACKAGE}._kernels_py"]  # from .kernels.x import *
    assert f"{PACKAGE}.kernels" in graph                                    # a subpackage is a node
    assert f"{PACKAGE}._kernels_c" in graph[f"{PACKAGE}._backend"]          # from . import x (x compiled)
    assert f"{PACKAGE}._backend" in graph[f"{PACKAGE}.price.knapsack"]      # from .. import x
    assert f"{PACKAGE}.kernels.columns" in graph[f"{PACKAGE}.price.estimate"]  # from ..pkg import x as y
    assert graph[f"{PACKAGE}.cli.main"], "the console script imports its commands"


def test_every_import_form_is_an_edge(tmp_path):
    """A planted package: each form, at module level or inside a function, is one edge."""
    files = {
        "__init__.py": "",
        "a.py": "from . import b\n",                                  # from . import x
        "b.py": "from .c import value\n",                             # from .x import y
        "c.py": f"import {PACKAGE}.d\nvalue = 1\n",                  # import ndcost.x
        "d.py": "def late():\n    from .e import thing\n",           # relative import inside a function
        "e.py": "def late():\n    from ._k.f import g\nthing = 1\n",  # from ._k.x import y (a subpackage), lazily
        "_k/__init__.py": "",
        "_k/f.py": "from .. import a\ng = 1\n",                     # from .. import x (closes the cycle)
        "t.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import b\nelse:\n    from .c import value\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    p = PACKAGE
    assert graph[f"{p}.a"] == {f"{p}.b"} and graph[f"{p}.b"] == {f"{p}.c"} and graph[f"{p}.c"] == {f"{p}.d"}
    assert graph[f"{p}.d"] == {f"{p}.e"} and graph[f"{p}.e"] == {f"{p}._k.f"} and graph[f"{p}._k.f"] == {f"{p}.a"}
    assert graph[f"{p}.t"] == {f"{p}.c"}, "a type checker's import is no edge; its else branch is"
    assert cycles(graph) == [sorted(f"{p}.{m}" for m in ("a", "b", "c", "d", "e", "_k.f"))]


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles (strongly connected components): " + "; ".join(
        " <-> ".join(component) for component in found)


if __name__ == "__main__":
    graph = import_graph()
    if "--edges" in sys.argv:
        for name in sorted(graph):
            print(name, "->", ", ".join(sorted(graph[name])))
    for component in cycles(graph):
        print(len(component), " ".join(component))
