"""Seconds mode, a MoE layer's FFN (oracle): the router, the permutation of tokens to their experts, the
routed experts as grouped GEMMs at their real shape, their activation, the un-permutation and the shared
experts, each an op of the layer's note (``ndcost.kernels.seconds_ops._note``).

Part of the seconds area (:mod:`ndcost.kernels.seconds` states how time is priced); called by
:mod:`ndcost.kernels.seconds_layer`. The twin is ``cysrc/ndcost/kernels/seconds_moe.pxi``.

What each op moves and launches depends on the stack (``Rates.moe_permute``, ``moe_router_fusion``,
``moe_aux_loss``, ``grouped_gemm_impl``); the counts below are read off each stack's code, op by op, in bytes
per element of the tensors named (T the tokens this rank routes, E the experts, k the experts a token
picks, R = T·k·capacity the routed rows, h the hidden size; 16-bit activations, fp32 probabilities).
"""
from __future__ import annotations

import math

from .columns import (
    LAYER_OP, LAYER_OP_FIELDS, LAYER_OP_NAMES, MODEL, MOE_BLOCK, MOE_BLOCK_FIELDS, RATE, RATE_FIELDS, SECONDS_CAND,
    SECONDS_CAND_FIELDS, SECONDS_MODEL,
)
from .codes import BIAS_ADDS, CLAMPS, GEMM_LAUNCHES, PERMUTES
from .nd_ops import _check_len
from .seconds_ops import (
    EAGER_SWIGLU_PASSES, NOTE_SIZE, SCOPE_FFN, SCOPE_PRE, _add_gemm, _backward_casts, _cand_ok, _cast, _check_rows,
    _expert_load, _ffn_pair, _fill, _gemm, _mm3_noted, _note, _note_launch, _note_loop, _note_pass, _note_start, _pass,
)

__all__ = ["seconds_moe_block"]

NAN = math.nan

_M = MODEL
_SM = SECONDS_MODEL
_C = SECONDS_CAND
_R = RATE
_O = LAYER_OP
_B = MOE_BLOCK

#: PyTorch's sm90 grouped GEMM (pytorch/pytorch aten/src/ATen/native/cuda/GroupMM.cu,
#: dispatch_bf16_grouped_kernel_on_tile_size): 128 x 256 output tiles, 64 x 128 when a group's rows
#: (M / groups) or the columns are <= 128 ("small").
GROUPED_TILE = (128.0, 256.0)
GROUPED_SMALL_TILE = (64.0, 128.0)
GROUPED_SMALL = 128.0
#: Streams Transformer Engine spreads a grouped GEMM's per-expert cuBLAS GEMMs over
#: (NVIDIA/TransformerEngine transformer_engine/common/include/transformer_engine/multi_stream.h num_streams).
MULTI_STREAMS = 4.0
#: Permutation modes (Rates.moe_permute, ndcost.spec.moe_kernels.MOE_PERMUTES order).
PERMUTE_FUSED, PERMUTE_UNFUSED, PERMUTE_SORT = (float(PERMUTES.index(name)) for name in ("fused", "unfused", "sort"))
#: The grouped GEMM's launch code of one grouped kernel a call (Rates.grouped_gemm_impl "cutlass").
_CUTLASS = float(GEMM_LAUNCHES.index("cutlass"))
#: How the routed experts' biases are added (Rates.expert_bias, ndcost.spec.moe_kernels.EXPERT_BIASES order).
BIAS_DOWN_SPLIT, BIAS_SPLIT, BIAS_GATHERED = (float(BIAS_ADDS.index(name)) for name in ("down_split", "split",
                                                                                        "gathered"))
