"""Transformers config.json -> Model: each family on the catalog configs, the
per-family fixed choices, reading paths, and bad configs."""
from __future__ import annotations

import json
import re

import pytest

from ndcost.errors import SpecError
from ndcost.spec.hf_config import SUPPORTED_MODEL_TYPES, model_kwargs_from_hf_config, read_hf_config
from ndcost.spec.model import Model
from ndcost.spec.model_parameters import ParamCount
from ndcost.spec.model_catalog import catalog_entry


def config_of(name: str) -> dict:
    return catalog_entry(name)["config"]


def _msg(parameter, owner, rule, value):
    return "^" + re.escape(f"The {parameter!r} parameter of {owner} must {rule}. Got {value!r} instead.") + "$"


# --------------------------------------------------------------------------- families on the catalog configs


def test_llama_config():
    m = Model.from_hf_config(config_of("llama3-70b"), name="l70")
    assert m.name == "l70" and m.family == "llama"
    assert (m.hidden_size, m.num_hidden_layers, m.num_attention_heads, m.num_key_value_heads) == (8192, 80, 64, 8)
    assert m.head_dim == 128  # absent from the config: 8192 / 64
    assert m.intermediate_size == 28672 and not m.is_moe
    assert not (m.attention_bias or m.mlp_bias or m.qk_norm or m.tie_word_embeddings)
    assert (m.norm, m.gated_ffn) == ("rmsnorm", True)


def test_qwen2_config_has_qkv_biases_fixed_in_code():
    m = Model.from_hf_config(config_of("qwen2.5-72b"))
    assert m.family == "qwen2" and m.attention_bias and not m.qk_norm
    # q/k/v biases only: 8192 + 1024 + 1024 over the bias-free layer
    no_bias = Model.from_dict({**m.to_dict(), "attention_bias": False})
    assert m.kind_parameters(0)[0] - no_bias.kind_parameters(0)[0] == 8192 + 2 * 1024


def test_qwen3_config_has_qk_norm():
    m = Model.from_hf_config(config_of("qwen3-32b"))
    assert m.family == "qwen3" and m.qk_norm and not m.attention_bias
    assert m.head_dim == 128 and m.num_attention_heads * m.head_dim == 8192  # wider than hidden 5120


def test_qwen3_moe_config():
    m = Model.from_hf_config(config_of("qwen3-30b-a3b"))
    assert m.family == "qwen3_moe" and m.qk_norm
    assert (m.num_experts, m.num_experts_per_tok, m.moe_intermediate_size) == (128, 8, 768)
    assert m.shared_expert_intermediate_size == 0 and m.first_k_dense_replace == 0
    assert [k.name for k in m.kinds] == ["moe"]


def test_qwen3_next_config_layer_pattern_and_gates():
    m = Model.from_hf_config(config_of("qwen3-next-80b-a3b"))
    assert m.family == "qwen3_next"
    assert m.qk_norm and m.attn_output_gate and m.shared_expert_gate
    assert m.shared_expert_intermediate_size == 512 and m.num_shared_experts == 1
    # full_attention_interval 4: 0-based 3, 7, ..., 47 are full attention
    full = [i for i, t in enumerate(m.layer_types) if t == "full_attention"]
    assert full == list(range(3, 48, 4))
    assert [(k.name, k.attention, k.ffn) for k in m.kinds] == [("linear_moe", "linear", "moe"), ("full_moe", "full", "moe")]
    assert m.layer_kinds_in_order == (0, 0, 0, 1) * 12
    assert m.kinds[0].ops.as_tuple() == (4, 0, 3, 0, 0, 2, 4, 0, 1, 1)
    assert (m.linear_num_key_heads, m.linear_key_head_dim, m.linear_num_value_heads, m.linear_value_head_dim,
            m.linear_conv_kernel_dim) == (16, 128, 32, 128, 4)


def test_qwen3_next_explicit_layer_types_win_and_default_interval_is_4():
    cfg = config_of("qwen3-next-80b-a3b")
    cfg["num_hidden_layers"] = 4
    cfg["layer_types"] = ["full_attention", "linear_attention", "linear_attention", "linear_attention"]
    assert Model.from_hf_config(cfg).layer_kinds_in_order == (0, 1, 1, 1)
    del cfg["layer_types"], cfg["full_attention_interval"]
    assert Model.from_hf_config(cfg).layer_types == ("linear_attention",) * 3 + ("full_attention",)


def test_mixtral_config_every_layer_moe():
    m = Model.from_hf_config(config_of("mixtral-8x7b"))
    assert m.family == "mixtral"
    assert (m.num_experts, m.num_experts_per_tok, m.moe_intermediate_size) == (8, 2, 14336)
    assert m.layer_kinds_in_order == (0,) * 32 and m.kinds[0].name == "moe"


