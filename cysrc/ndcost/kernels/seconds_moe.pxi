# Seconds mode, a MoE layer's FFN (twin of ndcost/kernels/seconds_moe.py): the router, the permutation,
# the routed experts as grouped GEMMs at their real shape, their activation, the un-permutation and the
# shared experts, each an op of the layer's note; and seconds_moe_block, a MoE block priced on its own.
# Every formula, constant and source is stated once, in the oracle. Needs kernels/columns.pxi and
# kernels/seconds_ops.pxi included before it.

from libc.math cimport ceil

# The grouped GEMM's tiles (SEC_GROUPED_*), the streams (SEC_MULTI_STREAMS), the permutation modes
# (SEC_PERMUTE_*) and the routing's byte widths (SEC_PROB_BYTES, SEC_INDEX_BYTES): kernels/codes.pxi.


cdef inline double c_sec_grouped(double groups, double m, double n, double k, double in_bytes, double out_bytes,
                                 const double* rate) noexcept nogil:
    # One grouped GEMM over `groups` experts of [m x k]·[k x n]: whole waves of tiles, each with its
    # fixed cost, against the experts' bytes; the longer plus g_stream of the shorter, plus kernel_s.
    cdef double tm = SEC_GROUPED_TILE_M, tn = SEC_GROUPED_TILE_N, sms, tiles, waves, compute, memory
    if groups <= 0.0 or m <= 0.0 or n <= 0.0 or k <= 0.0:
        return 0.0
    if m <= SEC_GROUPED_SMALL or n <= SEC_GROUPED_SMALL:
        tm = SEC_GROUPED_SMALL_TILE_M
        tn = SEC_GROUPED_SMALL_TILE_N
    sms = rate[R_sms]
    tiles = groups * ceil(m / tm) * ceil(n / tn)
    waves = ceil(tiles / sms)
    compute = waves * 2.0 * tm * tn * (k + rate[R_g_tile_k]) * sms / (rate[R_mm_eff] * rate[R_peak_mm])
    memory = groups * (in_bytes * (m * k + k * n) + out_bytes * m * n) / (rate[R_hbm_eff] * rate[R_hbm_bw])
    if compute > memory:
        return compute + rate[R_g_stream] * memory + rate[R_kernel_s]
    return memory + rate[R_g_stream] * compute + rate[R_kernel_s]


cdef inline double c_sec_experts_gemm(double groups, double m, double n, double k, double in_bytes,
                                      double out_bytes, const double* rate) noexcept nogil:
    # The experts' GEMM of one pass: one grouped kernel, or one cuBLAS GEMM per expert over the streams.
    cdef double rounds
    if rate[R_g_launch] == SEC_GEMMS_CUTLASS:
        return c_sec_grouped(groups, m, n, k, in_bytes, out_bytes, rate)
    if groups <= 0.0 or m <= 0.0 or n <= 0.0 or k <= 0.0:
        return 0.0
    rounds = ceil(groups / SEC_MULTI_STREAMS)
    return c_sec_gemm(m, n, k, groups, in_bytes, out_bytes, rate, 0) + (rounds - 1.0) * rate[R_kernel_s]


cdef inline void c_sec_router_passes(double tok, double n_exp, double topk, double bias, double bc,
                                     const double* rate, double* out4) noexcept nogil:
    # The router's elementwise work beyond its logits GEMM: (forward bytes, kernels, backward bytes, kernels).
    cdef double logits = tok * n_exp, chosen = tok * topk, f_bytes, b_bytes, kernels
    if rate[R_router_fused] != 0.0:
        out4[0] = (bc + 5.0) * logits
        out4[1] = 1.0
        out4[2] = (8.0 + bc) * logits
        out4[3] = 1.0
        return
    f_bytes = (bc + 4.0 + 8.0 + 4.0) * logits + 12.0 * chosen + 3.0 * 8.0 * chosen
    b_bytes = (4.0 + 12.0 + bc) * logits + 12.0 * chosen + 3.0 * 8.0 * chosen
    kernels = 1.0 + 1.0 + 2.0 + 3.0
    if rate[R_permute] != SEC_PERMUTE_SORT:
        f_bytes += 2.0 * (SEC_PROB_BYTES + 1.0) * logits + (SEC_PROB_BYTES + SEC_INDEX_BYTES) * chosen
        b_bytes += SEC_PROB_BYTES * logits
        kernels += 2.0
    out4[1] = kernels
    out4[3] = kernels
    if bias != 0.0:
        f_bytes += 8.0 * logits + 16.0 * chosen
        out4[1] += 2.0
    if rate[R_aux_loss] != 0.0:
        f_bytes += (1.0 + SEC_PROB_BYTES) * logits
        b_bytes += 2.0 * SEC_PROB_BYTES * logits
        out4[1] += 6.0
        out4[3] += 3.0
    out4[0] = f_bytes
    out4[2] = b_bytes


