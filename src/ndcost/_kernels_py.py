"""The pure-Python oracle of every ndcost kernel.

Same names and signatures as the compiled ``ndcost._kernels_c`` (checked by
tests/test_stubs.py). Each area lives in ``ndcost._kpy.<area>``; this module
only gathers them, so that one module object is the backend.
"""
from ._kpy.pipeline import *  # noqa: F401,F403
from ._kpy import pipeline as _pipeline
from ._kpy.switches import *  # noqa: F401,F403
from ._kpy import switches as _switches
from ._kpy.nd_ops import *  # noqa: F401,F403
from ._kpy import nd_ops as _nd_ops
from ._kpy.nd_comm import *  # noqa: F401,F403
from ._kpy import nd_comm as _nd_comm
from ._kpy.nd_combine import *  # noqa: F401,F403
from ._kpy import nd_combine as _nd_combine
from ._kpy.memory import *  # noqa: F401,F403
from ._kpy import memory as _memory
from ._kpy.batch import *  # noqa: F401,F403
from ._kpy import batch as _batch
from ._kpy.seconds_ops import *  # noqa: F401,F403
from ._kpy import seconds_ops as _seconds_ops
from ._kpy.seconds_comm import *  # noqa: F401,F403
from ._kpy import seconds_comm as _seconds_comm
from ._kpy.seconds_layer import *  # noqa: F401,F403
from ._kpy import seconds_layer as _seconds_layer
from ._kpy.seconds import *  # noqa: F401,F403
from ._kpy import seconds as _seconds
from ._kpy.seconds_batch import *  # noqa: F401,F403
from ._kpy import seconds_batch as _seconds_batch
from ._kpy.one import *  # noqa: F401,F403
from ._kpy import one as _one

__all__ = [*_pipeline.__all__, *_switches.__all__, *_nd_ops.__all__, *_nd_comm.__all__, *_nd_combine.__all__,
           *_memory.__all__, *_batch.__all__, *_seconds_ops.__all__, *_seconds_comm.__all__,
           *_seconds_layer.__all__, *_seconds.__all__, *_seconds_batch.__all__, *_one.__all__]
