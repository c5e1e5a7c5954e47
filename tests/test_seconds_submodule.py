"""Seconds mode on a kind's own submodule: its hidden size and tokens, bidirectional and windowed
attention, HyperParallel's census shares -- hand-worked values, the equivalence of a submodule kind
with a plain model of its dimensions, and compiled == oracle on seeded random kind rows.

The kind columns (``KIND_FIELDS``): sub_h and seq_tokens price the layer on the submodule's hidden
size and tokens per sample; bidirectional = 1 drops the causal mask; att_window = w meets
min(w, s) keys a query; census_att / census_ffn price what HyperParallel's selective policy
(keep mask HYPER_POLICY_MASK) recomputes of the projection matmuls.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import ndcost
from ndcost.spec.rates import Rates
from ndcost.tables.cache import per_object
from ndcost.kernels.columns import (
    HYPER_POLICY_MASK, KIND, MODEL, OPTION_FULL, OPTION_NONE, OPTION_SELECTIVE, RATE, SECONDS_CAND,
    SECONDS_EXTRA_FIELDS, SECONDS_LAYER, SECONDS_STAGE, SECONDS_STAGE_FIELDS,
)
from ndcost.kernels.window_attention import _head_dim_share
from ndcost.tables.seconds import seconds_arrays
from seconds_runs import layer_times, run_seconds, stage_sums, with_cand, with_kind

L = SECONDS_LAYER
S = SECONDS_STAGE
C = SECONDS_CAND

# A Qwen2.5-VL-like vision block: hidden 1280, 16 heads of 80, SwiGLU 3420, 1024 patch tokens.
VH, VA, VD, VFF, VSEQ = 1280, 16, 80, 3420, 1024


def _plain(layers: int = 4) -> ndcost.Model:
    """A text model with the vision block's dimensions (the equivalence's reference)."""
    return ndcost.Model(name="vision-as-text", hidden_size=VH, num_hidden_layers=layers, num_attention_heads=VA,
                        vocab_size=32000, intermediate_size=VFF)


def _host(layers: int = 4) -> ndcost.Model:
    """A text model of other dimensions whose kind row is turned into the vision block."""
    return ndcost.Model(name="host", hidden_size=2048, num_hidden_layers=layers, num_attention_heads=16,
                        num_key_value_heads=8, vocab_size=32000, intermediate_size=5632)


def _spec(**fields) -> ndcost.ExecSpec:
    values = dict(dp=1, tp=2, pp=1, micro_batch_size=2, micro_batch_num=1, seq_length=VSEQ)
    values.update(fields)
    return ndcost.ExecSpec(**values)


def _arrays(model, spec) -> dict:
    # the device's time alone (no host launch bound): the hand-derived sums below are of device work
    rates = Rates.for_device("h100-sxm").replace(launch_overhead=0.0)
    a = dict(seconds_arrays(model, spec, ndcost.Cluster("h100-sxm", spec.num_devices), rates=rates))
    for name in ("kinds", "cand", "rate"):
        a[name] = np.array(a[name], dtype=np.float64)      # writable copies
    return a


def _vision_kind(a: dict, k: int = 0, **extra) -> dict:
    """Kind k of *a* turned into the vision block (its submodule columns and dimensions)."""
    values = dict(sub_h=VH, sub_a=VA, sub_hff=VFF, seq_tokens=VSEQ, att_a=VA, att_n_kv=VA, att_dh=VD,
                  ffn_width=VFF)
    values.update(extra)
    return with_kind(a, k, **values)


def _gemm(m, n, k, batch, in_bytes, out_bytes, rate) -> float:
    """The documented GEMM price, restated: max(FLOPs/(eff·peak)·(1 + tail/waves), bytes/HBM) + kernel_s."""
    flops = 2.0 * m * n * k * batch
    moved = batch * (in_bytes * (m * k + k * n) + out_bytes * m * n)
    waves = batch * m * n / rate[RATE["wave"]]
    compute = flops / (rate[RATE["mm_eff"]] * rate[RATE["peak_mm"]]) * (1.0 + rate[RATE["wave_tail"]] / waves)
    memory = moved / (rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]])
    return max(compute, memory) + rate[RATE["kernel_s"]]


# ----------------------------------------------------------------------------- equivalence

@pytest.mark.parametrize("fields", [
    dict(),                                                                 # tp 2, flash
    dict(tp=1, flash_attention=False, dropout_bytes=1),                     # the score matrix runs
    dict(tp=4, sequence_parallel=True, micro_batch_size=1),                 # SP all-gathers
    dict(tp=2, cp=2, cp_algo="ring", dp=1),                                 # ring attention
    dict(tp=2, pp=2, micro_batch_num=4, pp_schedule="seq1f1b", seq_split=2, flash_attention=False),
], ids=["flash", "no-flash", "sp", "cp-ring", "seq1f1b"])
def test_a_submodule_kind_prices_as_a_plain_model_of_its_dimensions(kernels, fields):
    """A host-model kind row with the vision block's sub_h, seq_tokens, heads and widths, under a
    candidate of s = 4096, prices the same layer as the plain 1280-hidden model at s = 1024."""
    plain = _arrays(_plain(), _spec(**fields))
    host = _arrays(_host(), _spec(**dict(fields, seq_length=4096)))
    # the two candidates differ only in s
    differ = np.flatnonzero(plain["cand"] != host["cand"])
    assert [name for name, i in C.items() if i in differ] == ["s"]
    vision = _vision_kind(host)
    # the host's parameter counts are the host's; the plain model's stand in (p_dense, p_expert)
    vision["skinds"] = plain["skinds"]
    got, want = layer_times(kernels, vision), layer_times(kernels, plain)
    np.testing.assert_array_equal(got, want)
    assert want[0, L["fw"]] > 0.0 and want[0, L["flops_core"]] > 0.0
    # and the host's own layer is another one
    assert layer_times(kernels, host)[0, L["fw"]] != got[0, L["fw"]]


def test_model_level_parts_stay_on_the_model(kernels):
    """Embedding, output head and P2P keep the model's h and the candidate's s: a stage's sums
    outside its layers do not move when its kind becomes the vision block."""
    spec = _spec(tp=2, pp=2, micro_batch_num=4, seq_length=4096)
    host = _arrays(_host(), spec)
    vision = _vision_kind(host)
    layer_host, layer_vision = layer_times(kernels, host)[0], layer_times(kernels, vision)[0]
    stage_host, stage_vision = stage_sums(kernels, host), stage_sums(kernels, vision)
    layers = host["counts"].sum(axis=1)                # one kind, one option: layers per stage
    for st in range(spec.pp):
        for name in ("fw", "bw", "bw_w"):
            outside_host = stage_host[st, S[name]] - layers[st] * layer_host[L[name]]
            outside_vision = stage_vision[st, S[name]] - layers[st] * layer_vision[L[name]]
            assert outside_vision == pytest.approx(outside_host, rel=1e-9, abs=1e-15)
        assert stage_vision[st, S["pp"]] == stage_host[st, S["pp"]] > 0.0
    # the output stage's head: 2·b·s·h·v forward FLOPs x 3 on the model's h and s, whatever the kind
    head = 3.0 * 2.0 * 2 * 4096 * 2048 * 32000
    out = spec.pp - 1
    assert stage_vision[out, S["model_flops"]] - layers[out] * 3.0 * layer_vision[L["flops_f"]] == pytest.approx(
        head, rel=1e-9)


# ----------------------------------------------------------------------------- attention core

def _core_inputs(a):
    cand, rate = a["cand"], a["rate"]
    b, s, t, cp = cand[C["b"]], VSEQ, cand[C["t"]], cand[C["cp"]]
    # the vision block's heads are VD (80) wide: the part's rate at that head dim (window_attention._head_dim_share)
    attn_rate = rate[RATE["attn_eff"]] * rate[RATE["peak_attn"]] * _head_dim_share(VD, rate[RATE["attn_h64"]])
    return b, s, t, cp, attn_rate, rate[RATE["kernel_s"]]


def test_bidirectional_flash_runs_the_whole_score_matrix(kernels):
    a = _vision_kind(_arrays(_host(), _spec(seq_length=4096)))
    b, s, t, cp, attn_rate, kernel_s = _core_inputs(a)
    causal = layer_times(kernels, a)[0]
    bidir = layer_times(kernels, with_kind(a, bidirectional=1))[0]
    # model FLOPs: 2·b·s·s·a·(d_qk + d_v) for the bidirectional kind, half of it for a causal one
    flops = 2.0 * b * s * s * VA * (VD + VD)
    assert flops == 2.0 * 2 * 1024 * 1024 * 16 * 160
    assert bidir[L["flops_core"]] == pytest.approx(flops, rel=1e-12)
    assert causal[L["flops_core"]] == pytest.approx(0.5 * flops, rel=1e-12)
    assert causal[L["flops_core_extra"]] == bidir[L["flops_core_extra"]] == 0.0   # flash runs what is needed
    # a causal flash kernel runs half of it, a bidirectional one all of it; backward 2.5x
    half = 0.5 * flops / (t * cp)
    assert causal[L["core_f"]] == pytest.approx(half / attn_rate + kernel_s, rel=1e-12)
    assert bidir[L["core_f"]] == pytest.approx(2.0 * half / attn_rate + kernel_s, rel=1e-12)
    assert bidir[L["core_b"]] == pytest.approx(2.5 * 2.0 * half / attn_rate + kernel_s, rel=1e-12)
    assert bidir[L["sw_attBMM"]] == bidir[L["core_f"]]
    assert bidir[L["fw"]] - causal[L["fw"]] == pytest.approx(half / attn_rate, rel=1e-9)


def test_bidirectional_without_flash_meets_every_key(kernels):
    """Seq1F1B in 2 chunks: a causal chunk meets (n+1)/(2n) = 3/4 of the keys on average, a
    bidirectional one all s: the softmax reads and writes b·a/t·s·keys scores (2 + 2 bytes)."""
    spec = _spec(tp=2, pp=2, micro_batch_num=4, pp_schedule="seq1f1b", seq_split=2, flash_attention=False,
                 seq_length=4096)
    a = _vision_kind(_arrays(_host(), spec))
    b, s, t, cp, _, kernel_s = _core_inputs(a)
    hbm = a["rate"][RATE["hbm_eff"]] * a["rate"][RATE["hbm_bw"]]
    heads = b * VA / t
    for bidirectional, keys in ((0, s * 3 / 4), (1, s)):
        row = layer_times(kernels, with_kind(a, bidirectional=bidirectional))[0]
        scores = heads * s * keys
        assert row[L["sw_softmax"]] == pytest.approx(2.0 * 2.0 * scores / hbm + 2 * kernel_s, rel=1e-12)
        # the forward BMMs of each chunk: [s/2 x keys] scores and the [s/2 x d] context
        core = 2 * (_gemm(s / 2, keys, VD, heads, 2.0, 2.0, a["rate"])
                    + _gemm(s / 2, VD, keys, heads, 2.0, 2.0, a["rate"]))
        assert row[L["core_f"]] == pytest.approx(core, rel=1e-12)


def test_windowed_attention_meets_a_window_of_keys(kernels):
    """Qwen2.5-VL's window attention, 64 tokens a window: 2·b·s·64·a·(d_qk + d_v) FLOPs, run whole
    by a flash kernel (bidirectional inside a window), and a 64-key score matrix without flash."""
    window = 64
    a = _vision_kind(_arrays(_host(), _spec(seq_length=4096)), bidirectional=1)
    b, s, t, cp, attn_rate, kernel_s = _core_inputs(a)
    row = layer_times(kernels, with_kind(a, att_window=window))[0]
    flops = 2.0 * b * s * window * VA * (VD + VD)
    assert row[L["flops_core"]] == pytest.approx(flops, rel=1e-12)
    assert row[L["core_f"]] == pytest.approx(flops / (t * cp) / attn_rate + kernel_s, rel=1e-12)
    full = layer_times(kernels, a)[0]
    # model FLOPs of the forward lose (s - 64)/s of the core
    assert full[L["flops_f"]] - row[L["flops_f"]] == pytest.approx(
        2.0 * b * s * (s - window) * VA * (VD + VD), rel=1e-12)
    # without flash: [s x 64] scores per head
    nf = with_cand(a, flash=0.0)
    row = layer_times(kernels, with_kind(nf, att_window=window))[0]
    heads = b * VA / t
    hbm = a["rate"][RATE["hbm_eff"]] * a["rate"][RATE["hbm_bw"]]
    assert row[L["sw_softmax"]] == pytest.approx(2.0 * 2.0 * heads * s * window / hbm + kernel_s, rel=1e-12)
    core = _gemm(s, window, VD, heads, 2.0, 2.0, a["rate"]) + _gemm(s, VD, window, heads, 2.0, 2.0, a["rate"])
    assert row[L["core_f"]] == pytest.approx(core, rel=1e-12)


def test_a_causal_sliding_window_meets_its_prefix_then_the_window(kernels):
    """A causal sliding window of w keys (Mistral, Gemma 2/3, gpt-oss): query i meets min(i + 1, w)
    keys, so a sequence of s tokens meets s·w - w(w-1)/2 key pairs a head (w = 64: s·64 - 2016), by hand:
    2·b·(s·w - w(w-1)/2)·a·(d_qk + d_v) FLOPs, run by a windowed flash kernel at its fixed work a query
    (ndcost.kernels.window_attention: the stretch over the full kernel's rate); without flash the unfused kernel
    computes the whole s x s matrix and masks it (HFU counts the masked part)."""
    from ndcost.kernels.window_attention import _window_stretch

    window = 64
    a = _vision_kind(_arrays(_host(), _spec(seq_length=4096)), bidirectional=0)
    b, s, t, cp, attn_rate, kernel_s = _core_inputs(a)
    row = layer_times(kernels, with_kind(a, att_window=window))[0]
    pairs = s * 64 - 64 * 63 / 2
    flops = 2.0 * b * pairs * VA * (VD + VD)
    assert row[L["flops_core"]] == pytest.approx(flops, rel=1e-12)
    stretch = _window_stretch(64.0, s)
    assert stretch > 5.0
    assert row[L["core_f"]] == pytest.approx(flops / (t * cp) / attn_rate * stretch + kernel_s, rel=1e-12)
    bidirectional = layer_times(kernels, with_kind(a, att_window=window, bidirectional=1))[0]
    assert bidirectional[L["flops_core"]] == pytest.approx(2.0 * b * s * window * VA * (VD + VD), rel=1e-12)
    nf = with_cand(a, flash=0.0)
    row = layer_times(kernels, with_kind(nf, att_window=window))[0]
    heads = b * VA / t
    core = _gemm(s, s, VD, heads, 2.0, 2.0, a["rate"]) + _gemm(s, VD, s, heads, 2.0, 2.0, a["rate"])
    assert row[L["core_f"]] == pytest.approx(core, rel=1e-12)
    assert row[L["flops_core"]] == pytest.approx(flops, rel=1e-12)


def test_chunked_attention_is_causal_inside_each_chunk(kernels):
    """Llama 4's chunked attention, chunks of c = 100 keys over s tokens: query i meets (i mod c) + 1
    keys, so k = floor(s/c) full chunks and r = s - k·c left hold k·c(c+1)/2 + r(r+1)/2 pairs a head,
    by hand; 2·b·pairs·a·(d_qk + d_v) FLOPs, run whole by a chunked flash kernel."""
    chunk = 100
    a = _vision_kind(_arrays(_host(), _spec(seq_length=4096)), bidirectional=0)
    b, s, t, cp, attn_rate, kernel_s = _core_inputs(a)
    k = s // chunk
    r = s - k * chunk
    pairs = k * chunk * (chunk + 1) / 2 + r * (r + 1) / 2
    row = layer_times(kernels, with_kind(a, att_window=chunk, att_chunked=1))[0]
    assert row[L["flops_core"]] == pytest.approx(2.0 * b * pairs * VA * (VD + VD), rel=1e-12)
    assert row[L["core_f"]] == pytest.approx(row[L["flops_core"]] / (t * cp) / attn_rate + kernel_s, rel=1e-12)
    sliding = layer_times(kernels, with_kind(a, att_window=chunk))[0]
    assert row[L["flops_core"]] < sliding[L["flops_core"]]     # a chunk's early queries see fewer keys


def test_a_window_of_the_whole_sequence_is_no_window(kernels):
    a = _vision_kind(_arrays(_host(), _spec(seq_length=4096)))
    for flash in (0.0, 1.0):
        for bidirectional in (0, 1):
            base = with_cand(with_kind(a, bidirectional=bidirectional), flash=flash)
            plain = layer_times(kernels, base)
            for window in (VSEQ, 2 * VSEQ, 1e9):
                np.testing.assert_array_equal(layer_times(kernels, with_kind(base, att_window=window)), plain)


# ----------------------------------------------------------------------------- census

def test_projection_matmul_times_by_hand(kernels):
    """att_mm_f: QKV (h -> 3·16·80/t) and proj (16·80/t -> h) forward; ffn_mm_f: the SwiGLU pair
    (h -> 2·3420/t, 3420/t -> h) forward -- GEMMs of m = b·s rows at bytes_mm in, bytes_c out."""
    a = _arrays(_plain(), _spec())
    row = layer_times(kernels, a)[0]
    t = 2
    rows = 2.0 * VSEQ
    rate = a["rate"]
    att = _gemm(rows, 3 * VA * VD / t, VH, 1, 2.0, 2.0, rate) + _gemm(rows, VH, VA * VD / t, 1, 2.0, 2.0, rate)
    ffn = _gemm(rows, 2 * VFF / t, VH, 1, 2.0, 2.0, rate) + _gemm(rows, VH, VFF / t, 1, 2.0, 2.0, rate)
    assert row[L["att_mm_f"]] == pytest.approx(att, rel=1e-12)
    assert row[L["ffn_mm_f"]] == pytest.approx(ffn, rel=1e-12)
    assert row[L["gemm_f"]] == pytest.approx(att + ffn, rel=1e-12)
    # their FLOPs, whole micro-batch (not split over t): 2·rows·h·(QKV + proj widths), 2·rows·h·3·ffn
    assert row[L["att_mm_flops"]] == pytest.approx(2.0 * rows * VH * 4 * VA * VD, rel=1e-12)
    assert row[L["ffn_mm_flops"]] == pytest.approx(2.0 * rows * VH * 3 * VFF, rel=1e-12)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-v3"])
def test_moe_ffn_matmuls_are_the_experts_not_the_router(kernels, name):
    """On a MoE kind ffn_mm_f = routed + shared experts: every forward GEMM but the attention
    projections and the router (tokens/sp x h x n_exp, n_split times)."""
    model = ndcost.Model.from_catalog(name)
    spec = _spec(tp=2, dp=4, ep=4, seq_length=4096, micro_batch_size=1)
    a = _arrays(model, spec)
    rows = layer_times(kernels, a)
    cand, rate = a["cand"], a["rate"]
    tokens = cand[C["b"]] * cand[C["s"]] / cand[C["cp"]]
    router = _gemm(tokens / cand[C["sp"]], a["model"][MODEL["n_exp"]], model.hidden_size, 1, cand[C["bytes_mm"]],
                   cand[C["bytes_c"]], rate)
    for k, kind in enumerate(model.kinds):
        row = rows[k]
        if kind.ffn == "moe":
            assert row[L["ffn_mm_f"]] == pytest.approx(row[L["gemm_f"]] - row[L["att_mm_f"]] - router, rel=1e-12)
        else:
            assert row[L["ffn_mm_f"]] == pytest.approx(row[L["gemm_f"]] - row[L["att_mm_f"]], rel=1e-12)
        assert row[L["att_mm_f"]] > 0.0 and row[L["ffn_mm_f"]] > 0.0


def _census_arrays(rule="hyperparallel"):
    spec = _spec(pp=1, recompute="selective", selective_rule=rule, micro_batch_num=1)
    return _arrays(_plain(layers=4), spec)


def test_census_adds_its_share_of_the_projection_matmuls(kernels):
    """A layer running HyperParallel's policy (keep mask 0x81) on a kind with a census recomputes
    census_att·att_mm_f + census_ffn·ffn_mm_f more, per layer, on top of its switches."""
    a = _census_arrays()
    assert HYPER_POLICY_MASK in list(a["slot_mask"])
    layers = a["counts"][0].sum()
    assert layers == 4
    row = layer_times(kernels, a)[0]
    plain = stage_sums(kernels, a)
    census = stage_sums(kernels, with_kind(a, census_att=0.25, census_ffn=0.5))
    extra = 4 * (0.25 * row[L["att_mm_f"]] + 0.5 * row[L["ffn_mm_f"]])
    assert census[0, S["rc"]] - plain[0, S["rc"]] == pytest.approx(extra, rel=1e-9)
    # the switches the policy recomputes (everything but attBMM and attUp) are still there
    switches = sum(row[L[f]] for f in ("sw_headCast", "sw_dropout", "sw_softmax", "sw_normOp", "sw_ffAct"))
    assert plain[0, S["rc"]] == pytest.approx(4 * switches, rel=1e-12)
    assert census[0, S["rc"]] == pytest.approx(4 * switches + extra, rel=1e-12)
    # and the hardware FLOPs (HFU) count what it re-runs; the model FLOPs (MFU) do not
    flops = 4 * (0.25 * row[L["att_mm_flops"]] + 0.5 * row[L["ffn_mm_flops"]])
    assert census[0, S["hw_flops"]] - plain[0, S["hw_flops"]] == pytest.approx(flops, rel=1e-9)
    others = [i for i in range(len(SECONDS_STAGE_FIELDS)) if i not in (S["rc"], S["hw_flops"])]
    np.testing.assert_array_equal(census[:, others], plain[:, others])


def test_census_only_for_the_policy_and_a_kind_with_a_census(kernels):
    a = _census_arrays()
    plain = stage_sums(kernels, a)
    # no census (-1): nothing more
    np.testing.assert_array_equal(stage_sums(kernels, with_kind(a, census_att=-1.0, census_ffn=0.5)), plain)
    # another selective setting: the switches only
    megatron = _census_arrays("megatron")
    assert HYPER_POLICY_MASK not in list(megatron["slot_mask"])
    np.testing.assert_array_equal(stage_sums(kernels, with_kind(megatron, census_att=0.25, census_ffn=0.5)),
                                  stage_sums(kernels, megatron))
    # full recompute re-runs the whole forward; a census changes nothing
    for option in (OPTION_FULL, OPTION_NONE):
        b = dict(a, slot_option=np.full_like(a["slot_option"], option))
        np.testing.assert_array_equal(stage_sums(kernels, with_kind(b, census_att=0.25, census_ffn=0.5)),
                                      stage_sums(kernels, b))
    # a census without an FFN share (-1) prices the attention share alone
    row = layer_times(kernels, a)[0]
    att_only = stage_sums(kernels, with_kind(a, census_att=0.5, census_ffn=-1.0))
    assert att_only[0, S["rc"]] - plain[0, S["rc"]] == pytest.approx(4 * 0.5 * row[L["att_mm_f"]], rel=1e-9)


# ----------------------------------------------------------------------------- parity

_PARITY_MODELS = ("llama3-8b", "qwen3-30b-a3b", "deepseek-v3", "qwen3-next-80b-a3b")


def _random_kind_arrays():
    """~300 seeded rows: catalog models' arrays with random submodule and census columns, random
    flash / Seq1F1B / dp-cp-tp, random slot options and keep masks (0x81 often)."""
    rng = np.random.default_rng(20250521)
    bases = []
    for name in _PARITY_MODELS:
        model = ndcost.Model.from_catalog(name)
        for tp, cp in ((1, 1), (2, 2), (4, 1)):
            spec = _spec(tp=tp, cp=cp, pp=2, dp=2, micro_batch_num=4, seq_length=4096, micro_batch_size=1,
                         sequence_parallel=tp > 1)
            bases.append(_arrays(model, spec))
    arrays = []
    for i in range(300):
        a = dict(bases[i % len(bases)])
        kinds = a["kinds"].copy()
        for k in range(kinds.shape[0]):
            if rng.random() < 0.7:
                kinds[k, KIND["sub_h"]] = float(rng.choice([kinds[k, KIND["sub_h"]], 64 * rng.integers(4, 80)]))
                kinds[k, KIND["seq_tokens"]] = float(rng.choice([0, rng.integers(16, 20000)]))
                kinds[k, KIND["bidirectional"]] = float(rng.random() < 0.5)
                kinds[k, KIND["att_window"]] = float(rng.choice([0, rng.integers(1, 9000)]))
                kinds[k, KIND["census_att"]] = float(rng.choice([-1.0, rng.random()]))
                kinds[k, KIND["census_ffn"]] = float(rng.choice([-1.0, rng.random()]))
        if i % 50 == 7:                                  # edge rows: no hidden, NaN columns
            kinds[0, KIND["sub_h"]] = float(rng.choice([0.0, math.nan]))
            kinds[-1, KIND["att_window"]] = math.nan
            kinds[-1, KIND["census_att"]] = math.nan
            kinds[-1, KIND["seq_tokens"]] = math.nan
        cand = a["cand"].copy()
        cand[C["flash"]] = float(rng.random() < 0.6)
        cand[C["b"]] = float(rng.integers(1, 4))
        cand[C["seq_split"]] = float(rng.choice([1, 1, 2, 4]))
        cand[C["dropout_bytes"]] = float(rng.choice([0, 1]))
        rate = a["rate"].copy()
        rate[RATE["kernel_s"]] = float(rng.choice([0.0, 3e-6]))
        rate[RATE["grad_acc_pass"]] = float(rng.random() < 0.3)
        n_kinds, n_slots, pp = kinds.shape[0], 3, 2
        slot_option = rng.choice([OPTION_NONE, OPTION_FULL, OPTION_SELECTIVE, OPTION_SELECTIVE], n_slots)
        slot_mask = np.array([HYPER_POLICY_MASK if rng.random() < 0.5 else int(rng.integers(0, 256))
                              for _ in range(n_slots)], dtype=np.int64)
        counts = rng.integers(0, 4, (pp, n_kinds * n_slots)).astype(np.float64)
        extras = np.zeros((pp, len(SECONDS_EXTRA_FIELDS)))
        extras[0, 0] = extras[-1, 1] = 1.0
        arrays.append(dict(a, kinds=kinds, cand=cand, rate=rate, counts=counts, extras=extras,
                           slot_option=np.ascontiguousarray(slot_option, dtype=np.int64), slot_mask=slot_mask))
    return arrays


@pytest.mark.cython
def test_compiled_matches_oracle_on_random_submodule_rows(ckernels, pykernels):
    arrays = _random_kind_arrays()
    assert len(arrays) == 300
    finite = 0
    for a in arrays:
        want = run_seconds(pykernels, a)
        for got, exp in zip(run_seconds(ckernels, a), want):
            np.testing.assert_allclose(got, exp, rtol=1e-12, atol=0.0, equal_nan=True)
        finite += math.isfinite(want[-1][0])
    assert 250 <= finite < 300                       # the edge rows are NaN, the others priced


@pytest.mark.cython
def test_batch_compiled_matches_oracle_with_a_submodule_table():
    """seconds_batch over a model whose kind table is the vision block with a census (its cached
    table replaced), HyperParallel's selective policy among the rows: compiled == oracle."""
    from ndcost import _backend
    from ndcost.price.candidates import Candidates
    from ndcost.tables.nd_tables import nd_kind_table
    from ndcost.price.seconds_batch import seconds_batch

    def vision_model(census_att):
        model = _host(layers=8)
        table = np.array(nd_kind_table(model))
        for name, value in dict(sub_h=VH, seq_tokens=VSEQ, att_a=VA, att_n_kv=VA, att_dh=VD, ffn_width=VFF,
                                bidirectional=1, att_window=64, census_att=census_att, census_ffn=0.6).items():
            table[0, KIND[name]] = value
        table.setflags(write=False)
        per_object(model)["nd_kind_table"] = table
        assert nd_kind_table(model) is table
        return model

    model = vision_model(0.3)
    specs = []
    for rule in ("hyperparallel", "megatron"):
        for tp, pp, flash in ((1, 1, True), (2, 2, False), (4, 2, True)):
            specs.append(_spec(tp=tp, pp=pp, dp=2, micro_batch_num=4, seq_length=4096, recompute="selective",
                               selective_rule=rule, flash_attention=flash))
    specs.append(_spec(tp=3))                          # 16 heads over tp 3: refused, not priced
    cands = Candidates.from_specs(specs)
    out = {}
    for backend in ("cython", "python"):
        with _backend.use(backend):
            out[backend] = seconds_batch(model, cands, "h100-sxm", stage_times=True)
    c, p = out["cython"], out["python"]
    assert np.array_equal(c["reason"], p["reason"])
    for key in ("step_time", "parts", "stage_times", "mfu", "hfu", "tokens_per_second"):
        np.testing.assert_allclose(c[key], p[key], rtol=1e-12, atol=0.0, equal_nan=True, err_msg=key)
    assert np.isfinite(c["step_time"][:-1]).all() and math.isnan(c["step_time"][-1])
    assert np.isnan(c["parts"][:, -1]).all() and np.isnan(c["stage_times"][-1]).all()
    # the census prices the hyperparallel rows (the first 3) higher, and no other row
    with _backend.use("cython"):
        base = seconds_batch(vision_model(-1.0), cands, "h100-sxm")
    assert (c["step_time"][:3] > base["step_time"][:3]).all()
    np.testing.assert_array_equal(c["step_time"][3:], base["step_time"][3:])


# ----------------------------------------------------------------------------- the tower's edges

def _pointwise(moved, kernels, rate) -> float:
    return moved / (rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]) + kernels * rate[RATE["kernel_s"]]


