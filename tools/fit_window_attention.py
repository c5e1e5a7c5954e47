"""Fit a flash kernel's rate by shape -- its fixed work a query (ndcost.kernels.window_attention.WINDOW_FIXED_KEYS)
and, per part, the share of the head-dim-128 rate a head-dim-64 kernel reaches
(ndcost.spec.attention_rates.FLASH_HEAD64_SHARE) -- to NVIDIA's measured sliding-window and full causal SDPA kernels.

``tests/data/cudnn/sdpa_windows.json`` pairs, per part (GB200, GB300, H200) and sequence length (2048-16384), a
sliding-window run at head dim 64 (gpt-oss's heads) and a full causal run at head dim 128 (Llama 3.1's); the GB200
also at a second window (1024, cuDNN 9.19) beside its 128-token one (9.22). Each run's forward and backward make one
rate, 3.5 / (1/forward + 2.5/backward) (seconds mode's accounting: a backward of 2.5x the forward's FLOPs). The model
of a pair's ratio windowed / full is h / ``_window_stretch(window, tokens)``: the part's head-dim-64 share h times the
window's useful work a query. The two windows of one part at one head dim separate the two (the stretch grows with
the window, h does not); for a fixed work F on a grid of 5 keys, each part's h is the geometric mean of
ratio x stretch over its pairs, and the F with the least squared log error over every pair is kept. The fit's
check is outside it: the H200's h against the head-dim 64 / 128 ratio FlashAttention-3's paper measured for cuDNN
on the H100 (tests/test_attention_head_dim.py). Run: ``python tools/fit_window_attention.py``.
tests/test_window_attention.py checks that the shipped constants are this fit's.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ndcost.spec.attention_rates import combined_rate

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "cudnn" / "sdpa_windows.json"
#: 0 to 4000 keys in steps of 5.
GRID = tuple(5.0 * i for i in range(801))


def pairs(path: Path = DATA) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["pairs"]


def measured_ratio(pair: dict) -> float:
    return combined_rate(*pair["windowed"]) / combined_rate(*pair["full"])


def model_ratio(pair: dict, fixed: float) -> float:
    """The windowed / full rate ratio the model gives with *fixed* keys of fixed work a query."""
    from ndcost.kernels import window_attention

    saved = window_attention.WINDOW_FIXED_KEYS
    window_attention.WINDOW_FIXED_KEYS = fixed
    try:
        return 1.0 / window_attention._window_stretch(float(pair["window"]), float(pair["tokens"]))
    finally:
        window_attention.WINDOW_FIXED_KEYS = saved


def _log_residuals(selected: list[dict], fixed: float) -> dict[str, list[float]]:
    """Per part, log(measured ratio x stretch) of each pair: log h plus the pair's error."""
    out: dict[str, list[float]] = {}
    for pair in selected:
        out.setdefault(pair["part"], []).append(math.log(measured_ratio(pair) / model_ratio(pair, fixed)))
    return out


def head64_shares(selected: list[dict], fixed: float) -> dict[str, float]:
    """Each part's head-dim-64 share at *fixed* keys: the geometric mean of its pairs' ratio x stretch."""
    return {part: math.exp(sum(logs) / len(logs)) for part, logs in _log_residuals(selected, fixed).items()}


def loss(selected: list[dict], fixed: float) -> float:
    return sum(sum((x - sum(logs) / len(logs)) ** 2 for x in logs)
               for logs in _log_residuals(selected, fixed).values())


def fit(selected: list[dict]) -> float:
    """The grid value of the fixed work with the least squared log error over *selected*, each part's head-dim-64
    share at its own best value."""
    return min(GRID, key=lambda fixed: loss(selected, fixed))


def main() -> None:
    every = pairs()
    best = fit(every)
    shares = head64_shares(every, best)
    print(f"fixed work a query: {best:.0f} keys (over {len(every)} pairs); head-dim-64 share: "
          + ", ".join(f"{part} {share:.3f}" for part, share in sorted(shares.items())))
    for pair in every:
        measured, model = measured_ratio(pair), shares[pair["part"]] * model_ratio(pair, best)
        print(f"  {pair['part']:6s} {pair['tokens']:6d} tokens, window {pair['window']:5d}: measured {measured:.3f}, "
              f"model {model:.3f} ({100 * (model / measured - 1):+.1f}%)")


if __name__ == "__main__":
    main()
