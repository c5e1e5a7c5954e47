"""The largest weight matrix of a layer: what a ZeRO-3 that gathers one parameter at a time holds whole.

DeepSpeed's ZeRO-3 of 2021 fetches each parameter when its module runs and reduces its gradient alone
(``ExecSpec.zero3_parameter_fetch``), so at its worst moment a rank holds the largest weight of a layer and
that weight's gradient gathered -- not the two whole layers and the layer's gradient bucket FSDP holds
(docs/ND_MODEL.md §3.7). The memory kernels read these counts from the kind table (``p_largest``,
``p_largest_expert``) and split them as the strategy splits the matrix.
"""
from __future__ import annotations

from typing import Any

__all__ = ["largest_weights"]


def largest_weights(model: Any, kind: Any, shape: Any, non_expert: float) -> tuple[float, float]:
    """(largest non-expert weight matrix, largest routed-expert matrix) of a layer of *kind*, unsplit: what a
    ZeRO-3 that gathers one parameter at a time (DeepSpeed's) holds gathered at most. Megatron's fused
    matrices: QKV in one, gate and up in one. A mixer ndcost does not break into matrices here (linear
    attention, Mamba) counts as one: the layer's non-expert parameters, an upper bound."""
    h, width, up = shape.hidden, shape.ffn_width, 2.0 if shape.gated else 1.0
    if kind.attention == "full":
        heads, dh = shape.heads, shape.head_dim
        mats = [h * (heads * (2.0 if shape.out_gate else 1.0) + 2.0 * shape.kv_heads) * dh, heads * dh * h]
    elif kind.attention == "mla":
        q_width = shape.heads * (model.qk_nope_head_dim + model.qk_rope_head_dim)
        mats = [h * (model.q_lora_rank or q_width), model.q_lora_rank * q_width,
                h * (model.kv_lora_rank + model.qk_rope_head_dim),
                model.kv_lora_rank * shape.heads * (model.qk_nope_head_dim + model.v_head_dim),
                shape.heads * model.v_head_dim * h]
    elif kind.attention == "none":
        mats = []
    else:
        return float(non_expert), (max(h * width * up, width * h) if kind.ffn == "moe" else 0.0)
    expert = 0.0
    if kind.ffn == "dense":
        mats += [h * width * up, width * h]
    elif kind.ffn == "moe":
        expert = max(h * width * up, width * h)
        shared = model.shared_expert_intermediate_size
        mats += [h * shared * up, shared * h, h * model.num_experts]     # shared experts, router
    return float(max(mats) if mats else 0.0), float(expert)
