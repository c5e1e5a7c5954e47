"""A Llama-like decoder's Transformers ``config.json`` -> :class:`~ndcost.spec.model.Model` fields.

The gated-MLP/RMSNorm families (llama, mistral, phi3, olmo2, gemma2, gemma3, qwen2, qwen2_moe, qwen3,
qwen3_moe, qwen3_next, mixtral, gpt_oss, deepseek_v2, deepseek_v3, glm4_moe): attention (GQA or MLA),
the layer types and windows, the FFN (dense, MoE, shared experts, a dense prefix). What each family
fixes in its code rather than its config is set per family, with the modelling file it comes from.
:mod:`ndcost.spec.hf_config` reads the config and dispatches here.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import SpecError, is_finite_number
from ..limits import MAX_LAYERS
from .rope_scaling import rope_attention_factor

__all__ = []

#: MLA families (DeepSeek-V2 introduced it; V3 and Kimi K2 keep it).
_MLA_FAMILIES = ("deepseek_v2", "deepseek_v3")
#: Families whose every layer is MoE with the expert width in intermediate_size (no dense FFN).
_ALL_MOE_FAMILIES = ("mixtral", "gpt_oss")
#: Families with q_norm / k_norm in code: Qwen3's per-head RMSNorm, Gemma 3's, OLMo 2's over the projection.
_QK_NORM_FAMILIES = ("qwen3", "qwen3_moe", "qwen3_next", "gemma3", "olmo2")
#: Families like DeepSeek-V3's MoE (n_shared_experts of moe_intermediate_size, first_k_dense_replace, a
#: sigmoid router with a score-correction bias) on grouped-query attention: GLM-4.5 (modeling_glm4_moe).
_DEEPSEEK_MOE_GQA_FAMILIES = ("glm4_moe",)
#: Families whose sliding_window applies to every layer when set (MistralAttention, Phi3Attention pass
#: config.sliding_window to every layer).
_EVERY_LAYER_WINDOW_FAMILIES = ("mistral", "phi3")
# Alternative names of one quantity across families (docs/ND_MODEL.md §1.4, HyperV2
# parser aliases). The first present wins.
_EXPERT_COUNT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")
_MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")


def _layer_count(layers: Any) -> bool:
    """Whether *layers* is a layer count a per-layer list may be built for: an int within
    ndcost's bound. Any other value passes through to :class:`Model`, which refuses it by
    name, before a list of a billion entries is built here."""
    return isinstance(layers, int) and not isinstance(layers, bool) and 0 <= layers <= MAX_LAYERS


# Qwen3NextConfig's default when neither layer_types nor full_attention_interval
# is given: every 4th layer (1-based) is full attention.
_QWEN3_NEXT_DEFAULT_FULL_ATTENTION_INTERVAL = 4


class _Reader:
    """Reads keys of one config, raising SpecError that names the config."""

    def __init__(self, config: Mapping[str, Any], owner: str) -> None:
        self.config = config
        self.owner = owner

    def required(self, *keys: str) -> Any:
        for key in keys:
            if self.config.get(key) is not None:
                return self.config[key]
        raise SpecError(keys[0], self.owner, "be present", None)

    def optional(self, *keys: str, default: Any = None) -> Any:
        for key in keys:
            if self.config.get(key) is not None:
                return self.config[key]
        return default


def _as_tuple(value: Any) -> Any:
    """A JSON list as a tuple; any other value as it is (the Model or tower refuses it by name)."""
    return tuple(value) if isinstance(value, list) else value

#: Config-class defaults of the Gemma families for keys their published config.json files may omit
#: (Gemma2Config, Gemma3TextConfig: vocabulary, head width, tied embeddings, window and its pattern).
_GEMMA_DEFAULTS = {
    "gemma2": {"vocab_size": 256_000, "head_dim": 256, "sliding_window": 4096},
    "gemma3": {"vocab_size": 262_208, "head_dim": 256, "sliding_window": 4096, "sliding_window_pattern": 6},
}


def _decoder_kwargs(read: _Reader, model_type: str) -> dict[str, Any]:
    """The gated-MLP/RMSNorm families: llama, mistral, phi3, olmo2, gemma2, gemma3,
    qwen2, qwen2_moe, qwen3, qwen3_moe, qwen3_next, mixtral, gpt_oss, deepseek_v2,
    deepseek_v3. *model_type* is the family (:data:`_FAMILY_OF` applied)."""
    defaults = _GEMMA_DEFAULTS.get(model_type, {})
    kwargs: dict[str, Any] = {
        "hidden_size": read.required("hidden_size"),
        "num_hidden_layers": read.required("num_hidden_layers"),
        "num_attention_heads": read.required("num_attention_heads"),
        "vocab_size": read.optional("vocab_size", default=defaults.get("vocab_size")),
        "num_key_value_heads": read.optional("num_key_value_heads"),
        # Every family's config class defaults tie_word_embeddings to False but Gemma's (True).
        "tie_word_embeddings": read.optional("tie_word_embeddings", default=bool(defaults)),
        "attention_bias": read.optional("attention_bias", default=False),
        "mlp_bias": read.optional("mlp_bias", default=False) if model_type == "llama" else False,
        "family": model_type,
    }
    if kwargs["vocab_size"] is None:
        raise SpecError("vocab_size", read.owner, "be present", None)
    if model_type == "gpt_oss":
        # GptOssExperts: gate_up_proj_bias and down_proj_bias on every expert, in code.
        kwargs["mlp_bias"] = True
        # GptOssExperts._apply_gate: the gate half clamped from above and the linear half both ways at
        # swiglu_limit (GptOssConfig's default 7.0) before the activation.
        limit = read.optional("swiglu_limit", default=7.0)
        if not is_finite_number(limit) or limit < 0:
            raise SpecError("swiglu_limit", read.owner, "be a non-negative number", limit)
        kwargs["glu_clamp"] = limit > 0
    if model_type in _MLA_FAMILIES:
        # MLA: head_dim is left to Model (v_head_dim, ND's convention);
        # DeepseekV3Config's own head_dim (= qk_rope_head_dim) is not a head width.
        kwargs["kv_lora_rank"] = read.required("kv_lora_rank")
        kwargs["q_lora_rank"] = read.optional("q_lora_rank", default=0)  # null = no query compression
        kwargs["qk_rope_head_dim"] = read.required("qk_rope_head_dim")
        kwargs["qk_nope_head_dim"] = read.required("qk_nope_head_dim")
        kwargs["v_head_dim"] = read.required("v_head_dim")
    else:
        kwargs["head_dim"] = read.optional("head_dim", default=defaults.get("head_dim"))
    if model_type in ("qwen2", "qwen2_moe"):
        # modeling_qwen2, modeling_qwen2_moe: q/k/v projections have bias=True in code (no config field).
        kwargs["attention_bias"] = True
    if model_type == "glm4_moe":
        # Glm4MoeAttention: q/k/v biases per attention_bias, o_proj without; q_norm/k_norm per head
        # when use_qk_norm (partial_rotary_factor changes no count)
        kwargs["qk_norm"] = bool(read.optional("use_qk_norm", default=False))
    if model_type == "gemma2" and read.optional("final_logit_softcapping") is not None:
        # Gemma2ForCausalLM: logits = cap·tanh(logits/cap) before the loss (elementwise work on the logits)
        kwargs["logit_softcapping"] = True
    if model_type in _QK_NORM_FAMILIES:
        # modeling_qwen3*, modeling_gemma3: q_norm and k_norm (RMSNorm over head_dim) in code;
        # modeling_olmo2: over the whole q and k projections.
        kwargs["qk_norm"] = True
    if model_type == "qwen3_next":
        # modeling_qwen3_next: q_proj emits query and a sigmoid output gate.
        kwargs["attn_output_gate"] = True
    kwargs["num_nextn_predict_layers"] = read.optional(*_MTP_KEYS, default=0)
    # YaRN's attention factor on cos and sin (rope_scaling; Transformers 5's rope_parameters): no FLOP, but a
    # stack whose fused RoPE takes no factor falls back to an unfused one (ndcost.spec.rope_scaling)
    factor = rope_attention_factor(read.optional("rope_scaling", "rope_parameters"), read.owner)
    if factor != 1.0:
        kwargs["rope_attention_factor"] = factor

    _add_layer_types(read, model_type, kwargs)
    _add_ffn(read, model_type, kwargs)
    return kwargs


def _default_sliding_layers(read: _Reader, model_type: str, layers: Any) -> list[str] | None:
    """The per-layer attention of a Gemma config that does not list ``layer_types``."""
    if model_type not in _GEMMA_DEFAULTS or not _layer_count(layers):
        return None
    if model_type == "gemma2":
        # Gemma2DecoderLayer: is_sliding = not bool(layer_idx % 2): even layers slide.
        return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    pattern = read.optional("sliding_window_pattern", default=_GEMMA_DEFAULTS["gemma3"]["sliding_window_pattern"])
    if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
        raise SpecError("sliding_window_pattern", read.owner, "be an integer >= 1", pattern)
    # Gemma3TextConfig: layer i slides unless (i + 1) % sliding_window_pattern == 0.
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]


def _add_sliding_window(read: _Reader, model_type: str, kwargs: dict[str, Any]) -> None:
    """The window of the layers that slide: every layer's for Mistral and Phi-3 (when set), the
    ``sliding_attention`` layers' for the families that list them (Gemma 2/3, gpt-oss)."""
    layer_types = kwargs.get("layer_types")
    slides = isinstance(layer_types, tuple) and "sliding_attention" in layer_types
    if model_type in _EVERY_LAYER_WINDOW_FAMILIES and layer_types is None:
        slides = read.optional("sliding_window") is not None
    if slides:
        default = _GEMMA_DEFAULTS.get(model_type, {}).get("sliding_window")
        window = read.optional("sliding_window", default=default)
        if window is None:
            raise SpecError("sliding_window", read.owner, "be present when a layer is sliding_attention", None)
        kwargs["sliding_window"] = window


