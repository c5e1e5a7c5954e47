"""A flash kernel's rate by its shape (an estimate): its head dim, and a sliding window's time against a full causal
one's, per useful FLOP.

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
NVIDIA's cudnn-frontend SDPA training benchmark times gpt-oss's windowed heads (head dim 64) and Llama 3.1's full
causal ones (head dim 128) on the same part at the same lengths (``tests/data/cudnn/sdpa_windows.json``: GB200 at
128- and 1024-token windows, GB300 at 128, H200 at 1024; 2048-16384 tokens; forward and backward as seconds mode
combines them). A pair's rate ratio is the head-dim-64 share h of its part (below) over the stretch; the GB200's two
windows at one head dim separate the two. One FIXED of 485 keys and h = 0.677 (GB200), 0.638 (GB300), 0.792 (H200)
fit all 16 pairs within 3%. TILE: an assumed 128 x 128 tile, the block FlashAttention-2 and cuDNN's SDPA use for
heads of 64-128; the fit absorbs what it misses.

Sequence length (:func:`_tile_efficiency`). The same fixed work makes a full causal kernel's rate grow with its
length: a query meets s/2 keys and costs s/2 + TILE/2 + FIXED, so the kernel runs at eff(s) = (s/2) / (s/2 + TILE/2 +
FIXED) of its long-sequence rate (0.65 at 2048 tokens, 0.79 at 4096, 0.88 at 8192). cuDNN's measured causal kernels
follow it (Llama 3.1's heads on GB200 and GB300, 2048-16384 tokens: tests/test_attention_length.py). Where a part's
attention rate was measured at stated lengths (``Rates.attention_reference_tokens``: cuDNN's 4096 and 8192 on
Blackwell), a causal layer of s tokens takes mean(eff at those lengths) / eff(s) of the time its FLOPs take at that
rate, a sliding window the same factor (its stretch is against the full kernel at the same s); a kernel that a
query meets in several calls pays the fixed work per call (ring context parallelism: (cp + 1) / 2 calls a query).
Bidirectional and chunked attention keep the rate as it is.

Head dim (:func:`_head_dim_share`). Per score element a flash kernel spends MMA work in proportion to the head dim d
and the softmax's exponentials and rescaling in a fixed amount ("H100 SXM5 has 989 TFLOPS of FP16 matmul but only
3.9 TFLOPS of special functions", FlashAttention-3, Shah et al. 2024, arXiv 2407.08608, §3.1): time a score
element ~ alpha + d, a rate in FLOPs ~ d / (alpha + d). Seconds mode's attention rates are measured at d 128 (and
DeepSeek-V3's 192/128, which runs no faster: cuDNN's rows, ``ndcost.spec.attention_rates``), so a head dim of 128 or
more takes the rate as it is, a smaller one the share d (alpha + 128) / (128 (alpha + d)), alpha set by the part's
measured share at d 64, h: alpha = 128 (1 - h) / (2h - 1).
"""
from __future__ import annotations

__all__: list[str] = []

#: Rows and columns of the flash kernel's tile (an assumption: FlashAttention-2's and cuDNN's 128 x 128).
WINDOW_TILE = 128.0
#: A query's fixed work in keys beside those it multiplies, fitted (tools/fit_window_attention.py).
WINDOW_FIXED_KEYS = 485.0


def _window_stretch(window: float, s: float) -> float:
    """How much longer a causal window's FLOPs take than the same FLOPs of full causal attention over *s*
    tokens (>= 1 for 0 < window < s; 1 otherwise)."""
    if not (window > 0.0 and window < s):
        return 1.0
    span = window - window * (window - 1.0) / (2.0 * s)
    half = s / 2.0
    windowed = span + WINDOW_TILE / 2.0 + WINDOW_TILE / 2.0 * (1.0 - window / s) + WINDOW_FIXED_KEYS
    # its keys of work per useful key, over the full causal kernel's at s (that kernel's tile efficiency)
    stretch = (windowed / span) * _tile_efficiency(half, 1.0)
    return stretch if stretch > 1.0 else 1.0     # a window within a token of s: the full kernel, to rounding


def _head_dim_share(d: float, h64: float) -> float:
    """The share of its head-dim-128 rate a flash kernel reaches at head dim *d*, on a part that reaches *h64* of it
    at head dim 64 (1 for d >= 128, for h64 >= 1, and for an h64 of 1/2 or less, which the law cannot hold)."""
    if not (d > 0.0 and d < 128.0 and h64 > 0.5 and h64 < 1.0):
        return 1.0
    alpha = 128.0 * (1.0 - h64) / (2.0 * h64 - 1.0)
    return d * (alpha + 128.0) / (128.0 * (alpha + d))


def _tile_efficiency(keys: float, calls: float) -> float:
    """The share of its long-sequence rate a flash kernel reaches when each query meets *keys* keys over *calls*
    kernel calls, each with a tile's half and the fixed work a query (1 for no keys)."""
    if not keys > 0.0:
        return 1.0
    return keys / (keys + calls * (WINDOW_TILE / 2.0 + WINDOW_FIXED_KEYS))
