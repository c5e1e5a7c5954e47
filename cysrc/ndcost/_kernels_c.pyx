"""The compiled ndcost kernels: one include per area, each the twin of ndcost._kpy.<area>.

Directives come from setup.py only (no file header: it would override them).
"""
from libc.math cimport NAN, INFINITY

include "kernels/pipeline.pxi"
