"""ND's score in ND units (oracle): op loads, recompute factors, the stage walks,
the stage and pipeline combination, and the ratios.

Restated from the seed estimate.py (``op_table``, ``_flavour_tables``,
``get_table_quantity``, ``estimate_op_bulk_comp``, ``estimate_stage``,
``_save_recompute``, ``estimate_pipeline``, ``estimate_p2p``,
``apply_regression_coefficients``) and from ND's ``comm_time.py`` as
ND_REFERENCE §2.6 maps it. The unit is ND's: FLOPs x bytes for compute, and a
mix of parameter elements (DP without FSDP) and bytes (everything else) for
communication, which only the fitted ratios turn into time (ND_REFERENCE §8.2).
Where ND is odd, these kernels keep ND's behaviour and say so where it happens.

A multimodal model's submodules (a vision tower and the text model) are priced each on
its own config (seed ``_submodule_parts``): every PER-LAYER formula reads the kind's
submodule dimensions (:func:`_sub_dims`: sub_h, sub_a, sub_hff, sub_seq), while the
embedding and output nodes, the FSDP root parts, the DYNAMIC ratio, P2P and the pipeline
stay on the text model's (ND times the stages on ``mm_main``, the text submodule).

Array layouts are the kernel ABI of ``ndcost._columns``. The twin is
``cysrc/ndcost/kernels/nd_ops.pxi``, ``nd_comm.pxi`` and ``nd_combine.pxi``: same names,
same parameters, same order of floating-point operations.
"""
from __future__ import annotations

import math

from .._columns import (
    CAND, CAND_FIELDS, HYPER_POLICY_MASK, KIND, KIND_FIELDS, MODEL, MODEL_FIELDS, ND_OPTION, ND_OPTION_FIELDS,
    OPTION_FULL, OPTION_NONE, OPTION_SELECTIVE, PART, PART_NAMES, STAGE, STAGE_FIELDS,
)
from ..recompute_spec import SWITCHES
from .pipeline import nd_p2p_time, nd_pipeline_time, nd_straggler

__all__ = [
    "nd_op_loads",
    "nd_recompute_factors",
    "nd_fsdp_part_traffic",
    "nd_stage_sums",
    "nd_combine",
    "nd_apply_ratios",
]

NAN = math.nan

#: ND's ops of one layer, in the order of every per-op output of these kernels
#: (the entries of the seed's op_table plus the MoE dispatch of _flavour_tables).
ND_OPS = (
    "attMM", "linrec", "ffMM", "attBMM", "softmax", "headCast",
    "gather", "ffAct", "normOp", "qknorm", "dropout", "dispatch",
)
(_ATT_MM, _LINREC, _FF_MM, _ATT_BMM, _SOFTMAX, _HEAD_CAST,
 _GATHER, _FF_ACT, _NORM_OP, _QKNORM, _DROPOUT, _DISPATCH) = range(len(ND_OPS))
_N_OPS = len(ND_OPS)

#: The keep-mask bit of each recompute switch (seed recompute/profile.py SWITCHES;
#: bit i of a keep mask is SWITCHES[i], set when the op's activation is kept).
_BIT = {name: i for i, name in enumerate(SWITCHES)}
#: Ops with a switch -> the switch's bit. qknorm follows normOp's switch
#: (ND_REFERENCE §2.4 get_recomp_factor); attMM, linrec, ffMM and dispatch have none.
_OP_SWITCH_BIT = {
    _ATT_BMM: _BIT["attBMM"],
    _HEAD_CAST: _BIT["headCast"],
    _DROPOUT: _BIT["dropout"],
    _SOFTMAX: _BIT["softmax"],
    _NORM_OP: _BIT["normOp"],
    _QKNORM: _BIT["normOp"],
    _GATHER: _BIT["gather"],
    _FF_ACT: _BIT["ffAct"],
}
_GATHER_BIT = _BIT["gather"]
_ATT_UP_BIT = _BIT["attUp"]

# ND's estimator option codes (ND_REFERENCE §2.7; nd_tables.RATIO_TYPES / REC_TYPES).
_RATIO_DYNAMIC, _RATIO_STATIC, _RATIO_COMPUTE_ONLY, _RATIO_COMM_ONLY = 0, 1, 2, 3
_REC_WITH, _REC_NONE, _REC_COMPUTE_ONLY, _REC_COMM_ONLY = 0, 1, 2, 3
_P2P_MANUAL = 1
#: BACKWARD_RATIO of the seed: backward = 2 x forward, so a pass is 1 + 2 forwards.
_BACKWARD_RATIO = 2.0
#: GDN_CHUNK of the seed: the chunk the gated delta rule runs a sequence in.
_GDN_CHUNK = 64.0
#: Micro-batch and virtual-stage counts beyond this are refused as NaN, so that
#: the twin's integer conversion can never overflow.
_MAX_COUNT = 2.0 ** 31

