"""Seconds mode: a step priced from the device's rates and the links each collective crosses (oracle).

The kernels, in five parts, twins of ``cysrc/ndcost/kernels/seconds*.pxi`` of the same names:

* :func:`~ndcost.kernels.seconds_comm.seconds_collective` (``seconds_comm``) -- one collective;
  ``seconds_ops`` prices one op (GEMM, elementwise pass, cast); ``seconds_moe`` a MoE layer's FFN;
* :func:`~ndcost.kernels.seconds_layer.seconds_layer_times` (``seconds_layer``) -- one layer of each kind,
  per micro-batch and device (``SECONDS_LAYER_FIELDS``);
* :func:`seconds_stage_sums` -- per pipeline stage: the layers of the layout summed, plus the
  embedding, output and MTP heads, the data-parallel traffic and the optimizer
  (``SECONDS_STAGE_FIELDS``).
* :func:`seconds_combine` -- the pipeline schedule, the data-parallel tail and the parts; returns
  the step time.

Inputs are ND's kind table and model vector (``KIND_FIELDS``, ``MODEL_FIELDS``: the dimensions)
and the seconds groups of ``ndcost.kernels.columns``: real parameter counts per kind, a model vector, a
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
* routed experts run as grouped GEMMs at their real shape (``seconds_moe``: tiles, whole waves, a tile's
  fixed cost) or a GEMM per expert; router and permutations as the stack runs them (fused or not);
* a layer's pass takes at least its kernels' host launches (launch_s each, graph_s from a CUDA graph),
  and the launches of its per-expert loops (a GEMM, a cast, a bias add per local expert, taking the token
  counts as a host list) are added to it: launched after the host waits for the counts (``_note_loop``);
* collectives are alpha-beta rings over the group's links (``_collective``); ranks are placed tp
  innermost, then cp, then dp (ep folded into dp), then pp (Megatron's default order);
* the training software's figures ride in the rates vector (``Rates.for_software``): without
  gradient-accumulation fusion each layer's backward adds a pass over its parameters (read the
  16-bit gradient and the main one, write the main one); a ZeRO-3 fetch slower than NCCL
  (z3_fetch_bw) prices the gathered bytes at its rate, z3_rc_gather gathers again for the
  recompute forward, z3_grad_ar all-reduces the gradients, grad_reduce_bytes reduces them in another width
  than they are held in;
* gradients reduced every micro-batch (not deferred) under ZeRO-3 reshard the weights after each backward, so
  each forward gathers them again; each pipeline chunk's forward and backward is a call of its own with one
  layer's gather and reduction exposed (``_chunk_calls``; FSDP2's defaults, torch.distributed.pipelining).
"""
from __future__ import annotations

import math

from .columns import (
    HYPER_POLICY_MASK, KIND, MODEL, OPTION_FULL, OPTION_SELECTIVE, PART, PART_NAMES, RATE, SECONDS_CAND,
    SECONDS_CAND_FIELDS, SECONDS_EXTRA, SECONDS_EXTRA_FIELDS, SECONDS_LAYER, SECONDS_LAYER_FIELDS, SECONDS_MODEL,
    SECONDS_STAGE, SECONDS_STAGE_FIELDS,
)
from .codes import SCHEDULES, SWITCHES
from .nd_ops import _check_len
from .autocast import _autocast_embedding, _autocast_head
from .seconds_vision import _vision_edges
from .seconds_ops import POINTWISE_BACKWARD_BYTES, _cand_ok, _check_rows, _check_tables, _fill, _mm3, _pass
from .seconds_comm import (
    ALL_REDUCE, DEEPEP, EP_DUALPIPE, EP_NONE, GATHER_OR_SCATTER, HYBRIDEP, SEND_RECV, _collective, _exposed,
    _exposed_slowed, _exposed_tail, _paired_layer, _paired_share,
)
from .seconds_layer import _layer

