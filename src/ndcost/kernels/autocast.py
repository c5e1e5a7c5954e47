"""fp32 parameters under ``torch.autocast`` with Transformers' fp32 residual stream (``ExecSpec.autocast``, the
hf-eager stack), oracle: what it keeps (memory, ``batch``) and what it runs (seconds, ``seconds_layer`` and
``seconds``), and gradients made by the backward (``ExecSpec.grads_set_to_none``). The byte counts and their
sources are ``ndcost.kernels.seconds_ops``' AUTOCAST_* constants; the twins are in
``cysrc/ndcost/kernels/batch.pxi``, ``seconds_layer.pxi`` and ``seconds.pxi`` (``c_mem_autocast_activation``,
the ``autocast`` branches of ``c_sec_layer``, ``c_sec_head`` and ``c_sec_stage_sums``).
"""
from __future__ import annotations

from ..spec.recompute_spec import ALL_KEPT
from .codes import MEMORY_ATTENTIONS, MEMORY_FFNS
from .columns import LAYER_OP, MEMORY_CAND, MEMORY_KIND, OPTION_FULL, OPTION_NONE, SECONDS_CAND
from .memory import _FFACT, _FP32_BYTES, _NORMOP, N_MEMORY_COLUMNS, _kept
from .seconds_moe import _note_two
from .seconds_ops import (
    AUTOCAST_CE_BACKWARD_FP32_BYTES, AUTOCAST_CE_BACKWARD_KERNELS, AUTOCAST_CE_FORWARD_FP32_BYTES,
    AUTOCAST_CE_FORWARD_KERNELS, AUTOCAST_FP32_BYTES, AUTOCAST_RESIDUAL_BACKWARD_FP32_BYTES,
    AUTOCAST_RESIDUAL_FP32_BYTES, SCOPE_ATTN, SCOPE_FFN, _note, _pass,
)

_MK, _MC, _C, _O = MEMORY_KIND, MEMORY_CAND, SECONDS_CAND, LAYER_OP
_FFN_DENSE, _FFN_NONE = (float(MEMORY_FFNS.index(name)) for name in ("dense", "none"))
_ATT_FULL, _ATT_NONE = (float(MEMORY_ATTENTIONS.index(name)) for name in ("full", "none"))


