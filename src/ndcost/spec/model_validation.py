"""What a valid Model is: the bounds and vocabularies of its fields and the rules between them.

A :class:`~ndcost.spec.model.Model` checks itself on construction (``Model.__post_init__`` runs
:meth:`ModelValidation._validate`), normalising the fields that have derived defaults
(``num_key_value_heads``, ``head_dim``, ``layer_types``, ``vision``, ``census``).
"""
from __future__ import annotations

from typing import Mapping

from ..errors import SpecError, check_bool, check_choice, check_positive_int, is_finite_number
from .census import kind_census_from
from ..limits import (
    MAX_EXPERTS, MAX_HEADS, MAX_LAYERS, MAX_ROPE_ATTENTION_FACTOR, MAX_SEQ_LENGTH, MAX_VOCAB, MAX_WIDTH,
)
from .mamba import BLOCK_TYPES, MAMBA1_FIELDS, MAMBA_FIELDS
from .vision import VisionTower

__all__ = ["LAYER_TYPES", "NORMS", "FAMILIES", "ModelValidation"]

_OWNER = "Model"

#: Values of ``layer_types`` ndcost can price (Transformers' names).
LAYER_TYPES = ("full_attention", "linear_attention", "sliding_attention", "chunked_attention", "mamba1") + BLOCK_TYPES
#: Norm flavours: RMSNorm has a weight only, LayerNorm a weight and a bias.
NORMS = ("rmsnorm", "layernorm")
#: Families whose parameter layout ndcost knows (Transformers' model_type names).
FAMILIES = (
    "llama",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "qwen3_next",
    "mixtral",
    "deepseek_v3",
    "gpt2",
    "gpt_neox",
    "mistral",
    "phi3",
    "olmo2",
    "gemma2",
    "gemma3",
    "gpt_oss",
    "qwen2_moe",
    "deepseek_v2",
    "llama4",
    "nemotron_h",
    "glm4_moe",
    "jamba",
)
#: Families whose decoder layer has four norms (before and after attention and FFN: Gemma2DecoderLayer,

# Int fields with their minimum; the ``None``-able ones are listed separately.
_REQUIRED_POSITIVE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
_OPTIONAL_POSITIVE = ("num_key_value_heads", "head_dim", "intermediate_size", "moe_intermediate_size")
_NON_NEGATIVE = (
    "num_experts",
    "num_experts_per_tok",
    "shared_expert_intermediate_size",
    "first_k_dense_replace",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "linear_num_key_heads",
    "linear_key_head_dim",
    "linear_num_value_heads",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "num_nextn_predict_layers",
    "learned_position_embeddings",
    "sliding_window",
    "attention_chunk_size",
    "moe_layer_step",
) + MAMBA_FIELDS + MAMBA1_FIELDS
_BOOLS = (
    "tie_word_embeddings",
    "qk_norm",
    "attn_output_gate",
    "shared_expert_gate",
    "gated_ffn",
    "attention_bias",
    "mlp_bias",
    "glu_clamp",
    "logit_softcapping",
)
_LINEAR_FIELDS = (
    "linear_num_key_heads",
    "linear_key_head_dim",
    "linear_num_value_heads",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)
_MLA_FIELDS = ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
#: The upper bound of every int field (ndcost.limits; docs/LIMITS.md).
_SIZE_LIMITS: Mapping[str, int] = {
    "num_hidden_layers": MAX_LAYERS, "num_nextn_predict_layers": MAX_LAYERS, "first_k_dense_replace": MAX_LAYERS,
    "num_attention_heads": MAX_HEADS, "num_key_value_heads": MAX_HEADS, "linear_num_key_heads": MAX_HEADS,
    "linear_num_value_heads": MAX_HEADS,
    "num_experts": MAX_EXPERTS, "num_experts_per_tok": MAX_EXPERTS,
    "vocab_size": MAX_VOCAB, "learned_position_embeddings": MAX_SEQ_LENGTH, "sliding_window": MAX_SEQ_LENGTH,
    "attention_chunk_size": MAX_SEQ_LENGTH, "moe_layer_step": MAX_LAYERS,
    "mamba_num_heads": MAX_HEADS, "mamba_n_groups": MAX_HEADS, "mamba_head_dim": MAX_WIDTH,
    "mamba_state_size": MAX_WIDTH, "mamba_conv_kernel": MAX_WIDTH, "mamba_chunk_size": MAX_SEQ_LENGTH,
    "mamba_d_inner": MAX_WIDTH, "mamba_dt_rank": MAX_WIDTH,
    **{name: MAX_WIDTH for name in ("hidden_size", "head_dim", "intermediate_size", "moe_intermediate_size",
                                    "shared_expert_intermediate_size", "kv_lora_rank", "q_lora_rank",
                                    "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "linear_key_head_dim",
                                    "linear_value_head_dim", "linear_conv_kernel_dim")},
}
if set(_SIZE_LIMITS) != set(_REQUIRED_POSITIVE + _OPTIONAL_POSITIVE + _NON_NEGATIVE):  # pragma: no cover
    raise ImportError("every int field of Model needs a bound in _SIZE_LIMITS")