def _add_layer_types(read: _Reader, model_type: str, kwargs: dict[str, Any]) -> None:
    layer_types = read.optional("layer_types")
    if layer_types is None:
        layer_types = _default_sliding_layers(read, model_type, kwargs["num_hidden_layers"])
    if layer_types is None and model_type == "qwen3_next":
        interval = read.optional("full_attention_interval", default=_QWEN3_NEXT_DEFAULT_FULL_ATTENTION_INTERVAL)
        layers = kwargs["num_hidden_layers"]
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise SpecError("full_attention_interval", read.owner, "be an integer >= 1", interval)
        if _layer_count(layers):
            # Qwen3NextConfig: layer i (0-based) is full attention when (i + 1) % interval == 0.
            layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    if layer_types is None:
        _add_sliding_window(read, model_type, kwargs)
        return
    kwargs["layer_types"] = _as_tuple(layer_types)
    _add_sliding_window(read, model_type, kwargs)
    if isinstance(layer_types, (list, tuple)) and "linear_attention" in layer_types:
        kwargs["linear_num_key_heads"] = read.required("linear_num_key_heads")
        kwargs["linear_key_head_dim"] = read.required("linear_key_head_dim")
        kwargs["linear_num_value_heads"] = read.required("linear_num_value_heads")
        kwargs["linear_value_head_dim"] = read.required("linear_value_head_dim")
        kwargs["linear_conv_kernel_dim"] = read.required("linear_conv_kernel_dim")


