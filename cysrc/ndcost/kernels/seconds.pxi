# Seconds mode (twin of ndcost/_kpy/seconds.py): a step priced from the device's rates and the
# links each collective crosses. Every formula, constant and source is stated once, in the oracle;
# this file repeats each computation in the oracle's order so that the two agree to rounding.
# Needs kernels/columns.pxi (the ABI enums) included before it.

from libc.math cimport floor
from libc.stdlib cimport malloc, free

# Collective codes of seconds_collective and the schedule codes of SCHEDULES.
cdef enum:
    SEC_ALL_REDUCE = 0
    SEC_GATHER_OR_SCATTER = 1
    SEC_ALL_TO_ALL = 2
    SEC_SEND_RECV = 3
    SEC_1F1B = 0
    SEC_INTERLEAVED = 1
    SEC_ZERO_BUBBLE_V = 2
    SEC_GPIPE = 3
    SEC_SEQ1F1B = 4
    SEC_GATHER_BIT = 5

cdef double SEC_POINTWISE_BACKWARD_BYTES = 1.5
# the kind's token mixer (K_mixer): attention (full, MLA, gated DeltaNet), Mamba-2, none (an MLP block)
cdef double SEC_MIXER_ATTENTION = 0.0
cdef double SEC_MIXER_MAMBA = 1.0
cdef double SEC_MIXER_NONE = 2.0
cdef double SEC_MIXER_MAMBA1 = 3.0
# Mamba-1's selective scan: FLOPs per token, channel and state (state-spaces/mamba#110)
cdef double SEC_SELECTIVE_SCAN_FLOPS = 9.0
cdef double SEC_FLASH_BACKWARD_FLOPS = 2.5
cdef double SEC_FLASH_CAUSAL_SHARE = 0.5
cdef double SEC_CE_FORWARD_BYTES = 20.0
cdef double SEC_CE_BACKWARD_BYTES = 6.0
cdef double SEC_SOFTCAP_BYTES = 4.0            # Gemma 2's logit soft-capping: one fused pass, read + write
cdef double SEC_CE_FORWARD_KERNELS = 4.0
cdef double SEC_CE_ALL_REDUCES = 3.0
cdef double SEC_CE_REDUCE_BYTES = 4.0
cdef double SEC_EAGER_RMSNORM_FP32_BYTES = 28.0
cdef double SEC_EAGER_RMSNORM_KERNELS = 8.0
cdef double SEC_EAGER_ROPE_FP32_BYTES = 16.0
cdef double SEC_EAGER_ROPE_KERNELS = 3.0
cdef double SEC_EAGER_SWIGLU_PASSES = 5.0


cdef inline double c_sec_gemm(double m, double n, double k, double batch, double in_bytes,
                              double out_bytes, const double* rate, bint sixteen) noexcept nogil:
    # One (batched) GEMM kernel: roofline with expected wave quantization (wave_tail idle waves)
    # + kernel_s; 0 when empty. `sixteen`: at the 16-bit rate (mm16_eff x peak_attn).
    cdef double flops, moved, waves, compute, memory, peak
    if m <= 0.0 or n <= 0.0 or k <= 0.0 or batch <= 0.0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    moved = batch * (in_bytes * (m * k + k * n) + out_bytes * m * n)
    waves = batch * m * n / rate[R_wave]
    if sixteen:
        peak = rate[R_mm16_eff] * rate[R_peak_attn]
    else:
        peak = rate[R_mm_eff] * rate[R_peak_mm]
    compute = flops / peak * (1.0 + rate[R_wave_tail] / waves)
    memory = moved / (rate[R_hbm_eff] * rate[R_hbm_bw])
    return (compute if compute > memory else memory) + rate[R_kernel_s]


cdef inline double c_sec_pass(double moved, double kernels, const double* rate) noexcept nogil:
    # Elementwise work: bytes over the achievable HBM bandwidth plus kernel_s per kernel.
    if moved <= 0.0:
        return 0.0
    return moved / (rate[R_hbm_eff] * rate[R_hbm_bw]) + kernels * rate[R_kernel_s]


cdef inline double c_sec_cast(double elements, const double* cand, const double* rate) noexcept nogil:
    # Casting `elements` 16-bit values to fp8 (f8_cast_b bytes each, f8_cast_k kernels); 0 unless fp8.
    if cand[SC_bytes_mm] != 1.0 or elements <= 0.0:
        return 0.0
    return c_sec_pass(rate[R_f8_cast_b] * elements, rate[R_f8_cast_k], rate)


cdef inline void c_sec_fill(double* out, Py_ssize_t count, double value) noexcept nogil:
    # out[0:count] = value (a row zeroed before its sums, or NaN for a row that is not priced).
    cdef Py_ssize_t i
    for i in range(count):
        out[i] = value


cdef inline double c_sec_ring(double steps, double share, double moved, double bw, double lat) noexcept nogil:
    return steps * lat + share * moved / bw


