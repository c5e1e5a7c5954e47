"""Seconds mode, the price of one op (oracle): a GEMM, an elementwise pass, an fp8 cast, a GEMM's three
passes and an FFN pair; where a layer's ops are noted (the host's launches, the per-op table); and the
checks of the seconds kernels' inputs.

Part of the seconds area (:mod:`ndcost.kernels.seconds` states how time is priced): these are the
scalar pieces :mod:`ndcost.kernels.seconds_layer` and :mod:`ndcost.kernels.seconds` add up.
The twin is ``cysrc/ndcost/kernels/seconds_ops.pxi``.
"""
from __future__ import annotations

from .columns import (
    KIND_FIELDS, LAYER_OP, LAYER_OP_FIELD, MODEL_FIELDS, RATE, RATE_FIELDS, SECONDS_CAND, SECONDS_CAND_FIELDS,
    SECONDS_KIND_FIELDS, SECONDS_MODEL_FIELDS,
)
from .codes import SCOPES
from .nd_ops import _check_len

__all__ = []

# Column indices, bound once (the kernel ABI of ndcost.kernels.columns).
_C = SECONDS_CAND
_R = RATE


#: Where a layer's kernels run, for what a stack replays from CUDA graphs (ExecSpec.cuda_graphs): the
#: attention sub-block (its pre-norm, projections, core, rotary, residual add); a MoE layer's pre-norm,
#: router, shared experts and token permutation (Megatron-Core's moe_router and moe_preprocess scopes);
#: the rest of the FFN sub-block (routed experts, un-permutation, a dense MLP, its residual add).
SCOPE_ATTN, SCOPE_PRE, SCOPE_FFN = (SCOPES.index(name) for name in ("attn", "pre", "ffn"))
#: The note of one layer (``_note``): kernels per scope and pass (forward, backward) in its first six
#: slots, the host's seconds per kernel of each scope in the next three, in the next two (forward,
#: backward) those of the FFN scope's kernels the host launches after a host-device synchronisation
#: (``_note_loop``): a MoE layer's per-expert GEMM and cast loops, whose launches the device waits for;
#: in the last three, 1 where the scope replays from a CUDA graph, 0 where its kernels are launched.
NOTE_SIZE = 14
_O = LAYER_OP
_F = LAYER_OP_FIELD
_F_FLOPS, _F_BYTES, _F_KERNELS, _F_TIME, _F_HOST = (_F["flops_f"], _F["bytes_f"], _F["kernels_f"], _F["time_f"],
                                                    _F["host_f"])
_B_FLOPS, _B_BYTES, _B_KERNELS, _B_TIME, _B_HOST = (_F["flops_b"], _F["bytes_b"], _F["kernels_b"], _F["time_b"],
                                                    _F["host_b"])
_F_GRAPHED, _B_GRAPHED = _F["graphed_f"], _F["graphed_b"]

