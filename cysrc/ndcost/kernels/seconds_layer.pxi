# Seconds mode, one layer (twin of ndcost/kernels/seconds_layer.py): forward, backward and
# weight-gradient time of one layer of each kind, its raw communication per pass, the forward time of
# each recompute switch's ops, its parameters and model FLOPs; and the same layer op by op (a pass
# takes at least the host's launches of its kernels). Needs kernels/columns.pxi, kernels/seconds_ops.pxi,
# kernels/seconds_comm.pxi and kernels/seconds_moe.pxi included before it.

from libc.math cimport floor

# the kind's token mixer (K_mixer: SEC_MIXER_*), Mamba-1's selective-scan FLOPs (SEC_SELECTIVE_SCAN_FLOPS,
# ndcost.spec.mamba's), flash attention's and the eager norm's and rotary's constants: kernels/codes.pxi.


cdef inline void c_sec_note_core(double* note, double* ops, bint has_core, bint flash, bint recurrent,
                                 double flops, double tokens, double a, double n_kv, double d_qk, double d_v,
                                 double scores, double t, double cp, double bc, double n_split, double forward,
                                 double backward) noexcept nogil:
    # Note the token mixer's core (the oracle's _note_core).
    cdef double k_f = 0.0, k_b = 0.0, run = 0.0, moved = 0.0
    if has_core:
        if flash:
            k_f = n_split
            k_b = n_split
        else:
            k_f = 2.0 * n_split
            k_b = 4.0 * n_split
    if recurrent:
        k_f += n_split
        k_b += 2.0 * n_split
    if ops != NULL:
        run = flops / (t * cp)
        moved = bc * tokens * (a * (d_qk + d_v) + n_kv * (d_qk + d_v)) / t + 2.0 * bc * scores
    c_sec_note(note, ops, LO_attn_core, SEC_SCOPE_ATTN, run, moved, k_f, forward,
               (SEC_FLASH_BACKWARD_FLOPS if flash else 2.0) * run, 2.0 * moved, k_b, backward)


