# One candidate in one call (twin of ndcost/kernels/one.py): what estimate() asks of the batch kernels for
# a batch of one -- the unit's price (ND's score or seconds mode) and the memory model -- without a
# batch's per-row index arrays, reason codes and second call; the model's tables and the layout come
# held in one object (one_tables), built once per model and layout. Needs kernels/batch.pxi
# (c_layout_row_check, c_nd_price, c_candidate_memory, MemScratch) and kernels/seconds_batch.pxi
# (c_sec_price) included before it.

# Where the kernels write their scalars in `out`, in ndcost.kernels.one.ONE_FIELDS order
# (nd_estimate_one: the first ONE_rates of them).
cdef enum:
    ONE_step = 0
    ONE_peak = 1
    ONE_parts = 2
    ONE_rates = 2 + P_COUNT
    ONE_COUNT = 2 + P_COUNT + SR_COUNT


from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_AsDouble, PyFloat_CheckExact
from cpython.long cimport PyLong_AsDouble, PyLong_CheckExact


cdef class _OneTables:
    # A model's tables and one layout, for the one-candidate kernels: their buffers acquired and
    # their shapes checked once (one_tables), so a call acquires only its candidate and its outputs
    # (most of a one-candidate call's cost was acquiring twelve buffers).
    cdef const double[:, ::1] kinds, skinds, mkinds
    cdef const double[::1] model, smodel, mmodel, pool, extras
    cdef const long long[::1] layout, slot_pool
    cdef Py_ssize_t n_kinds, p, vp, n_slots


def one_tables(const double[:, ::1] kinds,          # IN (K, K_COUNT)
               const double[:, ::1] skinds,         # IN (K, SK_COUNT)
               const double[::1] model,             # IN (M_COUNT,)
               const double[::1] smodel,            # IN (SM_COUNT,)
               const double[:, ::1] mkinds,         # IN (K, MK_COUNT)
               const double[::1] mmodel,            # IN (MM_COUNT,)
               const long long[::1] layout,         # IN (LY_COUNT,)
               const double[::1] pool,              # IN
               const long long[::1] slot_pool,      # IN
               const double[::1] extras):           # IN (>= pp x SX_COUNT)
    """The tables the one-candidate kernels read, checked and held; see the oracle."""
    cdef Py_ssize_t n_kinds = kinds.shape[0]
    cdef _OneTables t
    if n_kinds < 1 or kinds.shape[1] != K_COUNT:
        raise ValueError(f"kinds must be (K, {K_COUNT}) with K >= 1")
    c_sec_check_rows("skinds", n_kinds, SK_COUNT, skinds.shape[0], skinds.shape[1])
    c_sec_check_len("model", M_COUNT, model.shape[0])
    if not (0.0 <= model[M_default_kind] < n_kinds and model[M_default_kind] == floor(model[M_default_kind])):
        raise ValueError(f"model[default_kind] must be a kind row in [0, {n_kinds})")
    c_sec_check_len("smodel", SM_COUNT, smodel.shape[0])
    c_sec_check_rows("mkinds", n_kinds, MK_COUNT, mkinds.shape[0], mkinds.shape[1])
    c_sec_check_len("mmodel", MM_COUNT, mmodel.shape[0])
    c_sec_check_len("layout", LY_COUNT, layout.shape[0])
    c_layout_row_check(&layout[0], 0, n_kinds, pool.shape[0], slot_pool.shape[0])
    if extras.shape[0] < layout[LY_pp] * SX_COUNT:
        raise ValueError(f"extras must hold pp x {SX_COUNT} values")
    t = _OneTables.__new__(_OneTables)
    t.kinds, t.skinds, t.mkinds = kinds, skinds, mkinds
    t.model, t.smodel, t.mmodel, t.pool, t.extras = model, smodel, mmodel, pool, extras
    t.layout, t.slot_pool = layout, slot_pool
    t.n_kinds, t.p, t.vp, t.n_slots = n_kinds, layout[LY_pp], layout[LY_vpp], layout[LY_n_slots]
    return t