_K, _M, _C, _O, _P, _S = KIND, MODEL, CAND, ND_OPTION, PART, STAGE


def _check_len(array, name: str, expected: int) -> None:
    if len(array) != expected:
        raise ValueError(f"{name} must have length {expected}, got {len(array)}")


def _check_rows(array, name: str, width: int) -> int:
    """Rows of a 2-D input whose rows must all have *width* entries."""
    rows = len(array)
    for r in range(rows):
        if len(array[r]) != width:
            raise ValueError(f"{name} must have {width} columns, got {len(array[r])}")
    return rows


def _check_kind_index(k, n_kinds: int, name: str) -> None:
    if not 0 <= k < n_kinds:
        raise ValueError(f"{name} must be a kind row in [0, {n_kinds}), got {k}")


def _at_least_one(x: float) -> float:
    """ND's max(1, x) (x NaN gives 1, as Python's max(1, nan))."""
    return x if x > 1.0 else 1.0


def _weigh(count: float, load: float, scale: float) -> float:
    """An op's entry times its count; a zero count contributes exactly 0 (no 0·inf)."""
    if count == 0.0:
        return 0.0
    return count * (load * scale)


# --------------------------------------------------------------------------------------
# The submodule a layer belongs to
# --------------------------------------------------------------------------------------

def _sub_dims(kind, model, cand):
    """(h, a, hff, s) of the submodule a body layer of *kind* belongs to: ND's cfg.h, cfg.a,
    cfg.hff and cfg.s of the submodule's own config (seed _submodule_parts prices each
    submodule on its copy). A text kind carries the model's values; a vision-tower kind its own.

    sub_seq ≤ 0 (or NaN) means the candidate's s, as the ABI says. sub_h, sub_a and sub_hff of
    exactly 0 mean the model's h, a and hff: a zero width is no submodule (a table written
    before these columns existed); NaN or a negative value passes through (NaN loads).
    """
    sub_h, sub_a, sub_hff = float(kind[_K["sub_h"]]), float(kind[_K["sub_a"]]), float(kind[_K["sub_hff"]])
    sub_seq = float(kind[_K["sub_seq"]])
    h = sub_h if sub_h != 0.0 else float(model[_M["h"]])
    heads = sub_a if sub_a != 0.0 else float(model[_M["a"]])
    hff = sub_hff if sub_hff != 0.0 else float(model[_M["hff"]])
    s = sub_seq if sub_seq > 0.0 else float(cand[_C["s"]])
    return h, heads, hff, s


# --------------------------------------------------------------------------------------
# Compute: per-op loads and recompute factors of one layer
# --------------------------------------------------------------------------------------

