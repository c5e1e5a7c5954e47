"""One part's GEMMs against another's, as one harness measured both: the GB300 against the GB200.

No MAMF or MSMF of the GB300 is published, and its datasheet states the GB200's dense BF16 and FP8 peaks. NVIDIA's
aiconfigurator times the same GEMM shapes with the same software on both parts (TRT-LLM 1.3.0rc20's GEMM tables,
``systems/data/{gb200,gb300}/gemm/trtllm/1.3.0rc20/gemm_perf.parquet``): over the 675 shapes with every dimension
at least 4096 the GB300 is 1.190x the GB200 in bf16 and 1.133x in per-tensor fp8 (1.127x in blockwise fp8), the
median of each shape's GB200 latency over its GB300 latency. That ratio, not the datasheet's equal peaks, is what
the catalog prices the GB300's sustained GEMM rate at: the GB200's sustained rate times it. The two parts run the
same Blackwell tensor cores; the GB300 (Blackwell Ultra, 1,400 W) holds a higher clock under a GEMM than the GB200
(1,200 W). The tables are bursts back to back; the ratio of two bursts on one harness is the measurement used, each
part's settled clock taken as the same share of its burst (the B200's MSMF/MAMF, ``ndcost.spec.rates``).

``tools/measure_gemm_part_ratio.py`` extracts the shapes from the parquet tables into
``tests/data/aiconfigurator/gemm_gb200_gb300.json``; ``tests/test_gemm_part_ratios.py`` recomputes the medians
from that file with :func:`latency_ratio`.
"""
from __future__ import annotations

from statistics import median
from types import MappingProxyType
from typing import Iterable, Mapping

__all__ = ["GB300_GEMM_SOURCE", "GB300_OVER_GB200", "LARGE_GEMM_DIM", "latency_ratio"]

#: A shape counts as a large GEMM when every dimension is at least this (the regime a training step's GEMMs
#: and the sustained-rate measurements share).
LARGE_GEMM_DIM = 4096
#: The GB300's GEMM rate over the GB200's, by GEMM input dtype ("bf16", "fp8"), rounded to 3 digits.
GB300_OVER_GB200: Mapping[str, float] = MappingProxyType({"bf16": 1.190, "fp8": 1.133})
GB300_GEMM_SOURCE = (
    "ai-dynamo/aiconfigurator@095f58a51 aic-core/src/aiconfigurator_core/systems/data/{gb200,gb300}/gemm/trtllm/"
    "1.3.0rc20/gemm_perf.parquet (tests/data/aiconfigurator/gemm_gb200_gb300.json, tools/measure_gemm_part_ratio.py): "
    "the median over the 675 shapes with m, n, k >= 4096 of the GB200's latency over the GB300's, bf16 1.190, "
    "per-tensor fp8 1.133 (blockwise fp8 1.127)")


def latency_ratio(slow: Iterable[tuple[int, int, int, float]], fast: Iterable[tuple[int, int, int, float]],
                  min_dim: int = LARGE_GEMM_DIM) -> float:
    """The median, over the (m, n, k) shapes both tables time with every dimension >= *min_dim*, of *slow*'s
    latency over *fast*'s: how many times faster the *fast* part runs those GEMMs. Each table holds
    (m, n, k, latency) rows; a shape timed more than once keeps its shortest latency."""
    def best(rows):
        out: dict[tuple[int, int, int], float] = {}
        for m, n, k, latency in rows:
            if min(m, n, k) >= min_dim and latency > 0.0:
                key = (int(m), int(n), int(k))
                out[key] = min(latency, out.get(key, latency))
        return out

    a, b = best(slow), best(fast)
    shared = sorted(a.keys() & b.keys())
    if not shared:
        raise ValueError(f"no shape with every dimension >= {min_dim} is in both tables")
    return median(a[key] / b[key] for key in shared)
