"""ND's score in ND units, part 1 of 3 (oracle): the ops of one layer -- their loads and recompute factors.

ND's score: op loads and recompute factors (here), the communication walks per stage
(:mod:`ndcost.kernels.nd_comm`), the stage and pipeline combination and the ratios
(:mod:`ndcost.kernels.nd_combine`). Restated from the seed estimate.py (``op_table``, ``_flavour_tables``,
``get_table_quantity``, ``estimate_op_bulk_comp``, ``_save_recompute``). The unit is ND's: FLOPs x bytes
for compute, and a mix of parameter elements (DP without FSDP) and bytes (everything else) for
communication, which only the fitted ratios turn into time (docs/ND_MODEL.md §8.2).
Where ND is odd, these kernels keep ND's behaviour and say so where it happens.

A multimodal model's submodules (a vision tower and the text model) are priced each on
its own config (seed ``_submodule_parts``): every PER-LAYER formula reads the kind's
submodule dimensions (:func:`_sub_dims`: sub_h, sub_a, sub_hff, sub_seq), while the
embedding and output nodes, the FSDP root parts, the DYNAMIC ratio, P2P and the pipeline
stay on the text model's (ND times the stages on ``mm_main``, the text submodule).

Array layouts are the kernel ABI of ``ndcost.kernels.columns``. The twin is
``cysrc/ndcost/kernels/nd_ops.pxi``: same names, same parameters, same order of floating-point operations.
The length checks every ND kernel makes first live here too.
"""
from __future__ import annotations

import math

from .columns import (
    CAND, CAND_FIELDS, HYPER_POLICY_MASK, KIND, KIND_FIELDS, MODEL, MODEL_FIELDS, OPTION_FULL, OPTION_NONE,
    OPTION_SELECTIVE,
)
from ..spec.recompute_spec import SWITCHES
from .codes import ND_OPS

__all__ = ["nd_op_loads", "nd_recompute_factors"]

NAN = math.nan

# ND_OPS (ndcost.kernels.codes): ND's ops of one layer, in the order of every per-op output of these kernels.
(_ATT_MM, _LINREC, _FF_MM, _ATT_BMM, _SOFTMAX, _HEAD_CAST, _GATHER, _FF_ACT, _NORM_OP, _QKNORM, _DROPOUT,
 _DISPATCH) = (ND_OPS.index(name) for name in ("attMM", "linrec", "ffMM", "attBMM", "softmax", "headCast", "gather",
                                                "ffAct", "normOp", "qknorm", "dropout", "dispatch"))
_N_OPS = len(ND_OPS)

#: The keep-mask bit of each recompute switch (seed recompute/profile.py SWITCHES;
#: bit i of a keep mask is SWITCHES[i], set when the op's activation is kept).
_BIT = {name: i for i, name in enumerate(SWITCHES)}
#: Ops with a switch -> the switch's bit. qknorm follows normOp's switch
#: (docs/ND_MODEL.md §2.4 get_recomp_factor); attMM, linrec, ffMM and dispatch have none.
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

#: GDN_CHUNK of the seed: the chunk the gated delta rule runs a sequence in.
_GDN_CHUNK = 64.0
_K, _M, _C = KIND, MODEL, CAND


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
    # The kind's attention flavour (docs/ND_MODEL.md §2.2, seed op_table's `att`).
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
    """Per op, what a recompute re-runs (seed get_recomp_factor + selective_shares, docs/ND_MODEL.md §2.4)."""
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
    """Every op's load for ONE layer of kind *k*, in ``ND_OPS`` order (docs/ND_MODEL.md §2.2, §2.3).

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
