"""Declares the compiled extension; every other setting lives in pyproject.toml.

Three switches, each with one meaning (docs/ARCHITECTURE.md, "The backend switch"):

* ``NDCOST_PURE_PYTHON=1``: build no extension (a ``py3-none-any`` wheel); also
  read at import time by ``ndcost._backend``.
* ``NDCOST_REQUIRE_CYTHON=1``: a missing Cython or a failed compile is fatal, so
  a platform wheel can never silently hold only Python.
* ``NDCOST_CYTHON_DEBUG=1``: bounds, wraparound and initialisation checks on,
  and an annotated HTML of the generated C.
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


PURE = _flag("NDCOST_PURE_PYTHON")
REQUIRE = _flag("NDCOST_REQUIRE_CYTHON")
DEBUG = _flag("NDCOST_CYTHON_DEBUG")

# One place for the directives; no file headers (a header overrides these, sage#12468).
CYTHON_DIRECTIVES = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "nonecheck": False,
    "cdivision": True,  # C division: both backends guard every division explicitly
    "cpow": True,
    "embedsignature": True,
    "binding": True,  # makes inspect.signature work on compiled functions (stub parity test)
}


class OptionalBuildExt(build_ext):
    """A failed compile falls back to the pure-Python backend unless REQUIRE is set."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any compiler failure
            if REQUIRE:
                raise
            print(f"ndcost: building the compiled core failed ({exc}); the pure-Python backend will be used")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            if REQUIRE:
                raise
            print(f"ndcost: compiling {ext.name} failed ({exc}); the pure-Python backend will be used")


def ext_modules():
    if PURE or sys.implementation.name != "cpython":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        if REQUIRE:
            raise
        print("ndcost: Cython is not available; the pure-Python backend will be used")
        return []
    extension = Extension(
        "ndcost._kernels_c",
        ["cysrc/ndcost/_kernels_c.pyx"],
        extra_compile_args=["-O3"] if not DEBUG else ["-O0", "-g"],
    )
    return cythonize(
        [extension],
        compiler_directives=CYTHON_DIRECTIVES,
        include_path=["cysrc", "cysrc/ndcost"],
        annotate=DEBUG,
    )


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