cdef inline double c_sec_collective(long long op, double moved, double n, double stride,
                                    const double* rate) noexcept nogil:
    # Alpha-beta ring in one node; hierarchical (intra-node, scale-out on B/g, intra-node) across.
    cdef double dpn, bw_in, lat_in, bw_out, lat_out, g, nodes, inner, outer
    if not stride >= 1.0:
        return NAN
    if n <= 1.0 or moved <= 0.0:
        return 0.0
    dpn = rate[R_dpn]
    bw_in = rate[R_intra_bw] * rate[R_intra_eff]
    lat_in = rate[R_intra_lat]
    bw_out = rate[R_inter_bw] * rate[R_inter_eff]
    lat_out = rate[R_inter_lat]
    if n * stride <= dpn:
        if op == SEC_ALL_REDUCE:
            return c_sec_ring(2.0 * (n - 1.0), 2.0 * (n - 1.0) / n, moved, bw_in, lat_in)
        if op == SEC_SEND_RECV:
            return c_sec_ring(1.0, 1.0, moved, bw_in, lat_in)
        return c_sec_ring(n - 1.0, (n - 1.0) / n, moved, bw_in, lat_in)
    g = floor(dpn / stride) if stride < dpn else 1.0
    if g < 1.0:
        g = 1.0
    if g > n:
        g = n
    nodes = n / g
    if op == SEC_SEND_RECV:
        return c_sec_ring(1.0, 1.0, moved, bw_out, lat_out)
    if op == SEC_ALL_TO_ALL:
        inner = c_sec_ring(g - 1.0, (g - 1.0) / n, moved, bw_in, lat_in)
        outer = c_sec_ring(n - g, (n - g) / n, moved, bw_out, lat_out)
        return inner if inner > outer else outer
    inner = c_sec_ring(g - 1.0, (g - 1.0) / g, moved, bw_in, lat_in)
    outer = c_sec_ring(nodes - 1.0, (nodes - 1.0) / nodes, moved / g, bw_out, lat_out)
    if op == SEC_ALL_REDUCE:
        return 2.0 * (inner + outer)
    return inner + outer


cdef inline double c_sec_exposed(double comm, double window, double share) noexcept nogil:
    cdef double hidden = share * (window if window < comm else comm)
    return comm - hidden


cdef inline double c_sec_exposed_tail(double comm, double window, double share, double layers) noexcept nogil:
    cdef double exposed = c_sec_exposed(comm, window, share)
    cdef double floor_ = comm / layers if layers > 1.0 else comm
    return exposed if exposed > floor_ else floor_


cdef inline bint c_sec_cand_ok(const double* cand, const double* rate) noexcept nogil:
    if not (cand[SC_b] >= 1.0 and cand[SC_s] >= 1.0 and cand[SC_t] >= 1.0 and cand[SC_sp] >= 1.0
            and cand[SC_cp] >= 1.0 and cand[SC_ep] >= 1.0 and cand[SC_t_exp] >= 1.0 and cand[SC_d] >= 1.0
            and cand[SC_edp] >= 1.0 and cand[SC_p] >= 1.0 and cand[SC_vp] >= 1.0 and cand[SC_m] >= 1.0
            and cand[SC_seq_split] >= 1.0 and cand[SC_bytes_c] >= 1.0 and cand[SC_bytes_mm] >= 1.0):
        return False
    if not (rate[R_peak_mm] > 0.0 and rate[R_peak_attn] > 0.0 and rate[R_mm_eff] > 0.0
            and rate[R_attn_eff] > 0.0 and rate[R_hbm_bw] > 0.0 and rate[R_hbm_eff] > 0.0
            and rate[R_intra_bw] > 0.0 and rate[R_intra_eff] > 0.0 and rate[R_inter_bw] > 0.0
            and rate[R_inter_eff] > 0.0 and rate[R_dpn] > 0.0 and rate[R_wave] > 0.0):
        return False
    return True


cdef inline void c_sec_mm3(double m, double n, double k, double chunks, const double* cand,
                           const double* rate, double* out3, bint sixteen, int side) noexcept nogil:
    # A weight GEMM run `chunks` times: (forward, input grad, weight grad accumulating at bytes_grad);
    # under fp8 (not `sixteen`) the input (and weight with f8_w_mb) cast forward, the output grad back.
    # `side` (1 after an all-gather, 2 before a reduce-scatter) shapes it under TP comm overlap as
    # TE userbuffers run it (see the oracle's _mm3).
    cdef double bc = cand[SC_bytes_c], bg = cand[SC_bytes_grad]
    cdef double bm = bc if sixteen else cand[SC_bytes_mm]
    cdef double t = cand[SC_t], f_split = 1.0, d_split = 1.0, f_keep = 1.0
    if side != 0 and cand[SC_ov_tp] > 0.0 and t > 1.0:
        if side == 1:
            f_split = t
        else:
            f_split = rate[R_tp_ov_splits]
            f_keep = 1.0 - rate[R_tp_ov_sm]
            d_split = t
    out3[0] = chunks * f_split * c_sec_gemm(m / f_split, n, k, 1.0, bm, bc, rate, sixteen) / f_keep
    out3[1] = chunks * d_split * c_sec_gemm(m / d_split, k, n, 1.0, bm, bc, rate, sixteen)
    out3[2] = chunks * c_sec_gemm(k, n, m, 1.0, bm, 2.0 * bg, rate, sixteen)
    if not sixteen:
        out3[0] += chunks * c_sec_cast(m * k, cand, rate) + rate[R_f8_w_mb] * c_sec_cast(k * n, cand, rate)
        out3[1] += chunks * c_sec_cast(m * n, cand, rate)


