"""The pure-Python oracle of every ndcost kernel.

Same names and signatures as the compiled ``ndcost._kernels_c`` (checked by
tests/test_stubs.py). Each area lives in ``ndcost._kpy.<area>``; this module
only gathers them, so that one module object is the backend.
"""
from ._kpy.pipeline import *  # noqa: F401,F403
from ._kpy import pipeline as _pipeline

__all__ = [*_pipeline.__all__]
