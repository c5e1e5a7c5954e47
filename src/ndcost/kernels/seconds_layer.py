"""Seconds mode, one layer (oracle): :func:`seconds_layer_times` -- one layer of each kind, per
micro-batch and device: forward, backward and weight-gradient time, the raw communication per
pass, the forward time of each recompute switch's ops, the parameters it holds and its model FLOPs
(``SECONDS_LAYER_FIELDS``); :func:`seconds_layer_ops` -- the same layer op by op
(``LAYER_OP_NAMES`` x ``LAYER_OP_FIELDS``), its rows adding up to the layer's fw, bw and bw_w.

A pass of a layer takes at least the host's time to launch its kernels: the host runs ahead of the
device through CUDA's asynchronous launch queue, so over a pass the slower of the two sets the pace
(a layer of short kernels is launch-bound). Each kernel the host launches costs launch_s, a kernel
replayed from a CUDA graph graph_s (``ExecSpec.cuda_graphs``, ``seconds_ops._note_start``). A MoE layer's
per-expert loops are launched after the host waits for the token counts, the device idle: their launches
add to the pass (``seconds_ops._note_loop``).

Part of the seconds area (:mod:`ndcost.kernels.seconds` states how time is priced).
The twin is ``cysrc/ndcost/kernels/seconds_layer.pxi``.
"""
from __future__ import annotations

import math

from .columns import (
    KIND, LAYER_OP, LAYER_OP_FIELD, LAYER_OP_FIELDS, LAYER_OP_NAMES, MODEL, RATE, SECONDS_CAND, SECONDS_KIND,
    SECONDS_LAYER, SECONDS_LAYER_FIELDS, SECONDS_MODEL,
)
from ..spec.mamba import SELECTIVE_SCAN_FLOPS
from .codes import MIXERS
from .seconds_ops import (
    AUTOCAST_RMSNORM_BACKWARD_BYTES, AUTOCAST_RMSNORM_BACKWARD_KERNELS, AUTOCAST_RMSNORM_BYTES, AUTOCAST_RMSNORM_KERNELS,
    AUTOCAST_ROPE_FP32_BYTES, AUTOCAST_ROPE_KERNELS, EAGER_SWIGLU_PASSES, NOTE_SIZE, POINTWISE_BACKWARD_BYTES,
    SCOPE_ATTN, SCOPE_FFN, SCOPE_PRE, _cand_ok, _check_rows,
    _check_tables, _ffn_pair, _fill, _gemm, _mm3_noted, _note, _note_launch, _note_pass, _note_start, _pass,
)
from .seconds_comm import ALL_REDUCE, ALL_TO_ALL, GATHER_OR_SCATTER, SEND_RECV, _collective, _expert_alltoalls
from .seconds_moe import _moe_ffn, _note_two
from .window_attention import _head_dim_share, _tile_efficiency, _window_stretch
from .eager_passes import (
    EAGER_RMSNORM_FP32_BYTES, EAGER_RMSNORM_KERNELS, EAGER_ROPE_FP32_BYTES, EAGER_ROPE_KERNELS,
    MEGATRON_ROPE_KERNELS_B, MEGATRON_ROPE_KERNELS_F, MEGATRON_ROPE_PASSES_B, MEGATRON_ROPE_PASSES_F, ROPE_UNFUSED,
)
from .autocast import _autocast_passes, _autocast_weights

__all__ = ["seconds_layer_times", "seconds_layer_ops"]

NAN = math.nan

# Column indices, bound once (the kernel ABI of ndcost.kernels.columns).
_K = KIND
_M = MODEL
_SK = SECONDS_KIND
_SM = SECONDS_MODEL
_C = SECONDS_CAND
_R = RATE
_L = SECONDS_LAYER
_L_COUNT = len(SECONDS_LAYER_FIELDS)
_O = LAYER_OP
_OF = LAYER_OP_FIELD

#: FlashAttention's backward recomputes the scores: 2.5x the forward's FLOPs, and a causal kernel
#: skips the blocks above the diagonal: half of 4·b·s²·heads·d -- the accounting of
#: Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py flops() (f // 2 if causal;
#: 2.5·f backward), the one its published utilization (rates.attention_efficiency) is measured in.
#: Token mixers of a kind (the ``mixer`` column): attention (full, MLA, gated DeltaNet), a Mamba-2 mixer,
#: none (an MLP-only block of a hybrid stack).
MIXER_ATTENTION, MIXER_MAMBA, MIXER_NONE, MIXER_MAMBA1 = (
    float(MIXERS.index(name)) for name in ("attention", "mamba", "none", "mamba1"))