cdef inline void c_sec_add_gemm(double* sums, double f, double d, double w) noexcept nogil:
    # Add a weight GEMM's (forward, input grad, weight grad) to sums = [fw, bw, bw_w, gemm_f, gemm_b].
    sums[0] += f
    sums[1] += d
    sums[2] += w
    sums[3] += f
    sums[4] += d + w


cdef inline double c_sec_ffn_pair(double rows, double width, double h, double n_ff, double n_split,
                                  const double* cand, const double* rate, double* sums) noexcept nogil:
    # A dense FFN of `width`: up (with the gate) h -> (n_ff - 1)·width/t, down width/t -> h; each
    # GEMM's times into sums, the up GEMM's first; returns the pair's forward time.
    cdef double t = cand[SC_t], forward
    cdef double g3[3]
    c_sec_mm3(rows, (n_ff - 1.0) * width / t, h, n_split, cand, rate, g3, 0, 1)
    c_sec_add_gemm(sums, g3[0], g3[1], g3[2])
    forward = g3[0]
    c_sec_mm3(rows, h, width / t, n_split, cand, rate, g3, 0, 2)
    c_sec_add_gemm(sums, g3[0], g3[1], g3[2])
    return forward + g3[0]


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
    cdef double ew_bytes, ew_kernels, full, gather, tp_pass, kv, step, qkv, o, ulysses, routed, a2a
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
        else:
            qkv = tokens * (a * d_qk + n_kv * (d_qk + d_v)) * bc / t
            o = tokens * a * d_v * bc / t
            ulysses = (c_sec_collective(SEC_ALL_TO_ALL, qkv, cp, t, rate)
                       + c_sec_collective(SEC_ALL_TO_ALL, o, cp, t, rate))
            out[SL_cp_f] = ulysses
            out[SL_cp_b] = ulysses

    # expert parallelism
    if moe and ep > 1.0:
        cap = cand[SC_moe_imb] if cand[SC_dropless] != 0.0 else cand[SC_cap_fact]
        routed = (tokens / sp) * model[M_n_chosen] * cap * h * bc
        a2a = 2.0 * c_sec_collective(SEC_ALL_TO_ALL, routed, ep, t * cp, rate)
        out[SL_ep_f] = a2a
        out[SL_ep_b] = a2a

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
    out[SL_p_dense] = p_dense
    out[SL_p_expert] = p_expert
    out[SL_flops_f] = flops_att + flops_core + flops_rec + flops_ffn
    out[SL_flops_core] = flops_core
    out[SL_flops_core_extra] = core_extra
    out[SL_att_mm_f] = f_att
    out[SL_ffn_mm_f] = ffn_f
    out[SL_att_mm_flops] = flops_att
    out[SL_ffn_mm_flops] = flops_ffn


cdef inline void c_sec_head(const double* cand, const double* rate, double tokens, double h, double v,
                            double softcap, double* out3) noexcept nogil:
    # One output head on this rank: logits GEMM and Megatron's vocab-parallel cross entropy.
    cdef double t = cand[SC_t], n_split = cand[SC_seq_split], logits, forward, backward
    cdef double g3[3]
    c_sec_mm3(tokens / n_split, v / t, h, n_split, cand, rate, g3, 1, 0)
    logits = tokens * v / t
    forward = g3[0] + c_sec_pass(SEC_CE_FORWARD_BYTES * logits, SEC_CE_FORWARD_KERNELS * n_split, rate)
    backward = g3[1] + c_sec_pass(SEC_CE_BACKWARD_BYTES * logits, n_split, rate)
    if softcap != 0.0:
        forward += c_sec_pass(SEC_SOFTCAP_BYTES * logits, n_split, rate)
        backward += c_sec_pass(SEC_POINTWISE_BACKWARD_BYTES * SEC_SOFTCAP_BYTES * logits, n_split, rate)
    if t > 1.0:
        forward += SEC_CE_ALL_REDUCES * n_split * c_sec_collective(
            SEC_ALL_REDUCE, SEC_CE_REDUCE_BYTES * tokens / n_split, t, 1.0, rate)
    out3[0] = forward
    out3[1] = backward
    out3[2] = g3[2]


