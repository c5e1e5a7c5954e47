"""A vision-language model's vision tower: a ViT encoder that shares the text model's pipeline.

Qwen2-VL and Qwen2.5-VL (Transformers ``model_type`` ``qwen2_vl`` / ``qwen2_5_vl``) cut each
image into ``patch_size`` x ``patch_size`` patches (``temporal_patch_size`` frames deep), run
them through ``depth`` encoder blocks at ``hidden_size``, then merge each
``spatial_merge_size`` x ``spatial_merge_size`` group of patches into one token of the text
model (``out_hidden_size`` wide). Field names are the ``vision_config`` names of Transformers.

ND prices such a model as submodules on one pipeline (seed ``_submodule_parts``;
docs/ND_MODEL.md §1.4 "vision sub-spec", §1.6 ``combine_partition_multimodal``): the vision tower
is front-loaded, every layer of it on the first stage, and each submodule is priced on its
own config. ndcost does the same through per-kind columns: a vision block is a layer kind
with its own hidden size, heads, FFN width and tokens.

``tokens`` is the workload: patches per sample the encoder sees. Its default, 4096 patches,
merges into 1024 text tokens, ND's default visual sequence length (docs/ND_MODEL.md §1.4: "grid //
merge², 1024 by default"); :meth:`with_tokens` sets another.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from ..errors import SpecError, check_bool, check_choice, check_positive_int
from ..limits import MAX_HEADS, MAX_LAYERS, MAX_SEQ_LENGTH, MAX_WIDTH

__all__ = ["VisionTower", "DEFAULT_VISION_TOKENS"]

_OWNER = "VisionTower"
#: Patches per sample the encoder sees by default: 1024 merged tokens x a 2x2 merge (ND's default).
DEFAULT_VISION_TOKENS = 4096
#: Each int field's upper bound (ndcost.limits; docs/LIMITS.md): patching sizes (pixels, frames,
#: channels) are bounded as widths, tokens as a sequence.
_SIZE_LIMITS = {"depth": MAX_LAYERS, "hidden_size": MAX_WIDTH, "num_heads": MAX_HEADS,
                "intermediate_size": MAX_WIDTH, "out_hidden_size": MAX_WIDTH, "patch_size": MAX_WIDTH,
                "temporal_patch_size": MAX_WIDTH, "spatial_merge_size": MAX_WIDTH, "in_channels": MAX_WIDTH,
                "tokens": MAX_SEQ_LENGTH}


@dataclass(frozen=True)
class VisionTower:
    """The vision encoder of a VLM (Transformers ``vision_config`` names).

    Attributes:
        depth: Encoder blocks.
        hidden_size: Width of a block (Qwen2-VL's ``embed_dim``).
        num_heads: Attention heads of a block.
        intermediate_size: MLP width (Qwen2-VL: ``mlp_ratio`` x ``embed_dim``).
        out_hidden_size: The text model's hidden size the merger projects to.
        patch_size, temporal_patch_size, spatial_merge_size, in_channels: The patching.
        gated_ffn: SwiGLU MLP (Qwen2.5-VL, ``hidden_act`` silu) or a 2-matmul GELU MLP (Qwen2-VL).
        norm: ``"rmsnorm"`` (Qwen2.5-VL) or ``"layernorm"`` (Qwen2-VL).
        window_size: Pixels per side of an attention window (Qwen2.5-VL: 112); 0 = every
            block attends to the whole image.
        fullatt_block_indexes: The blocks that attend to the whole image when windows are on.
        tokens: Patches per sample the encoder runs on (the workload; a multiple of
            ``spatial_merge_size`` squared).
    """

    depth: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    out_hidden_size: int
    patch_size: int = 14
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    in_channels: int = 3
    gated_ffn: bool = True
    norm: str = "rmsnorm"
    window_size: int = 0
    fullatt_block_indexes: tuple[int, ...] = ()
    tokens: int = DEFAULT_VISION_TOKENS

    def __post_init__(self) -> None:
        for name, limit in _SIZE_LIMITS.items():
            check_positive_int(getattr(self, name), name, _OWNER, maximum=limit)
        check_positive_int(self.window_size, "window_size", _OWNER, minimum=0, maximum=MAX_WIDTH)
        check_bool(self.gated_ffn, "gated_ffn", _OWNER)
        check_choice(self.norm, "norm", _OWNER, ("rmsnorm", "layernorm"))
        if self.hidden_size % self.num_heads:
            raise SpecError("num_heads", _OWNER, f"divide hidden_size ({self.hidden_size})", self.num_heads)
        indexes = self.fullatt_block_indexes
        if isinstance(indexes, (str, bytes)) or not isinstance(indexes, (list, tuple)):
            raise SpecError("fullatt_block_indexes", _OWNER, "be a list of block indexes", indexes)
        indexes = tuple(indexes)
        for index in indexes:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.depth:
                raise SpecError("fullatt_block_indexes", _OWNER, f"hold block indexes in [0, {self.depth})", index)
        if len(set(indexes)) != len(indexes):
            raise SpecError("fullatt_block_indexes", _OWNER, "hold each block once", indexes)
        object.__setattr__(self, "fullatt_block_indexes", tuple(sorted(indexes)))
        if self.window_size and self.window_size % self.patch_size:
            raise SpecError("window_size", _OWNER, f"be a multiple of patch_size ({self.patch_size})",
                            self.window_size)
        merge = self.spatial_merge_size ** 2
        if self.tokens % merge:
            raise SpecError("tokens", _OWNER, f"be a multiple of spatial_merge_size squared ({merge})", self.tokens)

    # ------------------------------------------------------------------ shape

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def merged_tokens(self) -> int:
        """Text tokens the image becomes: ``tokens // spatial_merge_size²`` (ND's vision sequence)."""
        return self.tokens // self.spatial_merge_size ** 2

    @property
    def window_tokens(self) -> int:
        """Patches in one attention window, 0 without windows. Qwen2.5-VL: a 112-pixel window
        is 8 x 8 patches of 14 pixels, 64 tokens (modeling_qwen2_5_vl ``get_window_index``)."""
        if not self.window_size:
            return 0
        side = self.window_size // self.patch_size
        return side * side

    def block_is_windowed(self, index: int) -> bool:
        return bool(self.window_size) and index not in self.fullatt_block_indexes

    def with_tokens(self, tokens: int) -> "VisionTower":
        """The same tower run on *tokens* patches per sample."""
        return replace(self, tokens=tokens)

    # ------------------------------------------------------------------ parameters
    # Qwen2-VL / Qwen2.5-VL vision code (Transformers modeling_qwen2_vl, modeling_qwen2_5_vl):
    # qkv and proj carry biases, the MLP linears too; Conv3d patch embedding without bias.

    def _norm(self, width: int) -> int:
        return width if self.norm == "rmsnorm" else 2 * width

    def block_parameters(self) -> int:
        """One encoder block: two norms, qkv (h -> 3h) and proj (h -> h) with biases, the MLP."""
        h, w = self.hidden_size, self.intermediate_size
        attention = h * 3 * h + 3 * h + h * h + h
        if self.gated_ffn:   # gate_proj, up_proj (h -> w), down_proj (w -> h), with biases
            mlp = 3 * h * w + 2 * w + h
        else:                # fc1 (h -> w), fc2 (w -> h), with biases
            mlp = 2 * h * w + w + h
        return 2 * self._norm(h) + attention + mlp

    def patch_embed_parameters(self) -> int:
        """Conv3d over (in_channels, temporal, patch, patch) to hidden_size, no bias."""
        return self.in_channels * self.temporal_patch_size * self.patch_size ** 2 * self.hidden_size

    def merger_parameters(self) -> int:
        """The patch merger: a norm over hidden_size, then an MLP on merge² patches concatenated,
        (h·m² -> h·m², GELU, h·m² -> out_hidden_size), with biases."""
        wide = self.hidden_size * self.spatial_merge_size ** 2
        return self._norm(self.hidden_size) + wide * wide + wide + wide * self.out_hidden_size + self.out_hidden_size

    def extra_parameters(self) -> int:
        """What the tower holds outside its blocks (patch embedding and merger)."""
        return self.patch_embed_parameters() + self.merger_parameters()

    def total_parameters(self) -> int:
        return self.depth * self.block_parameters() + self.extra_parameters()

    # ------------------------------------------------------------------ serialisation

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "VisionTower":
        if isinstance(data, VisionTower):
            return data
        if not isinstance(data, Mapping):
            raise SpecError("vision", "Model", "be a VisionTower or a mapping of its fields", data)
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                raise SpecError(str(key), _OWNER, "be a known VisionTower field", data[key])
        kwargs = dict(data)
        if isinstance(kwargs.get("fullatt_block_indexes"), list):
            kwargs["fullatt_block_indexes"] = tuple(kwargs["fullatt_block_indexes"])
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["fullatt_block_indexes"] = list(out["fullatt_block_indexes"])
        return out