#: Unfused SwiGLU, ``F.silu(w1(x)) * w3(x)`` (torchtitan FeedForward): silu reads and writes the
#: gate (2 passes), the product reads two and writes one (3): 5 passes of the width, in 2 kernels.
EAGER_SWIGLU_PASSES = 5.0
#: A pointwise op's backward reads its output gradient and one saved tensor and writes its input
#: gradient -- three tensor passes where the forward makes two (read, write): 1.5x the bytes.
#: (The saved tensor is the one Korthikanti et al. 2022 §4.1 count as stored for each op.)
POINTWISE_BACKWARD_BYTES = 1.5
#: Under torch.autocast (ExecSpec.autocast) an fp32 tensor a 16-bit kernel reads is cast for it: read 4
#: bytes, write the 16-bit copy (pytorch/pytorch aten/src/ATen/autocast_mode.cpp cached_cast); the cast's
#: backward (ToCopyBackward0) casts the 16-bit gradient back to fp32: read the 16-bit one, write 4.
AUTOCAST_FP32_BYTES = 4.0
#: Transformers' LlamaRMSNorm on the fp32 stream (transformers/models/llama/modeling_llama.py): ``.to(float32)``
#: (a no-op), ``pow(2)`` (read 4, write 4), ``mean(-1)`` (read 4), ``+ eps`` and ``rsqrt`` on one value a
#: row, ``x * rsqrt`` (read 4, write 4), ``weight * x.to(float32)`` (read 4, write 4): 28 bytes an element,
#: 6 kernels.
AUTOCAST_RMSNORM_BYTES = 28.0
AUTOCAST_RMSNORM_KERNELS = 6.0
#: Its backward, as autograd runs that graph (pytorch/pytorch tools/autograd/derivatives.yaml), per element:
#: ``weight * y`` -- grad·weight (read 4, write 4) and the weight's gradient, grad·y summed over the tokens
#: (read 4 + 4, write 4, the sum reads 4); ``x * r`` -- grad·r (read 4, write 4) and r's gradient, grad·x
#: summed over the row (read 4 + 4, write 4, read 4); mean's backward expanded to the row (write 4); pow's,
#: grad·(2·x) (read 4, write 4; read 4 + 4, write 4); the two gradients of x summed (read 4 + 4, write 4):
#: 84 bytes in 12 kernels (rsqrt's and add's on one value a row), where a pointwise op's 1.5x prices 42 in 6.
AUTOCAST_RMSNORM_BACKWARD_BYTES = 84.0
AUTOCAST_RMSNORM_BACKWARD_KERNELS = 12.0
#: Transformers' apply_rotary_pos_emb on a 16-bit q or k with the fp32 cos / sin LlamaRotaryEmbedding returns
#: (``.to(x.dtype)``, x the fp32 hidden states), per element of q or k, bc its 16 bits: ``q * cos`` (read bc,
#: write 4: fp32 by type promotion), rotate_half's ``-x2`` (half the elements: read and write bc/2 each) and
#: ``cat`` (read bc, write bc), ``* sin`` (read bc, write 4), ``+`` (read 4 + 4, write 4), then autocast's cast
#: for SDPA (read 4, write bc): 6·bc + 24 bytes, 6 kernels a tensor (AUTOCAST_ROPE_FP32_BYTES the fp32 part).
AUTOCAST_ROPE_FP32_BYTES = 24.0
AUTOCAST_ROPE_KERNELS = 6.0
#: The residual add of an fp32 stream and a 16-bit sub-block output (``residual + hidden_states``, fp32 by
#: type promotion): forward read 4 + bc, write 4; backward, the fp32 gradient cast to the 16-bit branch
#: (read 4, write bc: AddBackward0 casts a gradient to each input's dtype) and the stream's two gradients
#: (the residual path's and the norm's) summed by autograd (read 4 + 4, write 4): 16 + bc, 2 kernels.
AUTOCAST_RESIDUAL_FP32_BYTES = 8.0
AUTOCAST_RESIDUAL_BACKWARD_FP32_BYTES = 16.0
#: The loss under autocast (Transformers' ForCausalLMLoss: ``logits = logits.float()`` then
#: ``nn.functional.cross_entropy``; log_softmax and nll_loss are on autocast's fp32 list anyway), per logit:
#: forward the upcast (read bc, write 4) and log_softmax over the vocabulary (PyTorch's cunn_SoftMaxForward
#: for a row wider than its block: read for the max, read for the sum of exponentials, read and write the
#: result: 16), nll_loss's gather a row: bc + 20 bytes, 3 kernels; backward nll_loss_backward's dense fp32
#: gradient (zeros: write 4, one scatter a row), log_softmax_backward (read the gradient for its row sum,
#: read it and the kept output, write: 16) and the cast back to the logits' 16 bits (read 4, write bc):
#: 24 + bc bytes, 4 kernels.
AUTOCAST_CE_FORWARD_FP32_BYTES = 20.0
AUTOCAST_CE_FORWARD_KERNELS = 3.0
AUTOCAST_CE_BACKWARD_FP32_BYTES = 24.0
AUTOCAST_CE_BACKWARD_KERNELS = 4.0


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


def _backward_casts(gradient: float, cached: float, cand, rate) -> float:
    """The backward's fp8 casts of a GEMM: its *gradient* elements (the output gradient) cast at f8_gcast_b bytes
    in f8_gcast_k kernels, its *cached* input elements re-quantized for the weight gradient at f8_rq_b bytes in
    f8_rq_k kernels (DeepSeek-V3's recipe; none elsewhere: ``Rates.fp8_backward_casts``). 0 unless fp8."""
    if cand[_C["bytes_mm"]] != 1.0:
        return 0.0
    cast = _pass(rate[_R["f8_gcast_b"]] * gradient, rate[_R["f8_gcast_k"]], rate) if gradient > 0.0 else 0.0
    if cached > 0.0:
        cast += _pass(rate[_R["f8_rq_b"]] * cached, rate[_R["f8_rq_k"]], rate)
    return cast


def _pass(moved: float, kernels: float, rate) -> float:
    """Elementwise work: bytes over the achievable HBM bandwidth plus kernel_s per kernel."""
    if moved <= 0.0:
        return 0.0
    return moved / (rate[_R["hbm_eff"]] * rate[_R["hbm_bw"]]) + kernels * rate[_R["kernel_s"]]