def _op_loads(kind, model, cand, out) -> None:
    """One layer of *kind*: every op's load x its count x bytes_p/t/cp (seed op_table + _flavour_tables).

    Every cfg.h, cfg.a, cfg.hff and cfg.s of the seed's table is the layer's SUBMODULE's
    (:func:`_sub_dims`): h in attMM, the default head dim h/a, ffMM, gather, normOp, dropout
    and dispatch; the heads in softmax, headCast and dropout; hff in a dense ffMM/ffAct; s in
    every entry. b, t, sp, cp, bytes_p and the MoE constants are the run's / the model's.
    """
    b = float(cand[_C["b"]])
    t, sp, cp = float(cand[_C["t"]]), float(cand[_C["sp"]]), float(cand[_C["cp"]])
    h, heads, hff, s = _sub_dims(kind, model, cand)
    a = float(kind[_K["att_a"]])
    if not (t > 0.0 and cp > 0.0 and sp > 0.0 and a > 0.0):
        for op in range(_N_OPS):
            out[op] = NAN
        return
    # The kind's attention flavour (ND_REFERENCE §2.2, seed op_table's `att`).
    n_kv = float(kind[_K["att_n_kv"]])
    att_dh = float(kind[_K["att_dh"]])
    d_h = att_dh if att_dh != 0.0 else h / a                            # head dim: dh or h/a
    d_q = a * d_h                                                       # query width
    g = 2.0 if kind[_K["att_gate"]] != 0.0 else 1.0                     # a fused output gate doubles Q
    qk_nope = float(kind[_K["qk_nope"]])
    d_qk = (qk_nope if qk_nope != 0.0 else d_h) + float(kind[_K["dhr"]])  # a head's query/key width

    # §2.2 n_attMM: Q and O h x d_q each (Q doubled by a gate), K and V h x n_kv·d_h.
    att_mm = 1.5 * b * s * h * ((g + 1.0) * d_q + 2.0 * n_kv * d_h)
    if kind[_K["is_mla"]] != 0.0:
        # §2.2 MLA: 6·b·s·W/(n_attMM or 4), W = every attention weight (mla_weights). ND reads
        # n_attMM off the model config (the default kind's count); ndcost the kind's own.
        n_att = float(kind[_K["n_attMM"]])
        att_mm = 6.0 * b * s * float(kind[_K["mla_w"]]) / (n_att if n_att != 0.0 else 4.0)
    # §2.2 n_linrec: the chunked gated delta rule, only for a kind that declares it.
    n_v, d_k, d_v = float(kind[_K["lin_n_v"]]), float(kind[_K["lin_d_k"]]), float(kind[_K["lin_d_v"]])
    linrec = 0.0
    if n_v * d_k * d_v != 0.0:
        linrec = 3.0 * b * s * n_v * (2.0 * _GDN_CHUNK * (3.0 * d_k + 2.0 * d_v) + 6.0 * d_k * d_v)
    # §2.2 n_attBMM: scores (d_qk) and weights x values (d_h), every head of the kind.
    att_bmm = 3.0 * b * s * s * a * (d_qk + d_h)
    # §2.2 n_softmax / n_headCast / n_dropout take cfg.a, not att.a: the SUBMODULE's heads.
    softmax = 13.0 * heads * b * s * s
    head_cast = 3.0 * heads * b * s * s
    gather = b * s * h * (t - 1.0)                                      # §2.2 n_gather
    norm_op = 30.0 * b * s * h * t / sp                                 # §2.2 n_normOp
    qknorm = 30.0 * b * s * (a + n_kv) * d_h                            # §2.2 n_qknorm (QK-norm heads)
    ts = 3.0 * h * t / sp
    dropout = 3.0 * b * s * (heads * s if heads * s > ts else ts)       # §2.2 n_dropout: max(a·s, 3·h·t/sp)
    dispatch = 0.0
    if kind[_K["is_moe"]] != 0.0:
        # §2.3 expert table: the experts a token runs plus the shared ones (as wide as a routed
        # one), and the router (and shared gate) spread over the kind's FFN matmuls.
        n_shared = float(model[_M["n_shared"]])
        n_chosen = _at_least_one(float(model[_M["n_chosen"]]))
        n_ffmm = float(kind[_K["n_ffMM"]])
        n_ff = n_ffmm if n_ffmm != 0.0 else 3.0
        gate = 1.0 if (n_shared != 0.0 and model[_M["shared_gate"]] != 0.0) else 0.0
        experts = float(model[_M["hff_exp"]]) * (n_chosen * float(cand[_C["cap_fact"]]) + n_shared)
        width = experts + (float(model[_M["n_exp"]]) + gate) / n_ff
        ff_mm = 6.0 * b * s * h * width                                 # exp n_ffMM (= base·width/hff), sub h
        ff_act = 21.0 * b * s * experts                                 # exp n_ffAct (= base·experts/hff)
        # §2.3 dispatch: MOE_DISPATCH·b·s·h·max(1, n_chosen)·max(1, ep), linear in EP (not EP−1);
        # the tokens and width are the submodule's (cfg.s, cfg.h of its config).
        dispatch = (float(cand[_C["moe_dispatch"]]) * b * s * h * n_chosen
                    * _at_least_one(float(cand[_C["ep"]])))
    else:
        # A dense kind runs cfg.hff (seed op_table), not the kind's ffn_width: the SUBMODULE's hff.
        ff_mm = 6.0 * b * s * h * hff                                   # §2.2 n_ffMM
        ff_act = 21.0 * b * s * hff                                     # §2.2 n_ffAct
    # Every entry x bytes_p/t/cp (§2.2), then x the kind's op count (§2.4 get_table_quantity).
    scale = float(cand[_C["bytes_p"]]) / t / cp
    out[_ATT_MM] = _weigh(float(kind[_K["n_attMM"]]), att_mm, scale)
    out[_LINREC] = _weigh(float(kind[_K["n_linrec"]]), linrec, scale)
    out[_FF_MM] = _weigh(float(kind[_K["n_ffMM"]]), ff_mm, scale)
    out[_ATT_BMM] = _weigh(float(kind[_K["n_attBMM"]]), att_bmm, scale)
    out[_SOFTMAX] = _weigh(float(kind[_K["n_softmax"]]), softmax, scale)
    out[_HEAD_CAST] = _weigh(float(kind[_K["n_headCast"]]), head_cast, scale)
    out[_GATHER] = _weigh(float(kind[_K["n_gather"]]), gather, scale)
    out[_FF_ACT] = _weigh(float(kind[_K["n_ffAct"]]), ff_act, scale)
    out[_NORM_OP] = _weigh(float(kind[_K["n_normOp"]]), norm_op, scale)
    out[_QKNORM] = _weigh(float(kind[_K["n_qknorm"]]), qknorm, scale)
    out[_DROPOUT] = _weigh(float(kind[_K["n_dropout"]]), dropout, scale)
    out[_DISPATCH] = _weigh(float(kind[_K["n_dispatch"]]), dispatch, scale)


