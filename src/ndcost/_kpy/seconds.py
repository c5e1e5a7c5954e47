"""Seconds mode: a step priced from the device's rates and the links each collective crosses (oracle).

Three kernels, twins of ``cysrc/ndcost/kernels/seconds.pxi``:

* :func:`seconds_layer_times` -- one layer of each kind, per micro-batch and device: forward,
  backward and weight-gradient time, the raw communication per pass, the forward time of each
  recompute switch's ops, the parameters it holds and its model FLOPs (``SECONDS_LAYER_FIELDS``).
* :func:`seconds_stage_sums` -- per pipeline stage: the layers of the layout summed, plus the
  embedding, output and MTP heads, the data-parallel traffic and the optimizer
  (``SECONDS_STAGE_FIELDS``).
* :func:`seconds_combine` -- the pipeline schedule, the data-parallel tail and the parts; returns
  the step time.

Inputs are ND's kind table and model vector (``KIND_FIELDS``, ``MODEL_FIELDS``: the dimensions)
and the seconds groups of ``ndcost._columns``: real parameter counts per kind, a model vector, a
candidate vector and a rates vector. Layout counts are float64 (pp, K·O): the layers of kind k
running option slot o on each stage, chunks summed (``Layout.stage_counts()``).

How time is priced (sources beside each formula below):

* a GEMM is a roofline plus a fixed cost per kernel: max(FLOPs / (mm_eff·peak), bytes /
  (hbm_eff·hbm_bw)) + kernel_s. While compute-bound this is the saturating curve
  eff(F) = mm_eff·F / (F + F½), F½ = mm_eff·peak·kernel_s, in the GEMM's FLOPs; the roofline
  term makes a GEMM with a small inner dimension (attention's head dim, a thin tp-split) memory
  bound;
* an elementwise pass (norms, activations, softmax without flash, dropout, permutes) is
  bytes / (hbm_eff·hbm_bw) + kernel_s; its backward reads two tensors of the forward's size and
  writes one, 1.5x the forward's bytes;
* collectives are alpha-beta rings over the group's links (``_collective``); ranks are placed tp
  innermost, then cp, then dp (ep folded into dp), then pp (Megatron's default order).
"""
from __future__ import annotations

import math

from .._columns import (
    CAND, KIND, MODEL, PART, RATE, SECONDS_CAND, SECONDS_EXTRA, SECONDS_KIND, SECONDS_LAYER, SECONDS_MODEL,
    SECONDS_STAGE, KIND_FIELDS, MODEL_FIELDS, PART_NAMES, RATE_FIELDS, SECONDS_CAND_FIELDS,
    SECONDS_EXTRA_FIELDS, SECONDS_KIND_FIELDS, SECONDS_LAYER_FIELDS, SECONDS_MODEL_FIELDS,
    SECONDS_STAGE_FIELDS, OPTION_FULL, OPTION_SELECTIVE,
)

__all__ = ["seconds_collective", "seconds_layer_times", "seconds_stage_sums", "seconds_combine"]

NAN = math.nan

# Column indices, bound once (the kernel ABI of ndcost._columns).
_K = KIND
_M = MODEL
_SK = SECONDS_KIND
_SM = SECONDS_MODEL
_C = SECONDS_CAND
_R = RATE
_X = SECONDS_EXTRA
_L = SECONDS_LAYER
_S = SECONDS_STAGE
_P = PART
_L_COUNT = len(SECONDS_LAYER_FIELDS)
_S_COUNT = len(SECONDS_STAGE_FIELDS)
_SWITCH_FIELDS = ("sw_attBMM", "sw_headCast", "sw_dropout", "sw_softmax",
                  "sw_normOp", "sw_gather", "sw_ffAct", "sw_attUp")   # bit i of a keep mask = SWITCHES[i]
_SWITCH_COLUMNS = tuple(_L[name] for name in _SWITCH_FIELDS)
_GATHER_BIT = 5

# Collective codes of seconds_collective.
ALL_REDUCE, GATHER_OR_SCATTER, ALL_TO_ALL, SEND_RECV = 0, 1, 2, 3
# Schedule codes (SCHEDULES order).
_ONE_F_ONE_B, _INTERLEAVED, _ZERO_BUBBLE_V, _GPIPE, _SEQ1F1B = 0, 1, 2, 3, 4

