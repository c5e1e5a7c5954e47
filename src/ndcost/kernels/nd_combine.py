"""ND's score in ND units, part 3 of 3 (oracle): the stage and pipeline combination, P2P and the ratios.

Restated from the seed estimate.py (``estimate_stage``, ``estimate_pipeline``, ``estimate_p2p``,
``apply_regression_coefficients``; docs/ND_MODEL.md §2.7-§2.11), over the stage sums of
:mod:`ndcost.kernels.nd_comm`. The twin is ``cysrc/ndcost/kernels/nd_combine.pxi``: same names, same
parameters, same order of floating-point operations.
"""
from __future__ import annotations

import math

from .columns import (
    CAND, CAND_FIELDS, MODEL, MODEL_FIELDS, ND_OPTION, ND_OPTION_FIELDS, PART, PART_NAMES, STAGE, STAGE_FIELDS,
)
from .codes import P2P_MODES, RATIO_TYPES, REC_TYPES
from .pipeline import nd_p2p_time, nd_pipeline_time, nd_straggler
from .nd_ops import _check_len, _check_rows

__all__ = ["nd_combine", "nd_apply_ratios"]

NAN = math.nan
# ND's estimator option codes (docs/ND_MODEL.md §2.7; ndcost.kernels.codes RATIO_TYPES / REC_TYPES / P2P_MODES).
_RATIO_DYNAMIC, _RATIO_STATIC, _RATIO_COMPUTE_ONLY, _RATIO_COMM_ONLY = (
    RATIO_TYPES.index(name) for name in ("DYNAMIC", "STATIC", "COMPUTE_ONLY", "COMM_ONLY"))
_REC_WITH, _REC_NONE, _REC_COMPUTE_ONLY, _REC_COMM_ONLY = (
    REC_TYPES.index(name) for name in ("WITH", "NONE", "COMPUTE_ONLY", "COMM_ONLY"))
_P2P_MANUAL = P2P_MODES.index("MANUAL")
#: BACKWARD_RATIO of the seed: backward = 2 x forward, so a pass is 1 + 2 forwards.
_BACKWARD_RATIO = 2.0
#: Micro-batch and virtual-stage counts beyond this are refused as NaN, so that
#: the twin's integer conversion can never overflow.
_MAX_COUNT = 2.0 ** 31
_M, _C, _O, _P, _S = MODEL, CAND, ND_OPTION, PART, STAGE
# --------------------------------------------------------------------------------------
# Stage, pipeline and P2P (docs/ND_MODEL.md §2.7-§2.10)
# --------------------------------------------------------------------------------------

def _positive(x: float) -> float:
    """ND's max(0, x)."""
    return x if x > 0.0 else 0.0


def _weights(model, cand, options):
    """(comp_w, comm_w) of ND's ratio type (seed estimate_stage, get_dynamic_ratio; §2.7)."""
    ratio_type = options[_O["ratio_type"]]
    if ratio_type == _RATIO_DYNAMIC:
        # 1.5·(hff + s)·8192/(h + s), the routed width in place of hff when the MODEL has experts.
        # The text model's h, hff and the candidate's s, never a submodule's: ND times a
        # multimodal model's stages on its main submodule (seed: timed = mm_ccfgs[mm_main]).
        h, s = float(model[_M["h"]]), float(cand[_C["s"]])
        width = float(model[_M["hff_exp"]]) if model[_M["n_exp"]] > 1.0 else float(model[_M["hff"]])
        if not h + s > 0.0:
            return 1.0, NAN
        return 1.0, 3.0 / 2.0 * (width + s) * (8192.0 / (h + s))
    if ratio_type == _RATIO_STATIC:
        return 1.0, float(options[_O["static_ratio"]])
    if ratio_type == _RATIO_COMPUTE_ONLY:
        return 1.0, 0.0
    if ratio_type == _RATIO_COMM_ONLY:
        return 0.0, 1.0
    return NAN, NAN