__all__ = ["seconds_stage_sums", "seconds_combine"]

NAN = math.nan

# Column indices, bound once (the kernel ABI of ndcost.kernels.columns).
_K = KIND
_M = MODEL
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
_GATHER_BIT = SWITCHES.index("gather")
_ONE_F_ONE_B, _INTERLEAVED, _ZERO_BUBBLE_V, _GPIPE, _SEQ1F1B, _DUALPIPE, _DUALPIPE_V = (   # codes.SCHEDULES
    SCHEDULES.index(name) for name in ("1f1b", "interleaved", "zero_bubble_v", "gpipe", "seq1f1b", "dualpipe", "dualpipev"))
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
#: The three small all-reduces of the vocab-parallel loss (max, sum, target logit), fp32 per token.
CE_ALL_REDUCES = 3.0
CE_REDUCE_BYTES = 4.0


def _chunk_calls(cand) -> float:
    """The forward (and backward) calls a micro-batch makes on one device: its pipeline chunks -- v under
    interleaved 1F1B, v x n sequence chunks under Seq1F1B, else 1. Each call fills and drains the
    pipeline's share (seconds_combine) and, under ZeRO-3, starts with a gather and ends with a reduction
    that nothing before or after it in the call hides (seconds_stage_sums)."""
    schedule = cand[_C["schedule"]]
    if schedule == _INTERLEAVED:
        return cand[_C["vp"]]
    if schedule == _SEQ1F1B:
        return cand[_C["vp"]] * cand[_C["seq_split"]]
    return 1.0


