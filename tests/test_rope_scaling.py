"""A RoPE attention factor (YaRN's scale of cos and sin) and the stacks that cannot fuse it (``Rates.rope_scale``).

gpt-oss's YaRN (factor 32, no mscale keys) multiplies cos and sin by 0.1 ln 32 + 1; Megatron-Core then runs its
PyTorch RoPE instead of Transformer Engine's fused kernel (rope_utils.py apply_rotary_pos_emb), counted by
``tools/count_megatron_rope_ops.py``: 12 passes over q and k forward in 6 kernels + 6 on the rotary table, 14 passes
backward in 7. The factor by hand from Transformers' and Megatron's formula, the passes by hand on the per-op table
of both backends, the stacks, and the bad values.
"""
from __future__ import annotations

import dataclasses
import math

import pytest

import ndcost
from ndcost import _backend
from ndcost.kernels.columns import RATE
from ndcost.price.layer_ops import layer_ops
from ndcost.spec.rates import Rates
from ndcost.spec.rope_scaling import ROPE_SCALES, rope_attention_factor
from ndcost.tables.seconds import rates_vector

OSS_FACTOR = 0.1 * math.log(32.0) + 1.0


def test_the_attention_factor_by_hand():
    """YaRN: attention_factor when given; else mscale(s, mscale) / mscale(s, mscale_all_dim) with both keys
    (DeepSeek-V3's 1 / 1: no factor); else 0.1 ln s + 1. Types that only stretch the frequencies scale nothing."""
    oss = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
           "original_max_position_embeddings": 4096}
    assert rope_attention_factor(oss) == pytest.approx(1.3465735902799727, rel=1e-15)
    assert rope_attention_factor({"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0}) == 1.0
    assert rope_attention_factor({"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 0.707}) == \
        pytest.approx((0.1 * math.log(40) + 1) / (0.0707 * math.log(40) + 1), rel=1e-15)
    assert rope_attention_factor({"rope_type": "yarn", "factor": 4.0, "attention_factor": 1.2}) == 1.2
    assert rope_attention_factor({"rope_type": "yarn", "factor": 1.0}) == 1.0
    for plain in (None, {"rope_type": "llama3", "factor": 8.0}, {"type": "linear", "factor": 2.0},
                  {"rope_type": "default"}, "yarn"):
        assert rope_attention_factor(plain) == 1.0


@pytest.mark.parametrize("block, key", [
    ({"rope_type": "yarn", "factor": -2.0}, "rope_scaling.factor"),
    ({"rope_type": "yarn", "factor": float("nan")}, "rope_scaling.factor"),
    ({"rope_type": "yarn", "factor": 4.0, "attention_factor": 0}, "rope_scaling.attention_factor"),
    ({"rope_type": "yarn", "factor": 4.0, "mscale": "1", "mscale_all_dim": 1.0}, "rope_scaling.mscale"),
])
def test_a_bad_yarn_block_names_its_key(block, key):
    with pytest.raises(ndcost.SpecError, match=key.replace(".", r"\.")):
        rope_attention_factor(block)


def test_the_catalog_reads_it_from_config_json():
    """gpt-oss-120b's config.json has YaRN without mscale keys; DeepSeek-V3's and Kimi K2's YaRN carry mscale =
    mscale_all_dim = 1 (no factor); Llama's and Qwen's none."""
    factors = {name: ndcost.Model.from_catalog(name).rope_attention_factor
               for name in ("gpt-oss-120b", "deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "llama3-70b")}
    assert factors["gpt-oss-120b"] == pytest.approx(OSS_FACTOR, rel=1e-15)
    assert all(factors[name] == 1.0 for name in factors if name != "gpt-oss-120b")


def test_a_transformers_5_config_states_it_as_rope_parameters():
    """Transformers 5 names the block rope_parameters; either key is read."""
    base = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000}
    yarn = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}
    for key in ("rope_scaling", "rope_parameters"):
        model = ndcost.Model.from_hf_config({**base, key: yarn})
        assert model.rope_attention_factor == pytest.approx(OSS_FACTOR, rel=1e-15)
    assert ndcost.Model.from_hf_config(base).rope_attention_factor == 1.0


@pytest.mark.parametrize("value", [0.0, -1.0, 101.0, float("inf"), float("nan"), True, "1.3"])
def test_a_bad_factor_is_refused_by_name(value):
    with pytest.raises(ndcost.SpecError, match="rope_attention_factor"):
        ndcost.Model(name="m", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
                     intermediate_size=128, rope_attention_factor=value)


def test_the_stacks_state_how_they_apply_it():
    for name in ("megatron-te", "nemo", "megatron-bridge", "megatron-lm"):
        assert Rates.for_software("h100-sxm", name).rope_scale == "unfused"
    for name in ("torchtitan-eager", "torchtitan-compile", "hf-eager"):
        assert Rates.for_software("h100-sxm", name).rope_scale == "fused"
    assert Rates.for_device("h100-sxm").rope_scale == "unfused"       # the device's rates: Megatron-Core's
    assert "rope_utils.py" in Rates.for_device("h100-sxm").sources["rope_scale"]
    with pytest.raises(ndcost.SpecError, match="rope_scale"):
        Rates.for_device("h100-sxm").replace(rope_scale="inline")


#: gpt-oss-120b on 8 H100s, EP 8: one micro-batch of 2 x 4096 tokens; 64 query and 8 KV heads of 64.
TOKENS, HEADS, KV, DH, BC = 2 * 4096, 64, 8, 64, 2.0
ROTATED = TOKENS * (HEADS + KV) * DH


def _rope(backend_name: str, scale: str, factor: float = OSS_FACTOR):
    model = dataclasses.replace(ndcost.Model.from_catalog("gpt-oss-120b"), rope_attention_factor=factor)
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=2, global_batch_size=64, seq_length=4096)
    cluster = ndcost.Cluster("h100-sxm", 8)
    rates = Rates.for_software("h100-sxm", "megatron-te").replace(rope_scale=scale)
    with _backend.use(backend_name):
        table = layer_ops(model, spec, cluster, rates=rates, kind=0)[0]
    rows = {row.pass_: row for row in table.rows if row.op == "rope"}
    return rows, rates_vector(cluster, rates, "bf16")


@pytest.mark.parametrize("scale", ROPE_SCALES)
def test_the_passes_by_hand(backend_name, scale):
    """Unfused: 12 / 14 passes over q and k in their element size, 2 x 12 / 2 x 7 kernels; fused: one pass each
    way (the pointwise backward's 1.5x) in one kernel a tensor. Time: bytes at the achievable HBM rate plus a
    kernel's fixed cost each."""
    rows, rate = _rope(backend_name, scale)
    if scale == "unfused":
        want = (12.0 * BC * ROTATED, 24.0, 14.0 * BC * ROTATED, 14.0)
    else:
        want = (2.0 * BC * ROTATED, 2.0, 1.5 * 2.0 * BC * ROTATED, 2.0)
    forward, backward = rows["forward"], rows["backward"]
    assert (forward.bytes, forward.kernels, backward.bytes, backward.kernels) == pytest.approx(want, rel=1e-12)
    hbm = rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]
    assert forward.seconds == pytest.approx(want[0] / hbm + want[1] * rate[RATE["kernel_s"]], rel=1e-12)
    assert backward.seconds == pytest.approx(want[2] / hbm + want[3] * rate[RATE["kernel_s"]], rel=1e-12)


def test_no_factor_runs_the_fused_kernel(backend_name):
    """A model whose cos and sin carry no factor runs Transformer Engine's fused RoPE whatever the stack states."""
    unscaled, _ = _rope(backend_name, "unfused", factor=1.0)
    fused, _ = _rope(backend_name, "fused")
    assert unscaled["forward"].bytes == fused["forward"].bytes == 2.0 * BC * ROTATED
    assert unscaled["backward"].seconds == pytest.approx(fused["backward"].seconds, rel=1e-12)


def test_the_step_and_the_batch_agree():
    """The unfused RoPE lengthens a Megatron-Core gpt-oss step; estimate_many prices the row as estimate() does."""
    model = ndcost.Model.from_catalog("gpt-oss-120b")
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=2, global_batch_size=64, seq_length=4096)
    cluster = ndcost.Cluster("h100-sxm", 8)
    steps = {}
    for scale in ROPE_SCALES:
        rates = Rates.for_software("h100-sxm", "megatron-te").replace(rope_scale=scale)
        single = ndcost.estimate(model, spec, cluster, rates=rates)
        batch = ndcost.estimate_many(model, [spec], cluster, rates=rates)
        assert batch.step_time[0] == pytest.approx(single.step_time, rel=1e-12)
        steps[scale] = single.step_time
    assert steps["unfused"] > steps["fused"]