#: How a GLU's halves are clamped (Rates.glu_clamp, ndcost.spec.moe_kernels.GLU_CLAMPS order).
CLAMP_SEPARATE, CLAMP_CONCATENATED = (float(CLAMPS.index(name)) for name in ("separate", "concatenated"))
#: Clamping a GLU's two halves as their own eager kernels (``_glu_clamp_passes``), in bytes of a gate-up element:
#: forward, each half read and written by its clamp; backward, PyTorch's clamp_backward of the gate half (``le``:
#: read, write a 1-byte mask; ``where`` against a zero scalar: read the mask and the gradient, write -- 3·bc + 2
#: an element of the half) and of the linear half (``ge`` and ``le``, ``logical_and_``, ``where``: 4·bc + 6), then
#: the chunk's gradient concatenated (read and write: 2·bc): (7·bc + 8) / 2 + 2·bc = 5.5·bc + 4; in 2 kernels
#: forward and 9 backward (6, their 2 zero scalars' fills, the concatenation).
CLAMP_FORWARD_WIDTHS = 2.0
CLAMP_BACKWARD_WIDTHS, CLAMP_BACKWARD_MASK_BYTES = 5.5, 4.0
CLAMP_KERNELS = (2.0, 9.0)
#: Megatron-Core's concatenation of the clamped halves (read and write: 2·bc a gate-up element) and the copy of
#: the linear offset's scalar to the device: 2 launches (the copy, from pageable memory, also synchronises the
#: host with the device -- the per-expert GEMMs after it are already priced as launched after a wait).
CONCAT_WIDTHS = 2.0
CONCAT_KERNELS = 2.0
#: Bytes of one fp32 probability and of one int64 index.
PROB_BYTES = 4.0
INDEX_BYTES = 8.0


def _grouped(groups: float, m: float, n: float, k: float, in_bytes: float, out_bytes: float, rate) -> float:
    """One grouped GEMM over *groups* experts, each [m x k]·[k x n] (m rows an expert): 0 when empty.

    Compute: the output tiles of every expert (GROUPED_TILE, rows rounded up to a tile per expert) in
    whole waves over the SMs, each tile 2·tm·tn·(k + g_tile_k) FLOPs at the large-GEMM rate mm_eff·peak
    spread over the SMs -- a tile's prologue and epilogue cost g_tile_k elements of its main loop (not
    hidden when the main loop is short: a weight gradient's inner dimension is the expert's rows).
    Memory: every expert's inputs and output once at hbm_eff·hbm_bw. A few hundred rows an expert make the
    weights' bytes rival the FLOPs: the longer of the two plus g_stream of the shorter (the weight stream
    a tile waits on is not all hidden), plus kernel_s. g_tile_k and g_stream are fitted across 34
    measured grouped GEMMs (``ndcost.spec.moe_kernels``), the wave rule is NVIDIA's Matrix Multiplication
    Background User's Guide §3.2.
    """
    if groups <= 0.0 or m <= 0.0 or n <= 0.0 or k <= 0.0:
        return 0.0
    tm, tn = GROUPED_TILE
    if m <= GROUPED_SMALL or n <= GROUPED_SMALL:
        tm, tn = GROUPED_SMALL_TILE
    sms = rate[_R["sms"]]
    tiles = groups * float(math.ceil(m / tm)) * float(math.ceil(n / tn))
    waves = float(math.ceil(tiles / sms))
    compute = waves * 2.0 * tm * tn * (k + rate[_R["g_tile_k"]]) * sms / (rate[_R["mm_eff"]] * rate[_R["peak_mm"]])
    memory = groups * (in_bytes * (m * k + k * n) + out_bytes * m * n) / (rate[_R["hbm_eff"]] * rate[_R["hbm_bw"]])
    if compute > memory:
        return compute + rate[_R["g_stream"]] * memory + rate[_R["kernel_s"]]
    return memory + rate[_R["g_stream"]] * compute + rate[_R["kernel_s"]]


def _experts_gemm(groups: float, m: float, n: float, k: float, in_bytes: float, out_bytes: float, rate) -> float:
    """The routed experts' GEMM of one pass as the stack runs it: one grouped kernel (``_grouped``), or
    (g_launch 1, Transformer Engine's GroupedLinear on Hopper) one cuBLAS GEMM per expert over
    MULTI_STREAMS streams -- *groups* dense GEMMs priced as one batch (``_gemm``: the device's cuBLAS
    rate and wave tail over all of their tiles), their fixed costs overlapping MULTI_STREAMS at a time."""
    if rate[_R["g_launch"]] == _CUTLASS:
        return _grouped(groups, m, n, k, in_bytes, out_bytes, rate)
    if groups <= 0.0 or m <= 0.0 or n <= 0.0 or k <= 0.0:
        return 0.0
    rounds = float(math.ceil(groups / MULTI_STREAMS))
    return _gemm(m, n, k, groups, in_bytes, out_bytes, rate) + (rounds - 1.0) * rate[_R["kernel_s"]]


