"""Memory per pipeline stage, in bytes (oracle).

Physical, Megatron-like accounting (what a PyTorch/Megatron rank really holds),
used by both units (docs/ND_MODEL.md §3 is ND's model; where ndcost differs it says
why):

* :func:`inflight_micro_batches` -- micro-batches whose activations a (stage,
  chunk) holds as warm-up ends (docs/ND_MODEL.md §3.6).
* :func:`layer_activation_bytes` -- what one transformer layer keeps for one
  micro-batch, per block, gated by the recompute option and the keep mask
  (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models", arXiv 2205.05198, §4 and Table 2).
* :func:`stage_memory` -- the per-stage breakdown (:data:`N_MEMORY_COLUMNS`
  columns: params, grads, optimizer, activations, comm_buffers, working_set,
  reserve, total).

Numeric contract (ARCHITECTURE.md): every divisor is checked by an ``if`` before
use; an undefined result is NaN; nothing raises except a length check at the
top of :func:`stage_memory`.
"""
from __future__ import annotations

import math

from ..spec.recompute_spec import ALL_KEPT, SWITCHES
from .codes import MEMORY_ATTENTIONS, MEMORY_FFNS, MEMORY_SCHEDULES
from .columns import OPTION_FULL, OPTION_NONE, OPTION_SELECTIVE
__all__ = ["inflight_micro_batches", "layer_activation_bytes", "stage_memory", "pair_dualpipe_rows"]

NAN = math.nan

#: Columns of :func:`stage_memory`'s output: the seven parts, then their total.
N_MEMORY_COLUMNS = 8

# Schedule, attention and FFN flavour codes (ndcost.kernels.codes MEMORY_SCHEDULES, MEMORY_ATTENTIONS, MEMORY_FFNS).
_SCHED_1F1B, _SCHED_GPIPE, _SCHED_ZB_V, _SCHED_SEQ1F1B, _SCHED_DUALPIPE_V, _SCHED_DUALPIPE = (
    MEMORY_SCHEDULES.index(name) for name in ("1f1b", "gpipe", "zero_bubble_v", "seq1f1b", "dualpipev", "dualpipe"))
_ATT_FULL, _ATT_MLA, _ATT_LINEAR, _ATT_MAMBA, _ATT_NONE, _ATT_MAMBA1 = (
    MEMORY_ATTENTIONS.index(name) for name in ("full", "mla", "linear", "mamba", "none", "mamba1"))