def _add_ffn(read: _Reader, model_type: str, kwargs: dict[str, Any]) -> None:
    num_experts = read.optional(*_EXPERT_COUNT_KEYS, default=0)
    if model_type in ("qwen2_moe", "qwen3_moe", "qwen3_next", "mixtral", "gpt_oss", "llama4") + _MLA_FAMILIES \
            + _DEEPSEEK_MOE_GQA_FAMILIES:
        num_experts = read.required(*_EXPERT_COUNT_KEYS)
    kwargs["intermediate_size"] = read.optional("intermediate_size")
    if not num_experts:
        kwargs["intermediate_size"] = read.required("intermediate_size")
        return
    kwargs["num_experts"] = num_experts
    kwargs["num_experts_per_tok"] = read.required("num_experts_per_tok")
    if model_type == "llama4":
        # Llama4TextMoe: routed experts and one shared expert, both of width intermediate_size.
        kwargs["moe_intermediate_size"] = read.required("intermediate_size")
        kwargs["shared_expert_intermediate_size"] = read.required("intermediate_size")
        return
    if model_type in _ALL_MOE_FAMILIES:
        # MixtralSparseMoeBlock, GptOssMLP: every layer is MoE and each expert has width
        # intermediate_size; there is no dense FFN and no shared expert.
        kwargs["moe_intermediate_size"] = read.required("intermediate_size")
        return
    kwargs["moe_intermediate_size"] = read.required("moe_intermediate_size")
    shared_width = read.optional("shared_expert_intermediate_size", default=0)
    shared_count = read.optional("n_shared_experts", "num_shared_experts", default=0)
    if shared_count and not shared_width:
        moe_width = kwargs["moe_intermediate_size"]
        # DeepseekV3MoE: one MLP of width moe_intermediate_size * n_shared_experts.
        if isinstance(shared_count, int) and isinstance(moe_width, int):
            shared_width = shared_count * moe_width
        else:
            raise SpecError("n_shared_experts", read.owner, "be an integer", shared_count)
    kwargs["shared_expert_intermediate_size"] = shared_width
    if model_type in ("qwen2_moe", "qwen3_next") and shared_width:
        # Qwen2MoeSparseMoeBlock, Qwen3NextSparseMoeBlock: sigmoid(shared_expert_gate(x)) scales the
        # shared expert.
        kwargs["shared_expert_gate"] = True
    kwargs["first_k_dense_replace"] = _dense_prefix(read, model_type, kwargs)


