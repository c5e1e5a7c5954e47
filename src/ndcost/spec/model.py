"""The model spec: dimensions, the stack of layer kinds, their op counts and parameters.

A :class:`Model` is a frozen, validated description of a decoder-only LLM in
Transformers' field names (the public API: README.md, "Python"). Everything else
in ndcost reads a model through it:

* ``kinds`` -- the distinct layer kinds that occur (:class:`LayerKind`: attention
  flavour, FFN flavour and ND's op-count profile), in order of first
  appearance in the body;
* ``layer_kinds_in_order`` -- one kind index per body layer, then one per MTP
  layer (an MTP layer repeats the last body layer's kind, docs/ND_MODEL.md §1.5
  "Layer stack");
* parameter counts of the real architecture (weights, biases and norms as the
  reference Transformers modelling code instantiates them), per kind and in
  total (:class:`~ndcost.spec.model_parameters.ParamCount`).

Here: the fields, the constructors, the layer stack and the description. The kinds and
their op counts are :mod:`ndcost.spec.layer_kinds`', the parameter counts
:mod:`ndcost.spec.model_parameters`' and the field rules :mod:`ndcost.spec.model_validation`'s
(both bases of :class:`Model`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property
from os import PathLike
from typing import Any, Callable, Mapping

from ..errors import SpecError
from .census import KindCensus, read_census
from ..suggest import did_you_mean
from .mamba import BLOCK_TYPES, block_flavour
from .vision import VisionTower
from .layer_kinds import LayerKind, OpCounts
from .model_parameters import _FOUR_NORM_FAMILIES, ModelParameters
from .model_validation import _REQUIRED_POSITIVE, ModelValidation

__all__ = ["Model", "register_catalog_loader"]

_OWNER = "Model"

# The catalog builds its Models from data files, so it imports this module, not the other way round:
# ndcost.spec.model_catalog (imported by ndcost/__init__, hence before any caller reaches Model) registers
# its cached loader here, and Model.from_catalog calls it.
_catalog_loader: Callable[[str], "Model"] | None = None


def register_catalog_loader(loader: Callable[[str], "Model"]) -> None:
    """Make *loader* (name -> Model) what :meth:`Model.from_catalog` calls; ndcost.spec.model_catalog's ``load_model``."""
    global _catalog_loader
    _catalog_loader = loader


@dataclass(frozen=True)
class Model(ModelValidation, ModelParameters):
    """A decoder-only LLM, in Transformers' config field names.

    ``num_key_value_heads`` defaults to ``num_attention_heads``; ``head_dim``
    to ``hidden_size // num_attention_heads``, except for an MLA model
    (``kv_lora_rank > 0``) where it defaults to ``v_head_dim`` -- ND's
    deepseek profile uses the value head width as the attention head width
    (docs/ND_MODEL.md §1.4 ``derive`` step 10, "dh = v_head_dim for an MLA family").
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
    with one pre-norm (:mod:`ndcost.spec.mamba`). A ``"mamba1"`` layer (Jamba) is a
    Mamba-1 mixer (``mamba_d_inner`` channels, state ``mamba_state_size``, dt rank
    ``mamba_dt_rank``, conv ``mamba_conv_kernel``) followed by the layer's FFN.
    ``sliding_window`` is the keys a sliding-attention layer's query attends to:
    the layers ``layer_types`` names ``"sliding_attention"``, or every layer when
    ``layer_types`` is not given (Mistral's and Phi-3's convention); 0: none.
    ``rope_attention_factor`` is the factor RoPE's cos and sin are multiplied by (YaRN's attention factor,
    read from ``rope_scaling``: gpt-oss 0.1 ln 32 + 1; 1.0 for plain RoPE): it costs no FLOP, but a stack whose
    fused RoPE takes no factor runs an unfused one (:mod:`ndcost.spec.rope_scaling`).
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
    glu_clamp: bool = False
    rope_attention_factor: float = 1.0
    logit_softcapping: bool = False
    learned_position_embeddings: int = 0
    family: str = "llama"
    vision: VisionTower | None = None
    census: tuple[KindCensus, ...] = ()

    def __post_init__(self) -> None:
        self._validate()   # the field bounds, then the rules between fields (ndcost.spec.model_validation)

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_hf_config(cls, path_or_dict: str | PathLike | Mapping[str, Any], *, name: str | None = None) -> Model:
        """Read a Transformers ``config.json`` (a path to it, to its directory, or
        the parsed dict), offline. See :mod:`ndcost.spec.hf_config` for the mapping."""
        from .hf_config import model_kwargs_from_hf_config, read_hf_config

        config, owner, default_name = read_hf_config(path_or_dict)
        kwargs = model_kwargs_from_hf_config(config, owner=owner)
        return cls(name=name if name is not None else default_name, **kwargs)

    @classmethod
    def from_catalog(cls, name: str) -> Model:
        """A model of the built-in catalog (``ndcost.models()`` lists the names)."""
        if _catalog_loader is None:
            raise RuntimeError("ndcost.spec.model_catalog is not imported (ndcost/__init__ imports it)")
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
        """The same model with a HyperParallel census of its kinds (:mod:`ndcost.spec.census`): a
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
        """A hybrid stack with Mamba-2 mixer blocks (:mod:`ndcost.spec.mamba`)."""
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
        (docs/ND_MODEL.md §1.4, HyperV2 parser). 0 for a model without them."""
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
        # MTP layers repeat the last body layer's kind (docs/ND_MODEL.md §1.5, "Layer stack").
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
