"""DeepSeek-V3's low-precision activation storage (``ExecSpec.fp8_activation_storage``), oracle: what a layer no
longer keeps at 16 bits (memory, ``batch``). The twin is ``c_mem_fp8_storage_saving`` in
``cysrc/ndcost/kernels/batch.pxi``.

DeepSeek-V3 technical report (arXiv 2412.19437) §3.3.2 "Low-Precision Activation": besides the fp8 inputs
every Linear caches for its backward (``linear_bytes``, priced already), two kinds of activation are stored
in low precision --

* "Inputs of the Linear after the attention operator. These activations are also used in the backward pass
  of the attention operator": one copy in E5M6 (12 bits) where ``layer_activation_bytes`` keeps the
  attention core's output at the compute width (the o-projection's input, heads_local x v_dim elements a
  token for MLA, heads_local x head_dim for MHA/GQA);
* "Inputs of the SwiGLU operator in MoE ... we cache the inputs of the SwiGLU operator and recompute its
  output in the backward pass. These activations are also stored in FP8": the activation's kept inputs
  (gate and up, 2 x width a token; fc1's output for a non-gated MLP) of the routed experts and of the
  shared experts (the MoE module's, DeepSeekMoE's shared experts included).

Each stored tensor carries one fp32 scale per 1x128 tile (§3.3.1: activations are scaled "per token per 128
channels"), so an element costs ``FP8_STORED_BYTES`` or ``E5M6_STORED_BYTES``. Nothing changes under full
recompute (the layer keeps its input alone) or on a layer without attention or MoE.
"""
from __future__ import annotations

from .codes import MEMORY_ATTENTIONS, MEMORY_FFNS
from .columns import MEMORY_CAND, MEMORY_KIND, OPTION_FULL
from .memory import _FP32_BYTES

_MK, _MC = MEMORY_KIND, MEMORY_CAND
_ATT_FULL, _ATT_MLA = (float(MEMORY_ATTENTIONS.index(name)) for name in ("full", "mla"))
_FFN_MOE = float(MEMORY_FFNS.index("moe"))
#: Bytes per element of the stored activations: fp8 (1 byte) or E5M6 (12 bits), each with one fp32 scale per
#: 1x128 tile ("per token per 128 channels", §3.3.1) -- 4/128 byte per element.
FP8_STORED_BYTES = 1.0 + _FP32_BYTES / 128.0
E5M6_STORED_BYTES = 1.5 + _FP32_BYTES / 128.0


def _gain(compute_bytes: float, stored_bytes: float) -> float:
    """Bytes an element saves stored at *stored_bytes* instead of the compute width (never negative)."""
    gain = compute_bytes - stored_bytes
    return gain if gain > 0.0 else 0.0


def _fp8_storage_saving(kind, mc, option: int, tokens: float) -> float:
    """Bytes one layer of the kind keeps below the formulas' count for one micro-batch of *tokens* tokens on the
    rank when the stack stores activations as DeepSeek-V3 does (see the module docstring); 0 when it does not,
    under full recompute, or on a layer with neither attention nor MoE (``batch._formula_activation`` takes
    it off the formulas')."""
    if mc[_MC["fp8_act_store"]] == 0.0 or option == OPTION_FULL:
        return 0.0
    c, tp = mc[_MC["bytes_c"]], mc[_MC["tp"]]
    saving = 0.0
    attention = kind[_MK["attention"]]
    if attention == _ATT_MLA or attention == _ATT_FULL:
        head = kind[_MK["v_dim"]] if attention == _ATT_MLA else kind[_MK["head_dim"]]   # the output's head width
        saving += tokens * kind[_MK["heads"]] / tp * head * _gain(c, E5M6_STORED_BYTES)
    if kind[_MK["ffn"]] == _FFN_MOE:
        inputs = 2.0 if kind[_MK["gated"]] != 0.0 else 1.0      # the activation's kept inputs per width
        routed = tokens * kind[_MK["top_k"]] * mc[_MC["token_factor"]] * mc[_MC["etp"]] / tp
        elements = routed * inputs * kind[_MK["ffn_width"]] / mc[_MC["etp"]]
        elements += tokens * inputs * kind[_MK["shared_width"]] / tp
        saving += elements * _gain(c, FP8_STORED_BYTES)
    return saving
