"""The model spec: dimensions, the stack of layer kinds, their op counts and parameters.

A :class:`Model` is a frozen, validated description of a decoder-only LLM in
Transformers' field names (DESIGN.md, "Public API contract"). Everything else
in ndcost reads a model through it:

* ``kinds`` -- the distinct layer kinds that occur (:class:`LayerKind`: attention
  flavour, FFN flavour and ND's op-count profile), in order of first
  appearance in the body;
* ``layer_kinds_in_order`` -- one kind index per body layer, then one per MTP
  layer (an MTP layer repeats the last body layer's kind, ND_REFERENCE §1.5
  "Layer stack");
* parameter counts of the real architecture (weights, biases and norms as the
  reference Transformers modelling code instantiates them), per kind and in
  total (:class:`ParamCount`).

Op counts are ND's per-layer op profile (ND_REFERENCE §1.5 "Op profiles");
the per-layer parameter split (non-expert, routed, shared) is the one ND's
memory model shards differently (ND_REFERENCE §3.3).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property
from os import PathLike
from typing import Any, Callable, Mapping

from .errors import SpecError, check_bool, check_choice, check_positive_int, is_finite_number
from .census import KindCensus, read_census
from .suggest import did_you_mean
from .limits import MAX_EXPERTS, MAX_HEADS, MAX_LAYERS, MAX_SEQ_LENGTH, MAX_VOCAB, MAX_WIDTH
from .mamba import (
    BLOCK_TYPES, MAMBA1_FIELDS, MAMBA_FIELDS, block_flavour, mamba1_mixer_parameters, mamba_mixer_parameters,
)
from .vision import VisionTower

__all__ = ["OpCounts", "LayerKind", "ParamCount", "Model"]

_OWNER = "Model"

# The catalog builds its Models from data files, so it imports this module, not the other way round:
# ndcost.model_catalog (imported by ndcost/__init__, hence before any caller reaches Model) registers
# its cached loader here, and Model.from_catalog calls it.
_catalog_loader: Callable[[str], "Model"] | None = None


def register_catalog_loader(loader: Callable[[str], "Model"]) -> None:
    """Make *loader* (name -> Model) what :meth:`Model.from_catalog` calls; ndcost.model_catalog's ``load_model``."""
    global _catalog_loader
    _catalog_loader = loader

#: Values of ``layer_types`` ndcost can price (Transformers' names).
LAYER_TYPES = ("full_attention", "linear_attention", "sliding_attention", "chunked_attention", "mamba1") + BLOCK_TYPES
#: Attention flavours of a :class:`LayerKind` ("mamba": a Mamba-2 mixer; "none": an MLP-only block).
ATTENTION_KINDS = ("full", "mla", "linear", "mamba", "none", "mamba1")
#: FFN flavours of a :class:`LayerKind` ("none": a mixer-only block of a hybrid stack).
FFN_KINDS = ("dense", "moe", "none")
#: The submodules a layer kind can belong to: the language model, or a VLM's vision tower.
MODULES = ("text", "vision")
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
#: Gemma3DecoderLayer), not two.
_FOUR_NORM_FAMILIES = ("gemma2", "gemma3")
#: Families that put biases on q/k/v but not on o_proj (modeling_qwen2, modeling_qwen2_moe).
_QKV_BIAS_ONLY_FAMILIES = ("qwen2", "qwen2_moe", "glm4_moe")   # and Glm4MoeAttention's o_proj: bias=False


# --------------------------------------------------------------------------- OpCounts