cdef inline void c_sec_layer(const double* kind, const double* skind, const double* model,
                             const double* smodel, const double* cand, const double* rate,
                             double* out, double* ops) noexcept nogil:
    # One layer of a kind, per micro-batch and device (the oracle's _layer, step for step), on the
    # kind's hidden size (sub_h) and its own tokens per sample when it states them (seq_tokens > 0).
    cdef double b = cand[SC_b], t = cand[SC_t], cp = cand[SC_cp], sp = cand[SC_sp]
    cdef double s = kind[K_seq_tokens] if kind[K_seq_tokens] > 0.0 else cand[SC_s]
    cdef double ep = cand[SC_ep], t_exp = cand[SC_t_exp], n_split = cand[SC_seq_split]
    cdef double bc = cand[SC_bytes_c], bg = cand[SC_bytes_grad]
    cdef double db = cand[SC_dropout_bytes]
    cdef bint flash = cand[SC_flash] != 0.0
    cdef double mm16_rate = rate[R_mm16_eff] * rate[R_peak_attn]
    cdef bint eager = rate[R_ew_eager] != 0.0
    cdef bint autocast = cand[SC_autocast] != 0.0     # fp32 parameters under torch.autocast, an fp32 stream
    cdef double fp32_f, fp32_b, casts, casts_att, casts_ffn, weights, cast_f, cast_b, more_b, more_k
    cdef int scope
    cdef double attn_rate = rate[R_attn_eff] * rate[R_peak_attn]
    cdef double hbm = rate[R_hbm_eff] * rate[R_hbm_bw]
    cdef double kernel_s = rate[R_kernel_s]
    cdef double h = kind[K_sub_h], a = kind[K_att_a]
    cdef double n_kv, dh, gate, d_qk, d_v, tokens, rows, x_sp, n_ff, width, n_qkv
    cdef double q_el, kv_el, steps_acc, f_ring, b_ring
    cdef bint moe, has_core
    cdef double g3[5]
    cdef double note[SEC_NOTE_SIZE]
    cdef double ffn_act[2]
    cdef double waits[2]
    cdef double per_norm, ffn_norms, attn_norm_bytes, attn_norm_kernels, residual, copied, copies, act_f = 0.0
    cdef double moved, added, unfused_passes
    cdef int ffn_scope
    cdef double fw = 0.0, bw = 0.0, bw_w = 0.0, gemm_f = 0.0, gemm_b = 0.0, p_dense, p_expert
    cdef double w_att, extra, f_att, d_att, w_grad, up_share, flops_att
    cdef double core_f = 0.0, core_b = 0.0, flops_core = 0.0, scores = 0.0, core_extra = 0.0
    cdef double heads, run, keys, q_rows, window, span, full_chunks, rest, calls
    cdef bint windowed, causal, masked
    cdef double flops_rec = 0.0, n_v, d_k, dv_lin, conv_bytes = 0.0, compute, memory, rec_f
    cdef double flops_ffn = 0.0, ffn_f = 0.0
    cdef double sums[5]
    cdef double norm_kernels
    cdef double full, gather, tp_pass, kv, step, qkv, o, ulysses
    cdef double rotated
    cdef double mixer = kind[K_mixer], parts, ssm_inner = 0.0, ssm_conv = 0.0, n_in, chunk, state, n_norm
    cdef bint has_ffn = kind[K_has_ffn] != 0.0
    c_sec_fill(out, SL_COUNT, 0.0)
    if not (h > 0.0 and (a > 0.0 or mixer == SEC_MIXER_NONE)):
        c_sec_fill(out, SL_COUNT, NAN)
        return
    # sub-blocks (residual add, TP gather/scatter pair, pre-norm each): 2 in a transformer layer, 1 in a
    # hybrid stack's block
    parts = (0.0 if mixer == SEC_MIXER_NONE else 1.0) + (1.0 if has_ffn else 0.0)
    f_att = 0.0
    d_att = 0.0
    w_grad = 0.0
    flops_att = 0.0
    n_kv = kind[K_att_n_kv]
    dh = kind[K_att_dh] if kind[K_att_dh] != 0.0 else (h / a if a > 0.0 else 0.0)
    gate = 1.0 if kind[K_att_gate] != 0.0 else 0.0
    d_qk = (kind[K_qk_nope] if kind[K_qk_nope] != 0.0 else dh) + kind[K_dhr]
    d_v = dh
    tokens = b * s / cp
    rows = tokens / n_split
    x_sp = tokens * h / sp
    n_ff = kind[K_n_ffMM] if kind[K_n_ffMM] != 0.0 else 3.0
    width = kind[K_ffn_width]
    moe = kind[K_is_moe] != 0.0
    has_core = kind[K_n_attBMM] != 0.0
    n_qkv = (a * (1.0 + gate) + 2.0 * n_kv) * dh
    c_sec_note_start(cand, rate, note)

    # attention projections; Mamba-2's in_proj (h -> z, x, B, C, dt) and out_proj (d_inner -> h)
    if mixer == SEC_MIXER_MAMBA:
        ssm_inner = a * dh
        ssm_conv = ssm_inner + 2.0 * n_kv * kind[K_lin_d_k]
        n_in = ssm_inner + ssm_conv + a
        c_sec_mm3_noted(rows, n_in / t, h, n_split, cand, rate, g3, 0, 1, note, ops, LO_attn_proj,
                        SEC_SCOPE_ATTN)
        f_att = g3[0]
        d_att = g3[1]
        w_grad = g3[2]
        c_sec_mm3_noted(rows, h, ssm_inner / t, n_split, cand, rate, g3, 0, 2, note, ops, LO_attn_proj,
                        SEC_SCOPE_ATTN)
        f_att = f_att + g3[0]
        d_att = d_att + g3[1]
        w_grad = w_grad + g3[2]
        flops_att = 2.0 * b * s * h * (n_in + ssm_inner)
    elif mixer == SEC_MIXER_MAMBA1:
        # Mamba-1: in_proj h -> [x, z], x_proj d_inner -> dt_rank + 2N, dt_proj dt_rank -> d_inner, out_proj
        ssm_inner = a
        state = kind[K_lin_d_k]
        c_sec_mm3_noted(rows, 2.0 * ssm_inner / t, h, n_split, cand, rate, g3, 0, 1, note, ops, LO_attn_proj,
                        SEC_SCOPE_ATTN)
        f_att = g3[0]
        d_att = g3[1]
        w_grad = g3[2]
        c_sec_mm3_noted(rows, n_kv + 2.0 * state, ssm_inner / t, n_split, cand, rate, g3, 0, 0, note, ops, LO_attn_proj,
                        SEC_SCOPE_ATTN)
        f_att = f_att + g3[0]
        d_att = d_att + g3[1]
        w_grad = w_grad + g3[2]
        c_sec_mm3_noted(rows, ssm_inner / t, n_kv, n_split, cand, rate, g3, 0, 0, note, ops, LO_attn_proj,
                        SEC_SCOPE_ATTN)
        f_att = f_att + g3[0]
        d_att = d_att + g3[1]
        w_grad = w_grad + g3[2]
        c_sec_mm3_noted(rows, h, ssm_inner / t, n_split, cand, rate, g3, 0, 2, note, ops, LO_attn_proj,
                        SEC_SCOPE_ATTN)
        f_att = f_att + g3[0]
        d_att = d_att + g3[1]
        w_grad = w_grad + g3[2]
        flops_att = 2.0 * b * s * (3.0 * h * ssm_inner + 2.0 * ssm_inner * (n_kv + state))
    elif mixer == SEC_MIXER_NONE:
        pass
    elif kind[K_is_mla] != 0.0:
        w_att = kind[K_mla_w]
        c_sec_mm3_noted(rows, w_att / (h * t), h, n_split, cand, rate, g3, 0, 1, note, ops, LO_attn_proj,
                        SEC_SCOPE_ATTN)
        extra = 4.0 * n_split * kernel_s
        f_att = g3[0] + extra
        d_att = g3[1] + extra
        w_grad = g3[2] + extra
        c_sec_note(note, ops, LO_attn_proj, SEC_SCOPE_ATTN, 0.0, 0.0, 4.0 * n_split, extra, 0.0, 0.0, 8.0 * n_split,
                   2.0 * extra)
        up_share = kind[K_mla_up] / w_att if w_att > 0.0 else 0.0
        out[SL_sw_attUp] = up_share * f_att
        flops_att = 2.0 * b * s * w_att
        out[SL_flops_up] = 2.0 * b * s * kind[K_mla_up]
    else:
        c_sec_mm3_noted(rows, n_qkv / t, h, n_split, cand, rate, g3, 0, 1, note, ops, LO_attn_proj,
                        SEC_SCOPE_ATTN)
        f_att = g3[0]
        d_att = g3[1]
        w_grad = g3[2]
        c_sec_mm3_noted(rows, h, a * dh / t, n_split, cand, rate, g3, 0, 2, note, ops, LO_attn_proj,
                        SEC_SCOPE_ATTN)
        f_att = f_att + g3[0]
        d_att = d_att + g3[1]
        w_grad = w_grad + g3[2]
        flops_att = 2.0 * b * s * h * (n_qkv + a * dh)
    fw += f_att
    bw += d_att
    bw_w += w_grad
    gemm_f += f_att
    gemm_b += d_att + w_grad

    # attention core: span keys a query meets on average (s; a bidirectional window; a causal
    # sliding window: w - w(w-1)/(2s); causal chunks of w: (k·w(w+1) + r(r+1))/(2s), k = floor(s/w),
    # r = s - k·w); causal (half the matrix) unless bidirectional or windowed
    window = kind[K_att_window]
    windowed = window > 0.0 and window < s
    masked = kind[K_bidirectional] == 0.0
    span = s
    if windowed:
        if not masked:
            span = window
        elif kind[K_att_chunked] != 0.0:
            full_chunks = floor(s / window)
            rest = s - full_chunks * window
            span = (full_chunks * window * (window + 1.0) + rest * (rest + 1.0)) / (2.0 * s)
        else:
            span = window - window * (window - 1.0) / (2.0 * s)
    causal = masked and not windowed
    if has_core:
        heads = b * a / t
        flops_core = 2.0 * b * s * span * a * (d_qk + d_v)
        if causal:
            flops_core *= SEC_FLASH_CAUSAL_SHARE     # the keys a causal query needs: half the matrix
        if flash:
            run = flops_core / (t * cp)
            if windowed and masked and kind[K_att_chunked] == 0.0:
                run *= c_sec_window_stretch(window, s)     # a sliding window's fixed work a query
            run /= c_sec_head_dim_share(d_qk if d_qk < d_v else d_v, rate[R_attn_h64])   # a head dim under 128
            if rate[R_attn_fbar] > 0.0 and masked and kind[K_att_chunked] == 0.0:
                # the rate was measured at stated lengths: this layer's tile efficiency against theirs
                calls = (cp + 1.0) / 2.0 if cp > 1.0 and cand[SC_cp_ring] != 0.0 else 1.0
                run *= rate[R_attn_fbar] / c_sec_tile_efficiency(s / 2.0, calls)
            core_f = run / attn_rate + n_split * kernel_s
            core_b = SEC_FLASH_BACKWARD_FLOPS * run / attn_rate + n_split * kernel_s
        else:
            keys = s * (n_split + 1.0) / (2.0 * n_split) if masked else span
            q_rows = s / cp / n_split
            scores = heads * (s / cp) * keys
            core_extra = 2.0 * b * s * keys * a * (d_qk + d_v) - flops_core   # the masked part that runs
            if core_extra < 0.0:
                core_extra = 0.0
            core_f = n_split * (c_sec_gemm(q_rows, keys, d_qk, heads, bc, bc, rate, 1)
                                + c_sec_gemm(q_rows, d_v, keys, heads, bc, bc, rate, 1))
            core_b = n_split * (c_sec_gemm(q_rows, d_qk, keys, heads, bc, bc, rate, 1)
                                + c_sec_gemm(keys, d_qk, q_rows, heads, bc, bc, rate, 1)
                                + c_sec_gemm(q_rows, keys, d_v, heads, bc, bc, rate, 1)
                                + c_sec_gemm(keys, d_v, q_rows, heads, bc, bc, rate, 1))
        out[SL_sw_attBMM] = core_f

    # gated DeltaNet recurrence
    n_v = kind[K_lin_n_v]
    d_k = kind[K_lin_d_k]
    dv_lin = kind[K_lin_d_v]
    if n_v * d_k * dv_lin != 0.0:
        flops_rec = b * s * n_v * (2.0 * 64.0 * (3.0 * d_k + 2.0 * dv_lin) + 6.0 * d_k * dv_lin)
        compute = flops_rec / (t * cp) / mm16_rate
        memory = bc * tokens * (n_qkv + a * dh) / t / hbm
        rec_f = (compute if compute > memory else memory) + n_split * kernel_s
        core_f += rec_f
        core_b += 2.0 * rec_f
        conv_bytes = 2.0 * bc * tokens * (n_qkv - a * dh) / t + 3.0 * bc * tokens * a * dh / t
    if mixer == SEC_MIXER_MAMBA:
        # Mamba-2's SSD scan (Dao & Gu 2024 §6): 2·Q·(N + P) + 4·N·P FLOPs a token and head forward
        chunk = kind[K_ssm_chunk]
        state = kind[K_lin_d_k]
        flops_rec = b * s * a * (2.0 * chunk * (state + dh) + 4.0 * state * dh)
        compute = flops_rec / (t * cp) / mm16_rate
        memory = bc * tokens * (ssm_conv + a + ssm_inner) / t / hbm
        rec_f = (compute if compute > memory else memory) + n_split * kernel_s
        core_f += rec_f
        core_b += 2.0 * rec_f
        conv_bytes = 2.0 * bc * tokens * ssm_conv / t + 3.0 * bc * tokens * ssm_inner / t
    elif mixer == SEC_MIXER_MAMBA1:
        # Mamba-1's selective scan: HBM-bound (Gu & Dao 2023 §3.3.2), 9 FLOPs a token, channel and state
        state = kind[K_lin_d_k]
        flops_rec = SEC_SELECTIVE_SCAN_FLOPS * b * s * ssm_inner * state
        rec_f = bc * tokens * (4.0 * ssm_inner / t + 2.0 * state) / hbm + n_split * kernel_s
        core_f += rec_f
        core_b += 2.0 * rec_f
        conv_bytes = 2.0 * bc * tokens * ssm_inner / t
    if core_f > 0.0:
        c_sec_note_core(note, ops, has_core, flash, flops_rec > 0.0, flops_core + core_extra + flops_rec, tokens, a,
                        n_kv, d_qk, d_v, scores, t, cp, bc, n_split, core_f, core_b)
    fw += core_f
    bw += core_b

    # FFN (ffn_f: the forward of the FFN matmuls, routed + shared experts or the dense pair; act_f the
    # forward of the activation pass, ffAct); a MoE layer's FFN is c_sec_moe_ffn
    sums[0] = fw
    sums[1] = bw
    sums[2] = bw_w
    sums[3] = gemm_f
    sums[4] = gemm_b
    if not has_ffn:
        pass
    elif moe:
        flops_ffn = c_sec_moe_ffn(model, smodel, cand, rate, tokens, h, n_ff, width, sums, note, ops, ffn_act)
        ffn_f = ffn_act[0]
        act_f = ffn_act[1]
    else:
        ffn_f = c_sec_ffn_pair(rows, width, h, n_ff, n_split, cand, rate, sums, note, ops, LO_mlp, SEC_SCOPE_FFN)
        unfused_passes = SEC_EAGER_SWIGLU_PASSES if eager and n_ff == 3.0 else n_ff
        act_f = c_sec_note_pass(note, ops, LO_mlp_act, SEC_SCOPE_FFN, unfused_passes * bc * tokens * width / t,
                                (2.0 if eager and n_ff == 3.0 else 1.0) * n_split, rate, sums)
        flops_ffn = 2.0 * b * s * h * n_ff * width

    # elementwise work, each class an op of its own (the oracle's order)
    n_norm = kind[K_n_normOp]
    per_norm = 2.0 * bc * x_sp
    norm_kernels = 1.0
    if eager and smodel[SM_rms_norm] != 0.0:
        per_norm = (SEC_EAGER_RMSNORM_FP32_BYTES + 4.0 * bc) * x_sp
        norm_kernels = SEC_EAGER_RMSNORM_KERNELS
        if autocast:
            # on the fp32 stream: no casts in or out
            per_norm = SEC_AUTOCAST_RMSNORM_BYTES * x_sp
            norm_kernels = SEC_AUTOCAST_RMSNORM_KERNELS
    ffn_norms = 1.0 if has_ffn and n_norm > 0.0 else 0.0
    attn_norm_bytes = (n_norm - ffn_norms) * per_norm
    attn_norm_kernels = (n_norm - ffn_norms) * norm_kernels
    if kind[K_n_qknorm] != 0.0 and mixer == SEC_MIXER_ATTENTION:
        attn_norm_bytes += 2.0 * bc * tokens * (a + n_kv) * dh / t
        attn_norm_kernels += 2.0
    ffn_scope = SEC_SCOPE_PRE if moe else SEC_SCOPE_FFN
    out[SL_sw_normOp] = (
        c_sec_note_pass(note, ops, LO_norm, SEC_SCOPE_ATTN, attn_norm_bytes, attn_norm_kernels * n_split, rate, sums)
        + c_sec_note_pass(note, ops, LO_norm, ffn_scope, ffn_norms * per_norm, ffn_norms * norm_kernels * n_split,
                          rate, sums))
    if eager and autocast and smodel[SM_rms_norm] != 0.0:
        # the norms' backward as autograd runs Transformers' RMSNorm graph, beyond the 1.5x priced above
        more_b = (SEC_AUTOCAST_RMSNORM_BACKWARD_BYTES - SEC_POINTWISE_BACKWARD_BYTES * SEC_AUTOCAST_RMSNORM_BYTES) * x_sp
        more_k = (SEC_AUTOCAST_RMSNORM_BACKWARD_KERNELS - SEC_AUTOCAST_RMSNORM_KERNELS) * n_split
        c_sec_note_two(note, ops, LO_norm, SEC_SCOPE_ATTN, 0.0, 0.0, (n_norm - ffn_norms) * more_b,
                       (n_norm - ffn_norms) * more_k, rate, sums, 0.0, 0.0)
        c_sec_note_two(note, ops, LO_norm, ffn_scope, 0.0, 0.0, ffn_norms * more_b, ffn_norms * more_k, rate, sums,
                       0.0, 0.0)
    if scores > 0.0:
        out[SL_sw_softmax] = c_sec_note_pass(note, ops, LO_attn_other, SEC_SCOPE_ATTN, 2.0 * bc * scores, n_split,
                                             rate, sums)
        if db > 0.0:
            out[SL_sw_dropout] = c_sec_note_pass(note, ops, LO_attn_other, SEC_SCOPE_ATTN, (2.0 * bc + db) * scores,
                                                 n_split, rate, sums)
        out[SL_sw_attBMM] += c_sec_note_pass(note, ops, LO_attn_other, SEC_SCOPE_ATTN,
                                             2.0 * bc * tokens * a * d_v / t, n_split, rate, sums)
    # rotary embedding of q and k: fused (read + write), eager (fp32 complex multiply), or Megatron-Core's
    # unfused fallback when cos and sin carry an attention factor
    if smodel[SM_rope] != 0.0 and has_core:
        if kind[K_is_mla] != 0.0:
            rotated = tokens * (a / t + 1.0) * kind[K_dhr]
        else:
            rotated = tokens * (a + n_kv) * dh / t
        if eager and autocast:
            # Transformers' apply_rotary_pos_emb with fp32 cos / sin, then autocast's casts for SDPA
            c_sec_note_pass(note, ops, LO_rope, SEC_SCOPE_ATTN, (6.0 * bc + SEC_AUTOCAST_ROPE_FP32_BYTES) * rotated,
                            2.0 * SEC_AUTOCAST_ROPE_KERNELS * n_split, rate, sums)
        elif eager:
            c_sec_note_pass(note, ops, LO_rope, SEC_SCOPE_ATTN, (2.0 * bc + SEC_EAGER_ROPE_FP32_BYTES) * rotated,
                            2.0 * SEC_EAGER_ROPE_KERNELS * n_split, rate, sums)
        elif smodel[SM_rope_scaled] != 0.0 and rate[R_rope_scale] == SEC_ROPE_UNFUSED:
            # an attention factor on cos and sin (YaRN): Megatron-Core's unfused fallback, q and k each
            c_sec_note_two(note, ops, LO_rope, SEC_SCOPE_ATTN, SEC_MEGATRON_ROPE_PASSES_F * bc * rotated,
                           2.0 * SEC_MEGATRON_ROPE_KERNELS_F * n_split, SEC_MEGATRON_ROPE_PASSES_B * bc * rotated,
                           2.0 * SEC_MEGATRON_ROPE_KERNELS_B * n_split, rate, sums, 0.0, 0.0)
        else:
            c_sec_note_pass(note, ops, LO_rope, SEC_SCOPE_ATTN, 2.0 * bc * rotated, 2.0 * n_split, rate, sums)
    if rate[R_attn_copies] != 0.0 and has_core and kind[K_is_mla] == 0.0:
        # repeat_kv's K/V copies for every query head (GQA) and the output made contiguous again
        copied = 2.0 * bc * tokens * a * dh / t
        copies = 1.0
        if n_kv < a:
            copied += bc * tokens * (2.0 * n_kv * dh + 2.0 * a * dh) / t
            copies += 2.0
        c_sec_note_pass(note, ops, LO_attn_other, SEC_SCOPE_ATTN, copied, copies * n_split, rate, sums)
    if conv_bytes > 0.0:
        c_sec_note_pass(note, ops, LO_attn_other, SEC_SCOPE_ATTN, conv_bytes, 2.0 * n_split, rate, sums)
    residual = (3.0 * bc + db) * x_sp
    if autocast:
        # the fp32 stream plus a 16-bit sub-block output, and its backward; then each projection's own cast
        # of the fp32 normed input (Q, K, V three, a gated MLP two, another mixer or FFN one), cast back and
        # summed in backward (the oracle's comments)
        fp32_f = (SEC_AUTOCAST_RESIDUAL_FP32_BYTES + bc + db) * x_sp
        fp32_b = (SEC_AUTOCAST_RESIDUAL_BACKWARD_FP32_BYTES + bc) * x_sp
        if mixer != SEC_MIXER_NONE:
            c_sec_note_two(note, ops, LO_residual, SEC_SCOPE_ATTN, fp32_f, n_split, fp32_b, 2.0 * n_split, rate,
                           sums, 0.0, 0.0)
        if has_ffn:
            c_sec_note_two(note, ops, LO_residual, SEC_SCOPE_FFN, fp32_f, n_split, fp32_b, 2.0 * n_split, rate,
                           sums, 0.0, 0.0)
        casts_att = 0.0
        if mixer != SEC_MIXER_NONE:
            casts_att = 3.0 if mixer == SEC_MIXER_ATTENTION and kind[K_is_mla] == 0.0 and has_core else 1.0
        casts_ffn = 0.0
        if has_ffn:
            casts_ffn = 2.0 if not moe and n_ff == 3.0 else 1.0
        for i in range(2):
            scope = SEC_SCOPE_ATTN if i == 0 else SEC_SCOPE_FFN
            casts = casts_att if i == 0 else casts_ffn
            if casts > 0.0:
                c_sec_note_two(note, ops, LO_cast, scope, casts * (SEC_AUTOCAST_FP32_BYTES + bc) * x_sp,
                               casts * n_split,
                               (casts * (SEC_AUTOCAST_FP32_BYTES + bc) + (casts - 1.0) * 3.0 * SEC_AUTOCAST_FP32_BYTES)
                               * x_sp, (2.0 * casts - 1.0) * n_split, rate, sums, 0.0, 0.0)
    else:
        if mixer != SEC_MIXER_NONE:
            c_sec_note_pass(note, ops, LO_residual, SEC_SCOPE_ATTN, residual, n_split, rate, sums)
        if has_ffn:
            c_sec_note_pass(note, ops, LO_residual, SEC_SCOPE_FFN, residual, n_split, rate, sums)
    out[SL_sw_ffAct] = act_f
    fw = sums[0]
    bw = sums[1]
    bw_w = sums[2]
    gemm_f = sums[3]
    gemm_b = sums[4]

    # tensor parallelism
    if t > 1.0:
        full = b * s * h * bc / cp
        if sp > 1.0:
            gather = c_sec_collective(SEC_GATHER_OR_SCATTER, full, t, 1.0, rate)
            tp_pass = 2.0 * parts * gather
            out[SL_sw_gather] = parts * gather
        else:
            tp_pass = parts * c_sec_collective(SEC_ALL_REDUCE, full, t, 1.0, rate)
        out[SL_tp_f] = tp_pass
        out[SL_tp_b] = tp_pass

    # context parallelism
    if cp > 1.0 and has_core:
        if cand[SC_cp_ring] != 0.0:
            kv = b * (s / cp) * n_kv * (d_qk + d_v) * bc / t
            step = c_sec_collective(SEC_SEND_RECV, kv, cp, t, rate)
            out[SL_cp_f] = (cp - 1.0) * step
            out[SL_cp_b] = 2.0 * (cp - 1.0) * step
            # the P2P ring's merge and buffer passes (seconds_layer.py _ring_merge_passes says which)
            q_el = tokens * a * d_v / t
            kv_el = tokens * n_kv * (d_qk + d_v) / t
            steps_acc = 2.0 + 3.0 * (cp - 1.0)
            f_ring = c_sec_pass(2.0 * kv_el * bc + q_el * bc + cp * (3.0 * bc + 2.0 * 4.0) * q_el,
                                (2.0 + 4.0 * cp) * n_split, rate)
            b_ring = c_sec_pass(2.0 * kv_el * bc + steps_acc * bc * (q_el + kv_el) + cp * 2.0 * kv_el * bc,
                                (1.0 + 3.0 * cp) * n_split, rate)
            out[SL_sw_attBMM] += f_ring
            fw += f_ring
            bw += b_ring
            c_sec_note(note, ops, LO_attn_core, SEC_SCOPE_ATTN, 0.0, 0.0, (2.0 + 4.0 * cp) * n_split, f_ring, 0.0,
                       0.0, (1.0 + 3.0 * cp) * n_split, b_ring)
        else:
            qkv = tokens * (a * d_qk + n_kv * (d_qk + d_v)) * bc / t
            o = tokens * a * d_v * bc / t
            ulysses = (c_sec_collective(SEC_ALL_TO_ALL, qkv, cp, t, rate)
                       + c_sec_collective(SEC_ALL_TO_ALL, o, cp, t, rate))
            out[SL_cp_f] = ulysses
            out[SL_cp_b] = ulysses

    # expert parallelism: its dispatches and combines, each way (the oracle's _expert_alltoalls)
    if moe and ep > 1.0:
        c_sec_expert_alltoalls(cand, model, tokens / sp, h, bc, ep, t_exp, rate, out)

    p_dense = (skind[SK_p_nonexp] + skind[SK_p_shared]) / t
    p_expert = skind[SK_p_routed] / (ep * t_exp)
    if autocast:
        # each forward casts every fp32 weight to 16 bits, one kernel a weight; the backward casts each 16-bit
        # weight gradient back to fp32 (the oracle's comment)
        weights = (4.0 if mixer != SEC_MIXER_NONE else 0.0) + (n_ff if has_ffn else 0.0)
        if moe:
            weights += n_ff * model[M_n_exp] / ep
        moved = (p_dense + p_expert) * (SEC_AUTOCAST_FP32_BYTES + bc)
        cast_f = c_sec_pass(moved, weights, rate)
        cast_b = c_sec_pass(moved, weights, rate)
        fw += cast_f
        bw_w += cast_b
        c_sec_note(note, ops, LO_cast, SEC_SCOPE_ATTN, 0.0, moved, weights, cast_f, 0.0, moved, weights, cast_b)
    if rate[R_grad_acc_pass] != 0.0:
        # no gradient-accumulation fusion: a separate add of the 16-bit gradient into the main one
        moved = (p_dense + p_expert) * (bc + 2.0 * bg)
        added = c_sec_pass(moved, n_split, rate)
        bw_w += added
        c_sec_note(note, ops, LO_grad_acc, SEC_SCOPE_FFN, 0.0, 0.0, 0.0, 0.0, 0.0, moved, n_split, added)
    # the host's launches: a pass takes at least that long ("launch")
    c_sec_note_launch(note, ops, fw, bw + bw_w, waits)
    fw += waits[0]
    bw += waits[1]
    if ops != NULL:
        ops[LO_tp_comm * LF_COUNT + LF_time_f] = out[SL_tp_f]
        ops[LO_tp_comm * LF_COUNT + LF_time_b] = out[SL_tp_b]
        ops[LO_cp_comm * LF_COUNT + LF_time_f] = out[SL_cp_f]
        ops[LO_cp_comm * LF_COUNT + LF_time_b] = out[SL_cp_b]
        ops[LO_ep_comm * LF_COUNT + LF_time_f] = out[SL_ep_f]
        ops[LO_ep_comm * LF_COUNT + LF_time_b] = out[SL_ep_b]
    out[SL_fw] = fw
    out[SL_bw] = bw
    out[SL_bw_w] = bw_w
    out[SL_gemm_f] = gemm_f
    out[SL_gemm_b] = gemm_b
    out[SL_core_f] = core_f
    out[SL_core_b] = core_b
    out[SL_att_f] = f_att + core_f
    out[SL_att_b] = d_att + w_grad + core_b
    out[SL_p_dense] = p_dense
    out[SL_p_expert] = p_expert
    out[SL_flops_f] = flops_att + flops_core + flops_rec + flops_ffn
    out[SL_flops_core] = flops_core
    out[SL_flops_core_extra] = core_extra
    out[SL_att_mm_f] = f_att
    out[SL_ffn_mm_f] = ffn_f
    out[SL_att_mm_flops] = flops_att
    out[SL_ffn_mm_flops] = flops_ffn