def _router_passes(tok: float, n_exp: float, topk: float, bias: float, bc: float, rate, out4) -> None:
    """The router's elementwise work beyond its logits GEMM, on *tok* rows of *n_exp* logits: out4 =
    (forward bytes, forward kernels, backward bytes, backward kernels).

    Fused (Transformer Engine's fused top-k router, Megatron's --moe-router-fusion): one kernel a pass
    reads the 16-bit logits and writes the fp32 probabilities and the routing map (bc + 4 + 1 bytes a
    logit); backward reads the probabilities' gradient and the saved probabilities and writes the logits'
    gradient (4 + 4 + bc); the aux loss is fused in. Unfused: the logits cast to fp32 (bc + 4), the score
    (softmax or sigmoid: 4 + 4), the top-k (reads 4, writes k values and indices, 4 + 8 each, in 2
    kernels), the renormalisation of the k scores (3 kernels), and, with the fused permutation's or
    Megatron's routing map, the k probabilities scattered into dense fp32 probabilities and a bool map
    (zero-filled, 4 + 1 a logit; 2 kernels) -- backward as many kernels, the top-k's gradient scattered
    into zeros (4 a logit) and the score's and cast's backward (4 + 4 + 4 + bc). A load-balancing aux
    loss (aux_loss) sums the map and the probabilities over the tokens (1 + 4 a logit, 6 small kernels)
    and spreads its gradient over the probabilities (4 + 4 a logit, 3 kernels). A score-correction bias
    (*bias*: DeepSeek-V3's sigmoid routing) is added to the fp32 scores before the top-k (read 4, write 4,
    1 kernel) and the chosen unbiased scores gathered back (4 + 8 read, 4 written a choice, 1 kernel); the
    bias takes no gradient.
    """
    logits = tok * n_exp
    chosen = tok * topk
    if rate[_R["router_fused"]] != 0.0:
        out4[0] = (bc + 5.0) * logits
        out4[1] = 1.0
        out4[2] = (8.0 + bc) * logits
        out4[3] = 1.0
        return
    f_bytes = (bc + 4.0 + 8.0 + 4.0) * logits + 12.0 * chosen + 3.0 * 8.0 * chosen
    b_bytes = (4.0 + 12.0 + bc) * logits + 12.0 * chosen + 3.0 * 8.0 * chosen
    kernels = 1.0 + 1.0 + 2.0 + 3.0
    if rate[_R["permute"]] != PERMUTE_SORT:
        f_bytes += 2.0 * (PROB_BYTES + 1.0) * logits + (PROB_BYTES + INDEX_BYTES) * chosen
        b_bytes += PROB_BYTES * logits
        kernels += 2.0
    out4[1] = kernels
    out4[3] = kernels
    if bias != 0.0:
        f_bytes += 8.0 * logits + 16.0 * chosen
        out4[1] += 2.0
    if rate[_R["aux_loss"]] != 0.0:
        f_bytes += (1.0 + PROB_BYTES) * logits
        b_bytes += 2.0 * PROB_BYTES * logits
        out4[1] += 6.0
        out4[3] += 3.0
    out4[0] = f_bytes
    out4[2] = b_bytes