@dataclass(frozen=True)
class OpCounts:
    """How many times each ND op class occurs in one layer (ND_REFERENCE §1.5).

    The order of the fields is ND's profile order
    (attMM/attBMM/ffMM/softmax/dropout/normOp/gather/headCast/ffAct/linrec);
    :meth:`as_tuple` returns them in that order. Every count is a finite
    float >= 0 (ints are accepted and stored as floats).
    """

    attMM: float
    attBMM: float
    ffMM: float
    softmax: float
    dropout: float
    normOp: float
    gather: float
    headCast: float
    ffAct: float
    linrec: float

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not is_finite_number(value) or value < 0:
                raise SpecError(f.name, "OpCounts", "be a finite number >= 0", value)
            object.__setattr__(self, f.name, float(value))

    @classmethod
    def full_attention(cls, *, gated_ffn: bool = True) -> OpCounts:
        """ND's default decoder profile 4/2/3/1/0/2/4/1/1/0 (ND_REFERENCE §1.5,
        "default (kind decoder)"); used for full and MLA attention alike (the
        deepseek profile keeps the default counts). A 2-matmul GELU MLP
        (GPT-2/GPT-3/NeoX) has ffMM = 2 instead of SwiGLU's 3 (gate, up, down)."""
        return cls(4, 2, 3 if gated_ffn else 2, 1, 0, 2, 4, 1, 1, 0)

    @classmethod
    def linear_attention(cls, *, gated_ffn: bool = True) -> OpCounts:
        """ND's gated-DeltaNet profile 4/0/3/0/0/2/4/0/1/1 (ND_REFERENCE §1.5,
        qwen3_5 ``linear_attention``): no score matrix (attBMM, softmax,
        headCast 0) and one chunked linear recurrence (linrec 1)."""
        return cls(4, 0, 3 if gated_ffn else 2, 0, 0, 2, 4, 0, 1, 1)

    @classmethod
    def vision_encoder(cls, *, gated_ffn: bool = False) -> OpCounts:
        """ND's vision-encoder profile 4/2/2/1/0/2/4/1/1/0 (ND_REFERENCE §1.5, ``vision``), written
        for a 2-matmul GELU MLP (Qwen2-VL); a SwiGLU tower (Qwen2.5-VL) runs 3 FFN matmuls, as the
        decoder profiles count them."""
        return cls(4, 2, 3 if gated_ffn else 2, 1, 0, 2, 4, 1, 1, 0)

    @classmethod
    def hybrid_block(cls, attention: str, ffn: str, *, gated_ffn: bool = True) -> OpCounts:
        """A one-part block of a hybrid stack (:mod:`ndcost.mamba`), counted as ND's profiles count
        the parts it has, with one norm: a Mamba-2 mixer's in/out projections and its scan (as
        linrec); attention's four matmuls and score matrix; an MLP's matmuls and activation. ND's
        tables have no such profile: ND units refuse these kinds, only seconds mode reads them."""
        mixer = {"mamba": (2, 0, 0, 0, 2, 0, 1), "mamba1": (4, 0, 0, 0, 2, 0, 1), "full": (4, 2, 1, 1, 2, 0, 0),
                 "mla": (4, 2, 1, 1, 2, 0, 0), "none": (0, 0, 0, 0, 0, 0, 0)}[attention]
        att_mm, att_bmm, softmax, head_cast, gather, _, linrec = mixer
        ff_mm = 0 if ffn == "none" else (3 if gated_ffn else 2)
        gather += 0 if ffn == "none" else 2
        norms = 1 if attention == "none" or ffn == "none" else 2
        return cls(att_mm, att_bmm, ff_mm, softmax, 0, norms, gather, head_cast, 0 if ffn == "none" else 1, linrec)

    def as_tuple(self) -> tuple[float, ...]:
        """The counts in ND's profile order."""
        return tuple(getattr(self, f.name) for f in fields(self))

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# --------------------------------------------------------------------------- LayerKind


@dataclass(frozen=True)
class LayerKind:
    """One distinct kind of layer in a model's stack.

    ``name`` is unique within a model: ``"dense"``/``"moe"`` for a stack of
    full (or MLA) attention layers, ``"<attention>_<ffn>"`` (``"linear_moe"``,
    ``"full_moe"``, ``"sliding_dense"``, ...) when the model mixes attention flavours
    or windows; a vision tower's blocks are ``"vision"`` (and ``"vision_window"`` for
    its windowed blocks), with ``module = "vision"``. ``window`` is the keys a
    sliding-window text layer's query attends to (0: the whole causal prefix);
    ``chunked``: the window is a fixed chunk (Llama 4's chunked attention, causal
    inside blocks of ``window`` tokens) rather than sliding.
    """

    name: str
    attention: str
    ffn: str
    ops: OpCounts
    module: str = "text"
    window: int = 0
    chunked: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SpecError("name", "LayerKind", "be a non-empty string", self.name)
        check_choice(self.attention, "attention", "LayerKind", ATTENTION_KINDS)
        check_choice(self.ffn, "ffn", "LayerKind", FFN_KINDS)
        if not isinstance(self.ops, OpCounts):
            raise SpecError("ops", "LayerKind", "be an OpCounts", self.ops)
        check_choice(self.module, "module", "LayerKind", MODULES)
        check_positive_int(self.window, "window", "LayerKind", minimum=0, maximum=MAX_SEQ_LENGTH)
        check_bool(self.chunked, "chunked", "LayerKind")