#: A bidirectional kind (a vision encoder) or a windowed one runs every block it meets: no share.
FLASH_BACKWARD_FLOPS = 2.5
FLASH_CAUSAL_SHARE = 0.5


def _ring_merge_passes(q_elements: float, kv_elements: float, cp: float, bc: float, n_split: float,
                       rate) -> tuple[float, float]:
    """(forward, backward) seconds of the elementwise work a P2P ring attention adds to one layer, on the
    busiest CP rank (every step over its whole Q), *q_elements* the rank's attention output and
    *kv_elements* its K and V together. Transformer Engine v1.10 (transformer_engine/pytorch/
    attention.py, AttnFuncWithCPAndKVP2P; sbhd halves are views): forward, K and V concatenated into
    the send buffer (read, write), the output zero-filled, and per step the unfused merge
    ``out.add_(out_per_step * exp(lse_step - lse))`` -- read the step's 16-bit output, write an fp32
    product, read it and the output, write the output: 3 x 16-bit + 2 x 4 bytes per element;
    backward, the saved K/V copied into the first ring buffer, and per step dQ copied (the first)
    or added (read two, write one) into place, dK and dV concatenated (read, write) and copied or
    added into the travelling dK/dV buffer. PyTorch's all-gather ring merges in fp32 too: priced as
    this (a lower bound of its sigmoid merge).
    """
    steps_acc = 2.0 + 3.0 * (cp - 1.0)                 # a copy, then cp - 1 read-two-write-one adds
    f_bytes = 2.0 * kv_elements * bc + q_elements * bc + cp * (3.0 * bc + 2.0 * 4.0) * q_elements
    b_bytes = (2.0 * kv_elements * bc + steps_acc * bc * (q_elements + kv_elements)
               + cp * 2.0 * kv_elements * bc)
    return (_pass(f_bytes, (2.0 + 4.0 * cp) * n_split, rate),
            _pass(b_bytes, (1.0 + 3.0 * cp) * n_split, rate))


def _note_core(note, ops, has_core: bool, flash: bool, recurrent: bool, flops: float, tokens: float, a: float,
               n_kv: float, d_qk: float, d_v: float, scores: float, t: float, cp: float, bc: float, n_split: float,
               forward: float, backward: float) -> None:
    """Note the token mixer's core (attention, a chunked recurrence or a scan) of *forward* and *backward*
    seconds: flash one kernel a pass and chunk, unfused attention two BMMs forward and four backward, a
    recurrence one forward and two backward; its FLOPs on this rank (*flops*: the whole micro-batch's)
    and its bytes -- Q, K, V and the output read or written once forward, twice backward, and an unfused
    score matrix written and read back."""
    k_f = k_b = 0.0
    if has_core:
        k_f, k_b = (n_split, n_split) if flash else (2.0 * n_split, 4.0 * n_split)
    if recurrent:
        k_f += n_split
        k_b += 2.0 * n_split
    run = moved = 0.0
    if ops is not None:
        run = flops / (t * cp)
        moved = bc * tokens * (a * (d_qk + d_v) + n_kv * (d_qk + d_v)) / t + 2.0 * bc * scores
    _note(note, ops, _O["attn_core"], SCOPE_ATTN, run, moved, k_f, forward,
          (FLASH_BACKWARD_FLOPS if flash else 2.0) * run, 2.0 * moved, k_b, backward)


