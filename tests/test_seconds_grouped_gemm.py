"""The routed experts' grouped GEMMs at a few hundred rows an expert: by hand, against DeepGEMM's published H800
table, and against the measured H200 timings their two shape figures are fitted to.

A grouped GEMM over G experts of [m x k]·[k x n] (``ndcost.kernels.seconds_moe._grouped``): each expert's output
cut into PyTorch's sm90 tiles (128 x 256; 64 x 128 when m or n <= 128), whole waves of them over the SMs, each
tile 2·tm·tn·(k + tile overhead) FLOPs at the large-GEMM rate shared by the SMs; the experts' bytes at the
HBM rate; the longer of the two plus the exposed share of the shorter, plus kernel_s.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import LAYER_OP, LAYER_OP_FIELD, RATE
from ndcost.spec.moe_kernels import MOE_KERNEL_DEFAULTS
from ndcost.spec.rates import Rates
from ndcost.tables.seconds import rates_vector, seconds_candidate_vector
from moe_block_cases import price_moe_block
from source_tools import tool

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "h200"
F = LAYER_OP_FIELD


def _cand(precision: str = "bf16") -> np.ndarray:
    spec = ndcost.ExecSpec(micro_batch_size=1, global_batch_size=1, seq_length=4096, precision=precision)
    return seconds_candidate_vector(ndcost.Model.from_catalog("qwen3-30b-a3b"), spec)


def _by_hand(rate, groups, m, n, k, in_bytes=2.0, out_bytes=2.0) -> float:
    """The documented grouped GEMM price, restated from the rate vector."""
    tm, tn = (64.0, 128.0) if m <= 128 or n <= 128 else (128.0, 256.0)
    tiles = groups * math.ceil(m / tm) * math.ceil(n / tn)
    waves = math.ceil(tiles / rate[RATE["sms"]])
    per_sm = rate[RATE["mm_eff"]] * rate[RATE["peak_mm"]] / rate[RATE["sms"]]
    compute = waves * 2.0 * tm * tn * (k + rate[RATE["g_tile_k"]]) / per_sm
    memory = groups * (in_bytes * (m * k + k * n) + out_bytes * m * n) / (rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]])
    return max(compute, memory) + rate[RATE["g_stream"]] * min(compute, memory) + rate[RATE["kernel_s"]]


def test_a_grouped_gemm_at_512_rows_by_hand(kernels):
    """Qwen3-30B-A3B's experts, 16 of them at 512 rows each, as torch._grouped_mm runs them on an H200: the
    gate-and-up GEMM [512 x 2048]·[2048 x 1536] is 16 x 4 x 6 = 384 tiles of 128 x 256, three waves over 132
    SMs; the down GEMM [512 x 768]·[768 x 2048] 16 x 4 x 8 = 512 tiles, four waves. Each is a setup kernel and
    the grouped kernel: 4 kernels forward, 8 backward."""
    rates = Rates.for_device("h200").replace(grouped_gemm_impl="cutlass")
    rate = rates_vector(ndcost.Cluster("h200", 1), rates, "bf16")
    out = price_moe_block(kernels, _cand(), rate, tokens=8192, rows=16 * 512, local=16, hidden=2048, width=768, n_ff=3,
                 experts=128, topk=8)
    experts = out[LAYER_OP["experts"]]
    up, down = _by_hand(rate, 16, 512, 1536, 2048), _by_hand(rate, 16, 512, 2048, 768)
    assert math.ceil(16 * 4 * 6 / 132) == 3 and math.ceil(16 * 4 * 8 / 132) == 4
    assert experts[F["time_f"]] == pytest.approx(up + down, rel=1e-12)
    assert (experts[F["kernels_f"]], experts[F["kernels_b"]]) == (4.0, 8.0)
    assert experts[F["flops_f"]] == pytest.approx(2.0 * 16 * 512 * 2048 * (1536 + 768), rel=1e-12)
    # why a 512-row grouped GEMM is slower than the large-GEMM rate: its tiles' fixed cost (60 of 2048 + 60
    # elements of main loop) and its whole waves (384 tiles in 3 x 132 slots), and a third of its weight stream
    large = 2.0 * 16 * 512 * 2048 * 1536 / (rate[RATE["mm_eff"]] * rate[RATE["peak_mm"]])
    assert up > 1.2 * large


def test_a_few_hundred_rows_within_15_percent_of_deepgemm(kernels):
    """deepseek-ai/DeepGEMM@55ab91f README.md, 'Grouped GEMMs for MoE models (masked layout)', H800 SXM5, fp8,
    the kernel alone (bench_kineto; casts are the caller's): DeepSeek-V3's expert pair, gate-and-up
    (n 4096, k 7168) and down (n 7168, k 2048), at 4 groups x 256 rows (932 and 815 TFLOPS) and 2 x 512 rows
    (1040 and 916 TFLOPS). One grouped kernel a call, the casts' bytes left out."""
    rates = Rates.for_device("h800").replace(grouped_gemm_impl="cutlass")
    rate = np.array(rates_vector(ndcost.Cluster("h800", 1), rates, "fp8"))
    rate[RATE["f8_cast_b"]] = 0.0
    for groups, rows, up_tflops, down_tflops in ((4, 256, 932.0, 815.0), (2, 512, 1040.0, 916.0)):
        measured = (2.0 * groups * rows * 4096 * 7168 / (up_tflops * 1e12)
                    + 2.0 * groups * rows * 7168 * 2048 / (down_tflops * 1e12))
        out = price_moe_block(kernels, _cand("fp8"), rate, tokens=4096, rows=groups * rows, local=groups, hidden=7168,
                     width=2048, n_ff=3, experts=256, topk=8)
        priced = out[LAYER_OP["experts"]][F["time_f"]]
        assert priced == pytest.approx(measured, rel=0.15), (groups, rows, priced / measured - 1.0)


def test_the_measured_h200_grouped_gemms_at_256_to_512_rows():
    """The H200's torch._grouped_mm timings the figures are fitted to, at 256 and 512 rows an expert (those
    longer than 40 us): each within 25%, their mean absolute error 11%."""
    fit = _fit_tool()
    shapes = [s for s in fit.measured_shapes() if s[1] in (256.0, 512.0)]
    errors = fit.errors(MOE_KERNEL_DEFAULTS["grouped_gemm_tile_overhead"], MOE_KERNEL_DEFAULTS["grouped_gemm_exposed"],
                        shapes)
    assert len(errors) == 11
    assert max(abs(e) for e in errors) < 0.25
    assert sum(abs(e) for e in errors) / len(errors) < 0.12


def test_the_shipped_figures_are_the_fit():
    """tools/fit_grouped_gemm.py, over tests/data/h200/h200_grouped.json, finds the defaults Rates ships."""
    tile, exposed, mean, worst = _fit_tool().fit()
    assert (tile, exposed) == (MOE_KERNEL_DEFAULTS["grouped_gemm_tile_overhead"],
                               MOE_KERNEL_DEFAULTS["grouped_gemm_exposed"])
    assert mean < 0.08 and worst < 0.25
    doc = json.loads((DATA / "h200_grouped.json").read_text())
    assert doc["hbm"]["tb_per_s_read_plus_write"] == pytest.approx(
        Rates.for_device("h200").hbm_efficiency * ndcost.Cluster("h200", 1).device.hbm_bandwidth / 1e12)


def test_multi_stream_experts_keep_the_dense_gemm_price(kernels):
    """Transformer Engine's GroupedLinear on Hopper runs a cuBLAS GEMM per expert over 4 streams: priced as the
    batch of dense GEMMs (the device's cuBLAS wave tail), their fixed costs 4 at a time, one launch each."""
    from ndcost.kernels.seconds_ops import _gemm

    rate = rates_vector(ndcost.Cluster("h100-sxm", 1), Rates.for_device("h100-sxm"), "bf16")
    out = price_moe_block(kernels, _cand(), rate, tokens=8192, rows=16 * 512, local=16, hidden=2048, width=768, n_ff=3,
                 experts=128, topk=8)
    experts = out[LAYER_OP["experts"]]
    ks = rate[RATE["kernel_s"]]
    expected = (_gemm(512, 1536, 2048, 16, 2.0, 2.0, rate) + _gemm(512, 2048, 768, 16, 2.0, 2.0, rate)
                + 2 * (math.ceil(16 / 4) - 1) * ks)
    assert experts[F["time_f"]] == pytest.approx(expected, rel=1e-12)
    assert experts[F["kernels_f"]] == 2 * 16


def _fit_tool():
    return tool("fit_grouped_gemm", "tests/data/h200/h200_grouped.json")
