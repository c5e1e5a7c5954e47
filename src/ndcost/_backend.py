"""The one place that chooses the numeric backend (docs/ARCHITECTURE.md, "The backend switch").

``NDCOST_PURE_PYTHON`` is truthy when set and not ``"0"``; ``setup.py`` reads the
same variable, so a pure build and a pure import mean the same thing. A
non-CPython interpreter always takes the pure-Python twin. When the compiled
module fails to load although nobody asked for pure Python, ndcost still works,
on the oracle, and says so once with a RuntimeWarning -- only when a compiled
module is installed and does not load (a broken build, another interpreter's
ABI): a pure wheel ships none, and is silent (setup.py already said so when a
source install could not compile).
"""
from __future__ import annotations

import os
import sys
import warnings
from typing import TYPE_CHECKING

PURE_PYTHON_REQUESTED = os.environ.get("NDCOST_PURE_PYTHON", "") not in ("", "0")


def compiled_module_installed() -> bool:
    """Whether a compiled ``_kernels_c`` file sits in the package (loadable or not)."""
    from importlib.machinery import EXTENSION_SUFFIXES
    from pathlib import Path

    here = Path(__file__).parent
    return any((here / f"_kernels_c{suffix}").exists() for suffix in EXTENSION_SUFFIXES)

if TYPE_CHECKING:  # one consistent view for type checkers
    from . import _kernels_py as kernels
elif PURE_PYTHON_REQUESTED or sys.implementation.name != "cpython":
    from . import _kernels_py as kernels
else:
    try:
        from . import _kernels_c as kernels
    except ImportError as exc:  # no compiler at install time, a pure wheel, or a broken build
        if compiled_module_installed():
            warnings.warn(
                f"ndcost's compiled core is installed but does not load ({exc}); using the pure-Python backend",
                RuntimeWarning,
                stacklevel=2,
            )
        from . import _kernels_py as kernels

BACKEND: str = "cython" if kernels.__name__.endswith("_c") else "python"

__all__ = ["BACKEND", "PURE_PYTHON_REQUESTED", "kernels", "use"]


def use(name: str):
    """Context manager: run the API on one backend ("cython" or "python"), for tests and benchmarks.

    Every module calls ``_backend.kernels.<name>`` at call time, so swapping the
    module object here switches the whole API; it is restored on exit.
    """
    import contextlib
    import importlib

    modules = {"cython": "ndcost._kernels_c", "python": "ndcost._kernels_py"}

    @contextlib.contextmanager
    def _swap():
        global kernels
        previous = kernels
        kernels = importlib.import_module(modules[name])
        try:
            yield kernels
        finally:
            kernels = previous

    return _swap()
