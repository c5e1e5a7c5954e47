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

* a GEMM is a roofline plus a fixed cost per kernel: max(FLOPs / (mm_eff·peak)·(1 + 1/(2w)),
  bytes / (hbm_eff·hbm_bw)) + kernel_s, with w the waves of 256x128 output tiles over the SMs
  (expected wave quantization). While compute-bound this is a saturating curve in the GEMM's
  size: in its FLOPs F through the fixed cost, eff = mm_eff·F/(F + F½) with
  F½ = mm_eff·peak·kernel_s, and in its output m·n through the waves; the roofline term makes a
  GEMM with a small inner dimension (attention's head dim, a thin tp split) memory-bound;
* an elementwise pass (norms, activations, softmax without flash, dropout, permutes) is
  bytes / (hbm_eff·hbm_bw) + kernel_s; its backward reads two tensors of the forward's size and
  writes one, 1.5x the forward's bytes;
* collectives are alpha-beta rings over the group's links (``_collective``); ranks are placed tp
  innermost, then cp, then dp (ep folded into dp), then pp (Megatron's default order);
* the training software's figures ride in the rates vector (``Rates.for_software``): without
  gradient-accumulation fusion each layer's backward adds a pass over its parameters (read the
  16-bit gradient and the main one, write the main one); a ZeRO-3 fetch slower than NCCL
  (z3_fetch_bw) prices the gathered bytes at its rate, z3_rc_gather gathers again for the
  recompute forward, z3_grad_ar all-reduces the gradients.
"""
from __future__ import annotations

import math

from ..mamba import SELECTIVE_SCAN_FLOPS   # Mamba-1's scan FLOPs per token, channel and state

from .._columns import (
    KIND, MODEL, PART, RATE, SECONDS_CAND, SECONDS_EXTRA, SECONDS_KIND, SECONDS_LAYER, SECONDS_MODEL,
    SECONDS_STAGE, KIND_FIELDS, MODEL_FIELDS, PART_NAMES, RATE_FIELDS, SECONDS_CAND_FIELDS,
    SECONDS_EXTRA_FIELDS, SECONDS_KIND_FIELDS, SECONDS_LAYER_FIELDS, SECONDS_MODEL_FIELDS,
    SECONDS_STAGE_FIELDS, HYPER_POLICY_MASK, OPTION_FULL, OPTION_SELECTIVE,
)
from .nd_ops import _check_len

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
#: (The saved tensor is the one Korthikanti et al. 2022 §4.1 count as stored for each op.)
POINTWISE_BACKWARD_BYTES = 1.5
#: FlashAttention's backward recomputes the scores: 2.5x the forward's FLOPs, and a causal kernel
#: skips the blocks above the diagonal: half of 4·b·s²·heads·d -- the accounting of
#: Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py flops() (f // 2 if causal;
#: 2.5·f backward), the one its published utilization (rates.attention_efficiency) is measured in.
#: Token mixers of a kind (the ``mixer`` column): attention (full, MLA, gated DeltaNet), a Mamba-2 mixer,
#: none (an MLP-only block of a hybrid stack).
MIXER_ATTENTION, MIXER_MAMBA, MIXER_NONE, MIXER_MAMBA1 = 0.0, 1.0, 2.0, 3.0

#: A bidirectional kind (a vision encoder) or a windowed one runs every block it meets: no share.
FLASH_BACKWARD_FLOPS = 2.5
FLASH_CAUSAL_SHARE = 0.5
#: Megatron's vocab-parallel cross entropy, bytes per logit element (mpu/cross_entropy.py):
#: forward reads the 16-bit logits for the max, reads them again and writes fp32 exp (2 + 4),
#: sums them (4), normalises in place (4 + 4): 2 + 6 + 4 + 8 = 20; backward reads the fp32
#: softmax and writes the 16-bit gradient: 4 + 2 = 6. Kernels: 4 forward, 1 backward.
CE_FORWARD_BYTES = 20.0
CE_BACKWARD_BYTES = 6.0
#: Gemma 2's final-logit soft-capping, cap·tanh(logits/cap) (modeling_gemma2): an elementwise pass over the
#: 16-bit logits, read + write, as one fused kernel (an estimate: eager runs divide, tanh, multiply as 3).
SOFTCAP_BYTES = 4.0
CE_FORWARD_KERNELS = 4.0
#: An RMSNorm written in PyTorch ops and run eagerly (torchtitan@9dec370 torchtitan/models/norms.py
#: RMSNorm: ``(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * weight``), per
#: element: upcast (read 16-bit, write 4), pow (4 + 4), mean (4), scale (4 + 4), downcast (4 +
#: 16-bit), weight (16-bit + 16-bit): 28 fp32 bytes plus 4 16-bit ones, in 8 kernels (with the
#: tiny add and rsqrt over the row means).
EAGER_RMSNORM_FP32_BYTES = 28.0
EAGER_RMSNORM_KERNELS = 8.0
#: torchtitan's apply_rotary_emb (llama/model.py@9dec370): ``view_as_complex(x.float())``,
#: multiply by freqs_cis, ``view_as_real(...).type_as(x)``: upcast (16-bit + 4), complex multiply
#: (4 + 4), downcast (4 + 16-bit): 16 fp32 bytes plus 2 16-bit ones per element, 3 kernels a tensor.
EAGER_ROPE_FP32_BYTES = 16.0
EAGER_ROPE_KERNELS = 3.0
#: Unfused SwiGLU, ``F.silu(w1(x)) * w3(x)`` (torchtitan FeedForward): silu reads and writes the
#: gate (2 passes), the product reads two and writes one (3): 5 passes of the width, in 2 kernels.
EAGER_SWIGLU_PASSES = 5.0
#: The three small all-reduces of the vocab-parallel loss (max, sum, target logit), fp32 per token.
CE_ALL_REDUCES = 3.0
CE_REDUCE_BYTES = 4.0


# --------------------------------------------------------------------------- scalar pieces

def _gemm(m: float, n: float, k: float, batch: float, in_bytes: float, out_bytes: float, rate,
          sixteen: bool = False) -> float:
    """One (batched) GEMM kernel, (batch x) [m x k]·[k x n]: roofline + kernel_s; 0 when empty.

    Compute: 2·m·n·k·batch / (mm_eff·peak_mm) (MAMF, the best achievable share of peak on a
    large GEMM), or at the 16-bit rate (mm16_eff·peak_attn) for a GEMM that stays 16-bit under
    fp8 (*sixteen*: the output head, the router, the attention BMMs); memory: the inputs at
    in_bytes and the output at out_bytes per element, once, at hbm_eff·hbm_bw.
    """
    if m <= 0.0 or n <= 0.0 or k <= 0.0 or batch <= 0.0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    moved = batch * (in_bytes * (m * k + k * n) + out_bytes * m * n)
    # Wave quantization (NVIDIA, Matrix Multiplication Background User's Guide §3.2): the output
    # is cut into tiles, one per SM at a time; w = outputs / (SMs x tile) waves run, the last one
    # partly idle: (w + wave_tail) waves of time for w of work. The guide's worst case leaves half
    # a wave idle on average (0.5); the device's rates carry the share its cuBLAS really leaves,
    # measured by shape (Rates.gemm_wave_tail: Hopper's persistent kernels leave little).
    waves = batch * m * n / rate[_R["wave"]]
    if sixteen:
        peak = rate[_R["mm16_eff"]] * rate[_R["peak_attn"]]
    else:
        peak = rate[_R["mm_eff"]] * rate[_R["peak_mm"]]
    compute = flops / peak * (1.0 + rate[_R["wave_tail"]] / waves)
    memory = moved / (rate[_R["hbm_eff"]] * rate[_R["hbm_bw"]])
    return (compute if compute > memory else memory) + rate[_R["kernel_s"]]


def _cast(elements: float, cand, rate) -> float:
    """Casting *elements* 16-bit values to fp8 for a GEMM: 0 unless the GEMMs run fp8 (bytes_mm 1).

    f8_cast_b bytes move per element (the recipe's passes: TE's fused cast-transpose reads 2 and
    writes 1 + 1 under delayed scaling; current scaling first reads the tensor once more for its
    amax) in f8_cast_k kernels (``Rates.fp8_recipe``). Checked against public fp8 GEMM
    measurements in tests/test_seconds_fp8.py.
    """
    if cand[_C["bytes_mm"]] != 1.0 or elements <= 0.0:
        return 0.0
    return _pass(rate[_R["f8_cast_b"]] * elements, rate[_R["f8_cast_k"]], rate)


def _pass(moved: float, kernels: float, rate) -> float:
    """Elementwise work: bytes over the achievable HBM bandwidth plus kernel_s per kernel."""
    if moved <= 0.0:
        return 0.0
    return moved / (rate[_R["hbm_eff"]] * rate[_R["hbm_bw"]]) + kernels * rate[_R["kernel_s"]]


def _fill(out, count: int, value: float) -> None:
    """out[0:count] = value (a row zeroed before its sums, or NaN for a row that is not priced)."""
    for i in range(count):
        out[i] = value


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


def _cand_ok(cand, rate) -> bool:
    for name in ("b", "s", "t", "sp", "cp", "ep", "t_exp", "d", "edp", "p", "vp", "m", "seq_split",
                 "bytes_c", "bytes_mm"):
        if not cand[_C[name]] >= 1.0:
            return False
    for name in ("peak_mm", "peak_attn", "mm_eff", "attn_eff", "hbm_bw", "hbm_eff", "intra_bw",
                 "intra_eff", "inter_bw", "inter_eff", "dpn", "wave"):
        if not rate[_R[name]] > 0.0:
            return False
    return True


def _exposed_tail(comm: float, window: float, share: float, layers: float) -> float:
    """Exposed bucketed traffic: at most *share* of *window* hides it, never the last layer's bucket.

    Megatron's overlap_grad_reduce launches a bucket's reduction as soon as its gradients are
    ready, during the last micro-batch's backward; the bucket of the stage's first layer is ready
    only when the backward ends (Megatron-LM distributed/param_and_grad_buffer.py, 2023+).
    """
    exposed = _exposed(comm, window, share)
    floor = comm / layers if layers > 1.0 else comm
    return exposed if exposed > floor else floor


def _mm3(m: float, n: float, k: float, chunks: float, cand, rate, out3, sixteen: bool = False,
         side: int = 0) -> None:
    """A weight GEMM [m x k]·[k x n] run *chunks* times: out3 = (forward, input grad, weight grad).

    The input gradient [m x n]·[n x k] has the forward's FLOPs; the weight gradient
    [k x m]·[m x n] accumulates into the main gradient buffer, read and written at bytes_grad
    (Megatron's gradient-accumulation fusion: the wgrad GEMM adds into main_grad).

    Under fp8 (and not *sixteen*) the forward casts its input (and, with f8_w_mb, its weight, once
    per micro-batch: torchao casts the gathered bf16 weight every forward; TE keeps fp8 weights or
    caches their cast across micro-batches) and the backward casts the output gradient; the
    weight-gradient GEMM reads the transposed copies the casts wrote (``_cast``).

    *side* places the GEMM beside the tensor-parallel traffic it overlaps when TP comm overlap is on
    (ov_tp > 0, t > 1), as Transformer Engine's userbuffers run it (TE module/base.py
    initialize_ub; the methods of NeMo's H100 configs, data/validation/h100_run_facts.yaml
    'tp_comm_overlap'): 1, a column-parallel GEMM after an all-gather (QKV, FC1): its forward
    runs as t ring-exchange chunks of m/t rows, its input gradient under a bulk reduce-scatter,
    whole; 2, a row-parallel GEMM before a reduce-scatter (attention out, FC2): its forward runs
    as tp_ov_splits pipelined chunks while the reduce-scatter kernels hold tp_ov_sm of the SMs,
    its input gradient as t ring-exchange chunks. The weight gradients run whole (bulk overlaps).
    """
    bc, bg = cand[_C["bytes_c"]], cand[_C["bytes_grad"]]
    bm = bc if sixteen else cand[_C["bytes_mm"]]
    t = cand[_C["t"]]
    f_split = d_split = 1.0
    f_keep = 1.0                                  # share of the SMs the forward GEMM keeps
    if side != 0 and cand[_C["ov_tp"]] > 0.0 and t > 1.0:
        if side == 1:
            f_split = t
        else:
            f_split = rate[_R["tp_ov_splits"]]
            f_keep = 1.0 - rate[_R["tp_ov_sm"]]
            d_split = t
    out3[0] = chunks * f_split * _gemm(m / f_split, n, k, 1.0, bm, bc, rate, sixteen) / f_keep
    out3[1] = chunks * d_split * _gemm(m / d_split, k, n, 1.0, bm, bc, rate, sixteen)
    out3[2] = chunks * _gemm(k, n, m, 1.0, bm, 2.0 * bg, rate, sixteen)
    if not sixteen:
        out3[0] += chunks * _cast(m * k, cand, rate) + rate[_R["f8_w_mb"]] * _cast(k * n, cand, rate)
        out3[1] += chunks * _cast(m * n, cand, rate)


def _add_gemm(sums, g3) -> None:
    """Add a weight GEMM's (forward, input grad, weight grad) to sums = [fw, bw, bw_w, gemm_f, gemm_b]."""
    sums[0] += g3[0]
    sums[1] += g3[1]
    sums[2] += g3[2]
    sums[3] += g3[0]
    sums[4] += g3[1] + g3[2]


def _ffn_pair(rows: float, width: float, h: float, n_ff: float, n_split: float, cand, rate, sums) -> float:
    """A dense FFN of *width* on this rank: up h -> (n_ff - 1)·width/t (gate and up fused when gated,
    n_ff = 3), then down width/t -> h (Megatron's column- / row-parallel pair).

    Each GEMM's times go into sums (``_add_gemm``), the up GEMM's first; returns the pair's forward
    time (the FFN matmuls a census share recomputes).
    """
    t = cand[_C["t"]]
    g3 = [0.0, 0.0, 0.0]
    _mm3(rows, (n_ff - 1.0) * width / t, h, n_split, cand, rate, g3, False, 1)
    _add_gemm(sums, g3)
    forward = g3[0]
    _mm3(rows, h, width / t, n_split, cand, rate, g3, False, 2)
    _add_gemm(sums, g3)
    return forward + g3[0]


def _layer(kind, skind, model, smodel, cand, rate, out) -> None:
    """One layer of a kind, per micro-batch and device, into out[SECONDS_LAYER_FIELDS].

    The layer runs on its submodule's dimensions: the kind's hidden size (sub_h) and, when the kind
    states one (seq_tokens > 0, a vision tower's patch tokens), its own tokens per sample in place
    of the candidate's s.
    """
    _fill(out, _L_COUNT, 0.0)
    b, t, cp = cand[_C["b"]], cand[_C["t"]], cand[_C["cp"]]
    s = kind[_K["seq_tokens"]] if kind[_K["seq_tokens"]] > 0.0 else cand[_C["s"]]
    sp = cand[_C["sp"]]                       # t with sequence parallelism, else 1
    ep, t_exp = cand[_C["ep"]], cand[_C["t_exp"]]
    n_split = cand[_C["seq_split"]]           # Seq1F1B: every op runs n_split times on s/n_split
    bc, bm, bg = cand[_C["bytes_c"]], cand[_C["bytes_mm"]], cand[_C["bytes_grad"]]
    db = cand[_C["dropout_bytes"]]
    flash = cand[_C["flash"]] != 0.0
    mm16_rate = rate[_R["mm16_eff"]] * rate[_R["peak_attn"]]   # GDN's chunked recurrence runs 16-bit
    eager = rate[_R["ew_eager"]] != 0.0
    attn_rate = rate[_R["attn_eff"]] * rate[_R["peak_attn"]]
    hbm = rate[_R["hbm_eff"]] * rate[_R["hbm_bw"]]
    kernel_s = rate[_R["kernel_s"]]
    h = kind[_K["sub_h"]]
    a = kind[_K["att_a"]]
    mixer = kind[_K["mixer"]]                 # 0 attention (full, MLA, GDN), 1 Mamba-2, 2 none (MLP block)
    has_ffn = kind[_K["has_ffn"]] != 0.0
    if not (h > 0.0 and (a > 0.0 or mixer == MIXER_NONE)):
        _fill(out, _L_COUNT, NAN)
        return
    # sub-blocks with a residual add, a TP gather/scatter pair and a pre-norm each: a transformer
    # layer has two (mixer, FFN); a hybrid stack's block one (NemotronHBlock)
    parts = (0.0 if mixer == MIXER_NONE else 1.0) + (1.0 if has_ffn else 0.0)
    n_kv = kind[_K["att_n_kv"]]
    dh = kind[_K["att_dh"]] if kind[_K["att_dh"]] != 0.0 else (h / a if a > 0.0 else 0.0)
    gate = 1.0 if kind[_K["att_gate"]] != 0.0 else 0.0
    d_qk = (kind[_K["qk_nope"]] if kind[_K["qk_nope"]] != 0.0 else dh) + kind[_K["dhr"]]
    d_v = dh
    tokens = b * s / cp                       # tokens this rank computes per micro-batch
    rows = tokens / n_split                   # token rows of one GEMM (one Seq1F1B chunk)
    x_sp = tokens * h / sp                    # elements of the norm / residual region (split with SP)
    n_ff = kind[_K["n_ffMM"]] if kind[_K["n_ffMM"]] != 0.0 else 3.0   # 3 gated (SwiGLU), 2 GELU MLP
    width = kind[_K["ffn_width"]]
    moe = kind[_K["is_moe"]] != 0.0
    has_core = kind[_K["n_attBMM"]] != 0.0
    n_qkv = (a * (1.0 + gate) + 2.0 * n_kv) * dh   # Q (doubled by an output gate), K, V outputs
    g3 = [0.0, 0.0, 0.0]
    fw = bw = bw_w = gemm_f = gemm_b = 0.0
    f_att = d_att = w_grad = flops_att = 0.0
    ssm_inner = ssm_conv = 0.0

    # ---- attention projections, 2·tokens·W FLOPs forward; Megatron fuses Q, K, V in one GEMM.
    if mixer == MIXER_MAMBA:
        # Mamba-2 (ndcost.mamba): in_proj h -> [z, x, B, C, dt] (column-parallel: heads and groups
        # split over tp) and out_proj d_inner -> h (row-parallel)
        ssm_inner = a * dh                                    # d_inner = heads x head_dim
        ssm_conv = ssm_inner + 2.0 * n_kv * kind[_K["lin_d_k"]]   # x, B, C: conv channels
        n_in = ssm_inner + ssm_conv + a
        _mm3(rows, n_in / t, h, n_split, cand, rate, g3, False, 1)
        f_att, d_att, w_grad = g3[0], g3[1], g3[2]
        _mm3(rows, h, ssm_inner / t, n_split, cand, rate, g3, False, 2)
        f_att, d_att, w_grad = f_att + g3[0], d_att + g3[1], w_grad + g3[2]
        flops_att = 2.0 * b * s * h * (n_in + ssm_inner)
    elif mixer == MIXER_MAMBA1:
        # Mamba-1 (Jamba): in_proj h -> [x, z] (column-parallel), x_proj d_inner -> dt_rank + 2N and
        # dt_proj dt_rank -> d_inner on this rank's channels, out_proj d_inner -> h (row-parallel);
        # x_proj's small all-reduce over tp is not priced
        ssm_inner = a
        state = kind[_K["lin_d_k"]]
        _mm3(rows, 2.0 * ssm_inner / t, h, n_split, cand, rate, g3, False, 1)
        f_att, d_att, w_grad = g3[0], g3[1], g3[2]
        _mm3(rows, n_kv + 2.0 * state, ssm_inner / t, n_split, cand, rate, g3)
        f_att, d_att, w_grad = f_att + g3[0], d_att + g3[1], w_grad + g3[2]
        _mm3(rows, ssm_inner / t, n_kv, n_split, cand, rate, g3)
        f_att, d_att, w_grad = f_att + g3[0], d_att + g3[1], w_grad + g3[2]
        _mm3(rows, h, ssm_inner / t, n_split, cand, rate, g3, False, 2)
        f_att, d_att, w_grad = f_att + g3[0], d_att + g3[1], w_grad + g3[2]
        flops_att = 2.0 * b * s * (3.0 * h * ssm_inner + 2.0 * ssm_inner * (n_kv + state))
    elif mixer == MIXER_NONE:
        pass
    elif kind[_K["is_mla"]] != 0.0:
        # MLA: every attention weight W (ND's mla_weights, ND_REFERENCE §2.2) as one GEMM of the
        # same FLOPs (k = h, n = W/(h·t)), plus 4 more kernels (q_a, q_b, kv_a, kv_b, o: 5 GEMMs).
        w_att = kind[_K["mla_w"]]
        _mm3(rows, w_att / (h * t), h, n_split, cand, rate, g3, False, 1)
        extra = 4.0 * n_split * kernel_s
        f_att, d_att, w_grad = g3[0] + extra, g3[1] + extra, g3[2] + extra
        up_share = kind[_K["mla_up"]] / w_att if w_att > 0.0 else 0.0
        out[_L["sw_attUp"]] = up_share * f_att
        flops_att = 2.0 * b * s * w_att
        out[_L["flops_up"]] = 2.0 * b * s * kind[_K["mla_up"]]
    else:
        _mm3(rows, n_qkv / t, h, n_split, cand, rate, g3, False, 1)
        f_att, d_att, w_grad = g3[0], g3[1], g3[2]
        _mm3(rows, h, a * dh / t, n_split, cand, rate, g3, False, 2)
        f_att, d_att, w_grad = f_att + g3[0], d_att + g3[1], w_grad + g3[2]
        flops_att = 2.0 * b * s * h * (n_qkv + a * dh)
    fw += f_att
    bw += d_att
    bw_w += w_grad
    gemm_f += f_att
    gemm_b += d_att + w_grad

    # ---- attention core: QK^T and AV over the keys each query needs: 2·b·s·span·a·(d_qk + d_v)
    # FLOPs forward for a bidirectional or windowed kind, half of it for a causal one (the masked
    # half is no model work; the count of Megatron-Bridge's flop_utils and newer Megatron-LM's
    # num_floating_point_operations, where Narayanan et al. 2021 Eq. 3 counts the full s x s
    # matrix): so that MFU <= HFU, the model's FLOPs never exceeding what runs. What runs: without flash,
    # Megatron's baddbmm computes the whole matrix and masks it (a Seq1F1B chunk i of n only
    # against its i·s/n prefix: on average (n+1)/(2n) of it); a causal flash kernel skips the
    # upper half (FLASH_CAUSAL_SHARE). A bidirectional kind (a vision encoder) is not masked: every
    # query meets all s keys. A windowed bidirectional kind (att_window < s; Qwen2.5-VL's window
    # attention: block-diagonal windows, bidirectional inside each) meets span = att_window keys a
    # query. A windowed causal kind is a sliding window (Mistral, Gemma 2/3, gpt-oss): query i meets
    # min(i + 1, w) keys, s·w - w(w-1)/2 over the sequence, so span = w - w(w-1)/(2s); a chunked
    # causal kind (Llama 4: causal inside fixed chunks of w tokens) meets i mod w + 1 keys, so k full
    # chunks and a remainder r = s - k·w hold k·w(w+1)/2 + r(r+1)/2 pairs. A flash kernel with a
    # window or chunks skips the blocks outside them, an unfused one computes the whole matrix and masks it.
    core_f = core_b = flops_core = core_extra = 0.0
    scores = 0.0
    window = kind[_K["att_window"]]
    windowed = window > 0.0 and window < s
    masked = kind[_K["bidirectional"]] == 0.0
    span = s
    if windowed:
        if not masked:
            span = window
        elif kind[_K["att_chunked"]] != 0.0:
            full_chunks = math.floor(s / window)
            rest = s - full_chunks * window
            span = (full_chunks * window * (window + 1.0) + rest * (rest + 1.0)) / (2.0 * s)
        else:
            span = window - window * (window - 1.0) / (2.0 * s)
    causal = masked and not windowed
    if has_core:
        heads = b * a / t
        flops_core = 2.0 * b * s * span * a * (d_qk + d_v)
        if causal:
            flops_core *= FLASH_CAUSAL_SHARE
        if flash:
            run = flops_core / (t * cp)
            core_f = run / attn_rate + n_split * kernel_s
            core_b = FLASH_BACKWARD_FLOPS * run / attn_rate + n_split * kernel_s
        else:
            # keys a chunk meets, on average (causal), or the span of every query
            keys = s * (n_split + 1.0) / (2.0 * n_split) if masked else span
            q_rows = s / cp / n_split
            scores = heads * (s / cp) * keys                  # score elements of the micro-batch
            # what runs beyond what the model needs: the masked part of the matrix (HFU counts it)
            core_extra = 2.0 * b * s * keys * a * (d_qk + d_v) - flops_core
            if core_extra < 0.0:
                core_extra = 0.0
            core_f = n_split * (_gemm(q_rows, keys, d_qk, heads, bc, bc, rate, True)
                                + _gemm(q_rows, d_v, keys, heads, bc, bc, rate, True))
            # dQ = dS·K, dK = dS^T·Q, dP = dO·V^T, dV = P^T·dO: four BMMs of the forward's size
            core_b = n_split * (_gemm(q_rows, d_qk, keys, heads, bc, bc, rate, True)
                                + _gemm(keys, d_qk, q_rows, heads, bc, bc, rate, True)
                                + _gemm(q_rows, keys, d_v, heads, bc, bc, rate, True)
                                + _gemm(keys, d_v, q_rows, heads, bc, bc, rate, True))
        out[_L["sw_attBMM"]] = core_f

    # ---- gated DeltaNet: the chunked recurrence, per token and value head
    # 2·64·(3·d_k + 2·d_v) + 6·d_k·d_v FLOPs forward (ND_REFERENCE §2.2 n_linrec holds 3x this,
    # forward + backward; chunk 64 as the seed's GDN_CHUNK), at matmul rate or reading q, k, v
    # and writing o at HBM rate, whichever is slower; backward 2x.
    flops_rec = 0.0
    n_v, d_k, dv_lin = kind[_K["lin_n_v"]], kind[_K["lin_d_k"]], kind[_K["lin_d_v"]]
    conv_bytes = 0.0
    if n_v * d_k * dv_lin != 0.0:
        flops_rec = b * s * n_v * (2.0 * 64.0 * (3.0 * d_k + 2.0 * dv_lin) + 6.0 * d_k * dv_lin)
        compute = flops_rec / (t * cp) / mm16_rate
        memory = bc * tokens * (n_qkv + a * dh) / t / hbm
        rec_f = (compute if compute > memory else memory) + n_split * kernel_s
        core_f += rec_f
        core_b += 2.0 * rec_f
        # the short depthwise conv over q, k, v (read + write) and the gated output norm (3 passes)
        conv_bytes = 2.0 * bc * tokens * (n_qkv - a * dh) / t + 3.0 * bc * tokens * a * dh / t
    if mixer == MIXER_MAMBA:
        # ---- Mamba-2's SSD scan per token and head (ndcost.mamba.ssd_flops_per_token, Dao & Gu 2024
        # §6), at 16-bit matmul rate or reading x, B, C, dt and writing y at HBM rate, whichever is
        # slower; backward 2x, as for the gated DeltaNet's chunked scan
        chunk, state = kind[_K["ssm_chunk"]], kind[_K["lin_d_k"]]
        flops_rec = b * s * a * (2.0 * chunk * (state + dh) + 4.0 * state * dh)
        compute = flops_rec / (t * cp) / mm16_rate
        memory = bc * tokens * (ssm_conv + a + ssm_inner) / t / hbm
        rec_f = (compute if compute > memory else memory) + n_split * kernel_s
        core_f += rec_f
        core_b += 2.0 * rec_f
        # the causal depthwise conv1d over x, B, C (read + write) and the gated RMSNorm y·silu(z) (3 passes)
        conv_bytes = 2.0 * bc * tokens * ssm_conv / t + 3.0 * bc * tokens * ssm_inner / t
    elif mixer == MIXER_MAMBA1:
        # ---- Mamba-1's selective scan: 9 FLOPs a token, channel and state (SELECTIVE_SCAN_FLOPS); its
        # fused kernel keeps the state in SRAM and is bound by HBM (Gu & Dao 2023 §3.3.2): it reads x,
        # dt, z and B, C (not split over tp) and writes y once, the gate y·silu(z) fused in; backward 2x
        state = kind[_K["lin_d_k"]]
        flops_rec = SELECTIVE_SCAN_FLOPS * b * s * ssm_inner * state
        rec_f = bc * tokens * (4.0 * ssm_inner / t + 2.0 * state) / hbm + n_split * kernel_s
        core_f += rec_f
        core_b += 2.0 * rec_f
        conv_bytes = 2.0 * bc * tokens * ssm_inner / t        # the causal depthwise conv1d over x
    fw += core_f
    bw += core_b

    # ---- FFN: dense 2 (GELU) or 3 (SwiGLU) matmuls; MoE: the router, the routed experts as one
    # grouped GEMM (top-k x capacity-factor token slots in capacity mode, top-k dropless), shared
    # experts as a dense FFN of their width. ffn_f: the forward of the FFN matmuls (routed and
    # shared experts, or the dense pair; not the router), what a census share recomputes.
    flops_ffn = 0.0
    ffn_f = 0.0
    sums = [fw, bw, bw_w, gemm_f, gemm_b]
    act_bytes = other_bytes = 0.0             # forward bytes: activation pass (ffAct); never recomputed
    other_kernels = parts                     # the bias-dropout-add kernels, one a sub-block
    if not has_ffn:
        pass                                  # a mixer-only block of a hybrid stack
    elif moe:
        topk = model[_M["n_chosen"]]
        n_exp = model[_M["n_exp"]]
        cap = cand[_C["moe_imb"]] if cand[_C["dropless"]] != 0.0 else cand[_C["cap_fact"]]
        tok_moe = tokens / sp                 # tokens routed by this rank
        slots = tokens * topk * cap           # token-expert rows an EP rank computes, balanced
        local = n_exp / ep                    # experts on this rank
        # router: tokens x h x n_exp, replicated over tp, a plain 16-bit linear (Megatron-Core's
        # TopKRouter is not a Transformer Engine module: it never runs fp8)
        _mm3(tok_moe / n_split, n_exp, h, n_split, cand, rate, g3, True)
        _add_gemm(sums, g3)
        # grouped GEMM over the local experts: FLOPs of every slot, weights of every local expert
        per = slots / local / n_split if local > 0.0 else 0.0
        wide = (n_ff - 1.0) * width / t_exp
        e_f = n_split * (_gemm(per, wide, h, local, bm, bc, rate) + _gemm(per, h, width / t_exp, local, bm, bc, rate))
        e_d = n_split * (_gemm(per, h, wide, local, bm, bc, rate) + _gemm(per, width / t_exp, h, local, bm, bc, rate))
        e_w = n_split * (_gemm(h, wide, per, local, bm, 2.0 * bg, rate)
                         + _gemm(width / t_exp, h, per, local, bm, 2.0 * bg, rate))
        # fp8 grouped GEMMs (TE GroupedLinear) cast both inputs forward and both output gradients back
        e_f += n_split * (_cast(per * local * h, cand, rate) + _cast(per * local * width / t_exp, cand, rate))
        e_f += rate[_R["f8_w_mb"]] * local * _cast(h * (wide + width / t_exp), cand, rate)
        e_d += n_split * (_cast(per * local * wide, cand, rate) + _cast(per * local * h, cand, rate))
        _add_gemm(sums, (e_f, e_d, e_w))
        ffn_f = e_f
        act_bytes += n_ff * bc * slots * width / t_exp
        shared = smodel[_SM["shared_width"]]
        if shared > 0.0:
            ffn_f += _ffn_pair(rows, shared, h, n_ff, n_split, cand, rate, sums)
            act_bytes += n_ff * bc * tokens * shared / t
        # permute before the experts and unpermute after: read tokens x h, write the slot copies,
        # and back; the router's softmax/top-k reads its fp32 logits (2 kernels)
        other_bytes += 2.0 * bc * tok_moe * h * (1.0 + topk * cap) + 2.0 * 4.0 * tok_moe * n_exp
        other_kernels += 4.0
        flops_ffn = 2.0 * b * s * h * (topk * n_ff * width + n_exp + n_ff * shared)
    else:
        ffn_f = _ffn_pair(rows, width, h, n_ff, n_split, cand, rate, sums)
        # GELU reads one tensor and writes one (2 passes); SwiGLU reads two and writes one (3), or,
        # unfused, silu(gate) (read, write) then its product with up (read 2, write): 5 passes
        act_bytes = (EAGER_SWIGLU_PASSES if eager and n_ff == 3.0 else n_ff) * bc * tokens * width / t
        if eager and n_ff == 3.0:
            other_kernels += 1.0
        flops_ffn = 2.0 * b * s * h * n_ff * width
    fw, bw, bw_w, gemm_f, gemm_b = sums

    # ---- elementwise work, forward (bytes, kernels) per op class -- the recompute switches' classes
    n_norm = kind[_K["n_normOp"]]                          # the layer's norms (ND's normOp count)
    norm_bytes = n_norm * 2.0 * bc * x_sp                  # read + write each
    norm_kernels = n_norm
    if eager and smodel[_SM["rms_norm"]] != 0.0:
        # an RMSNorm written in PyTorch ops and run eagerly, one kernel each
        norm_bytes = n_norm * (EAGER_RMSNORM_FP32_BYTES + 4.0 * bc) * x_sp
        norm_kernels = n_norm * EAGER_RMSNORM_KERNELS
    if kind[_K["n_qknorm"]] != 0.0 and mixer == MIXER_ATTENTION:
        norm_bytes += 2.0 * bc * tokens * (a + n_kv) * dh / t
        norm_kernels += 2.0
    softmax_bytes = dropout_bytes = permute_bytes = 0.0
    if scores > 0.0:
        softmax_bytes = 2.0 * bc * scores                    # Megatron's fused scale-mask-softmax
        if db > 0.0:
            dropout_bytes = (2.0 * bc + db) * scores         # read, write, keep the mask
        permute_bytes = 2.0 * bc * tokens * a * d_v / t      # context [b·a, s, d] -> [s, b, a·d]
    # rotary position embedding on q and k (no learned position table): fused, read + write
    # each element once (Megatron's apply_rope_fusion, TE's fused RoPE, an inductor kernel); eager
    # (torchtitan's apply_rotary_emb): upcast to fp32, complex multiply, cast back, per tensor
    if smodel[_SM["rope"]] != 0.0 and has_core:
        if kind[_K["is_mla"]] != 0.0:
            rotated = tokens * (a / t + 1.0) * kind[_K["dhr"]]   # each head's q_pe and the shared k_pe
        else:
            rotated = tokens * (a + n_kv) * dh / t
        if eager:
            other_bytes += (2.0 * bc + EAGER_ROPE_FP32_BYTES) * rotated
            other_kernels += 2.0 * EAGER_ROPE_KERNELS
        else:
            other_bytes += 2.0 * bc * rotated
            other_kernels += 2.0
    if rate[_R["attn_copies"]] != 0.0 and has_core and kind[_K["is_mla"]] == 0.0:
        # torchtitan's attention: repeat_kv materialises K and V for every query head (GQA), and
        # the core's output is made contiguous again after its transpose (copies: read + write)
        if n_kv < a:
            other_bytes += bc * tokens * (2.0 * n_kv * dh + 2.0 * a * dh) / t
            other_kernels += 2.0
        other_bytes += 2.0 * bc * tokens * a * dh / t
        other_kernels += 1.0
    # the fused bias-dropout-add kernels: read the output and the residual, write (+ mask)
    other_bytes += parts * (3.0 * bc + db) * x_sp + conv_bytes
    if conv_bytes > 0.0:
        other_kernels += 2.0
    act_kernels = 0.0
    if has_ffn:
        act_kernels = 1.0 + (1.0 if moe and smodel[_SM["shared_width"]] > 0.0 else 0.0)
    # each class's forward time is what a selective recompute of its switch re-runs
    out[_L["sw_ffAct"]] = _pass(act_bytes, act_kernels * n_split, rate)
    out[_L["sw_normOp"]] = _pass(norm_bytes, norm_kernels * n_split, rate)
    out[_L["sw_softmax"]] = _pass(softmax_bytes, n_split, rate)
    out[_L["sw_dropout"]] = _pass(dropout_bytes, n_split, rate)
    out[_L["sw_attBMM"]] += _pass(permute_bytes, n_split, rate)
    ew_bytes = act_bytes + norm_bytes + softmax_bytes + dropout_bytes + permute_bytes + other_bytes
    ew_kernels = act_kernels + norm_kernels + other_kernels
    if softmax_bytes > 0.0:
        ew_kernels += 1.0
    if dropout_bytes > 0.0:
        ew_kernels += 1.0
    if permute_bytes > 0.0:
        ew_kernels += 1.0
    ew_kernels *= n_split
    fw += _pass(ew_bytes, ew_kernels, rate)
    bw += _pass(POINTWISE_BACKWARD_BYTES * ew_bytes, ew_kernels, rate)
    # headCast: Megatron scales, masks and casts the scores inside its fused softmax kernel, so a
    # separate cast pass costs nothing here (sw_headCast stays 0).

    # ---- tensor parallelism, in the tp group (stride 1): per sub-block 1 all-reduce forward and 1
    # backward, or with SP 1 all-gather + 1 reduce-scatter each way (Korthikanti et al. 2022
    # §4.2.2, Fig. 5), of the full activation b·s·h/cp: a transformer layer has two sub-blocks.
    if t > 1.0:
        full = b * s * h * bc / cp
        if sp > 1.0:
            gather = _collective(GATHER_OR_SCATTER, full, t, 1.0, rate)
            tp_pass = 2.0 * parts * gather
            out[_L["sw_gather"]] = parts * gather
        else:
            tp_pass = parts * _collective(ALL_REDUCE, full, t, 1.0, rate)
        out[_L["tp_f"]] = tp_pass
        out[_L["tp_b"]] = tp_pass

    # ---- context parallelism, in the cp group (stride t)
    if cp > 1.0 and has_core:
        if cand[_C["cp_ring"]] != 0.0:
            # Ring attention (Liu et al. 2023; Megatron's CP): cp-1 steps, each passing this rank's
            # K and V (b·s/cp tokens x n_kv·(d_qk + d_v)/t) to the next; backward passes K, V and
            # their gradients: twice the bytes.
            kv = b * (s / cp) * n_kv * (d_qk + d_v) * bc / t
            step = _collective(SEND_RECV, kv, cp, t, rate)
            out[_L["cp_f"]] = (cp - 1.0) * step
            out[_L["cp_b"]] = 2.0 * (cp - 1.0) * step
        else:
            # Ulysses (Jacobs et al. 2023): all-to-alls of Q, K, V in and of the output back; the
            # same in backward.
            qkv = tokens * (a * d_qk + n_kv * (d_qk + d_v)) * bc / t
            o = tokens * a * d_v * bc / t
            ulysses = (_collective(ALL_TO_ALL, qkv, cp, t, rate)
                       + _collective(ALL_TO_ALL, o, cp, t, rate))
            out[_L["cp_f"]] = ulysses
            out[_L["cp_b"]] = ulysses

    # ---- expert parallelism, in the ep group (stride t·cp): dispatch and combine all-to-all of the
    # routed token slots (tokens x top-k x capacity x h), forward and backward.
    if moe and ep > 1.0:
        cap = cand[_C["moe_imb"]] if cand[_C["dropless"]] != 0.0 else cand[_C["cap_fact"]]
        routed = (tokens / sp) * model[_M["n_chosen"]] * cap * h * bc
        a2a = 2.0 * _collective(ALL_TO_ALL, routed, ep, t * cp, rate)
        out[_L["ep_f"]] = a2a
        out[_L["ep_b"]] = a2a

    p_dense = (skind[_SK["p_nonexp"]] + skind[_SK["p_shared"]]) / t
    p_expert = skind[_SK["p_routed"]] / (ep * t_exp)
    if rate[_R["grad_acc_pass"]] != 0.0:
        # no gradient-accumulation fusion: the weight-gradient GEMM writes a 16-bit gradient and a
        # separate kernel adds it into the main gradient (read both, write the main one), every
        # micro-batch (Megatron-LM 2021 distributed.py param_hook: param.main_grad.add_(param.grad))
        bw_w += _pass((p_dense + p_expert) * (bc + 2.0 * bg), n_split, rate)
    out[_L["fw"]] = fw
    out[_L["bw"]] = bw
    out[_L["bw_w"]] = bw_w
    out[_L["gemm_f"]] = gemm_f
    out[_L["gemm_b"]] = gemm_b
    out[_L["core_f"]] = core_f
    out[_L["core_b"]] = core_b
    # parameters on this device: non-expert and shared experts split over tp, routed over ep·t_exp
    out[_L["p_dense"]] = p_dense
    out[_L["p_expert"]] = p_expert
    out[_L["flops_f"]] = flops_att + flops_core + flops_rec + flops_ffn
    out[_L["flops_core"]] = flops_core
    out[_L["flops_core_extra"]] = core_extra
    out[_L["att_mm_f"]] = f_att
    out[_L["ffn_mm_f"]] = ffn_f
    out[_L["att_mm_flops"]] = flops_att
    out[_L["ffn_mm_flops"]] = flops_ffn


def _check_tables(kinds, skinds, model, smodel, cand, rate) -> None:
    """The shapes every seconds kernel reads: the kind tables, the model, candidate and rate vectors."""
    n_kinds = len(kinds)
    _check_rows(kinds, "kinds", n_kinds, len(KIND_FIELDS))
    _check_rows(skinds, "skinds", n_kinds, len(SECONDS_KIND_FIELDS))
    _check_len(model, "model", len(MODEL_FIELDS))
    _check_len(smodel, "smodel", len(SECONDS_MODEL_FIELDS))
    _check_len(cand, "cand", len(SECONDS_CAND_FIELDS))
    _check_len(rate, "rate", len(RATE_FIELDS))


def _check_rows(array, name: str, rows: int, width: int) -> None:
    if len(array) != rows:
        raise ValueError(f"{name} must have {rows} rows, got {len(array)}")
    for row in array:
        if len(row) != width:
            raise ValueError(f"{name} must have {width} columns, got {len(row)}")



def seconds_layer_times(kinds, skinds, model, smodel, cand, rate, out) -> None:
    """One layer of each kind, per micro-batch and device, into out (K x SECONDS_LAYER_FIELDS).

    NaN rows for a candidate with a degree or a byte width below 1, or a rate that is not
    positive.
    """
    n_kinds = len(kinds)
    _check_tables(kinds, skinds, model, smodel, cand, rate)
    _check_rows(out, "out", n_kinds, _L_COUNT)
    ok = _cand_ok(cand, rate)
    for k in range(n_kinds):
        if ok:
            _layer(kinds[k], skinds[k], model, smodel, cand, rate, out[k])
        else:
            _fill(out[k], _L_COUNT, NAN)


def _head(cand, rate, tokens: float, h: float, v: float, softcap: float, out3) -> None:
    """One output head on this rank: the logits GEMM (vocab-parallel over tp) and the loss.

    out3 = (forward, backward, weight grads). Logits 2·tokens·h·v/t FLOPs forward (x3 with
    backward, Narayanan et al. 2021 Eq. 3's 6·B·s·h·V term); Megatron's vocab-parallel cross
    entropy: CE_FORWARD_BYTES / CE_BACKWARD_BYTES per logit element and its three small tp
    all-reduces.
    """
    t = cand[_C["t"]]
    n_split = cand[_C["seq_split"]]
    g3 = [0.0, 0.0, 0.0]
    # the output layer stays 16-bit under fp8 (Megatron-Core's output layer is a plain
    # ColumnParallelLinear, torchtitan's float8 conversion skips it)
    _mm3(tokens / n_split, v / t, h, n_split, cand, rate, g3, True)
    logits = tokens * v / t
    forward = g3[0] + _pass(CE_FORWARD_BYTES * logits, CE_FORWARD_KERNELS * n_split, rate)
    backward = g3[1] + _pass(CE_BACKWARD_BYTES * logits, n_split, rate)
    if softcap != 0.0:
        forward += _pass(SOFTCAP_BYTES * logits, n_split, rate)
        backward += _pass(POINTWISE_BACKWARD_BYTES * SOFTCAP_BYTES * logits, n_split, rate)
    if t > 1.0:
        forward += CE_ALL_REDUCES * n_split * _collective(
            ALL_REDUCE, CE_REDUCE_BYTES * tokens / n_split, t, 1.0, rate)
    out3[0] = forward
    out3[1] = backward
    out3[2] = g3[2]


def _vision_edges(smodel, cand, rate, out5) -> None:
    """A vision tower's patch embedding and merger on this rank, per micro-batch.

    out5 = (forward, backward, weight grads, tp comm, forward FLOPs of the whole micro-batch).
    Qwen2-VL / Qwen2.5-VL (Transformers modeling_qwen2_5_vl: PatchEmbed, PatchMerger): the
    patch embedding is a Conv3d with stride = kernel, i.e. one GEMM [patches x patch_in] x
    [patch_in x hidden]; the merger norms the patches, concatenates merge² of them and runs
    an MLP (hidden·merge² -> hidden·merge², GELU, -> out). The tower's tokens split over cp and,
    with SP, over tp, as its blocks' (the patch embedding on that shard); the merger MLP is
    tensor-parallel as the blocks' (column then row parallel) on the merged tokens, gathered
    before it and reduce-scattered after it with SP (else an all-reduce after it).
    """
    patches = smodel[_SM["v_patches"]]
    for i in range(5):
        out5[i] = 0.0
    if patches <= 0.0:
        return
    b, t, cp, sp = cand[_C["b"]], cand[_C["t"]], cand[_C["cp"]], cand[_C["sp"]]
    bc = cand[_C["bytes_c"]]
    hv, m, v_out = smodel[_SM["v_hidden"]], smodel[_SM["v_merge"]], smodel[_SM["v_out"]]
    patch_in = smodel[_SM["v_patch_in"]]
    rows = b * patches / cp
    merged = rows / m
    wide = hv * m
    g3 = [0.0, 0.0, 0.0]
    _mm3(rows / sp, hv, patch_in, 1.0, cand, rate, g3)          # the patch embedding
    fw, bw, bw_w = g3[0], g3[1], g3[2]
    _mm3(merged, wide / t, wide, 1.0, cand, rate, g3)           # merger fc1, column parallel
    fw, bw, bw_w = fw + g3[0], bw + g3[1], bw_w + g3[2]
    _mm3(merged, v_out, wide / t, 1.0, cand, rate, g3)          # merger fc2, row parallel
    fw, bw, bw_w = fw + g3[0], bw + g3[1], bw_w + g3[2]
    # the merger's norm on the patch shard and its GELU on the merged tokens: elementwise passes
    moved = 2.0 * 2.0 * bc * rows * hv / sp + 2.0 * bc * merged * wide / t
    fw += _pass(moved, 2.0, rate)
    bw += _pass(POINTWISE_BACKWARD_BYTES * moved, 2.0, rate)
    comm = 0.0
    if t > 1.0:
        if sp > 1.0:
            # all-gather the normed patches before fc1, reduce-scatter fc2's output; backward the reverse
            comm = 2.0 * (_collective(GATHER_OR_SCATTER, rows * hv * bc, t, 1.0, rate)
                          + _collective(GATHER_OR_SCATTER, merged * v_out * bc, t, 1.0, rate))
        else:
            # all-reduce fc2's output forward, the input gradient of fc1 backward
            comm = (_collective(ALL_REDUCE, merged * v_out * bc, t, 1.0, rate)
                    + _collective(ALL_REDUCE, rows * hv * bc, t, 1.0, rate))
    out5[0], out5[1], out5[2], out5[3] = fw, bw, bw_w, comm
    # whole micro-batch FLOPs (not split over tp, cp): 2·rows·n·k per GEMM
    out5[4] = 2.0 * b * patches * (patch_in * hv + (wide * wide + wide * v_out) / m)


def seconds_stage_sums(kinds, skinds, model, smodel, cand, rate, counts, slot_option, slot_mask,
                       extras, out) -> None:
    """Per pipeline stage, the raw seconds of each part (out: pp x SECONDS_STAGE_FIELDS).

    *counts* (pp x K·O, kind-major) holds the layers of kind k running option slot o on each
    stage (chunks summed); *slot_option* / *slot_mask* say what a slot recomputes (0 none, 1 full,
    2 selective with the keep mask: bit i set keeps SWITCHES[i]); *extras* (pp x
    SECONDS_EXTRA_FIELDS) places the embedding, the output head and the MTP modules. A layer runs
    on its kind's submodule (``_layer``: sub_h, seq_tokens); the embedding, the output heads, the MTP
    modules and the pipeline's point-to-point stay on the model's h and the candidate's s.

    Per micro-batch: fw, bw, bw_w, rc (compute), tp, cp, ep (exposed after the overlap shares of
    the candidate), pp (point-to-point), dp_mb_gather / dp_mb_reduce (ZeRO-2/3 traffic, exposed).
    Per step, raw: dp_reduce, dp_gather (once-per-step gradient reduction and parameter gather),
    opt (the optimizer). model_flops / hw_flops: one micro-batch's FLOPs on the stage (the whole
    micro-batch, not split), without and with recompute. A full recompute re-runs the layer's
    forward -- compute and its tp / cp / ep traffic; a selective one the forward of the ops whose
    switch is 0 (an SP all-gather when ``gather`` is 0), and, running HyperParallel's policy (keep
    mask HYPER_POLICY_MASK) on a kind with a census (census_att >= 0), census_att·att_mm_f +
    census_ffn·ffn_mm_f more: the projection matmuls the policy recomputes (their FLOPs,
    census_att·att_mm_flops + census_ffn·ffn_mm_flops, count in hw_flops).
    """
    n_kinds = len(kinds)
    n_slots = len(slot_option)
    n_stages = len(counts)
    _check_tables(kinds, skinds, model, smodel, cand, rate)
    _check_len(slot_mask, "slot_mask", n_slots)
    _check_rows(counts, "counts", n_stages, n_kinds * n_slots)
    _check_rows(extras, "extras", n_stages, len(SECONDS_EXTRA_FIELDS))
    _check_rows(out, "out", n_stages, _S_COUNT)
    ok = _cand_ok(cand, rate)
    for st in range(n_stages):
        _fill(out[st], _S_COUNT, 0.0 if ok else NAN)
    if not ok:
        return
    b, s, t, cp, d = cand[_C["b"]], cand[_C["s"]], cand[_C["t"]], cand[_C["cp"]], cand[_C["d"]]
    sp, ep, p = cand[_C["sp"]], cand[_C["ep"]], cand[_C["p"]]
    n_split, bc = cand[_C["seq_split"]], cand[_C["bytes_c"]]
    ov_tp, ov_cp, ov_ep = cand[_C["ov_tp"]], cand[_C["ov_cp"]], cand[_C["ov_ep"]]
    if cand[_C["cp_ring"]] == 0.0:
        # Ulysses' all-to-alls sit on the critical path: the attention waits for its heads (before)
        # and the projection for its tokens (after) -- Jacobs et al. 2023, DeepSpeed-Ulysses §3,
        # Megatron-LM's cp_comm_type "a2a". Only ring attention hides its KV exchange.
        ov_cp = 0.0
    h, v = model[_M["h"]], model[_M["v"]]
    tokens = b * s / cp
    p_dense = [0.0] * n_stages
    p_expert = [0.0] * n_stages
    layer = [0.0] * _L_COUNT

    # ---- body layers: price each kind once, weigh it by its count per (stage, option slot)
    for k in range(n_kinds):
        used = False
        for st in range(n_stages):
            for o in range(n_slots):
                if counts[st][k * n_slots + o] != 0.0:
                    used = True
        if not used:
            continue
        _layer(kinds[k], skinds[k], model, smodel, cand, rate, layer)
        tp_f = _exposed(layer[_L["tp_f"]], layer[_L["gemm_f"]], ov_tp)
        tp_b = _exposed(layer[_L["tp_b"]], layer[_L["gemm_b"]], ov_tp)
        cp_f = _exposed(layer[_L["cp_f"]], layer[_L["core_f"]], ov_cp)
        cp_b = _exposed(layer[_L["cp_b"]], layer[_L["core_b"]], ov_cp)
        # the expert all-to-all hides (ov_ep) under the layer's whole compute of the same pass: a
        # schedule that overlaps it (DualPipe) runs another micro-batch's chunk meanwhile
        ep_f = _exposed(layer[_L["ep_f"]], layer[_L["fw"]], ov_ep)
        ep_b = _exposed(layer[_L["ep_b"]], layer[_L["bw"]] + layer[_L["bw_w"]], ov_ep)
        for o in range(n_slots):
            option = slot_option[o]
            rc = rc_tp = rc_cp = rc_ep = rc_flops = 0.0
            if option == OPTION_FULL:
                rc, rc_tp, rc_cp, rc_ep = layer[_L["fw"]], tp_f, cp_f, ep_f
                rc_flops = layer[_L["flops_f"]] + layer[_L["flops_core_extra"]]
            elif option == OPTION_SELECTIVE:
                mask = slot_mask[o]
                for bit in range(8):
                    if (mask >> bit) & 1:
                        continue
                    if bit == _GATHER_BIT:
                        rc_tp += layer[_SWITCH_COLUMNS[bit]]
                    else:
                        rc += layer[_SWITCH_COLUMNS[bit]]
                if not mask & 1:
                    rc_flops += layer[_L["flops_core"]] + layer[_L["flops_core_extra"]]
                if not (mask >> 7) & 1:
                    rc_flops += layer[_L["flops_up"]]
                census_att = kinds[k][_K["census_att"]]
                if mask == HYPER_POLICY_MASK and census_att >= 0.0:
                    # HyperParallel's policy also recomputes a census share of the projection
                    # matmuls no switch prices (ND_REFERENCE §2.4 selective_shares); a missing FFN
                    # share (negative) counts as none
                    census_ffn = max(kinds[k][_K["census_ffn"]], 0.0)
                    rc += census_att * layer[_L["att_mm_f"]] + census_ffn * layer[_L["ffn_mm_f"]]
                    rc_flops += census_att * layer[_L["att_mm_flops"]] + census_ffn * layer[_L["ffn_mm_flops"]]
            for st in range(n_stages):
                count = counts[st][k * n_slots + o]
                if count == 0.0:
                    continue
                row = out[st]
                row[_S["fw"]] += count * layer[_L["fw"]]
                row[_S["bw"]] += count * layer[_L["bw"]]
                row[_S["bw_w"]] += count * layer[_L["bw_w"]]
                row[_S["rc"]] += count * rc
                row[_S["tp"]] += count * (tp_f + tp_b + rc_tp)
                row[_S["cp"]] += count * (cp_f + cp_b + rc_cp)
                row[_S["ep"]] += count * (ep_f + ep_b + rc_ep)
                row[_S["layers"]] += count
                row[_S["model_flops"]] += count * 3.0 * layer[_L["flops_f"]]
                row[_S["hw_flops"]] += count * (3.0 * (layer[_L["flops_f"]] + layer[_L["flops_core_extra"]])
                                                + rc_flops)
                p_dense[st] += count * layer[_L["p_dense"]]
                p_expert[st] += count * layer[_L["p_expert"]]

    # ---- embedding, output head, MTP modules
    head = [0.0, 0.0, 0.0]
    g3 = [0.0, 0.0, 0.0]
    edges = [0.0] * 5
    x_sp = tokens * h / sp
    db = cand[_C["dropout_bytes"]]
    full = b * s * h * bc / cp
    emb_stage = out_stage = -1
    for st in range(n_stages):
        row = out[st]
        extra = extras[st]
        if extra[_X["has_emb"]] != 0.0:
            emb_stage = st
            # look up the rows (read + write), add learned positions (read 2, write 1), dropout;
            # backward scatter-adds the gradient into the table (1.5x the bytes)
            moved = 2.0 * bc * tokens * h
            kernels = 1.0
            if smodel[_SM["p_pos"]] > 0.0:
                moved += 3.0 * bc * tokens * h
                kernels += 1.0
            if db > 0.0:
                moved += (2.0 * bc + db) * x_sp
                kernels += 1.0
            row[_S["fw"]] += _pass(moved, kernels * n_split, rate)
            row[_S["bw"]] += _pass(POINTWISE_BACKWARD_BYTES * moved, kernels * n_split, rate)
            if t > 1.0:
                # vocab-parallel lookup: all-reduce over tp (reduce-scatter with SP; its backward
                # is an all-gather, the all-reduce's is the identity)
                if sp > 1.0:
                    row[_S["tp"]] += 2.0 * _collective(GATHER_OR_SCATTER, full, t, 1.0, rate)
                else:
                    row[_S["tp"]] += _collective(ALL_REDUCE, full, t, 1.0, rate)
            p_dense[st] += smodel[_SM["p_embed"]] / t + smodel[_SM["p_pos"]]
            if smodel[_SM["v_patches"]] > 0.0:
                # a vision tower's patch embedding and merger run here too, before the embedding
                _vision_edges(smodel, cand, rate, edges)
                row[_S["fw"]] += edges[0]
                row[_S["bw"]] += edges[1]
                row[_S["bw_w"]] += edges[2]
                row[_S["tp"]] += edges[3]
                row[_S["model_flops"]] += 3.0 * edges[4]
                row[_S["hw_flops"]] += 3.0 * edges[4]
                p_dense[st] += smodel[_SM["p_vision_extra"]] / t
        heads = 0.0
        if extra[_X["has_out"]] != 0.0:
            out_stage = st
            heads += 1.0
            # the final norm, and the head's input crossing tp: all-gather / reduce-scatter with
            # SP, else an all-reduce of the input gradient in backward
            norm = 2.0 * 2.0 * bc * x_sp
            row[_S["fw"]] += _pass(norm, n_split, rate)
            row[_S["bw"]] += _pass(POINTWISE_BACKWARD_BYTES * norm, n_split, rate)
            if t > 1.0:
                if sp > 1.0:
                    row[_S["tp"]] += 2.0 * _collective(GATHER_OR_SCATTER, full, t, 1.0, rate)
                else:
                    row[_S["tp"]] += _collective(ALL_REDUCE, full, t, 1.0, rate)
            tied_here = cand[_C["tie_emb"]] != 0.0 and extra[_X["has_emb"]] != 0.0
            p_dense[st] += (0.0 if tied_here else smodel[_SM["p_embed"]] / t) + smodel[_SM["p_final_norm"]]
        n_mtp = extra[_X["n_mtp"]]
        if n_mtp > 0.0:
            # per MTP module (DeepSeek-V3 §2.2): three norms, eh_proj (2h -> h) and one more head
            heads += n_mtp
            norm = 3.0 * 2.0 * 2.0 * bc * x_sp
            _mm3(tokens / n_split, h / t, 2.0 * h, n_split, cand, rate, g3)
            row[_S["fw"]] += n_mtp * (g3[0] + _pass(norm, 3.0 * n_split, rate))
            row[_S["bw"]] += n_mtp * (g3[1] + _pass(POINTWISE_BACKWARD_BYTES * norm, 3.0 * n_split, rate))
            row[_S["bw_w"]] += n_mtp * g3[2]
            row[_S["model_flops"]] += n_mtp * 3.0 * 2.0 * b * s * 2.0 * h * h
            row[_S["hw_flops"]] += n_mtp * 3.0 * 2.0 * b * s * 2.0 * h * h
            p_dense[st] += n_mtp * smodel[_SM["p_mtp_extra"]] / t
        if heads > 0.0:
            _head(cand, rate, tokens, h, v, smodel[_SM["logit_softcap"]], head)
            row[_S["fw"]] += heads * head[0]
            row[_S["bw"]] += heads * head[1]
            row[_S["bw_w"]] += heads * head[2]
            row[_S["model_flops"]] += heads * 3.0 * 2.0 * b * s * h * v
            row[_S["hw_flops"]] += heads * 3.0 * 2.0 * b * s * h * v

    # ---- pipeline point-to-point, per micro-batch: each stage exchanges activations forward and
    # gradients backward with its neighbours, once per chunk and Seq1F1B chunk, b·s·h/(t·cp) bytes:
    # sent split over tp -- SP's shard, or Narayanan et al. 2021 §4.1's scatter/gather, which then
    # all-gathers over tp after the receive. Blocking (Megatron's 1F1B), over the pp group
    # (stride t·cp·d).
    if p > 1.0:
        chunks = cand[_C["vp"]] * n_split
        piece = full / n_split
        step = _collective(SEND_RECV, piece / t, p, t * cp * d, rate)
        if sp <= 1.0 and t > 1.0:
            step += _collective(GATHER_OR_SCATTER, piece, t, 1.0, rate)
        for st in range(n_stages):
            out[st][_S["pp"]] += 2.0 * chunks * step

    # ---- data parallelism per stage: dense params over dp·cp (stride t), routed experts over the
    # expert-data-parallel ranks (stride t·cp·ep). ZeRO-0: all-reduce the gradients; ZeRO-1
    # (Megatron's distributed optimizer): reduce-scatter them and all-gather the updated params;
    # ZeRO-2: reduce-scatter every micro-batch (the unsharded gradient is not kept) unless
    # deferred; ZeRO-3/FSDP: all-gather each layer's params before its forward and (resharded)
    # again before its backward, reduce-scatter its gradients after.
    zero = cand[_C["zero"]]
    bg, bp = cand[_C["bytes_grad"]], cand[_C["bytes_p"]]
    edp = cand[_C["edp"]]
    defer = cand[_C["defer_grads"]] != 0.0
    ov_dp, ov_fsdp = cand[_C["ov_dp"]], cand[_C["ov_fsdp"]]
    z3_fetch_bw = rate[_R["z3_fetch_bw"]]
    z3_rc_gather = rate[_R["z3_rc_gather"]] != 0.0
    z3_grad_ar = rate[_R["z3_grad_ar"]] != 0.0
    n_dp = d * cp
    hbm = rate[_R["hbm_eff"]] * rate[_R["hbm_bw"]]
    for st in range(n_stages):
        row = out[st]
        dense, expert = p_dense[st], p_expert[st]
        layers = row[_S["layers"]]
        reduce_op = ALL_REDUCE if zero == 0.0 or (zero == 3.0 and z3_grad_ar) else GATHER_OR_SCATTER
        grads = (_collective(reduce_op, dense * bg, n_dp, t, rate)
                 + _collective(reduce_op, expert * bg, edp, t * cp * ep, rate))
        params = (_collective(GATHER_OR_SCATTER, dense * bp, n_dp, t, rate)
                  + _collective(GATHER_OR_SCATTER, expert * bp, edp, t * cp * ep, rate))
        if zero == 3.0 and z3_fetch_bw > 0.0 and n_dp * edp > 1.0:
            # a framework whose parameter fetch runs below NCCL's rate (Rates.zero3_fetch_bandwidth):
            # the gathered bytes at that rate, when slower
            capped = (dense * bp * (1.0 if n_dp > 1.0 else 0.0)
                      + expert * bp * (1.0 if edp > 1.0 else 0.0)) / z3_fetch_bw
            if capped > params:
                params = capped
        backward = row[_S["bw"]] + row[_S["bw_w"]] + row[_S["rc"]]
        if zero == 3.0:
            if cand[_C["reshard"]] != 0.0:
                gathers = 1.0
                if z3_rc_gather and row[_S["rc"]] > 0.0 and row[_S["fw"]] > 0.0:
                    # the recompute forward fetches again the parameters of what it re-runs
                    rerun = row[_S["rc"]] / row[_S["fw"]]
                    gathers += rerun if rerun < 1.0 else 1.0
                row[_S["dp_mb_gather"]] += _exposed_tail(gathers * params, gathers * row[_S["fw"]],
                                                         ov_fsdp, layers)
                backward_traffic = params + (0.0 if defer else grads)
            else:
                row[_S["dp_gather"]] += params            # gathered once a step, kept
                backward_traffic = 0.0 if defer else grads
            if backward_traffic > 0.0:
                row[_S["dp_mb_reduce"]] += _exposed_tail(backward_traffic, backward, ov_fsdp, layers)
            if defer:
                row[_S["dp_reduce"]] += grads
        elif zero == 2.0 and not defer:
            row[_S["dp_mb_reduce"]] += _exposed_tail(grads, backward, ov_dp, layers)
            row[_S["dp_gather"]] += params
        else:
            row[_S["dp_reduce"]] += grads
            if zero >= 1.0:
                row[_S["dp_gather"]] += params
        # Adam over the local shard, HBM-bound: bytes_opt per parameter per step (states, master
        # copy and gradient read and written, the 16-bit copy written), one fused kernel
        shards = cand[_C["zero_ranks"]] if zero >= 1.0 else 1.0
        local = dense / shards + expert / (edp if zero >= 1.0 else 1.0)
        if local > 0.0:
            row[_S["opt"]] += cand[_C["bytes_opt"]] * local / hbm + rate[_R["kernel_s"]]

    # ---- tied embedding and output on two stages: Megatron all-reduces the word embedding's
    # gradient between the first and the last stage once a step (its "embedding group").
    if cand[_C["tie_emb"]] != 0.0 and emb_stage >= 0 and out_stage >= 0 and emb_stage != out_stage:
        shared = _collective(ALL_REDUCE, smodel[_SM["p_embed"]] / t * bg, 2.0,
                                    (out_stage - emb_stage) * t * cp * d, rate)
        out[emb_stage][_S["dp_reduce"]] += shared
        out[out_stage][_S["dp_reduce"]] += shared


def seconds_combine(stage, cand, parts, stage_times) -> float:
    """The step time from the per-stage sums of seconds_stage_sums; parts and per-stage times out.

    Per micro-batch a stage takes t_i = fw + bw + bw_w + rc + tp + cp + ep + pp + dp_mb_gather +
    dp_mb_reduce. With m micro-batches, M = max t_i (the straggler, the last one on a tie) and
    S = sum t_i:

    * 1F1B and GPipe: (m - 1)·M + S -- the same time; GPipe only holds more activations
      (Narayanan et al. 2021 §2.2: bubble (p - 1)/m of the ideal, equal stages);
    * interleaved 1F1B with v chunks per stage: m·M + (S - M)/v (bubble (p - 1)/(v·m), §2.2.2);
    * Seq1F1B with n sequence chunks: m·M + (S - M)/(v·n) (Sun et al. 2024, Seq1F1B: the pipeline
      runs m·n chunk slots of 1/n the work);
    * zero_bubble_v (DualPipeV): m·M + (p - 1)·max(0, F + 2B - 3W)/2 with the straggler's forward
      F, backward-for-input B (incl. recompute and comm) and weight-gradient W: DeepSeek-V3
      report Table 2's DualPipe bubble (PP/2 - 1)(F&B + B - 3W) with PP = 2p chunks and
      chunk-level F, B, W (half a stage's), F&B taken as F + B (the overlap hides comm, not compute).

    Then the data-parallel tail: stage i's gradient reduction (overlapped with its last
    backward by ov_dp, never its first layer's bucket), optimizer and parameter gather (overlapped
    with the next forward by ov_dp_gather) start when its last backward ends, sum_{j<i} of the
    backward times of the stages before it earlier than stage 0's (zero for zero_bubble_v, whose
    V ends every stage together); the step ends with the latest. Parts: the straggler's parts x m,
    bubble = the pipeline beyond m·M, the tail split over dp_reduce / bw_compute (the optimizer)
    / dp_comm. They sum to the step time. stage_times[i] = m·t_i + stage i's tail before slack.
    NaN when a stage sum is NaN or m < 1.
    """
    n_stages = len(stage)
    _check_rows(stage, "stage", n_stages, _S_COUNT)
    _check_len(cand, "cand", len(SECONDS_CAND_FIELDS))
    _check_len(parts, "parts", len(PART_NAMES))
    _check_len(stage_times, "stage_times", n_stages)
    m = cand[_C["m"]]
    ok = n_stages >= 1 and m >= 1.0
    totals = []
    for st in range(n_stages):
        row = stage[st]
        total = (row[_S["fw"]] + row[_S["bw"]] + row[_S["bw_w"]] + row[_S["rc"]] + row[_S["tp"]]
                 + row[_S["cp"]] + row[_S["ep"]] + row[_S["pp"]] + row[_S["dp_mb_gather"]]
                 + row[_S["dp_mb_reduce"]])
        if total != total:
            ok = False
        totals.append(total)
    if not ok:
        _fill(parts, len(parts), NAN)
        _fill(stage_times, n_stages, NAN)
        return NAN
    straggler = 0
    for st in range(n_stages):
        if totals[st] >= totals[straggler]:
            straggler = st
    slowest = totals[straggler]
    summed = 0.0
    for st in range(n_stages):
        summed += totals[st]
    schedule = cand[_C["schedule"]]
    vp, n_split = cand[_C["vp"]], cand[_C["seq_split"]]
    chunks = 1.0
    if schedule == _INTERLEAVED:
        chunks = vp
    elif schedule == _SEQ1F1B:
        chunks = vp * n_split
    worst = stage[straggler]
    if schedule == _ZERO_BUBBLE_V:
        forward = worst[_S["fw"]]
        backward = (worst[_S["bw"]] + worst[_S["rc"]] + worst[_S["tp"]] + worst[_S["cp"]] + worst[_S["ep"]]
                    + worst[_S["pp"]] + worst[_S["dp_mb_gather"]] + worst[_S["dp_mb_reduce"]])
        bubble_v = forward + 2.0 * backward - 3.0 * worst[_S["bw_w"]]
        pipeline = m * slowest + (n_stages - 1.0) * (bubble_v if bubble_v > 0.0 else 0.0) / 2.0
    else:
        pipeline = m * slowest + (summed - slowest) / chunks
    # the data-parallel tail
    ov_dp, ov_gather = cand[_C["ov_dp"]], cand[_C["ov_dp_gather"]]
    slack = 0.0
    tail = -1.0
    tail_parts = (0.0, 0.0, 0.0)
    for st in range(n_stages):
        row = stage[st]
        layers = row[_S["layers"]]
        backward = (row[_S["bw"]] + row[_S["bw_w"]] + row[_S["rc"]]) / chunks
        reduce_ = _exposed_tail(row[_S["dp_reduce"]], backward, ov_dp, layers) if row[_S["dp_reduce"]] > 0.0 else 0.0
        gather = _exposed_tail(row[_S["dp_gather"]], row[_S["fw"]] / chunks, ov_gather, layers) \
            if row[_S["dp_gather"]] > 0.0 else 0.0
        optimizer = row[_S["opt"]]
        own = reduce_ + optimizer + gather
        stage_times[st] = m * totals[st] + own
        late = own - (0.0 if schedule == _ZERO_BUBBLE_V else slack)
        if late > tail:
            tail, tail_parts = late, (reduce_, optimizer, gather)
        slack += backward
    if tail < 0.0:
        tail = 0.0
    own = tail_parts[0] + tail_parts[1] + tail_parts[2]
    scale = tail / own if own > 0.0 else 0.0
    _fill(parts, len(parts), 0.0)
    parts[_P["fw_compute"]] = m * worst[_S["fw"]]
    parts[_P["bw_compute"]] = m * (worst[_S["bw"]] + worst[_S["bw_w"]]) + scale * tail_parts[1]
    parts[_P["recompute"]] = m * worst[_S["rc"]]
    parts[_P["dp_comm"]] = m * worst[_S["dp_mb_gather"]] + scale * tail_parts[2]
    parts[_P["dp_reduce"]] = m * worst[_S["dp_mb_reduce"]] + scale * tail_parts[0]
    parts[_P["tp_comm"]] = m * worst[_S["tp"]]
    parts[_P["ep_comm"]] = m * worst[_S["ep"]]
    parts[_P["cp_comm"]] = m * worst[_S["cp"]]
    parts[_P["pp_comm"]] = m * worst[_S["pp"]]
    parts[_P["bubble"]] = pipeline - m * slowest
    return pipeline + tail