cdef inline void c_sec_permute_passes(double tok, double n_exp, double chosen, double sent, double routed, double h,
                                      double bc, double ep, double disp, const double* rate,
                                      double* out8) noexcept nogil:
    # Permute and un-permute, forward and backward: (bytes, kernels) x 4 and the atomic adds of the permute's
    # backward and the un-permute's forward, as the oracle's _permute_passes.
    cdef double rows_b = bc * sent * h, tokens_b = bc * tok * h, scatter, mode = rate[R_permute]
    cdef int i
    scatter = tokens_b + rows_b
    if mode == SEC_PERMUTE_FUSED:
        out8[0] = (1.0 + SEC_PROB_BYTES) * tok * n_exp + tokens_b + rows_b + SEC_PROB_BYTES * sent
        out8[1] = 3.0
        out8[2] = rows_b + tokens_b
        out8[3] = 1.0
        out8[4] = rows_b + SEC_PROB_BYTES * sent + tokens_b
        out8[5] = 1.0
        out8[6] = tokens_b + 2.0 * rows_b + SEC_PROB_BYTES * sent
        out8[7] = 1.0
        out8[8] = 0.0
        out8[9] = 0.0
    else:
        if mode == SEC_PERMUTE_UNFUSED:
            out8[0] = (2.0 + 9.0 + 8.0) * tok * n_exp + (SEC_INDEX_BYTES + SEC_PROB_BYTES) * sent + 2.0 * rows_b
            out8[1] = 5.0
        else:
            out8[0] = 4.0 * 2.0 * 2.0 * SEC_INDEX_BYTES * chosen + 2.0 * rows_b
            out8[1] = 4.0 + 2.0 + 1.0
        out8[2] = scatter
        out8[3] = 2.0
        out8[4] = 2.0 * rows_b + (SEC_PROB_BYTES + SEC_INDEX_BYTES) * sent + scatter
        out8[5] = 3.0
        out8[6] = 6.0 * rows_b + SEC_PROB_BYTES * sent
        out8[7] = 3.0
        out8[8] = sent * h
        out8[9] = sent * h
    if ep > 1.0 and disp == 0.0:
        for i in range(0, 8, 2):
            out8[i] += 2.0 * bc * routed * h
        for i in range(1, 8, 2):
            out8[i] += 1.0


cdef inline double c_sec_note_two(double* note, double* ops, int op, int scope, double bytes_f, double kernels_f,
                                  double bytes_b, double kernels_b, const double* rate, double* sums, double atomic_f,
                                  double atomic_b) noexcept nogil:
    # An elementwise op with its own backward bytes and kernels, plus seconds of atomic adds: both passes into
    # sums[0], sums[1], noted; returns the forward's seconds.
    cdef double forward = c_sec_pass(bytes_f, kernels_f, rate) + atomic_f
    cdef double backward = c_sec_pass(bytes_b, kernels_b, rate) + atomic_b
    sums[0] += forward
    sums[1] += backward
    c_sec_note(note, ops, op, scope, 0.0, bytes_f, kernels_f, forward, 0.0, bytes_b, kernels_b, backward)
    return forward


cdef inline void c_sec_glu_clamp_passes(double elems, double bc, const double* rate, double* out4) noexcept nogil:
    # Clamping a GLU's two halves as the stack does it (the oracle's _glu_clamp_passes): out4 = (forward bytes,
    # kernels, backward bytes, kernels).
    cdef double mode = rate[R_glu_clamp]
    cdef int i
    for i in range(4):
        out4[i] = 0.0
    if mode == SEC_CLAMP_CONCATENATED or (mode == SEC_CLAMP_SEPARATE and rate[R_ew_eager] != 0.0):
        out4[0] = SEC_CLAMP_FORWARD_WIDTHS * bc * elems
        out4[1] = SEC_CLAMP_FORWARD_KERNELS
        out4[2] = (SEC_CLAMP_BACKWARD_WIDTHS * bc + SEC_CLAMP_BACKWARD_MASK_BYTES) * elems
        out4[3] = SEC_CLAMP_BACKWARD_KERNELS
        if mode == SEC_CLAMP_CONCATENATED:
            out4[0] += SEC_CONCAT_WIDTHS * bc * elems
            out4[1] += SEC_CONCAT_KERNELS