def _permute_passes(tok: float, n_exp: float, chosen: float, sent: float, routed: float, h: float, bc: float,
                    ep: float, disp: float, rate, out8) -> None:
    """Moving *tok* tokens of *h* (*chosen* token-expert pairs) to the *sent* rows of their copies and, on the
    experts' side, the *routed* rows the local experts compute, and back: out8 = (permute forward bytes,
    kernels, backward bytes, kernels, un-permute forward bytes, kernels, backward bytes, kernels, the
    permute backward's atomic adds, the un-permute forward's).

    The copies are *sent* rows (the rank's own tokens' k copies, padded to the capacity in capacity mode).
    A scatter-add (index_add_ / scatter_add_ into a zero-filled target) reads its rows and adds each
    element into its target atomically: the atomic adds run at the device's scatter_rate (elements a second,
    ``Rates.scatter_add_rate``), not at the HBM rate. Fused (TE moe_permute / moe_unpermute): a row map from the routing map (1 + 4 a logit, 2 kernels)
    and one copy of each token to its rows (bc·T·h read, bc·R·h and the fp32 probabilities written);
    backward a gather-sum back (1 kernel); the un-permute a weighted gather-sum of each token's rows
    (1 kernel), its backward the rows' gradient and the probabilities' (reading the saved rows, 1 kernel).
    Unfused (Megatron-Core moe_utils.permute / unpermute): the routing map transposed (2 a logit), the token
    indices masked out of it (1 + 8 a logit read, 8 a row written), the rows gathered (index_select), the
    probabilities transposed and masked (8 a logit, 4 a row): 5 kernels; backward an index_add into zeros
    (2); the un-permute multiplies the rows by their probabilities, zero-fills and scatter-adds (3), its
    backward gathers the gradient, multiplies it and reduces the probabilities' gradient (3). Sort
    (torchtitan): an argsort of the T·k chosen experts (a radix sort: 4 passes reading and writing int64
    keys and values, 4 kernels), a histogram and its cumsum (2), an index gather (1); backward a scatter-add into zeros (2);
    the un-permute as unfused. Across expert-parallel ranks (ep > 1) with the all-to-all dispatcher
    (*disp* 0) the *routed* rows received are sorted by local expert and back (Megatron's
    sort_chunks_by_idxs): one more copy each way; DeepEP (*disp* 1) delivers them in its own layout.
    """
    rows_b = bc * sent * h
    tokens_b = bc * tok * h
    scatter = tokens_b + rows_b                  # zero-fill the target, read the rows (the adds: atomics)
    mode = rate[_R["permute"]]
    if mode == PERMUTE_FUSED:
        out8[0] = (1.0 + PROB_BYTES) * tok * n_exp + tokens_b + rows_b + PROB_BYTES * sent
        out8[1] = 3.0
        out8[2] = rows_b + tokens_b
        out8[3] = 1.0
        out8[4] = rows_b + PROB_BYTES * sent + tokens_b
        out8[5] = 1.0
        out8[6] = tokens_b + 2.0 * rows_b + PROB_BYTES * sent
        out8[7] = 1.0
        out8[8] = out8[9] = 0.0
    else:
        if mode == PERMUTE_UNFUSED:
            out8[0] = (2.0 + 9.0 + 8.0) * tok * n_exp + (INDEX_BYTES + PROB_BYTES) * sent + 2.0 * rows_b
            out8[1] = 5.0
        else:
            out8[0] = 4.0 * 2.0 * 2.0 * INDEX_BYTES * chosen + 2.0 * rows_b
            out8[1] = 4.0 + 2.0 + 1.0
        out8[2] = scatter
        out8[3] = 2.0
        out8[4] = 2.0 * rows_b + (PROB_BYTES + INDEX_BYTES) * sent + scatter
        out8[5] = 3.0
        out8[6] = 6.0 * rows_b + PROB_BYTES * sent
        out8[7] = 3.0
        out8[8] = out8[9] = sent * h
    if ep > 1.0 and disp == 0.0:
        for i in (0, 2, 4, 6):
            out8[i] += 2.0 * bc * routed * h
        for i in (1, 3, 5, 7):
            out8[i] += 1.0


