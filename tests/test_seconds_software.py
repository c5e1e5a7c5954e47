"""Software stacks in seconds mode: unfused (eager) elementwise work, RoPE, torchtitan's attention
copies and FlashAttention-2, by hand on one Llama 3 8B layer, both backends."""
from __future__ import annotations

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import RATE, SECONDS_LAYER
from ndcost.spec.rates import SOFTWARE_PRESETS, Rates
from ndcost.tables.seconds import seconds_arrays, seconds_estimate

L = SECONDS_LAYER
TOKENS, H, HEADS, KV, DH, FFN = 4096.0, 4096.0, 32.0, 8.0, 128.0, 14336.0


def _layer(kernels, rates: Rates) -> tuple[np.ndarray, np.ndarray]:
    model = ndcost.Model.from_catalog("llama3-8b")
    spec = ndcost.ExecSpec(dp=8, global_batch_size=64, seq_length=int(TOKENS))
    arrays = seconds_arrays(model, spec, ndcost.Cluster("h100-sxm", 8), rates=rates)
    out = np.empty((len(model.kinds), len(L)))
    kernels.seconds_layer_times(*(arrays[name] for name in ("kinds", "skinds", "model", "smodel", "cand", "rate")),
                                out)
    return out[0], arrays["rate"]


def test_eager_elementwise_by_hand(kernels):
    """Eager minus fused forward: RMSNorm (torchtitan's PyTorch ops), SwiGLU unfused and RoPE in fp32
    complex arithmetic, each at its bytes and kernels (ndcost.kernels.seconds_layer EAGER_* constants)."""
    base = Rates.for_device("h100-sxm")
    fused, rate = _layer(kernels, base)
    eager, _ = _layer(kernels, base.replace(elementwise="eager"))
    hbm = rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]
    kernel = rate[RATE["kernel_s"]]
    x = TOKENS * H
    norm = 2 * (28 + 4 * 2) * x - 2 * 2 * 2 * x                 # two norms: 36 bytes an element vs 4
    act = (5 - 3) * 2 * TOKENS * FFN                              # silu, then the product: 5 passes vs 3
    rotated = TOKENS * (HEADS + KV) * DH
    rope = (2 * 2 + 16) * rotated - 2 * 2 * rotated               # upcast, complex multiply, downcast
    kernels_more = (16 - 2) + 1 + (6 - 2)
    expected = (norm + act + rope) / hbm + kernels_more * kernel
    assert eager[L["fw"]] - fused[L["fw"]] == pytest.approx(expected, rel=1e-9)
    # backward reads 1.5x a pointwise op's forward bytes, with the same kernels
    assert eager[L["bw"]] - fused[L["bw"]] == pytest.approx(1.5 * (norm + act + rope) / hbm
                                                            + kernels_more * kernel, rel=1e-9)
    # a selective recompute of the norms re-runs them at their eager cost
    assert eager[L["sw_normOp"]] > 5 * fused[L["sw_normOp"]]


def test_torchtitan_attention_copies_by_hand(kernels):
    base = Rates.for_device("h100-sxm")
    plain, rate = _layer(kernels, base)
    copies, _ = _layer(kernels, base.replace(attention_copies=True))
    hbm = rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]
    # repeat_kv reads K and V (8 heads) and writes them for all 32; the output is copied once
    moved = 2 * TOKENS * (2 * KV * DH + 2 * HEADS * DH) + 2 * 2 * TOKENS * HEADS * DH
    assert copies[L["fw"]] - plain[L["fw"]] == pytest.approx(moved / hbm + 3 * rate[RATE["kernel_s"]], rel=1e-9)


def test_fa2_on_hopper_runs_at_its_published_share():
    rates = Rates.for_software("h100-sxm", "torchtitan-eager")
    # FlashAttention-2's published 35% on H100, a burst: at the part's sustained share (Rates' source)
    assert rates.attention_share() == Rates.for_device("h100-sxm").fa2_attention_efficiency
    assert rates.attention_share() == pytest.approx(0.35 * 708.5 / 841.9, rel=1e-12)
    assert Rates.for_software("h100-sxm", "megatron-te").attention_share() == Rates.for_device("h100-sxm").attention_efficiency
    # A100's best kernel is FlashAttention-2 already (its published share at the A100's clock at its power limit)
    assert Rates.for_software("a100-80g", "torchtitan-eager").attention_share() == pytest.approx(0.615 * 1305 / 1410)


