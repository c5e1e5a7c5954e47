# Seconds mode (twin of ndcost/kernels/seconds.py): a step priced from the device's rates and the
# links each collective crosses; here the stage sums and their combination into the step. Every
# formula, constant and source is stated once, in the oracle; this file repeats each computation
# in the oracle's order so that the two agree to rounding.
# Needs kernels/columns.pxi and kernels/seconds_ops.pxi, seconds_comm.pxi, seconds_layer.pxi included
# before it.

from libc.stdlib cimport malloc, free

# The schedule codes of SCHEDULES (SEC_1F1B, ...), the gather switch's bit of a keep mask (BIT_gather) and the
# output head's constants (SEC_CE_*, SEC_SOFTCAP_BYTES): kernels/codes.pxi.


cdef inline double c_sec_chunk_calls(const double* cand) noexcept nogil:
    # The oracle's _chunk_calls: the forward (and backward) calls a micro-batch makes on one device.
    cdef double schedule = cand[SC_schedule]
    if schedule == SEC_INTERLEAVED:
        return cand[SC_vp]
    if schedule == SEC_SEQ1F1B:
        return cand[SC_vp] * cand[SC_seq_split]
    return 1.0


cdef inline void c_sec_head(const double* cand, const double* rate, double tokens, double h, double v,
                            double softcap, double* out3) noexcept nogil:
    # One output head on this rank: logits GEMM and Megatron's vocab-parallel cross entropy.
    cdef double t = cand[SC_t], n_split = cand[SC_seq_split], logits, forward, backward
    cdef double bc = cand[SC_bytes_c], cast, weight
    cdef double g3[5]
    c_sec_mm3(tokens / n_split, v / t, h, n_split, cand, rate, g3, 1, 0)
    logits = tokens * v / t
    if cand[SC_autocast] != 0.0:
        # under torch.autocast: the loss on fp32 logits, the head's input and weight cast each forward and
        # cast back in backward (the oracle's _head)
        cast = (SEC_AUTOCAST_FP32_BYTES + bc) * tokens * h
        weight = (SEC_AUTOCAST_FP32_BYTES + bc) * v * h / t
        forward = (g3[0] + c_sec_pass((SEC_AUTOCAST_CE_FORWARD_FP32_BYTES + bc) * logits,
                                      SEC_AUTOCAST_CE_FORWARD_KERNELS * n_split, rate)
                   + c_sec_pass(cast, n_split, rate) + c_sec_pass(weight, 1.0, rate))
        backward = (g3[1] + c_sec_pass((SEC_AUTOCAST_CE_BACKWARD_FP32_BYTES + bc) * logits,
                                       SEC_AUTOCAST_CE_BACKWARD_KERNELS * n_split, rate)
                    + c_sec_pass(cast, n_split, rate))
        g3[2] += c_sec_pass(weight, 1.0, rate)
    else:
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
    cdef double g3[5]
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
    cdef double tp_f, tp_b, cp_f, cp_b, ep_f, ep_b, rc, rc_tp, rc_cp, rc_flops, count
    cdef double ov_slow = rate[R_ov_slow]
    cdef double ep_mode = cand[SC_ep_mode], ep_sm = ov_slow, paired_ep, q, rc_ep, copies
    cdef bint full_rc
    cdef bint blocking = cand[SC_ep_disp] == SEC_DISPATCH_HYBRIDEP
    cdef double census_att, census_ffn
    cdef double table, table_kernels
    cdef double x_sp, db, full, moved, kernels, heads, norm, n_mtp, chunks, piece, step
    cdef double zero, bg, bp, edp, ov_dp, ov_fsdp, n_dp, hbm, dense, expert, layers, grads, params
    cdef double z3_fetch_bw, capped, gathers, rerun, calls
    cdef bint z3_rc_gather, z3_grad_ar
    cdef double backward, backward_traffic, shards, local, shared_ar
    cdef long long reduce_op
    cdef bint tied_here
    cdef double layer[SL_COUNT]
    cdef double head[3]
    cdef double g3[5]
    cdef double edges[5]
    cdef const double* row_in
    cdef double* row
    c_sec_fill(out, n_stages * SS_COUNT, 0.0)
    c_sec_fill(p_dense, n_stages, 0.0)
    c_sec_fill(p_expert, n_stages, 0.0)
    # DeepEP's (HybridEP's) SMs, taken from compute while its kernels run beside it, NCCL's all-to-all slowing it as
    # any collective does (ov_slow); HybridEP's dispatch blocks the host: its pair's middle phase runs serially
    if (cand[SC_ep_disp] == SEC_DISPATCH_DEEPEP or blocking) and rate[R_sms] > 0.0:
        ep_sm = cand[SC_ep_sms] / rate[R_sms]
        ep_sm = ep_sm if ep_sm < 1.0 else 1.0

    # body layers
    for k in range(n_kinds):
        used = False
        for st in range(n_stages):
            for o in range(n_slots):
                if counts[st * n_kinds * n_slots + k * n_slots + o] != 0.0:
                    used = True
        if not used:
            continue
        c_sec_layer(&kinds[k * K_COUNT], &skinds[k * SK_COUNT], model, smodel, cand, rate, layer, NULL)
        tp_f = c_sec_exposed(layer[SL_tp_f], layer[SL_gemm_f], ov_tp)
        tp_b = c_sec_exposed(layer[SL_tp_b], layer[SL_gemm_b], ov_tp)
        cp_f = c_sec_exposed_slowed(layer[SL_cp_f], layer[SL_core_f], ov_cp, ov_slow)
        cp_b = c_sec_exposed_slowed(layer[SL_cp_b], layer[SL_core_b], ov_cp, ov_slow)
        ep_f = layer[SL_ep_f]
        ep_b = layer[SL_ep_b]
        if ep_mode == SEC_EP_NONE:
            ep_f = c_sec_exposed_slowed(ep_f, layer[SL_fw], ov_ep, ep_sm)
            ep_b = c_sec_exposed_slowed(ep_b, layer[SL_bw] + layer[SL_bw_w], ov_ep, ep_sm)
        paired_ep = 0.0 if ep_mode == SEC_EP_NONE else c_sec_paired_layer(layer, ov_ep, ep_sm,
                                                                           ep_mode == SEC_EP_DUALPIPE, blocking)
        for o in range(n_slots):
            option = slot_option[o]
            rc = 0.0
            rc_tp = 0.0
            rc_cp = 0.0
            rc_flops = 0.0
            full_rc = option == OPTION_FULL
            if full_rc:
                rc = layer[SL_fw]
                rc_tp = tp_f
                rc_cp = cp_f
                rc_flops = layer[SL_flops_f] + layer[SL_flops_core_extra]
            elif option == OPTION_SELECTIVE:
                mask = slot_mask[o]
                for bit in range(8):
                    if (mask >> bit) & 1:
                        continue
                    if bit == BIT_gather:
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
                q = 0.0 if ep_mode == SEC_EP_NONE else c_sec_paired_share(cand, n_stages, st)
                rc_ep = q * ep_sm * layer[SL_ep_f] + (1.0 - q) * ep_f if full_rc else 0.0
                row[SS_ep] += count * (q * paired_ep + (1.0 - q) * (ep_f + ep_b) + rc_ep)
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
            if cand[SC_autocast] != 0.0:
                # under torch.autocast: the fp32 rows looked up in fp32; the table's dense fp32 gradient, a tied
                # head's gradient added to it (the oracle's comment)
                moved = 2.0 * SEC_AUTOCAST_FP32_BYTES * tokens * h
                table = SEC_AUTOCAST_FP32_BYTES * v * h / t
                table_kernels = 1.0
                if cand[SC_tie_emb] != 0.0:
                    table += 3.0 * SEC_AUTOCAST_FP32_BYTES * v * h / t
                    table_kernels += 1.0
                row[SS_bw_w] += c_sec_pass(table, table_kernels, rate)
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
    if rate[R_grad_reduce_bytes] > 0.0:
        bg = rate[R_grad_reduce_bytes]      # the reduction's own width (Rates.grad_reduce_bytes)
    calls = c_sec_chunk_calls(cand)         # each chunk's forward and backward a call (see the oracle)
    edp = cand[SC_edp]
    defer = cand[SC_defer_grads] != 0.0
    ov_dp = cand[SC_ov_dp]
    ov_fsdp = cand[SC_ov_fsdp]
    z3_fetch_bw = rate[R_z3_fetch_bw]
    z3_rc_gather = rate[R_z3_rc_gather] != 0.0
    z3_grad_ar = rate[R_z3_grad_ar] != 0.0
    n_dp = d * cp
    hbm = rate[R_hbm_eff] * rate[R_hbm_bw]
    copies = 2.0 if cand[SC_schedule] == SEC_DUALPIPE else 1.0    # DualPipe's two copies of the parameters
    for st in range(n_stages):
        row = &out[st * SS_COUNT]
        row[SS_ov_slow] = ov_slow       # for c_sec_combine's data-parallel tail
        dense = copies * p_dense[st]
        expert = copies * p_expert[st]
        layers = row[SS_layers] / calls    # a call's layers: each call exposes one layer's traffic
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
                                                           ov_fsdp, layers, ov_slow)
                backward_traffic = params + (0.0 if defer else grads)
            elif not defer:
                # reduced every micro-batch, then resharded: each micro-batch's forward gathers again
                row[SS_dp_mb_gather] += c_sec_exposed_tail(params, row[SS_fw], ov_fsdp, layers, ov_slow)
                backward_traffic = grads
            else:
                row[SS_dp_gather] += params
                backward_traffic = 0.0
            if backward_traffic > 0.0:
                row[SS_dp_mb_reduce] += c_sec_exposed_tail(backward_traffic, backward, ov_fsdp, layers, ov_slow)
            if defer:
                row[SS_dp_reduce] += grads
        elif zero == 2.0 and not defer:
            row[SS_dp_mb_reduce] += c_sec_exposed_tail(grads, backward, ov_dp, layers, ov_slow)
            row[SS_dp_gather] += params
        else:
            row[SS_dp_reduce] += grads
            if zero >= 1.0:
                row[SS_dp_gather] += params
        shards = cand[SC_zero_ranks] if zero >= 1.0 else 1.0
        local = dense / shards + expert / (edp if zero >= 1.0 else 1.0)
        if zero >= 1.0:
            local /= copies
        if local > 0.0:
            row[SS_opt] += cand[SC_bytes_opt] * local / hbm + rate[R_kernel_s]

    # tied embedding and output on two stages
    if cand[SC_tie_emb] != 0.0 and emb_stage >= 0 and out_stage >= 0 and emb_stage != out_stage:
        shared_ar = c_sec_collective(SEC_ALL_REDUCE, smodel[SM_p_embed] / t * bg, 2.0,
                                     (out_stage - emb_stage) * t * cp * d, rate)
        out[emb_stage * SS_COUNT + SS_dp_reduce] += shared_ar
        out[out_stage * SS_COUNT + SS_dp_reduce] += shared_ar


