# Seconds mode over N candidates (twin of ndcost/kernels/seconds_batch.py). Needs kernels/columns.pxi,
# kernels/seconds.pxi (c_sec_cand_ok, c_sec_stage_sums, c_sec_combine) and kernels/batch.pxi
# (c_batch_check) included before it.
#
# Each candidate is a column of a (SC_COUNT, N) matrix (gathered into a stack buffer) with the index
# of its layout in the LY_* table of ndcost.tables.layout_pool (chunk-summed counts in `pool`, slot options
# and keep masks in `slot_pool`), its layout's per-stage SX_* rows at `extras[extras_at[layout]]`,
# and its rates row `rates[rate_index[i]]`. Shapes, spans and every priced row's layout and rates
# row are checked before `nogil`; the scratch is allocated once per call, sized for the largest pp.

from libc.stdlib cimport malloc, free

# seconds_step_rates' outputs: SR_* of kernels/columns.pxi (STEP_RATE_FIELDS).

cdef inline void c_sec_step_rates(const double* stage, Py_ssize_t n_stages, const double* cand,
                                  const double* rate, double step, double* out) noexcept nogil:
    # The oracle's _step_rates: per step m·d x the stage sums; over step x devices x peak.
    cdef Py_ssize_t st
    cdef double model_flops = 0.0, hw_flops = 0.0, m = cand[SC_m], d = cand[SC_d], peak, busy, tokens
    for st in range(n_stages):
        model_flops += stage[st * SS_COUNT + SS_model_flops]
        hw_flops += stage[st * SS_COUNT + SS_hw_flops]
    model_flops = m * d * model_flops
    hw_flops = m * d * hw_flops
    peak = rate[R_peak_mm] * (d * cand[SC_t] * cand[SC_p] * cand[SC_cp])
    busy = step * peak
    tokens = cand[SC_b] * d * m * cand[SC_s]
    out[SR_mfu] = model_flops / busy if busy > 0.0 else NAN
    out[SR_hfu] = hw_flops / busy if busy > 0.0 else NAN
    out[SR_tokens_per_second] = tokens / step if step > 0.0 else NAN
    out[SR_model_flops] = model_flops


cdef inline double c_sec_price(const double* kinds, const double* skinds, const double* model, const double* smodel,
                               Py_ssize_t n_kinds, const double* cand, const double* rate, const long long* layout,
                               const double* pool, const long long* slot_pool, const double* extras, double* stage,
                               double* p_dense, double* p_expert, double* parts, double* times, double* totals,
                               double* step_rates) noexcept nogil:
    # One candidate on its layout row (LY_* fields; *extras* its SX_* rows): the stage walk (NaN stages
    # for a candidate the walk cannot price), the combine and the step rates; returns the step time.
    # The scratch (stage: pp x SS_COUNT; p_dense, p_expert, times, totals: pp) is the caller's.
    cdef Py_ssize_t p = layout[LY_pp], n_slots = layout[LY_n_slots]
    cdef const long long* slots = slot_pool + layout[LY_slots_at]
    cdef double total
    if c_sec_cand_ok(cand, rate):
        c_sec_stage_sums(kinds, skinds, model, smodel, cand, rate, pool + layout[LY_counts_at], slots,
                         slots + n_slots, extras, stage, n_kinds, n_slots, p, p_dense, p_expert)
    else:
        c_sec_fill(stage, p * SS_COUNT, NAN)
    total = c_sec_combine(stage, p, cand, parts, times, totals)
    c_sec_step_rates(stage, p, cand, rate, total, step_rates)
    return total


def seconds_step_rates(const double[:, ::1] stage, const double[::1] cand, const double[::1] rate, double step,
                       double[::1] out) -> None:
    """MFU, HFU, tokens per second and model FLOPs of a step into out[STEP_RATE_FIELDS]; see the oracle."""
    cdef Py_ssize_t n_stages = stage.shape[0]
    if n_stages and stage.shape[1] != SS_COUNT:
        raise ValueError(f"stage must have {SS_COUNT} columns, got {stage.shape[1]}")
    c_sec_check_len("cand", SC_COUNT, cand.shape[0])
    c_sec_check_len("rate", R_COUNT, rate.shape[0])
    c_sec_check_len("out", SR_COUNT, out.shape[0])
    with nogil:
        c_sec_step_rates(&stage[0, 0] if n_stages else NULL, n_stages, &cand[0], &rate[0], step, &out[0])