cdef inline void c_sec_expert_bias_passes(double rows, double wide, double h, double local, double n_split,
                                          double bc, const double* rate, double* out6) noexcept nogil:
    # Adding the routed experts' biases as the stack does it (the oracle's _expert_bias_passes): out6 = (forward
    # bytes, kernels, backward bytes, kernels, the per-expert kernels of each pass).
    cdef double mode = rate[R_e_bias], down = rows * h, up = rows * wide
    cdef int i
    for i in range(6):
        out6[i] = 0.0
    if mode == SEC_BIAS_DOWN_SPLIT or mode == SEC_BIAS_SPLIT:
        out6[0] = (6.0 * SEC_PROB_BYTES + 2.0 * bc) * down
        out6[1] = (2.0 * local + 2.0) * n_split
        out6[2] = (8.0 * SEC_PROB_BYTES + 4.0 * bc) * down
        out6[3] = (5.0 * local + 2.0) * n_split
        out6[4] = 2.0 * local * n_split
        out6[5] = 5.0 * local * n_split
        if mode == SEC_BIAS_SPLIT:
            out6[0] += 4.0 * bc * up
            out6[1] += (local + 1.0) * n_split
            out6[2] += 3.0 * bc * up
            out6[3] += (local + 1.0) * n_split
            out6[4] += local * n_split
            out6[5] += local * n_split
    elif mode == SEC_BIAS_GATHERED:
        out6[0] = 4.0 * bc * (up + down)
        out6[1] = 6.0 * n_split
        out6[2] = bc * (up + down)
        out6[3] = 4.0 * n_split