cdef int c_one_cand(tuple values, Py_ssize_t n, double* cand) except -1:
    # The candidate as estimate() builds it -- Python numbers, converted here as struct's "d" would
    # (PyFloat_AsDouble): packing them into a buffer first cost a fresh spec more than the kernel.
    cdef Py_ssize_t i
    cdef object value
    if len(values) != n:
        raise ValueError(f"cand must have length {n}, got {len(values)}")
    for i in range(n):
        value = values[i]
        if PyFloat_CheckExact(value):
            cand[i] = PyFloat_AS_DOUBLE(value)
        elif PyLong_CheckExact(value):
            cand[i] = PyLong_AsDouble(value)     # what float(int) does, without the float object
        else:
            cand[i] = PyFloat_AsDouble(value)
    return 0


cdef int c_one_check(_OneTables t, const double* cand, Py_ssize_t n_cand, Py_ssize_t at_p, Py_ssize_t at_vp,
                     Py_ssize_t n_out_stage_times, bint with_memory, Py_ssize_t n_out_stages,
                     Py_ssize_t out_stages_columns) except -1:
    # What both kernels check per call: the candidate's degrees are its layout's, the outputs hold pp stages.
    if cand[at_p] != <double>t.p or cand[at_vp] != <double>t.vp:
        raise ValueError("cand must have the pp and vpp of its layout")
    if n_out_stage_times < t.p:
        raise ValueError(f"out_stage_times must have length >= pp ({t.p})")
    if with_memory and (cand[n_cand + MC_p] != <double>t.p or cand[n_cand + MC_vp] != <double>t.vp):
        raise ValueError("cand's memory part must have the pp and vpp of its layout")
    if out_stages_columns != _MEM_COLUMNS or (with_memory and n_out_stages < t.p):
        raise ValueError(f"out_stages must be (0, {_MEM_COLUMNS}) or (>= pp ({t.p}), {_MEM_COLUMNS})")
    return 0


def seconds_estimate_one(_OneTables tables not None,   # IN one_tables(...)
                         tuple cand,                   # IN (SC_COUNT + MC_COUNT,) or (SC_COUNT,) numbers
                         const double[::1] rate,       # IN (R_COUNT,)
                         double reserve,
                         double[::1] out,                     # OUT (ONE_COUNT,)
                         double[::1] out_stage_times,         # OUT (>= pp,)
                         double[:, ::1] out_stage_sums,       # OUT (>= pp, SS_COUNT)
                         double[:, ::1] out_stages) -> None:  # OUT (>= pp, 8), or (0, 8): no memory
    """Seconds mode and memory of one candidate; see the oracle."""
    cdef _OneTables t = tables
    cdef Py_ssize_t n_kinds = t.n_kinds, p = t.p, vp = t.vp, n_slots = t.n_slots, s, j
    cdef bint with_memory = out_stages.shape[0] != 0
    cdef double total, peak = NAN
    cdef double parts[P_COUNT]
    cdef double step_rates[SR_COUNT]
    cdef double* scratch
    cdef double* stage
    cdef double* times
    cdef double* totals
    cdef double* p_dense
    cdef double* p_expert
    cdef MemScratch mem
    cdef double vec[SC_COUNT + MC_COUNT]
    c_one_cand(cand, SC_COUNT + MC_COUNT if with_memory else SC_COUNT, vec)
    c_sec_check_len("rate", R_COUNT, rate.shape[0])
    c_sec_check_len("out", ONE_COUNT, out.shape[0])
    c_one_check(t, vec, SC_COUNT, SC_p, SC_vp, out_stage_times.shape[0], with_memory, out_stages.shape[0],
                out_stages.shape[1])
    if out_stage_sums.shape[0] < p or out_stage_sums.shape[1] != SS_COUNT:
        raise ValueError(f"out_stage_sums must be (>= pp ({p}), {SS_COUNT})")
    # one block: stage (pp x SS_COUNT), then times, totals, p_dense, p_expert (pp each)
    scratch = <double*>malloc(p * (SS_COUNT + 4) * sizeof(double))
    if scratch == NULL:
        raise MemoryError()
    stage = scratch
    times = stage + p * SS_COUNT
    totals = times + p
    p_dense = totals + p
    p_expert = p_dense + p
    try:
        if with_memory:
            c_mem_scratch_alloc(&mem, n_kinds, n_slots, p, p * vp)
        with nogil:
            total = c_sec_price(&t.kinds[0, 0], &t.skinds[0, 0], &t.model[0], &t.smodel[0], n_kinds, vec,
                                &rate[0], &t.layout[0], &t.pool[0], &t.slot_pool[0], &t.extras[0], stage, p_dense,
                                p_expert, parts, times, totals, step_rates)
            if with_memory:
                peak = c_candidate_memory(&t.mkinds[0, 0], n_kinds, &t.mmodel[0], &vec[SC_COUNT], &t.layout[0],
                                          &t.pool[0], &t.slot_pool[0], reserve, &mem)
                for s in range(out_stages.shape[0]):
                    for j in range(_MEM_COLUMNS):
                        out_stages[s, j] = mem.out[s * _MEM_COLUMNS + j] if s < p else NAN
            out[ONE_step] = total
            out[ONE_peak] = peak
            for j in range(P_COUNT):
                out[ONE_parts + j] = parts[j]
            for j in range(SR_COUNT):
                out[ONE_rates + j] = step_rates[j]
            for s in range(out_stage_times.shape[0]):
                out_stage_times[s] = times[s] if s < p else NAN
            for s in range(out_stage_sums.shape[0]):
                for j in range(SS_COUNT):
                    out_stage_sums[s, j] = stage[s * SS_COUNT + j] if s < p else NAN
    finally:
        free(scratch)
        if with_memory:
            c_mem_scratch_free(&mem)


