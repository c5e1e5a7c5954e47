"""Seconds mode, the price of one op (oracle): a GEMM, an elementwise pass, an fp8 cast, a GEMM's three
passes and an FFN pair; and the checks of the seconds kernels' inputs.

Part of the seconds area (:mod:`ndcost.kernels.seconds` states how time is priced): these are the
scalar pieces :mod:`ndcost.kernels.seconds_layer` and :mod:`ndcost.kernels.seconds` add up.
The twin is ``cysrc/ndcost/kernels/seconds_ops.pxi``.
"""
from __future__ import annotations

from .columns import (
    KIND_FIELDS, MODEL_FIELDS, RATE, RATE_FIELDS, SECONDS_CAND, SECONDS_CAND_FIELDS, SECONDS_KIND_FIELDS,
    SECONDS_MODEL_FIELDS,
)
from .nd_ops import _check_len

__all__ = []

# Column indices, bound once (the kernel ABI of ndcost.kernels.columns).
_C = SECONDS_CAND
_R = RATE


#: A pointwise op's backward reads its output gradient and one saved tensor and writes its input
#: gradient -- three tensor passes where the forward makes two (read, write): 1.5x the bytes.
#: (The saved tensor is the one Korthikanti et al. 2022 §4.1 count as stored for each op.)
POINTWISE_BACKWARD_BYTES = 1.5


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
