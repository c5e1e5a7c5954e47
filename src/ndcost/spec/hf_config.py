"""Transformers ``config.json`` -> :class:`ndcost.spec.model.Model` fields, offline.

Used by :meth:`Model.from_hf_config`. A config.json carries many keys that do
not change the cost of training (token ids, rope scaling, dtypes, ...): keys the
mapping does not use are ignored. What each family fixes in its *code* rather
than in its config (Qwen2's q/k/v biases, Qwen3's QK-norm, Qwen3-Next's gated
attention and shared-expert gate, GPT-2's LayerNorm and biases) is set here,
per ``model_type``, with the modelling file it comes from.

Supported ``model_type``: llama, mistral, phi3, olmo2, gemma2, gemma3_text, qwen2,
qwen2_moe, qwen3, qwen3_moe, qwen3_next, mixtral, gpt_oss, deepseek_v2, deepseek_v3
(and kimi_k2, DeepSeek-V3's architecture with its own sizes), gpt2 (also GPT-3-like
configs written with GPT-2's field names n_embd / n_layer / n_head / n_inner /
n_positions), gpt_neox, and the vision-language models qwen2_vl and qwen2_5_vl (a
Qwen2 text model with a :class:`~ndcost.spec.vision.VisionTower`) and gemma3 (its
``text_config`` is read; the SigLIP tower, about 0.4B of Gemma 3's parameters, is
not priced: ndcost models Qwen-VL towers only).

Here: reading a config, the dispatch per ``model_type``, the VLMs and the families with layouts of
their own (GPT-2, GPT-NeoX, Nemotron-H, Jamba, Llama 4); the Llama-like decoder most families share is
:mod:`ndcost.spec.hf_decoder`'s.
"""
from __future__ import annotations

import json
import math
import os
from os import PathLike
from typing import Any, Mapping

from ..errors import SpecError
from .hf_decoder import _Reader, _as_tuple, _decoder_kwargs, _layer_count

__all__ = ["SUPPORTED_MODEL_TYPES", "read_hf_config", "model_kwargs_from_hf_config"]

SUPPORTED_MODEL_TYPES = (
    "deepseek_v2",
    "deepseek_v3",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "glm4_moe",
    "gpt2",
    "gpt_neox",
    "gpt_oss",
    "jamba",
    "kimi_k2",
    "llama",
    "llama4",
    "llama4_text",
    "mistral",
    "mixtral",
    "nemotron_h",
    "olmo2",
    "phi3",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "qwen3_next",
    "qwen2_vl",
    "qwen2_5_vl",
)
#: model_type -> the family whose code it runs (Kimi K2 ships DeepSeek-V3's modelling code under
#: auto_map; gemma3_text is Gemma 3's text model).
_FAMILY_OF = {"kimi_k2": "deepseek_v3", "gemma3_text": "gemma3", "llama4_text": "llama4"}
#: Multimodal configs whose text model ndcost reads from ``text_config`` (their vision towers are not priced).
_TEXT_CONFIG_TYPES = ("gemma3", "llama4")
#: Vision-language model types: a qwen2 text model and a vision_config.
_VLM_TYPES = ("qwen2_vl", "qwen2_5_vl")