cdef inline void c_sec_vision_edges(const double* smodel, const double* cand, const double* rate,
                                    double* out5) noexcept nogil:
    # A vision tower's patch embedding and merger on this rank (the oracle's _vision_edges):
    # forward, backward, weight grads, tp comm, forward FLOPs of the whole micro-batch.
    cdef double patches = smodel[SM_v_patches]
    cdef double b = cand[SC_b], t = cand[SC_t], cp = cand[SC_cp], sp = cand[SC_sp], bc = cand[SC_bytes_c]
    cdef double hv = smodel[SM_v_hidden], m = smodel[SM_v_merge], v_out = smodel[SM_v_out]
    cdef double patch_in = smodel[SM_v_patch_in]
    cdef double rows, merged, wide, fw, bw, bw_w, moved, comm = 0.0
    cdef double g3[3]
    c_sec_fill(out5, 5, 0.0)
    if patches <= 0.0:
        return
    rows = b * patches / cp
    merged = rows / m
    wide = hv * m
    c_sec_mm3(rows / sp, hv, patch_in, 1.0, cand, rate, g3, 0, 0)     # the patch embedding
    fw, bw, bw_w = g3[0], g3[1], g3[2]
    c_sec_mm3(merged, wide / t, wide, 1.0, cand, rate, g3, 0, 0)      # merger fc1, column parallel
    fw, bw, bw_w = fw + g3[0], bw + g3[1], bw_w + g3[2]
    c_sec_mm3(merged, v_out, wide / t, 1.0, cand, rate, g3, 0, 0)     # merger fc2, row parallel
    fw, bw, bw_w = fw + g3[0], bw + g3[1], bw_w + g3[2]
    moved = 2.0 * 2.0 * bc * rows * hv / sp + 2.0 * bc * merged * wide / t
    fw += c_sec_pass(moved, 2.0, rate)
    bw += c_sec_pass(SEC_POINTWISE_BACKWARD_BYTES * moved, 2.0, rate)
    if t > 1.0:
        if sp > 1.0:
            comm = 2.0 * (c_sec_collective(SEC_GATHER_OR_SCATTER, rows * hv * bc, t, 1.0, rate)
                          + c_sec_collective(SEC_GATHER_OR_SCATTER, merged * v_out * bc, t, 1.0, rate))
        else:
            comm = (c_sec_collective(SEC_ALL_REDUCE, merged * v_out * bc, t, 1.0, rate)
                    + c_sec_collective(SEC_ALL_REDUCE, rows * hv * bc, t, 1.0, rate))
    out5[0] = fw
    out5[1] = bw
    out5[2] = bw_w
    out5[3] = comm
    out5[4] = 2.0 * b * patches * (patch_in * hv + (wide * wide + wide * v_out) / m)


