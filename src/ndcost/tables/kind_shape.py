"""The shape one layer kind runs at: its submodule's dimensions and tokens.

A text kind runs at the model's hidden size, heads and FFN width on the
candidate's sequence; a vision-tower kind (:mod:`ndcost.spec.vision`) at the tower's
own, on the image's patches, without a causal mask, and in windows where the
tower windows its attention. The kernel tables (ND's, the memory model's,
seconds mode's) read every per-kind dimension from here, so that one kind of a
multimodal model is priced on its own submodule's config, as ND prices each
submodule on its own copy (seed ``_submodule_parts``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["KindShape", "kind_shape"]


@dataclass(frozen=True)
class KindShape:
    """Dimensions of one layer kind.

    Attributes:
        hidden, heads, kv_heads, head_dim: The attention's shape.
        ffn_width: The kind's FFN width (the routed expert width on a MoE kind).
        gated: SwiGLU (3 matmuls) or a 2-matmul GELU MLP.
        out_gate, qk_norm: Qwen3-Next's output gate; Qwen3's QK-norm.
        nd_hff: ND's ``cfg.hff`` of the submodule (the dense width a dense kind runs).
        nd_seq: ND's tokens per sample of the submodule; 0 = the candidate's sequence.
        tokens: The tokens per sample the layer really runs on; 0 = the candidate's sequence.
        bidirectional: The attention sees every token (an encoder), not a causal prefix.
        window: Tokens a query attends to in a windowed layer; 0 = the whole sequence.
        chunked: The window is a fixed block (Llama 4's chunked attention), not a sliding window.
    """

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_width: int
    gated: bool
    out_gate: bool
    qk_norm: bool
    nd_hff: int
    nd_seq: int = 0
    tokens: int = 0
    bidirectional: bool = False
    window: int = 0
    chunked: bool = False


def kind_shape(model: Any, k: int) -> KindShape:
    """The :class:`KindShape` of ``model.kinds[k]``."""
    kind = model.kinds[k]
    if kind.module == "vision":
        tower = model.vision
        return KindShape(
            hidden=tower.hidden_size, heads=tower.num_heads, kv_heads=tower.num_heads, head_dim=tower.head_dim,
            ffn_width=tower.intermediate_size, gated=tower.gated_ffn, out_gate=False, qk_norm=False,
            nd_hff=tower.intermediate_size,
            # ND's vision sub-spec runs grid // merge² tokens (docs/ND_MODEL.md §1.4); the encoder itself
            # runs every patch, merging 2 x 2 only in the merger after its last block.
            nd_seq=tower.merged_tokens, tokens=tower.tokens, bidirectional=True,
            window=tower.window_tokens if kind.name == "vision_window" else 0,
        )
    moe = kind.ffn == "moe"
    return KindShape(
        hidden=model.hidden_size, heads=model.num_attention_heads, kv_heads=model.num_key_value_heads,
        head_dim=model.head_dim, ffn_width=model.moe_intermediate_size if moe else model.intermediate_size,
        gated=model.gated_ffn, out_gate=model.attn_output_gate, qk_norm=model.qk_norm,
        nd_hff=model.intermediate_size or model.moe_intermediate_size,
        window=kind.window, chunked=kind.chunked,   # a causal sliding window or chunk (bidirectional stays False)
    )
