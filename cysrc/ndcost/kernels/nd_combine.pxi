# ND's score in ND units, part 3 of 3 (twin of ndcost/kernels/nd_combine.py): the stage and pipeline
# combination and the ratios (seed estimate_stage, _save_recompute, estimate_pipeline,
# estimate_p2p, apply_regression_coefficients; docs/ND_MODEL.md §2.7-§2.11). Needs
# kernels/columns.pxi, kernels/pipeline.pxi (c_nd_pipeline_time, c_nd_straggler,
# c_nd_p2p_time) and kernels/nd_ops.pxi (c_nd_positive) included before it.

from libc.stdlib cimport malloc, free

# ND's estimator option codes (RATIO_*, REC_*, P2P_*; docs/ND_MODEL.md §2.7), ND_BACKWARD_RATIO and ND_MAX_COUNT
# (2**31: larger m or vp is NaN, no integer overflow): kernels/codes.pxi.


cdef inline void c_nd_weights(const double* model, const double* cand, const double* options,
                              double* comp_w, double* comm_w) noexcept nogil:
    # (comp_w, comm_w) of ND's ratio type (seed estimate_stage, get_dynamic_ratio; §2.7).
    cdef double ratio_type = options[O_ratio_type]
    cdef double h, s, width
    comp_w[0] = 1.0
    if ratio_type == RATIO_DYNAMIC:
        # 1.5·(hff + s)·8192/(h + s), the routed width in place of hff when the MODEL has experts.
        # The text model's h, hff and the candidate's s, never a submodule's: ND times a
        # multimodal model's stages on its main submodule (seed: timed = mm_ccfgs[mm_main]).
        h = model[M_h]
        s = cand[C_s]
        width = model[M_hff_exp] if model[M_n_exp] > 1.0 else model[M_hff]
        if not h + s > 0.0:
            comm_w[0] = NAN
        else:
            comm_w[0] = 3.0 / 2.0 * (width + s) * (8192.0 / (h + s))
    elif ratio_type == RATIO_STATIC:
        comm_w[0] = options[O_static_ratio]
    elif ratio_type == RATIO_COMPUTE_ONLY:
        comm_w[0] = 0.0
    elif ratio_type == RATIO_COMM_ONLY:
        comp_w[0] = 0.0
        comm_w[0] = 1.0
    else:
        comp_w[0] = NAN
        comm_w[0] = NAN


