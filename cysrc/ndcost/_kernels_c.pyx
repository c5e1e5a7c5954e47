"""The compiled ndcost kernels: one include per area, each the twin of ndcost.kernels.<area>.

Directives come from setup.py only (no file header: it would override them).
"""
from libc.math cimport NAN, INFINITY

include "kernels/pipeline.pxi"
include "kernels/switches.pxi"
include "kernels/columns.pxi"
include "kernels/codes.pxi"
include "kernels/nd_ops.pxi"
include "kernels/nd_comm.pxi"
include "kernels/nd_combine.pxi"
include "kernels/memory.pxi"
include "kernels/batch.pxi"
include "kernels/seconds_ops.pxi"
include "kernels/seconds_comm.pxi"
include "kernels/seconds_moe.pxi"
include "kernels/window_attention.pxi"
include "kernels/seconds_layer.pxi"
include "kernels/seconds.pxi"
include "kernels/seconds_batch.pxi"
include "kernels/one.pxi"
include "kernels/formula_rows.pxi"
