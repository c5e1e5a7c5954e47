# A flash kernel's rate by its shape: its head dim, and a sliding window's time against a full causal one's (twin of
# ndcost/kernels/window_attention.py, where the model, its constants and their fit are stated).


cdef inline double c_sec_tile_efficiency(double keys, double calls) noexcept nogil:
    # The share of its long-sequence rate a flash kernel reaches when each query meets `keys` keys over `calls` calls.
    if not keys > 0.0:
        return 1.0
    return keys / (keys + calls * (SEC_WINDOW_TILE / 2.0 + SEC_WINDOW_FIXED_KEYS))


cdef inline double c_sec_window_stretch(double window, double s) noexcept nogil:
    # How much longer a causal window's FLOPs take than the same FLOPs of full causal attention over s tokens.
    cdef double span, half, windowed, stretch
    if not (window > 0.0 and window < s):
        return 1.0
    span = window - window * (window - 1.0) / (2.0 * s)
    half = s / 2.0
    windowed = span + SEC_WINDOW_TILE / 2.0 + SEC_WINDOW_TILE / 2.0 * (1.0 - window / s) + SEC_WINDOW_FIXED_KEYS
    # its keys of work per useful key, over the full causal kernel's at s (that kernel's tile efficiency)
    stretch = (windowed / span) * c_sec_tile_efficiency(half, 1.0)
    return stretch if stretch > 1.0 else 1.0


cdef inline double c_sec_head_dim_share(double d, double h64) noexcept nogil:
    # The share of its head-dim-128 rate a flash kernel reaches at head dim d, on a part reaching h64 of it at 64.
    cdef double alpha
    if not (d > 0.0 and d < 128.0 and h64 > 0.5 and h64 < 1.0):
        return 1.0
    alpha = 128.0 * (1.0 - h64) / (2.0 * h64 - 1.0)
    return d * (alpha + 128.0) / (128.0 * (alpha + d))