def _head(cand, rate, tokens: float, h: float, v: float, softcap: float, out3) -> None:
    """One output head on this rank: the logits GEMM (vocab-parallel over tp) and the loss.

    out3 = (forward, backward, weight grads). Logits 2·tokens·h·v/t FLOPs forward (x3 with
    backward, Narayanan et al. 2021 Eq. 3's 6·B·s·h·V term); Megatron's vocab-parallel cross
    entropy: CE_FORWARD_BYTES / CE_BACKWARD_BYTES per logit element and its three small tp
    all-reduces. Under torch.autocast (cand autocast): the loss on fp32 logits
    (seconds_ops.AUTOCAST_CE_FORWARD_FP32_BYTES), the head's fp32 input cast for the GEMM and its fp32
    weight cast each forward, both cast back in backward (seconds_ops.AUTOCAST_FP32_BYTES).
    """
    t = cand[_C["t"]]
    n_split = cand[_C["seq_split"]]
    g3 = [0.0] * 5
    # the output layer stays 16-bit under fp8 (Megatron-Core's output layer is a plain
    # ColumnParallelLinear, torchtitan's float8 conversion skips it)
    _mm3(tokens / n_split, v / t, h, n_split, cand, rate, g3, True)
    logits = tokens * v / t
    if cand[_C["autocast"]] != 0.0:
        forward, backward, weight_b = _autocast_head(cand, rate, tokens, h, v, n_split)
        forward += g3[0]
        backward += g3[1]
        g3[2] += weight_b
    else:
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
    # the expert all-to-all beside compute: DeepEP's and HybridEP's kernels hold ep_sms of the SMs (DeepSeek-V3
    # §3.2.2), NCCL's slow it as any collective does (Rates.collective_overlap_slowdown). HybridEP's dispatch blocks
    # the host: its pair's middle phase runs serially (seconds_comm._paired_layer)
    ep_mode = cand[_C["ep_mode"]]
    ov_slow = rate[_R["ov_slow"]]
    ep_sm = ov_slow
    blocking = cand[_C["ep_disp"]] == HYBRIDEP
    if (cand[_C["ep_disp"]] == DEEPEP or blocking) and rate[_R["sms"]] > 0.0:
        ep_sm = cand[_C["ep_sms"]] / rate[_R["sms"]]
        ep_sm = ep_sm if ep_sm < 1.0 else 1.0
    paired = [_paired_share(cand, n_stages, st) for st in range(n_stages)]
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
        cp_f = _exposed_slowed(layer[_L["cp_f"]], layer[_L["core_f"]], ov_cp, ov_slow)
        cp_b = _exposed_slowed(layer[_L["cp_b"]], layer[_L["core_b"]], ov_cp, ov_slow)
        # the expert all-to-all: with no overlap mode, ov_ep of the same pass's compute hides it (an
        # Overlap share a caller states); in an overlapped F&B pair, _paired_layer's phases, for the
        # stage's paired share of its micro-batches (_paired_share)
        ep_f = layer[_L["ep_f"]]
        ep_b = layer[_L["ep_b"]]
        if ep_mode == EP_NONE:
            ep_f = _exposed_slowed(ep_f, layer[_L["fw"]], ov_ep, ep_sm)
            ep_b = _exposed_slowed(ep_b, layer[_L["bw"]] + layer[_L["bw_w"]], ov_ep, ep_sm)
        paired_ep = 0.0 if ep_mode == EP_NONE else _paired_layer(layer, ov_ep, ep_sm, ep_mode == EP_DUALPIPE,
                                                                    blocking)
        for o in range(n_slots):
            option = slot_option[o]
            rc = rc_tp = rc_cp = rc_flops = 0.0
            full_rc = option == OPTION_FULL
            if full_rc:
                rc, rc_tp, rc_cp = layer[_L["fw"]], tp_f, cp_f
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
                    # matmuls no switch prices (docs/ND_MODEL.md §2.4 selective_shares); a missing FFN
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
                # a full recompute re-runs the forward's dispatch and combine: beside compute (at DeepEP's
                # SMs) in a pair, exposed alone
                q = paired[st]
                rc_ep = q * ep_sm * layer[_L["ep_f"]] + (1.0 - q) * ep_f if full_rc else 0.0
                row[_S["ep"]] += count * (q * paired_ep + (1.0 - q) * (ep_f + ep_b) + rc_ep)
                row[_S["layers"]] += count
                row[_S["model_flops"]] += count * 3.0 * layer[_L["flops_f"]]
                row[_S["hw_flops"]] += count * (3.0 * (layer[_L["flops_f"]] + layer[_L["flops_core_extra"]])
                                                + rc_flops)
                p_dense[st] += count * layer[_L["p_dense"]]
                p_expert[st] += count * layer[_L["p_expert"]]

    # ---- embedding, output head, MTP modules
    head = [0.0, 0.0, 0.0]
    g3 = [0.0] * 5
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
            if cand[_C["autocast"]] != 0.0:
                # the fp32 table's rows in fp32 and its dense fp32 gradient (autocast._autocast_embedding)
                moved, table = _autocast_embedding(cand, rate, tokens, h, v)
                row[_S["bw_w"]] += table
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
    if rate[_R["grad_reduce_bytes"]] > 0.0:
        # the reduction's own width where it differs from the held gradients' (Rates.grad_reduce_bytes:
        # FSDP2's MixedPrecisionPolicy reduce_dtype fp32 over bf16 gradients moves 4 bytes an element)
        bg = rate[_R["grad_reduce_bytes"]]
    # per-call floors: a pipeline chunk's forward and backward are calls of their own (torch.distributed.pipelining,
    # Megatron's interleaved schedule), each with one layer's gather and reduction exposed
    calls = _chunk_calls(cand)
    edp = cand[_C["edp"]]
    defer = cand[_C["defer_grads"]] != 0.0
    ov_dp, ov_fsdp = cand[_C["ov_dp"]], cand[_C["ov_fsdp"]]
    z3_fetch_bw = rate[_R["z3_fetch_bw"]]
    z3_rc_gather = rate[_R["z3_rc_gather"]] != 0.0
    z3_grad_ar = rate[_R["z3_grad_ar"]] != 0.0
    n_dp = d * cp
    hbm = rate[_R["hbm_eff"]] * rate[_R["hbm_bw"]]
    # DualPipe keeps two copies of the parameters (README: 2x; seconds_combine pairs stage i with p-1-i):
    # both copies' gradients reduced and parameters gathered, the optimizer sharded over both copies' ranks
    copies = 2.0 if cand[_C["schedule"]] == _DUALPIPE else 1.0
    for st in range(n_stages):
        row = out[st]
        row[_S["ov_slow"]] = ov_slow       # for seconds_combine's data-parallel tail
        dense, expert = copies * p_dense[st], copies * p_expert[st]
        layers = row[_S["layers"]] / calls    # a call's layers: each call exposes one layer's traffic
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
                                                         ov_fsdp, layers, ov_slow)
                backward_traffic = params + (0.0 if defer else grads)
            elif not defer:
                # reduced every micro-batch, then resharded: FSDP2's reshard_after_backward (default True, kept
                # off only with the gradient sync, as torch.distributed.pipelining does for an FSDP stage module)
                # frees the gathered weights after each backward, so each micro-batch's forward gathers again
                row[_S["dp_mb_gather"]] += _exposed_tail(params, row[_S["fw"]], ov_fsdp, layers, ov_slow)
                backward_traffic = grads
            else:
                row[_S["dp_gather"]] += params            # gathered once a step, kept
                backward_traffic = 0.0
            if backward_traffic > 0.0:
                row[_S["dp_mb_reduce"]] += _exposed_tail(backward_traffic, backward, ov_fsdp, layers, ov_slow)
            if defer:
                row[_S["dp_reduce"]] += grads
        elif zero == 2.0 and not defer:
            row[_S["dp_mb_reduce"]] += _exposed_tail(grads, backward, ov_dp, layers, ov_slow)
            row[_S["dp_gather"]] += params
        else:
            row[_S["dp_reduce"]] += grads
            if zero >= 1.0:
                row[_S["dp_gather"]] += params
        # Adam over the local shard, HBM-bound: bytes_opt per parameter per step (states, master
        # copy and gradient read and written, the 16-bit copy written), one fused kernel
        shards = cand[_C["zero_ranks"]] if zero >= 1.0 else 1.0
        local = dense / shards + expert / (edp if zero >= 1.0 else 1.0)
        if zero >= 1.0:
            local /= copies
        if local > 0.0:
            row[_S["opt"]] += cand[_C["bytes_opt"]] * local / hbm + rate[_R["kernel_s"]]

    # ---- tied embedding and output on two stages: Megatron all-reduces the word embedding's
    # gradient between the first and the last stage once a step (its "embedding group").
    if cand[_C["tie_emb"]] != 0.0 and emb_stage >= 0 and out_stage >= 0 and emb_stage != out_stage:
        shared = _collective(ALL_REDUCE, smodel[_SM["p_embed"]] / t * bg, 2.0,
                                    (out_stage - emb_stage) * t * cp * d, rate)
        out[emb_stage][_S["dp_reduce"]] += shared
        out[out_stage][_S["dp_reduce"]] += shared