def _recompute_factors(kind, option: int, keep_mask: int, out) -> None:
    """Per op, what a recompute re-runs (seed get_recomp_factor + selective_shares, ND_REFERENCE §2.4)."""
    if option == OPTION_FULL:
        for op in range(_N_OPS):
            out[op] = 1.0
        return
    if option != OPTION_SELECTIVE:
        fill = 0.0 if option == OPTION_NONE else NAN
        for op in range(_N_OPS):
            out[op] = fill
        return
    for op in range(_N_OPS):
        bit = _OP_SWITCH_BIT.get(op)
        # SEL: 1 − switch (1 keeps the activation); an op without a switch is kept.
        out[op] = 0.0 if bit is None else 1.0 - ((keep_mask >> bit) & 1)
    census_att = float(kind[_K["census_att"]])
    if keep_mask == HYPER_POLICY_MASK and census_att >= 0.0:
        # selective_shares: a kind with a census running HyperParallel's policy re-runs the census'
        # shares of its projection matmuls (attention and FFN); every other op keeps its switch.
        out[_ATT_MM] = census_att
        out[_FF_MM] = float(kind[_K["census_ffn"]])
    elif kind[_K["is_mla"]] != 0.0 and not (keep_mask >> _ATT_UP_BIT) & 1:
        # MLA with attUp recomputed: attMM re-runs the up-projections' share up/W.
        w = float(kind[_K["mla_w"]])
        out[_ATT_MM] = float(kind[_K["mla_up"]]) / w if w > 0.0 else NAN


def nd_op_loads(kinds, model, cand, k, out) -> None:
    """Every op's load for ONE layer of kind *k*, in ``ND_OPS`` order (ND_REFERENCE §2.2, §2.3).

    Each entry is already multiplied by the kind's op count and by bytes_p/t/cp; an op of
    count 0 is exactly 0. t, cp, sp or the kind's heads ≤ 0 give NaN everywhere.
    """
    n_kinds = _check_rows(kinds, "kinds", len(KIND_FIELDS))
    _check_len(model, "model", len(MODEL_FIELDS))
    _check_len(cand, "cand", len(CAND_FIELDS))
    _check_len(out, "out", _N_OPS)
    _check_kind_index(k, n_kinds, "k")
    _op_loads(kinds[k], model, cand, out)


def nd_recompute_factors(kinds, k, option, keep_mask, out) -> None:
    """Per op (``ND_OPS`` order) the factor f of a layer of kind *k* run as *option* with *keep_mask*.

    FULL: 1; NONE: 0; SELECTIVE: 1 − switch for ops with a switch, 0 for the others; at keep
    mask HYPER_POLICY_MASK on a kind with a census (census_att ≥ 0), census_att for attMM and
    census_ffn for ffMM; else mla_up/mla_w for attMM on an MLA kind whose attUp (bit 7) is
    recomputed. An unknown option gives NaN. A layer costs Σ load plainly and Σ (1 + f)·load recomputed.
    """
    n_kinds = _check_rows(kinds, "kinds", len(KIND_FIELDS))
    _check_len(out, "out", _N_OPS)
    _check_kind_index(k, n_kinds, "k")
    _recompute_factors(kinds[k], option, keep_mask, out)


# --------------------------------------------------------------------------------------
# Communication of one layer (ND_REFERENCE §2.6, comm_time.estimate_from_mem_comm)
# --------------------------------------------------------------------------------------

def _part_traffic(size, computed, kept, group, gathers, reduces, bytes_p, bytes_grad):
    """ND's fsdp_traffic for one part: (traffic, its all-reduce share) in bytes (§2.6)."""
    if size == 0.0:
        return 0.0, 0.0                     # a part of no parameters sends nothing
    if not (computed > 0.0 and kept > 0.0):
        return NAN, NAN
    whole = size / computed                 # the part as one rank computes it
    shards = _at_least_one(kept / computed)  # shards of a computed copy
    copies = _at_least_one(group / kept)    # copies of a shard
    gather_scatter = (shards - 1.0) / shards * whole * (gathers * bytes_p + bytes_grad)  # all-gathers + reduce-scatter
    all_reduce = 2.0 * (copies - 1.0) / copies * (whole / shards) * bytes_grad * reduces  # all-reduce among copies
    return gather_scatter + all_reduce, all_reduce


def nd_fsdp_part_traffic(size, computed, kept, group, gathers, reduces, bytes_p, bytes_grad, out) -> None:
    """ND's FSDP traffic of one parameter part, (traffic, all-reduce share) into out[0:2] (ND_REFERENCE §2.6).

    whole = size/computed, shards = max(1, kept/computed), copies = max(1, group/kept);
    traffic = (shards−1)/shards·whole·(gathers·bytes_p + bytes_grad)
            + 2·(copies−1)/copies·(whole/shards)·bytes_grad·reduces, the second term being the
    all-reduce share. A part of size 0 sends nothing; computed or kept ≤ 0 gives NaN.
    """
    if len(out) < 2:
        raise ValueError(f"out must have length at least 2, got {len(out)}")
    traffic, share = _part_traffic(float(size), float(computed), float(kept), float(group),
                                   float(gathers), float(reduces), float(bytes_p), float(bytes_grad))
    out[0] = traffic
    out[1] = share