def read_hf_config(path_or_dict: str | PathLike | Mapping[str, Any]) -> tuple[dict[str, Any], str, str]:
    """Load a config: a dict, a path to a config.json, or a directory holding one.

    Returns (config, owner used in error messages, default model name). The
    default name is the last component of ``_name_or_path`` if the config has
    one, else the directory's name for a path, else the model_type.
    """
    if isinstance(path_or_dict, Mapping):
        config = dict(path_or_dict)
        owner = "config.json <dict>"
        fallback_name = None
    elif isinstance(path_or_dict, (str, PathLike)):
        path = os.fspath(path_or_dict)
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        owner = f"config.json {path}"
        try:
            with open(path, encoding="utf-8") as handle:
                config = json.load(handle)
        except FileNotFoundError:
            rule = "name an existing config.json or a directory holding one"
            raise SpecError("path", "Model.from_hf_config", rule, os.fspath(path_or_dict)) from None
        except json.JSONDecodeError as exc:
            rule = f"hold valid JSON ({exc.msg}, line {exc.lineno})"
            raise SpecError("path", "Model.from_hf_config", rule, path) from None
        if not isinstance(config, dict):
            raise SpecError("path", "Model.from_hf_config", "hold a JSON object", path)
        fallback_name = os.path.basename(os.path.dirname(os.path.abspath(path))) or None
    else:
        raise SpecError("path_or_dict", "Model.from_hf_config", "be a path or a dict", path_or_dict)

    name_or_path = config.get("_name_or_path")
    if isinstance(name_or_path, str) and name_or_path.strip("/"):
        default_name = name_or_path.rstrip("/").rsplit("/", 1)[-1]
    elif fallback_name:
        default_name = fallback_name
    else:
        default_name = str(config.get("model_type") or "model")
    return config, owner, default_name