@pytest.mark.parametrize("sequence_parallel", [True, False])
def test_patch_embedding_and_merger_by_hand(kernels, sequence_parallel):
    """Qwen2.5-VL-7B's tower edges on the embedding's stage, tp 2, b 1, 4096 patches: the Conv3d
    as one GEMM [4096/sp x 1176]·[1176 x 1280], the merger's fc1 [1024 x 5120]·[5120 x 5120/2] and
    fc2 [1024 x 5120/2]·[5120/2 x 3584], its norm and GELU passes; FLOPs 3·2·4096·(1176·1280 +
    (5120² + 5120·3584)/4) = 310,797,926,400 a micro-batch, in model and hardware FLOPs alike."""
    from ndcost.kernels.columns import SECONDS_MODEL

    model = ndcost.Model.from_catalog("qwen2.5-vl-7b")
    spec = ndcost.ExecSpec(dp=1, tp=2, pp=2, micro_batch_size=1, micro_batch_num=2, seq_length=8192,
                           sequence_parallel=sequence_parallel)
    a = _arrays(model, spec)
    no_tower = dict(a, smodel=np.where(np.arange(len(a["smodel"])) == SECONDS_MODEL["v_patches"], 0.0, a["smodel"]))
    edge = stage_sums(kernels, a) - stage_sums(kernels, no_tower)
    assert not edge[1:].any()                       # the embedding's stage only
    rate, sp = a["rate"], 2.0 if sequence_parallel else 1.0
    assert edge[0, S["model_flops"]] == edge[0, S["hw_flops"]] == 310_797_926_400.0
    gemms = [(4096 / sp, 1280, 1176), (1024, 5120 / 2, 5120), (1024, 3584, 5120 / 2)]   # (m, n, k)
    forward = sum(_gemm(m, n, k, 1, 2.0, 2.0, rate) for m, n, k in gemms)
    moved = 2 * 2 * 2.0 * 4096 * 1280 / sp + 2 * 2.0 * 1024 * 5120 / 2
    assert edge[0, S["fw"]] == pytest.approx(forward + _pointwise(moved, 2, rate), rel=1e-12)
    weight_grads = sum(_gemm(k, n, m, 1, 2.0, 2 * 4.0, rate) for m, n, k in gemms)   # fp32 main grads
    assert edge[0, S["bw_w"]] == pytest.approx(weight_grads, rel=1e-12)
    assert edge[0, S["tp"]] > 0.0