def _expert_bias_passes(rows: float, wide: float, h: float, local: float, n_split: float, bc: float, rate,
                        out6) -> None:
    """Adding the routed experts' biases to the *rows* outputs of their gate-up (*wide*) and down (*h*) GEMMs
    as the stack does it (``Rates.expert_bias``): out6 = (forward bytes, kernels, backward bytes, kernels, and of
    those kernels the ones the host launches expert by expert, forward and backward).

    Epilogue: nothing beyond the GEMM. Split, the down projection's (Megatron-Core's TEGroupedMLP._apply_bias):
    per expert, its bias times its rows' fp32 probabilities (written at PROB_BYTES), added to its rows (read bc +
    PROB_BYTES, written PROB_BYTES), then all concatenated (read and written at PROB_BYTES) and cast back (read
    PROB_BYTES, write bc): 6·PROB_BYTES + 2·bc a row element in 2 kernels an expert and 2; backward the cast's
    gradient up (bc + PROB_BYTES), each expert's gradient cast down (PROB_BYTES + bc), its bias gradient and
    its probabilities' gradient each a product and a sum (3·PROB_BYTES each), the split's gradient concatenated
    (2·bc): 8·PROB_BYTES + 4·bc in 5 kernels an expert and 2. Split, the gate-up's as well (NeMo AutoModel's
    DeepEP experts: no probabilities): an add an expert and a concatenation, 4·bc, backward each bias's sum and
    the concatenated gradient, 3·bc, in local + 1 kernels a pass. Gathered (torchtitan): each bias
    repeat_interleave-d to the rows (bc written) and added (2·bc read, bc written) in 3 kernels with the bias
    table's padding, backward its sum back per expert (bc read, 2 kernels), for both GEMMs, no per-expert loop.
    """
    mode = rate[_R["e_bias"]]
    for i in range(6):
        out6[i] = 0.0
    down = rows * h
    up = rows * wide
    if mode == BIAS_DOWN_SPLIT or mode == BIAS_SPLIT:
        out6[0] = (6.0 * PROB_BYTES + 2.0 * bc) * down
        out6[1] = (2.0 * local + 2.0) * n_split
        out6[2] = (8.0 * PROB_BYTES + 4.0 * bc) * down
        out6[3] = (5.0 * local + 2.0) * n_split
        out6[4] = 2.0 * local * n_split
        out6[5] = 5.0 * local * n_split
        if mode == BIAS_SPLIT:
            out6[0] += 4.0 * bc * up
            out6[1] += (local + 1.0) * n_split
            out6[2] += 3.0 * bc * up
            out6[3] += (local + 1.0) * n_split
            out6[4] += local * n_split
            out6[5] += local * n_split
    elif mode == BIAS_GATHERED:
        out6[0] = 4.0 * bc * (up + down)
        out6[1] = 6.0 * n_split
        out6[2] = bc * (up + down)
        out6[3] = 4.0 * n_split


def _glu_clamp_passes(elems: float, bc: float, rate, out4) -> None:
    """Clamping the two halves of *elems* gate-up elements before a GLU as the stack does it
    (``Rates.glu_clamp``): out4 = (forward bytes, kernels, backward bytes, kernels) of one pass over them. "fused":
    nothing beyond the activation; "separate": the clamps as eager kernels (``CLAMP_*``), fused by torch.compile where
    the stack compiles its elementwise ops (``Rates.elementwise``); "concatenated" (Megatron-Core's
    weighted_bias_quick_geglu_impl, outside its jit-fused function): the same, always, and a concatenation and the
    offset's copy (``CONCAT_*``)."""
    mode = rate[_R["glu_clamp"]]
    for i in range(4):
        out4[i] = 0.0
    if mode == CLAMP_CONCATENATED or (mode == CLAMP_SEPARATE and rate[_R["ew_eager"]] != 0.0):
        out4[0] = CLAMP_FORWARD_WIDTHS * bc * elems
        out4[1] = CLAMP_KERNELS[0]
        out4[2] = (CLAMP_BACKWARD_WIDTHS * bc + CLAMP_BACKWARD_MASK_BYTES) * elems
        out4[3] = CLAMP_KERNELS[1]
        if mode == CLAMP_CONCATENATED:
            out4[0] += CONCAT_WIDTHS * bc * elems
            out4[1] += CONCAT_KERNELS