cdef inline void c_sec_stage_sums(const double* kinds, const double* skinds, const double* model,
                                  const double* smodel, const double* cand, const double* rate,
                                  const double* counts, const long long* slot_option,
                                  const long long* slot_mask, const double* extras, double* out,
                                  Py_ssize_t n_kinds, Py_ssize_t n_slots, Py_ssize_t n_stages,
                                  double* p_dense, double* p_expert) noexcept nogil:
    # The oracle's seconds_stage_sums after its checks; arrays are row-major, out zeroed here.
    cdef Py_ssize_t k, o, st, bit, emb_stage = -1, out_stage = -1
    cdef bint used, defer
    cdef long long option, mask
    cdef double b = cand[SC_b], s = cand[SC_s], t = cand[SC_t], cp = cand[SC_cp], d = cand[SC_d]
    cdef double sp = cand[SC_sp], ep = cand[SC_ep], p = cand[SC_p]
    cdef double n_split = cand[SC_seq_split], bc = cand[SC_bytes_c]
    cdef double ov_tp = cand[SC_ov_tp], ov_cp = cand[SC_ov_cp], ov_ep = cand[SC_ov_ep]
    if cand[SC_cp_ring] == 0.0:
        ov_cp = 0.0      # Ulysses' all-to-alls are on the critical path (see the oracle)
    cdef double h = model[M_h], v = model[M_v], tokens = b * s / cp
    cdef double tp_f, tp_b, cp_f, cp_b, ep_f, ep_b, rc, rc_tp, rc_cp, rc_ep, rc_flops, count
    cdef double census_att, census_ffn
    cdef double x_sp, db, full, moved, kernels, heads, norm, n_mtp, chunks, piece, step
    cdef double zero, bg, bp, edp, ov_dp, ov_fsdp, n_dp, hbm, dense, expert, layers, grads, params
    cdef double z3_fetch_bw, capped, gathers, rerun
    cdef bint z3_rc_gather, z3_grad_ar
    cdef double backward, backward_traffic, shards, local, shared_ar
    cdef long long reduce_op
    cdef bint tied_here
    cdef double layer[SL_COUNT]
    cdef double head[3]
    cdef double g3[3]
    cdef double edges[5]
    cdef const double* row_in
    cdef double* row
    c_sec_fill(out, n_stages * SS_COUNT, 0.0)
    c_sec_fill(p_dense, n_stages, 0.0)
    c_sec_fill(p_expert, n_stages, 0.0)

    # body layers
    for k in range(n_kinds):
        used = False
        for st in range(n_stages):
            for o in range(n_slots):
                if counts[st * n_kinds * n_slots + k * n_slots + o] != 0.0:
                    used = True
        if not used:
            continue
        c_sec_layer(&kinds[k * K_COUNT], &skinds[k * SK_COUNT], model, smodel, cand, rate, layer)
        tp_f = c_sec_exposed(layer[SL_tp_f], layer[SL_gemm_f], ov_tp)
        tp_b = c_sec_exposed(layer[SL_tp_b], layer[SL_gemm_b], ov_tp)
        cp_f = c_sec_exposed(layer[SL_cp_f], layer[SL_core_f], ov_cp)
        cp_b = c_sec_exposed(layer[SL_cp_b], layer[SL_core_b], ov_cp)
        ep_f = c_sec_exposed(layer[SL_ep_f], layer[SL_fw], ov_ep)
        ep_b = c_sec_exposed(layer[SL_ep_b], layer[SL_bw] + layer[SL_bw_w], ov_ep)
        for o in range(n_slots):
            option = slot_option[o]
            rc = 0.0
            rc_tp = 0.0
            rc_cp = 0.0
            rc_ep = 0.0
            rc_flops = 0.0
            if option == OPTION_FULL:
                rc = layer[SL_fw]
                rc_tp = tp_f
                rc_cp = cp_f
                rc_ep = ep_f
                rc_flops = layer[SL_flops_f] + layer[SL_flops_core_extra]
            elif option == OPTION_SELECTIVE:
                mask = slot_mask[o]
                for bit in range(8):
                    if (mask >> bit) & 1:
                        continue
                    if bit == SEC_GATHER_BIT:
                        rc_tp += layer[SL_sw_attBMM + bit]
                    else:
                        rc += layer[SL_sw_attBMM + bit]
                if not (mask & 1):
                    rc_flops += layer[SL_flops_core] + layer[SL_flops_core_extra]
                if not ((mask >> 7) & 1):
                    rc_flops += layer[SL_flops_up]
                census_att = kinds[k * K_COUNT + K_census_att]
                if mask == HYPER_POLICY_MASK and census_att >= 0.0:
                    # HyperParallel's policy: a census share of the projection matmuls too
                    census_ffn = max(kinds[k * K_COUNT + K_census_ffn], 0.0)
                    rc += census_att * layer[SL_att_mm_f] + census_ffn * layer[SL_ffn_mm_f]
                    rc_flops += census_att * layer[SL_att_mm_flops] + census_ffn * layer[SL_ffn_mm_flops]
            for st in range(n_stages):
                count = counts[st * n_kinds * n_slots + k * n_slots + o]
                if count == 0.0:
                    continue
                row = &out[st * SS_COUNT]
                row[SS_fw] += count * layer[SL_fw]
                row[SS_bw] += count * layer[SL_bw]
                row[SS_bw_w] += count * layer[SL_bw_w]
                row[SS_rc] += count * rc
                row[SS_tp] += count * (tp_f + tp_b + rc_tp)
                row[SS_cp] += count * (cp_f + cp_b + rc_cp)
                row[SS_ep] += count * (ep_f + ep_b + rc_ep)
                row[SS_layers] += count
                row[SS_model_flops] += count * 3.0 * layer[SL_flops_f]
                row[SS_hw_flops] += count * (3.0 * (layer[SL_flops_f] + layer[SL_flops_core_extra]) + rc_flops)
                p_dense[st] += count * layer[SL_p_dense]
                p_expert[st] += count * layer[SL_p_expert]

    # embedding, output head, MTP modules
    x_sp = tokens * h / sp
    db = cand[SC_dropout_bytes]
    full = b * s * h * bc / cp
    for st in range(n_stages):
        row = &out[st * SS_COUNT]
        row_in = &extras[st * SX_COUNT]
        if row_in[SX_has_emb] != 0.0:
            emb_stage = st
            moved = 2.0 * bc * tokens * h
            kernels = 1.0
            if smodel[SM_p_pos] > 0.0:
                moved += 3.0 * bc * tokens * h
                kernels += 1.0
            if db > 0.0:
                moved += (2.0 * bc + db) * x_sp
                kernels += 1.0
            row[SS_fw] += c_sec_pass(moved, kernels * n_split, rate)
            row[SS_bw] += c_sec_pass(SEC_POINTWISE_BACKWARD_BYTES * moved, kernels * n_split, rate)
            if t > 1.0:
                if sp > 1.0:
                    row[SS_tp] += 2.0 * c_sec_collective(SEC_GATHER_OR_SCATTER, full, t, 1.0, rate)
                else:
                    row[SS_tp] += c_sec_collective(SEC_ALL_REDUCE, full, t, 1.0, rate)
            p_dense[st] += smodel[SM_p_embed] / t + smodel[SM_p_pos]
            if smodel[SM_v_patches] > 0.0:
                # a vision tower's patch embedding and merger run here too, before the embedding
                c_sec_vision_edges(smodel, cand, rate, edges)
                row[SS_fw] += edges[0]
                row[SS_bw] += edges[1]
                row[SS_bw_w] += edges[2]
                row[SS_tp] += edges[3]
                row[SS_model_flops] += 3.0 * edges[4]
                row[SS_hw_flops] += 3.0 * edges[4]
                p_dense[st] += smodel[SM_p_vision_extra] / t
        heads = 0.0
        if row_in[SX_has_out] != 0.0:
            out_stage = st
            heads += 1.0
            norm = 2.0 * 2.0 * bc * x_sp
            row[SS_fw] += c_sec_pass(norm, n_split, rate)
            row[SS_bw] += c_sec_pass(SEC_POINTWISE_BACKWARD_BYTES * norm, n_split, rate)
            if t > 1.0:
                if sp > 1.0:
                    row[SS_tp] += 2.0 * c_sec_collective(SEC_GATHER_OR_SCATTER, full, t, 1.0, rate)
                else:
                    row[SS_tp] += c_sec_collective(SEC_ALL_REDUCE, full, t, 1.0, rate)
            tied_here = cand[SC_tie_emb] != 0.0 and row_in[SX_has_emb] != 0.0
            p_dense[st] += (0.0 if tied_here else smodel[SM_p_embed] / t) + smodel[SM_p_final_norm]
        n_mtp = row_in[SX_n_mtp]
        if n_mtp > 0.0:
            heads += n_mtp
            norm = 3.0 * 2.0 * 2.0 * bc * x_sp
            c_sec_mm3(tokens / n_split, h / t, 2.0 * h, n_split, cand, rate, g3, 0, 0)
            row[SS_fw] += n_mtp * (g3[0] + c_sec_pass(norm, 3.0 * n_split, rate))
            row[SS_bw] += n_mtp * (g3[1] + c_sec_pass(SEC_POINTWISE_BACKWARD_BYTES * norm, 3.0 * n_split, rate))
            row[SS_bw_w] += n_mtp * g3[2]
            row[SS_model_flops] += n_mtp * 3.0 * 2.0 * b * s * 2.0 * h * h
            row[SS_hw_flops] += n_mtp * 3.0 * 2.0 * b * s * 2.0 * h * h
            p_dense[st] += n_mtp * smodel[SM_p_mtp_extra] / t
        if heads > 0.0:
            c_sec_head(cand, rate, tokens, h, v, smodel[SM_logit_softcap], head)
            row[SS_fw] += heads * head[0]
            row[SS_bw] += heads * head[1]
            row[SS_bw_w] += heads * head[2]
            row[SS_model_flops] += heads * 3.0 * 2.0 * b * s * h * v
            row[SS_hw_flops] += heads * 3.0 * 2.0 * b * s * h * v

    # pipeline point-to-point
    if p > 1.0:
        chunks = cand[SC_vp] * n_split
        piece = full / n_split
        step = c_sec_collective(SEC_SEND_RECV, piece / t, p, t * cp * d, rate)
        if sp <= 1.0 and t > 1.0:
            step += c_sec_collective(SEC_GATHER_OR_SCATTER, piece, t, 1.0, rate)
        for st in range(n_stages):
            out[st * SS_COUNT + SS_pp] += 2.0 * chunks * step

    # data parallelism and the optimizer
    zero = cand[SC_zero]
    bg = cand[SC_bytes_grad]
    bp = cand[SC_bytes_p]
    edp = cand[SC_edp]
    defer = cand[SC_defer_grads] != 0.0
    ov_dp = cand[SC_ov_dp]
    ov_fsdp = cand[SC_ov_fsdp]
    z3_fetch_bw = rate[R_z3_fetch_bw]
    z3_rc_gather = rate[R_z3_rc_gather] != 0.0
    z3_grad_ar = rate[R_z3_grad_ar] != 0.0
    n_dp = d * cp
    hbm = rate[R_hbm_eff] * rate[R_hbm_bw]
    for st in range(n_stages):
        row = &out[st * SS_COUNT]
        dense = p_dense[st]
        expert = p_expert[st]
        layers = row[SS_layers]
        reduce_op = SEC_ALL_REDUCE if zero == 0.0 or (zero == 3.0 and z3_grad_ar) else SEC_GATHER_OR_SCATTER
        grads = (c_sec_collective(reduce_op, dense * bg, n_dp, t, rate)
                 + c_sec_collective(reduce_op, expert * bg, edp, t * cp * ep, rate))
        params = (c_sec_collective(SEC_GATHER_OR_SCATTER, dense * bp, n_dp, t, rate)
                  + c_sec_collective(SEC_GATHER_OR_SCATTER, expert * bp, edp, t * cp * ep, rate))
        if zero == 3.0 and z3_fetch_bw > 0.0 and n_dp * edp > 1.0:
            # a framework whose parameter fetch runs below NCCL's rate
            capped = (dense * bp * (1.0 if n_dp > 1.0 else 0.0)
                      + expert * bp * (1.0 if edp > 1.0 else 0.0)) / z3_fetch_bw
            if capped > params:
                params = capped
        backward = row[SS_bw] + row[SS_bw_w] + row[SS_rc]
        if zero == 3.0:
            if cand[SC_reshard] != 0.0:
                gathers = 1.0
                if z3_rc_gather and row[SS_rc] > 0.0 and row[SS_fw] > 0.0:
                    # the recompute forward fetches again the parameters of what it re-runs
                    rerun = row[SS_rc] / row[SS_fw]
                    gathers += rerun if rerun < 1.0 else 1.0
                row[SS_dp_mb_gather] += c_sec_exposed_tail(gathers * params, gathers * row[SS_fw],
                                                           ov_fsdp, layers)
                backward_traffic = params + (0.0 if defer else grads)
            else:
                row[SS_dp_gather] += params
                backward_traffic = 0.0 if defer else grads
            if backward_traffic > 0.0:
                row[SS_dp_mb_reduce] += c_sec_exposed_tail(backward_traffic, backward, ov_fsdp, layers)
            if defer:
                row[SS_dp_reduce] += grads
        elif zero == 2.0 and not defer:
            row[SS_dp_mb_reduce] += c_sec_exposed_tail(grads, backward, ov_dp, layers)
            row[SS_dp_gather] += params
        else:
            row[SS_dp_reduce] += grads
            if zero >= 1.0:
                row[SS_dp_gather] += params
        shards = cand[SC_zero_ranks] if zero >= 1.0 else 1.0
        local = dense / shards + expert / (edp if zero >= 1.0 else 1.0)
        if local > 0.0:
            row[SS_opt] += cand[SC_bytes_opt] * local / hbm + rate[R_kernel_s]

    # tied embedding and output on two stages
    if cand[SC_tie_emb] != 0.0 and emb_stage >= 0 and out_stage >= 0 and emb_stage != out_stage:
        shared_ar = c_sec_collective(SEC_ALL_REDUCE, smodel[SM_p_embed] / t * bg, 2.0,
                                     (out_stage - emb_stage) * t * cp * d, rate)
        out[emb_stage * SS_COUNT + SS_dp_reduce] += shared_ar
        out[out_stage * SS_COUNT + SS_dp_reduce] += shared_ar


