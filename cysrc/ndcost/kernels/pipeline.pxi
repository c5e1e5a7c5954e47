# Pipeline and point-to-point formulas of ND's score (twin of ndcost/kernels/pipeline.py).
# docs/ND_MODEL.md §2.8 (estimate_pipeline) and §2.9 (estimate_p2p_comm).

cdef inline Py_ssize_t c_nd_straggler(const double* t, Py_ssize_t n) noexcept nogil:
    # The last index holding the max, as ND's argmax over the reversed list.
    cdef Py_ssize_t i, best = -1
    for i in range(n):
        if best < 0 or t[i] >= t[best]:
            best = i
    return best


cdef inline double c_nd_pipeline_time(const double* t, Py_ssize_t p, long long m, long long vpp) noexcept nogil:
    cdef Py_ssize_t i
    cdef double total = 0.0, straggler, chunk_straggler, non_steady, steady
    cdef long long less_extra
    if p < 1 or m < 1 or vpp < 1:
        return NAN
    straggler = t[0]
    for i in range(p):
        total += t[i]
        if t[i] > straggler:
            straggler = t[i]
    if p == 1:
        return total * m
    if vpp == 1:
        return total + (m - 1) * straggler
    less_extra = p * (vpp - 1)
    chunk_straggler = straggler / vpp
    non_steady = total / vpp + less_extra * chunk_straggler
    steady = (m * vpp - less_extra - 1) * chunk_straggler
    return non_steady + steady


cdef inline double c_nd_p2p_count(long long p, long long m, long long vp) noexcept nogil:
    if p < 1 or m < 1 or vp < 1:
        return NAN
    if p == 1:
        return 0.0
    if vp == 1:
        if p == 2:
            return 4.0 * m
        return 4.0 * p * m + 4.0 * p * p - 14.0 * p
    if p == 2:
        return 8.0 * m * vp - 4.0 * m
    if p == 4:
        return 16.0 * m * vp + 12.0
    return 4.0 * p * m * vp + 4.0 * p * p - 13.0 * p


cdef inline double c_nd_p2p_time(long long p, long long m, long long vp, double straggler_time,
                                 double sp, double ratio) noexcept nogil:
    cdef double count = c_nd_p2p_count(p, m, vp)
    if count != count or sp <= 0.0:
        return NAN
    return ratio * count / p * straggler_time / sp


def nd_straggler(const double[::1] stage_times) -> int:
    """Index of the slowest stage; the last one on a tie, as ND's ``argmax`` over the reversed list."""
    return c_nd_straggler(&stage_times[0] if stage_times.shape[0] else NULL, stage_times.shape[0])


def nd_pipeline_time(const double[::1] stage_times, long long micro_batch_num, long long vpp) -> float:
    """ND's pipeline time of one step from each stage's time per micro-batch (docs/ND_MODEL.md §2.8)."""
    if stage_times.shape[0] == 0:
        return NAN
    return c_nd_pipeline_time(&stage_times[0], stage_times.shape[0], micro_batch_num, vpp)


def nd_p2p_count(long long pp, long long micro_batch_num, long long vpp) -> float:
    """Number of sends and receives ND counts for a step (docs/ND_MODEL.md §2.9, tested upstream)."""
    return c_nd_p2p_count(pp, micro_batch_num, vpp)


def nd_p2p_time(long long pp, long long micro_batch_num, long long vpp, double straggler_time,
                double sp, double ratio) -> float:
    """ND's P2P part: ratio · sends / p · slowest stage / sp (MANUAL_P2P_RATIO = 0.002 upstream)."""
    return c_nd_p2p_time(pp, micro_batch_num, vpp, straggler_time, sp, ratio)