class ModelValidation:
    """The checks of :class:`~ndcost.spec.model.Model` (a base of it): every field's bound, then the rules
    between fields; a broken one raises SpecError."""

    def _validate(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SpecError("name", _OWNER, "be a non-empty string", self.name)
        for field_name in _REQUIRED_POSITIVE:
            check_positive_int(getattr(self, field_name), field_name, _OWNER, maximum=_SIZE_LIMITS[field_name])
        for field_name in _OPTIONAL_POSITIVE:
            value = getattr(self, field_name)
            if value is not None:
                check_positive_int(value, field_name, _OWNER, maximum=_SIZE_LIMITS[field_name])
        for field_name in _NON_NEGATIVE:
            check_positive_int(getattr(self, field_name), field_name, _OWNER, minimum=0,
                               maximum=_SIZE_LIMITS[field_name])
        for field_name in _BOOLS:
            check_bool(getattr(self, field_name), field_name, _OWNER)
        check_choice(self.norm, "norm", _OWNER, NORMS)
        check_choice(self.family, "family", _OWNER, FAMILIES)
        factor = self.rope_attention_factor
        if not is_finite_number(factor) or not 0.0 < factor <= MAX_ROPE_ATTENTION_FACTOR:
            raise SpecError("rope_attention_factor", _OWNER,
                            f"be a number in (0, {MAX_ROPE_ATTENTION_FACTOR:g}] (YaRN's attention factor; 1: none)",
                            factor)

        self._check_attention()
        self._check_layer_types()
        self._check_ffn()
        self._check_vision()
        self._check_census()

    def _check_census(self) -> None:
        census = self.census
        if isinstance(census, (str, bytes)) or not isinstance(census, (list, tuple)):
            raise SpecError("census", _OWNER, "be a sequence of KindCensus (see Model.with_census)", census)
        entries = tuple(kind_census_from(entry, _OWNER) for entry in census)
        names = [kind.name for kind in self.kinds]
        seen = set()
        for entry in entries:
            if entry.kind not in names:
                raise SpecError("census", _OWNER, f"name layer kinds of the model ({', '.join(names)})", entry.kind)
            if entry.kind in seen:
                raise SpecError("census", _OWNER, "hold one census a kind", entry.kind)
            seen.add(entry.kind)
        object.__setattr__(self, "census", entries)

    def _check_vision(self) -> None:
        if self.vision is None:
            return
        if not isinstance(self.vision, VisionTower):
            object.__setattr__(self, "vision", VisionTower.from_dict(self.vision))
        if self.vision.out_hidden_size != self.hidden_size:
            rule = f"project to the text model's hidden_size ({self.hidden_size}): its out_hidden_size"
            raise SpecError("vision", _OWNER, rule, self.vision.out_hidden_size)

    def _check_attention(self) -> None:
        heads = self.num_attention_heads
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", heads)
        if heads % self.num_key_value_heads != 0:
            raise SpecError(
                "num_key_value_heads",
                _OWNER,
                f"divide num_attention_heads ({heads})",
                self.num_key_value_heads,
            )
        if self.kv_lora_rank > 0:
            for field_name in _MLA_FIELDS:
                if getattr(self, field_name) < 1:
                    rule = "be an integer >= 1 when kv_lora_rank > 0 (MLA)"
                    raise SpecError(field_name, _OWNER, rule, getattr(self, field_name))
        elif self.q_lora_rank > 0:
            raise SpecError("q_lora_rank", _OWNER, "be 0 unless kv_lora_rank > 0 (MLA)", self.q_lora_rank)
        if self.head_dim is None:
            if self.kv_lora_rank > 0:
                default_head_dim = self.v_head_dim  # ND deepseek profile: dh = v_head_dim
            else:
                default_head_dim = self.hidden_size // heads
            if default_head_dim < 1:
                rule = f"be set when hidden_size ({self.hidden_size}) < num_attention_heads"
                raise SpecError("head_dim", _OWNER, rule, None)
            object.__setattr__(self, "head_dim", default_head_dim)

    def _check_layer_types(self) -> None:
        layer_types = self.layer_types
        if layer_types is None:
            return
        if isinstance(layer_types, str) or not isinstance(layer_types, (list, tuple)):
            raise SpecError("layer_types", _OWNER, "be a list of layer type names", layer_types)
        layer_types = tuple(layer_types)
        object.__setattr__(self, "layer_types", layer_types)
        if len(layer_types) != self.num_hidden_layers:
            raise SpecError(
                "layer_types",
                _OWNER,
                f"have one entry per body layer (num_hidden_layers = {self.num_hidden_layers}); its length",
                len(layer_types),
            )
        for entry in layer_types:
            if entry not in LAYER_TYPES:
                raise SpecError(
                    "layer_types",
                    _OWNER,
                    f"hold only {', '.join(map(repr, LAYER_TYPES))}",
                    entry,
                )
        if "chunked_attention" in layer_types and self.attention_chunk_size < 1:
            rule = "be an integer >= 1 when a layer is chunked_attention"
            raise SpecError("attention_chunk_size", _OWNER, rule, self.attention_chunk_size)
        if "sliding_attention" in layer_types and self.sliding_window < 1:
            rule = "be an integer >= 1 when a layer is sliding_attention"
            raise SpecError("sliding_window", _OWNER, rule, self.sliding_window)
        if "mamba" in layer_types:
            for field_name in MAMBA_FIELDS:
                if getattr(self, field_name) < 1:
                    rule = "be an integer >= 1 when a layer is a mamba block"
                    raise SpecError(field_name, _OWNER, rule, getattr(self, field_name))
            if self.mamba_num_heads % self.mamba_n_groups != 0:
                rule = f"divide mamba_num_heads ({self.mamba_num_heads})"
                raise SpecError("mamba_n_groups", _OWNER, rule, self.mamba_n_groups)
        if "mamba1" in layer_types:
            for field_name in MAMBA1_FIELDS + ("mamba_state_size", "mamba_conv_kernel"):
                if getattr(self, field_name) < 1:
                    rule = "be an integer >= 1 when a layer is mamba1"
                    raise SpecError(field_name, _OWNER, rule, getattr(self, field_name))
        if "moe" in layer_types and self.num_experts == 0:
            raise SpecError("num_experts", _OWNER, "be >= 1 when a layer is a moe block", 0)
        if "linear_attention" in layer_types:
            for field_name in _LINEAR_FIELDS:
                if getattr(self, field_name) < 1:
                    rule = "be an integer >= 1 when a layer is linear_attention"
                    raise SpecError(field_name, _OWNER, rule, getattr(self, field_name))
            # Qwen3-Next repeats each key head over num_v_heads // num_k_heads value heads.
            if self.linear_num_value_heads % self.linear_num_key_heads != 0:
                raise SpecError(
                    "linear_num_value_heads",
                    _OWNER,
                    f"be a multiple of linear_num_key_heads ({self.linear_num_key_heads})",
                    self.linear_num_value_heads,
                )

    def _check_ffn(self) -> None:
        if self.num_experts > 0:
            k = self.num_experts_per_tok
            if not 1 <= k <= self.num_experts:
                raise SpecError(
                    "num_experts_per_tok",
                    _OWNER,
                    f"be in [1, num_experts ({self.num_experts})] for a MoE model",
                    k,
                )
            if self.moe_intermediate_size is None:
                raise SpecError(
                    "moe_intermediate_size",
                    _OWNER,
                    "be set (the routed expert width) when num_experts > 0",
                    None,
                )
            if self.moe_layer_step < 1:
                raise SpecError("moe_layer_step", _OWNER, "be an integer >= 1", self.moe_layer_step)
        else:
            if self.moe_layer_step != 1:
                raise SpecError("moe_layer_step", _OWNER, "be 1 when num_experts is 0 (a dense model)",
                                self.moe_layer_step)
            for field_name in ("num_experts_per_tok", "shared_expert_intermediate_size", "first_k_dense_replace"):
                if getattr(self, field_name) != 0:
                    rule = "be 0 when num_experts is 0 (a dense model)"
                    raise SpecError(field_name, _OWNER, rule, getattr(self, field_name))
        if self.shared_expert_gate and self.shared_expert_intermediate_size == 0:
            raise SpecError(
                "shared_expert_gate",
                _OWNER,
                "be False when there is no shared expert (shared_expert_intermediate_size = 0)",
                True,
            )
        if self.first_k_dense_replace > self.num_hidden_layers:
            raise SpecError(
                "first_k_dense_replace",
                _OWNER,
                f"be <= num_hidden_layers ({self.num_hidden_layers})",
                self.first_k_dense_replace,
            )
        has_dense_layer = self.num_experts == 0 or self.first_k_dense_replace > 0 or self.moe_layer_step > 1
        if has_dense_layer and self.intermediate_size is None:
            raise SpecError(
                "intermediate_size",
                _OWNER,
                "be set (the dense FFN width) when a layer has a dense FFN",
                None,
            )
