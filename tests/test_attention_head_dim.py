"""A flash kernel's rate by head dim (``ndcost.kernels.window_attention._head_dim_share``): the law by hand, the
fitted head-dim-64 shares against FlashAttention-3's published H100 figures (a source outside the fit), the parts
that carry them, bad input, and a head-dim-64 model priced with it on both backends."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ndcost
from ndcost.errors import SpecError
from ndcost.kernels.columns import LAYER_OP, LAYER_OP_FIELD, LAYER_OP_FIELDS, LAYER_OP_NAMES, RATE
from ndcost.kernels.window_attention import _head_dim_share
from ndcost.spec.attention_rates import FA2_HEAD64_SHARE, FLASH_HEAD64_SHARE, combined_rate
from ndcost.spec.rates import DEFAULT_RATES, Rates
from ndcost.tables.seconds import rates_vector, seconds_arrays

F = LAYER_OP_FIELD
_ARGS = ("kinds", "skinds", "model", "smodel", "cand", "rate")


def test_the_law_by_hand():
    """time a score element ~ alpha + d: at h = 0.75, alpha = 128 * 0.25 / 0.5 = 64, and d 96 reaches
    96 * 192 / (128 * 160) = 0.9 of the d-128 rate; d 64 reaches h; d 128 and more the rate itself."""
    assert _head_dim_share(64.0, 0.75) == pytest.approx(0.75, rel=1e-12)
    assert _head_dim_share(96.0, 0.75) == pytest.approx(96.0 * 192.0 / (128.0 * 160.0), rel=1e-12)
    assert _head_dim_share(32.0, 0.75) == pytest.approx(32.0 * 192.0 / (128.0 * 96.0), rel=1e-12)
    for d in (128.0, 192.0, 256.0):
        assert _head_dim_share(d, 0.75) == 1.0
    shares = [_head_dim_share(d, 0.677) for d in (16.0, 32.0, 64.0, 80.0, 96.0, 112.0, 127.0)]
    assert shares == sorted(shares) and 0.0 < shares[0] and shares[-1] < 1.0
    # no measurement (1), or a share the law cannot hold (<= 1/2), leaves the rate as it is
    assert _head_dim_share(64.0, 1.0) == 1.0 and _head_dim_share(64.0, 0.5) == 1.0
    assert _head_dim_share(0.0, 0.75) == 1.0 and _head_dim_share(math.nan, 0.75) == 1.0


def test_the_hopper_share_matches_flashattention3s_h100_figures():
    """The H200's share is fitted to cuDNN's windowed kernels; FlashAttention-3's paper measured full attention at
    both head dims on the H100 (the same GH100 silicon), 4096 tokens, bf16 (Shah et al. 2024, arXiv 2407.08608,
    Figure 5 forward and Figure 6 backward, the values on the bars): cuDNN 408 / 609 TFLOP/s forward (d 64 / 128),
    417 / 499 backward; FlashAttention-3 476 / 638 and 453 / 542. Both within 3% of the fit."""
    cudnn = combined_rate(408.0, 417.0) / combined_rate(609.0, 499.0)
    fa3 = combined_rate(476.0, 453.0) / combined_rate(638.0, 542.0)
    assert cudnn == pytest.approx(0.788, abs=0.001) and fa3 == pytest.approx(0.811, abs=0.001)
    assert FLASH_HEAD64_SHARE["h200"] == pytest.approx(cudnn, rel=0.03)
    assert FLASH_HEAD64_SHARE["h200"] == pytest.approx(fa3, rel=0.03)


def test_flashattention2_takes_its_own_share_where_the_software_runs_it():
    """PyTorch's SDPA runs FlashAttention-2 on Hopper (``attention_kernel`` "fa2"): its own head-dim-64 share, from the
    FlashAttention-2 bars of the same figures (321 / 279 forward / backward at d 64, 368 / 310 at 128)."""
    assert FA2_HEAD64_SHARE == pytest.approx(combined_rate(321.0, 279.0) / combined_rate(368.0, 310.0), abs=5e-4)
    assert FA2_HEAD64_SHARE == 0.893
    hopper = DEFAULT_RATES["h100-sxm"]
    assert hopper.head64_share() == FLASH_HEAD64_SHARE["h200"]
    assert hopper.replace(attention_kernel="fa2").head64_share() == FA2_HEAD64_SHARE
    # a part whose FlashAttention-2 is not stated keeps its best kernel's share under "fa2"
    assert DEFAULT_RATES["b200"].replace(attention_kernel="fa2").head64_share() == FLASH_HEAD64_SHARE["gb200"]
    rate = rates_vector(ndcost.Cluster("h100-sxm", 8), Rates.for_software("h100-sxm", "torchtitan-eager"), "bf16")
    assert rate[RATE["attn_h64"]] == FA2_HEAD64_SHARE


def test_the_parts_carry_their_measured_share():
    for device, part in (("h100-sxm", "h200"), ("h200", "h200"), ("h800", "h200"), ("b200", "gb200"),
                         ("gb200-nvl72", "gb200"), ("gb300-nvl72", "gb300")):
        rates = DEFAULT_RATES[device]
        assert rates.attention_head64_share == FLASH_HEAD64_SHARE[part], device
        assert "fit_window_attention" in rates.sources["attention_head64_share"], device
    # a part without a measurement: not applied, and said so
    assert DEFAULT_RATES["a100-80g"].attention_head64_share == 1.0
    assert "no measurement" in DEFAULT_RATES["a100-80g"].sources["attention_head64_share"]


@pytest.mark.parametrize("name", ["attention_head64_share", "fa2_attention_head64_share"])
@pytest.mark.parametrize("bad", [0.5, 0.2, 1.01, math.nan, math.inf, "0.7"])
def test_a_bad_share_is_refused_by_name(name, bad):
    with pytest.raises(SpecError, match=name):
        DEFAULT_RATES["h100-sxm"].replace(**{name: bad})


def _attn_core(kernels, model, spec, device: str, kind: int):
    arrays = seconds_arrays(model, spec, ndcost.Cluster(device, spec.num_devices),
                            rates=Rates.for_software(device, "megatron-te"))
    out = np.empty((len(LAYER_OP_NAMES), len(LAYER_OP_FIELDS)))
    kernels.seconds_layer_ops(*(arrays[key] for key in _ARGS), kind, out)
    return out[LAYER_OP["attn_core"]], arrays["rate"]


def test_a_head_dim_64_layer_runs_at_the_share_on_both_backends(kernels, pykernels):
    """gpt-oss's full-attention layers (heads of 64) on an H100: their FLOPs at the attention rate times the H200's
    share, plus a launch, forward and backward; Llama 3's (heads of 128) at the rate itself."""
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=1, global_batch_size=8, seq_length=4096)
    dense = ndcost.ExecSpec(dp=8, micro_batch_size=1, global_batch_size=8, seq_length=4096)
    gpt_oss, llama = ndcost.Model.from_catalog("gpt-oss-120b"), ndcost.Model.from_catalog("llama3-8b")
    assert gpt_oss.kinds[1].window == 0 and gpt_oss.head_dim == 64 and llama.head_dim == 128
    rows = []
    for backend in (kernels, pykernels):
        row, rate = _attn_core(backend, gpt_oss, spec, "h100-sxm", 1)
        attn = rate[RATE["attn_eff"]] * rate[RATE["peak_attn"]]
        assert rate[RATE["attn_h64"]] == FLASH_HEAD64_SHARE["h200"]
        for flops, time in (("flops_f", "time_f"), ("flops_b", "time_b")):
            assert row[F[time]] == pytest.approx(row[F[flops]] / (attn * FLASH_HEAD64_SHARE["h200"])
                                                 + rate[RATE["kernel_s"]], rel=1e-12)
        rows.append(row)
        full, rate = _attn_core(backend, llama, dense, "h100-sxm", 0)
        attn = rate[RATE["attn_eff"]] * rate[RATE["peak_attn"]]
        assert full[F["time_f"]] == pytest.approx(full[F["flops_f"]] / attn + rate[RATE["kernel_s"]], rel=1e-12)
    np.testing.assert_allclose(rows[0], rows[1], rtol=1e-12)
