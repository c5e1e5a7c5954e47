"""RoPE scaling: the factor a model multiplies its rotary cos and sin by, and how a training stack applies it.

YaRN (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language Models", Eq. 21-22) scales
the attention logits by multiplying cos and sin with an attention factor, 0.1 ln(s) + 1 for a context scale s.
Transformers computes it from a config's ``rope_scaling`` (``modeling_rope_utils._compute_yarn_parameters``:
``attention_factor`` when given; else mscale(s, mscale) / mscale(s, mscale_all_dim) when both keys are set; else
mscale(s, 1)), and Megatron-Core the same (``yarn_rotary_pos_embedding._yarn_get_concentration_factor``):
gpt-oss (factor 32, no mscale keys) 1.347; DeepSeek-V3 and Kimi K2 (mscale = mscale_all_dim = 1) 1.0.

The factor changes no FLOP, but a stack whose fused RoPE kernel takes no factor runs something else: Megatron-Core
(NVIDIA/Megatron-LM@d7288711, megatron/core/models/common/embeddings/rope_utils.py ``apply_rotary_pos_emb``) falls
back from Transformer Engine's fused RoPE to its PyTorch path whenever mscale != 1 ("mscale=... is not supported by
TE's fused RoPE. Using unfused implementation."): ``_apply_rotary_pos_emb_bshd``, a dozen passes over q and k each
way (``ndcost.kernels.eager_passes.MEGATRON_ROPE_*``, counted by ``tools/count_megatron_rope_ops.py``).
"""
from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import SpecError, is_finite_number

__all__ = ["ROPE_SCALES", "ROPE_SCALE_DEFAULT", "ROPE_SCALE_SOURCES", "rope_attention_factor"]

#: How a stack applies a RoPE attention factor other than 1 (Rates.rope_scale): inside its fused kernel or on
#: cos and sin before an eager or compiled rotation (no extra pass), or by an unfused fallback (Megatron-Core).
ROPE_SCALES: tuple[str, ...] = ("fused", "unfused")
#: Megatron-Core with Transformer Engine's kernels, the stack the device's rates stand for.
ROPE_SCALE_DEFAULT = "unfused"

_MCORE = ("Megatron-Core falls back from Transformer Engine's fused RoPE to its PyTorch bshd path when the attention "
          "factor is not 1 (NVIDIA/Megatron-LM@d7288711ba27, the Megatron-Bridge 26.04 pin, "
          "megatron/core/models/common/embeddings/rope_utils.py L279-284 apply_rotary_pos_emb: 'mscale=... is not "
          "supported by TE's fused RoPE. Using unfused implementation.'; _apply_rotary_pos_emb_bshd L88-125); "
          "Megatron-Bridge's gpt-oss bridge sets yarn_mscale and yarn_mscale_all_dim None "
          "(NVIDIA-NeMo/Megatron-Bridge@0fbfe7d3 src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py L94-100), "
          "so its factor is 0.1 ln 32 + 1")
#: Where each stack's choice comes from.
ROPE_SCALE_SOURCES: Mapping[str, str] = MappingProxyType({
    "megatron": _MCORE,
    "torchtitan": ("pytorch/torchtitan: the YaRN factor scales the precomputed freqs_cis table (s x head_dim), "
                   "which apply_rotary_emb multiplies as before: no pass over q and k beyond the rotation's"),
    "hf": ("huggingface/transformers (5.x) modeling_rope_utils: the attention factor multiplies the cos and sin "
           "tables the rotary embedding returns (s x head_dim), before apply_rotary_pos_emb: no extra pass over "
           "q and k"),
})


def _yarn_mscale(scale: float, mscale: float) -> float:
    # YaRN's mscale(s) = 0.1 * mscale * ln(s) + 1 for s > 1 (1 otherwise): Transformers' get_mscale, Megatron's
    # _yarn_get_mscale
    return 0.1 * mscale * math.log(scale) + 1.0 if scale > 1.0 else 1.0


def rope_attention_factor(rope_scaling: Any, owner: str = "config.json") -> float:
    """The factor a config's ``rope_scaling`` (or ``rope_parameters``) multiplies cos and sin by: YaRN's
    attention factor; 1.0 for plain RoPE and for the types that only stretch the frequencies (linear, dynamic,
    llama3).

    Raises:
        SpecError: For a YaRN block whose numbers are not finite positive ones.
    """
    if not isinstance(rope_scaling, Mapping):
        return 1.0
    kind = rope_scaling.get("rope_type", rope_scaling.get("type"))
    if kind != "yarn":
        return 1.0
    given = rope_scaling.get("attention_factor")
    if given is not None:
        if not is_finite_number(given) or given <= 0:
            raise SpecError("rope_scaling.attention_factor", owner, "be a positive number", given)
        return float(given)
    scale = rope_scaling.get("factor", 1.0)
    if not is_finite_number(scale) or scale <= 0:
        raise SpecError("rope_scaling.factor", owner, "be a positive number", scale)
    mscale, mscale_all_dim = rope_scaling.get("mscale"), rope_scaling.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        for name, value in (("mscale", mscale), ("mscale_all_dim", mscale_all_dim)):
            if not is_finite_number(value) or value <= 0:
                raise SpecError(f"rope_scaling.{name}", owner, "be a positive number", value)
        return _yarn_mscale(float(scale), float(mscale)) / _yarn_mscale(float(scale), float(mscale_all_dim))
    return _yarn_mscale(float(scale), 1.0)