def test_presets_order_the_stacks_as_their_kernels_do():
    """The same strategy is slowest eager, faster compiled, fastest on Megatron-TE."""
    model = ndcost.Model.from_catalog("llama3-8b")
    spec = ndcost.ExecSpec(dp=8, global_batch_size=16, micro_batch_size=2, seq_length=8192, zero_stage=3)
    cluster = ndcost.Cluster("h100-sxm", 8)
    step = {name: seconds_estimate(model, spec, cluster, rates=Rates.for_software("h100-sxm", name))["step_time"]
            for name in ("torchtitan-eager", "torchtitan-compile", "megatron-te")}
    assert step["torchtitan-eager"] > step["torchtitan-compile"] > step["megatron-te"]
    assert set(SOFTWARE_PRESETS) >= {"megatron-te", "nemo", "torchtitan-eager", "torchtitan-compile"}


@pytest.mark.parametrize("name", sorted(SOFTWARE_PRESETS))
def test_each_preset_prices_the_same_on_both_backends(ckernels, name):
    model = ndcost.Model.from_catalog("qwen3-30b-a3b")
    spec = ndcost.ExecSpec(dp=8, ep=8, pp=2, global_batch_size=64, seq_length=4096, precision="fp8")
    cluster = ndcost.Cluster("h100-sxm", 16)
    rates = Rates.for_software("h100-sxm", name)
    results = {}
    for backend in ("cython", "python"):
        with ndcost._backend.use(backend):
            results[backend] = seconds_estimate(model, spec, cluster, rates=rates)
    assert results["cython"]["step_time"] == pytest.approx(results["python"]["step_time"], rel=1e-12)
    for part, value in results["python"]["parts"].items():
        assert results["cython"]["parts"][part] == pytest.approx(value, rel=1e-12, abs=1e-300)


def test_cli_software_and_api_preset_name(capsys):
    from ndcost.cli.main import main

    args = ["estimate", "llama3-8b", "--device", "h100-sxm", "--devices", "8", "--dp", "8",
            "--global-batch-size", "16", "--micro-batch-size", "2", "--seq-length", "8192", "--zero-stage", "3"]
    assert main(args + ["--software", "torchtitan-eager", "--json"]) == 0
    import json

    eager = json.loads(capsys.readouterr().out)["step_time"]
    assert main(args + ["--json"]) == 0
    default = json.loads(capsys.readouterr().out)["step_time"]
    assert eager > default
    model = ndcost.Model.from_catalog("llama3-8b")
    # --software also fills the fields the stack fixes (ndcost.spec.software_fields): the API's equivalent
    from ndcost.spec.software_fields import with_software

    spec = with_software("torchtitan-eager", dict(dp=8, global_batch_size=16, micro_batch_size=2, seq_length=8192,
                                                   zero_stage=3))
    api = ndcost.estimate(model, spec, ndcost.Cluster("h100-sxm", 8), rates="torchtitan-eager").step_time
    assert api == pytest.approx(eager, rel=1e-9)
    assert main(args + ["--software", "nope"]) == 2
    assert "--software" in capsys.readouterr().err


