"""A synchronous job runs at its slowest GPU: the settled clock of GPUs that share a busy node, and its spread.

The catalog's sustained GEMM rates (MSMF, ``ndcost.spec.rates``) are measured on one GPU with its siblings idle,
as the published protocol requires (stas00/ml-engineering, compute/accelerator/benchmarks/README.md, "Measure with
every other GPU idle"). A training job keeps every GPU of its nodes busy, and the same page measures what that does
("What we measured: alone vs all-8 concurrent", the same script on GPU0 alone 5 times, then on all 8 GPUs 5 rounds):

=========  =================  =========================  ==============================
part       GPU0 alone (mean)  all 8 x 5 rounds (mean)     range of those 40
=========  =================  =========================  ==============================
H200 bf16  702.9 TFLOP/s      698.6 (-0.6%)              4.5%
B200 bf16  1455.7             1426.4 (-2.0%)             10.4%
=========  =================  =========================  ==============================

"a full-node training run will see something closer to the concurrent distribution". A data-, tensor-, expert- or
pipeline-parallel step waits at its collectives for every GPU of the job, so it runs at the *slowest* of them. An
estimate, not a measurement of a job: the spread is taken as normal, its standard deviation the 40 samples' range
over the expected range of 40 normal draws (2·z(40)), and a job of N GPUs runs at the expected slowest of N draws,
mean - z(N)·sigma, z(N) the expected largest of N standard normal draws (Blom's approximation,
Phi^-1((N - 0.375) / (N + 0.25)); z(8) = 1.43, z(40) = 2.16, z(1024) = 3.2). One GPU runs alone: its MSMF as
measured. The H100 and H800 take the H200's figures (the same 700 W HGX board), the B200 its own; parts without such
a measurement take none: the A100, Ascend, and the GB200 / GB300 NVL72 racks, liquid-cooled where the measured B200
board is air-cooled ("liquid-cooled nodes typically deliver higher sustained MAMF than air-cooled nodes with
identical silicon", the same source's compute/accelerator/README.md).
"""
from __future__ import annotations

from functools import lru_cache
from statistics import NormalDist

__all__ = ["BUSY_NODE_SOURCE", "HOPPER_BUSY", "BLACKWELL_BUSY", "NO_BUSY_SOURCE", "expected_largest_normal",
           "job_clock_share", "with_busy_node"]

BUSY_NODE_SOURCE = ("stas00/ml-engineering@082816f9be8aeb6b65b074c33cb354a7ca1e7087 (branch fast-mamf) "
                    "compute/accelerator/benchmarks/README.md 'What we measured: alone vs all-8 concurrent': "
                    "{part} bf16 MSMF GPU0 alone {alone} TFLOP/s, all 8 GPUs x 5 rounds {busy} (range {spread:.1%}); "
                    "sigma = range / (2 z(40)) (ndcost.spec.straggler)")

#: Samples the published range is taken over: 8 GPUs x 5 rounds.
RANGE_SAMPLES = 40


@lru_cache(maxsize=512)
def expected_largest_normal(n: int) -> float:
    """z(n): the expected largest of *n* standard normal draws (Blom 1958's approximation); 0 for one draw."""
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def _busy(alone: float, busy: float, spread: float) -> tuple[float, float]:
    """(a busy node's mean over one GPU alone, the standard deviation of its GPUs' rate) from the table."""
    return busy / alone, spread / (2.0 * expected_largest_normal(RANGE_SAMPLES))


#: (busy_clock_share, clock_sigma, their source) of each part family.
HOPPER_BUSY = (*_busy(702.9, 698.6, 0.045),
               BUSY_NODE_SOURCE.format(part="H200", alone=702.9, busy=698.6, spread=0.045))
BLACKWELL_BUSY = (*_busy(1455.7, 1426.4, 0.104),
                  BUSY_NODE_SOURCE.format(part="B200", alone=1455.7, busy=1426.4, spread=0.104))
NO_BUSY_SOURCE = ("no measurement of this part's GPUs under a busy node (ndcost.spec.straggler): none applied, every "
                  "GPU of a job at the measured rate")


def with_busy_node(rates, figures: tuple[float, float, str]):
    """*rates* (a :class:`~ndcost.spec.rates.Rates`) with a part family's busy-node mean and spread."""
    share, sigma, source = figures
    sources = dict(rates.sources, busy_clock_share=source, clock_sigma=source)
    return rates.replace(busy_clock_share=share, clock_sigma=sigma, sources=sources)


def job_clock_share(busy_share: float, sigma: float, gpus: int) -> float:
    """The share of its alone sustained rate a compute-bound kernel holds in a job of *gpus* GPUs: 1 alone, else
    the busy node's mean less the expected slowest GPU's shortfall, ``busy_share · (1 - z(gpus) · sigma)``."""
    if gpus <= 1:
        return 1.0
    return busy_share * (1.0 - expected_largest_normal(int(gpus)) * sigma)