def test_the_p2p_ring_merges_each_step_in_place(kernels):
    """Transformer Engine's P2P ring (v1.10 AttnFuncWithCPAndKVP2P) adds elementwise passes Ulysses does
    not, by hand at cp 2 on the busiest rank: forward, K/V into the send buffer (2 x 16-bit per K/V
    element), the output zero-filled (16-bit per Q element) and two merges of 3 x 16-bit + 2 x fp32 per
    Q element, in 2 + 4·cp kernels; backward, K/V copied into the ring buffer, dQ and dK/dV copied then
    added (2 + 3 x 16-bit per element), dK/dV concatenated each step, in 1 + 3·cp kernels."""
    cp, t = 2, 2
    a = _arrays(_plain(), _spec(tp=t, cp=cp, dp=1))
    ring = layer_times(kernels, a)[0]
    ulysses = layer_times(kernels, with_cand(a, cp_ring=0.0))[0]
    hbm = a["rate"][RATE["hbm_eff"]] * a["rate"][RATE["hbm_bw"]]
    kernel_s = a["rate"][RATE["kernel_s"]]
    tokens = 2 * VSEQ / cp
    q = tokens * VA * VD / t                    # the rank's attention output elements
    kv = tokens * VA * (VD + VD) / t            # its K and V (MHA: as many K/V heads as Q)
    forward = 2 * kv * 2 + q * 2 + cp * (3 * 2 + 2 * 4) * q
    backward = 2 * kv * 2 + (2 + 3 * (cp - 1)) * 2 * (q + kv) + cp * 2 * kv * 2
    assert ring[L["fw"]] - ulysses[L["fw"]] == pytest.approx(forward / hbm + (2 + 4 * cp) * kernel_s, rel=1e-9)
    assert ring[L["bw"]] - ulysses[L["bw"]] == pytest.approx(backward / hbm + (1 + 3 * cp) * kernel_s, rel=1e-9)
    assert ring[L["sw_attBMM"]] - ulysses[L["sw_attBMM"]] == pytest.approx(ring[L["fw"]] - ulysses[L["fw"]],
                                                                          rel=1e-9)
