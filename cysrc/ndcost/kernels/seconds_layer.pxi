# Seconds mode, one layer (twin of ndcost/kernels/seconds_layer.py): forward, backward and
# weight-gradient time of one layer of each kind, its raw communication per pass, the forward time of
# each recompute switch's ops, its parameters and model FLOPs. Needs kernels/columns.pxi,
# kernels/seconds_ops.pxi and kernels/seconds_comm.pxi included before it.

from libc.math cimport floor

# the kind's token mixer (K_mixer): attention (full, MLA, gated DeltaNet), Mamba-2, none (an MLP block)
cdef double SEC_MIXER_ATTENTION = 0.0
cdef double SEC_MIXER_MAMBA = 1.0
cdef double SEC_MIXER_NONE = 2.0
cdef double SEC_MIXER_MAMBA1 = 3.0
# Mamba-1's selective scan: FLOPs per token, channel and state (state-spaces/mamba#110)
cdef double SEC_SELECTIVE_SCAN_FLOPS = 9.0
cdef double SEC_FLASH_BACKWARD_FLOPS = 2.5
cdef double SEC_FLASH_CAUSAL_SHARE = 0.5
cdef double SEC_EAGER_RMSNORM_FP32_BYTES = 28.0
cdef double SEC_EAGER_RMSNORM_KERNELS = 8.0
cdef double SEC_EAGER_ROPE_FP32_BYTES = 16.0
cdef double SEC_EAGER_ROPE_KERNELS = 3.0
cdef double SEC_EAGER_SWIGLU_PASSES = 5.0


