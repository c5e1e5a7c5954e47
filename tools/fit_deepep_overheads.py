"""Fit DeepEP's intranode call: a fixed cost, a cost a token and a share of the link (ndcost.spec.deepep_rates).

Seconds mode prices one call of DeepEP's normal kernels inside a node (``ndcost.kernels.seconds_comm._exchange``) as

    time = call + token * tokens + tokens * ranks * bytes / (link * share) + link latency

a fixed cost a call (the notify kernel that swaps every rank's counts, the host's wait for them, the launches), a
cost a token the rank sends (each token's routing read and its destinations' queues, handled by the sender warps),
and the bytes each rank receives (its own share included, as DeepEP counts them) at a share of the link.

NVIDIA's aiconfigurator timed those kernels on one DGX H100 (``tests/data/aiconfigurator/h100_deepep_normal.json``:
24 SMs, top-8 of 256 experts over 8 ranks, uniform routing, 4096 and 16384 tokens a rank, hidden 2048-7168, dispatch
in FP8 with its 1x128 scales and combine in BF16): twenty times at two token counts and five widths, which separate a
call's cost from a token's from a byte's. This fits the three by least squares on the relative error (the form is
linear in call, token and 1/share) and prints them with the worst row. DeepEP's own H800 figures are the check
(tests/test_seconds_expert_exchange.py), not an input. Run: ``python tools/fit_deepep_overheads.py``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ndcost.spec.device import Device
from ndcost.tables.seconds import FP8_DISPATCH_BYTES as FP8

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "aiconfigurator" / "h100_deepep_normal.json"

#: One DGX H100's NVLink a direction and its link latency, as the catalog states them.
_H100 = Device.from_catalog("h100-sxm")
H100_LINK, LATENCY = _H100.intra_node_bandwidth, _H100.intra_node_latency
BF16 = 2.0
#: aiconfigurator's routing: top-8 of 256 experts over the node's 8 ranks, uniform.
TOPK, EXPERTS, RANKS = 8, 256, 8


def ranks_reached() -> float:
    """Ranks a token reaches with top-8 of 256 experts over 8 ranks, uniform routing: 8·(1 - C(224, 8)/C(256, 8))."""
    return RANKS * (1.0 - math.comb(EXPERTS - EXPERTS // RANKS, TOPK) / math.comb(EXPERTS, TOPK))


def points(path: Path = DATA) -> list[tuple[float, float, float]]:
    """(tokens, bytes a rank receives, measured seconds) of every measured call, dispatch and combine."""
    out = []
    for row in json.loads(path.read_text(encoding="utf-8"))["rows"]:
        tokens = float(row["num_token"])
        for key, element in (("dispatch_transmit_us", FP8), ("combine_transmit_us", BF16)):
            out.append((tokens, tokens * ranks_reached() * row["hidden_size"] * element, row[key] * 1e-6))
    return out


def fit(path: Path = DATA) -> tuple[float, float, float, float]:
    """(call s, token s, share of the link, worst relative error) of the least-squares fit."""
    measured = points(path)
    # (call + token·t + moved/rate + latency)/seconds = 1, each row divided by its seconds: relative error
    lhs = np.array([[1.0 / s, t / s, m / s] for t, m, s in measured])
    rhs = np.array([1.0 - LATENCY / s for _, _, s in measured])
    (call, token, inverse_rate), *_ = np.linalg.lstsq(lhs, rhs, rcond=None)
    worst = float(np.max(np.abs(lhs @ np.array([call, token, inverse_rate]) - rhs)))
    return float(call), float(token), 1.0 / (float(inverse_rate) * H100_LINK), worst


def main() -> None:
    call, token, share, worst = fit()
    print(f"call {call * 1e6:.1f} us, token {token * 1e9:.2f} ns, NVLink share {share:.4f}, "
          f"worst of the {len(points())} measured calls {worst:.1%}")


if __name__ == "__main__":
    main()