cdef inline void c_sec_moe_block(double tok, double slots, double local, double h, double width, double n_ff,
                                 double n_exp, double topk, double shared, double shared_tokens, double grad_acc,
                                 double bias, double e_bias, double clamp, const double* cand, const double* rate,
                                 double* sums,
                                 double* note, double* ops, double* ffn_act) noexcept nogil:
    # A MoE block on one rank (the oracle's _moe_block, step for step): ffn_act = (the forward of its FFN
    # matmuls, the forward of its activations).
    cdef double t = cand[SC_t], t_exp = cand[SC_t_exp], n_split = cand[SC_seq_split]
    cdef double bc = cand[SC_bytes_c], bm = cand[SC_bytes_mm], bg = cand[SC_bytes_grad]
    cdef bint eager = rate[R_ew_eager] != 0.0
    cdef double g5[5]
    cdef double four[4]
    cdef double eight[10]
    cdef double six[6]
    cdef double scatter_rate = rate[R_scatter_rate]
    cdef double capacity, sent, per, wide, narrow, e_f, e_d, e_w, rows, k_f, k_b, weights
    cdef double loop_f, loop_b, splits, cast_f, cast_b
    cdef bint looped
    cdef double flops = 0.0, bytes_f = 0.0, bytes_b = 0.0, passes, kernels, act_f, ffn_f
    c_sec_mm3_noted(tok / n_split, n_exp, h, n_split, cand, rate, g5, 1, 0, note, ops, LO_router, SEC_SCOPE_PRE)
    c_sec_add_gemm(sums, g5[0], g5[1], g5[2])
    c_sec_router_passes(tok, n_exp, topk, bias, bc, rate, four)
    c_sec_note_two(note, ops, LO_router, SEC_SCOPE_PRE, four[0], four[1] * n_split, four[2], four[3] * n_split,
                   rate, sums, 0.0, 0.0)
    capacity = cand[SC_cap_fact] if cand[SC_dropless] == 0.0 else 1.0
    sent = tok * topk * capacity
    c_sec_permute_passes(tok, n_exp, tok * topk, sent if sent < slots else slots, slots, h, bc, cand[SC_ep],
                         cand[SC_ep_disp], rate, eight)
    c_sec_note_two(note, ops, LO_permute, SEC_SCOPE_PRE, eight[0], eight[1] * n_split, eight[2], eight[3] * n_split,
                   rate, sums, 0.0, eight[8] / scatter_rate if scatter_rate > 0.0 else 0.0)
    c_sec_note_two(note, ops, LO_unpermute, SEC_SCOPE_FFN, eight[4], eight[5] * n_split, eight[6],
                   eight[7] * n_split, rate, sums, eight[9] / scatter_rate if scatter_rate > 0.0 else 0.0, 0.0)
    per = slots / local / n_split if local > 0.0 else 0.0
    wide = (n_ff - 1.0) * width / t_exp
    narrow = width / t_exp
    e_f = n_split * (c_sec_experts_gemm(local, per, wide, h, bm, bc, rate)
                     + c_sec_experts_gemm(local, per, h, narrow, bm, bc, rate))
    e_d = n_split * (c_sec_experts_gemm(local, per, h, wide, bm, bc, rate)
                     + c_sec_experts_gemm(local, per, narrow, h, bm, bc, rate))
    e_w = n_split * (c_sec_experts_gemm(local, h, wide, per, bm, 2.0 * bg, rate)
                     + c_sec_experts_gemm(local, narrow, h, per, bm, 2.0 * bg, rate))
    rows = per * local
    looped = rate[R_g_launch] != SEC_GEMMS_CUTLASS
    k_f = 2.0 * n_split * (local if looped else 2.0)
    k_b = 2.0 * k_f
    e_f += (n_split * (c_sec_cast(rows * h, cand, rate) + c_sec_cast(rows * narrow, cand, rate))
            + rate[R_f8_w_mb] * local * c_sec_cast(h * (wide + narrow), cand, rate))
    e_d += n_split * (c_sec_backward_casts(rows * wide, rows * h, cand, rate)
                      + c_sec_backward_casts(rows * h, rows * narrow, cand, rate))
    loop_f = k_f if looped else 0.0
    loop_b = k_b if looped else 0.0
    if bm == 1.0:
        # TE's GroupedLinear casts each expert's rows by its own kernels (f8_split): a cast a split
        splits = local if looped and rate[R_f8_split] != 0.0 else 1.0
        cast_f = 2.0 * n_split * splits * rate[R_f8_cast_k]
        cast_b = 2.0 * n_split * splits * (rate[R_f8_gcast_k] + rate[R_f8_rq_k])
        k_f += cast_f + 2.0 * rate[R_f8_w_mb] * local * rate[R_f8_cast_k]
        k_b += cast_b
        e_f += cast_f * (splits - 1.0) / splits * rate[R_kernel_s]
        e_d += cast_b * (splits - 1.0) / splits * rate[R_kernel_s]
        if splits > 1.0:
            loop_f += cast_f
            loop_b += cast_b
    weights = local * h * (wide + narrow)
    if grad_acc != 0.0:
        e_w += c_sec_pass(weights * (bc + 2.0 * bg), n_split, rate)
        k_b += n_split
    c_sec_add_gemm(sums, e_f, e_d, e_w)
    if ops != NULL:
        flops = 2.0 * rows * h * (wide + narrow) * n_split
        bytes_f = n_split * (bm * (rows * h + weights + rows * narrow) + bc * rows * (wide + h))
        bytes_b = 2.0 * bytes_f + n_split * weights * (2.0 * bg - bc) + grad_acc * weights * (bc + 2.0 * bg)
    c_sec_note(note, ops, LO_experts, SEC_SCOPE_FFN, flops, bytes_f, k_f, e_f, 2.0 * flops, bytes_b, k_b, e_d + e_w)
    if e_bias != 0.0:
        c_sec_expert_bias_passes(rows * n_split, wide, h, local, n_split, bc, rate, six)
        if six[1] > 0.0:
            c_sec_note_two(note, ops, LO_expert_bias, SEC_SCOPE_FFN, six[0], six[1], six[2], six[3], rate, sums,
                           0.0, 0.0)
            loop_f += six[4]
            loop_b += six[5]
    # a GEMM or a bias add per expert takes the experts' rows as a host list: launched after the host waits for
    # the counts
    c_sec_note_loop(note, cand, loop_f, loop_b)
    passes = n_ff
    kernels = 1.0
    if eager and n_ff == 3.0:
        passes = SEC_EAGER_SWIGLU_PASSES
        kernels = 2.0
    act_f = c_sec_note_pass(note, ops, LO_expert_act, SEC_SCOPE_FFN, passes * bc * slots * narrow, kernels * n_split,
                            rate, sums)
    if clamp != 0.0 and n_ff == 3.0:
        c_sec_glu_clamp_passes(2.0 * slots * narrow, bc, rate, four)
        if four[1] > 0.0:
            act_f += c_sec_note_two(note, ops, LO_expert_act, SEC_SCOPE_FFN, four[0], four[1] * n_split, four[2],
                                    four[3] * n_split, rate, sums, 0.0, 0.0)
    ffn_f = e_f
    if shared > 0.0:
        # the shared experts are the router's graph scope (Megatron-Core's moe_router capture; the twin's comment)
        ffn_f += c_sec_ffn_pair(shared_tokens / n_split, shared, h, n_ff, n_split, cand, rate, sums, note, ops,
                                LO_shared_experts, SEC_SCOPE_PRE)
        act_f += c_sec_note_pass(note, ops, LO_shared_experts, SEC_SCOPE_PRE,
                                 passes * bc * shared_tokens * shared / t, kernels * n_split, rate, sums)
    ffn_act[0] = ffn_f
    ffn_act[1] = act_f