def seconds_estimate_batch(const double[:, ::1] kinds,          # IN (K, K_COUNT)
                           const double[:, ::1] skinds,         # IN (K, SK_COUNT)
                           const double[::1] model,             # IN (M_COUNT,)
                           const double[::1] smodel,            # IN (SM_COUNT,)
                           const double[:, :] cands,            # IN (SC_COUNT, N): a candidate per column, any strides
                           const double[:, ::1] rates,          # IN (Q, R_COUNT), Q >= 1
                           const long long[::1] rate_index,     # IN (N,)
                           const long long[::1] layout_index,   # IN (N,)
                           const long long[:, ::1] layouts,     # IN (L, LY_COUNT)
                           const double[::1] pool,              # IN
                           const long long[::1] slot_pool,      # IN
                           const double[::1] extras,            # IN (pp x SX_COUNT per layout)
                           const long long[::1] extras_at,      # IN (L,)
                           long long[::1] reason,               # IN/OUT (N,)
                           double[::1] out_step,                # OUT (N,)
                           double[:, :] out_parts,              # OUT (P_COUNT, N), any strides
                           double[:, :] out_rates,              # OUT (SR_COUNT, N), any strides
                           double[:, ::1] out_stage_times,      # OUT (N, >= max pp) or (0, 0)
                           double[:, :, ::1] out_stage_sums) -> None:  # OUT (N, >= max pp, SS_COUNT) or (0, 0, 0)
    """Seconds mode's step time of N candidates, one stage walk, combine and step rates each; see the oracle."""
    cdef Py_ssize_t n = cands.shape[1], n_kinds = kinds.shape[0], n_rates = rates.shape[0]
    cdef Py_ssize_t i, j, s, li, p, n_times, n_sums, max_p, max_pv, max_slots
    cdef double total
    cdef double cand[SC_COUNT]
    cdef double parts[P_COUNT]
    cdef double step_rates[SR_COUNT]
    cdef const long long* layout
    cdef double* scratch
    cdef double* stage
    cdef double* times
    cdef double* totals
    cdef double* p_dense
    cdef double* p_expert
    if n_kinds and kinds.shape[1] != K_COUNT:
        raise ValueError(f"kinds must have {K_COUNT} columns, got {kinds.shape[1]}")
    c_sec_check_rows("skinds", n_kinds, SK_COUNT, skinds.shape[0], skinds.shape[1])
    c_sec_check_len("model", M_COUNT, model.shape[0])
    c_sec_check_len("smodel", SM_COUNT, smodel.shape[0])
    if cands.shape[0] != SC_COUNT:
        raise ValueError(f"cands must have {SC_COUNT} rows (a candidate per column), got {cands.shape[0]}")
    if n_rates < 1 or rates.shape[1] != R_COUNT:
        raise ValueError(f"rates must be (Q, {R_COUNT}) with Q >= 1")
    c_sec_check_len("rate_index", n, rate_index.shape[0])
    c_sec_check_len("extras_at", layouts.shape[0], extras_at.shape[0])
    c_sec_check_len("out_step", n, out_step.shape[0])
    if out_parts.shape[0] != P_COUNT or out_parts.shape[1] != n:
        raise ValueError(f"out_parts must be ({P_COUNT}, {n})")
    if out_rates.shape[0] != SR_COUNT or out_rates.shape[1] != n:
        raise ValueError(f"out_rates must be ({SR_COUNT}, {n})")
    c_batch_check(n_kinds, n, layout_index, layouts, pool.shape[0], slot_pool.shape[0], reason, cands,
                  SC_p, SC_vp, &max_p, &max_pv, &max_slots)
    for li in range(layouts.shape[0]):
        if extras_at[li] < 0 or extras_at[li] + layouts[li, LY_pp] * SX_COUNT > extras.shape[0]:
            raise ValueError(f"extras_at[{li}] must hold a span of pp x {SX_COUNT} within extras")
    for i in range(n):
        if reason[i] < RS_COUNT and not 0 <= rate_index[i] < n_rates:
            raise ValueError(f"rate_index[{i}] must be a rates row in [0, {n_rates}), got {rate_index[i]}")
    n_times = out_stage_times.shape[1] if out_stage_times.shape[0] else 0
    if out_stage_times.shape[0] not in (0, n) or (out_stage_times.shape[0] and n_times < max_p):
        raise ValueError(f"out_stage_times must be (0, 0) or ({n}, >= the largest pp ({max_p}))")
    n_sums = out_stage_sums.shape[1] if out_stage_sums.shape[0] else 0
    if out_stage_sums.shape[0] not in (0, n) or (out_stage_sums.shape[0] and (
            n_sums < max_p or out_stage_sums.shape[2] != SS_COUNT)):
        raise ValueError(f"out_stage_sums must be (0, 0, 0) or ({n}, >= the largest pp ({max_p}), {SS_COUNT})")
    # one block: stage (pp x SS_COUNT), then times, totals, p_dense, p_expert (pp each)
    scratch = <double*>malloc(max_p * (SS_COUNT + 4) * sizeof(double))
    if scratch == NULL:
        raise MemoryError()
    stage = scratch
    times = stage + max_p * SS_COUNT
    totals = times + max_p
    p_dense = totals + max_p
    p_expert = p_dense + max_p
    try:
        with nogil:
            for i in range(n):
                if reason[i] >= RS_COUNT:
                    # not priced: the row's outputs NaN, written as a priced row's are (no stage: p = 0)
                    total = NAN
                    p = 0
                    c_sec_fill(parts, P_COUNT, NAN)
                    c_sec_fill(step_rates, SR_COUNT, NAN)
                else:
                    li = layout_index[i]
                    layout = &layouts[li, 0]
                    p = layout[LY_pp]
                    for j in range(SC_COUNT):
                        cand[j] = cands[j, i]
                    total = c_sec_price(&kinds[0, 0], &skinds[0, 0], &model[0], &smodel[0], n_kinds, cand,
                                        &rates[rate_index[i], 0], layout, &pool[0], &slot_pool[0],
                                        &extras[extras_at[li]], stage, p_dense, p_expert, parts, times, totals,
                                        step_rates)
                out_step[i] = total
                for j in range(P_COUNT):
                    out_parts[j, i] = parts[j]
                for j in range(SR_COUNT):
                    out_rates[j, i] = step_rates[j]
                for s in range(n_times):
                    out_stage_times[i, s] = times[s] if s < p else NAN
                for s in range(n_sums):
                    for j in range(SS_COUNT):
                        out_stage_sums[i, s, j] = stage[s * SS_COUNT + j] if s < p else NAN
                if total != total and reason[i] == RS_ok:
                    reason[i] = RS_undefined
    finally:
        free(scratch)
