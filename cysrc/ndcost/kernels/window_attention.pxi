# A sliding-window flash kernel's time against a full causal one's, per useful FLOP (twin of
# ndcost/kernels/window_attention.py, where the model, its constants and their fit are stated).


cdef inline double c_sec_window_stretch(double window, double s) noexcept nogil:
    # How much longer a causal window's FLOPs take than the same FLOPs of full causal attention over s tokens.
    cdef double span, half, windowed, full, stretch
    if not (window > 0.0 and window < s):
        return 1.0
    span = window - window * (window - 1.0) / (2.0 * s)
    half = s / 2.0
    windowed = span + SEC_WINDOW_TILE / 2.0 + SEC_WINDOW_TILE / 2.0 * (1.0 - window / s) + SEC_WINDOW_FIXED_KEYS
    full = half + SEC_WINDOW_TILE / 2.0 + SEC_WINDOW_FIXED_KEYS
    stretch = (windowed / span) / (full / half)
    return stretch if stretch > 1.0 else 1.0