def nd_combine(stage, cand, model, options, stage_savings, stage_focused, parts, stage_times) -> float:
    """ND's score from the per-stage sums of :func:`nd_stage_sums` (seed estimate_stage,
    _save_recompute, estimate_pipeline, estimate_p2p; docs/ND_MODEL.md §2.7-§2.10).

    stage: (p, STAGE_FIELDS), one row per pipeline stage; stage_savings: length p, or 0 for
    none; stage_focused: the stage whose parts are reported, −1 for the straggler. *parts*
    (PART_NAMES order) is written with that stage's parts × m, the bubble and the P2P part;
    they sum to the returned total = pipeline + P2P. *stage_times* (length p) gets each
    stage's time per micro-batch, recompute and savings included. No stage, or m or vp
    outside [1, 2**31], gives NaN.
    """
    n_stages = _check_rows(stage, "stage", len(STAGE_FIELDS))
    _check_len(cand, "cand", len(CAND_FIELDS))
    _check_len(model, "model", len(MODEL_FIELDS))
    _check_len(options, "options", len(ND_OPTION_FIELDS))
    _check_len(parts, "parts", len(PART_NAMES))
    _check_len(stage_times, "stage_times", n_stages)
    n_savings = len(stage_savings)
    if n_savings not in (0, n_stages):
        raise ValueError(f"stage_savings must have length 0 or {n_stages}, got {n_savings}")
    if stage_focused >= n_stages:
        raise ValueError(f"stage_focused must be -1 or a stage in [0, {n_stages}), got {stage_focused}")
    m, vp = float(cand[_C["m"]]), float(cand[_C["vp"]])
    if n_stages == 0 or not (1.0 <= m <= _MAX_COUNT and 1.0 <= vp <= _MAX_COUNT):
        for i in range(len(PART_NAMES)):
            parts[i] = NAN
        for i in range(n_stages):
            stage_times[i] = NAN
        return NAN
    micro_batches, vpp = int(m), int(vp)
    comp_w, comm_w = _weights(model, cand, options)
    rec_type = options[_O["rec_type"]]
    # RecType: which recompute lists are priced; an unpriced one is [0]·p (seed _stage_parts).
    rec_comp = rec_type == _REC_WITH or rec_type == _REC_COMPUTE_ONLY
    rec_comm = rec_type == _REC_WITH or rec_type == _REC_COMM_ONLY
    rec_known = rec_comp or rec_comm or rec_type == _REC_NONE

    times = [0.0] * n_stages
    recomputes = [0.0] * n_stages
    for i in range(n_stages):
        row = stage[i]
        comp = float(row[_S["comp"]])
        comm = float(row[_S["tp"]]) + float(row[_S["dp"]]) + float(row[_S["ep"]]) + float(row[_S["cp"]])
        perf = comp_w * comp + comm_w * comm
        recomp = float(row[_S["recomp"]]) if rec_comp else 0.0
        recomm = float(row[_S["recomm"]]) if rec_comm else 0.0
        # "ignores comm recomp, to improve": the re-run's share, a third being the forward's.
        rerun = (_positive(comp_w * (recomp - comp)) + _positive(comm_w * (recomm - comm))) / (1.0 + _BACKWARD_RATIO)
        if not rec_known:
            rerun = NAN
        recomputes[i] = rerun
        time = perf + rerun
        if n_savings:
            time = time - float(stage_savings[i])             # _save_recompute
        times[i] = time
        stage_times[i] = time

    pipeline = nd_pipeline_time(times, micro_batches, vpp)
    focus = stage_focused if stage_focused >= 0 else nd_straggler(times)
    row = stage[focus]
    mf = float(micro_batches)
    forward = comp_w * float(row[_S["comp"]]) / (1.0 + _BACKWARD_RATIO)   # FW = comp_w·comp/3
    fw = forward * mf
    bw = forward * _BACKWARD_RATIO * mf                                   # BW = 2·FW
    rec = recomputes[focus] - float(stage_savings[focus]) if n_savings else recomputes[focus]
    rec = rec * mf
    dp = comm_w * float(row[_S["dp"]]) * mf
    dp_reduce = comm_w * float(row[_S["dp_reduce"]]) * mf
    tp = comm_w * float(row[_S["tp"]]) * mf
    ep = comm_w * float(row[_S["ep"]]) * mf
    cp = comm_w * float(row[_S["cp"]]) * mf
    # The bubble is the pipeline less the parts (DP still holding its all-reduce), so that the
    # parts and the bubble sum to the total; then DP_COMM gives DP_REDUCE its share.
    time_sum = dp + tp + ep + cp + fw + bw + rec
    bubble = pipeline - time_sum
    if bubble < 0.0:
        # Never a negative part: the seed's pipeline formula can come out below the straggler's
        # own parts x m -- by rounding at pp = 1 (m x t against the sum of t's parts x m), or where
        # its formula undercounts. A step is at least its straggler's work: ndcost's deliberate
        # difference from upstream (docs/ND_MODEL.md §2.9), the score then being that work.
        bubble = 0.0
        pipeline = time_sum
    dp = dp - dp_reduce
    p2p = 0.0
    if options[_O["p2p"]] == _P2P_MANUAL:
        slowest = times[0]
        for i in range(n_stages):
            if times[i] > slowest:
                slowest = times[i]
        p2p = nd_p2p_time(n_stages, micro_batches, vpp, slowest, float(cand[_C["sp"]]), float(options[_O["p2p_ratio"]]))
    parts[_P["fw_compute"]] = fw
    parts[_P["bw_compute"]] = bw
    parts[_P["recompute"]] = rec
    parts[_P["dp_comm"]] = dp
    parts[_P["dp_reduce"]] = dp_reduce
    parts[_P["tp_comm"]] = tp
    parts[_P["ep_comm"]] = ep
    parts[_P["cp_comm"]] = cp
    parts[_P["pp_comm"]] = p2p
    parts[_P["bubble"]] = bubble
    return pipeline + p2p


def nd_apply_ratios(parts, ratios, out) -> float:
    """Each part × its ratio, a zero part staying exactly 0; returns the score in ms
    (seed apply_regression_coefficients; docs/ND_MODEL.md §2.10, §2.11).

    The sum is taken as ND's real parts: COMP (FW + BW + REC) + DP_WAIT (DP + DP_REDUCE)
    + MP + EP + CP + PP_WAIT (BUBBLE + PP_COMM).
    """
    n = len(PART_NAMES)
    _check_len(parts, "parts", n)
    _check_len(ratios, "ratios", n)
    _check_len(out, "out", n)
    for i in range(n):
        value = float(parts[i])
        out[i] = 0.0 if value == 0.0 else value * float(ratios[i])
    comp = out[_P["fw_compute"]] + out[_P["bw_compute"]] + out[_P["recompute"]]
    dp_wait = out[_P["dp_comm"]] + out[_P["dp_reduce"]]
    pp_wait = out[_P["bubble"]] + out[_P["pp_comm"]]
    return float(comp + dp_wait + out[_P["tp_comm"]] + out[_P["ep_comm"]] + out[_P["cp_comm"]] + pp_wait)
