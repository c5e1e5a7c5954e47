"""The expert block measured on an H200 (tests/data/h200/moe.json), priced from its per-op table.

The harness (../shared/measurements/h200/moe_layer.py) runs one MoE layer's expert block on one GPU as
torch._grouped_mm runs it, forward + backward, 10 repetitions after 3 warm-ups: ``gemm_s`` the gate+up and
down grouped GEMMs with SwiGLU on rows already permuted, ``layer_s`` with the router over all tokens (logits,
fp32 softmax, top-k), the gather that permutes and the weighted index_add that un-permutes. Each case is priced
by ``seconds_moe_block`` with the stack stated as it ran (``tools/fit_scatter_add.harness``: torchtitan's
kernels, bf16 leaves whose gradients accumulate across repetitions, a repetition's passes bound by the longer
of device and host).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ndcost.spec.moe_kernels import MOE_KERNEL_DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
if not (ROOT / "tools" / "fit_scatter_add.py").exists():
    # The sdist ships no tools/ (tests/test_wheels.py): cibuildwheel runs these tests from it.
    pytest.skip("source tree not available (sdist or installed wheel)", allow_module_level=True)
_SPEC = importlib.util.spec_from_file_location("fit_scatter_add", ROOT / "tools" / "fit_scatter_add.py")
FIT = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(FIT)
CASES = FIT.cases()
#: The cases at the harness's host floor: a repetition of the GEMM block takes 0.71-0.82 ms and of the whole
#: block 1.52-1.56 ms whatever their shape, where their device work is half that or less.
HOST_FLOORED = {("qwen3-30b-a3b", 16), ("deepseek-v3", 4), ("qwen3-235b-a22b", 4)}


def _key(case) -> tuple[str, int]:
    return case["model"], case["local_experts"]


def test_the_gemm_blocks_within_15_percent(kernels):
    """The grouped GEMMs and SwiGLU, forward + backward (and the weights' gradient accumulation): within 15%
    where the device sets the pace, below the measurement where the host's per-op cost does (the harness's
    floor exceeds a bare launch's 9.58 us an op, which is what ndcost prices)."""
    for case in CASES:
        gemm, _ = FIT.harness(kernels, case)
        error = gemm / case["gemm_s"] - 1.0
        if _key(case) in HOST_FLOORED and case["hidden"] == 4096:
            assert error < 0.0, case           # Qwen3-235B's 4 experts: 0.73 ms measured, 0.45 priced
        else:
            assert abs(error) < 0.15, (case, error)


def test_the_whole_blocks_and_their_ratio_to_the_gemms(kernels):
    """The whole block (router, permutation, un-permutation): within 15% on the device-bound cases, whose
    fit the scatter-add rate is (tools/fit_scatter_add.py); over its GEMMs 1.05-2.18 measured, and priced in the
    same order (Spearman >= 0.9): Mixtral's 8 experts least, the small expert-parallel slices most."""
    measured, priced = [], []
    for case in CASES:
        gemm, whole = FIT.harness(kernels, case)
        assert whole > 1.02 * gemm
        measured.append(case["layer_over_gemm"])
        priced.append(whole / gemm)
        if _key(case) not in HOST_FLOORED:
            assert whole == pytest.approx(case["layer_s"], rel=0.15), case
        else:
            assert whole < case["layer_s"]
    ranks_m = np.argsort(np.argsort(measured))
    ranks_p = np.argsort(np.argsort(priced))
    n = len(CASES)
    spearman = 1.0 - 6.0 * float(((ranks_m - ranks_p) ** 2).sum()) / (n * (n * n - 1))
    assert spearman >= 0.9, (measured, priced)


def test_the_shipped_scatter_add_rate_is_the_fit():
    rate, errors = FIT.fit()
    assert rate == MOE_KERNEL_DEFAULTS["scatter_add_rate"]
    assert len(errors) == 5 and max(abs(e) for _, e in errors) < 0.10
