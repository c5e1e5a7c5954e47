"""A sliding-window flash kernel's fixed work a query (``ndcost.kernels.window_attention``): the model by hand, its
fit, with each part's head-dim-64 share, to NVIDIA's measured windowed (d 64) and full causal (d 128) SDPA kernels
(tools/fit_window_attention.py over tests/data/cudnn/sdpa_windows.json), and a windowed layer priced with both on
both backends."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import LAYER_OP, LAYER_OP_FIELD, LAYER_OP_FIELDS, LAYER_OP_NAMES, RATE
from ndcost.kernels.window_attention import (
    WINDOW_FIXED_KEYS, WINDOW_TILE, _head_dim_share, _tile_efficiency, _window_stretch,
)
from ndcost.spec.attention_rates import FLASH_HEAD64_SHARE
from ndcost.spec.rates import Rates
from ndcost.tables.seconds import seconds_arrays

ROOT = Path(__file__).resolve().parents[1]
if not (ROOT / "tools" / "fit_window_attention.py").exists():
    pytest.skip("the source tree's tools/ is not here (an installed-wheel run)", allow_module_level=True)
_SPEC = importlib.util.spec_from_file_location("fit_window_attention", ROOT / "tools" / "fit_window_attention.py")
fit_tool = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(fit_tool)

F = LAYER_OP_FIELD
_ARGS = ("kinds", "skinds", "model", "smodel", "cand", "rate")


def test_the_stretch_by_hand():
    """gpt-oss's 128-token window over 4096 tokens: 127.5 useful keys a query (query i meets min(i + 1, 128)),
    beside them half a tile on the diagonal, a far edge cut in 31/32 of the sequence and the fixed work; the full
    causal kernel 2048 keys, half a tile and the fixed work."""
    span = 128 - 128 * 127 / (2 * 4096)
    windowed = span + 64 + 64 * (1 - 128 / 4096) + WINDOW_FIXED_KEYS
    full = 2048 + 64 + WINDOW_FIXED_KEYS
    assert _window_stretch(128.0, 4096.0) == pytest.approx((windowed / span) / (full / 2048), rel=1e-12)
    assert WINDOW_TILE == 128.0
    # with the GB200's head-dim-64 share: 0.13-0.18 of the full d-128 rate, as measured
    assert 0.13 < FLASH_HEAD64_SHARE["gb200"] / _window_stretch(128.0, 4096.0) < 0.18


def test_the_stretch_falls_to_one_as_the_window_reaches_the_sequence():
    stretches = [_window_stretch(float(w), 8192.0) for w in (64, 128, 1024, 4096, 8000, 8191)]
    assert stretches == sorted(stretches, reverse=True)
    assert stretches[-1] == pytest.approx(1.0, abs=1e-3)
    for window in (0.0, -5.0, 8192.0, 1e9):
        assert _window_stretch(window, 8192.0) == 1.0       # no window: the full kernel


def test_the_shipped_fixed_work_is_the_fit():
    assert fit_tool.fit(fit_tool.pairs()) == WINDOW_FIXED_KEYS


def test_every_measured_pair_within_4_percent():
    """The window's stretch and the part's head-dim-64 share together: 16 pairs, two windows, three parts."""
    every = fit_tool.pairs()
    shares = fit_tool.head64_shares(every, WINDOW_FIXED_KEYS)
    assert len(every) == 16
    for pair in every:
        error = shares[pair["part"]] * fit_tool.model_ratio(pair, WINDOW_FIXED_KEYS) / fit_tool.measured_ratio(pair) - 1.0
        assert abs(error) < 0.04, pair


def test_each_part_alone_fits_near_the_shared_value():
    """A physical constant of the kernel's structure, not of one part: each part's own fit within 5%, and the GB200's
    128-token windows alone (without its 1024-token ones) give the same head-dim share within 3%."""
    every = fit_tool.pairs()
    for part in {pair["part"] for pair in every}:
        own = fit_tool.fit([pair for pair in every if pair["part"] == part])
        assert abs(own / WINDOW_FIXED_KEYS - 1.0) < 0.05, part
    short = [pair for pair in every if pair["part"] == "gb200" and pair["window"] == 128]
    alone = fit_tool.head64_shares(short, fit_tool.fit(short))["gb200"]
    assert alone == pytest.approx(FLASH_HEAD64_SHARE["gb200"], rel=0.03)


def test_the_shipped_head_dim_shares_are_the_fit():
    every = fit_tool.pairs()
    for part, share in fit_tool.head64_shares(every, fit_tool.fit(every)).items():
        assert FLASH_HEAD64_SHARE[part] == round(share, 3), part


def _attn_core(kernels, name: str, fields: dict, kind: int):
    model = ndcost.Model.from_catalog(name)
    spec = ndcost.ExecSpec(**fields)
    arrays = seconds_arrays(model, spec, ndcost.Cluster("b200", spec.num_devices),
                            rates=Rates.for_software("b200", "megatron-te"))
    out = np.empty((len(LAYER_OP_NAMES), len(LAYER_OP_FIELDS)))
    kernels.seconds_layer_ops(*(arrays[key] for key in _ARGS), kind, out)
    return out[LAYER_OP["attn_core"]], arrays["rate"], model


def test_a_windowed_layer_takes_the_stretch_on_both_backends(kernels, pykernels):
    """gpt-oss's sliding layers (kind 0): the attention core's forward and backward are their FLOPs at the
    attention rate times the stretch, over the part's head-dim-64 share (its heads are 64 wide), plus a launch;
    its full-attention layers (kind 1) take the share and no stretch. At 4096 tokens on a B200, whose rate was
    measured at 4096 and 8192, both take the tile efficiency of those lengths over 4096's
    (tests/test_attention_length.py)."""
    fields = dict(dp=8, ep=8, micro_batch_size=4, global_batch_size=32, seq_length=4096)
    for backend in (kernels, pykernels):
        row, rate, model = _attn_core(backend, "gpt-oss-120b", fields, 0)
        assert model.kinds[0].window == 128 and model.kinds[1].window == 0
        assert rate[RATE["attn_h64"]] == FLASH_HEAD64_SHARE["gb200"]     # the B200 is the GB200's GPU
        attn = rate[RATE["attn_eff"]] * rate[RATE["peak_attn"]] * _head_dim_share(64.0, rate[RATE["attn_h64"]])
        attn *= _tile_efficiency(2048.0, 1.0) / rate[RATE["attn_fbar"]]
        assert rate[RATE["attn_fbar"]] == pytest.approx((_tile_efficiency(2048.0, 1.0) + _tile_efficiency(4096.0, 1.0))
                                                        / 2.0, rel=1e-12)
        stretch = _window_stretch(128.0, 4096.0)
        assert row[F["time_f"]] == pytest.approx(row[F["flops_f"]] / attn * stretch + rate[RATE["kernel_s"]],
                                                 rel=1e-12)
        assert row[F["time_b"]] == pytest.approx(row[F["flops_b"]] / attn * stretch + rate[RATE["kernel_s"]],
                                                 rel=1e-12)
        full, _, _ = _attn_core(backend, "gpt-oss-120b", fields, 1)
        assert full[F["time_f"]] == pytest.approx(full[F["flops_f"]] / attn + rate[RATE["kernel_s"]], rel=1e-12)
    np.testing.assert_allclose(_attn_core(kernels, "gpt-oss-120b", fields, 0)[0],
                               _attn_core(pykernels, "gpt-oss-120b", fields, 0)[0], rtol=1e-12)


def test_the_model_flops_do_not_move():
    """The stretch is time, not work: MFU's FLOPs of a windowed model are the keys each query meets."""
    model = ndcost.Model.from_catalog("gpt-oss-120b")
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=4, global_batch_size=32, seq_length=4096)
    estimate = ndcost.estimate(model, spec, ndcost.Cluster("b200", 8))
    assert 0.0 < estimate.mfu <= estimate.hfu <= 1.0


def test_the_op_table_calls_a_windowed_kernel_compute_bound():
    """The per-op table's bound of the attention core compares its priced time (the FLOPs at the rate the window
    and the head dim slow, ndcost.price.layer_ops) with its bytes' time: gpt-oss's 128-token window on a B200 runs
    33.8 GFLOP in ~0.23 ms where its 302 MB take ~0.05 ms -- compute, not memory."""
    from ndcost.price.layer_ops import layer_ops

    model = ndcost.Model.from_catalog("gpt-oss-120b")
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=4, global_batch_size=32, seq_length=4096)
    sliding = layer_ops(model, spec, ndcost.Cluster("b200", 8), kind=0)[0]
    for row in sliding.rows:
        if row.op == "attn_core":
            assert row.bound == "compute", row
            assert row.bytes / (0.8 * 8e12) < row.seconds
