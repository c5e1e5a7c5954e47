# Stub of the compiled module ndcost._kernels_c (cysrc/ndcost/_kernels_c.pyx).
# Array arguments: the exact memoryview type is in the trailing comment.
import numpy as np
import numpy.typing as npt

_F64Array = npt.NDArray[np.float64]
_I64Array = npt.NDArray[np.int64]

# --- pipeline (kernels/pipeline.pxi) ---
def nd_straggler(stage_times: _F64Array) -> int: ...  # const double[::1]
def nd_pipeline_time(stage_times: _F64Array, micro_batch_num: int, vpp: int) -> float: ...  # const double[::1]
def nd_p2p_count(pp: int, micro_batch_num: int, vpp: int) -> float: ...
def nd_p2p_time(pp: int, micro_batch_num: int, vpp: int, straggler_time: float, sp: float, ratio: float) -> float: ...