def _dualpipe_rows(stage, n_stages: int) -> list:
    """DualPipe's devices: device i runs stage i for the micro-batches of one direction and stage
    p-1-i for the other's, half of them each (deepseek-ai/DualPipe dualpipe.py: the first half of the
    ranks run the forward direction in phase 0, the second half the reverse): per micro-batch its
    time and parts are the mean of the two stages' rows."""
    rows = []
    for st in range(n_stages):
        mine, mirror = stage[st], stage[n_stages - 1 - st]
        rows.append([0.5 * (mine[j] + mirror[j]) for j in range(_S_COUNT)])
    return rows


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
    * DualPipeV (dualpipev, ND's zero_bubble_v): m·M + (p - 1)·max(0, F&B + B - 3W)/2, the
      deepseek-ai/DualPipe README's (PP/2 - 1)(F&B + B - 3W) at PP = 2p chunks of half a stage: F the
      straggler's forward compute, B its full backward (input and weight gradients, recompute, the
      exposed comm), W its weight-gradient GEMMs, F&B = M (the overlap's leftover comm is in M);
    * DualPipe: on the devices' rows (:func:`_dualpipe_rows`), m·M + (p/2 - 1)·max(0, F&B + B - 3W).

    With r schedule runs a step (``pp_runs``: gradient accumulation over whole schedules, as
    torch.distributed.pipelining under torchtitan's and NeMo AutoModel's loops runs it), each run of m/r
    micro-batches fills and drains the pipeline: r times the term beyond m·M.

    Then the data-parallel tail: stage i's gradient reduction (overlapped with its last
    backward by ov_dp, never its first layer's bucket), optimizer and parameter gather (overlapped
    with the next forward by ov_dp_gather) start when its last backward ends, sum_{j<i} of the
    backward times of the stages before it earlier than stage 0's (zero for the DualPipe schedules,
    whose devices end together); the step ends with the latest. Parts: the straggler's parts x m,
    bubble = the pipeline beyond m·M, the tail split over dp_reduce / bw_compute (the optimizer)
    / dp_comm. They sum to the step time. stage_times[i] = m·t_i + stage i's tail before slack
    (device i's under DualPipe). NaN when a stage sum is NaN or m < 1.
    """
    n_stages = len(stage)
    _check_rows(stage, "stage", n_stages, _S_COUNT)
    _check_len(cand, "cand", len(SECONDS_CAND_FIELDS))
    _check_len(parts, "parts", len(PART_NAMES))
    _check_len(stage_times, "stage_times", n_stages)
    m, runs = cand[_C["m"]], cand[_C["pp_runs"]]
    schedule = cand[_C["schedule"]]
    rows = _dualpipe_rows(stage, n_stages) if schedule == _DUALPIPE else stage
    ok = n_stages >= 1 and m >= 1.0 and runs >= 1.0
    totals = []
    for st in range(n_stages):
        row = rows[st]
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
    chunks = _chunk_calls(cand)
    worst = rows[straggler]
    dualpipe = schedule == _ZERO_BUBBLE_V or schedule == _DUALPIPE_V or schedule == _DUALPIPE
    if dualpipe:
        # F&B + B - 3W with F&B = M and B = M - F
        bubble = 2.0 * slowest - worst[_S["fw"]] - 3.0 * worst[_S["bw_w"]]
        bubble = bubble if bubble > 0.0 else 0.0
        if schedule == _DUALPIPE:
            bubble *= n_stages / 2.0 - 1.0
        else:
            bubble *= (n_stages - 1.0) / 2.0
        pipeline = m * slowest + runs * bubble
    else:
        pipeline = m * slowest + runs * (summed - slowest) / chunks
    # the data-parallel tail
    ov_dp, ov_gather = cand[_C["ov_dp"]], cand[_C["ov_dp_gather"]]
    slack = 0.0
    tail = -1.0
    tail_parts = (0.0, 0.0, 0.0)
    for st in range(n_stages):
        row = rows[st]
        layers = row[_S["layers"]]
        backward = (row[_S["bw"]] + row[_S["bw_w"]] + row[_S["rc"]]) / chunks
        slow = row[_S["ov_slow"]]
        reduce_ = _exposed_tail(row[_S["dp_reduce"]], backward, ov_dp, layers, slow)
        gather = _exposed_tail(row[_S["dp_gather"]], row[_S["fw"]] / chunks, ov_gather, layers, slow)
        optimizer = row[_S["opt"]]
        own = reduce_ + optimizer + gather
        stage_times[st] = m * totals[st] + own
        late = own - (0.0 if dualpipe else slack)
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
