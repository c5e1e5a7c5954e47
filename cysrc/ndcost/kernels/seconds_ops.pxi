# Seconds mode, the price of one op (twin of ndcost/kernels/seconds_ops.py): a GEMM, an elementwise
# pass, an fp8 cast, a GEMM's three passes and an FFN pair; where a layer's ops are noted (the host's
# launches, the per-op table); and the checks of the seconds kernels' inputs. Every formula, constant and source is stated once, in the oracle; this file repeats each
# computation in the oracle's order so that the two agree to rounding. The seconds area is four
# files, included in this order: seconds_ops, seconds_comm, seconds_layer, seconds.
# Needs kernels/columns.pxi and kernels/codes.pxi (the ABI enums and codes) included before it.

# SEC_POINTWISE_BACKWARD_BYTES, SEC_EAGER_SWIGLU_PASSES, where a layer's kernels run (SEC_SCOPE_*: the oracle's
# SCOPE_*) and the note's size (SEC_NOTE_SIZE): kernels/codes.pxi.


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


cdef inline double c_sec_backward_casts(double gradient, double cached, const double* cand,
                                        const double* rate) noexcept nogil:
    # The backward's fp8 casts of a GEMM: the output gradient's, the cached input's re-quantization (the oracle's
    # _backward_casts); 0 unless fp8.
    cdef double cast = 0.0
    if cand[SC_bytes_mm] != 1.0:
        return 0.0
    if gradient > 0.0:
        cast = c_sec_pass(rate[R_f8_gcast_b] * gradient, rate[R_f8_gcast_k], rate)
    if cached > 0.0:
        cast += c_sec_pass(rate[R_f8_rq_b] * cached, rate[R_f8_rq_k], rate)
    return cast


cdef inline void c_sec_fill(double* out, Py_ssize_t count, double value) noexcept nogil:
    # out[0:count] = value (a row zeroed before its sums, or NaN for a row that is not priced).
    cdef Py_ssize_t i
    for i in range(count):
        out[i] = value


cdef inline double c_sec_expert_load(const double* cand) noexcept nogil:
    # The busiest expert-parallel rank's routed tokens over the mean (the oracle's _expert_load).
    return cand[SC_moe_imb] if cand[SC_dropless] != 0.0 else cand[SC_cap_fact]


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
    # A weight GEMM run `chunks` times: (forward, input grad, weight grad accumulating at bytes_grad,
    # forward kernels, backward kernels);
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
    out3[3] = chunks * f_split
    out3[4] = chunks * (d_split + 1.0)
    if not sixteen:
        out3[0] += chunks * c_sec_cast(m * k, cand, rate) + rate[R_f8_w_mb] * c_sec_cast(k * n, cand, rate)
        out3[1] += chunks * c_sec_backward_casts(m * n, m * k, cand, rate)
        if cand[SC_bytes_mm] == 1.0:
            out3[3] += (chunks + rate[R_f8_w_mb]) * rate[R_f8_cast_k]
            out3[4] += chunks * (rate[R_f8_gcast_k] + rate[R_f8_rq_k])


cdef inline void c_sec_add_gemm(double* sums, double f, double d, double w) noexcept nogil:
    # Add a weight GEMM's (forward, input grad, weight grad) to sums = [fw, bw, bw_w, gemm_f, gemm_b].
    sums[0] += f
    sums[1] += d
    sums[2] += w
    sums[3] += f
    sums[4] += d + w


cdef inline bint c_sec_captures(double graphs, int scope) noexcept nogil:
    # Whether the graphs code (a bit mask of the scopes) replays scope; a code outside 0-7 captures nothing
    # (checked before the cast: a NaN or out-of-range double has no defined int).
    if not (graphs >= 0.0 and graphs < 8.0):
        return False
    return ((<int>graphs) >> scope) & 1 == 1


cdef inline void c_sec_note_start(const double* cand, const double* rate, double* note) noexcept nogil:
    # A layer's note before its ops: no kernels, each scope's host seconds per kernel (replayed from a
    # CUDA graph where the spec captures the scope, else launched) and whether it replays (1) or not (0).
    cdef double graphs = cand[SC_graphs], launch = rate[R_launch_s], replay = rate[R_graph_s]
    cdef int i, scope
    cdef bint held
    for i in range(6):
        note[i] = 0.0
    note[9] = 0.0
    note[10] = 0.0
    for scope in range(SEC_SCOPE_FFN + 1):     # the scopes in order: SEC_SCOPE_ATTN, _PRE, _FFN
        held = c_sec_captures(graphs, scope)
        note[6 + scope] = replay if held else launch
        note[11 + scope] = 1.0 if held else 0.0


cdef inline void c_sec_note(double* note, double* ops, int op, int scope, double flops_f, double bytes_f,
                            double kernels_f, double time_f, double flops_b, double bytes_b, double kernels_b,
                            double time_b) noexcept nogil:
    # Count an op's kernels in the note (per scope and pass); with ops (not NULL) add its row's figures.
    cdef double* row
    note[2 * scope] += kernels_f
    note[2 * scope + 1] += kernels_b
    if ops != NULL:
        row = ops + op * LF_COUNT
        row[LF_flops_f] += flops_f
        row[LF_bytes_f] += bytes_f
        row[LF_kernels_f] += kernels_f
        row[LF_time_f] += time_f
        row[LF_host_f] += kernels_f * note[6 + scope]
        row[LF_graphed_f] += kernels_f * note[11 + scope]
        row[LF_flops_b] += flops_b
        row[LF_bytes_b] += bytes_b
        row[LF_kernels_b] += kernels_b
        row[LF_time_b] += time_b
        row[LF_host_b] += kernels_b * note[6 + scope]
        row[LF_graphed_b] += kernels_b * note[11 + scope]