def _kind_ep(kind, cand) -> float:
    """The EP degree a kind runs: ND's bind_layer_stack gives a dense kind ep = 1 (ND_REFERENCE §1.5)."""
    return float(cand[_C["ep"]]) if kind[_K["is_moe"]] != 0.0 else 1.0


def _dp_layer(kind, cand, ep_k):
    """DP traffic of one body layer, priced as NOT_REC: (traffic, all-reduce share) (§2.6 DP term)."""
    t, cp, t_exp = float(cand[_C["t"]]), float(cand[_C["cp"]]), float(cand[_C["t_exp"]])
    non_exp = float(kind[_K["p_nonexp"]])
    routed = float(kind[_K["p_routed_base"]]) / t_exp       # ND's routed count, etp = t_exp
    shared = float(kind[_K["p_shared"]])
    if cand[_C["fsdp"]] != 0.0:
        # Under FSDP (grad_shard_as_params): fsdp_traffic over three parts, in bytes.
        d, d_exp, m = float(cand[_C["d"]]), float(cand[_C["d_exp"]]), float(cand[_C["m"]])
        bytes_p, bytes_grad = float(cand[_C["bytes_p"]]), float(cand[_C["bytes_grad"]])
        shard_nonexp = float(cand[_C["shard_nonexp_partial"]])
        gathers = 2.0 if cand[_C["reshard"]] != 0.0 else 1.0 / m   # _fsdp_rounds: body layer
        reduces = 1.0 / m if shard_nonexp > t * cp else 1.0       # FSDP shards: once a step
        tr_ne, ar_ne = _part_traffic(non_exp, t, shard_nonexp, d * cp * t,
                                     gathers, reduces, bytes_p, bytes_grad)            # non-expert
        tr_r, ar_r = _part_traffic(routed / ep_k, t_exp, float(cand[_C["shard_exp"]]), d_exp * cp * t_exp,
                                   gathers, reduces, bytes_p, bytes_grad)              # routed experts
        tr_s, ar_s = _part_traffic(shared, t_exp, float(cand[_C["shard_exp_partial"]]), d * cp * t_exp,
                                   gathers, reduces, bytes_p, bytes_grad)              # shared experts
        return tr_ne + tr_r + tr_s, ar_ne + ar_r + ar_s
    # Without FSDP: dp_comm_layer, parameter ELEMENT counts (ND's mixed units, §8.2). Plain DDP
    # (comm_d_* = 0) sends nothing here: ND prices no DP traffic for it, and this ZeRO path has
    # no all-reduce share, so its DP_REDUCE is 0.
    mode_ne, mode_e = cand[_C["comm_d_non_exp"]], cand[_C["comm_d_exp"]]
    dp_ne = 0.0
    if mode_ne == 2.0:
        dp_ne = non_exp / (cp * t) + non_exp / t             # ZeRO-2: optimizer shard + gradients
    elif mode_ne == 3.0:
        dp_ne = non_exp / t                                  # gradient shard
    experts = routed + shared
    dp_e = 0.0
    if mode_e == 2.0:
        dp_e = experts / (cp * t_exp * ep_k) + experts / (ep_k if ep_k > t_exp else t_exp)
    elif mode_e == 3.0:
        dp_e = experts / (cp * t_exp * ep_k)
    return dp_ne + dp_e, 0.0


def _tp_volume(kind, model, cand, ep_k, h, s) -> float:
    """TP volume of one layer of *kind* with rec_coeff 1 (§2.6 tp_comm_layer, mb = 1).

    *h* and *s* are cfg.h and cfg.s of the config it runs on: a body layer's submodule's,
    the embedding and output nodes' the text model's (they run on the model config).
    """
    b = float(cand[_C["b"]])
    n_gather = float(kind[_K["n_gather"]])
    if kind[_K["is_moe"]] != 0.0:
        # ND's oddity kept: the MoE non-expert term is h·h·bytes_c, where the dense one is s·b·h.
        bytes_c = float(cand[_C["bytes_c"]])
        hff_exp = float(model[_M["hff_exp"]])
        non_exp = 0.25 * n_gather * h * h * bytes_c * float(kind[_K["n_attMM"]])
        expert = (0.25 * n_gather * h * bytes_c * float(kind[_K["n_ffMM"]])
                  * (float(model[_M["n_exp"]]) / ep_k * hff_exp + float(model[_M["n_shared"]]) * hff_exp))
    else:
        non_exp = 0.25 * n_gather * s * b * h                          # non-expert
        # "expert": the dense FFN at cfg.hff of the layer's config, which the kind's own ffn_width
        # already is (bind_layer_stack gives a dense text kind the model's hff; a tower kind its own).
        expert = 0.25 * n_gather * s * b * float(kind[_K["ffn_width"]])
    return (non_exp + expert) * float(cand[_C["comm_t"]]) / float(cand[_C["cp"]])


