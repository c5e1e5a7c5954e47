"""Pipeline and point-to-point formulas of ND's score (oracle).

Restated from ND's ``estimate_pipeline`` and ``estimate_p2p_comm``
(docs/ND_MODEL.md §2.8 and §2.9). ND times every schedule as 1F1B or interleaved
1F1B: it distinguishes only one stage, one chunk per stage, and several.
"""
from __future__ import annotations

import math

__all__ = ["nd_straggler", "nd_pipeline_time", "nd_p2p_count", "nd_p2p_time"]

NAN = math.nan


def nd_straggler(stage_times) -> int:
    """Index of the slowest stage; the last one on a tie, as ND's ``argmax`` over the reversed list."""
    n = len(stage_times)
    best = -1
    for i in range(n):
        if best < 0 or stage_times[i] >= stage_times[best]:
            best = i
    return best


def nd_pipeline_time(stage_times, micro_batch_num: int, vpp: int) -> float:
    """ND's pipeline time of one step from each stage's time per micro-batch (docs/ND_MODEL.md §2.8).

    With p stages, S their sum and M the slowest:
    p = 1: S·m; vpp = 1: S + (m − 1)·M; vpp > 1, extra = p·(vpp − 1):
    S/vpp + extra·M/vpp + (m·vpp − extra − 1)·M/vpp. NaN for no stage, m < 1 or vpp < 1.
    """
    p = len(stage_times)
    if p < 1 or micro_batch_num < 1 or vpp < 1:
        return NAN
    total = 0.0
    straggler = stage_times[0]
    for i in range(p):
        total += stage_times[i]
        if stage_times[i] > straggler:
            straggler = stage_times[i]
    if p == 1:
        return total * micro_batch_num
    if vpp == 1:
        return total + (micro_batch_num - 1) * straggler
    # The seed divides by vpp first: every micro-block of a chunk takes 1/vpp of the stage.
    less_extra = p * (vpp - 1)
    chunk_straggler = straggler / vpp
    non_steady = total / vpp + less_extra * chunk_straggler
    steady = (micro_batch_num * vpp - less_extra - 1) * chunk_straggler
    return non_steady + steady


def nd_p2p_count(pp: int, micro_batch_num: int, vpp: int) -> float:
    """Number of sends and receives ND counts for a step (docs/ND_MODEL.md §2.9, tested upstream)."""
    p, m, vp = pp, micro_batch_num, vpp
    if p < 1 or m < 1 or vp < 1:
        return NAN
    if p == 1:
        return 0.0
    if vp == 1:
        if p == 2:
            return 4.0 * m
        return 4.0 * p * m + 4.0 * p * p - 14.0 * p
    if p == 2:
        return 8.0 * m * vp - 4.0 * m
    if p == 4:
        return 16.0 * m * vp + 12.0
    return 4.0 * p * m * vp + 4.0 * p * p - 13.0 * p


def nd_p2p_time(pp: int, micro_batch_num: int, vpp: int, straggler_time: float, sp: float, ratio: float) -> float:
    """ND's P2P part: ratio · sends / p · slowest stage / sp (MANUAL_P2P_RATIO = 0.002 upstream)."""
    count = nd_p2p_count(pp, micro_batch_num, vpp)
    if count != count or sp <= 0.0:
        return NAN
    return ratio * count / pp * straggler_time / sp