def test_deepseek_v3_config():
    m = Model.from_hf_config(config_of("deepseek-v3"))
    assert m.family == "deepseek_v3" and m.is_mla
    assert (m.kv_lora_rank, m.q_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim) == (512, 1536, 64, 128, 128)
    assert m.head_dim == 128  # v_head_dim, ND's MLA convention
    assert m.shared_expert_intermediate_size == 2048  # n_shared_experts 1 * moe_intermediate_size 2048
    assert (m.num_experts, m.first_k_dense_replace, m.num_nextn_predict_layers) == (256, 3, 1)
    # 3 dense + 58 moe body layers, then 1 MTP layer repeating the moe kind
    assert [(k.name, k.attention, k.ffn) for k in m.kinds] == [("dense", "mla", "dense"), ("moe", "mla", "moe")]
    assert m.layer_kinds_in_order == (0,) * 3 + (1,) * 58 + (1,)
    assert m.num_layers_with_mtp == 62


def test_gpt2_field_names_for_gpt3():
    m = Model.from_hf_config(config_of("gpt3-175b"))
    assert m.family == "gpt2"
    assert (m.hidden_size, m.num_hidden_layers, m.num_attention_heads, m.intermediate_size) == (12288, 96, 96, 49152)
    assert m.learned_position_embeddings == 2048 and m.tie_word_embeddings
    assert (m.norm, m.gated_ffn, m.attention_bias, m.mlp_bias) == ("layernorm", False, True, True)
    assert m.kinds[0].ops.ffMM == 2.0
    # per layer 12h^2 + 13h (GPT-2 block with biases and two LayerNorms)
    assert m.kind_parameters(0)[0] == 12 * 12288**2 + 13 * 12288


def test_gpt2_defaults_inner_to_four_times_hidden_and_ties():
    m = Model.from_hf_config({"model_type": "gpt2", "n_embd": 8, "n_layer": 2, "n_head": 2, "vocab_size": 10, "n_positions": 6})
    assert m.intermediate_size == 32 and m.tie_word_embeddings
    # same tiny model as tests/test_model.py: 2*872 + wte 80 + wpe 48 + ln_f 16
    assert m.parameter_count().total == 1888


def test_gpt_neox_tiny_config_by_hand():
    cfg = {
        "model_type": "gpt_neox", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 32, "vocab_size": 10, "use_parallel_residual": True, "rotary_pct": 0.25,
    }
    m = Model.from_hf_config(cfg)
    assert (m.family, m.norm, m.gated_ffn, m.attention_bias, m.tie_word_embeddings) == ("gpt_neox", "layernorm", False, True, False)
    assert m.learned_position_embeddings == 0  # rotary
    # query_key_value 8*24+24=216, dense 64+8=72, two LayerNorms 32, dense_h_to_4h 8*32+32=288,
    # dense_4h_to_h 32*8+8=264 -> 872 per layer; embed_in 80 + embed_out 80 + final_layer_norm 16
    assert m.parameter_count() == ParamCount(total=2 * 872 + 176, active=2 * 872 + 176)


def test_mtp_alias_and_expert_aliases():
    cfg = {**config_of("qwen3-30b-a3b"), "mtp_num_hidden_layers": 2}
    assert Model.from_hf_config(cfg).num_nextn_predict_layers == 2
    cfg = config_of("qwen3-30b-a3b")
    cfg["n_routed_experts"] = cfg.pop("num_experts")
    assert Model.from_hf_config(cfg).num_experts == 128


def test_unused_keys_are_ignored_and_input_not_mutated():
    cfg = {**config_of("llama3-8b"), "some_future_key": {"x": 1}, "rope_scaling": None}
    before = json.dumps(cfg, sort_keys=True)
    m = Model.from_hf_config(cfg)
    assert m.hidden_size == 4096
    assert json.dumps(cfg, sort_keys=True) == before


def test_qwen3_moe_dense_prefix_from_mlp_only_layers():
    cfg = {**config_of("qwen3-30b-a3b"), "mlp_only_layers": [0, 1]}
    m = Model.from_hf_config(cfg)
    assert m.first_k_dense_replace == 2 and [k.name for k in m.kinds] == ["dense", "moe"]
    assert m.intermediate_size == 6144


# --------------------------------------------------------------------------- paths and names


def test_reads_a_path_or_a_directory(tmp_path):
    directory = tmp_path / "Qwen3-8B"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config_of("qwen3-8b")))
    by_dir = Model.from_hf_config(directory)
    by_file = Model.from_hf_config(str(directory / "config.json"))
    assert by_dir == by_file and by_dir.name == "Qwen3-8B"
    assert Model.from_hf_config(directory, name="q").name == "q"


