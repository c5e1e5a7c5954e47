"""Blackwell's fused attention rate: cuDNN's published SDPA benchmark rows, by hand."""
import pytest

from ndcost.spec.attention_rates import CUDNN_SDPA_TFLOPS, attention_burst_share
from ndcost.spec.rates import DEFAULT_RATES

SUSTAINED = 1456.3 / 1770.9          # the B200's MSMF over its MAMF (stas00/ml-engineering)


def test_a_row_counts_flops_as_ndcost_does():
    """llama3.1 on GB200, 4096 tokens, causal: 0.391 ms forward at 1408 TFLOP/s -- 2·b·s²·heads·(d_qk + d_v) / 2
    over that time (batch 2, 64 query heads, d 128) is 1406, the row's figure to its printed precision."""
    flops = 2 * 2 * 4096 ** 2 * 64 * (128 + 128) / 2
    assert flops / 0.391e-3 / 1e12 == pytest.approx(CUDNN_SDPA_TFLOPS["gb200"][0][0], rel=2e-3)


def test_forward_and_backward_make_one_rate():
    """A forward of f FLOPs at 1408 and its 2.5·f backward at 1148 run 3.5·f in f/1408 + 2.5·f/1148:
    1211.9 TFLOP/s, below both passes' mean (1278) since the backward holds most of the time."""
    forward, backward = CUDNN_SDPA_TFLOPS["gb200"][0]
    assert 3.5 / (1 / forward + 2.5 / backward) == pytest.approx(1211.9, abs=0.05)
    by_hand = (1211.94 + 1393.19 + 1137.68 + 1283.66) / 4 / 2500.0
    assert attention_burst_share("gb200", 2500.0) == pytest.approx(by_hand, rel=1e-4)


def test_the_catalog_prices_the_measured_bursts_at_the_sustained_clock():
    gb200, gb300, b200 = (DEFAULT_RATES[name] for name in ("gb200-nvl72", "gb300-nvl72", "b200"))
    assert gb200.attention_efficiency == pytest.approx(attention_burst_share("gb200", 2500.0) * SUSTAINED, rel=1e-12)
    assert gb300.attention_efficiency == pytest.approx(attention_burst_share("gb300", 2500.0) * SUSTAINED, rel=1e-12)
    # the B200 is the GB200's GPU at 1000 W: the GB200's rate x the two parts' matmul bursts (MAMF)
    b200_rate = attention_burst_share("gb200", 1.0) * 1770.9 / 1822.0
    assert b200.attention_efficiency == pytest.approx(b200_rate / 2250.0 * SUSTAINED, rel=1e-12)
    # Blackwell Ultra doubles the SFUs' exponential throughput over Blackwell (NVIDIA Technical Blog, 'Making Softmax
    # More Efficient with NVIDIA Blackwell Ultra'): the softmax between the two GEMMs stalls less, in its own rows
    assert gb300.attention_efficiency > gb200.attention_efficiency
    for rates in (gb200, gb300, b200):
        assert "cudnn-frontend" in rates.sources["attention_efficiency"]
        assert 0.35 < rates.attention_efficiency < 0.5


def test_hoppers_attention_share_against_cudnns_h200_rows():
    """The Hopper parts price attention at FlashAttention-3's share (0.55 of the peak, a burst). cuDNN's own H200
    rows (NVIDIA/cudnn-frontend@fb682ce7 benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/
    llama3.1_20260227_034703.csv: batch 1, 64 query / 8 KV heads of 128, causal) time 4096 tokens at 0.465 ms forward
    and 1.450 backward, 8192 at 1.708 and 5.083: their one rate lands within 8% of that share's burst."""
    burst = DEFAULT_RATES["h200"].attention_efficiency / (708.5 / 841.9) * 989.0
    assert burst == pytest.approx(0.55 * 989.0, rel=1e-12)
    for seq, forward_ms, backward_ms in ((4096, 0.465, 1.450), (8192, 1.708, 5.083)):
        flops = 2 * seq * seq * 64 * (128 + 128) / 2
        rate = 3.5 * flops / ((forward_ms + backward_ms) * 1e-3) / 1e12
        assert rate == pytest.approx(burst, rel=0.08), seq