def seconds_layer_times(const double[:, ::1] kinds, const double[:, ::1] skinds, const double[::1] model,
                        const double[::1] smodel, const double[::1] cand, const double[::1] rate,
                        double[:, ::1] out):
    """One layer of each kind, per micro-batch and device (K x SECONDS_LAYER_FIELDS); see the oracle."""
    cdef Py_ssize_t n_kinds = kinds.shape[0], k
    cdef bint ok
    c_sec_check_rows("kinds", n_kinds, K_COUNT, kinds.shape[0], kinds.shape[1])
    c_sec_check_rows("skinds", n_kinds, SK_COUNT, skinds.shape[0], skinds.shape[1])
    c_sec_check_len("model", M_COUNT, model.shape[0])
    c_sec_check_len("smodel", SM_COUNT, smodel.shape[0])
    c_sec_check_len("cand", SC_COUNT, cand.shape[0])
    c_sec_check_len("rate", R_COUNT, rate.shape[0])
    c_sec_check_rows("out", n_kinds, SL_COUNT, out.shape[0], out.shape[1])
    with nogil:
        ok = c_sec_cand_ok(&cand[0], &rate[0])
        for k in range(n_kinds):
            if ok:
                c_sec_layer(&kinds[k, 0], &skinds[k, 0], &model[0], &smodel[0], &cand[0], &rate[0], &out[k, 0], NULL)
            else:
                c_sec_fill(&out[k, 0], SL_COUNT, NAN)


