"""A sliding-window flash kernel's time against a full causal one's, per useful FLOP (an estimate).

A flash kernel walks its queries in tiles and, for each, the key tiles the mask leaves: a full causal query tile
meets s/2 keys on average, a window of w about w. Beside the keys it multiplies, a query tile costs what does
not shrink with them -- loading the tile, the softmax's running state, writing its output and statistics, the
pipeline's fill and drain -- and the tiles the mask cuts in part are computed whole (half the diagonal tile, and
for a window its far edge too). Counting a query's work in keys:

* full causal: s/2 + TILE/2 + FIXED for s/2 useful keys;
* a causal window: span + TILE/2 + (TILE/2)(1 - w/s) + FIXED for span = w - w(w - 1)/(2s) useful keys (query i
  meets min(i + 1, w); the far edge is cut only where the window has left the sequence's start).

Seconds mode prices attention at one rate measured on full causal attention (``Rates.attention_efficiency``), so
a window's FLOPs take :func:`_window_stretch` times as long as their count at that rate says: the window's keys
of work per useful key over the full kernel's, at the layer's s. As w reaches s the two coincide (stretch 1).

FIXED is fitted across a family of measured kernels, never to a training run (``tools/fit_window_attention.py``):
NVIDIA's cudnn-frontend SDPA training benchmark times gpt-oss's windowed heads and Llama 3.1's full causal ones
on the same part at the same lengths (``tests/data/cudnn/sdpa_windows.json``: GB200 and GB300 at a 128-token
window, H200 at 1024; 2048-16384 tokens; forward and backward as seconds mode combines them). Their rate ratios
(0.12-0.18 for w 128, 0.52-0.70 for w 1024) fit one FIXED of 1055 keys (per part alone 985, 1095, 1215; every
pair within 21%, the training lengths 4096-16384 within 14%). TILE: an assumed 128 x 128 tile, the block
FlashAttention-2 and cuDNN's SDPA use for heads of 64-128; the fit absorbs what it misses.
"""
from __future__ import annotations

__all__: list[str] = []

#: Rows and columns of the flash kernel's tile (an assumption: FlashAttention-2's and cuDNN's 128 x 128).
WINDOW_TILE = 128.0
#: A query's fixed work in keys beside those it multiplies, fitted (tools/fit_window_attention.py).
WINDOW_FIXED_KEYS = 1055.0


def _window_stretch(window: float, s: float) -> float:
    """How much longer a causal window's FLOPs take than the same FLOPs of full causal attention over *s*
    tokens (>= 1 for 0 < window < s; 1 otherwise)."""
    if not (window > 0.0 and window < s):
        return 1.0
    span = window - window * (window - 1.0) / (2.0 * s)
    half = s / 2.0
    windowed = span + WINDOW_TILE / 2.0 + WINDOW_TILE / 2.0 * (1.0 - window / s) + WINDOW_FIXED_KEYS
    full = half + WINDOW_TILE / 2.0 + WINDOW_FIXED_KEYS
    stretch = (windowed / span) / (full / half)
    return stretch if stretch > 1.0 else 1.0     # a window within a token of s: the full kernel, to rounding