cdef inline double c_sec_at(const double* stage, Py_ssize_t n_stages, Py_ssize_t st, Py_ssize_t j,
                            bint pair) noexcept nogil:
    # A stage's field, or DualPipe's device's: the mean of stage st and stage p-1-st (the oracle's _dualpipe_rows)
    if pair:
        return 0.5 * (stage[st * SS_COUNT + j] + stage[(n_stages - 1 - st) * SS_COUNT + j])
    return stage[st * SS_COUNT + j]


cdef inline double c_sec_combine(const double* stage, Py_ssize_t n_stages, const double* cand,
                                 double* parts, double* stage_times, double* totals) noexcept nogil:
    # The oracle's seconds_combine after its checks.
    cdef Py_ssize_t st, straggler
    cdef double m = cand[SC_m], runs = cand[SC_pp_runs]
    cdef double total, slowest, summed, schedule, chunks, pipeline
    cdef double backward, bubble, ov_dp, ov_gather, slack, tail, layers, reduce_, gather
    cdef double optimizer, own, late, t_reduce = 0.0, t_opt = 0.0, t_gather = 0.0, scale
    cdef double dp_reduce, dp_gather, slow
    cdef bint ok = n_stages >= 1 and m >= 1.0 and runs >= 1.0
    cdef bint pair, dualpipe
    schedule = cand[SC_schedule]
    pair = schedule == SEC_DUALPIPE
    for st in range(n_stages):
        total = (c_sec_at(stage, n_stages, st, SS_fw, pair) + c_sec_at(stage, n_stages, st, SS_bw, pair)
                 + c_sec_at(stage, n_stages, st, SS_bw_w, pair) + c_sec_at(stage, n_stages, st, SS_rc, pair)
                 + c_sec_at(stage, n_stages, st, SS_tp, pair) + c_sec_at(stage, n_stages, st, SS_cp, pair)
                 + c_sec_at(stage, n_stages, st, SS_ep, pair) + c_sec_at(stage, n_stages, st, SS_pp, pair)
                 + c_sec_at(stage, n_stages, st, SS_dp_mb_gather, pair)
                 + c_sec_at(stage, n_stages, st, SS_dp_mb_reduce, pair))
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
    chunks = c_sec_chunk_calls(cand)
    dualpipe = schedule == SEC_ZERO_BUBBLE_V or schedule == SEC_DUALPIPEV or schedule == SEC_DUALPIPE
    if dualpipe:
        bubble = (2.0 * slowest - c_sec_at(stage, n_stages, straggler, SS_fw, pair)
                  - 3.0 * c_sec_at(stage, n_stages, straggler, SS_bw_w, pair))
        bubble = bubble if bubble > 0.0 else 0.0
        if schedule == SEC_DUALPIPE:
            bubble *= n_stages / 2.0 - 1.0
        else:
            bubble *= (n_stages - 1.0) / 2.0
        pipeline = m * slowest + runs * bubble
    else:
        pipeline = m * slowest + runs * (summed - slowest) / chunks     # each schedule run fills and drains
    ov_dp = cand[SC_ov_dp]
    ov_gather = cand[SC_ov_dp_gather]
    slack = 0.0
    tail = -1.0
    for st in range(n_stages):
        layers = c_sec_at(stage, n_stages, st, SS_layers, pair)
        backward = (c_sec_at(stage, n_stages, st, SS_bw, pair) + c_sec_at(stage, n_stages, st, SS_bw_w, pair)
                    + c_sec_at(stage, n_stages, st, SS_rc, pair)) / chunks
        dp_reduce = c_sec_at(stage, n_stages, st, SS_dp_reduce, pair)
        dp_gather = c_sec_at(stage, n_stages, st, SS_dp_gather, pair)
        slow = c_sec_at(stage, n_stages, st, SS_ov_slow, pair)
        reduce_ = c_sec_exposed_tail(dp_reduce, backward, ov_dp, layers, slow)
        gather = c_sec_exposed_tail(dp_gather, c_sec_at(stage, n_stages, st, SS_fw, pair) / chunks, ov_gather, layers,
                                    slow)
        optimizer = c_sec_at(stage, n_stages, st, SS_opt, pair)
        own = reduce_ + optimizer + gather
        stage_times[st] = m * totals[st] + own
        late = own - (0.0 if dualpipe else slack)
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
    parts[P_fw_compute] = m * c_sec_at(stage, n_stages, straggler, SS_fw, pair)
    parts[P_bw_compute] = (m * (c_sec_at(stage, n_stages, straggler, SS_bw, pair)
                                + c_sec_at(stage, n_stages, straggler, SS_bw_w, pair)) + scale * t_opt)
    parts[P_recompute] = m * c_sec_at(stage, n_stages, straggler, SS_rc, pair)
    parts[P_dp_comm] = m * c_sec_at(stage, n_stages, straggler, SS_dp_mb_gather, pair) + scale * t_gather
    parts[P_dp_reduce] = m * c_sec_at(stage, n_stages, straggler, SS_dp_mb_reduce, pair) + scale * t_reduce
    parts[P_tp_comm] = m * c_sec_at(stage, n_stages, straggler, SS_tp, pair)
    parts[P_ep_comm] = m * c_sec_at(stage, n_stages, straggler, SS_ep, pair)
    parts[P_cp_comm] = m * c_sec_at(stage, n_stages, straggler, SS_cp, pair)
    parts[P_pp_comm] = m * c_sec_at(stage, n_stages, straggler, SS_pp, pair)
    parts[P_bubble] = pipeline - m * slowest
    return pipeline + tail


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