def test_default_name_prefers_name_or_path():
    cfg = {**config_of("qwen3-8b"), "_name_or_path": "Qwen/Qwen3-8B"}
    assert read_hf_config(cfg)[2] == "Qwen3-8B"
    assert read_hf_config(config_of("qwen3-8b"))[2] == "qwen3"


# --------------------------------------------------------------------------- bad configs


def test_missing_required_field_names_the_config(tmp_path):
    cfg = config_of("llama3-8b")
    del cfg["hidden_size"]
    with pytest.raises(SpecError, match=_msg("hidden_size", "config.json <dict>", "be present", None)):
        Model.from_hf_config(cfg)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(SpecError, match=_msg("hidden_size", f"config.json {path}", "be present", None)):
        Model.from_hf_config(path)


def test_unknown_or_missing_model_type():
    rule = f"be one of {', '.join(map(repr, SUPPORTED_MODEL_TYPES))}"
    with pytest.raises(SpecError, match=_msg("model_type", "config.json <dict>", rule, "bert")):
        Model.from_hf_config({**config_of("llama3-8b"), "model_type": "bert"})
    cfg = config_of("llama3-8b")
    del cfg["model_type"]
    with pytest.raises(SpecError, match=_msg("model_type", "config.json <dict>", "be present", None)):
        Model.from_hf_config(cfg)


def test_moe_config_missing_routed_width():
    cfg = config_of("qwen3-30b-a3b")
    del cfg["moe_intermediate_size"]
    with pytest.raises(SpecError, match=_msg("moe_intermediate_size", "config.json <dict>", "be present", None)):
        Model.from_hf_config(cfg)


def test_hybrid_config_missing_linear_dims():
    cfg = config_of("qwen3-next-80b-a3b")
    del cfg["linear_key_head_dim"]
    with pytest.raises(SpecError, match=_msg("linear_key_head_dim", "config.json <dict>", "be present", None)):
        Model.from_hf_config(cfg)


def test_non_prefix_dense_layers_are_refused():
    cfg = {**config_of("qwen3-30b-a3b"), "mlp_only_layers": [5]}
    rule = ("leave the listed dense layers as a prefix 0..k-1 (ndcost models a dense prefix, then every "
            "decoder_sparse_step-th layer MoE)")
    with pytest.raises(SpecError, match=_msg("mlp_only_layers", "config.json <dict>", rule, [5])):
        Model.from_hf_config(cfg)
    cfg = {**config_of("deepseek-v3"), "moe_layer_freq": 2}
    with pytest.raises(SpecError, match=_msg("moe_layer_freq", "config.json <dict>", "be 1 (ndcost models dense-then-MoE stacks)", 2)):
        Model.from_hf_config(cfg)


def test_decoder_sparse_step_interleaves_dense_and_moe_layers():
    """Qwen3MoeDecoderLayer: layer i is MoE when (i + 1) % decoder_sparse_step == 0 (and not in
    mlp_only_layers): step 2 alternates dense and MoE, after the listed dense prefix."""
    cfg = {**config_of("qwen3-30b-a3b"), "decoder_sparse_step": 2, "mlp_only_layers": [0, 1, 2, 3]}
    model = Model.from_hf_config(cfg)
    ffn = [model.kinds[i].ffn for i in model.layer_kinds_in_order[:8]]
    assert ffn == ["dense"] * 5 + ["moe", "dense", "moe"]
    assert (model.first_k_dense_replace, model.moe_layer_step) == (4, 2)
    dense_layers = sum(1 for i in model.layer_kinds_in_order if model.kinds[i].ffn == "dense")
    assert dense_layers == 4 + (48 - 4) // 2


def test_bad_value_in_config_is_reported_by_model():
    cfg = {**config_of("llama3-8b"), "num_key_value_heads": 5}
    with pytest.raises(SpecError, match=_msg("num_key_value_heads", "Model", "divide num_attention_heads (32)", 5)):
        Model.from_hf_config(cfg)


def test_bad_paths(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(SpecError, match=_msg("path", "Model.from_hf_config", "name an existing config.json or a directory holding one", str(missing))):
        Model.from_hf_config(missing)
    bad = tmp_path / "config.json"
    bad.write_text("[1, 2]")
    with pytest.raises(SpecError, match=_msg("path", "Model.from_hf_config", "hold a JSON object", str(bad))):
        Model.from_hf_config(bad)
    with pytest.raises(SpecError, match=_msg("path_or_dict", "Model.from_hf_config", "be a path or a dict", 3)):
        Model.from_hf_config(3)


def test_kwargs_mapping_is_usable_directly():
    kwargs = model_kwargs_from_hf_config(config_of("mixtral-8x7b"))
    assert "name" not in kwargs
    assert Model(name="m", **kwargs).num_experts == 8