cdef inline void c_sec_layer(const double* kind, const double* skind, const double* model,
                             const double* smodel, const double* cand, const double* rate,
                             double* out) noexcept nogil:
    # One layer of a kind, per micro-batch and device (the oracle's _layer, step for step), on the
    # kind's hidden size (sub_h) and its own tokens per sample when it states them (seq_tokens > 0).
    cdef double b = cand[SC_b], t = cand[SC_t], cp = cand[SC_cp], sp = cand[SC_sp]
    cdef double s = kind[K_seq_tokens] if kind[K_seq_tokens] > 0.0 else cand[SC_s]
    cdef double ep = cand[SC_ep], t_exp = cand[SC_t_exp], n_split = cand[SC_seq_split]
    cdef double bc = cand[SC_bytes_c], bm = cand[SC_bytes_mm], bg = cand[SC_bytes_grad]
    cdef double db = cand[SC_dropout_bytes]
    cdef bint flash = cand[SC_flash] != 0.0
    cdef double mm16_rate = rate[R_mm16_eff] * rate[R_peak_attn]
    cdef bint eager = rate[R_ew_eager] != 0.0
    cdef double attn_rate = rate[R_attn_eff] * rate[R_peak_attn]
    cdef double hbm = rate[R_hbm_eff] * rate[R_hbm_bw]
    cdef double kernel_s = rate[R_kernel_s]
    cdef double h = kind[K_sub_h], a = kind[K_att_a]
    cdef double n_kv, dh, gate, d_qk, d_v, tokens, rows, x_sp, n_ff, width, n_qkv
    cdef double q_el, kv_el, steps_acc, f_ring, b_ring
    cdef bint moe, has_core
    cdef double g3[3]
    cdef double fw = 0.0, bw = 0.0, bw_w = 0.0, gemm_f = 0.0, gemm_b = 0.0, p_dense, p_expert
    cdef double w_att, extra, f_att, d_att, w_grad, up_share, flops_att
    cdef double core_f = 0.0, core_b = 0.0, flops_core = 0.0, scores = 0.0, core_extra = 0.0
    cdef double heads, run, keys, q_rows, window, span, full_chunks, rest
    cdef bint windowed, causal, masked
    cdef double flops_rec = 0.0, n_v, d_k, dv_lin, conv_bytes = 0.0, compute, memory, rec_f
    cdef double flops_ffn = 0.0, act_bytes = 0.0, other_bytes = 0.0, other_kernels = 2.0, ffn_f = 0.0
    cdef double sums[5]
    cdef double topk, n_exp, cap, tok_moe, slots, local, per, wide, e_f, e_d, e_w, shared = 0.0
    cdef double norm_bytes, norm_kernels, softmax_bytes, dropout_bytes, permute_bytes, act_kernels
    cdef double ew_bytes, ew_kernels, full, gather, tp_pass, kv, step, qkv, o, ulysses, routed, a2a, dispatch
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
    other_kernels = parts
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

    # attention projections; Mamba-2's in_proj (h -> z, x, B, C, dt) and out_proj (d_inner -> h)
    if mixer == SEC_MIXER_MAMBA:
        ssm_inner = a * dh
        ssm_conv = ssm_inner + 2.0 * n_kv * kind[K_lin_d_k]
        n_in = ssm_inner + ssm_conv + a
        c_sec_mm3(rows, n_in / t, h, n_split, cand, rate, g3, 0, 1)
        f_att = g3[0]
        d_att = g3[1]
        w_grad = g3[2]
        c_sec_mm3(rows, h, ssm_inner / t, n_split, cand, rate, g3, 0, 2)
        f_att = f_att + g3[0]
        d_att = d_att + g3[1]
        w_grad = w_grad + g3[2]
        flops_att = 2.0 * b * s * h * (n_in + ssm_inner)
    elif mixer == SEC_MIXER_MAMBA1:
        # Mamba-1: in_proj h -> [x, z], x_proj d_inner -> dt_rank + 2N, dt_proj dt_rank -> d_inner, out_proj
        ssm_inner = a
        state = kind[K_lin_d_k]
        c_sec_mm3(rows, 2.0 * ssm_inner / t, h, n_split, cand, rate, g3, 0, 1)
        f_att = g3[0]
        d_att = g3[1]
        w_grad = g3[2]
        c_sec_mm3(rows, n_kv + 2.0 * state, ssm_inner / t, n_split, cand, rate, g3, 0, 0)
        f_att = f_att + g3[0]
        d_att = d_att + g3[1]
        w_grad = w_grad + g3[2]
        c_sec_mm3(rows, ssm_inner / t, n_kv, n_split, cand, rate, g3, 0, 0)
        f_att = f_att + g3[0]
        d_att = d_att + g3[1]
        w_grad = w_grad + g3[2]
        c_sec_mm3(rows, h, ssm_inner / t, n_split, cand, rate, g3, 0, 2)
        f_att = f_att + g3[0]
        d_att = d_att + g3[1]
        w_grad = w_grad + g3[2]
        flops_att = 2.0 * b * s * (3.0 * h * ssm_inner + 2.0 * ssm_inner * (n_kv + state))
    elif mixer == SEC_MIXER_NONE:
        pass
    elif kind[K_is_mla] != 0.0:
        w_att = kind[K_mla_w]
        c_sec_mm3(rows, w_att / (h * t), h, n_split, cand, rate, g3, 0, 1)
        extra = 4.0 * n_split * kernel_s
        f_att = g3[0] + extra
        d_att = g3[1] + extra
        w_grad = g3[2] + extra
        up_share = kind[K_mla_up] / w_att if w_att > 0.0 else 0.0
        out[SL_sw_attUp] = up_share * f_att
        flops_att = 2.0 * b * s * w_att
        out[SL_flops_up] = 2.0 * b * s * kind[K_mla_up]
    else:
        c_sec_mm3(rows, n_qkv / t, h, n_split, cand, rate, g3, 0, 1)
        f_att = g3[0]
        d_att = g3[1]
        w_grad = g3[2]
        c_sec_mm3(rows, h, a * dh / t, n_split, cand, rate, g3, 0, 2)
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
    fw += core_f
    bw += core_b

    # FFN (ffn_f: the forward of the FFN matmuls, routed + shared experts or the dense pair)
    sums[0] = fw
    sums[1] = bw
    sums[2] = bw_w
    sums[3] = gemm_f
    sums[4] = gemm_b
    if not has_ffn:
        pass
    elif moe:
        topk = model[M_n_chosen]
        n_exp = model[M_n_exp]
        cap = cand[SC_moe_imb] if cand[SC_dropless] != 0.0 else cand[SC_cap_fact]
        tok_moe = tokens / sp
        slots = tokens * topk * cap
        local = n_exp / ep
        c_sec_mm3(tok_moe / n_split, n_exp, h, n_split, cand, rate, g3, 1, 0)
        c_sec_add_gemm(sums, g3[0], g3[1], g3[2])
        per = slots / local / n_split if local > 0.0 else 0.0
        wide = (n_ff - 1.0) * width / t_exp
        e_f = n_split * (c_sec_gemm(per, wide, h, local, bm, bc, rate, 0)
                         + c_sec_gemm(per, h, width / t_exp, local, bm, bc, rate, 0))
        e_d = n_split * (c_sec_gemm(per, h, wide, local, bm, bc, rate, 0)
                         + c_sec_gemm(per, width / t_exp, h, local, bm, bc, rate, 0))
        e_w = n_split * (c_sec_gemm(h, wide, per, local, bm, 2.0 * bg, rate, 0)
                         + c_sec_gemm(width / t_exp, h, per, local, bm, 2.0 * bg, rate, 0))
        e_f += n_split * (c_sec_cast(per * local * h, cand, rate) + c_sec_cast(per * local * width / t_exp, cand, rate))
        e_f += rate[R_f8_w_mb] * local * c_sec_cast(h * (wide + width / t_exp), cand, rate)
        e_d += n_split * (c_sec_cast(per * local * wide, cand, rate) + c_sec_cast(per * local * h, cand, rate))
        c_sec_add_gemm(sums, e_f, e_d, e_w)
        ffn_f = e_f
        act_bytes += n_ff * bc * slots * width / t_exp
        shared = smodel[SM_shared_width]
        if shared > 0.0:
            ffn_f += c_sec_ffn_pair(rows, shared, h, n_ff, n_split, cand, rate, sums)
            act_bytes += n_ff * bc * tokens * shared / t
        other_bytes += 2.0 * bc * tok_moe * h * (1.0 + topk * cap) + 2.0 * 4.0 * tok_moe * n_exp
        other_kernels += 4.0
        flops_ffn = 2.0 * b * s * h * (topk * n_ff * width + n_exp + n_ff * shared)
    else:
        ffn_f = c_sec_ffn_pair(rows, width, h, n_ff, n_split, cand, rate, sums)
        act_bytes = (SEC_EAGER_SWIGLU_PASSES if eager and n_ff == 3.0 else n_ff) * bc * tokens * width / t
        if eager and n_ff == 3.0:
            other_kernels += 1.0
        flops_ffn = 2.0 * b * s * h * n_ff * width
    fw = sums[0]
    bw = sums[1]
    bw_w = sums[2]
    gemm_f = sums[3]
    gemm_b = sums[4]

    # elementwise work
    n_norm = kind[K_n_normOp]
    norm_bytes = n_norm * 2.0 * bc * x_sp
    norm_kernels = n_norm
    if eager and smodel[SM_rms_norm] != 0.0:
        norm_bytes = n_norm * (SEC_EAGER_RMSNORM_FP32_BYTES + 4.0 * bc) * x_sp
        norm_kernels = n_norm * SEC_EAGER_RMSNORM_KERNELS
    if kind[K_n_qknorm] != 0.0 and mixer == SEC_MIXER_ATTENTION:
        norm_bytes += 2.0 * bc * tokens * (a + n_kv) * dh / t
        norm_kernels += 2.0
    softmax_bytes = 0.0
    dropout_bytes = 0.0
    permute_bytes = 0.0
    if scores > 0.0:
        softmax_bytes = 2.0 * bc * scores
        if db > 0.0:
            dropout_bytes = (2.0 * bc + db) * scores
        permute_bytes = 2.0 * bc * tokens * a * d_v / t
    # rotary embedding of q and k: fused (read + write) or eager (fp32 complex multiply)
    if smodel[SM_rope] != 0.0 and has_core:
        if kind[K_is_mla] != 0.0:
            rotated = tokens * (a / t + 1.0) * kind[K_dhr]
        else:
            rotated = tokens * (a + n_kv) * dh / t
        if eager:
            other_bytes += (2.0 * bc + SEC_EAGER_ROPE_FP32_BYTES) * rotated
            other_kernels += 2.0 * SEC_EAGER_ROPE_KERNELS
        else:
            other_bytes += 2.0 * bc * rotated
            other_kernels += 2.0
    if rate[R_attn_copies] != 0.0 and has_core and kind[K_is_mla] == 0.0:
        # repeat_kv's K/V copies for every query head (GQA) and the output made contiguous again
        if n_kv < a:
            other_bytes += bc * tokens * (2.0 * n_kv * dh + 2.0 * a * dh) / t
            other_kernels += 2.0
        other_bytes += 2.0 * bc * tokens * a * dh / t
        other_kernels += 1.0
    other_bytes += parts * (3.0 * bc + db) * x_sp + conv_bytes
    if conv_bytes > 0.0:
        other_kernels += 2.0
    act_kernels = 0.0
    if has_ffn:
        act_kernels = 1.0 + (1.0 if moe and smodel[SM_shared_width] > 0.0 else 0.0)
    out[SL_sw_ffAct] = c_sec_pass(act_bytes, act_kernels * n_split, rate)
    out[SL_sw_normOp] = c_sec_pass(norm_bytes, norm_kernels * n_split, rate)
    out[SL_sw_softmax] = c_sec_pass(softmax_bytes, n_split, rate)
    out[SL_sw_dropout] = c_sec_pass(dropout_bytes, n_split, rate)
    out[SL_sw_attBMM] += c_sec_pass(permute_bytes, n_split, rate)
    ew_bytes = act_bytes + norm_bytes + softmax_bytes + dropout_bytes + permute_bytes + other_bytes
    ew_kernels = act_kernels + norm_kernels + other_kernels
    if softmax_bytes > 0.0:
        ew_kernels += 1.0
    if dropout_bytes > 0.0:
        ew_kernels += 1.0
    if permute_bytes > 0.0:
        ew_kernels += 1.0
    ew_kernels *= n_split
    fw += c_sec_pass(ew_bytes, ew_kernels, rate)
    bw += c_sec_pass(SEC_POINTWISE_BACKWARD_BYTES * ew_bytes, ew_kernels, rate)

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
        else:
            qkv = tokens * (a * d_qk + n_kv * (d_qk + d_v)) * bc / t
            o = tokens * a * d_v * bc / t
            ulysses = (c_sec_collective(SEC_ALL_TO_ALL, qkv, cp, t, rate)
                       + c_sec_collective(SEC_ALL_TO_ALL, o, cp, t, rate))
            out[SL_cp_f] = ulysses
            out[SL_cp_b] = ulysses

    # expert parallelism: a dispatch (disp_b bytes an element) and a combine (16-bit), each way
    if moe and ep > 1.0:
        cap = cand[SC_moe_imb] if cand[SC_dropless] != 0.0 else cand[SC_cap_fact]
        routed = (tokens / sp) * cap
        dispatch = c_sec_exchange(cand[SC_ep_disp], routed, h, model[M_n_chosen], model[M_n_exp], ep, t_exp,
                                  cand[SC_ep_nodes], cand[SC_disp_b], rate)
        a2a = dispatch + c_sec_exchange(cand[SC_ep_disp], routed, h, model[M_n_chosen], model[M_n_exp], ep, t_exp,
                                        cand[SC_ep_nodes], bc, rate)
        out[SL_ep_f] = a2a
        out[SL_ep_b] = a2a
        out[SL_ep_d] = dispatch

    p_dense = (skind[SK_p_nonexp] + skind[SK_p_shared]) / t
    p_expert = skind[SK_p_routed] / (ep * t_exp)
    if rate[R_grad_acc_pass] != 0.0:
        # no gradient-accumulation fusion: a separate add of the 16-bit gradient into the main one
        bw_w += c_sec_pass((p_dense + p_expert) * (bc + 2.0 * bg), n_split, rate)
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
                c_sec_layer(&kinds[k, 0], &skinds[k, 0], &model[0], &smodel[0], &cand[0], &rate[0], &out[k, 0])
            else:
                c_sec_fill(&out[k, 0], SL_COUNT, NAN)