cdef double c_nd_combine(const double* stage, Py_ssize_t n_stages, const double* cand, const double* model,
                         const double* options, const double* stage_savings, Py_ssize_t n_savings,
                         long long stage_focused, double* parts, double* stage_times,
                         double* reruns) noexcept nogil:
    # ND's score from the per-stage sums (seed estimate_stage, _save_recompute, estimate_pipeline,
    # estimate_p2p; §2.7-§2.10) on raw pointers: stage (n_stages, S_COUNT) row-major, parts
    # (P_COUNT), stage_times and the caller's scratch reruns (n_stages each). The caller has
    # checked the lengths, n_savings in {0, n_stages} and stage_focused < n_stages.
    cdef Py_ssize_t i, focus
    cdef double m, vp, comp_w, comm_w, rec_type, comp, comm, perf, recomp, recomm, rerun, time
    cdef double pipeline, mf, forward, fw, bw, rec, dp, dp_reduce, tp, ep, cp, time_sum, bubble
    cdef double p2p, slowest
    cdef long long micro_batches, vpp
    cdef bint rec_comp, rec_comm, rec_known
    cdef const double* row
    m = cand[C_m]
    vp = cand[C_vp]
    if n_stages == 0 or not (1.0 <= m <= ND_MAX_COUNT and 1.0 <= vp <= ND_MAX_COUNT):
        for i in range(P_COUNT):
            parts[i] = NAN
        for i in range(n_stages):
            stage_times[i] = NAN
        return NAN
    micro_batches = <long long>m
    vpp = <long long>vp
    c_nd_weights(model, cand, options, &comp_w, &comm_w)
    rec_type = options[O_rec_type]
    # RecType: which recompute lists are priced; an unpriced one is [0]·p (seed _stage_parts).
    rec_comp = rec_type == REC_WITH or rec_type == REC_COMPUTE_ONLY
    rec_comm = rec_type == REC_WITH or rec_type == REC_COMM_ONLY
    rec_known = rec_comp or rec_comm or rec_type == REC_NONE
    for i in range(n_stages):
        row = stage + i * S_COUNT
        comp = row[S_comp]
        comm = row[S_tp] + row[S_dp] + row[S_ep] + row[S_cp]
        perf = comp_w * comp + comm_w * comm
        recomp = row[S_recomp] if rec_comp else 0.0
        recomm = row[S_recomm] if rec_comm else 0.0
        # "ignores comm recomp, to improve": the re-run's share, a third being the forward's.
        rerun = (c_nd_positive(comp_w * (recomp - comp))
                 + c_nd_positive(comm_w * (recomm - comm))) / (1.0 + ND_BACKWARD_RATIO)
        if not rec_known:
            rerun = NAN
        reruns[i] = rerun
        time = perf + rerun
        if n_savings:
            time = time - stage_savings[i]               # _save_recompute
        stage_times[i] = time

    pipeline = c_nd_pipeline_time(stage_times, n_stages, micro_batches, vpp)
    focus = <Py_ssize_t>stage_focused if stage_focused >= 0 else c_nd_straggler(stage_times, n_stages)
    row = stage + focus * S_COUNT
    mf = <double>micro_batches
    forward = comp_w * row[S_comp] / (1.0 + ND_BACKWARD_RATIO)   # FW = comp_w·comp/3
    fw = forward * mf
    bw = forward * ND_BACKWARD_RATIO * mf                        # BW = 2·FW
    rec = reruns[focus] - stage_savings[focus] if n_savings else reruns[focus]
    rec = rec * mf
    dp = comm_w * row[S_dp] * mf
    dp_reduce = comm_w * row[S_dp_reduce] * mf
    tp = comm_w * row[S_tp] * mf
    ep = comm_w * row[S_ep] * mf
    cp = comm_w * row[S_cp] * mf
    # The bubble is the pipeline less the parts (DP still holding its all-reduce), so that
    # the parts and the bubble sum to the total; then DP_COMM gives DP_REDUCE its share.
    time_sum = dp + tp + ep + cp + fw + bw + rec
    bubble = pipeline - time_sum
    if bubble < 0.0:
        # never a negative part: a step is at least its straggler's work (see the oracle)
        bubble = 0.0
        pipeline = time_sum
    dp = dp - dp_reduce
    p2p = 0.0
    if options[O_p2p] == P2P_MANUAL:
        slowest = stage_times[0]
        for i in range(n_stages):
            if stage_times[i] > slowest:
                slowest = stage_times[i]
        p2p = c_nd_p2p_time(n_stages, micro_batches, vpp, slowest, cand[C_sp], options[O_p2p_ratio])
    parts[P_fw_compute] = fw
    parts[P_bw_compute] = bw
    parts[P_recompute] = rec
    parts[P_dp_comm] = dp
    parts[P_dp_reduce] = dp_reduce
    parts[P_tp_comm] = tp
    parts[P_ep_comm] = ep
    parts[P_cp_comm] = cp
    parts[P_pp_comm] = p2p
    parts[P_bubble] = bubble
    return pipeline + p2p