cdef inline double c_sec_combine(const double* stage, Py_ssize_t n_stages, const double* cand,
                                 double* parts, double* stage_times, double* totals) noexcept nogil:
    # The oracle's seconds_combine after its checks.
    cdef Py_ssize_t st, straggler
    cdef double m = cand[SC_m], total, slowest, summed, schedule, vp, n_split, chunks, pipeline
    cdef double forward, backward, bubble_v, ov_dp, ov_gather, slack, tail, layers, reduce_, gather
    cdef double optimizer, own, late, t_reduce = 0.0, t_opt = 0.0, t_gather = 0.0, scale
    cdef bint ok = n_stages >= 1 and m >= 1.0
    cdef const double* row
    cdef const double* worst
    for st in range(n_stages):
        row = &stage[st * SS_COUNT]
        total = (row[SS_fw] + row[SS_bw] + row[SS_bw_w] + row[SS_rc] + row[SS_tp]
                 + row[SS_cp] + row[SS_ep] + row[SS_pp] + row[SS_dp_mb_gather]
                 + row[SS_dp_mb_reduce])
        if total != total:
            ok = False
        totals[st] = total
    if not ok:
        c_sec_fill(parts, P_COUNT, NAN)
        c_sec_fill(stage_times, n_stages, NAN)
        return NAN
    straggler = 0
    for st in range(n_stages):
        if totals[st] >= totals[straggler]:
            straggler = st
    slowest = totals[straggler]
    summed = 0.0
    for st in range(n_stages):
        summed += totals[st]
    schedule = cand[SC_schedule]
    vp = cand[SC_vp]
    n_split = cand[SC_seq_split]
    chunks = 1.0
    if schedule == SEC_INTERLEAVED:
        chunks = vp
    elif schedule == SEC_SEQ1F1B:
        chunks = vp * n_split
    worst = &stage[straggler * SS_COUNT]
    if schedule == SEC_ZERO_BUBBLE_V:
        forward = worst[SS_fw]
        backward = (worst[SS_bw] + worst[SS_rc] + worst[SS_tp] + worst[SS_cp] + worst[SS_ep]
                    + worst[SS_pp] + worst[SS_dp_mb_gather] + worst[SS_dp_mb_reduce])
        bubble_v = forward + 2.0 * backward - 3.0 * worst[SS_bw_w]
        pipeline = m * slowest + (n_stages - 1.0) * (bubble_v if bubble_v > 0.0 else 0.0) / 2.0
    else:
        pipeline = m * slowest + (summed - slowest) / chunks
    ov_dp = cand[SC_ov_dp]
    ov_gather = cand[SC_ov_dp_gather]
    slack = 0.0
    tail = -1.0
    for st in range(n_stages):
        row = &stage[st * SS_COUNT]
        layers = row[SS_layers]
        backward = (row[SS_bw] + row[SS_bw_w] + row[SS_rc]) / chunks
        reduce_ = c_sec_exposed_tail(row[SS_dp_reduce], backward, ov_dp, layers) if row[SS_dp_reduce] > 0.0 else 0.0
        gather = (c_sec_exposed_tail(row[SS_dp_gather], row[SS_fw] / chunks, ov_gather, layers)
                  if row[SS_dp_gather] > 0.0 else 0.0)
        optimizer = row[SS_opt]
        own = reduce_ + optimizer + gather
        stage_times[st] = m * totals[st] + own
        late = own - (0.0 if schedule == SEC_ZERO_BUBBLE_V else slack)
        if late > tail:
            tail = late
            t_reduce = reduce_
            t_opt = optimizer
            t_gather = gather
        slack += backward
    if tail < 0.0:
        tail = 0.0
    own = t_reduce + t_opt + t_gather
    scale = tail / own if own > 0.0 else 0.0
    c_sec_fill(parts, P_COUNT, 0.0)
    parts[P_fw_compute] = m * worst[SS_fw]
    parts[P_bw_compute] = m * (worst[SS_bw] + worst[SS_bw_w]) + scale * t_opt
    parts[P_recompute] = m * worst[SS_rc]
    parts[P_dp_comm] = m * worst[SS_dp_mb_gather] + scale * t_gather
    parts[P_dp_reduce] = m * worst[SS_dp_mb_reduce] + scale * t_reduce
    parts[P_tp_comm] = m * worst[SS_tp]
    parts[P_ep_comm] = m * worst[SS_ep]
    parts[P_cp_comm] = m * worst[SS_cp]
    parts[P_pp_comm] = m * worst[SS_pp]
    parts[P_bubble] = pipeline - m * slowest
    return pipeline + tail