def _fill(out, count: int, value: float) -> None:
    """out[0:count] = value (a row zeroed before its sums, or NaN for a row that is not priced)."""
    for i in range(count):
        out[i] = value


def _expert_load(cand) -> float:
    """The busiest expert-parallel rank's routed tokens over the mean: moe_imbalance dropless, the capacity
    factor in capacity mode (every rank padded to it). Its expert GEMMs (``_moe_ffn``) and its all-to-alls
    (``seconds_comm._expert_alltoalls``) both carry it."""
    return cand[_C["moe_imb"]] if cand[_C["dropless"]] != 0.0 else cand[_C["cap_fact"]]


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
    """A weight GEMM [m x k]·[k x n] run *chunks* times: out3 = (forward, input grad, weight grad,
    forward kernels, backward kernels).

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
    out3[3] = chunks * f_split
    out3[4] = chunks * (d_split + 1.0)
    if not sixteen:
        out3[0] += chunks * _cast(m * k, cand, rate) + rate[_R["f8_w_mb"]] * _cast(k * n, cand, rate)
        out3[1] += chunks * _backward_casts(m * n, m * k, cand, rate)
        if cand[_C["bytes_mm"]] == 1.0:
            # the casts' kernels: the input's every chunk, the weight's with f8_w_mb, the output grad's and
            # the cached input's re-quantization
            out3[3] += (chunks + rate[_R["f8_w_mb"]]) * rate[_R["f8_cast_k"]]
            out3[4] += chunks * (rate[_R["f8_gcast_k"]] + rate[_R["f8_rq_k"]])


def _add_gemm(sums, g3) -> None:
    """Add a weight GEMM's (forward, input grad, weight grad) to sums = [fw, bw, bw_w, gemm_f, gemm_b]."""
    sums[0] += g3[0]
    sums[1] += g3[1]
    sums[2] += g3[2]
    sums[3] += g3[0]
    sums[4] += g3[1] + g3[2]


def _ffn_pair(rows: float, width: float, h: float, n_ff: float, n_split: float, cand, rate, sums, note, ops,
              op: int, scope: int) -> float:
    """A dense FFN of *width* on this rank: up h -> (n_ff - 1)·width/t (gate and up fused when gated,
    n_ff = 3), then down width/t -> h (Megatron's column- / row-parallel pair).

    Each GEMM's times go into sums (``_add_gemm``), the up GEMM's first, and into the layer's note as
    the op *op* of the graph scope *scope* (a dense MLP's is the FFN scope, a MoE layer's shared experts
    the router's: ``_moe_ffn``); returns the pair's forward time (the FFN matmuls a census share
    recomputes).
    """
    t = cand[_C["t"]]
    g5 = [0.0] * 5
    _mm3_noted(rows, (n_ff - 1.0) * width / t, h, n_split, cand, rate, g5, False, 1, note, ops, op, scope)
    _add_gemm(sums, g5)
    forward = g5[0]
    _mm3_noted(rows, h, width / t, n_split, cand, rate, g5, False, 2, note, ops, op, scope)
    _add_gemm(sums, g5)
    return forward + g5[0]


def _captures(graphs: float, scope: int) -> bool:
    """Whether the ``graphs`` code (a bit mask of SCOPES, ndcost.spec.graph_scopes) replays *scope*; a code
    outside 0-7 captures nothing."""
    return 0.0 <= graphs < 8.0 and (int(graphs) >> scope) & 1 == 1


def _note_start(cand, rate, note) -> None:
    """A layer's note before its ops: no kernels yet, and each scope's host seconds per kernel --
    a replayed kernel's (graph_s) where the spec's CUDA graphs capture the scope (``_captures``), a
    launch's (launch_s) elsewhere."""
    graphs = cand[_C["graphs"]]
    launch, replay = rate[_R["launch_s"]], rate[_R["graph_s"]]
    for i in range(6):
        note[i] = 0.0
    note[9] = note[10] = 0.0
    for scope in (SCOPE_ATTN, SCOPE_PRE, SCOPE_FFN):
        held = _captures(graphs, scope)
        note[6 + scope] = replay if held else launch
        note[11 + scope] = 1.0 if held else 0.0


