"""ND's score in ND units, part 2 of 3 (oracle): the communication of one body layer and the
compute and communication walks per stage.

Restated from the seed estimate.py (``estimate_stage``) and from ND's ``comm_time.py`` as
docs/ND_MODEL.md §2.5-§2.6 map them; the ops' loads and recompute factors are
:mod:`ndcost.kernels.nd_ops`'. The twin is ``cysrc/ndcost/kernels/nd_comm.pxi``: same names, same
parameters, same order of floating-point operations.
"""
from __future__ import annotations

import math

from .columns import (
    CAND, CAND_FIELDS, KIND, KIND_FIELDS, MODEL, MODEL_FIELDS, OPTION_FULL, OPTION_NONE, OPTION_SELECTIVE, STAGE,
    STAGE_FIELDS,
)
from .nd_ops import (
    _GATHER_BIT, _N_OPS, _at_least_one, _check_len, _check_rows, _op_loads, _recompute_factors, _sub_dims,
)

__all__ = ["nd_fsdp_part_traffic", "nd_stage_sums"]

NAN = math.nan
_K, _M, _C, _S = KIND, MODEL, CAND, STAGE
# --------------------------------------------------------------------------------------
# Communication of one layer (docs/ND_MODEL.md §2.6, comm_time.estimate_from_mem_comm)
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
    """ND's FSDP traffic of one parameter part, (traffic, all-reduce share) into out[0:2] (docs/ND_MODEL.md §2.6).

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
    """The EP degree a kind runs: ND's bind_layer_stack gives a dense kind ep = 1 (docs/ND_MODEL.md §1.5)."""
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
    and what its recompute sends again (docs/ND_MODEL.md §2.6 "Per stage, per layer", "Recompute comm").

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
    """ND's per-stage post-processing as one factor per part (docs/ND_MODEL.md §2.6, steps 2-4):
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
    """ND's compute and communication walks, per stage (docs/ND_MODEL.md §2.5, §2.6).

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