def _moe_block(tok: float, slots: float, local: float, h: float, width: float, n_ff: float, n_exp: float,
               topk: float, shared: float, shared_tokens: float, grad_acc: float, bias: float, e_bias: float,
               clamp: float, cand, rate, sums, note, ops) -> tuple[float, float]:
    """A MoE block on one rank, per micro-batch, into sums = [fw, bw, bw_w, gemm_f, gemm_b] and the note;
    returns (the forward of its FFN matmuls -- routed and shared experts, what a census share recomputes
    --, the forward of its activations -- what a recomputed ffAct re-runs).

    *tok* tokens routed by the rank (router, permutation, un-permutation), *slots* token-expert rows its
    *local* experts compute. The router (a 16-bit linear replicated over tp: Megatron-Core's TopKRouter is
    no Transformer Engine module, it never runs fp8) and its score, top-k and aux loss; the permutation;
    the routed experts as grouped GEMMs at slots / local rows an expert, forward, input and weight
    gradients (``_grouped``; the weight gradient's inner dimension is the expert's rows), under fp8 with
    their casts; their activation (SwiGLU: 3 passes of the width fused, 5 eager); the un-permutation; the
    shared experts as a dense FFN of their width over *shared_tokens*. ``grouped_gemm_impl`` "cutlass" launches
    a grouped GEMM as its setup kernel and itself, "multi_stream" a GEMM per local expert. With
    *grad_acc*, the routed weights' gradients are added into existing ones by a separate pass (read both,
    write one), as ``seconds_layer`` prices every weight without gradient-accumulation fusion; *bias*: the
    router adds a score-correction bias (``_router_passes``); with *e_bias*, the experts carry biases, added as
    the stack adds them (``_expert_bias_passes``); with *clamp*, a gated expert clamps its halves before its
    activation, as the stack does it (``_glu_clamp_passes``: part of the activation, re-run with it).
    """
    t, t_exp, n_split = cand[_C["t"]], cand[_C["t_exp"]], cand[_C["seq_split"]]
    bc, bm, bg = cand[_C["bytes_c"]], cand[_C["bytes_mm"]], cand[_C["bytes_grad"]]
    eager = rate[_R["ew_eager"]] != 0.0
    g5 = [0.0] * 5
    four = [0.0] * 4
    eight = [0.0] * 10
    # ---- router: the logits GEMM, then its score, top-k and aux loss (scope of Megatron's moe_router)
    _mm3_noted(tok / n_split, n_exp, h, n_split, cand, rate, g5, True, 0, note, ops, _O["router"], SCOPE_PRE)
    _add_gemm(sums, g5)
    _router_passes(tok, n_exp, topk, bias, bc, rate, four)
    _note_two(note, ops, _O["router"], SCOPE_PRE, four[0], four[1] * n_split, four[2], four[3] * n_split, rate, sums,
              0.0, 0.0)
    # ---- permutation (scope of moe_preprocess) and un-permutation
    capacity = cand[_C["cap_fact"]] if cand[_C["dropless"]] == 0.0 else 1.0
    sent = tok * topk * capacity
    _permute_passes(tok, n_exp, tok * topk, sent if sent < slots else slots, slots, h, bc, cand[_C["ep"]],
                    cand[_C["ep_disp"]], rate, eight)
    scatter_rate = rate[_R["scatter_rate"]]
    _note_two(note, ops, _O["permute"], SCOPE_PRE, eight[0], eight[1] * n_split, eight[2], eight[3] * n_split,
              rate, sums, 0.0, eight[8] / scatter_rate if scatter_rate > 0.0 else 0.0)
    _note_two(note, ops, _O["unpermute"], SCOPE_FFN, eight[4], eight[5] * n_split, eight[6], eight[7] * n_split,
              rate, sums, eight[9] / scatter_rate if scatter_rate > 0.0 else 0.0, 0.0)
    # ---- routed experts: grouped GEMMs over the local experts, per Seq1F1B chunk
    per = slots / local / n_split if local > 0.0 else 0.0
    wide = (n_ff - 1.0) * width / t_exp       # gate and up fused when gated
    narrow = width / t_exp
    e_f = n_split * (_experts_gemm(local, per, wide, h, bm, bc, rate)
                     + _experts_gemm(local, per, h, narrow, bm, bc, rate))
    e_d = n_split * (_experts_gemm(local, per, h, wide, bm, bc, rate)
                     + _experts_gemm(local, per, narrow, h, bm, bc, rate))
    e_w = n_split * (_experts_gemm(local, h, wide, per, bm, 2.0 * bg, rate)
                     + _experts_gemm(local, narrow, h, per, bm, 2.0 * bg, rate))
    rows = per * local
    looped = rate[_R["g_launch"]] != _CUTLASS
    k_f = 2.0 * n_split * (local if looped else 2.0)   # kernels of the two GEMMs
    k_b = 2.0 * k_f
    # fp8 grouped GEMMs (TE GroupedLinear) cast both inputs forward and both output gradients back
    e_f += (n_split * (_cast(rows * h, cand, rate) + _cast(rows * narrow, cand, rate))
            + rate[_R["f8_w_mb"]] * local * _cast(h * (wide + narrow), cand, rate))
    e_d += n_split * (_backward_casts(rows * wide, rows * h, cand, rate)
                      + _backward_casts(rows * h, rows * narrow, cand, rate))
    loop_f = k_f if looped else 0.0
    loop_b = k_b if looped else 0.0
    if bm == 1.0:
        # TE's GroupedLinear quantizes each expert's rows by its own kernels (f8_split): a cast a split, each at
        # kernel_s (the same bytes as one cast of all the rows), all in the host's per-expert loops
        splits = local if looped and rate[_R["f8_split"]] != 0.0 else 1.0
        cast_f = 2.0 * n_split * splits * rate[_R["f8_cast_k"]]
        cast_b = 2.0 * n_split * splits * (rate[_R["f8_gcast_k"]] + rate[_R["f8_rq_k"]])
        k_f += cast_f + 2.0 * rate[_R["f8_w_mb"]] * local * rate[_R["f8_cast_k"]]
        k_b += cast_b
        e_f += cast_f * (splits - 1.0) / splits * rate[_R["kernel_s"]]
        e_d += cast_b * (splits - 1.0) / splits * rate[_R["kernel_s"]]
        if splits > 1.0:
            loop_f += cast_f
            loop_b += cast_b
    weights = local * h * (wide + narrow)
    if grad_acc != 0.0:
        e_w += _pass(weights * (bc + 2.0 * bg), n_split, rate)
        k_b += n_split
    _add_gemm(sums, (e_f, e_d, e_w))
    flops = bytes_f = bytes_b = 0.0
    if ops is not None:
        flops = 2.0 * rows * h * (wide + narrow) * n_split
        bytes_f = n_split * (bm * (rows * h + weights + rows * narrow) + bc * rows * (wide + h))
        bytes_b = 2.0 * bytes_f + n_split * weights * (2.0 * bg - bc) + grad_acc * weights * (bc + 2.0 * bg)
    _note(note, ops, _O["experts"], SCOPE_FFN, flops, bytes_f, k_f, e_f, 2.0 * flops, bytes_b, k_b, e_d + e_w)
    if e_bias != 0.0:
        six = [0.0] * 6
        _expert_bias_passes(rows * n_split, wide, h, local, n_split, bc, rate, six)
        if six[1] > 0.0:
            _note_two(note, ops, _O["expert_bias"], SCOPE_FFN, six[0], six[1], six[2], six[3], rate, sums, 0.0, 0.0)
            loop_f += six[4]
            loop_b += six[5]
    # a GEMM per expert (TE GroupedLinear's m_splits: List[int]) and a bias added per expert (torch.split by the
    # counts) take each expert's rows as a host list: the host waits for the token counts, then launches the
    # loops while the device waits on it
    _note_loop(note, cand, loop_f, loop_b)
    # ---- the experts' activation: SwiGLU reads gate and up and writes their product (3 passes), or
    # unfused, silu then the product (5 passes, 2 kernels); a GELU MLP 2 passes
    passes, kernels = n_ff, 1.0
    if eager and n_ff == 3.0:
        passes, kernels = EAGER_SWIGLU_PASSES, 2.0
    act_f = _note_pass(note, ops, _O["expert_act"], SCOPE_FFN, passes * bc * slots * narrow, kernels * n_split,
                       rate, sums)
    if clamp != 0.0 and n_ff == 3.0:
        _glu_clamp_passes(2.0 * slots * narrow, bc, rate, four)
        if four[1] > 0.0:
            act_f += _note_two(note, ops, _O["expert_act"], SCOPE_FFN, four[0], four[1] * n_split, four[2],
                               four[3] * n_split, rate, sums, 0.0, 0.0)
    ffn_f = e_f
    if shared > 0.0:
        # the shared experts are the router's graph scope: Megatron-Core's moe_router capture holds the FFN
        # pre-norm, the router and, unless moe_shared_expert_overlap runs them beside the dispatch (off by
        # default), the shared experts (NVIDIA/Megatron-LM@d98e8a64 megatron/core/transformer/
        # transformer_layer.py _get_submodules_under_cudagraphs)
        ffn_f += _ffn_pair(shared_tokens / n_split, shared, h, n_ff, n_split, cand, rate, sums, note, ops,
                           _O["shared_experts"], SCOPE_PRE)
        act_f += _note_pass(note, ops, _O["shared_experts"], SCOPE_PRE, passes * bc * shared_tokens * shared / t,
                            kernels * n_split, rate, sums)
    return ffn_f, act_f