# --------------------------------------------------------------------------- ParamCount


@dataclass(frozen=True)
class ParamCount:
    """Parameters of a model: ``total``, and ``active`` per token (the routed
    experts a token visits -- top-k of them -- plus the shared experts and
    every non-expert parameter, embeddings and output head included)."""

    total: int
    active: int


# --------------------------------------------------------------------------- Model

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


@dataclass(frozen=True)
class Model:
    """A decoder-only LLM, in Transformers' config field names.

    ``num_key_value_heads`` defaults to ``num_attention_heads``; ``head_dim``
    to ``hidden_size // num_attention_heads``, except for an MLA model
    (``kv_lora_rank > 0``) where it defaults to ``v_head_dim`` -- ND's
    deepseek profile uses the value head width as the attention head width
    (ND_REFERENCE §1.4 ``derive`` step 10, "dh = v_head_dim for an MLA family").
    Both are normalised to ints after construction.

    A MoE model (``num_experts > 0``) has ``first_k_dense_replace`` dense layers
    first, then MoE layers -- every ``moe_layer_step``-th one (layer i is MoE when
    ``(i + 1) % moe_layer_step == 0``: Llama 4's interleave_moe_layer_step, Qwen's
    decoder_sparse_step), the others dense; a hybrid model lists ``layer_types``
    per body layer. ``chunked_attention`` layers attend causally inside fixed
    chunks of ``attention_chunk_size`` tokens (Llama 4). A hybrid state-space stack
    (Nemotron-H) lists one block a layer -- ``"mamba"`` (a Mamba-2 mixer of
    ``mamba_num_heads`` heads of ``mamba_head_dim``, ``mamba_n_groups`` groups of
    B/C of ``mamba_state_size``), ``"attention"``, ``"mlp"`` or ``"moe"`` -- each
    with one pre-norm (:mod:`ndcost.mamba`). A ``"mamba1"`` layer (Jamba) is a
    Mamba-1 mixer (``mamba_d_inner`` channels, state ``mamba_state_size``, dt rank
    ``mamba_dt_rank``, conv ``mamba_conv_kernel``) followed by the layer's FFN.
    ``sliding_window`` is the keys a sliding-attention layer's query attends to:
    the layers ``layer_types`` names ``"sliding_attention"``, or every layer when
    ``layer_types`` is not given (Mistral's and Phi-3's convention); 0: none.
    """

    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    vocab_size: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int | None = None
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int | None = None
    shared_expert_intermediate_size: int = 0
    first_k_dense_replace: int = 0
    moe_layer_step: int = 1
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    linear_num_key_heads: int = 0
    linear_key_head_dim: int = 0
    linear_num_value_heads: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    layer_types: tuple[str, ...] | None = None
    sliding_window: int = 0
    attention_chunk_size: int = 0
    mamba_num_heads: int = 0
    mamba_head_dim: int = 0
    mamba_state_size: int = 0
    mamba_n_groups: int = 0
    mamba_conv_kernel: int = 0
    mamba_chunk_size: int = 0
    mamba_d_inner: int = 0
    mamba_dt_rank: int = 0
    tie_word_embeddings: bool = False
    qk_norm: bool = False
    attn_output_gate: bool = False
    shared_expert_gate: bool = False
    num_nextn_predict_layers: int = 0
    gated_ffn: bool = True
    norm: str = "rmsnorm"
    attention_bias: bool = False
    mlp_bias: bool = False
    logit_softcapping: bool = False
    learned_position_embeddings: int = 0
    family: str = "llama"
    vision: VisionTower | None = None
    census: tuple[KindCensus, ...] = ()

    # ------------------------------------------------------------------ validation

    def __post_init__(self) -> None:
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

        self._check_attention()
        self._check_layer_types()
        self._check_ffn()
        self._check_vision()
        self._check_census()

    def _check_census(self) -> None:
        census = self.census
        if isinstance(census, (str, bytes)) or not isinstance(census, (list, tuple)):
            raise SpecError("census", _OWNER, "be a sequence of KindCensus (see Model.with_census)", census)
        entries = tuple(entry if isinstance(entry, KindCensus) else KindCensus(**entry) for entry in census)
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

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_hf_config(cls, path_or_dict: str | PathLike | Mapping[str, Any], *, name: str | None = None) -> Model:
        """Read a Transformers ``config.json`` (a path to it, to its directory, or
        the parsed dict), offline. See :mod:`ndcost.hf_config` for the mapping."""
        from .hf_config import model_kwargs_from_hf_config, read_hf_config

        config, owner, default_name = read_hf_config(path_or_dict)
        kwargs = model_kwargs_from_hf_config(config, owner=owner)
        return cls(name=name if name is not None else default_name, **kwargs)

    @classmethod
    def from_catalog(cls, name: str) -> Model:
        """A model of the built-in catalog (``ndcost.models()`` lists the names)."""
        if _catalog_loader is None:
            raise RuntimeError("ndcost.model_catalog is not imported (ndcost/__init__ imports it)")
        return _catalog_loader(name)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, name: str | None = None) -> Model:
        """Build from ndcost's own field names (a YAML/JSON model file).

        Unlike :meth:`from_hf_config`, which ignores keys it does not use, an
        unknown key here is an error: it is most likely a typo.
        """
        if not isinstance(data, Mapping):
            raise SpecError("data", "Model.from_dict", "be a mapping of Model fields", data)
        known = [f.name for f in fields(cls)]
        for key in data:
            if key not in known:
                raise SpecError(str(key), _OWNER, f"be a known Model field{did_you_mean(str(key), known)}",
                                data[key])
        kwargs = dict(data)
        if name is not None:
            kwargs["name"] = name
        for required in ("name",) + _REQUIRED_POSITIVE:
            if required not in kwargs:
                raise SpecError(required, _OWNER, "be present", None)
        if isinstance(kwargs.get("layer_types"), list):
            kwargs["layer_types"] = tuple(kwargs["layer_types"])
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (``Model.from_dict(m.to_dict()) == m``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if out["layer_types"] is not None:
            out["layer_types"] = list(out["layer_types"])
        if out["vision"] is not None:
            out["vision"] = out["vision"].to_dict()
        out["census"] = [entry.to_dict() for entry in out["census"]]
        return out

    def with_census(self, census: Any) -> Model:
        """The same model with a HyperParallel census of its kinds (:mod:`ndcost.census`): a
        path to a census JSON, its mapping, or a sequence of :class:`KindCensus`."""
        if not isinstance(census, (list, tuple)):
            census = read_census(census)
        return replace(self, census=tuple(census))

    def kind_census(self, kind_name: str) -> KindCensus | None:
        """The census of the kind named *kind_name*, or None."""
        for entry in self.census:
            if entry.kind == kind_name:
                return entry
        return None

    def with_vision_tokens(self, tokens: int) -> Model:
        """The same VLM with its vision tower run on *tokens* patches per sample."""
        if self.vision is None:
            raise SpecError("vision", _OWNER, "be set (a vision tower) to take vision tokens", None)
        return replace(self, vision=self.vision.with_tokens(tokens))

    # ------------------------------------------------------------------ derived structure

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def has_mamba(self) -> bool:
        """A hybrid stack with Mamba-2 mixer blocks (:mod:`ndcost.mamba`)."""
        return self.layer_types is not None and ("mamba" in self.layer_types or "mamba1" in self.layer_types)

    @property
    def mamba_tp_splits(self) -> tuple[tuple[str, int], ...]:
        """(field, value) of each Mamba width TP splits: Megatron's Mamba-2 mixer its heads and B/C groups
        (mamba_mixer.py), a Mamba-1 mixer its d_inner channels."""
        splits: tuple[tuple[str, int], ...] = ()
        if self.layer_types is not None and "mamba" in self.layer_types:
            splits += (("mamba_num_heads", self.mamba_num_heads), ("mamba_n_groups", self.mamba_n_groups))
        if self.layer_types is not None and "mamba1" in self.layer_types:
            splits += (("mamba_d_inner", self.mamba_d_inner),)
        return splits

    @property
    def has_linear_attention(self) -> bool:
        return self.layer_types is not None and "linear_attention" in self.layer_types

    @property
    def num_shared_experts(self) -> int:
        """Shared experts, as ND derives them: shared width // routed width
        (ND_REFERENCE §1.4, HyperV2 parser). 0 for a model without them."""
        if not self.is_moe or self.shared_expert_intermediate_size == 0:
            return 0
        return self.shared_expert_intermediate_size // self.moe_intermediate_size

    @property
    def num_layers_with_mtp(self) -> int:
        return self.num_hidden_layers + self.num_nextn_predict_layers

    def _layer_window(self, index: int) -> tuple[int, bool]:
        """(keys body layer *index*'s query attends to -- the sliding window or chunk, 0: all --,
        whether it is a chunk)."""
        if self.layer_types is None:
            return self.sliding_window, False   # Mistral / Phi-3: one window for every layer, or none
        layer_type = self.layer_types[index]
        if layer_type == "chunked_attention":
            return self.attention_chunk_size, True
        return (self.sliding_window if layer_type == "sliding_attention" else 0), False

    def _is_moe_layer(self, index: int) -> bool:
        return (self.is_moe and index >= self.first_k_dense_replace
                and (index + 1) % self.moe_layer_step == 0)

    def _body_layer_flavours(self) -> list[tuple[str, str, tuple[int, bool]]]:
        """(attention, ffn, (window, chunked)) of each body layer, in model order."""
        flavours = []
        for index in range(self.num_hidden_layers):
            if self.layer_types is not None and self.layer_types[index] in BLOCK_TYPES:
                attention, ffn = block_flavour(self.layer_types[index])
                if attention == "full" and self.is_mla:
                    attention = "mla"
                flavours.append((attention, ffn, (0, False)))
                continue
            if self.layer_types is not None and self.layer_types[index] == "linear_attention":
                attention = "linear"
            elif self.layer_types is not None and self.layer_types[index] == "mamba1":
                attention = "mamba1"
            elif self.is_mla:
                attention = "mla"
            else:
                attention = "full"
            ffn = "moe" if self._is_moe_layer(index) else "dense"
            window = self._layer_window(index) if attention == "full" else (0, False)
            flavours.append((attention, ffn, window))
        return flavours

    @cached_property
    def _stack(self) -> tuple[tuple[LayerKind, ...], tuple[int, ...]]:
        flavours = self._body_layer_flavours()
        # A model that mixes attention flavours or windows names kinds "<attention>_<ffn>"
        # ("sliding" for a windowed layer); otherwise the FFN flavour alone is the name (ND's "dense"/"moe").
        mixed_attention = (len({(attention, window) for attention, _, window in flavours}) > 1
                           or self.has_linear_attention)
        kinds: list[LayerKind] = []
        index_of: dict[tuple[str, str, tuple[int, bool]], int] = {}
        order: list[int] = []
        for attention, ffn, window in flavours:
            key = (attention, ffn, window)
            if key not in index_of:
                if attention in ("mamba", "none", "mamba1") or ffn == "none":
                    ops = OpCounts.hybrid_block(attention, ffn, gated_ffn=self.gated_ffn)
                elif attention == "linear":
                    ops = OpCounts.linear_attention(gated_ffn=self.gated_ffn)
                else:
                    ops = OpCounts.full_attention(gated_ffn=self.gated_ffn)
                if self.family in _FOUR_NORM_FAMILIES:
                    ops = replace(ops, normOp=4)    # Gemma 2/3: pre- and post-norms around both sub-blocks
                span, chunked = window
                label = ("chunked" if chunked else "sliding") if span else attention
                kind_name = f"{label}_{ffn}" if mixed_attention else ffn
                index_of[key] = len(kinds)
                kinds.append(LayerKind(kind_name, attention, ffn, ops, window=span, chunked=chunked))
            order.append(index_of[key])
        # MTP layers repeat the last body layer's kind (ND_REFERENCE §1.5, "Layer stack").
        order.extend([order[-1]] * self.num_nextn_predict_layers)
        vision_order: list[int] = []
        if self.vision is not None:
            ops = OpCounts.vision_encoder(gated_ffn=self.vision.gated_ffn)
            vision_index: dict[bool, int] = {}
            for block in range(self.vision.depth):
                windowed = self.vision.block_is_windowed(block)
                if windowed not in vision_index:
                    vision_index[windowed] = len(kinds)
                    name = "vision_window" if windowed else "vision"
                    kinds.append(LayerKind(name, "full", "dense", ops, module="vision"))
                vision_order.append(vision_index[windowed])
        return tuple(kinds), tuple(order), tuple(vision_order)

    @property
    def kinds(self) -> tuple[LayerKind, ...]:
        """The layer kinds that occur, in order of first appearance in the body."""
        return self._stack[0]

    @property
    def layer_kinds_in_order(self) -> tuple[int, ...]:
        """Index into :attr:`kinds` of each body layer, then of each MTP layer (the text model's)."""
        return self._stack[1]

    @property
    def vision_kinds_in_order(self) -> tuple[int, ...]:
        """Index into :attr:`kinds` of each vision-tower block, in the tower's order (empty without one)."""
        return self._stack[2]

    def kind_counts(self) -> tuple[tuple[int, int], ...]:
        """(body layers, MTP layers) of each kind, in :attr:`kinds` order."""
        order = self.layer_kinds_in_order
        body, mtp = order[: self.num_hidden_layers], order[self.num_hidden_layers:]
        return tuple((body.count(i), mtp.count(i)) for i in range(len(self.kinds)))

    # ------------------------------------------------------------------ parameter counts
    # Every count below follows the Transformers modelling code of the family
    # (llama, qwen2, qwen3, qwen3_moe, qwen3_next, mixtral, deepseek_v3, gpt2,
    # gpt_neox): each nn.Linear is in*out weights (+out bias where that code
    # passes bias=True), each norm is one weight vector (RMSNorm) or a weight
    # and a bias (LayerNorm).

    def _norm_parameters(self, width: int) -> int:
        return width if self.norm == "rmsnorm" else 2 * width

    def _ffn_parameters(self, width: int) -> int:
        """One MLP of the given intermediate width."""
        h = self.hidden_size
        if self.gated_ffn:  # SwiGLU: gate_proj, up_proj (h -> w), down_proj (w -> h)
            weights = 3 * h * width
            biases = (2 * width + h) if self.mlp_bias else 0
        else:  # GELU MLP: fc (h -> w), proj (w -> h)
            weights = 2 * h * width
            biases = (width + h) if self.mlp_bias else 0
        return weights + biases

    def _full_attention_parameters(self) -> int:
        h, heads, kv_heads, d = self.hidden_size, self.num_attention_heads, self.num_key_value_heads, self.head_dim
        bias = self.attention_bias
        # Qwen3-Next's gated attention projects a sigmoid output gate together
        # with the query: q_proj has 2 * heads * head_dim outputs.
        q_out = heads * d * (2 if self.attn_output_gate else 1)
        params = h * q_out + (q_out if bias else 0)  # q_proj
        params += 2 * (h * kv_heads * d + (kv_heads * d if bias else 0))  # k_proj, v_proj
        # Qwen2 puts biases on q/k/v only (bias=True fixed in its code); the
        # other families use attention_bias for o_proj too.
        output_bias = bias and self.family not in _QKV_BIAS_ONLY_FAMILIES
        params += heads * d * h + (h if output_bias else 0)  # o_proj
        if self.qk_norm and self.family == "olmo2":
            # modeling_olmo2: q_norm over the whole query projection, k_norm over the key projection
            params += self._norm_parameters(heads * d) + self._norm_parameters(kv_heads * d)
        elif self.qk_norm:  # q_norm, k_norm: one norm over head_dim each, shared by all heads
            params += 2 * self._norm_parameters(d)
        if self.family == "gpt_oss":
            params += heads  # modeling_gpt_oss: self.sinks, one learned sink logit per head
        return params

    def _mla_parameters(self) -> int:
        """DeepSeek-V3 multi-head latent attention (modeling_deepseek_v3)."""
        h, heads = self.hidden_size, self.num_attention_heads
        bias = self.attention_bias
        qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank > 0:
            params = h * self.q_lora_rank + (self.q_lora_rank if bias else 0)  # q_a_proj
            params += self._norm_parameters(self.q_lora_rank)  # q_a_layernorm
            params += self.q_lora_rank * heads * qk_head_dim  # q_b_proj (no bias)
        else:
            params = h * heads * qk_head_dim  # q_proj (no bias)
        kv_a_out = self.kv_lora_rank + self.qk_rope_head_dim
        params += h * kv_a_out + (kv_a_out if bias else 0)  # kv_a_proj_with_mqa
        params += self._norm_parameters(self.kv_lora_rank)  # kv_a_layernorm
        params += self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)  # kv_b_proj (no bias)
        params += heads * self.v_head_dim * h + (h if bias else 0)  # o_proj
        return params

    def _linear_attention_parameters(self) -> int:
        """Qwen3-Next gated DeltaNet (Qwen3NextGatedDeltaNet), no biases."""
        h = self.hidden_size
        key_dim = self.linear_num_key_heads * self.linear_key_head_dim
        value_dim = self.linear_num_value_heads * self.linear_value_head_dim
        params = h * (2 * key_dim + 2 * value_dim)  # in_proj_qkvz
        params += h * 2 * self.linear_num_value_heads  # in_proj_ba
        params += (2 * key_dim + value_dim) * self.linear_conv_kernel_dim  # conv1d, depthwise, no bias
        params += 2 * self.linear_num_value_heads  # dt_bias, A_log
        params += self.linear_value_head_dim  # norm (gated RMSNorm over one head)
        params += value_dim * h  # out_proj
        return params

    def _router_parameters(self) -> int:
        params = self.num_experts * self.hidden_size  # gate: h -> num_experts
        if self.family == "gpt_oss":
            params += self.num_experts  # GptOssTopKRouter keeps a bias per expert
        if self.family in ("deepseek_v3", "glm4_moe"):
            # noaux_tc routing keeps a per-expert e_score_correction_bias in the
            # checkpoint (DeepSeek-V3 report §2.1.2, auxiliary-loss-free balancing).
            params += self.num_experts
        return params

    def kind_parameters(self, kind_index: int) -> tuple[int, int, int]:
        """Parameters of one layer of ``kinds[kind_index]``:
        (non_expert, routed experts -- all of them, shared experts).

        non_expert = attention + the layer's two norms + the dense FFN (dense
        kind) or the router and shared-expert gate (MoE kind) -- the split ND's
        memory model shards three ways (ND_REFERENCE §3.3, ``num_params_layer``).
        """
        kinds = self.kinds
        if isinstance(kind_index, bool) or not isinstance(kind_index, int) or not 0 <= kind_index < len(kinds):
            rule = f"be an integer in [0, {len(kinds) - 1}]"
            raise SpecError("kind_index", "Model.kind_parameters", rule, kind_index)
        kind = kinds[kind_index]
        if kind.module == "vision":
            return self.vision.block_parameters(), 0, 0
        if kind.attention == "linear":
            non_expert = self._linear_attention_parameters()
        elif kind.attention == "mla":
            non_expert = self._mla_parameters()
        elif kind.attention == "mamba":
            non_expert = mamba_mixer_parameters(self)
        elif kind.attention == "mamba1":
            non_expert = mamba1_mixer_parameters(self)
        elif kind.attention == "none":
            non_expert = 0
        else:
            non_expert = self._full_attention_parameters()
        non_expert += self.norms_per_layer(kind_index) * self._norm_parameters(self.hidden_size)
        if kind.ffn == "none":
            return non_expert, 0, 0
        if kind.ffn == "dense":
            return non_expert + self._ffn_parameters(self.intermediate_size), 0, 0
        non_expert += self._router_parameters()
        if self.shared_expert_gate:
            non_expert += self.hidden_size  # shared_expert_gate: h -> 1, no bias
        routed = self.num_experts * self._ffn_parameters(self.moe_intermediate_size)
        shared_width = self.shared_expert_intermediate_size
        shared = self._ffn_parameters(shared_width) if shared_width else 0
        return non_expert, routed, shared

    def norms_per_layer(self, kind_index: int) -> int:
        """Norms of one layer of ``kinds[kind_index]``: one per block of a hybrid stack (NemotronHBlock),
        four in Gemma 2/3 (before and after attention and FFN), else input_layernorm and
        post_attention_layernorm."""
        kind = self.kinds[kind_index]
        if kind.attention == "none" or kind.ffn == "none":
            return 1
        return 4 if self.family in _FOUR_NORM_FAMILIES else 2

    def _kind_active_parameters(self, kind_index: int) -> int:
        non_expert, routed, shared = self.kind_parameters(kind_index)
        if routed:
            routed = routed // self.num_experts * self.num_experts_per_tok  # top-k experts per token
        return non_expert + routed + shared

    def embedding_parameters(self) -> int:
        """Token embedding table, plus the learned position table (GPT-2/3)."""
        return (self.vocab_size + self.learned_position_embeddings) * self.hidden_size

    def output_parameters(self) -> int:
        """The LM head (vocab x hidden, no bias in any supported family); 0 when
        tied to the embedding."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def final_norm_parameters(self) -> int:
        """The norm after the last body layer (it sits with the output head)."""
        return self._norm_parameters(self.hidden_size)

    def mtp_extra_parameters(self, *, include_shared_copies: bool = False) -> int:
        """MTP parameters beyond the MTP transformer layers, over all MTP depths.

        Per MTP module (DeepSeek-V3 report §2.2; the checkpoint's layer 61):
        the norms of the hidden state and of the next token's embedding
        (hnorm, enorm), the projection of their concatenation eh_proj
        (2h -> h, no bias) and the norm before the output head
        (shared_head.norm). The embedding and the output head are *shared*
        with the main model, so they are not counted -- unless
        ``include_shared_copies``, which adds the copies the published
        checkpoint stores with each MTP module (that is how DeepSeek's "14B MTP
        module" is counted).
        """
        h = self.hidden_size
        per_module = 3 * self._norm_parameters(h) + 2 * h * h
        if include_shared_copies:
            per_module += 2 * self.vocab_size * h
        return self.num_nextn_predict_layers * per_module

    def mtp_layer_parameters(self) -> int:
        """The transformer layers of the MTP modules (all depths)."""
        order = self.layer_kinds_in_order[self.num_hidden_layers:]
        return sum(sum(self.kind_parameters(i)) for i in order)

    def parameter_count(self, *, include_mtp: bool = False) -> ParamCount:
        """Total and per-token active parameters.

        Excludes the MTP modules by default: published totals are of the main
        model (DeepSeek-V3: 671B without, 685B with the MTP module, per its
        README), and MTP is a training-time head. ``include_mtp=True`` adds the
        MTP layers (active: their top-k experts) and :meth:`mtp_extra_parameters`.
        """
        counts = self.kind_counts()
        total = active = 0
        for kind_index, (body, mtp) in enumerate(counts):
            layers = body + (mtp if include_mtp else 0)
            total += layers * sum(self.kind_parameters(kind_index))
            active += layers * self._kind_active_parameters(kind_index)
        outside_layers = self.embedding_parameters() + self.output_parameters() + self.final_norm_parameters()
        if include_mtp:
            outside_layers += self.mtp_extra_parameters()
        if self.vision is not None:   # every image token runs the whole tower
            outside_layers += self.vision.total_parameters()
        return ParamCount(total=total + outside_layers, active=active + outside_layers)

    # ------------------------------------------------------------------ description

    def describe(self) -> dict[str, Any]:
        """Dimensions, kinds with their layer counts, and parameter counts
        (``ndcost show MODEL``). Plain JSON-serialisable values."""
        kinds = []
        for kind_index, (kind, (body, mtp)) in enumerate(zip(self.kinds, self.kind_counts())):
            non_expert, routed, shared = self.kind_parameters(kind_index)
            kinds.append(
                {
                    "name": kind.name,
                    "attention": kind.attention,
                    "ffn": kind.ffn,
                    "module": kind.module,
                    "layers": body if kind.module == "text" else self.vision_kinds_in_order.count(kind_index),
                    "mtp_layers": mtp,
                    "ops": kind.ops.as_dict(),
                    "parameters_per_layer": {"non_expert": non_expert, "routed": routed, "shared": shared},
                }
            )
        count = self.parameter_count()
        return {
            "name": self.name,
            "family": self.family,
            "dims": {k: v for k, v in self.to_dict().items()
                     if k not in ("name", "family", "layer_types", "vision", "census")},
            "census": [entry.to_dict() for entry in self.census],
            "vision": None if self.vision is None else self.vision.to_dict(),
            "layer_order": [self.kinds[i].name for i in self.layer_kinds_in_order],
            "kinds": kinds,
            "parameters": {
                "total": count.total,
                "active": count.active,
                # Model cards count "active" two ways: Qwen with every embedding table, gpt-oss and (by
                # its rounding) DeepSeek/Kimi without the input embedding, a lookup that runs no FLOPs.
                "active_without_input_embedding": count.active - self.embedding_parameters(),
                "convention": ("total: every parameter but the MTP modules; active: the top-k routed "
                               "experts a token visits plus every other parameter, the input embedding "
                               "and the output head included (active_without_input_embedding drops the "
                               "input embedding, as the gpt-oss card counts)"),
                "embedding": self.embedding_parameters(),
                "output": self.output_parameters(),
                "final_norm": self.final_norm_parameters(),
                "mtp_layers": self.mtp_layer_parameters(),
                "mtp_extra": self.mtp_extra_parameters(),
                "vision": 0 if self.vision is None else self.vision.total_parameters(),
            },
        }