def _dense_prefix(read: _Reader, model_type: str, kwargs: dict[str, Any]) -> int:
    """How many leading layers are dense. ndcost's stacks are dense-then-MoE,
    so a config whose dense layers are not a prefix is refused."""
    layers = kwargs["num_hidden_layers"]
    if model_type in _MLA_FAMILIES + _DEEPSEEK_MOE_GQA_FAMILIES:
        # DeepseekV2/V3, Glm4Moe: layer i is MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0.
        freq = read.optional("moe_layer_freq", default=1)
        if freq != 1:
            raise SpecError("moe_layer_freq", read.owner, "be 1 (ndcost models dense-then-MoE stacks)", freq)
        return read.optional("first_k_dense_replace", default=0)
    if model_type in ("qwen2_moe", "qwen3_moe", "qwen3_next"):
        # Qwen2Moe/Qwen3Moe/Qwen3Next: layer i is dense when i is in mlp_only_layers or
        # (i + 1) % decoder_sparse_step != 0.
        step = read.optional("decoder_sparse_step", default=1)
        mlp_only = read.optional("mlp_only_layers", default=[])
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise SpecError("decoder_sparse_step", read.owner, "be an integer >= 1", step)
        if not isinstance(mlp_only, (list, tuple)):
            raise SpecError("mlp_only_layers", read.owner, "be a list of layer indices", mlp_only)
        if not _layer_count(layers):
            return 0      # Model refuses the layer count
        # A set of the entries that can name a layer (an int; 1.0 == 1 as in the list): one
        # look-up a layer, however long the list.
        only = sorted({int(index) for index in mlp_only if isinstance(index, (int, float)) and 0 <= index < layers})
        if only != list(range(len(only))):
            raise SpecError(
                "mlp_only_layers",
                read.owner,
                "leave the listed dense layers as a prefix 0..k-1 (ndcost models a dense prefix, then every "
                "decoder_sparse_step-th layer MoE)",
                list(mlp_only),
            )
        kwargs["moe_layer_step"] = step
        return len(only)
    return read.optional("first_k_dense_replace", default=0)