def seconds_layer_ops(const double[:, ::1] kinds, const double[:, ::1] skinds, const double[::1] model,
                      const double[::1] smodel, const double[::1] cand, const double[::1] rate, Py_ssize_t kind,
                      double[:, ::1] out):
    """One layer of kind `kind`, op by op (LAYER_OP_NAMES x LAYER_OP_FIELDS); see the oracle."""
    cdef Py_ssize_t n_kinds = kinds.shape[0]
    cdef double layer[SL_COUNT]
    cdef bint priced = False
    c_sec_check_rows("kinds", n_kinds, K_COUNT, kinds.shape[0], kinds.shape[1])
    c_sec_check_rows("skinds", n_kinds, SK_COUNT, skinds.shape[0], skinds.shape[1])
    c_sec_check_len("model", M_COUNT, model.shape[0])
    c_sec_check_len("smodel", SM_COUNT, smodel.shape[0])
    c_sec_check_len("cand", SC_COUNT, cand.shape[0])
    c_sec_check_len("rate", R_COUNT, rate.shape[0])
    c_sec_check_rows("out", LO_COUNT, LF_COUNT, out.shape[0], out.shape[1])
    with nogil:
        c_sec_fill(&out[0, 0], LO_COUNT * LF_COUNT, 0.0)
        if 0 <= kind < n_kinds and c_sec_cand_ok(&cand[0], &rate[0]):
            c_sec_layer(&kinds[kind, 0], &skinds[kind, 0], &model[0], &smodel[0], &cand[0], &rate[0], layer,
                        &out[0, 0])
            priced = layer[SL_fw] == layer[SL_fw]
        if not priced:
            c_sec_fill(&out[0, 0], LO_COUNT * LF_COUNT, NAN)