def _ep_volume(model, cand, ep_k, h, s) -> float:
    """EP bytes of one layer, dispatch + combine (§2.6 ep_comm_layer, mb = 1); *h* and *s* as
    :func:`_tp_volume`'s (the tokens a rank sends and their width)."""
    if ep_k <= 1.0 or cand[_C["comm_ep"]] == 0.0:
        return 0.0
    local = float(cand[_C["ep_local_tokens"]])
    if not local > 0.0:
        local = float(model[_M["n_chosen"]]) * s * float(cand[_C["b"]]) / float(cand[_C["cp"]])
    cross = local * (ep_k - 1.0) / ep_k                      # tokens leaving the rank
    return cross * h * float(cand[_C["bytes_c"]]) * 2.0


def _cp_volume(kind, model, cand, rf, h, s) -> float:
    """CP volume of one body layer (§2.6 cp_comm_layer_detailed(...).comm_volume); *h* and *s*
    are its submodule's cfg.h and cfg.s (CP is priced for body layers only)."""
    if cand[_C["cp_ring"]] != 0.0:
        coef = 2.0 * 0.5 * rf + 0.5                          # ring (colossalai_cp)
    else:
        coef = 0.5 * rf + 0.5                                # Ulysses
    b = float(cand[_C["b"]])
    attention = coef * float(kind[_K["n_attMM"]]) * h                       # attention exchange
    ffn = float(kind[_K["n_ffMM"]]) * float(kind[_K["ffn_width"]])           # FFN term (the kind's own width)
    return float(cand[_C["comm_cp"]]) * 2.0 * s * b * (attention + ffn) / float(cand[_C["t"]])


def _layer_comm(kind, model, cand, option, keep_mask):
    """One body layer of *kind* run as *option*: its comm before the per-stage multipliers,
    and what its recompute sends again (ND_REFERENCE §2.6 "Per stage, per layer", "Recompute comm").

    Returns (dp, dp_reduce, tp, ep, cp, resent_tp, resent_ep, resent_cp).
    The TP, EP and CP volumes (and so what recompute re-sends) take the layer's SUBMODULE's
    h and s (ND walks each submodule on its own config); DP counts parameters, which the
    kind table already holds per kind.
    """
    ep_k = _kind_ep(kind, cand)
    h, _, _, s = _sub_dims(kind, model, cand)
    # DP: every option is priced as NOT_REC (ctx.current_node = NOT_REC for the DP term).
    dp, dp_reduce = _dp_layer(kind, cand, ep_k)
    full = option == OPTION_FULL
    selective = option == OPTION_SELECTIVE
    gather_kept = float((keep_mask >> _GATHER_BIT) & 1)
    # TP: rec_coeff(SEL?, gather) = the gather switch on a selective layer, 1 otherwise. ND reuses
    # the memory-buffer coefficient here, so a SEL layer that recomputes its gather prices no TP.
    tp_full = _tp_volume(kind, model, cand, ep_k, h, s)
    tp = (gather_kept if selective else 1.0) * tp_full
    ep = _ep_volume(model, cand, ep_k, h, s)
    # CP: rf = (not SEL or gather kept)·(p == 1).
    rf = (gather_kept if selective else 1.0) * (1.0 if cand[_C["p"]] == 1.0 else 0.0)
    cp = _cp_volume(kind, model, cand, rf, h, s)
    # _recomputed_comm: FULL sends its whole TP and EP again and half its CP (the forward
    # exchange); SEL only what the gather switch drops, and half its CP only when the gather is
    # recomputed. Parameter traffic is never re-sent.
    if full:
        return dp, dp_reduce, tp, ep, cp, tp_full, ep, 0.5 * cp
    if selective:
        return dp, dp_reduce, tp, ep, cp, tp_full * (1.0 - gather_kept), 0.0, (0.5 * cp if gather_kept == 0.0 else 0.0)
    if option == OPTION_NONE:
        return dp, dp_reduce, tp, ep, cp, 0.0, 0.0, 0.0
    return dp, dp_reduce, tp, ep, cp, NAN, NAN, NAN


def _floor(x: float) -> float:
    return float(math.floor(x)) if math.isfinite(x) else x


