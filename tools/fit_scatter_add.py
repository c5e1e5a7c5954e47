"""Fit the atomic scatter-add rate (Rates.scatter_add_rate) to the H200's measured expert blocks.

``tests/data/h200/moe.json`` times one MoE layer's expert block two ways on one H200 (moe_layer.py): the
GEMM block alone and the whole block, which adds the router, a gather that permutes and a weighted
index_add that un-permutes -- two scatter-adds of its routed rows a repetition (the un-permutation forward,
the gather's backward). Each case is priced by ``seconds_moe_block`` as the harness ran it (:func:`harness`);
the rate that minimises the squared log error of the whole blocks whose device time exceeds the host's
(the five cases of 2 ms and more: the three smaller ones run at the harness's host floor) is searched on a
log grid and printed with each case's error. Run: ``python tools/fit_scatter_add.py``.
tests/test_moe_block_h200.py checks that the shipped default is this fit's and prices every case with it.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "h200" / "moe.json"
#: 10 G to 1 T atomic adds a second, 60 steps a decade; the fit is rounded to 2 significant figures.
GRID = tuple(10.0 ** (10 + i / 60.0) for i in range(121))
#: The cases the fit reads: whole blocks that take at least this long (device-bound).
DEVICE_BOUND_S = 2e-3
_GEMM_OPS = ("experts", "expert_act")


def cases(path: Path = DATA) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))


def harness(kernels, case: dict, rates=None) -> tuple[float, float]:
    """(GEMM block, whole block) seconds of one measured case, priced as moe_layer.py runs it.

    torchtitan's kernels (one grouped kernel a call, an index gather and scatter-add, the router unfused, no
    aux loss) at *rates* (default: the H200's with them); the harness's tensors are bf16 leaves, so each
    repetition adds its weight gradients into the previous ones (no accumulation fusion, 2-byte gradients)
    and its input's gradient too (one read-two-write-one pass, 16-bit); its forward and its backward each
    take the longer of the device's ops and the host's launches (the loop never waits for the device)."""
    import numpy as np

    import ndcost
    from ndcost.kernels.columns import LAYER_OP, LAYER_OP_FIELD, LAYER_OP_FIELDS, LAYER_OP_NAMES, MOE_BLOCK, \
        MOE_BLOCK_FIELDS, RATE
    from ndcost.spec.rates import Rates
    from ndcost.tables.seconds import rates_vector, seconds_candidate_vector

    if rates is None:
        rates = Rates.for_software("h200", "torchtitan-eager")
    rates = rates.replace(grad_accumulation_fusion=False)
    rate = rates_vector(ndcost.Cluster("h200", 1), rates, "bf16")
    spec = ndcost.ExecSpec(micro_batch_size=1, global_batch_size=1, grad_bytes=2)
    cand = seconds_candidate_vector(ndcost.Model.from_catalog("qwen3-30b-a3b"), spec)
    rows = case["rows_per_expert"] * case["local_experts"]
    shape = np.zeros(len(MOE_BLOCK_FIELDS))
    for name, value in dict(tokens=case["tokens"], rows=rows, local=case["local_experts"], hidden=case["hidden"],
                            width=case["ffn"], n_ff=3, experts=case["experts"], topk=case["topk"], grad_acc=1).items():
        shape[MOE_BLOCK[name]] = value
    out = np.empty((len(LAYER_OP_NAMES), len(LAYER_OP_FIELDS)))
    kernels.seconds_moe_block(shape, cand, rate, out)
    f = LAYER_OP_FIELD
    hbm = rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]
    launch, kernel_s = rate[RATE["launch_s"]], rate[RATE["kernel_s"]]
    device_ops = tuple(name for name in LAYER_OP_NAMES if name not in ("launch", "tp_comm", "cp_comm", "ep_comm"))

    def repetition(ops, leaf_rows: float) -> float:
        leaf = 3.0 * 2.0 * leaf_rows * case["hidden"] / hbm + kernel_s
        device_f = sum(out[LAYER_OP[op], f["time_f"]] for op in ops)
        device_b = sum(out[LAYER_OP[op], f["time_b"]] for op in ops) + leaf
        host_f = sum(out[LAYER_OP[op], f["host_f"]] for op in ops)
        host_b = sum(out[LAYER_OP[op], f["host_b"]] for op in ops) + launch
        return max(device_f, host_f) + max(device_b, host_b)

    return repetition(_GEMM_OPS, rows), repetition(device_ops, case["tokens"])


def fit() -> tuple[float, list[tuple[str, float]]]:
    """(rate, [(case, error of its whole block)]) of the best grid point, over the device-bound cases."""
    from ndcost import _kernels_py
    from ndcost.spec.rates import Rates

    chosen = [c for c in cases() if c["layer_s"] >= DEVICE_BOUND_S]
    best = None
    for rate in GRID:
        rates = Rates.for_software("h200", "torchtitan-eager").replace(scatter_add_rate=rate)
        errors = [harness(_kernels_py, c, rates)[1] / c["layer_s"] - 1.0 for c in chosen]
        score = sum(math.log1p(e) ** 2 for e in errors)
        if best is None or score < best[0]:
            best = (score, rate, errors)
    _, rate, errors = best
    rounded = float(f"{rate:.2g}")
    return rounded, [(f"{c['model']} {c['local_experts']}/{c['experts']}", e) for c, e in zip(chosen, errors)]


if __name__ == "__main__":
    rate, errors = fit()
    print(f"scatter_add_rate {rate:.2g} adds a second; whole-block errors: "
          + ", ".join(f"{name} {100 * e:+.1f}%" for name, e in errors))