def _autocast_activation(kind, mc, option: int, keep_mask: int, tokens: float) -> float:
    """What one layer of the kind keeps beyond the formulas' count when fp32 parameters run under
    ``torch.autocast`` with Transformers' fp32 residual stream (ExecSpec.autocast), one micro-batch of
    *tokens* tokens on the rank (``batch._formula_activation`` adds it to the formulas').

    * Every weight's 16-bit cast, c bytes a parameter: autocast's cache keeps the copy of a leaf fp32
      tensor that requires grad until the outermost autocast region exits (pytorch/pytorch
      aten/src/ATen/autocast_mode.cpp cached_cast), and F.linear saves it for the input gradient until
      the layer's backward. The norms' fp32 weights are counted too (2·h of a layer's parameters:
      LlamaRMSNorm's ``weight * x`` is on none of autocast's lists).
    * Full recompute: the checkpoint is the fp32 stream, 4 bytes an element (the formulas' 16-bit one
      plus 4 - c). The checkpointed forward saves nothing, so its casts live only in autocast's cache,
      which the region's exit clears before the backward begins: they are not held at the loss's
      backward (the peak); the recomputed layer's own casts are in its working set (the plain layer).
    * Otherwise (transformers/models/llama/modeling_llama.py, Transformers 5.x): each pre-norm keeps its
      fp32 normalised input beside its fp32 input (LlamaRMSNorm: ``self.weight * hidden_states.to(
      input_dtype)`` saves the normalised tensor; normOp); q_proj, k_proj and v_proj each cast the fp32
      normed input for themselves (autocast caches no non-leaf cast): two 16-bit copies beyond the
      formulas' one, and gate_proj and up_proj one more; o_proj keeps the contiguous copy of SDPA's
      transposed output (``attn_output.transpose(1, 2).contiguous()``) beside the output SDPA keeps;
      ``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` keeps silu's output and the product beside the
      gate and up outputs, one width more than a fused SwiGLU (ffAct)."""
    if mc[_MC["autocast"]] == 0.0:
        return 0.0
    c = mc[_MC["bytes_c"]]
    tp, sp = mc[_MC["tp"]], mc[_MC["sp"]]
    h = kind[_MK["hidden"]]
    if option == OPTION_FULL:
        divisor = sp
        if mc[_MC["slice_input"]] != 0.0 and tp > divisor:
            divisor = tp
        return tokens * h * (_FP32_BYTES - c) / divisor
    extra = ((kind[_MK["p_nonexp"]] + kind[_MK["p_shared"]]) / tp
             + kind[_MK["p_routed"]] / (mc[_MC["ep"]] * mc[_MC["etp"]])) * c
    mask = ALL_KEPT if option == OPTION_NONE else keep_mask
    residual = tokens * h / sp
    norms = kind[_MK["extra_norms"]]
    if kind[_MK["attention"]] != _ATT_NONE:
        norms += 1.0
    if kind[_MK["ffn"]] != _FFN_NONE:
        norms += 1.0
    extra += _kept(mask, _NORMOP) * norms * residual * _FP32_BYTES
    if kind[_MK["attention"]] == _ATT_FULL:
        extra += 2.0 * residual * c + tokens * kind[_MK["heads"]] / tp * kind[_MK["head_dim"]] * c
    if kind[_MK["ffn"]] == _FFN_DENSE and kind[_MK["gated"]] != 0.0:
        extra += residual * c + _kept(mask, _FFACT) * tokens * kind[_MK["ffn_width"]] / tp * c
    return extra


def _grads_from_backward(out) -> None:
    """Gradients that exist only from the backward on (ExecSpec.grads_set_to_none: PyTorch's
    ``optimizer.zero_grad(set_to_none=True)`` frees them after each step; torch/optim/optimizer.py),
    with one micro-batch a step, in place on the stage rows: the backward allocates each gradient as
    it frees the activations of what it has gone through, so the gradients and the forward's
    activations are never all held at once -- the stage holds max(activations, gradients) (the
    activations at the backward's start, the gradients at its end) with its working set. The grads
    column keeps what the gradients add beyond the activations; the total follows."""
    for row in out:
        grads, activations = row[1], row[3]
        held = grads - activations if grads > activations else 0.0
        row[N_MEMORY_COLUMNS - 1] += held - grads
        row[1] = held


def _autocast_passes(note, ops, x_sp: float, bc: float, db: float, n_split: float, casts_att: float,
                     casts_ff: float, rate, sums) -> None:
    """A layer's sub-blocks on the fp32 stream, into sums[0], sums[1] and noted: each residual add of the fp32
    stream and a 16-bit sub-block output and its backward (seconds_ops.AUTOCAST_RESIDUAL_FP32_BYTES; a dropout
    mask *db* as the fused add writes it), and each projection's own cast of the fp32 normed input (autocast
    caches only a leaf tensor's cast): *casts_att* of the mixer's (Q, K and V three times: separate q_proj,
    k_proj, v_proj), *casts_ff* of the FFN's (a gated MLP's gate and up twice, a GELU MLP or a MoE router once).
    Backward: each 16-bit input gradient cast back to fp32 and the fp32 gradients summed by autograd (read 4 + 4,
    write 4 a sum) -- seconds_ops.AUTOCAST_FP32_BYTES. *x_sp*: elements of the residual region on the rank."""
    fp32_f = (AUTOCAST_RESIDUAL_FP32_BYTES + bc + db) * x_sp
    fp32_b = (AUTOCAST_RESIDUAL_BACKWARD_FP32_BYTES + bc) * x_sp
    blocks = ((SCOPE_ATTN, casts_att), (SCOPE_FFN, casts_ff))
    for scope, casts in blocks:
        if casts > 0.0:
            _note_two(note, ops, _O["residual"], scope, fp32_f, n_split, fp32_b, 2.0 * n_split, rate, sums, 0.0, 0.0)
    for scope, casts in blocks:
        if casts > 0.0:
            _note_two(note, ops, _O["cast"], scope, casts * (AUTOCAST_FP32_BYTES + bc) * x_sp, casts * n_split,
                      (casts * (AUTOCAST_FP32_BYTES + bc) + (casts - 1.0) * 3.0 * AUTOCAST_FP32_BYTES) * x_sp,
                      (2.0 * casts - 1.0) * n_split, rate, sums, 0.0, 0.0)