cdef double c_nd_apply_ratios(const double* parts, const double* ratios, double* out) noexcept nogil:
    # Each part × its ratio, a zero part staying exactly 0; the score in ms as ND's real parts:
    # COMP (FW + BW + REC) + DP_WAIT (DP + DP_REDUCE) + MP + EP + CP + PP_WAIT (BUBBLE + PP_COMM)
    # (seed apply_regression_coefficients; §2.10, §2.11).
    cdef Py_ssize_t i
    cdef double comp, dp_wait, pp_wait
    for i in range(P_COUNT):
        out[i] = 0.0 if parts[i] == 0.0 else parts[i] * ratios[i]
    comp = out[P_fw_compute] + out[P_bw_compute] + out[P_recompute]
    dp_wait = out[P_dp_comm] + out[P_dp_reduce]
    pp_wait = out[P_bubble] + out[P_pp_comm]
    return comp + dp_wait + out[P_tp_comm] + out[P_ep_comm] + out[P_cp_comm] + pp_wait

def nd_combine(const double[:, ::1] stage, const double[::1] cand, const double[::1] model,
               const double[::1] options, const double[::1] stage_savings, long long stage_focused,
               double[::1] parts, double[::1] stage_times) -> float:
    """ND's score from the per-stage sums of nd_stage_sums (docs/ND_MODEL.md §2.7-§2.10).

    p = the rows of *stage*; stage_savings: length p or 0; stage_focused: −1 for the straggler.
    *parts* (PART_NAMES order) gets that stage's parts × m, P2P and the bubble, summing to the
    returned total = pipeline + P2P. *stage_times* (length p) gets each stage's time per
    micro-batch, recompute and savings included. No stage, or m or vp outside [1, 2**31], gives NaN.
    """
    cdef Py_ssize_t n_stages = stage.shape[0], n_savings = stage_savings.shape[0]
    cdef double total
    cdef double* reruns
    if n_stages and stage.shape[1] != S_COUNT:
        raise ValueError(f"stage must have {S_COUNT} columns, got {stage.shape[1]}")
    if cand.shape[0] != C_COUNT:
        raise ValueError(f"cand must have length {C_COUNT}, got {cand.shape[0]}")
    if model.shape[0] != M_COUNT:
        raise ValueError(f"model must have length {M_COUNT}, got {model.shape[0]}")
    if options.shape[0] != O_COUNT:
        raise ValueError(f"options must have length {O_COUNT}, got {options.shape[0]}")
    if parts.shape[0] != P_COUNT:
        raise ValueError(f"parts must have length {P_COUNT}, got {parts.shape[0]}")
    if stage_times.shape[0] != n_stages:
        raise ValueError(f"stage_times must have length {n_stages}, got {stage_times.shape[0]}")
    if n_savings != 0 and n_savings != n_stages:
        raise ValueError(f"stage_savings must have length 0 or {n_stages}, got {n_savings}")
    if stage_focused >= n_stages:
        raise ValueError(f"stage_focused must be -1 or a stage in [0, {n_stages}), got {stage_focused}")
    reruns = <double*>malloc((n_stages if n_stages > 0 else 1) * sizeof(double))
    if reruns == NULL:
        raise MemoryError()
    try:
        with nogil:
            total = c_nd_combine(&stage[0, 0] if n_stages else NULL, n_stages, &cand[0], &model[0],
                                 &options[0], &stage_savings[0] if n_savings else NULL, n_savings,
                                 stage_focused, &parts[0], &stage_times[0] if n_stages else NULL, reruns)
    finally:
        free(reruns)
    return total


def nd_apply_ratios(const double[::1] parts, const double[::1] ratios, double[::1] out) -> float:
    """Each part × its ratio, a zero part staying exactly 0; returns the score in ms (docs/ND_MODEL.md §2.10, §2.11)."""
    cdef double total
    if parts.shape[0] != P_COUNT:
        raise ValueError(f"parts must have length {P_COUNT}, got {parts.shape[0]}")
    if ratios.shape[0] != P_COUNT:
        raise ValueError(f"ratios must have length {P_COUNT}, got {ratios.shape[0]}")
    if out.shape[0] != P_COUNT:
        raise ValueError(f"out must have length {P_COUNT}, got {out.shape[0]}")
    with nogil:
        total = c_nd_apply_ratios(&parts[0], &ratios[0], &out[0])
    return total