def _stage_multipliers(cand):
    """ND's per-stage post-processing as one factor per part (ND_REFERENCE §2.6, steps 2-4):
    TP ×= max(1, ⌊t/dpn⌋), EP ×= max(1, ⌊ep/dpn⌋), CP ×= max(1, ⌊cp/dpn⌋); DP ×= 1 − dp_overlap,
    TP ×= 1 − tp_overlap; on A3 every part /2. Returns (f_dp, f_tp, f_ep, f_cp).
    """
    dpn = float(cand[_C["dpn"]])
    a3 = 0.5 if cand[_C["is_a3"]] != 0.0 else 1.0
    f_dp = (1.0 - float(cand[_C["dp_overlap"]])) * a3
    f_tp = _at_least_one(_floor(float(cand[_C["t"]]) / dpn)) * (1.0 - float(cand[_C["tp_overlap"]])) * a3
    f_ep = _at_least_one(_floor(float(cand[_C["ep"]]) / dpn)) * a3
    f_cp = _at_least_one(_floor(float(cand[_C["cp"]]) / dpn)) * a3
    return f_dp, f_tp, f_ep, f_cp


def _cand_ok(cand) -> bool:
    """Every divisor of the walks is positive (NaN fails)."""
    return all(float(cand[_C[name]]) > 0.0 for name in ("t", "cp", "sp", "t_exp", "ep", "dpn", "m"))


