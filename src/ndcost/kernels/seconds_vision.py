"""Seconds mode, a vision tower's patch embedding and merger on a rank (oracle; twin: ``c_sec_vision_edges`` in
``cysrc/ndcost/kernels/seconds.pxi``), priced with the embedding on its stage by ``ndcost.kernels.seconds``.
"""
from __future__ import annotations

from .columns import SECONDS_CAND, SECONDS_MODEL
from .seconds_comm import ALL_REDUCE, GATHER_OR_SCATTER, _collective
from .seconds_ops import POINTWISE_BACKWARD_BYTES, _mm3, _pass

_C = SECONDS_CAND
_SM = SECONDS_MODEL


def _vision_edges(smodel, cand, rate, out5) -> None:
    """A vision tower's patch embedding and merger on this rank, per micro-batch.

    out5 = (forward, backward, weight grads, tp comm, forward FLOPs of the whole micro-batch).
    Qwen2-VL / Qwen2.5-VL (Transformers modeling_qwen2_5_vl: PatchEmbed, PatchMerger): the
    patch embedding is a Conv3d with stride = kernel, i.e. one GEMM [patches x patch_in] x
    [patch_in x hidden]; the merger norms the patches, concatenates merge² of them and runs
    an MLP (hidden·merge² -> hidden·merge², GELU, -> out). The tower's tokens split over cp and,
    with SP, over tp, as its blocks' (the patch embedding on that shard); the merger MLP is
    tensor-parallel as the blocks' (column then row parallel) on the merged tokens, gathered
    before it and reduce-scattered after it with SP (else an all-reduce after it).
    """
    patches = smodel[_SM["v_patches"]]
    for i in range(5):
        out5[i] = 0.0
    if patches <= 0.0:
        return
    b, t, cp, sp = cand[_C["b"]], cand[_C["t"]], cand[_C["cp"]], cand[_C["sp"]]
    bc = cand[_C["bytes_c"]]
    hv, m, v_out = smodel[_SM["v_hidden"]], smodel[_SM["v_merge"]], smodel[_SM["v_out"]]
    patch_in = smodel[_SM["v_patch_in"]]
    rows = b * patches / cp
    merged = rows / m
    wide = hv * m
    g3 = [0.0] * 5
    _mm3(rows / sp, hv, patch_in, 1.0, cand, rate, g3)          # the patch embedding
    fw, bw, bw_w = g3[0], g3[1], g3[2]
    _mm3(merged, wide / t, wide, 1.0, cand, rate, g3)           # merger fc1, column parallel
    fw, bw, bw_w = fw + g3[0], bw + g3[1], bw_w + g3[2]
    _mm3(merged, v_out, wide / t, 1.0, cand, rate, g3)          # merger fc2, row parallel
    fw, bw, bw_w = fw + g3[0], bw + g3[1], bw_w + g3[2]
    # the merger's norm on the patch shard and its GELU on the merged tokens: elementwise passes
    moved = 2.0 * 2.0 * bc * rows * hv / sp + 2.0 * bc * merged * wide / t
    fw += _pass(moved, 2.0, rate)
    bw += _pass(POINTWISE_BACKWARD_BYTES * moved, 2.0, rate)
    comm = 0.0
    if t > 1.0:
        if sp > 1.0:
            # all-gather the normed patches before fc1, reduce-scatter fc2's output; backward the reverse
            comm = 2.0 * (_collective(GATHER_OR_SCATTER, rows * hv * bc, t, 1.0, rate)
                          + _collective(GATHER_OR_SCATTER, merged * v_out * bc, t, 1.0, rate))
        else:
            # all-reduce fc2's output forward, the input gradient of fc1 backward
            comm = (_collective(ALL_REDUCE, merged * v_out * bc, t, 1.0, rate)
                    + _collective(ALL_REDUCE, rows * hv * bc, t, 1.0, rate))
    out5[0], out5[1], out5[2], out5[3] = fw, bw, bw_w, comm
    # whole micro-batch FLOPs (not split over tp, cp): 2·rows·n·k per GEMM
    out5[4] = 2.0 * b * patches * (patch_in * hv + (wide * wide + wide * v_out) / m)
