"""What elementwise ops move when they run as PyTorch ops, one kernel each, instead of one fused kernel: an eager
RMSNorm and RoPE (torchtitan without torch.compile), and Megatron-Core's unfused RoPE fallback. Per element of the
tensor they run on; the seconds-mode layer (``ndcost.kernels.seconds_layer``) prices them, and the compiled twin
reads the same numbers (``ndcost.kernels.constants`` -> codes.pxi).
"""
from __future__ import annotations

from .codes import ROPE_APPLIES

__all__: list[str] = []

#: An RMSNorm written in PyTorch ops and run eagerly (torchtitan@9dec370 torchtitan/models/norms.py
#: RMSNorm: ``(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * weight``), per
#: element: upcast (read 16-bit, write 4), pow (4 + 4), mean (4), scale (4 + 4), downcast (4 +
#: 16-bit), weight (16-bit + 16-bit): 28 fp32 bytes plus 4 16-bit ones, in 8 kernels (with the
#: tiny add and rsqrt over the row means).
EAGER_RMSNORM_FP32_BYTES = 28.0
EAGER_RMSNORM_KERNELS = 8.0
#: torchtitan's apply_rotary_emb (llama/model.py@9dec370): ``view_as_complex(x.float())``,
#: multiply by freqs_cis, ``view_as_real(...).type_as(x)``: upcast (16-bit + 4), complex multiply
#: (4 + 4), downcast (4 + 16-bit): 16 fp32 bytes plus 2 16-bit ones per element, 3 kernels a tensor.
EAGER_ROPE_FP32_BYTES = 16.0
EAGER_ROPE_KERNELS = 3.0
#: Megatron-Core's unfused RoPE, which it runs instead of Transformer Engine's fused kernel when cos and sin carry
#: an attention factor (Rates.rope_scale "unfused"; ndcost.spec.rope_scaling): ``_apply_rotary_pos_emb_bshd``
#: (NVIDIA/Megatron-LM@d7288711 rope_utils.py L88-125), its aten operators counted by
#: ``tools/count_megatron_rope_ops.py`` (megatron-core 0.16.1, the same code), per rotated tensor. Forward:
#: t * cos, the negated half, the rotated halves concatenated, times sin, the sum, the result concatenated with the
#: empty pass-through slice: 12 passes over the tensor in its element size, in 6 kernels, and 6 more on the
#: (s x head_dim) rotary table (cos, sin, the factor, the casts). Backward: both products' gradients, the
#: negation's, the halves' concatenation, the sum of the two paths, the empty slice's zero gradient and its sum: 14
#: passes in 7 kernels. (The fused kernel: one pass each way, priced as every fused pointwise op.)
MEGATRON_ROPE_PASSES_F = 12.0
MEGATRON_ROPE_KERNELS_F = 12.0
MEGATRON_ROPE_PASSES_B = 14.0
MEGATRON_ROPE_KERNELS_B = 7.0
#: Rates.rope_scale's code of Megatron-Core's unfused fallback.
ROPE_UNFUSED = float(ROPE_APPLIES.index("unfused"))