#: A pointwise op's backward reads its output gradient and one saved tensor and writes its input
#: gradient -- three tensor passes where the forward makes two (read, write): 1.5x the bytes.
#: (Same count as Korthikanti et al. 2022 §4.1, who keep one input per pointwise op for backward.)
POINTWISE_BACKWARD_BYTES = 1.5
#: FlashAttention's backward recomputes the scores: 2.5x the forward's FLOPs
#: (Dao 2023, FlashAttention-2, §4.1: forward + backward = 3.5x the forward FLOPs).
FLASH_BACKWARD_FLOPS = 2.5
#: A causal FlashAttention kernel skips the blocks above the diagonal: half the score matrix
#: (Dao 2023, FlashAttention-2 §3.1.1 "causal masking ... skip about half of the blocks").
FLASH_CAUSAL_SHARE = 0.5
#: Megatron's vocab-parallel cross entropy, bytes per logit element (mpu/cross_entropy.py):
#: forward reads the 16-bit logits for the max, reads them again and writes fp32 exp (2 + 4),
#: sums them (4), normalises in place (4 + 4): 2 + 6 + 4 + 8 = 20; backward reads the fp32
#: softmax and writes the 16-bit gradient: 4 + 2 = 6. Kernels: 4 forward, 1 backward.
CE_FORWARD_BYTES = 20.0
CE_BACKWARD_BYTES = 6.0
CE_FORWARD_KERNELS = 4.0
#: The three small all-reduces of the vocab-parallel loss (max, sum, target logit), fp32 per token.
CE_ALL_REDUCES = 3.0
CE_REDUCE_BYTES = 4.0


# --------------------------------------------------------------------------- scalar pieces

def _gemm(m: float, n: float, k: float, batch: float, in_bytes: float, out_bytes: float, rate) -> float:
    """One (batched) GEMM kernel, (batch x) [m x k]·[k x n]: roofline + kernel_s; 0 when empty.

    Compute: 2·m·n·k·batch / (mm_eff·peak_mm) (MAMF, the best achievable share of peak on a
    large GEMM); memory: the inputs at in_bytes and the output at out_bytes per element, once,
    at hbm_eff·hbm_bw.
    """
    if m <= 0.0 or n <= 0.0 or k <= 0.0 or batch <= 0.0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    moved = batch * (in_bytes * (m * k + k * n) + out_bytes * m * n)
    compute = flops / (rate[_R["mm_eff"]] * rate[_R["peak_mm"]])
    memory = moved / (rate[_R["hbm_eff"]] * rate[_R["hbm_bw"]])
    return (compute if compute > memory else memory) + rate[_R["kernel_s"]]


def _pass(moved: float, kernels: float, rate) -> float:
    """Elementwise work: bytes over the achievable HBM bandwidth plus kernel_s per kernel."""
    if moved <= 0.0:
        return 0.0
    return moved / (rate[_R["hbm_eff"]] * rate[_R["hbm_bw"]]) + kernels * rate[_R["kernel_s"]]


def _ring(steps: float, share: float, moved: float, bw: float, lat: float) -> float:
    """Alpha-beta ring: steps·latency + share·bytes / bandwidth."""
    return steps * lat + share * moved / bw


def seconds_collective(op: int, moved: float, n: float, stride: float, rate) -> float:
    """Seconds of one collective over a group of *n* ranks *stride* apart (ring, alpha-beta).

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


def _cand_ok(cand, rate) -> bool:
    for name in ("b", "s", "t", "sp", "cp", "ep", "t_exp", "d", "edp", "p", "vp", "m", "seq_split",
                 "bytes_c", "bytes_mm"):
        if not cand[_C[name]] >= 1.0:
            return False
    for name in ("peak_mm", "peak_attn", "mm_eff", "attn_eff", "hbm_bw", "hbm_eff", "intra_bw",
                 "intra_eff", "inter_bw", "inter_eff", "dpn"):
        if not rate[_R[name]] > 0.0:
            return False
    return True