cdef inline double c_sec_note_pass(double* note, double* ops, int op, int scope, double moved, double kernels,
                                   const double* rate, double* sums) noexcept nogil:
    # An elementwise op: its forward and backward (1.5x the bytes) into sums[0], sums[1], noted; returns
    # its forward time.
    cdef double forward = c_sec_pass(moved, kernels, rate)
    cdef double backward = c_sec_pass(SEC_POINTWISE_BACKWARD_BYTES * moved, kernels, rate)
    sums[0] += forward
    sums[1] += backward
    if moved > 0.0:
        c_sec_note(note, ops, op, scope, 0.0, moved, kernels, forward, 0.0, SEC_POINTWISE_BACKWARD_BYTES * moved,
                   kernels, backward)
    return forward


cdef inline void c_sec_mm3_noted(double m, double n, double k, double chunks, const double* cand,
                                 const double* rate, double* out5, bint sixteen, int side, double* note,
                                 double* ops, int op, int scope) noexcept nogil:
    # c_sec_mm3 into out5, noted as `op` of `scope` (FLOPs and bytes as the oracle's _mm3_noted).
    cdef double flops = 0.0, bytes_f = 0.0, bytes_b = 0.0, bc, bm
    c_sec_mm3(m, n, k, chunks, cand, rate, out5, sixteen, side)
    if ops != NULL and m > 0.0 and n > 0.0 and k > 0.0:
        bc = cand[SC_bytes_c]
        bm = bc if sixteen else cand[SC_bytes_mm]
        flops = 2.0 * m * n * k * chunks
        bytes_f = chunks * (bm * (m * k + k * n) + bc * m * n)
        bytes_b = chunks * (bm * (m * n + n * k) + bc * m * k + bm * (k * m + m * n)
                            + 2.0 * cand[SC_bytes_grad] * k * n)
    c_sec_note(note, ops, op, scope, flops, bytes_f, out5[3], out5[0], 2.0 * flops, bytes_b, out5[4],
               out5[1] + out5[2])


cdef inline void c_sec_note_loop(double* note, const double* cand, double kernels_f,
                                 double kernels_b) noexcept nogil:
    # FFN-scope kernels (already noted) the host launches after a host-device synchronisation; none where
    # the scope replays from a CUDA graph.
    if c_sec_captures(cand[SC_graphs], SEC_SCOPE_FFN):
        return
    note[9] += kernels_f
    note[10] += kernels_b


cdef inline void c_sec_note_launch(const double* note, double* ops, double forward, double backward,
                                   double* waits) noexcept nogil:
    # What the host's launches add to a pass (waits[0], waits[1]): the host's time beyond the device's for
    # what it launches ahead, plus the whole host time of what it launches after a synchronisation; with ops
    # the "launch" row.
    cdef double host_f = note[0] * note[6] + note[2] * note[7] + note[4] * note[8]
    cdef double host_b = note[1] * note[6] + note[3] * note[7] + note[5] * note[8]
    cdef double loop_f = note[9] * note[8], loop_b = note[10] * note[8]
    cdef double* row
    waits[0] = host_f - loop_f - forward if host_f - loop_f > forward else 0.0
    waits[1] = host_b - loop_b - backward if host_b - loop_b > backward else 0.0
    waits[0] += loop_f
    waits[1] += loop_b
    if ops != NULL:
        row = ops + LO_launch * LF_COUNT
        row[LF_time_f] = waits[0]
        row[LF_time_b] = waits[1]
        row[LF_host_f] = host_f
        row[LF_host_b] = host_b


cdef inline double c_sec_ffn_pair(double rows, double width, double h, double n_ff, double n_split,
                                  const double* cand, const double* rate, double* sums, double* note, double* ops,
                                  int op, int scope) noexcept nogil:
    # A dense FFN of `width`: up (with the gate) h -> (n_ff - 1)·width/t, down width/t -> h; each
    # GEMM's times into sums, the up GEMM's first, noted as `op` of the graph scope `scope`; returns the
    # pair's forward time.
    cdef double t = cand[SC_t], forward
    cdef double g5[5]
    c_sec_mm3_noted(rows, (n_ff - 1.0) * width / t, h, n_split, cand, rate, g5, 0, 1, note, ops, op, scope)
    c_sec_add_gemm(sums, g5[0], g5[1], g5[2])
    forward = g5[0]
    c_sec_mm3_noted(rows, h, width / t, n_split, cand, rate, g5, 0, 2, note, ops, op, scope)
    c_sec_add_gemm(sums, g5[0], g5[1], g5[2])
    return forward + g5[0]


cdef inline void c_sec_check_rows(str name, Py_ssize_t rows, Py_ssize_t width, Py_ssize_t got_rows,
                                  Py_ssize_t got_width) except *:
    if got_rows != rows:
        raise ValueError(f"{name} must have {rows} rows, got {got_rows}")
    if got_rows and got_width != width:
        raise ValueError(f"{name} must have {width} columns, got {got_width}")


cdef inline void c_sec_check_len(str name, Py_ssize_t expected, Py_ssize_t got) except *:
    if got != expected:
        raise ValueError(f"{name} must have length {expected}, got {got}")
