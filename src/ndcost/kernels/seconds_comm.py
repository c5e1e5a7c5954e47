"""Seconds mode, communication (oracle): one collective over a group's links (alpha-beta rings,
hierarchical across nodes), and how much of it a compute window hides.

Part of the seconds area (:mod:`ndcost.kernels.seconds` states how time is priced).
The twin is ``cysrc/ndcost/kernels/seconds_comm.pxi``.
"""
from __future__ import annotations

import math

from .columns import RATE, RATE_FIELDS
from .nd_ops import _check_len

__all__ = ["seconds_collective"]

NAN = math.nan

# Column indices, bound once (the kernel ABI of ndcost.kernels.columns).
_R = RATE

# Collective codes of seconds_collective.
ALL_REDUCE, GATHER_OR_SCATTER, ALL_TO_ALL, SEND_RECV = 0, 1, 2, 3


def _ring(steps: float, share: float, moved: float, bw: float, lat: float) -> float:
    """Alpha-beta ring: steps·latency + share·bytes / bandwidth."""
    return steps * lat + share * moved / bw


def seconds_collective(op: int, moved: float, n: float, stride: float, rate) -> float:
    """Seconds of one collective over a group of *n* ranks *stride* apart (ring, alpha-beta).

    *op*: 0 all-reduce, 1 reduce-scatter or all-gather, 2 all-to-all, 3 send/recv. NaN for a
    stride below 1; 0 for a group of one rank or nothing to move.

    *moved* is the collective's full buffer in bytes: the all-reduce buffer, the all-gather's
    output / reduce-scatter's input, the bytes one rank sends in an all-to-all or a send/recv.
    Bandwidths are per device per direction times their achievable share (NCCL "bus bandwidth").

    * In one node (n·stride <= devices per node): ring all-reduce 2(n-1)/n·B/bw + 2(n-1)·alpha,
      reduce-scatter / all-gather (n-1)/n·B/bw + (n-1)·alpha (Thakur, Rabenseifner & Gropp 2005,
      "Optimization of collective communication operations in MPICH", ring algorithms), all-to-all
      (n-1)/n·B/bw + (n-1)·alpha (pairwise exchange), send/recv B/bw + alpha.
    * Across nodes, hierarchical: g = devices_per_node/stride ranks of the group share a node
      (1 when stride >= devices_per_node) and N = n/g nodes. Reduce-scatter in the node, then the
      scale-out collective among N nodes on B/g per rank, then all-gather in the node: all-reduce
      2(g-1)/g·B/bw_in + 2(N-1)/N·(B/g)/bw_out (+ latencies), reduce-scatter / all-gather half of
      it. The inter-node step runs at the scale-out bandwidth of one device: a node's NICs
      (devices_per_node x inter_bw) are shared by its devices, which all take part in a
      collective of the same kind at once (every dp / cp / ep group runs together).
      All-to-all: the intra-node share (g-1)/n of B over NVLink and the rest (n-g)/n over the
      NIC run concurrently (the slower one counts). Send/recv: one scale-out hop.
    """
    _check_len(rate, "rate", len(RATE_FIELDS))
    return _collective(op, moved, n, stride, rate)


def _collective(op: int, moved: float, n: float, stride: float, rate) -> float:
    """seconds_collective without the length check (the kernels' own calls)."""
    if not stride >= 1.0:
        return NAN
    if n <= 1.0 or moved <= 0.0:
        return 0.0
    dpn = rate[_R["dpn"]]
    bw_in = rate[_R["intra_bw"]] * rate[_R["intra_eff"]]
    lat_in = rate[_R["intra_lat"]]
    bw_out = rate[_R["inter_bw"]] * rate[_R["inter_eff"]]
    lat_out = rate[_R["inter_lat"]]
    if n * stride <= dpn:  # the whole group in one node
        if op == ALL_REDUCE:
            return _ring(2.0 * (n - 1.0), 2.0 * (n - 1.0) / n, moved, bw_in, lat_in)
        if op == SEND_RECV:
            return _ring(1.0, 1.0, moved, bw_in, lat_in)
        return _ring(n - 1.0, (n - 1.0) / n, moved, bw_in, lat_in)
    g = math.floor(dpn / stride) if stride < dpn else 1.0
    if g < 1.0:
        g = 1.0
    if g > n:
        g = n
    nodes = n / g
    if op == SEND_RECV:
        return _ring(1.0, 1.0, moved, bw_out, lat_out)
    if op == ALL_TO_ALL:
        inner = _ring(g - 1.0, (g - 1.0) / n, moved, bw_in, lat_in)
        outer = _ring(n - g, (n - g) / n, moved, bw_out, lat_out)
        return inner if inner > outer else outer
    inner = _ring(g - 1.0, (g - 1.0) / g, moved, bw_in, lat_in)
    outer = _ring(nodes - 1.0, (nodes - 1.0) / nodes, moved / g, bw_out, lat_out)
    if op == ALL_REDUCE:
        return 2.0 * (inner + outer)
    return inner + outer


def _exposed(comm: float, window: float, share: float) -> float:
    """Comm left on the critical path when *share* of a compute *window* can hide it."""
    hidden = share * (window if window < comm else comm)
    return comm - hidden


def _exposed_tail(comm: float, window: float, share: float, layers: float) -> float:
    """Exposed bucketed traffic: at most *share* of *window* hides it, never the last layer's bucket.

    Megatron's overlap_grad_reduce launches a bucket's reduction as soon as its gradients are
    ready, during the last micro-batch's backward; the bucket of the stage's first layer is ready
    only when the backward ends (Megatron-LM distributed/param_and_grad_buffer.py, 2023+).
    """
    exposed = _exposed(comm, window, share)
    floor = comm / layers if layers > 1.0 else comm
    return exposed if exposed > floor else floor
