"""The routed experts' grouped GEMM at a few hundred rows an expert, by hand.

Qwen3-30B-A3B (hidden 2048, 128 experts of width 768, 8 a token; 32 query heads and 4 K/V heads of 128)
on one H100 at 4096 tokens: each expert meets 4096 x 8 / 128 = 256 rows. Its forward runs as one
grouped GEMM per matmul over the 128 local experts (Megatron-Core's GroupedMLP / TE GroupedLinear):
the gate-and-up [256 x 2048]·[2048 x 1536] and the down [256 x 768]·[768 x 2048], each priced as a batch
of 128 GEMMs -- max(FLOPs at the sustained rate with the wave tail, the bytes of every expert's weights
and rows at the HBM rate) plus one launch. At 256 rows the weights' bytes (2 x 2048 x 1536 per expert)
rival the FLOPs (2 x 256 x 2048 x 1536): the roofline, not the peak, prices them.
"""
from __future__ import annotations

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import RATE, SECONDS_LAYER, SECONDS_LAYER_FIELDS
from ndcost.tables.seconds import seconds_arrays

L = SECONDS_LAYER
H, EXPERTS, TOPK, WIDTH, HEADS, KV, DH, TOKENS = 2048, 128, 8, 768, 32, 4, 128, 4096


def _gemm(rate, m, n, k, batch=1.0, peak="peak_mm", eff="mm_eff"):
    """The documented GEMM price, restated from the rate vector."""
    flops = 2.0 * m * n * k * batch
    waves = batch * m * n / rate[RATE["wave"]]
    compute = flops / (rate[RATE[eff]] * rate[RATE[peak]]) * (1.0 + rate[RATE["wave_tail"]] / waves)
    memory = batch * 2.0 * (m * k + k * n + m * n) / (rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]])
    return max(compute, memory) + rate[RATE["kernel_s"]]


def test_the_grouped_gemm_at_a_few_hundred_rows_by_hand(kernels):
    model = ndcost.Model.from_catalog("qwen3-30b-a3b")
    assert (model.hidden_size, model.num_experts, model.num_experts_per_tok) == (H, EXPERTS, TOPK)
    spec = ndcost.ExecSpec(dp=1, tp=1, ep=1, micro_batch_size=1, global_batch_size=1, seq_length=TOKENS)
    a = seconds_arrays(model, spec, ndcost.Cluster("h100-sxm", 1))
    out = np.empty((a["kinds"].shape[0], len(SECONDS_LAYER_FIELDS)))
    kernels.seconds_layer_times(a["kinds"], a["skinds"], a["model"], a["smodel"], a["cand"], a["rate"], out)
    row, rate = out[0], a["rate"]
    per = TOKENS * TOPK / EXPERTS
    assert per == 256
    experts = _gemm(rate, per, 2 * WIDTH, H, EXPERTS) + _gemm(rate, per, H, WIDTH, EXPERTS)
    weights = EXPERTS * 2.0 * H * 2 * WIDTH / (rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]])
    flops = 2.0 * per * 2 * WIDTH * H * EXPERTS / (rate[RATE["mm_eff"]] * rate[RATE["peak_mm"]])
    assert weights > 0.5 * flops            # a few hundred rows: the weights' bytes rival the FLOPs
    # the rest of the layer's forward GEMMs: fused QKV, the output projection, the 16-bit router
    qkv = _gemm(rate, TOKENS, (HEADS + 2 * KV) * DH, H)
    proj = _gemm(rate, TOKENS, H, HEADS * DH)
    router = _gemm(rate, TOKENS, EXPERTS, H, peak="peak_attn", eff="mm16_eff")
    assert row[L["gemm_f"]] == pytest.approx(qkv + proj + router + experts, rel=1e-12)