def nd_stage_sums(kinds, model, cand, counts, slot_option, slot_mask, emb_stage, out_stage, out) -> None:
    """ND's compute and communication walks, per stage (ND_REFERENCE §2.5, §2.6).

    counts[s, k·O + o]: the layers of kind k running option slot o on stage s (chunks summed);
    slot o runs ``slot_option[o]`` with ``slot_mask[o]``. emb_stage/out_stage: the stage holding
    the embedding/output layer, −1 for none. out[s] is written with STAGE_FIELDS: comp and
    recomp (compute, plain and recomputed), dp (including dp_reduce), dp_reduce, tp, ep, cp
    (after the per-stage multipliers) and recomm (the comm total with what recompute re-sends).
    A non-positive t, cp, sp, t_exp, ep, dpn or m gives NaN everywhere.
    """
    n_kinds = _check_rows(kinds, "kinds", len(KIND_FIELDS))
    _check_len(model, "model", len(MODEL_FIELDS))
    _check_len(cand, "cand", len(CAND_FIELDS))
    n_slots = len(slot_option)
    _check_len(slot_mask, "slot_mask", n_slots)
    n_stages = _check_rows(counts, "counts", n_kinds * n_slots)
    if _check_rows(out, "out", len(STAGE_FIELDS)) != n_stages:
        raise ValueError(f"out must have {n_stages} rows (one per row of counts), got {len(out)}")
    if emb_stage >= n_stages:
        raise ValueError(f"emb_stage must be -1 or a stage in [0, {n_stages}), got {emb_stage}")
    if out_stage >= n_stages:
        raise ValueError(f"out_stage must be -1 or a stage in [0, {n_stages}), got {out_stage}")
    has_nodes = emb_stage >= 0 or out_stage >= 0
    default_kind = float(model[_M["default_kind"]])
    if has_nodes and not (0.0 <= default_kind < n_kinds and default_kind == math.floor(default_kind)):
        raise ValueError(f"model[default_kind] must be a kind row in [0, {n_kinds}), got {default_kind}")

    n_fields = len(STAGE_FIELDS)
    if not _cand_ok(cand):
        for st in range(n_stages):
            for f in range(n_fields):
                out[st][f] = NAN
        return
    for st in range(n_stages):
        for f in range(n_fields):
            out[st][f] = 0.0
    f_dp, f_tp, f_ep, f_cp = _stage_multipliers(cand)
    c_comp, c_recomp, c_dp, c_red = _S["comp"], _S["recomp"], _S["dp"], _S["dp_reduce"]
    c_tp, c_ep, c_cp, c_recomm = _S["tp"], _S["ep"], _S["cp"], _S["recomm"]

    # Body layers: price each (kind, option slot) once, then weigh it by its count on each stage.
    loads = [0.0] * _N_OPS
    factors = [0.0] * _N_OPS
    for k in range(n_kinds):
        kind = kinds[k]
        have_loads = False
        for o in range(n_slots):
            col = k * n_slots + o
            if all(counts[st][col] == 0.0 for st in range(n_stages)):
                continue
            if not have_loads:
                _op_loads(kind, model, cand, loads)
                have_loads = True
            option, keep_mask = int(slot_option[o]), int(slot_mask[o])
            _recompute_factors(kind, option, keep_mask, factors)
            # §2.4 get_table_quantity: plain Σ load; recomputed Σ (1 + f)·load over the ops it has.
            plain = 0.0
            recomputed = 0.0
            for op in range(_N_OPS):
                load = loads[op]
                plain += load
                if load != 0.0:
                    recomputed += (1.0 + factors[op]) * load
            dp, dp_reduce, tp, ep, cp, re_tp, re_ep, re_cp = _layer_comm(kind, model, cand, option, keep_mask)
            resent = f_tp * re_tp + f_ep * re_ep + f_cp * re_cp   # re-sent volume, after the multipliers
            for st in range(n_stages):
                count = float(counts[st][col])
                if count == 0.0:
                    continue
                row = out[st]
                row[c_comp] += count * plain
                row[c_recomp] += count * recomputed
                row[c_dp] += count * dp
                row[c_red] += count * dp_reduce
                row[c_tp] += count * tp
                row[c_ep] += count * ep
                row[c_cp] += count * cp
                row[c_recomm] += count * resent

    # The embedding and output nodes: priced on the model config, i.e. as a layer of the default
    # kind, rec_coeff 1. ND adds their TP and, as ep_comm_layer ignores the node, their EP too;
    # no CP; DP only for FSDP's root parts.
    if has_nodes:
        b, s, t, cp_deg = float(cand[_C["b"]]), float(cand[_C["s"]]), float(cand[_C["t"]]), float(cand[_C["cp"]])
        h, v = float(model[_M["h"]]), float(model[_M["v"]])
        node = kinds[int(default_kind)]
        node_ep_k = _kind_ep(node, cand)
        # The nodes run on the text model's config: model h and the candidate's s, whatever
        # the default kind's submodule columns say (they are the text model's anyway).
        node_tp = _tp_volume(node, model, cand, node_ep_k, h, s)
        node_ep = _ep_volume(model, cand, node_ep_k, h, s)
        fsdp = cand[_C["fsdp"]] != 0.0
        m = float(cand[_C["m"]])
        bytes_p, bytes_grad = float(cand[_C["bytes_p"]]), float(cand[_C["bytes_grad"]])
        shard_nonexp = float(cand[_C["shard_nonexp_partial"]])
        root_gathers = 1.0 if cand[_C["reshard"]] != 0.0 else 1.0 / m   # _fsdp_rounds: root
        reduces = 1.0 / m if shard_nonexp > t * cp_deg else 1.0
        d = float(cand[_C["d"]])
        if emb_stage >= 0:
            row = out[emb_stage]
            row[c_tp] += node_tp
            row[c_ep] += node_ep
            # FSDP root part: the embedding (h·v over shard_embed/gather_embed, sharded over
            # shard_embed, held by d·that); none when tied to the output with p ≤ 1.
            if fsdp and not (cand[_C["tie_emb"]] != 0.0 and cand[_C["p"]] <= 1.0):
                shard_embed, gather_embed = float(cand[_C["shard_embed"]]), float(cand[_C["gather_embed"]])
                computed = shard_embed / gather_embed if gather_embed > 0.0 else NAN
                traffic, share = _part_traffic(h * v, computed, shard_embed, d * computed,
                                               root_gathers, reduces, bytes_p, bytes_grad)
                row[c_dp] += traffic
                row[c_red] += share
        if out_stage >= 0:
            row = out[out_stage]
            # §2.5 output layer: (1 if dc_kv == 0 else n_mtp)·(1/16)·6·b·v·h·s·bytes_p/t, not /cp,
            # the same with and without recompute. ND's oddity kept: on an MLA model the output
            # counts n_mtp times (0 times without MTP layers).
            dc_kv = float(model[_M["dc_kv"]])
            copies = 1.0 if dc_kv == 0.0 else float(model[_M["n_mtp"]])
            output = copies * (1.0 / 16.0) * 6.0 * b * v * h * s * bytes_p / t   # 1/16: bias_imbalance
            row[c_comp] += output
            row[c_recomp] += output
            row[c_tp] += node_tp
            row[c_ep] += node_ep
            if fsdp:
                # FSDP root part: the output (h·v + v over t, sharded like the non-expert part).
                traffic, share = _part_traffic(h * v + v, t, shard_nonexp, d * cp_deg * t,
                                               root_gathers, reduces, bytes_p, bytes_grad)
                row[c_dp] += traffic
                row[c_red] += share

    # §2.6 per-stage post-processing; dp_reduce is part of dp and takes dp's factor.
    for st in range(n_stages):
        row = out[st]
        row[c_dp] *= f_dp
        row[c_red] *= f_dp
        row[c_tp] *= f_tp
        row[c_ep] *= f_ep
        row[c_cp] *= f_cp
        # Stage comm = TP + DP + EP + CP; with recompute, plus what recompute sends again.
        row[c_recomm] = row[c_tp] + row[c_dp] + row[c_ep] + row[c_cp] + row[c_recomm]


# --------------------------------------------------------------------------------------
# Stage, pipeline and P2P (ND_REFERENCE §2.7-§2.10)
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
    _save_recompute, estimate_pipeline, estimate_p2p; ND_REFERENCE §2.7-§2.10).

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
        # difference from upstream (ND_REFERENCE §2.9), the score then being that work.
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
    (seed apply_regression_coefficients; ND_REFERENCE §2.10, §2.11).

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