cdef inline void c_sec_check_rows(str name, Py_ssize_t rows, Py_ssize_t width, Py_ssize_t got_rows,
                                  Py_ssize_t got_width) except *:
    if got_rows != rows:
        raise ValueError(f"{name} must have {rows} rows, got {got_rows}")
    if got_rows and got_width != width:
        raise ValueError(f"{name} must have {width} columns, got {got_width}")


cdef inline void c_sec_check_len(str name, Py_ssize_t expected, Py_ssize_t got) except *:
    if got != expected:
        raise ValueError(f"{name} must have length {expected}, got {got}")


def seconds_collective(long long op, double moved, double n, double stride, const double[::1] rate) -> float:
    """Seconds of one collective over n ranks stride apart (ring, alpha-beta, hierarchical); see the oracle."""
    c_sec_check_len("rate", R_COUNT, rate.shape[0])
    return c_sec_collective(op, moved, n, stride, &rate[0])


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


def seconds_stage_sums(const double[:, ::1] kinds, const double[:, ::1] skinds, const double[::1] model,
                       const double[::1] smodel, const double[::1] cand, const double[::1] rate,
                       const double[:, ::1] counts, const long long[::1] slot_option,
                       const long long[::1] slot_mask, const double[:, ::1] extras, double[:, ::1] out):
    """Per pipeline stage, the raw seconds of each part (pp x SECONDS_STAGE_FIELDS); see the oracle."""
    cdef Py_ssize_t n_kinds = kinds.shape[0], n_slots = slot_option.shape[0], n_stages = counts.shape[0]
    cdef double* buffer
    c_sec_check_rows("kinds", n_kinds, K_COUNT, kinds.shape[0], kinds.shape[1])
    c_sec_check_rows("skinds", n_kinds, SK_COUNT, skinds.shape[0], skinds.shape[1])
    c_sec_check_len("model", M_COUNT, model.shape[0])
    c_sec_check_len("smodel", SM_COUNT, smodel.shape[0])
    c_sec_check_len("cand", SC_COUNT, cand.shape[0])
    c_sec_check_len("rate", R_COUNT, rate.shape[0])
    c_sec_check_len("slot_mask", n_slots, slot_mask.shape[0])
    c_sec_check_rows("counts", n_stages, n_kinds * n_slots, counts.shape[0], counts.shape[1])
    c_sec_check_rows("extras", n_stages, SX_COUNT, extras.shape[0], extras.shape[1])
    c_sec_check_rows("out", n_stages, SS_COUNT, out.shape[0], out.shape[1])
    if n_stages == 0:
        return
    buffer = <double*>malloc(2 * n_stages * sizeof(double))
    if buffer == NULL:
        raise MemoryError()
    try:
        with nogil:
            if not c_sec_cand_ok(&cand[0], &rate[0]):
                c_sec_fill(&out[0, 0], n_stages * SS_COUNT, NAN)
            else:
                c_sec_stage_sums(&kinds[0, 0] if n_kinds else NULL, &skinds[0, 0] if n_kinds else NULL,
                                 &model[0], &smodel[0], &cand[0], &rate[0],
                                 &counts[0, 0] if n_kinds * n_slots else NULL,
                                 &slot_option[0] if n_slots else NULL, &slot_mask[0] if n_slots else NULL,
                                 &extras[0, 0], &out[0, 0], n_kinds, n_slots, n_stages,
                                 buffer, buffer + n_stages)
    finally:
        free(buffer)


def seconds_combine(const double[:, ::1] stage, const double[::1] cand, double[::1] parts,
                    double[::1] stage_times) -> float:
    """The step time from the per-stage sums; parts and per-stage times out; see the oracle."""
    cdef Py_ssize_t n_stages = stage.shape[0]
    cdef double result
    cdef double* totals
    c_sec_check_rows("stage", n_stages, SS_COUNT, stage.shape[0], stage.shape[1])
    c_sec_check_len("cand", SC_COUNT, cand.shape[0])
    c_sec_check_len("parts", P_COUNT, parts.shape[0])
    c_sec_check_len("stage_times", n_stages, stage_times.shape[0])
    totals = <double*>malloc((n_stages if n_stages else 1) * sizeof(double))
    if totals == NULL:
        raise MemoryError()
    try:
        with nogil:
            result = c_sec_combine(&stage[0, 0] if n_stages else NULL, n_stages, &cand[0], &parts[0],
                                   &stage_times[0] if n_stages else NULL, totals)
    finally:
        free(totals)
    return result
