# Seconds mode, communication (twin of ndcost/kernels/seconds_comm.py): one collective over a group's
# links (alpha-beta rings, hierarchical across nodes), and how much of it a compute window hides.
# Needs kernels/columns.pxi and kernels/seconds_ops.pxi included before it.

from libc.math cimport floor

# Collective codes of seconds_collective.
cdef enum:
    SEC_ALL_REDUCE = 0
    SEC_GATHER_OR_SCATTER = 1
    SEC_ALL_TO_ALL = 2
    SEC_SEND_RECV = 3


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


def seconds_collective(long long op, double moved, double n, double stride, const double[::1] rate) -> float:
    """Seconds of one collective over n ranks stride apart (ring, alpha-beta, hierarchical); see the oracle."""
    c_sec_check_len("rate", R_COUNT, rate.shape[0])
    return c_sec_collective(op, moved, n, stride, &rate[0])
