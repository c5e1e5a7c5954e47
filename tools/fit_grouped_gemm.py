"""Fit the grouped GEMM's two shape figures to measured grouped GEMMs (ndcost.spec.moe_kernels).

The figures are ``Rates.grouped_gemm_tile_overhead`` (a tile's fixed cost, in elements of its inner
dimension) and ``Rates.grouped_gemm_exposed`` (the share of the shorter of compute and weight stream left
exposed). Each measured ``torch._grouped_mm`` of ``tests/data/h200/h200_grouped.json`` (at least 128 rows an
expert, longer than 40 us: the shorter calls time the host) is priced by the oracle's
``ndcost.kernels.seconds_moe._grouped`` at the H200's own rates, and the pair that minimises the squared log
error over a grid is printed with the mean and worst absolute error. Run: ``python tools/fit_grouped_gemm.py``.
tests/test_seconds_grouped_gemm.py checks that the shipped defaults are this fit's.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "h200" / "h200_grouped.json"
#: The grid searched: tile overheads 0, 4, ..., 300 elements; exposed shares 0, 0.05, ..., 1.
TILE_GRID = tuple(float(k) for k in range(0, 301, 4))
EXPOSED_GRID = tuple(i / 20.0 for i in range(0, 21))
MIN_ROWS = 128
MIN_SECONDS = 40e-6


def measured_shapes(path: Path = DATA) -> list[tuple[float, float, float, float, float]]:
    """(groups, rows an expert, k, n, seconds) of each measured grouped GEMM the fit reads."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    return [(float(g["groups"]), float(g["rows_per_group"]), float(g["k"]), float(g["n"]), float(g["s"]))
            for g in doc["grouped"] if g["rows_per_group"] >= MIN_ROWS and g["s"] >= MIN_SECONDS]


def _rate_vector(tile: float, exposed: float):
    import ndcost
    from ndcost.spec.rates import Rates
    from ndcost.tables.seconds import rates_vector

    rates = Rates.for_device("h200").replace(grouped_gemm_tile_overhead=tile, grouped_gemm_exposed=exposed)
    return rates_vector(ndcost.Cluster("h200", 1), rates, "bf16")


def errors(tile: float, exposed: float, shapes=None) -> list[float]:
    """Relative errors (priced / measured - 1) of the measured shapes at these figures."""
    from ndcost.kernels.seconds_moe import _grouped

    rate = _rate_vector(tile, exposed)
    shapes = measured_shapes() if shapes is None else shapes
    return [_grouped(groups, m, n, k, 2.0, 2.0, rate) / seconds - 1.0 for groups, m, k, n, seconds in shapes]


def fit() -> tuple[float, float, float, float]:
    """(tile overhead, exposed share, mean absolute error, worst absolute error) of the best grid point."""
    shapes = measured_shapes()
    best = None
    for tile in TILE_GRID:
        for exposed in EXPOSED_GRID:
            err = errors(tile, exposed, shapes)
            score = sum(math.log1p(e) ** 2 for e in err)
            if best is None or score < best[0]:
                best = (score, tile, exposed, err)
    _, tile, exposed, err = best
    return tile, exposed, sum(abs(e) for e in err) / len(err), max(abs(e) for e in err)


if __name__ == "__main__":
    tile, exposed, mean, worst = fit()
    print(f"grouped_gemm_tile_overhead {tile:g}, grouped_gemm_exposed {exposed:g}: "
          f"mean error {100 * mean:.1f}%, worst {100 * worst:.1f}% over {len(measured_shapes())} shapes")