def nd_estimate_one(_OneTables tables not None,   # IN one_tables(...)
                    tuple cand,                   # IN (C_COUNT + MC_COUNT,) or (C_COUNT,) numbers
                    const double[::1] options,    # IN (O_COUNT,)
                    const double[::1] ratios,     # IN (P_COUNT,) or (0,)
                    double reserve,
                    double[::1] out,                     # OUT (ONE_rates,)
                    double[::1] out_stage_times,         # OUT (>= pp,)
                    double[:, ::1] out_stages) -> None:  # OUT (>= pp, 8), or (0, 8): no memory
    """ND's score and memory of one candidate; see the oracle."""
    cdef _OneTables t = tables
    cdef Py_ssize_t n_kinds = t.n_kinds, p = t.p, vp = t.vp, n_slots = t.n_slots, s, j
    cdef bint with_memory = out_stages.shape[0] != 0
    cdef bint with_ratios = ratios.shape[0] != 0
    cdef double total, peak = NAN
    cdef double parts[P_COUNT]
    cdef double* scratch
    cdef MemScratch mem
    cdef double vec[C_COUNT + MC_COUNT]
    c_one_cand(cand, C_COUNT + MC_COUNT if with_memory else C_COUNT, vec)
    c_sec_check_len("options", O_COUNT, options.shape[0])
    if with_ratios:
        c_sec_check_len("ratios", P_COUNT, ratios.shape[0])
    c_sec_check_len("out", ONE_rates, out.shape[0])
    c_one_check(t, vec, C_COUNT, C_p, C_vp, out_stage_times.shape[0], with_memory, out_stages.shape[0],
                out_stages.shape[1])
    # one block: stage (pp x S_COUNT), then times, reruns (pp each)
    scratch = <double*>malloc(p * (S_COUNT + 2) * sizeof(double))
    if scratch == NULL:
        raise MemoryError()
    try:
        if with_memory:
            c_mem_scratch_alloc(&mem, n_kinds, n_slots, p, p * vp)
        with nogil:
            total = c_nd_price(&t.kinds[0, 0], n_kinds, &t.model[0], vec, &t.layout[0], &t.pool[0],
                               &t.slot_pool[0], &options[0], &ratios[0] if with_ratios else NULL, scratch, parts,
                               scratch + p * S_COUNT, scratch + p * (S_COUNT + 1))
            if with_memory:
                peak = c_candidate_memory(&t.mkinds[0, 0], n_kinds, &t.mmodel[0], &vec[C_COUNT], &t.layout[0],
                                          &t.pool[0], &t.slot_pool[0], reserve, &mem)
                for s in range(out_stages.shape[0]):
                    for j in range(_MEM_COLUMNS):
                        out_stages[s, j] = mem.out[s * _MEM_COLUMNS + j] if s < p else NAN
            out[ONE_step] = total
            out[ONE_peak] = peak
            for j in range(P_COUNT):
                out[ONE_parts + j] = parts[j]
            for s in range(out_stage_times.shape[0]):
                out_stage_times[s] = scratch[p * S_COUNT + s] if s < p else NAN
    finally:
        free(scratch)
        if with_memory:
            c_mem_scratch_free(&mem)
