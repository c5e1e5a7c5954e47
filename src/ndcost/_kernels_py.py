"""The pure-Python oracle of every ndcost kernel.

Same names and signatures as the compiled ``ndcost._kernels_c`` (checked by
tests/test_stubs.py). Each area lives in ``ndcost.kernels.<area>``; this module
only gathers them, so that one module object is the backend.
"""
from .kernels.pipeline import *  # noqa: F401,F403
from .kernels import pipeline as _pipeline
from .kernels.switches import *  # noqa: F401,F403
from .kernels import switches as _switches
from .kernels.nd_ops import *  # noqa: F401,F403
from .kernels import nd_ops as _nd_ops
from .kernels.nd_comm import *  # noqa: F401,F403
from .kernels import nd_comm as _nd_comm
from .kernels.nd_combine import *  # noqa: F401,F403
from .kernels import nd_combine as _nd_combine
from .kernels.memory import *  # noqa: F401,F403
from .kernels import memory as _memory
from .kernels.batch import *  # noqa: F401,F403
from .kernels import batch as _batch
from .kernels.seconds_ops import *  # noqa: F401,F403
from .kernels import seconds_ops as _seconds_ops
from .kernels.seconds_comm import *  # noqa: F401,F403
from .kernels import seconds_comm as _seconds_comm
from .kernels.seconds_moe import *  # noqa: F401,F403
from .kernels import seconds_moe as _seconds_moe
from .kernels.seconds_layer import *  # noqa: F401,F403
from .kernels import seconds_layer as _seconds_layer
from .kernels.seconds import *  # noqa: F401,F403
from .kernels import seconds as _seconds
from .kernels.seconds_batch import *  # noqa: F401,F403
from .kernels import seconds_batch as _seconds_batch
from .kernels.one import *  # noqa: F401,F403
from .kernels import one as _one
from .kernels.formula_rows import *  # noqa: F401,F403
from .kernels import formula_rows as _formula_rows
from .kernels.constants import *  # noqa: F401,F403
from .kernels import constants as _constants

__all__ = [*_pipeline.__all__, *_switches.__all__, *_nd_ops.__all__, *_nd_comm.__all__, *_nd_combine.__all__,
           *_memory.__all__, *_batch.__all__, *_seconds_ops.__all__, *_seconds_comm.__all__, *_seconds_moe.__all__,
           *_seconds_layer.__all__, *_seconds.__all__, *_seconds_batch.__all__, *_one.__all__,
           *_formula_rows.__all__, *_constants.__all__]
