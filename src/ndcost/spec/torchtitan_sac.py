"""torchtitan's per-op selective activation checkpointing, as the census of each layer kind.

torchtitan's ``selective_ac_option = "op"`` (torchtitan@9dec370 torchtitan/parallelisms/
parallelize_llama.py ``_apply_ac_to_transformer_block``: ``_save_list`` and the mm counter) saves,
per transformer block, the outputs of ``aten.mm`` except every second one, of SDPA (flash and
efficient), of ``reduce_scatter`` and of ``abs``/``max`` (float8's amax), and recomputes everything
else in backward. In a Llama block the matmuls run in the order wq, wk, wv, wo, w1, w3, w2: the
second, fourth and sixth -- wk, wo and w3 -- are recomputed, with every norm, RoPE, the SwiGLU
product and the residual adds; the attention core is kept.

That is HyperParallel's policy shape (keep the attention core, recompute the other switches) plus a
share of the projection matmuls -- what a :class:`~ndcost.spec.census.KindCensus` states: the attention
projections' share is (wk + wo) / (wq + wk + wv + wo) FLOPs, the FFN's w3 / (w1 + w3 + w2). A spec
prices it with ``recompute="selective", selective_rule="hyperparallel"`` on the model
``with_census(torchtitan_op_census(model))``.
"""
from __future__ import annotations

from typing import Any

from .census import KindCensus
from ..errors import SpecError

__all__ = ["torchtitan_op_census"]


def torchtitan_op_census(model: Any) -> tuple[KindCensus, ...]:
    """The census of torchtitan's per-op SAC for each dense GQA/MHA kind of *model*."""
    if getattr(model, "is_moe", False) or getattr(model, "vision", None) is not None:
        raise SpecError("model", "torchtitan_op_census", "be a dense text model (torchtitan's Llama block)",
                        getattr(model, "name", model))
    heads, kv = model.num_attention_heads, model.num_key_value_heads
    dim = model.head_dim or model.hidden_size // heads
    q, k, v, o = heads * dim, kv * dim, kv * dim, heads * dim      # output widths; each reads hidden_size
    attention = (k + o) / (q + k + v + o)
    ffn = 1.0 / 3.0 if model.gated_ffn else 0.5                     # w3 of (w1, w3, w2); fc2 of (fc1, fc2)
    # What a token of a block keeps (bf16): the outputs the policy saves -- wq's (q), wv's (v), w1's
    # (the FFN width) and SDPA's output with its fp32 logsumexp per head, split over tp -- and, split
    # over the sequence-parallel ranks, the block's input (the checkpoint's) and w2's output.
    kept_tp = 2.0 * (q + v + model.intermediate_size + o) + 4.0 * heads
    kept_sp = 2.0 * (2 * model.hidden_size)
    return tuple(KindCensus(kind.name, attention, ffn, selective=kept_sp, selective_tp=kept_tp)
                 for kind in model.kinds)