cdef inline double c_sec_moe_ffn(const double* model, const double* smodel, const double* cand, const double* rate,
                                 double tokens, double h, double n_ff, double width, double* sums, double* note,
                                 double* ops, double* ffn_act) noexcept nogil:
    # A MoE layer's FFN on this rank (the oracle's _moe_ffn): ffn_act as c_sec_moe_block's; returns its
    # model FLOPs for the whole micro-batch. Its experts compute tokens x top-k x load x t_exp / t rows.
    cdef double topk = model[M_n_chosen], n_exp = model[M_n_exp], shared = smodel[SM_shared_width]
    cdef double rows = tokens * topk * c_sec_expert_load(cand) * cand[SC_t_exp] / cand[SC_t]
    c_sec_moe_block(tokens / cand[SC_sp], rows, n_exp / cand[SC_ep], h, width, n_ff, n_exp, topk,
                    shared, tokens, 0.0, smodel[SM_router_bias], smodel[SM_expert_bias], smodel[SM_glu_clamp], cand,
                    rate, sums, note, ops, ffn_act)
    return 2.0 * cand[SC_b] * cand[SC_s] * h * (topk * n_ff * width + n_exp + n_ff * shared)


def seconds_moe_block(const double[::1] shape, const double[::1] cand, const double[::1] rate,
                      double[:, ::1] out):
    """A MoE block priced on its own, op by op (LAYER_OP_NAMES x LAYER_OP_FIELDS); see the oracle."""
    cdef Py_ssize_t i
    cdef bint ok
    cdef double note[SEC_NOTE_SIZE]
    cdef double sums[5]
    cdef double ffn_act[2]
    cdef double waits[2]
    c_sec_check_len("shape", MB_COUNT, shape.shape[0])
    c_sec_check_len("cand", SC_COUNT, cand.shape[0])
    c_sec_check_len("rate", R_COUNT, rate.shape[0])
    c_sec_check_rows("out", LO_COUNT, LF_COUNT, out.shape[0], out.shape[1])
    with nogil:
        c_sec_fill(&out[0, 0], LO_COUNT * LF_COUNT, 0.0)
        ok = c_sec_cand_ok(&cand[0], &rate[0])
        if not (shape[MB_tokens] > 0.0 and shape[MB_rows] > 0.0 and shape[MB_local] > 0.0
                and shape[MB_hidden] > 0.0 and shape[MB_width] > 0.0 and shape[MB_n_ff] > 0.0
                and shape[MB_experts] > 0.0 and shape[MB_topk] > 0.0):
            ok = False
        if not (shape[MB_shared] >= 0.0 and shape[MB_shared_tokens] >= 0.0):
            ok = False
        if not ok:
            c_sec_fill(&out[0, 0], LO_COUNT * LF_COUNT, NAN)
        else:
            c_sec_note_start(&cand[0], &rate[0], note)
            for i in range(5):
                sums[i] = 0.0
            c_sec_moe_block(shape[MB_tokens], shape[MB_rows], shape[MB_local], shape[MB_hidden], shape[MB_width],
                            shape[MB_n_ff], shape[MB_experts], shape[MB_topk], shape[MB_shared],
                            shape[MB_shared_tokens], shape[MB_grad_acc], shape[MB_router_bias],
                            shape[MB_expert_bias], shape[MB_glu_clamp], &cand[0], &rate[0], sums, note, &out[0, 0],
                            ffn_act)
            c_sec_note_launch(note, &out[0, 0], sums[0], sums[1] + sums[2], waits)