#: Bytes of a routing map entry (bool), an index (int64) and a routing probability (fp32).
ROUTING_MAP_BYTES, INDEX_BYTES, PROBABILITY_BYTES = 1.0, 8.0, 4.0
_FFN_DENSE, _FFN_MOE, _FFN_NONE = (MEMORY_FFNS.index(name) for name in ("dense", "moe", "none"))
# Recompute options (ndcost.kernels.columns.OPTION_*).
_OPT_NONE, _OPT_FULL, _OPT_SELECTIVE = OPTION_NONE, OPTION_FULL, OPTION_SELECTIVE
# Keep-mask bits, in recompute_spec.SWITCHES order; a set bit keeps the op's activation.
_ATTBMM, _HEADCAST, _DROPOUT, _SOFTMAX, _NORMOP, _GATHER, _FFACT, _ATTUP = (
    SWITCHES.index(name) for name in ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct", "attUp"))
_ALL_KEPT = ALL_KEPT
# FlashAttention keeps one fp32 logsumexp per query row and head (Dao 2023,
# FlashAttention-2, Algorithm 1 "write L"); the GDN chunk states are fp32 too.
_FP32_BYTES = 4.0


# --------------------------------------------------------------------------- in flight


def _one_f_one_b(p: int, m: int, vp: int, stage: int, chunk: int) -> int:
    """1F1B (vp = 1: base − stage, docs/ND_MODEL.md §3.6) or interleaved, before the floor of 1. Interleaved: what
    the schedule holds at its first steady forward, its peak -- Megatron-Core's (p − stage − 1)·2 + (vp − 1)·p
    warm-up forwards plus that one, at most m·vp (NVIDIA/Megatron-LM@d7288711 pipeline_parallel/schedules.py:L821-835),
    in its table's order: groups of p micro-batches, each through chunk 0, then chunk 1, ... (L846-872); PyTorch's
    ScheduleInterleaved1F1B alike. ND's "big memory" variant holds one less on stage 0 and the extra micro-batches
    on the last chunk, where the logits are."""
    base = p if p < m else m
    if vp == 1:
        return base - stage  # §3.6 "1F1B, vp = 1: base − stage"
    # below vp·p + p forwards: two groups at most, of base micro-batches and of what the next p leave
    forwards = 2 * (p - stage - 1) + (vp - 1) * p + 1
    first = forwards if forwards < base * vp else base * vp
    second = forwards - first if m > p else 0
    size = m - p if m - p < p else p
    return _chunk_share(first, base, chunk) + (_chunk_share(second, size, chunk) if second > 0 else 0)


def _chunk_share(forwards: int, size: int, chunk: int) -> int:
    """Of a group's first *forwards* forwards, those on *chunk*: the group runs its *size* micro-batches through
    chunk 0, then chunk 1, ... (Megatron-Core's get_schedule_table)."""
    mine = forwards - chunk * size
    return size if mine > size else (mine if mine > 0 else 0)


def inflight_micro_batches(schedule: int, p: int, m: int, vp: int, stage: int, chunk: int,
                           seq_split: int) -> float:
    """Micro-batches in flight on (stage, chunk) as warm-up ends (docs/ND_MODEL.md §3.6).

    With base = min(p, m):

    * 0, 1F1B / interleaved: base − stage; vp > 1 the schedule's own (:func:`_one_f_one_b`).
    * 1, GPipe: m -- every micro-batch's activations are held until the first
      backward (Huang et al. 2019, GPipe §2.2). ND uses p here (§3.6), which
      undercounts whenever m > p; ndcost prices what GPipe holds.
    * 2, zero_bubble_v (DualPipeV, vp must be 2): chunk 0 2·base − 1 − stage,
      chunk 1 stage.
    * 3, Seq1F1B: counted in sequence chunks (the layers are then priced at
      s / seq_split): the 1F1B count plus seq_split − 1 on chunk 0 (vp = 1:
      base − stage + seq_split − 1, §3.6; for vp > 1 ND says only "analogous":
      ndcost adds the extra chunks to the warm-up chunk, chunk 0).
    * 4, DualPipeV (dualpipev, vp must be 2): chunk 0 2·base − stage, chunk 1
      stage + 1 -- deepseek-ai/DualPipe dualpipev.py step(): rank r runs
      2(p − r − 1) + r + 1 forwards of chunk 0 and r + 1 of chunk 1 before its
      first backward, and its main step's overlapped forward adds one before a
      backward frees one: p·2 + 1 chunks, the README's "PP+1" (PP = 2p).
    * 5, DualPipe (dualpipe, vp must be 1): base − stage, the 1F1B count --
      dualpipe.py step(): rank r (h = min(r, p − 1 − r)) holds p − h chunks of its
      phase-0 stage (h's own, with the overlapped forward) and h + 1 of its phase-1
      stage (p − 1 − h's), the 1F1B counts of those two stages, p + 1 in all (the
      README's "PP+1"); :func:`pair_dualpipe_rows` adds the two stages' rows.

    Always >= 1; NaN for p, m, vp or seq_split < 1, a stage or chunk out of
    range, an unknown schedule, vp != 1 with GPipe or DualPipe or vp != 2 with
    zero_bubble_v or DualPipeV.
    """
    if p < 1 or m < 1 or vp < 1 or seq_split < 1:
        return NAN
    if stage < 0 or stage >= p or chunk < 0 or chunk >= vp:
        return NAN
    base = min(p, m)
    if schedule == _SCHED_1F1B:
        count = _one_f_one_b(p, m, vp, stage, chunk)
    elif schedule == _SCHED_GPIPE:
        if vp != 1:
            return NAN
        count = m
    elif schedule == _SCHED_ZB_V:
        if vp != 2:
            return NAN  # ND warns and returns 0 above vp 2 (§3.6)
        count = 2 * base - 1 - stage if chunk == 0 else stage
    elif schedule == _SCHED_SEQ1F1B:
        count = _one_f_one_b(p, m, vp, stage, chunk)
        if chunk == 0:
            count += seq_split - 1  # §3.6 Seq1F1B: base − stage + n_s_split − 1
    elif schedule == _SCHED_DUALPIPE_V:
        if vp != 2:
            return NAN
        count = 2 * base - stage if chunk == 0 else stage + 1
    elif schedule == _SCHED_DUALPIPE:
        if vp != 1:
            return NAN
        count = base - stage
    else:
        return NAN
    return float(count if count > 1 else 1)  # §3.6 "always at least 1"


# --------------------------------------------------------------------------- one layer


def _kept(mask: int, bit: int) -> float:
    return 1.0 if (mask >> bit) & 1 else 0.0


def _score_bytes(score_elements: float, tokens: float, heads_local: float, flash: int, mask: int,
                 compute_bytes: float, softmax_bytes: float, dropout_bytes: float) -> float:
    """The attention core's own activations (Korthikanti §4.1 "Attention block")."""
    if flash:
        # Flash keeps only the fp32 logsumexp per query row; recomputing the core drops it.
        return _kept(mask, _ATTBMM) * heads_local * tokens * _FP32_BYTES
    # Korthikanti §4.1: softmax output 2as²b, its dropout mask as²b, the dropout
    # output (the attention-over-values input) 2as²b: 5as²b at 16 bits.
    # The P·V input is a separate copy only when dropout or a cast makes one.
    cast_bytes = compute_bytes if (dropout_bytes > 0.0 or softmax_bytes != compute_bytes) else 0.0
    return score_elements * (_kept(mask, _SOFTMAX) * softmax_bytes       # softmax output
                             + _kept(mask, _DROPOUT) * dropout_bytes     # attention dropout mask
                             + _kept(mask, _HEADCAST) * cast_bytes)      # P·V input (dropout output / cast)


def _full_attention_elements(mask: int, heads_local: float, kv_local: float, head_dim: float,
                             out_gate: int, qk_norm: int) -> float:
    """Elements per token of MHA/GQA beyond its input (Korthikanti §4.1 "Q, K: 4sbh; V: 2sbh;
    output projection input 2sbh", with GQA's kv heads and head_dim in place of h)."""
    q = heads_local * head_dim
    kv = kv_local * head_dim
    elements = q + 2.0 * kv        # Q, K, V (QK^T and P·V inputs)
    elements += q                  # core output = output-projection input
    if qk_norm:
        elements += _kept(mask, _NORMOP) * (q + kv)  # q_norm / k_norm inputs (Qwen3)
    if out_gate:
        elements += 2.0 * q        # sigmoid gate input and the core output it scales (Qwen3-Next)
    return elements


def _mla_elements(mask: int, heads_local: float, q_lora: float, kv_lora: float, qk_nope: float,
                  qk_rope: float, v_dim: float) -> float:
    """Elements per token of DeepSeek MLA beyond its input (DeepSeek-V2 report §2.1.2, Eqs. 9-19).

    The down-projections run unsplit on every TP rank (Megatron-Core MLA), so
    their latents are not divided by tp; the up-projections (q_b, kv_b) are
    column-parallel and their outputs are what attUp gates. The normed latents
    (q_b's and kv_b's inputs, q_lora + kv_lora) are not counted here: the caller
    prices them at the saved-input width of a linear layer (``linear_bytes``).
    """
    qk_head = qk_nope + qk_rope
    elements = 0.0
    if q_lora > 0.0:
        elements += _kept(mask, _NORMOP) * q_lora  # q_a_layernorm input
        elements += _kept(mask, _ATTUP) * heads_local * qk_head  # Q (q_b output)
    else:
        elements += heads_local * qk_head          # Q (q_proj output)
    elements += _kept(mask, _NORMOP) * kv_lora     # kv_a_layernorm input
    elements += qk_rope                            # the shared k_pe (the normed c_kv, kv_b's input: the caller's)
    elements += _kept(mask, _ATTUP) * heads_local * (qk_head + v_dim)  # K, V (kv_b output + k_pe)
    elements += heads_local * v_dim                # core output = output-projection input
    return elements


def _linear_attention_bytes(mask: int, tokens: float, batch: float, tp: float, k_heads: float, k_dim: float,
                            v_heads: float, v_dim: float, conv_kernel: float, chunk: float,
                            compute_bytes: float) -> float:
    """Qwen3-Next gated DeltaNet beyond its input (Yang et al. 2024, "Gated Delta Networks",
    §3 chunkwise form; Transformers Qwen3NextGatedDeltaNet), heads split over tp."""
    key_local = k_heads * k_dim / tp
    value_local = v_heads * v_dim / tp
    mixed = 2.0 * key_local + value_local          # q, k, v channels through the causal conv
    elements = mixed                               # conv input (in_proj_qkvz's q, k, v)
    elements += mixed                              # conv + SiLU output: the recurrence's q, k, v
    elements += value_local                        # z (output gate)
    elements += 2.0 * v_heads / tp                 # b, a: beta and decay gate inputs
    elements += _kept(mask, _NORMOP) * value_local  # gated RMSNorm input (recurrence output)
    elements += value_local                        # gated-norm output = out_proj input
    total = tokens * elements * compute_bytes
    # Chunk-boundary states [heads, d_k, d_v] in fp32, one per chunk of each
    # sequence (the chunkwise delta rule's h_t); recomputing the core drops them.
    total += _kept(mask, _ATTBMM) * (tokens / chunk) * (v_heads / tp) * k_dim * v_dim * _FP32_BYTES
    # Causal-conv state carried per sequence: the last conv_kernel − 1 inputs.
    if conv_kernel > 1.0:
        total += batch * (conv_kernel - 1.0) * mixed * compute_bytes
    return total


# What a linear layer saves for its weight gradient (``linear_bytes``; docs/MEMORY.md "Activations under
# fp8"): in 16 bits its input; under fp8 Transformer Engine's modules save one fp8 copy (1 byte per element)
# of the rank's shard, the one their wgrad GEMM reads (NVIDIA/TransformerEngine@d0067d0d pytorch/module/
# linear.py:372, :598-621; layernorm_linear.py:430-435, :477-487, :526-536; layernorm_mlp.py:807-822;
# grouped_linear.py:538-548, :903-914). Not priced: blockwise / MXFP8 block scales (1/32 byte per element:
# the recipe is a Rates figure) and, under delayed scaling, the attention projection's own fp8 copy (its
# input stays 16-bit: the attention core keeps it, TE reuses it, linear.py:314-316). torchao's Float8Linear
# saves the high-precision input (pytorch/ao@7ca1bfb torchao/float8/float8_linear.py
# matmul_with_hp_or_float8_args: save_for_backward(input_hp, weight_hp_t)): linear_bytes = compute_bytes.


def _ffn_bytes(mask: int, width_local: float, gated: int, compute_bytes: float, linear_bytes: float) -> float:
    """Bytes per token of one MLP beyond its input (Korthikanti §4.1 "MLP": the GELU
    input 8sbh and the second linear's input 8sbh for a 4h width).

    Gated (SwiGLU): gate and up outputs kept (the activation's inputs), at compute_bytes; GELU: fc1's
    output. The activation's output, the second linear's input which only that linear saves, is gated by
    ffAct, at ``linear_bytes``.
    """
    kept_inputs = 2.0 * width_local if gated else width_local
    return kept_inputs * compute_bytes + _kept(mask, _FFACT) * width_local * linear_bytes


def layer_activation_bytes(seq: float, batch: float, hidden: float, tp: float, sp: float, cp: float,
                           etp: float, attention: int, heads: float, kv_heads: float, head_dim: float,
                           out_gate: int, qk_norm: int, q_lora: float, kv_lora: float, qk_nope: float,
                           qk_rope: float, v_dim: float, lin_k_heads: float, lin_k_dim: float,
                           lin_v_heads: float, lin_v_dim: float, lin_conv: float, lin_chunk: float,
                           ffn: int, gated: int, ffn_width: float, experts: float, top_k: float,
                           shared_width: float, token_factor: float, flash: int, compute_bytes: float,
                           softmax_bytes: float, dropout_bytes: float, norm_bytes: float, linear_bytes: float,
                           option: int, keep_mask: int, slice_input: int) -> float:
    """Bytes one transformer layer keeps for ONE micro-batch on one rank.

    Args:
        seq, batch, hidden: tokens per sequence as priced (s, or s/seq_split for
            Seq1F1B), micro-batch size b, hidden size h.
        tp, sp, cp, etp: tensor degree, sequence-parallel factor (tp with SP,
            else 1), context degree, expert tensor degree.
        attention: 0 full (MHA/GQA), 1 MLA, 2 linear (gated DeltaNet).
        heads, kv_heads, head_dim, out_gate, qk_norm: full attention; MLA reads
            heads and the MLA dims below.
        q_lora, kv_lora, qk_nope, qk_rope, v_dim: MLA dims.
        lin_k_heads, lin_k_dim, lin_v_heads, lin_v_dim, lin_conv, lin_chunk:
            gated DeltaNet heads and dims, conv kernel, chunk length.
        ffn: 0 dense, 1 MoE; gated: 1 SwiGLU (3 matmuls), 0 GELU (2 matmuls).
        ffn_width: dense width, or the routed expert width on a MoE layer.
        experts, top_k, shared_width, token_factor: MoE routed experts, experts
            per token, total shared-expert width (0: none), routed-token load
            factor (capacity factor in capacity mode; dropless load, 1 when balanced).
        flash: 1 when attention runs a fused (flash) kernel.
        compute_bytes, softmax_bytes, dropout_bytes, norm_bytes: byte widths
            (dropout_bytes 0: no dropout).
        linear_bytes: bytes per element of a linear's saved input (compute_bytes; 1 under TE's
            fp8, above ``_ffn_bytes``): the QKV, fc1, fc2, MLA up-projection and expert inputs.
        option: 0 none, 1 full recompute, 2 selective (keep_mask applies).
        keep_mask: bit i set keeps SWITCHES[i] (attBMM, headCast, dropout,
            softmax, normOp, gather, ffAct, attUp).
        slice_input: 1 when a fully recomputed layer keeps its input split over tp.

    Sharding: TP splits heads and FFN widths; SP splits the norm, dropout and
    residual regions (and the matmul inputs Megatron stores sharded and
    gathers again in backward, Korthikanti §4.2.2); CP splits the sequence.
    A full-recompute layer keeps only its input. The ``gather`` switch changes
    no stored bytes here: Megatron keeps the SP shard of a matmul input and
    gathers it again in backward (Korthikanti §4.2.2), which is what Table 2's
    TP+SP rows price with gather kept. NaN for a non-positive size
    or degree, an unknown code, or a mask outside 0..255.

    For a GPT layer this is Korthikanti Table 2 (see tests/test_memory_formulas.py).
    """
    return windowed_layer_activation_bytes(
        seq, batch, hidden, tp, sp, cp, etp, attention, heads, kv_heads, head_dim, out_gate, qk_norm, q_lora,
        kv_lora, qk_nope, qk_rope, v_dim, lin_k_heads, lin_k_dim, lin_v_heads, lin_v_dim, lin_conv, lin_chunk,
        ffn, gated, ffn_width, experts, top_k, shared_width, token_factor, flash, compute_bytes, softmax_bytes,
        dropout_bytes, norm_bytes, linear_bytes, option, keep_mask, slice_input, 0.0)


def windowed_layer_activation_bytes(seq: float, batch: float, hidden: float, tp: float, sp: float, cp: float,
                                    etp: float, attention: int, heads: float, kv_heads: float, head_dim: float,
                                    out_gate: int, qk_norm: int, q_lora: float, kv_lora: float, qk_nope: float,
                                    qk_rope: float, v_dim: float, lin_k_heads: float, lin_k_dim: float,
                                    lin_v_heads: float, lin_v_dim: float, lin_conv: float, lin_chunk: float,
                                    ffn: int, gated: int, ffn_width: float, experts: float, top_k: float,
                                    shared_width: float, token_factor: float, flash: int, compute_bytes: float,
                                    softmax_bytes: float, dropout_bytes: float, norm_bytes: float,
                                    linear_bytes: float, option: int, keep_mask: int, slice_input: int,
                                    att_window: float) -> float:
    """:func:`layer_activation_bytes` of a layer whose queries attend to at most
    *att_window* keys (windowed attention, e.g. Qwen2.5-VL's vision layers; 0 = the
    whole sequence). The non-flash score matrices then keep heads_local × tokens ×
    min(att_window, seq) elements instead of heads_local × tokens × seq; flash keeps
    its logsumexp per query row either way. NaN for a negative or NaN window.

    Not a kernel of its own (not in ``__all__``): the memory batch calls it with the
    kind's ``att_window`` column, :func:`layer_activation_bytes` with 0.
    """
    if seq <= 0.0 or batch <= 0.0 or hidden <= 0.0:
        return NAN
    if tp < 1.0 or sp < 1.0 or cp < 1.0 or etp < 1.0:
        return NAN
    if option < _OPT_NONE or option > _OPT_SELECTIVE or keep_mask < 0 or keep_mask > _ALL_KEPT:
        return NAN
    if compute_bytes < 0.0 or softmax_bytes < 0.0 or dropout_bytes < 0.0 or norm_bytes < 0.0:
        return NAN
    if not linear_bytes >= 0.0:
        return NAN
    if not att_window >= 0.0:
        return NAN
    tokens = seq * batch / cp  # CP splits the sequence (Korthikanti §4 tokens s·b, here per CP rank)
    residual = tokens * hidden / sp  # one residual-stream tensor on this rank (SP splits it)

    if option == _OPT_FULL:
        # Korthikanti Table 2 "full recompute": the layer input alone, 2sbh at
        # 16 bits; recompute_slice_activation keeps it split over tp too.
        divisor = sp
        if slice_input and tp > divisor:
            divisor = tp
        return tokens * hidden * compute_bytes / divisor

    mask = _ALL_KEPT if option == _OPT_NONE else keep_mask
    total = 0.0
    # Two pre-norms store their inputs (Korthikanti §4.1 "LayerNorm": 4sbh); a hybrid stack's
    # one-part block (a mixer or an MLP alone) has one.
    norms = 1.0 if attention == _ATT_NONE or ffn == _FFN_NONE else 2.0
    total += _kept(mask, _NORMOP) * norms * residual * norm_bytes
    # Residual dropout masks after attention and after the FFN, kept by
    # Megatron's selective recompute (Korthikanti §4.1: sbh each).
    total += norms * residual * dropout_bytes

    # ---- attention block
    if attention == _ATT_FULL or attention == _ATT_MLA:
        if heads < 1.0:
            return NAN
        heads_local = heads / tp
        if attention == _ATT_FULL:
            if kv_heads < 1.0 or head_dim <= 0.0:
                return NAN
            # QKV input (Korthikanti "2sbh"): the pre-norm's output, which only the QKV linear saves
            # (Megatron-Core's TELayerNormColumnParallelLinear: the norm's input is the normOp term).
            total += residual * linear_bytes
            kv_local = kv_heads / tp
            if kv_local < 1.0:
                kv_local = 1.0  # fewer kv heads than TP ranks: each rank keeps one, replicated
            total += tokens * compute_bytes * _full_attention_elements(
                mask, heads_local, kv_local, head_dim, out_gate, qk_norm)
        else:
            if kv_lora <= 0.0 or qk_nope <= 0.0 or v_dim <= 0.0 or q_lora < 0.0 or qk_rope < 0.0:
                return NAN
            # The down-projections' input, the pre-norm's output: one shared copy, or under Transformer
            # Engine's fp8 one quantized copy saved by each of the two TELinear (q_down or q_proj, and
            # kv_down: Megatron-Core multi_latent_attention.py builds them apart).
            total += residual * (compute_bytes if linear_bytes == compute_bytes else 2.0 * linear_bytes)
            total += tokens * compute_bytes * _mla_elements(
                mask, heads_local, q_lora, kv_lora, qk_nope, qk_rope, v_dim)
            # The normed latents c_q and c_kv, the up-projections' inputs, saved by their
            # TELayerNormColumnParallelLinear alone (q_lora 0: no c_q).
            total += tokens * linear_bytes * (q_lora + kv_lora)
        # Score matrices: local heads × (s/cp queries) × s keys × b -- ring CP
        # splits the queries, Ulysses the heads: a·s²·b/(tp·cp) either way. A
        # windowed layer's query sees at most att_window keys (Qwen2.5-VL's
        # window attention runs block-diagonal scores: s·window, not s²).
        keys = seq
        if att_window > 0.0 and att_window < seq:
            keys = att_window
        score_elements = heads_local * tokens * keys
        total += _score_bytes(score_elements, tokens, heads_local, flash, mask,
                              compute_bytes, softmax_bytes, dropout_bytes)
    elif attention == _ATT_LINEAR:
        if lin_k_heads < 1.0 or lin_v_heads < 1.0 or lin_k_dim <= 0.0 or lin_v_dim <= 0.0 or lin_chunk <= 0.0:
            return NAN
        total += residual * compute_bytes  # in_proj input
        total += _linear_attention_bytes(mask, tokens, batch, tp, lin_k_heads, lin_k_dim, lin_v_heads,
                                         lin_v_dim, lin_conv, lin_chunk, compute_bytes)
    elif attention == _ATT_MAMBA:
        # Mamba-2 (lin_k_* its B/C groups and state, lin_v_* its heads and head dim): the in_proj
        # input, and what its autograd keeps per token, split over tp -- in_proj's z, x, B, C, dt
        # (the conv's and the gate's inputs), the conv's output x, B, C (the scan's input), the
        # scan's output y and the gated norm's output (out_proj's input); the scan recomputes its
        # chunk states in backward (mamba_chunk_scan_combined).
        if lin_k_heads < 1.0 or lin_v_heads < 1.0 or lin_k_dim <= 0.0 or lin_v_dim <= 0.0 or lin_chunk <= 0.0:
            return NAN
        d_inner = lin_v_heads * lin_v_dim
        conv = d_inner + 2.0 * lin_k_heads * lin_k_dim
        total += residual * compute_bytes
        total += tokens * compute_bytes * ((d_inner + conv + lin_v_heads) + conv + 2.0 * d_inner) / tp
    elif attention == _ATT_MAMBA1:
        # Mamba-1 (lin_v_heads its d_inner, lin_k_heads its dt rank, lin_k_dim its state): the in_proj
        # input, and per token x and z (2·d_inner), the conv's x, dt_proj's delta and the scan's y
        # (d_inner each), split over tp, and x_proj's dt, B, C (dt_rank + 2N, whole on every rank); the
        # selective scan recomputes its states in backward (Gu & Dao 2023 §3.3.2)
        if lin_k_heads < 1.0 or lin_v_heads < 1.0 or lin_k_dim <= 0.0:
            return NAN
        total += residual * compute_bytes
        total += tokens * compute_bytes * (5.0 * lin_v_heads / tp + lin_k_heads + 2.0 * lin_k_dim)
    elif attention != _ATT_NONE:
        return NAN

    # ---- FFN block
    if ffn == _FFN_NONE:
        return total
    if ffn_width <= 0.0:
        return NAN
    if ffn == _FFN_DENSE:
        # The first linear's input (Korthikanti "MLP: 2sbh"): the pre-norm's output, saved by fc1 alone
        # (TELayerNormColumnParallelLinear); fc2's input (the activation's output) by fc2 alone.
        total += residual * linear_bytes
        total += tokens * _ffn_bytes(mask, ffn_width / tp, gated, compute_bytes, linear_bytes)
    elif ffn == _FFN_MOE:
        # The router's input, the pre-norm's output (a separate norm: router and experts both read it),
        # kept at compute_bytes by the router's own GEMM (Megatron-Core moe/router.py router_gating_linear
        # saves its input); under fp8 the shared experts' fc1 saves a quantized copy beside it (below).
        total += residual * compute_bytes
        if experts < 1.0 or top_k < 1.0 or token_factor <= 0.0 or shared_width < 0.0:
            return NAN
        routed_local = tokens / sp  # tokens this rank routes (SP splits them)
        # Router logits (compute dtype), their softmax in the softmax dtype,
        # and the top-k probabilities kept for the combine (Megatron-Core TopKRouter).
        total += routed_local * (experts * compute_bytes + (experts + top_k) * softmax_bytes)
        # Token copies this rank's experts process: the world routes dp·s·b·k
        # copies over dp·tp·cp/etp expert ranks, each copy seen by etp ranks
        # (balanced; token_factor scales for capacity padding or imbalance).
        routed_tokens = tokens * top_k * token_factor * etp / tp
        # The permuted tokens, the experts' fc1 input, saved by that GroupedLinear alone (the permutation's
        # backward reads only its map); the expert MLP (width split over etp); the expert output kept for
        # the prob-weighted combine.
        routed_bytes = hidden * linear_bytes
        routed_bytes += _ffn_bytes(mask, ffn_width / etp, gated, compute_bytes, linear_bytes)
        routed_bytes += hidden * compute_bytes
        total += routed_tokens * routed_bytes
        # The routing's own tensors its backward reads: each token's k expert indices (int64) and the
        # dense bool routing map (Megatron-Core's TopKRouter; torchtitan keeps the indices), and each
        # routed row's source index (int64) and fp32 probability (the un-permutation's map and weights:
        # Megatron's moe_utils.permute, torchtitan's sorted token indices and scores).
        total += routed_local * (experts * ROUTING_MAP_BYTES + top_k * INDEX_BYTES)
        total += routed_tokens * (INDEX_BYTES + PROBABILITY_BYTES)
        if shared_width > 0.0:
            # Shared experts: a dense MLP over every token, split over tp; its
            # input is the router input above.
            total += tokens * _ffn_bytes(mask, shared_width / tp, gated, compute_bytes, linear_bytes)
            if linear_bytes != compute_bytes:
                # Their fc1 (a TE Linear, not norm-fused) saves its own quantized copy of the router's
                # input (TE module/linear.py: save_original_input is off unless Megatron-Core recomputes
                # the pre-MLP norm, transformer_layer.py set_for_recompute_pre_mlp_layernorm).
                total += residual * linear_bytes
    else:
        return NAN
    return total


# --------------------------------------------------------------------------- one stage


def _largest_work(work_per_layer, row, n_kinds: int, n_slots: int) -> float:
    """The largest working set of the layers present in one chunk's *row*; a NaN wins."""
    working = 0.0
    for kind in range(n_kinds):
        for slot in range(n_slots):
            work = float(work_per_layer[kind][slot])
            if row[kind * n_slots + slot] != 0.0 and working == working and (work != work or work > working):
                working = work
    return working


def stage_memory(static_per_layer, act_per_layer, work_per_layer, counts, inflight, stage_static,
                 extra_act, comm_buffers, reserve: float, out, overlapped_chunks: int = 0) -> None:
    """Per-stage memory breakdown, written to ``out`` (p, 8): params, grads,
    optimizer, activations, comm_buffers, working_set, reserve, total.

    Args:
        static_per_layer: (K, 3) params, grads, optimizer bytes of one layer of each kind.
        act_per_layer: (K, O) activation bytes of one layer per kind and option
            slot, for one micro-batch.
        work_per_layer: (K, O) backward working set of one such layer beyond
            what it keeps (recompute re-materialisation, FSDP gathers).
        counts: (p, vp, K·O) layers of kind k running slot o on (stage, chunk), kind-major.
        inflight: (p, vp) micro-batches in flight (:func:`inflight_micro_batches`).
        stage_static: (p, 3) static bytes outside the layers (embedding, output, MTP extras).
        extra_act: (p, vp) activation bytes outside the layers for one micro-batch.
        comm_buffers: (p,) communication buffer bytes.
        reserve: bytes kept back on every device (ND's safety buffer, §3.7).
        overlapped_chunks: 1 when the schedule runs one chunk's forward beside another
            chunk's backward (DualPipeV, zero_bubble_v, dualpipev), else 0.

    Activations: Σ over chunks of in-flight × (layers' + extra) bytes (§3.4).
    Working set: the largest of the layers in the stage's last non-empty chunk
    (the first backward after warm-up runs there, §3.7). With overlapped chunks,
    the sum over the chunks of each chunk's largest: DualPipeV runs a forward of one
    chunk and a backward of the other at once (DeepSeek-V3 report §3.2.1), ND's
    max(fwd_first + bwd_last, fwd_last + bwd_first) (§3.7) with each chunk's own
    layers. Layers with count 0 are skipped, so their (possibly NaN) entries never
    reach the sums.
    """
    n_kinds = len(static_per_layer)
    n_stages = len(counts)
    if n_kinds < 1 or len(static_per_layer[0]) != 3:
        raise ValueError("static_per_layer must be (K, 3) with K >= 1")
    n_slots = len(act_per_layer[0]) if len(act_per_layer) else 0
    if len(act_per_layer) != n_kinds or n_slots < 1:
        raise ValueError("act_per_layer must be (K, O) with O >= 1")
    if len(work_per_layer) != n_kinds or len(work_per_layer[0]) != n_slots:
        raise ValueError("work_per_layer must have the shape of act_per_layer")
    if n_stages < 1:
        raise ValueError("counts must have at least one stage")
    n_chunks = len(counts[0])
    if n_chunks < 1 or len(counts[0][0]) != n_kinds * n_slots:
        raise ValueError("counts must be (p, vp, K*O)")
    if len(inflight) != n_stages or len(inflight[0]) != n_chunks:
        raise ValueError("inflight must be (p, vp)")
    if len(stage_static) != n_stages or len(stage_static[0]) != 3:
        raise ValueError("stage_static must be (p, 3)")
    if len(extra_act) != n_stages or len(extra_act[0]) != n_chunks:
        raise ValueError("extra_act must be (p, vp)")
    if len(comm_buffers) != n_stages:
        raise ValueError("comm_buffers must be (p,)")
    if len(out) != n_stages or len(out[0]) != N_MEMORY_COLUMNS:
        raise ValueError("out must be (p, 8)")

    for stage in range(n_stages):
        params = float(stage_static[stage][0])
        grads = float(stage_static[stage][1])
        optimizer = float(stage_static[stage][2])
        activations = 0.0
        working = 0.0
        last_chunk = -1
        for chunk in range(n_chunks):
            row = counts[stage][chunk]
            chunk_bytes = float(extra_act[stage][chunk])
            for kind in range(n_kinds):
                for slot in range(n_slots):
                    layers = float(row[kind * n_slots + slot])
                    if layers == 0.0:
                        continue
                    last_chunk = chunk
                    params += layers * static_per_layer[kind][0]
                    grads += layers * static_per_layer[kind][1]
                    optimizer += layers * static_per_layer[kind][2]
                    chunk_bytes += layers * act_per_layer[kind][slot]
            activations += float(inflight[stage][chunk]) * chunk_bytes
        if last_chunk >= 0:
            for chunk in (range(n_chunks) if overlapped_chunks else (last_chunk,)):
                working += _largest_work(work_per_layer, counts[stage][chunk], n_kinds, n_slots)
        comm = float(comm_buffers[stage])
        total = params + grads + optimizer + activations + comm + working + reserve
        values = (params, grads, optimizer, activations, comm, working, float(reserve), total)
        for column in range(N_MEMORY_COLUMNS):
            out[stage][column] = values[column]


def pair_dualpipe_rows(out) -> None:
    """DualPipe's devices from the stages' rows of :func:`stage_memory`, in place: device i holds stage i
    and stage p-1-i (deepseek-ai/DualPipe dualpipe.py: the two directions' stages on one rank; its
    README's "Parameter Per Device 2x"), so both rows become the device's: the two stages' parameters,
    gradients and activations added; their optimizer state halved and added (each stage's shards over
    both copies' data-parallel ranks); the larger communication buffers and working set; one reserve."""
    n_stages = len(out)
    if any(len(row) != N_MEMORY_COLUMNS for row in out):
        raise ValueError("out must be (p, 8)")
    for stage in range(n_stages // 2):
        mine, mirror = out[stage], out[n_stages - 1 - stage]
        params = mine[0] + mirror[0]
        grads = mine[1] + mirror[1]
        optimizer = 0.5 * (mine[2] + mirror[2])
        activations = mine[3] + mirror[3]
        comm = mine[4] if mine[4] > mirror[4] else mirror[4]
        working = mine[5] if mine[5] > mirror[5] else mirror[5]
        total = params + grads + optimizer + activations + comm + working + mine[6]
        values = (params, grads, optimizer, activations, comm, working, mine[6], total)
        for column in range(N_MEMORY_COLUMNS):
            mine[column] = values[column]
            mirror[column] = values[column]
