"""A causal flash kernel's rate by sequence length (``ndcost.kernels.window_attention._tile_efficiency``): the law by
hand, against cuDNN's measured causal kernels at 2048-16384 tokens (outside the window fit that sets its constant),
the parts whose rate was measured at stated lengths, and a layer priced with it on both backends."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import ndcost
from ndcost.errors import SpecError
from ndcost.kernels.columns import LAYER_OP, LAYER_OP_FIELD, LAYER_OP_FIELDS, LAYER_OP_NAMES, RATE
from ndcost.kernels.window_attention import WINDOW_FIXED_KEYS, WINDOW_TILE, _tile_efficiency
from ndcost.spec.attention_rates import CUDNN_SDPA_TOKENS, combined_rate
from ndcost.spec.rates import DEFAULT_RATES, Rates
from ndcost.tables.seconds import seconds_arrays

F = LAYER_OP_FIELD
_ARGS = ("kinds", "skinds", "model", "smodel", "cand", "rate")
PAIRS = json.loads((Path(__file__).parent / "data" / "cudnn" / "sdpa_windows.json").read_text())["pairs"]


def test_the_law_by_hand():
    """A query meets s/2 keys and pays a tile's half and the fixed work (485 keys) once a call."""
    fixed = WINDOW_TILE / 2.0 + WINDOW_FIXED_KEYS
    assert fixed == 549.0
    assert _tile_efficiency(1024.0, 1.0) == pytest.approx(1024.0 / 1573.0, rel=1e-12)
    assert _tile_efficiency(2048.0, 1.0) == pytest.approx(2048.0 / 2597.0, rel=1e-12)
    assert _tile_efficiency(2048.0, 2.5) == pytest.approx(2048.0 / (2048.0 + 2.5 * 549.0), rel=1e-12)
    assert _tile_efficiency(0.0, 1.0) == 1.0 and _tile_efficiency(math.nan, 1.0) == 1.0
    effs = [_tile_efficiency(s / 2.0, 1.0) for s in (1024.0, 2048.0, 4096.0, 8192.0, 32768.0, 131072.0)]
    assert effs == sorted(effs) and effs[-1] < 1.0


@pytest.mark.parametrize("part", ["gb200", "gb300", "h200"])
def test_the_law_follows_cudnns_causal_kernels_by_length(part):
    """Llama 3.1's causal heads (d 128) at 2048-16384 tokens, forward and backward as seconds mode combines them:
    each length's rate over 4096's, measured against the law's -- within 7% (2048), 3% (8192 and 16384). The
    constant is fitted to the window pairs, not to these series (tools/fit_window_attention.py)."""
    rows = {pair["tokens"]: combined_rate(*pair["full"]) for pair in PAIRS
            if pair["part"] == part and (pair["window"] == 128 or part == "h200")}
    assert sorted(rows) == [2048, 4096, 8192, 16384]
    for tokens, rate in rows.items():
        law = _tile_efficiency(tokens / 2.0, 1.0) / _tile_efficiency(2048.0, 1.0)
        assert law == pytest.approx(rate / rows[4096], rel=0.07 if tokens == 2048 else 0.03), tokens


def test_the_parts_say_where_their_rate_was_measured():
    for device in ("b200", "gb200-nvl72", "gb300-nvl72"):
        rates = DEFAULT_RATES[device]
        assert rates.attention_reference_tokens == CUDNN_SDPA_TOKENS == (4096.0, 8192.0)
        assert "cudnn-frontend" in rates.sources["attention_reference_tokens"]
    # Hopper's rate (FlashAttention-3's published shares) and the A100's (FlashAttention-2's) are no measurement at a
    # stated length: the law is not applied there
    for device in ("h100-sxm", "h200", "h800", "a100-80g"):
        assert DEFAULT_RATES[device].attention_reference_tokens == ()


@pytest.mark.parametrize("bad", [(1.0,), ("4096",), 4096, "4096", (math.nan,), (8192.0, -1.0)])
def test_bad_lengths_are_refused_by_name(bad):
    with pytest.raises(SpecError, match="attention_reference_tokens"):
        DEFAULT_RATES["b200"].replace(attention_reference_tokens=bad)


def test_lengths_survive_a_rates_file(tmp_path):
    from ndcost.spec.rates_io import load_rates, save_rates

    path = tmp_path / "rates.json"
    save_rates(DEFAULT_RATES["gb200-nvl72"], path)
    assert load_rates(path).attention_reference_tokens == (4096.0, 8192.0)


def _attn_core(kernels, spec, device: str, lengths=None):
    model = ndcost.Model.from_catalog("llama3-8b")
    rates = Rates.for_software(device, "megatron-te")
    if lengths is not None:
        rates = rates.replace(attention_reference_tokens=lengths)
    arrays = seconds_arrays(model, spec, ndcost.Cluster(device, spec.num_devices), rates=rates)
    out = np.empty((len(LAYER_OP_NAMES), len(LAYER_OP_FIELDS)))
    kernels.seconds_layer_ops(*(arrays[key] for key in _ARGS), 0, out)
    return out[LAYER_OP["attn_core"]], arrays["rate"]


@pytest.mark.parametrize("seq, cp, ring", [(2048, 1, True), (16384, 1, True), (32768, 4, True), (32768, 4, False)])
def test_a_causal_layer_takes_its_length_on_both_backends(kernels, pykernels, seq, cp, ring):
    """Llama 3 8B on B200s: the length law adds to the attention core's time its FLOPs at the rate times (the mean
    tile efficiency at 4096 and 8192 over the layer's own, less one) -- a query meets seq/2 keys, over (cp + 1) / 2
    calls in ring context parallelism, one in Ulysses' -- against the same rates stating no lengths; on H100s (no
    stated lengths) nothing."""
    spec = ndcost.ExecSpec(dp=8 // cp, cp=cp, micro_batch_size=1, global_batch_size=8 // cp, seq_length=seq,
                           cp_algo="ring" if ring else "ulysses")
    rows = []
    for backend in (kernels, pykernels):
        row, rate = _attn_core(backend, spec, "b200")
        plain, plain_rate = _attn_core(backend, spec, "b200", lengths=())
        assert plain_rate[RATE["attn_fbar"]] == 0.0
        mean = (_tile_efficiency(2048.0, 1.0) + _tile_efficiency(4096.0, 1.0)) / 2.0
        assert rate[RATE["attn_fbar"]] == pytest.approx(mean, rel=1e-12)
        calls = (cp + 1.0) / 2.0 if ring and cp > 1 else 1.0
        stretch = mean / _tile_efficiency(seq / 2.0, calls)
        attn = rate[RATE["attn_eff"]] * rate[RATE["peak_attn"]]
        for flops, time in (("flops_f", "time_f"), ("flops_b", "time_b")):
            assert row[F[flops]] == plain[F[flops]]
            assert row[F[time]] - plain[F[time]] == pytest.approx(row[F[flops]] / attn * (stretch - 1.0), rel=1e-9)
        rows.append(row)
        hopper, rate = _attn_core(backend, spec, "h100-sxm")
        assert rate[RATE["attn_fbar"]] == 0.0
        if cp == 1:
            attn = rate[RATE["attn_eff"]] * rate[RATE["peak_attn"]]
            assert hopper[F["time_f"]] == pytest.approx(hopper[F["flops_f"]] / attn + rate[RATE["kernel_s"]],
                                                        rel=1e-12)
    np.testing.assert_allclose(rows[0], rows[1], rtol=1e-12)