def test_tp_comm_overlap_runs_gemms_in_userbuffers_chunks_by_hand(kernels, pykernels):
    """With TP overlap (TE userbuffers) a GEMM before a reduce-scatter runs as 4 pipelined chunks on the
    SMs the reduce-scatter leaves (132 - 22 of an H100's), its input gradient as tp ring chunks; a GEMM
    after an all-gather runs forward as tp ring chunks (ndcost.kernels.seconds_ops._mm3)."""
    from ndcost.kernels import seconds_ops as oracle

    model = ndcost.Model.from_catalog("llama3-70b")
    cluster = ndcost.Cluster("h100-sxm", 8)
    spec = ndcost.ExecSpec(dp=2, tp=4, global_batch_size=8, seq_length=4096, sequence_parallel=True,
                           tp_overlap=True)
    arrays = seconds_arrays(model, spec, cluster)
    cand, rate = arrays["cand"], arrays["rate"]
    m, n, k = 4096.0, 8192.0, 7168.0
    g = [0.0] * 5
    oracle._mm3(m, n, k, 1.0, cand, rate, g, False, 2)
    keep = 1.0 - 22.0 / 132.0
    assert g[0] == pytest.approx(4 * oracle._gemm(m / 4, n, k, 1.0, 2.0, 2.0, rate) / keep, rel=1e-12)
    assert g[1] == pytest.approx(4 * oracle._gemm(m / 4, k, n, 1.0, 2.0, 2.0, rate), rel=1e-12)
    assert (g[3], g[4]) == (4.0, 4.0 + 1.0)   # kernels: 4 chunks forward; 4 input-grad chunks + the wgrad
    oracle._mm3(m, n, k, 1.0, cand, rate, g, False, 1)
    assert g[0] == pytest.approx(4 * oracle._gemm(m / 4, n, k, 1.0, 2.0, 2.0, rate), rel=1e-12)
    assert g[1] == pytest.approx(oracle._gemm(m, k, n, 1.0, 2.0, 2.0, rate), rel=1e-12)
    assert (g[3], g[4]) == (4.0, 1.0 + 1.0)
    # the layer: slower GEMMs with overlap than without, the same on both backends
    args = [arrays[name] for name in ("kinds", "skinds", "model", "smodel", "cand", "rate")]
    out, ref = np.empty((1, len(L))), np.empty((1, len(L)))
    kernels.seconds_layer_times(*args, out)
    pykernels.seconds_layer_times(*args, ref)
    np.testing.assert_allclose(out, ref, rtol=1e-12)
    plain = seconds_arrays(model, ndcost.ExecSpec(dp=2, tp=4, global_batch_size=8, seq_length=4096,
                                                  sequence_parallel=True), cluster)
    bare = np.empty((1, len(L)))
    kernels.seconds_layer_times(*(plain[name] for name in ("kinds", "skinds", "model", "smodel", "cand", "rate")),
                                bare)
    assert out[0, L["gemm_f"]] > bare[0, L["gemm_f"]]


def test_torchtitan_op_sac_census_by_hand():
    """torchtitan's per-op SAC recomputes wk, wo (of wq, wk, wv, wo) and w3 (of w1, w3, w2)."""
    from ndcost.spec.torchtitan_sac import torchtitan_op_census

    model = ndcost.Model.from_catalog("llama3-8b")
    (census,) = torchtitan_op_census(model)
    assert census.selective_attention_mm == pytest.approx((1024 + 4096) / (4096 + 1024 + 1024 + 4096), rel=1e-15)
    assert census.selective_ffn_mm == pytest.approx(1 / 3, rel=1e-15)
    spec = ndcost.ExecSpec(dp=8, global_batch_size=16, micro_batch_size=2, seq_length=8192, zero_stage=3,
                           recompute="selective", selective_rule="hyperparallel")
    cluster = ndcost.Cluster("h100-sxm", 8)
    sac = ndcost.estimate(model.with_census(torchtitan_op_census(model)), spec, cluster)
    plain = ndcost.estimate(model, spec, cluster)
    assert sac.parts["recompute"] > plain.parts["recompute"]          # the matmuls re-run too
    with pytest.raises(ndcost.SpecError, match="dense"):
        torchtitan_op_census(ndcost.Model.from_catalog("qwen3-30b-a3b"))


def test_torchtitan_op_sac_keeps_what_its_policy_saves_by_hand():
    """Per token of a block: q, v, w1's output and SDPA's output (bf16) with its fp32 logsumexp over tp;
    the block input and w2's output over the sequence-parallel ranks."""
    from ndcost.spec.torchtitan_sac import torchtitan_op_census

    (census,) = torchtitan_op_census(ndcost.Model.from_catalog("llama3-8b"))
    assert census.selective_tp == 2 * (4096 + 1024 + 14336 + 4096) + 4 * 32
    assert census.selective == 2 * 2 * 4096
