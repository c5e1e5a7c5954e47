"""Fit NCCL's all-to-all inside a node (ndcost.spec.all_to_all_rates) to NVIDIA's measured nccl-tests runs.

``tests/data/aiconfigurator/nccl_alltoall.json`` holds alltoall_perf times on one node of the H100, B200, GB200 and
GB300 (aiconfigurator, NCCL 2.29.2) at 2-8 GPUs and 2-537 MB per-rank buffers. For each part and GPU count n this
fits, by least squares over the buffers of 8 MB and more, time = latency + bytes (n - 1)/n / bus bandwidth -- the
form seconds mode prices a collective in (``ndcost.kernels.seconds_comm``) -- and prints the bus bandwidth, its share
of the link rate, the latency and the worst row's error. Run: ``python tools/fit_all_to_all.py``.
tests/test_all_to_all_rates.py checks that the shipped shares are these fits'.
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "aiconfigurator" / "nccl_alltoall.json"
#: Link rate a direction of each measured part, bytes/s (the catalog's intra_node_bandwidth).
LINKS = {"h100_sxm": 450e9, "b200_sxm": 900e9, "gb200": 900e9, "gb300": 900e9}
#: Buffers fitted: from 8 MB (below, the latency's own shape dominates).
SMALLEST = 8e6


def rows(part: str, path: Path = DATA) -> list[tuple[int, int, float]]:
    return [tuple(row) for row in json.loads(path.read_text(encoding="utf-8"))["parts"][part]["rows"]]


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(latency s, bus bandwidth B/s) of time = latency + moved / bandwidth over (moved, time) *points*."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in points)
             / sum((x - mean_x) ** 2 for x, _ in points))
    return mean_y - slope * mean_x, 1.0 / slope


def fits(path: Path = DATA) -> dict[tuple[str, int], tuple[float, float, float]]:
    """(part, GPUs) -> (latency s, bus bandwidth B/s, worst relative error) over the fitted buffers."""
    out = {}
    for part in LINKS:
        every = rows(part, path)
        for gpus in sorted({g for g, _, _ in every}):
            points = [(size * (gpus - 1) / gpus, seconds) for g, size, seconds in every
                      if g == gpus and size >= SMALLEST]
            latency, busbw = fit(points)
            worst = max(abs((latency + x / busbw) / y - 1.0) for x, y in points)
            out[(part, gpus)] = (latency, busbw, worst)
    return out


def main() -> None:
    for (part, gpus), (latency, busbw, worst) in fits().items():
        print(f"{part:9s} {gpus} GPUs: {busbw / 1e9:6.1f} GB/s ({busbw / LINKS[part]:.3f} of the link), "
              f"latency {latency * 1e6:5.1f} us, worst row {worst:.1%}")


if __name__ == "__main__":
    main()