def _autocast_weights(note, ops, params: float, weights: float, bc: float, rate) -> tuple[float, float]:
    """(forward, weight-gradient) seconds of the layer's weight casts, noted: each forward casts every fp32
    weight to 16 bits (a recompute forward again: autocast's cache lives as long as its region), one kernel a
    weight (*weights* of them, *params* parameters on the rank); the backward casts each 16-bit weight gradient
    back to fp32 (seconds_ops.AUTOCAST_FP32_BYTES). The norms' few fp32 weights (2·h) are counted with them."""
    moved = params * (AUTOCAST_FP32_BYTES + bc)
    cast_f = _pass(moved, weights, rate)
    cast_b = _pass(moved, weights, rate)
    _note(note, ops, _O["cast"], SCOPE_ATTN, 0.0, moved, weights, cast_f, 0.0, moved, weights, cast_b)
    return cast_f, cast_b


def _autocast_head(cand, rate, tokens: float, h: float, v: float, n_split: float) -> tuple[float, float, float]:
    """(forward, backward, weight-gradient) seconds an output head adds beyond its logits GEMM under autocast:
    the loss on fp32 logits (seconds_ops.AUTOCAST_CE_FORWARD_FP32_BYTES), the head's fp32 input cast for the
    GEMM and its fp32 weight cast each forward, both cast back in backward (seconds_ops.AUTOCAST_FP32_BYTES)."""
    t, bc = cand[_C["t"]], cand[_C["bytes_c"]]
    logits = tokens * v / t
    cast = (AUTOCAST_FP32_BYTES + bc) * tokens * h
    weight = (AUTOCAST_FP32_BYTES + bc) * v * h / t
    forward = (_pass((AUTOCAST_CE_FORWARD_FP32_BYTES + bc) * logits, AUTOCAST_CE_FORWARD_KERNELS * n_split, rate)
               + _pass(cast, n_split, rate) + _pass(weight, 1.0, rate))
    backward = (_pass((AUTOCAST_CE_BACKWARD_FP32_BYTES + bc) * logits, AUTOCAST_CE_BACKWARD_KERNELS * n_split, rate)
                + _pass(cast, n_split, rate))
    return forward, backward, _pass(weight, 1.0, rate)


def _autocast_embedding(cand, rate, tokens: float, h: float, v: float) -> tuple[float, float]:
    """(bytes the lookup moves, weight-gradient seconds) of the embedding under autocast: the fp32 table's rows
    looked up in fp32 (embedding is on none of autocast's lists): read 4, write 4; the backward
    (embedding_dense_backward, pytorch/pytorch aten/src/ATen/native/cuda/Embedding.cu) writes a dense fp32
    gradient of the table (zeros, then the rows' sums), which a tied output head's fp32 weight gradient is added
    to (AccumulateGrad: read 4 + 4, write 4)."""
    t = cand[_C["t"]]
    table = AUTOCAST_FP32_BYTES * v * h / t
    kernels = 1.0
    if cand[_C["tie_emb"]] != 0.0:
        table += 3.0 * AUTOCAST_FP32_BYTES * v * h / t
        kernels += 1.0
    return 2.0 * AUTOCAST_FP32_BYTES * tokens * h, _pass(table, kernels, rate)