def _note_two(note, ops, op: int, scope: int, bytes_f: float, kernels_f: float, bytes_b: float, kernels_b: float,
              rate, sums, atomic_f: float, atomic_b: float) -> float:
    """An elementwise op whose backward moves *bytes_b* in *kernels_b* (not the forward's 1.5x), plus
    *atomic_f* / *atomic_b* seconds of atomic adds: both passes added to sums[0], sums[1] and noted; returns the
    forward's seconds."""
    forward = _pass(bytes_f, kernels_f, rate) + atomic_f
    backward = _pass(bytes_b, kernels_b, rate) + atomic_b
    sums[0] += forward
    sums[1] += backward
    _note(note, ops, op, scope, 0.0, bytes_f, kernels_f, forward, 0.0, bytes_b, kernels_b, backward)
    return forward


def _moe_ffn(model, smodel, cand, rate, tokens: float, h: float, n_ff: float, width: float, sums, note,
             ops) -> tuple[float, float, float]:
    """A MoE layer's FFN on this rank (``_moe_block``), returning also its model FLOPs for the whole
    micro-batch. The rank routes tokens / sp tokens (SP splits them); its ep-th share of the experts,
    each 1/t_exp of its width, computes tokens x top-k x load x t_exp / t rows (load: moe_imbalance
    dropless -- the busiest rank --, the capacity factor in capacity mode): the t ranks that share a
    micro-batch's tokens share its expert work, whatever the expert grid. An expert TP group as wide as
    the attention's gathers that group's tokens (t_exp = t: every token, each expert 1/t wide); with
    t_exp = 1 under TP 2 and SP each rank dispatches its own half (Megatron-Core's alltoall dispatcher
    over the expert TP group, tp-ep-dp-pp); t_exp above t gathers the tokens of t_exp / t data-parallel
    ranks. The shared experts run on its tokens, split over tp."""
    topk, n_exp = model[_M["n_chosen"]], model[_M["n_exp"]]
    shared = smodel[_SM["shared_width"]]
    rows = tokens * topk * _expert_load(cand) * cand[_C["t_exp"]] / cand[_C["t"]]
    ffn_f, act_f = _moe_block(tokens / cand[_C["sp"]], rows, n_exp / cand[_C["ep"]], h, width, n_ff,
                              n_exp, topk, shared, tokens, 0.0, smodel[_SM["router_bias"]], smodel[_SM["expert_bias"]],
                              smodel[_SM["glu_clamp"]], cand, rate, sums, note, ops)
    return ffn_f, act_f, 2.0 * cand[_C["b"]] * cand[_C["s"]] * h * (topk * n_ff * width + n_exp + n_ff * shared)