def _layer(kind, skind, model, smodel, cand, rate, out, ops=None) -> None:
    """One layer of a kind, per micro-batch and device, into out[SECONDS_LAYER_FIELDS]; with *ops*
    (LAYER_OP_NAMES x LAYER_OP_FIELDS, zeroed), each op's figures added to its row.

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
    bc, bg = cand[_C["bytes_c"]], cand[_C["bytes_grad"]]
    db = cand[_C["dropout_bytes"]]
    flash = cand[_C["flash"]] != 0.0
    mm16_rate = rate[_R["mm16_eff"]] * rate[_R["peak_attn"]]   # GDN's chunked recurrence runs 16-bit
    eager = rate[_R["ew_eager"]] != 0.0
    autocast = cand[_C["autocast"]] != 0.0      # fp32 parameters under torch.autocast, an fp32 stream
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
    g3 = [0.0] * 5
    note = [0.0] * NOTE_SIZE
    _note_start(cand, rate, note)
    proj = _O["attn_proj"]
    fw = bw = bw_w = gemm_f = gemm_b = 0.0
    f_att = d_att = w_grad = flops_att = 0.0
    ssm_inner = ssm_conv = 0.0

    # ---- attention projections, 2·tokens·W FLOPs forward; Megatron fuses Q, K, V in one GEMM.
    if mixer == MIXER_MAMBA:
        # Mamba-2 (ndcost.spec.mamba): in_proj h -> [z, x, B, C, dt] (column-parallel: heads and groups
        # split over tp) and out_proj d_inner -> h (row-parallel)
        ssm_inner = a * dh                                    # d_inner = heads x head_dim
        ssm_conv = ssm_inner + 2.0 * n_kv * kind[_K["lin_d_k"]]   # x, B, C: conv channels
        n_in = ssm_inner + ssm_conv + a
        _mm3_noted(rows, n_in / t, h, n_split, cand, rate, g3, False, 1, note, ops, proj, SCOPE_ATTN)
        f_att, d_att, w_grad = g3[0], g3[1], g3[2]
        _mm3_noted(rows, h, ssm_inner / t, n_split, cand, rate, g3, False, 2, note, ops, proj, SCOPE_ATTN)
        f_att, d_att, w_grad = f_att + g3[0], d_att + g3[1], w_grad + g3[2]
        flops_att = 2.0 * b * s * h * (n_in + ssm_inner)
    elif mixer == MIXER_MAMBA1:
        # Mamba-1 (Jamba): in_proj h -> [x, z] (column-parallel), x_proj d_inner -> dt_rank + 2N and
        # dt_proj dt_rank -> d_inner on this rank's channels, out_proj d_inner -> h (row-parallel);
        # x_proj's small all-reduce over tp is not priced
        ssm_inner = a
        state = kind[_K["lin_d_k"]]
        _mm3_noted(rows, 2.0 * ssm_inner / t, h, n_split, cand, rate, g3, False, 1, note, ops, proj, SCOPE_ATTN)
        f_att, d_att, w_grad = g3[0], g3[1], g3[2]
        _mm3_noted(rows, n_kv + 2.0 * state, ssm_inner / t, n_split, cand, rate, g3, False, 0, note, ops, proj, SCOPE_ATTN)
        f_att, d_att, w_grad = f_att + g3[0], d_att + g3[1], w_grad + g3[2]
        _mm3_noted(rows, ssm_inner / t, n_kv, n_split, cand, rate, g3, False, 0, note, ops, proj, SCOPE_ATTN)
        f_att, d_att, w_grad = f_att + g3[0], d_att + g3[1], w_grad + g3[2]
        _mm3_noted(rows, h, ssm_inner / t, n_split, cand, rate, g3, False, 2, note, ops, proj, SCOPE_ATTN)
        f_att, d_att, w_grad = f_att + g3[0], d_att + g3[1], w_grad + g3[2]
        flops_att = 2.0 * b * s * (3.0 * h * ssm_inner + 2.0 * ssm_inner * (n_kv + state))
    elif mixer == MIXER_NONE:
        pass
    elif kind[_K["is_mla"]] != 0.0:
        # MLA: every attention weight W (ND's mla_weights, docs/ND_MODEL.md §2.2) as one GEMM of the
        # same FLOPs (k = h, n = W/(h·t)), plus 4 more kernels (q_a, q_b, kv_a, kv_b, o: 5 GEMMs).
        w_att = kind[_K["mla_w"]]
        _mm3_noted(rows, w_att / (h * t), h, n_split, cand, rate, g3, False, 1, note, ops, proj, SCOPE_ATTN)
        extra = 4.0 * n_split * kernel_s
        f_att, d_att, w_grad = g3[0] + extra, g3[1] + extra, g3[2] + extra
        _note(note, ops, proj, SCOPE_ATTN, 0.0, 0.0, 4.0 * n_split, extra, 0.0, 0.0, 8.0 * n_split, 2.0 * extra)
        up_share = kind[_K["mla_up"]] / w_att if w_att > 0.0 else 0.0
        out[_L["sw_attUp"]] = up_share * f_att
        flops_att = 2.0 * b * s * w_att
        out[_L["flops_up"]] = 2.0 * b * s * kind[_K["mla_up"]]
    else:
        _mm3_noted(rows, n_qkv / t, h, n_split, cand, rate, g3, False, 1, note, ops, proj, SCOPE_ATTN)
        f_att, d_att, w_grad = g3[0], g3[1], g3[2]
        _mm3_noted(rows, h, a * dh / t, n_split, cand, rate, g3, False, 2, note, ops, proj, SCOPE_ATTN)
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
    # window or chunks skips the blocks outside them, an unfused one computes the whole matrix and masks it; a
    # sliding window's flash kernel runs its FLOPs slower than the full kernel, its fixed work a query amortised
    # over w keys, not s/2 (ndcost.kernels.window_attention).
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
            if windowed and masked and kind[_K["att_chunked"]] == 0.0:
                run *= _window_stretch(window, s)     # a sliding window's fixed work a query (window_attention)
            # a head dim under 128 spends more of the kernel on the softmax a FLOP (window_attention)
            run /= _head_dim_share(d_qk if d_qk < d_v else d_v, rate[_R["attn_h64"]])
            fbar = rate[_R["attn_fbar"]]
            if fbar > 0.0 and masked and kind[_K["att_chunked"]] == 0.0:
                # the rate was measured at stated lengths: this layer's tile efficiency against theirs
                # (window_attention)
                calls = (cp + 1.0) / 2.0 if cp > 1.0 and cand[_C["cp_ring"]] != 0.0 else 1.0
                run *= fbar / _tile_efficiency(s / 2.0, calls)
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
    # 2·64·(3·d_k + 2·d_v) + 6·d_k·d_v FLOPs forward (docs/ND_MODEL.md §2.2 n_linrec holds 3x this,
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
        # ---- Mamba-2's SSD scan per token and head (ndcost.spec.mamba.ssd_flops_per_token, Dao & Gu 2024
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
    if core_f > 0.0:
        _note_core(note, ops, has_core, flash, flops_rec > 0.0, flops_core + core_extra + flops_rec, tokens, a,
                   n_kv, d_qk, d_v, scores, t, cp, bc, n_split, core_f, core_b)
    fw += core_f
    bw += core_b

    # ---- FFN: dense 2 (GELU) or 3 (SwiGLU) matmuls; MoE (``seconds_moe._moe_ffn``): the router, the
    # permutation, the routed experts as grouped GEMMs, their activation, the un-permutation, shared
    # experts as a dense FFN of their width. ffn_f: the forward of the FFN matmuls (routed and shared
    # experts, or the dense pair; not the router), what a census share recomputes; act_f the forward of
    # the activation pass (ffAct), what a selective recompute of it re-runs.
    flops_ffn = ffn_f = act_f = 0.0
    sums = [fw, bw, bw_w, gemm_f, gemm_b]
    if not has_ffn:
        pass                                  # a mixer-only block of a hybrid stack
    elif moe:
        ffn_f, act_f, flops_ffn = _moe_ffn(model, smodel, cand, rate, tokens, h, n_ff, width, sums, note, ops)
    else:
        ffn_f = _ffn_pair(rows, width, h, n_ff, n_split, cand, rate, sums, note, ops, _O["mlp"], SCOPE_FFN)
        # GELU reads one tensor and writes one (2 passes); SwiGLU reads two and writes one (3), or,
        # unfused, silu(gate) (read, write) then its product with up (read 2, write): 5 passes
        unfused = eager and n_ff == 3.0
        act_f = _note_pass(note, ops, _O["mlp_act"], SCOPE_FFN,
                           (EAGER_SWIGLU_PASSES if unfused else n_ff) * bc * tokens * width / t,
                           (2.0 if unfused else 1.0) * n_split, rate, sums)
        flops_ffn = 2.0 * b * s * h * n_ff * width

    # ---- elementwise work, each class an op of its own: forward bytes and kernels a Seq1F1B chunk;
    # each class's forward time is what a selective recompute of its switch re-runs. The norms: the
    # layer's (ND's normOp count), the FFN's pre-norm in the FFN's scope, q/k norms in attention's
    n_norm = kind[_K["n_normOp"]]
    per_norm, norm_kernels = 2.0 * bc * x_sp, 1.0         # read + write each
    if eager and smodel[_SM["rms_norm"]] != 0.0:
        # an RMSNorm written in PyTorch ops and run eagerly, one kernel each
        per_norm, norm_kernels = (EAGER_RMSNORM_FP32_BYTES + 4.0 * bc) * x_sp, EAGER_RMSNORM_KERNELS
        if autocast:
            # on the fp32 stream: no casts in or out (seconds_ops.AUTOCAST_RMSNORM_BYTES)
            per_norm, norm_kernels = AUTOCAST_RMSNORM_BYTES * x_sp, AUTOCAST_RMSNORM_KERNELS
    ffn_norms = 1.0 if has_ffn and n_norm > 0.0 else 0.0
    attn_norm_bytes = (n_norm - ffn_norms) * per_norm
    attn_norm_kernels = (n_norm - ffn_norms) * norm_kernels
    if kind[_K["n_qknorm"]] != 0.0 and mixer == MIXER_ATTENTION:
        attn_norm_bytes += 2.0 * bc * tokens * (a + n_kv) * dh / t
        attn_norm_kernels += 2.0
    ffn_scope = SCOPE_PRE if moe else SCOPE_FFN
    out[_L["sw_normOp"]] = (
        _note_pass(note, ops, _O["norm"], SCOPE_ATTN, attn_norm_bytes, attn_norm_kernels * n_split, rate, sums)
        + _note_pass(note, ops, _O["norm"], ffn_scope, ffn_norms * per_norm, ffn_norms * norm_kernels * n_split,
                     rate, sums))
    if eager and autocast and smodel[_SM["rms_norm"]] != 0.0:
        # the norms' backward as autograd runs Transformers' RMSNorm graph, beyond the 1.5x priced above
        # (seconds_ops.AUTOCAST_RMSNORM_BACKWARD_BYTES)
        more_b = (AUTOCAST_RMSNORM_BACKWARD_BYTES - POINTWISE_BACKWARD_BYTES * AUTOCAST_RMSNORM_BYTES) * x_sp
        more_k = (AUTOCAST_RMSNORM_BACKWARD_KERNELS - AUTOCAST_RMSNORM_KERNELS) * n_split
        _note_two(note, ops, _O["norm"], SCOPE_ATTN, 0.0, 0.0, (n_norm - ffn_norms) * more_b,
                  (n_norm - ffn_norms) * more_k, rate, sums, 0.0, 0.0)
        _note_two(note, ops, _O["norm"], ffn_scope, 0.0, 0.0, ffn_norms * more_b, ffn_norms * more_k, rate, sums,
                  0.0, 0.0)
    if scores > 0.0:
        other = _O["attn_other"]
        # Megatron's fused scale-mask-softmax; dropout (read, write, keep the mask); the context
        # [b·a, s, d] -> [s, b, a·d] permute (read + write)
        out[_L["sw_softmax"]] = _note_pass(note, ops, other, SCOPE_ATTN, 2.0 * bc * scores, n_split, rate, sums)
        if db > 0.0:
            out[_L["sw_dropout"]] = _note_pass(note, ops, other, SCOPE_ATTN, (2.0 * bc + db) * scores, n_split,
                                               rate, sums)
        out[_L["sw_attBMM"]] += _note_pass(note, ops, other, SCOPE_ATTN, 2.0 * bc * tokens * a * d_v / t, n_split,
                                           rate, sums)
    # rotary position embedding on q and k (no learned position table): fused, read + write
    # each element once (Megatron's apply_rope_fusion, TE's fused RoPE, an inductor kernel); eager
    # (torchtitan's apply_rotary_emb): upcast to fp32, complex multiply, cast back, per tensor; with an
    # attention factor on cos and sin, Megatron-Core's unfused fallback (MEGATRON_ROPE_*)
    if smodel[_SM["rope"]] != 0.0 and has_core:
        if kind[_K["is_mla"]] != 0.0:
            rotated = tokens * (a / t + 1.0) * kind[_K["dhr"]]   # each head's q_pe and the shared k_pe
        else:
            rotated = tokens * (a + n_kv) * dh / t
        if eager and autocast:
            # Transformers' apply_rotary_pos_emb with fp32 cos / sin, then autocast's casts for SDPA
            # (seconds_ops.AUTOCAST_ROPE_FP32_BYTES)
            _note_pass(note, ops, _O["rope"], SCOPE_ATTN, (6.0 * bc + AUTOCAST_ROPE_FP32_BYTES) * rotated,
                       2.0 * AUTOCAST_ROPE_KERNELS * n_split, rate, sums)
        elif eager:
            _note_pass(note, ops, _O["rope"], SCOPE_ATTN, (2.0 * bc + EAGER_ROPE_FP32_BYTES) * rotated,
                       2.0 * EAGER_ROPE_KERNELS * n_split, rate, sums)
        elif smodel[_SM["rope_scaled"]] != 0.0 and rate[_R["rope_scale"]] == ROPE_UNFUSED:
            # an attention factor on cos and sin (YaRN): Megatron-Core's unfused fallback, q and k each
            _note_two(note, ops, _O["rope"], SCOPE_ATTN, MEGATRON_ROPE_PASSES_F * bc * rotated,
                      2.0 * MEGATRON_ROPE_KERNELS_F * n_split, MEGATRON_ROPE_PASSES_B * bc * rotated,
                      2.0 * MEGATRON_ROPE_KERNELS_B * n_split, rate, sums, 0.0, 0.0)
        else:
            _note_pass(note, ops, _O["rope"], SCOPE_ATTN, 2.0 * bc * rotated, 2.0 * n_split, rate, sums)
    if rate[_R["attn_copies"]] != 0.0 and has_core and kind[_K["is_mla"]] == 0.0:
        # torchtitan's attention: repeat_kv materialises K and V for every query head (GQA), and
        # the core's output is made contiguous again after its transpose (copies: read + write)
        copied, copies = 2.0 * bc * tokens * a * dh / t, 1.0
        if n_kv < a:
            copied += bc * tokens * (2.0 * n_kv * dh + 2.0 * a * dh) / t
            copies += 2.0
        _note_pass(note, ops, _O["attn_other"], SCOPE_ATTN, copied, copies * n_split, rate, sums)
    if conv_bytes > 0.0:
        _note_pass(note, ops, _O["attn_other"], SCOPE_ATTN, conv_bytes, 2.0 * n_split, rate, sums)
    # the fused bias-dropout-add kernels, one a sub-block: read the output and the residual, write (+ mask)
    residual = (3.0 * bc + db) * x_sp
    if autocast:
        # the fp32 stream's adds and each projection's own cast of its fp32 input (autocast._autocast_passes)
        casts_att = 0.0
        if mixer != MIXER_NONE:
            casts_att = 3.0 if mixer == MIXER_ATTENTION and kind[_K["is_mla"]] == 0.0 and has_core else 1.0
        casts_ffn = (2.0 if not moe and n_ff == 3.0 else 1.0) if has_ffn else 0.0
        _autocast_passes(note, ops, x_sp, bc, db, n_split, casts_att, casts_ffn, rate, sums)
    else:
        if mixer != MIXER_NONE:
            _note_pass(note, ops, _O["residual"], SCOPE_ATTN, residual, n_split, rate, sums)
        if has_ffn:
            _note_pass(note, ops, _O["residual"], SCOPE_FFN, residual, n_split, rate, sums)
    out[_L["sw_ffAct"]] = act_f
    fw, bw, bw_w, gemm_f, gemm_b = sums
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
            f_ring, b_ring = _ring_merge_passes(tokens * a * d_v / t, tokens * n_kv * (d_qk + d_v) / t, cp, bc,
                                                n_split, rate)
            out[_L["sw_attBMM"]] += f_ring
            fw += f_ring
            bw += b_ring
            _note(note, ops, _O["attn_core"], SCOPE_ATTN, 0.0, 0.0, (2.0 + 4.0 * cp) * n_split, f_ring, 0.0, 0.0,
                  (1.0 + 3.0 * cp) * n_split, b_ring)
        else:
            # Ulysses (Jacobs et al. 2023): all-to-alls of Q, K, V in and of the output back; the
            # same in backward.
            qkv = tokens * (a * d_qk + n_kv * (d_qk + d_v)) * bc / t
            o = tokens * a * d_v * bc / t
            ulysses = (_collective(ALL_TO_ALL, qkv, cp, t, rate)
                       + _collective(ALL_TO_ALL, o, cp, t, rate))
            out[_L["cp_f"]] = ulysses
            out[_L["cp_b"]] = ulysses

    # ---- expert parallelism, in the ep group (stride t·cp): its dispatches and combines, forward and backward
    if moe and ep > 1.0:
        _expert_alltoalls(cand, model, tokens / sp, h, bc, ep, t_exp, rate, out)

    p_dense = (skind[_SK["p_nonexp"]] + skind[_SK["p_shared"]]) / t
    p_expert = skind[_SK["p_routed"]] / (ep * t_exp)
    if autocast:
        # every fp32 weight cast to 16 bits each forward, its gradient cast back (autocast._autocast_weights)
        weights = (4.0 if mixer != MIXER_NONE else 0.0) + (n_ff if has_ffn else 0.0)
        if moe:
            weights += n_ff * model[_M["n_exp"]] / ep
        cast_f, cast_b = _autocast_weights(note, ops, p_dense + p_expert, weights, bc, rate)
        fw += cast_f
        bw_w += cast_b
    if rate[_R["grad_acc_pass"]] != 0.0:
        # no gradient-accumulation fusion: the weight-gradient GEMM writes a 16-bit gradient and a
        # separate kernel adds it into the main gradient (read both, write the main one), every
        # micro-batch (Megatron-LM 2021 distributed.py param_hook: param.main_grad.add_(param.grad))
        moved = (p_dense + p_expert) * (bc + 2.0 * bg)
        added = _pass(moved, n_split, rate)
        bw_w += added
        _note(note, ops, _O["grad_acc"], SCOPE_FFN, 0.0, 0.0, 0.0, 0.0, 0.0, moved, n_split, added)
    # the host launches the kernels of each pass (those not replayed from a CUDA graph): a pass takes
    # at least that long; what it adds is the "launch" op
    wait_f, wait_b = _note_launch(note, ops, fw, bw + bw_w)
    fw += wait_f
    bw += wait_b
    if ops is not None:
        for name, forward, backward in (("tp_comm", out[_L["tp_f"]], out[_L["tp_b"]]),
                                        ("cp_comm", out[_L["cp_f"]], out[_L["cp_b"]]),
                                        ("ep_comm", out[_L["ep_f"]], out[_L["ep_b"]])):
            ops[_O[name]][_OF["time_f"]] = forward
            ops[_O[name]][_OF["time_b"]] = backward
    out[_L["fw"]] = fw
    out[_L["bw"]] = bw
    out[_L["bw_w"]] = bw_w
    out[_L["gemm_f"]] = gemm_f
    out[_L["gemm_b"]] = gemm_b
    out[_L["core_f"]] = core_f
    out[_L["core_b"]] = core_b
    out[_L["att_f"]] = f_att + core_f
    out[_L["att_b"]] = d_att + w_grad + core_b
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


def seconds_layer_ops(kinds, skinds, model, smodel, cand, rate, kind: int, out) -> None:
    """One layer of kind *kind*, op by op, into out (LAYER_OP_NAMES x LAYER_OP_FIELDS): each op's FLOPs
    run on this device, HBM bytes, kernels, seconds and host seconds, forward and backward (weight
    gradients in backward), per micro-batch. The rows before "tp_comm" add up to the layer's fw and
    bw + bw_w of seconds_layer_times; "launch" holds what the host's launches add (its host columns:
    the pass's whole host time); the communication rows are raw, before the step's overlap.

    NaN everywhere for a kind index out of range or a candidate seconds_layer_times refuses.
    """
    _check_tables(kinds, skinds, model, smodel, cand, rate)
    _check_rows(out, "out", len(LAYER_OP_NAMES), len(LAYER_OP_FIELDS))
    for row in out:
        _fill(row, len(LAYER_OP_FIELDS), 0.0)
    layer = [0.0] * _L_COUNT
    if 0 <= kind < len(kinds) and _cand_ok(cand, rate):
        _layer(kinds[kind], skinds[kind], model, smodel, cand, rate, layer, out)
        if layer[_L["fw"]] == layer[_L["fw"]]:
            return
    for row in out:
        _fill(row, len(LAYER_OP_FIELDS), NAN)
