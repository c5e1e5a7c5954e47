"""Fit a flash kernel's fixed work a query (ndcost.kernels.window_attention.WINDOW_FIXED_KEYS) to NVIDIA's measured
sliding-window and full causal SDPA kernels.

``tests/data/cudnn/sdpa_windows.json`` pairs, per part (GB200, GB300, H200) and sequence length (2048-16384), a
sliding-window run and a full causal run of cuDNN's SDPA training benchmark. Each run's forward and backward make
one rate, 3.5 / (1/forward + 2.5/backward) (seconds mode's accounting: a backward of 2.5x the forward's FLOPs);
the measured ratio windowed / full is set against the model's, 1 / ``_window_stretch(window, tokens)``, and the
fixed work that minimises the squared log error over all pairs is searched on a grid of 5 keys and printed with
each pair's error and each part's own fit. Run: ``python tools/fit_window_attention.py``.
tests/test_window_attention.py checks that the shipped constant is this fit's.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "cudnn" / "sdpa_windows.json"
#: 0 to 4000 keys in steps of 5.
GRID = tuple(5.0 * i for i in range(801))


def pairs(path: Path = DATA) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["pairs"]


def combined(forward: float, backward: float) -> float:
    """One rate for a forward and its 2.5x backward."""
    return 3.5 / (1.0 / forward + 2.5 / backward)


def measured_ratio(pair: dict) -> float:
    return combined(*pair["windowed"]) / combined(*pair["full"])


def model_ratio(pair: dict, fixed: float) -> float:
    """The windowed / full rate ratio the model gives with *fixed* keys of fixed work a query."""
    from ndcost.kernels import window_attention

    saved = window_attention.WINDOW_FIXED_KEYS
    window_attention.WINDOW_FIXED_KEYS = fixed
    try:
        return 1.0 / window_attention._window_stretch(float(pair["window"]), float(pair["tokens"]))
    finally:
        window_attention.WINDOW_FIXED_KEYS = saved


def fit(selected: list[dict]) -> float:
    """The grid value of the fixed work with the least squared log error over *selected*."""
    def loss(fixed: float) -> float:
        return sum(math.log(model_ratio(pair, fixed) / measured_ratio(pair)) ** 2 for pair in selected)
    return min(GRID, key=loss)


def main() -> None:
    every = pairs()
    best = fit(every)
    print(f"fixed work a query: {best:.0f} keys (over {len(every)} pairs)")
    for pair in every:
        measured, model = measured_ratio(pair), model_ratio(pair, best)
        print(f"  {pair['part']:6s} {pair['tokens']:6d} tokens, window {pair['window']:5d}: measured {measured:.3f}, "
              f"model {model:.3f} ({100 * (model / measured - 1):+.1f}%)")
    for part in sorted({pair["part"] for pair in every}):
        print(f"  {part} alone: {fit([pair for pair in every if pair['part'] == part]):.0f} keys")


if __name__ == "__main__":
    main()