def _note(note, ops, op: int, scope: int, flops_f: float, bytes_f: float, kernels_f: float, time_f: float,
          flops_b: float, bytes_b: float, kernels_b: float, time_b: float) -> None:
    """Count an op's kernels in the layer's note (what the host launches, per scope and pass) and, when a
    per-op table is asked for (*ops* not None), add its figures to its row."""
    note[2 * scope] += kernels_f
    note[2 * scope + 1] += kernels_b
    if ops is not None:
        row = ops[op]
        row[_F_FLOPS] += flops_f
        row[_F_BYTES] += bytes_f
        row[_F_KERNELS] += kernels_f
        row[_F_TIME] += time_f
        row[_F_HOST] += kernels_f * note[6 + scope]
        row[_F_GRAPHED] += kernels_f * note[11 + scope]
        row[_B_FLOPS] += flops_b
        row[_B_BYTES] += bytes_b
        row[_B_KERNELS] += kernels_b
        row[_B_TIME] += time_b
        row[_B_HOST] += kernels_b * note[6 + scope]
        row[_B_GRAPHED] += kernels_b * note[11 + scope]


def _note_pass(note, ops, op: int, scope: int, moved: float, kernels: float, rate, sums) -> float:
    """An elementwise op of *moved* forward bytes in *kernels* kernels: its forward and backward
    (POINTWISE_BACKWARD_BYTES the bytes, as many kernels) added to sums[0], sums[1] and noted; returns
    its forward time."""
    forward = _pass(moved, kernels, rate)
    backward = _pass(POINTWISE_BACKWARD_BYTES * moved, kernels, rate)
    sums[0] += forward
    sums[1] += backward
    if moved > 0.0:
        _note(note, ops, op, scope, 0.0, moved, kernels, forward, 0.0, POINTWISE_BACKWARD_BYTES * moved, kernels,
              backward)
    return forward


def _mm3_noted(m: float, n: float, k: float, chunks: float, cand, rate, out5, sixteen: bool, side: int, note, ops,
               op: int, scope: int) -> None:
    """``_mm3`` into out5, noted as the op *op* of *scope*: its FLOPs (2·m·n·k a chunk forward, twice
    that backward) and HBM bytes as ``_gemm`` counts them, forward and backward (input and weight grads)."""
    _mm3(m, n, k, chunks, cand, rate, out5, sixteen, side)
    flops = bytes_f = bytes_b = 0.0
    if ops is not None and m > 0.0 and n > 0.0 and k > 0.0:
        bc = cand[_C["bytes_c"]]
        bm = bc if sixteen else cand[_C["bytes_mm"]]
        flops = 2.0 * m * n * k * chunks
        bytes_f = chunks * (bm * (m * k + k * n) + bc * m * n)
        bytes_b = chunks * (bm * (m * n + n * k) + bc * m * k + bm * (k * m + m * n)
                            + 2.0 * cand[_C["bytes_grad"]] * k * n)
    _note(note, ops, op, scope, flops, bytes_f, out5[3], out5[0], 2.0 * flops, bytes_b, out5[4], out5[1] + out5[2])


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


def _note_loop(note, cand, kernels_f: float, kernels_b: float) -> None:
    """Mark *kernels_f* / *kernels_b* of the FFN scope's kernels (already counted by ``_note``) as launched
    after a host-device synchronisation: the device has drained its queue and waits on each launch, so
    their host time adds to the pass instead of hiding under its device time (``_note_launch``; Megatron-Core's
    "AlltoAll dispatcher and GroupedGEMM rely on CPU-resident tensors for token-expert assignments ... host
    synchronizations", NVIDIA/Megatron-LM PR 3496). Not where the scope replays from a CUDA graph: captured
    with its shapes fixed, it waits on no host."""
    if _captures(cand[_C["graphs"]], SCOPE_FFN):
        return
    note[9] += kernels_f
    note[10] += kernels_b


def _note_launch(note, ops, forward: float, backward: float) -> tuple[float, float]:
    """What the host's launches add to a pass of *forward* / *backward* device seconds: (forward, backward)
    waits -- the host's time beyond the device's (0 where the device is slower) for the kernels the host
    launches ahead of the device, plus the whole host time of those launched after a synchronisation
    (``_note_loop``: an estimate, the serial bound; docs/VALIDATION.md "host-synchronised expert loops");
    with *ops*, the "launch" row (its host columns: the whole pass's host time)."""
    host_f = note[0] * note[6] + note[2] * note[7] + note[4] * note[8]
    host_b = note[1] * note[6] + note[3] * note[7] + note[5] * note[8]
    loop_f = note[9] * note[8]
    loop_b = note[10] * note[8]
    wait_f = host_f - loop_f - forward if host_f - loop_f > forward else 0.0
    wait_b = host_b - loop_b - backward if host_b - loop_b > backward else 0.0
    wait_f += loop_f
    wait_b += loop_b
    if ops is not None:
        row = ops[_O["launch"]]
        row[_F_TIME] = wait_f
        row[_B_TIME] = wait_b
        row[_F_HOST] = host_f
        row[_B_HOST] = host_b
    return wait_f, wait_b