def seconds_moe_block(shape, cand, rate, out) -> None:
    """A MoE block priced on its own, op by op, into out (LAYER_OP_NAMES x LAYER_OP_FIELDS, the rows a
    layer's table has; per micro-batch): *shape* (``MOE_BLOCK_FIELDS``) gives the tokens the rank routes,
    the rows its local experts compute and the dimensions, *cand* and *rate* the strategy and stack as
    for a layer. Each pass takes at least the host's launches of its kernels ("launch"), as a layer's.

    NaN everywhere for a shape with a non-positive size or a candidate the seconds kernels refuse.
    """
    _check_len(shape, "shape", len(MOE_BLOCK_FIELDS))
    _check_len(cand, "cand", len(SECONDS_CAND_FIELDS))
    _check_len(rate, "rate", len(RATE_FIELDS))
    _check_rows(out, "out", len(LAYER_OP_NAMES), len(LAYER_OP_FIELDS))
    for row in out:
        _fill(row, len(LAYER_OP_FIELDS), 0.0)
    ok = _cand_ok(cand, rate)
    for name in ("tokens", "rows", "local", "hidden", "width", "n_ff", "experts", "topk"):
        if not shape[_B[name]] > 0.0:
            ok = False
    if not (shape[_B["shared"]] >= 0.0 and shape[_B["shared_tokens"]] >= 0.0):
        ok = False
    if not ok:
        for row in out:
            _fill(row, len(LAYER_OP_FIELDS), NAN)
        return
    note = [0.0] * NOTE_SIZE
    _note_start(cand, rate, note)
    sums = [0.0] * 5
    _moe_block(shape[_B["tokens"]], shape[_B["rows"]], shape[_B["local"]], shape[_B["hidden"]], shape[_B["width"]],
               shape[_B["n_ff"]], shape[_B["experts"]], shape[_B["topk"]], shape[_B["shared"]],
               shape[_B["shared_tokens"]], shape[_B["grad_acc"]], shape[_B["router_bias"]], shape[_B["expert_bias"]],
               shape[_B["glu_clamp"]], cand, rate, sums, note, out)
    _note_launch(note, out, sums[0], sums[1] + sums[2])