def model_kwargs_from_hf_config(config: Mapping[str, Any], *, owner: str = "config.json <dict>") -> dict[str, Any]:
    """The :class:`Model` keyword arguments (all but ``name``) of a config dict.

    Values are passed through unconverted: :class:`Model` type-checks them, so
    a string where an int belongs is reported by name.
    """
    if not isinstance(config, Mapping):
        raise SpecError("config", owner, "be a JSON object", config)
    model_type = config.get("model_type")
    if model_type is None:
        raise SpecError("model_type", owner, "be present", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise SpecError("model_type", owner, f"be one of {', '.join(map(repr, SUPPORTED_MODEL_TYPES))}", model_type)
    if model_type in _VLM_TYPES:
        return _vlm_kwargs(config, owner, model_type)
    if model_type in _TEXT_CONFIG_TYPES and isinstance(config.get("text_config"), Mapping):
        config = {**config, **{k: v for k, v in config["text_config"].items() if v is not None}}
    read = _Reader(config, owner)
    if model_type == "gpt2":
        return _gpt2_kwargs(read)
    if _FAMILY_OF.get(model_type, model_type) == "llama4":
        return _llama4_kwargs(read)
    if model_type == "nemotron_h":
        return _nemotron_h_kwargs(read)
    if model_type == "jamba":
        return _jamba_kwargs(read)
    if model_type == "gpt_neox":
        return _gpt_neox_kwargs(read)
    return _decoder_kwargs(read, _FAMILY_OF.get(model_type, model_type))


def _vlm_kwargs(config: Mapping[str, Any], owner: str, model_type: str) -> dict[str, Any]:
    """Qwen2-VL / Qwen2.5-VL: the text model is Qwen2 (modeling_qwen2_vl's and
    modeling_qwen2_5_vl's text decoder layer is Qwen2's: q/k/v biases, SwiGLU,
    RMSNorm). Newer Transformers configs nest its fields in ``text_config``;
    older ones keep them at the top level (the published config.json files)."""
    text = config.get("text_config")
    merged = dict(config)
    if isinstance(text, Mapping):
        merged.update({key: value for key, value in text.items() if value is not None})
    kwargs = _decoder_kwargs(_Reader(merged, owner), "qwen2")
    vision = config.get("vision_config")
    if not isinstance(vision, Mapping):
        raise SpecError("vision_config", owner, "be present (a vision-language model's tower)", vision)
    kwargs["vision"] = _vision_kwargs(_Reader(vision, owner + " vision_config"), model_type)
    return kwargs


def _vision_kwargs(read: _Reader, model_type: str) -> dict[str, Any]:
    """A vision_config as :class:`~ndcost.spec.vision.VisionTower` fields.

    Qwen2.5-VL (Qwen2_5_VLVisionConfig): ``hidden_size`` is the block width,
    ``out_hidden_size`` the text width; SwiGLU MLP of ``intermediate_size``
    (Qwen2_5_VLMLP, bias=True), RMSNorm, window attention of ``window_size``
    pixels except in ``fullatt_block_indexes``.
    Qwen2-VL (Qwen2VLVisionConfig): ``embed_dim`` is the block width and
    ``hidden_size`` the text width; GELU MLP of ``mlp_ratio`` x embed_dim
    (VisionMlp fc1/fc2), LayerNorm, every block attends to the whole image."""
    common = {
        "depth": read.required("depth"),
        "num_heads": read.required("num_heads"),
        "patch_size": read.optional("patch_size", "spatial_patch_size", default=14),
        "temporal_patch_size": read.optional("temporal_patch_size", default=2),
        "spatial_merge_size": read.optional("spatial_merge_size", default=2),
        "in_channels": read.optional("in_channels", "in_chans", default=3),
    }
    if model_type == "qwen2_vl":
        width = read.required("embed_dim")
        ratio = read.optional("mlp_ratio", default=4)
        inner = width * ratio if isinstance(width, int) and isinstance(ratio, (int, float)) else ratio
        # A finite product becomes the int width; NaN or inf passes through for VisionTower to refuse.
        inner = int(inner) if isinstance(inner, float) and math.isfinite(inner) else inner
        return {**common, "hidden_size": width, "intermediate_size": inner,
                "out_hidden_size": read.required("hidden_size"), "gated_ffn": False, "norm": "layernorm"}
    return {**common, "hidden_size": read.required("hidden_size"),
            "intermediate_size": read.required("intermediate_size"),
            "out_hidden_size": read.required("out_hidden_size"), "gated_ffn": True, "norm": "rmsnorm",
            "window_size": read.optional("window_size", default=0),
            "fullatt_block_indexes": _as_tuple(read.optional("fullatt_block_indexes", default=()))}


def _gpt2_kwargs(read: _Reader) -> dict[str, Any]:
    """GPT-2 (modeling_gpt2): learned position table, LayerNorm with bias,
    biases on every Conv1D, 2-matmul GELU MLP of width n_inner (None means
    4 * n_embd, GPT2Config's default), tied embeddings by default
    (PretrainedConfig's tie_word_embeddings default is True). GPT-3 uses the
    same block (Brown et al. 2020, §2.1: "the same model and architecture as
    GPT-2"); its sparse attention layers do not change the parameter count."""
    hidden = read.required("n_embd", "hidden_size")
    inner = read.optional("n_inner", "intermediate_size")
    if inner is None and isinstance(hidden, int) and not isinstance(hidden, bool):
        inner = 4 * hidden
    return {
        "hidden_size": hidden,
        "num_hidden_layers": read.required("n_layer", "num_hidden_layers"),
        "num_attention_heads": read.required("n_head", "num_attention_heads"),
        "vocab_size": read.required("vocab_size"),
        "intermediate_size": inner,
        "learned_position_embeddings": read.required("n_positions", "max_position_embeddings"),
        "tie_word_embeddings": read.optional("tie_word_embeddings", default=True),
        "gated_ffn": False,
        "norm": "layernorm",
        "attention_bias": True,
        "mlp_bias": True,
        "family": "gpt2",
    }


def _gpt_neox_kwargs(read: _Reader) -> dict[str, Any]:
    """GPT-NeoX (modeling_gpt_neox): fused query_key_value and dense with
    biases (attention_bias, default True), LayerNorm with bias, 2-matmul GELU
    MLP with biases, rotary positions, untied embed_out by default. The
    parallel attention/MLP residual changes the data flow, not the counts."""
    return {
        "hidden_size": read.required("hidden_size"),
        "num_hidden_layers": read.required("num_hidden_layers"),
        "num_attention_heads": read.required("num_attention_heads"),
        "vocab_size": read.required("vocab_size"),
        "intermediate_size": read.required("intermediate_size"),
        "tie_word_embeddings": read.optional("tie_word_embeddings", default=False),
        "gated_ffn": False,
        "norm": "layernorm",
        "attention_bias": read.optional("attention_bias", default=True),
        "mlp_bias": True,
        "family": "gpt_neox",
    }
#: NemotronHConfig's hybrid_override_pattern characters -> ndcost's block types (its layers_block_type).
_NEMOTRON_H_BLOCKS = {"M": "mamba", "*": "attention", "-": "mlp"}


def _nemotron_h_kwargs(read: _Reader) -> dict[str, Any]:
    """Nemotron-H (modeling_nemotron_h): one block a character of ``hybrid_override_pattern`` -- a
    Mamba-2 mixer (M), attention (*) or a squared-ReLU MLP (-, two matmuls, ``mlp_bias``), each with
    one RMSNorm; the mixer's in/out projections without biases and its conv1d with one (the
    parameter count ndcost prices; another setting is refused rather than miscounted)."""
    pattern = read.required("hybrid_override_pattern")
    if not isinstance(pattern, str) or not pattern:
        raise SpecError("hybrid_override_pattern", read.owner, "be a non-empty string of M, * and -", pattern)
    unknown = sorted(set(pattern) - set(_NEMOTRON_H_BLOCKS))
    if unknown:
        rule = "hold only M (Mamba-2), * (attention) and - (MLP) blocks; MoE blocks (E) are not priced yet"
        raise SpecError("hybrid_override_pattern", read.owner, rule, "".join(unknown))
    for key, expected in (("use_bias", False), ("use_conv_bias", True)):
        if read.optional(key, default=expected) != expected:
            raise SpecError(key, read.owner, f"be {expected} (Nemotron-H's mixer as ndcost counts it)",
                            read.optional(key))
    act = read.optional("mlp_hidden_act", default="relu2")
    if act != "relu2":
        raise SpecError("mlp_hidden_act", read.owner, "be relu2 (Nemotron-H's two-matmul MLP)", act)
    return {
        "hidden_size": read.required("hidden_size"),
        "num_hidden_layers": len(pattern),
        "num_attention_heads": read.required("num_attention_heads"),
        "num_key_value_heads": read.optional("num_key_value_heads"),
        "head_dim": read.optional("attention_head_dim", "head_dim"),
        "vocab_size": read.required("vocab_size"),
        "intermediate_size": read.required("intermediate_size"),
        "tie_word_embeddings": read.optional("tie_word_embeddings", default=False),
        "attention_bias": read.optional("attention_bias", default=False),
        "mlp_bias": read.optional("mlp_bias", default=False),
        "gated_ffn": False,
        "layer_types": tuple(_NEMOTRON_H_BLOCKS[c] for c in pattern),
        "mamba_num_heads": read.required("mamba_num_heads"),
        "mamba_head_dim": read.required("mamba_head_dim"),
        "mamba_state_size": read.required("ssm_state_size"),
        "mamba_n_groups": read.required("n_groups"),
        "mamba_conv_kernel": read.required("conv_kernel"),
        "mamba_chunk_size": read.optional("chunk_size", default=128),
        "family": "nemotron_h",
    }


def _jamba_kwargs(read: _Reader) -> dict[str, Any]:
    """Jamba (modeling_jamba): layer i attends (GQA, no biases) when i % attn_layer_period ==
    attn_layer_offset, else runs a Mamba-1 mixer of expand x hidden channels (JambaMambaMixer); its FFN
    is a MoE (top-k SwiGLU experts of intermediate_size, an unbiased router) when i %
    expert_layer_period == expert_layer_offset, else a SwiGLU MLP of that width. ndcost places MoE
    layers at (i + 1) % step == 0, so the offset must be period - 1 (Jamba's 2 and 1)."""
    layers = read.required("num_hidden_layers")
    hidden = read.required("hidden_size")
    period, offset = read.optional("attn_layer_period", default=8), read.optional("attn_layer_offset", default=4)
    e_period = read.optional("expert_layer_period", default=2)
    e_offset = read.optional("expert_layer_offset", default=1)
    for key, value in (("attn_layer_period", period), ("attn_layer_offset", offset),
                       ("expert_layer_period", e_period), ("expert_layer_offset", e_offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SpecError(key, read.owner, "be an integer >= 0", value)
    if period < 1 or e_period < 1:
        raise SpecError("attn_layer_period", read.owner, "be an integer >= 1 (and expert_layer_period)", period)
    experts = read.optional("num_experts", default=1)
    if experts > 1 and e_offset != e_period - 1:
        rule = f"be expert_layer_period - 1 ({e_period - 1}): ndcost places MoE layers at (i + 1) % period == 0"
        raise SpecError("expert_layer_offset", read.owner, rule, e_offset)
    for key, expected in (("mamba_proj_bias", False), ("mamba_conv_bias", True)):
        if read.optional(key, default=expected) != expected:
            raise SpecError(key, read.owner, f"be {expected} (Jamba's mixer as ndcost counts it)", read.optional(key))
    expand = read.optional("mamba_expand", default=2)
    rank = read.optional("mamba_dt_rank", default="auto")
    if rank == "auto" and isinstance(hidden, int):
        rank = math.ceil(hidden / 16)                     # JambaConfig: ceil(hidden_size / 16)
    kwargs: dict[str, Any] = {
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": read.required("num_attention_heads"),
        "num_key_value_heads": read.optional("num_key_value_heads"),
        "vocab_size": read.required("vocab_size"),
        "intermediate_size": read.required("intermediate_size"),
        "tie_word_embeddings": read.optional("tie_word_embeddings", default=False),
        "mamba_d_inner": expand * hidden if isinstance(expand, int) and isinstance(hidden, int) else expand,
        "mamba_dt_rank": rank,
        "mamba_state_size": read.optional("mamba_d_state", default=16),
        "mamba_conv_kernel": read.optional("mamba_d_conv", default=4),
        "family": "jamba",
    }
    if _layer_count(layers):
        kwargs["layer_types"] = tuple("full_attention" if i % period == offset else "mamba1" for i in range(layers))
    if experts > 1:
        kwargs.update(num_experts=experts, num_experts_per_tok=read.required("num_experts_per_tok"),
                      moe_intermediate_size=read.required("intermediate_size"), moe_layer_step=e_period)
    return kwargs


#: Llama4TextConfig's default: every 4th layer (1-based) is a NoPE layer with full attention, the
#: others use RoPE and chunked attention (no_rope_layer_interval = 4).
_LLAMA4_NO_ROPE_INTERVAL = 4


def _llama4_kwargs(read: _Reader) -> dict[str, Any]:
    """Llama 4 (modeling_llama4, text model): MoE layers every ``interleave_moe_layer_step``-th
    layer (Llama4TextConfig: layer i is MoE when (i + 1) % step == 0), each with routed experts of
    width ``intermediate_size`` (top-k, an unbiased router) and one shared expert of that width, no
    gate; dense layers of width ``intermediate_size_mlp``; RoPE layers attend causally inside chunks
    of ``attention_chunk_size`` tokens, NoPE layers (``no_rope_layers`` 0) to the whole prefix; the
    QK L2-norm has no weights. The vision tower is not priced."""
    layers = read.required("num_hidden_layers")
    kwargs = _decoder_kwargs(read, "llama4")
    kwargs["intermediate_size"] = read.required("intermediate_size_mlp")
    kwargs["moe_layer_step"] = read.optional("interleave_moe_layer_step", default=1)
    kwargs["qk_norm"] = False          # Llama4TextL2Norm: no parameters (its elementwise pass is not priced)
    chunk = read.optional("attention_chunk_size")
    if chunk is not None and _layer_count(layers) and read.optional("layer_types") is None:
        no_rope = read.optional("no_rope_layers")
        if isinstance(no_rope, list) and len(no_rope) == layers:
            uses_rope = [bool(flag) for flag in no_rope]
        else:
            uses_rope = [(i + 1) % _LLAMA4_NO_ROPE_INTERVAL != 0 for i in range(layers)]
        kwargs["layer_types"] = tuple("chunked_attention" if rope else "full_attention" for rope in uses_rope)
    if chunk is not None and "chunked_attention" in (kwargs.get("layer_types") or ()):
        kwargs["attention_chunk_size"] = chunk
    return kwargs
