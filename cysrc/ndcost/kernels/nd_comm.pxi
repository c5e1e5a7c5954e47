# ND's score in ND units, part 2 of 3 (twin of ndcost/kernels/nd_comm.py): the communication of one
# body layer (docs/ND_MODEL.md §2.6) and the compute and communication walks per stage (§2.5,
# §2.6). Needs kernels/columns.pxi and kernels/nd_ops.pxi included before it.

from libc.math cimport floor

# Fields of one layer's comm (c_nd_layer_comm's output).
cdef enum:
    LC_dp = 0
    LC_dp_reduce = 1
    LC_tp = 2
    LC_ep = 3
    LC_cp = 4
    LC_re_tp = 5
    LC_re_ep = 6
    LC_re_cp = 7
    LC_COUNT = 8


cdef inline double c_nd_part_traffic(double size, double computed, double kept, double group,
                                     double gathers, double reduces, double bytes_p, double bytes_grad,
                                     double* all_reduce_share) noexcept nogil:
    # ND's fsdp_traffic for one part, in bytes; its all-reduce share into *all_reduce_share (§2.6).
    cdef double whole, shards, copies, gather_scatter, all_reduce
    if size == 0.0:
        all_reduce_share[0] = 0.0                   # a part of no parameters sends nothing
        return 0.0
    if not (computed > 0.0 and kept > 0.0):
        all_reduce_share[0] = NAN
        return NAN
    whole = size / computed                         # the part as one rank computes it
    shards = c_nd_at_least_one(kept / computed)     # shards of a computed copy
    copies = c_nd_at_least_one(group / kept)        # copies of a shard
    gather_scatter = (shards - 1.0) / shards * whole * (gathers * bytes_p + bytes_grad)  # all-gathers + reduce-scatter
    all_reduce = 2.0 * (copies - 1.0) / copies * (whole / shards) * bytes_grad * reduces  # all-reduce among copies
    all_reduce_share[0] = all_reduce
    return gather_scatter + all_reduce


cdef inline double c_nd_kind_ep(const double* kind, const double* cand) noexcept nogil:
    # ND's bind_layer_stack gives a dense kind ep = 1 (§1.5).
    return cand[C_ep] if kind[K_is_moe] != 0.0 else 1.0


cdef inline double c_nd_dp_layer(const double* kind, const double* cand, double ep_k,
                                 double* all_reduce_share) noexcept nogil:
    # DP traffic of one body layer, priced as NOT_REC (§2.6 DP term); the all-reduce share out.
    cdef double t = cand[C_t], cp = cand[C_cp], t_exp = cand[C_t_exp]
    cdef double non_exp = kind[K_p_nonexp]
    cdef double routed = kind[K_p_routed_base] / t_exp   # ND's routed count, etp = t_exp
    cdef double shared = kind[K_p_shared]
    cdef double d, d_exp, m, bytes_p, bytes_grad, shard_nonexp, gathers, reduces
    cdef double tr_ne, ar_ne, tr_r, ar_r, tr_s, ar_s, dp_ne, experts, dp_e
    if cand[C_fsdp] != 0.0:
        # Under FSDP (grad_shard_as_params): fsdp_traffic over three parts, in bytes.
        d = cand[C_d]
        d_exp = cand[C_d_exp]
        m = cand[C_m]
        bytes_p = cand[C_bytes_p]
        bytes_grad = cand[C_bytes_grad]
        shard_nonexp = cand[C_shard_nonexp_partial]
        gathers = 2.0 if cand[C_reshard] != 0.0 else 1.0 / m      # _fsdp_rounds: body layer
        reduces = 1.0 / m if shard_nonexp > t * cp else 1.0      # FSDP shards: once a step
        tr_ne = c_nd_part_traffic(non_exp, t, shard_nonexp, d * cp * t,
                                  gathers, reduces, bytes_p, bytes_grad, &ar_ne)      # non-expert
        tr_r = c_nd_part_traffic(routed / ep_k, t_exp, cand[C_shard_exp], d_exp * cp * t_exp,
                                 gathers, reduces, bytes_p, bytes_grad, &ar_r)        # routed experts
        tr_s = c_nd_part_traffic(shared, t_exp, cand[C_shard_exp_partial], d * cp * t_exp,
                                 gathers, reduces, bytes_p, bytes_grad, &ar_s)        # shared experts
        all_reduce_share[0] = ar_ne + ar_r + ar_s
        return tr_ne + tr_r + tr_s
    # Without FSDP: dp_comm_layer, parameter ELEMENT counts (ND's mixed units, §8.2). Plain DDP
    # (comm_d_* = 0) sends nothing here: ND prices no DP traffic for it, and this ZeRO path has
    # no all-reduce share, so its DP_REDUCE is 0.
    dp_ne = 0.0
    if cand[C_comm_d_non_exp] == 2.0:
        dp_ne = non_exp / (cp * t) + non_exp / t             # ZeRO-2: optimizer shard + gradients
    elif cand[C_comm_d_non_exp] == 3.0:
        dp_ne = non_exp / t                                  # gradient shard
    experts = routed + shared
    dp_e = 0.0
    if cand[C_comm_d_exp] == 2.0:
        dp_e = experts / (cp * t_exp * ep_k) + experts / (ep_k if ep_k > t_exp else t_exp)
    elif cand[C_comm_d_exp] == 3.0:
        dp_e = experts / (cp * t_exp * ep_k)
    all_reduce_share[0] = 0.0
    return dp_ne + dp_e


cdef inline double c_nd_tp_volume(const double* kind, const double* model, const double* cand,
                                  double ep_k, double h, double s) noexcept nogil:
    # TP volume of one layer with rec_coeff 1 (§2.6 tp_comm_layer, mb = 1). h and s are cfg.h
    # and cfg.s of the config it runs on: a body layer's submodule's, the embedding and output
    # nodes' the text model's (they run on the model config).
    cdef double b = cand[C_b], n_gather = kind[K_n_gather]
    cdef double bytes_c, hff_exp, non_exp, expert
    if kind[K_is_moe] != 0.0:
        # ND's oddity kept: the MoE non-expert term is h·h·bytes_c, where the dense one is s·b·h.
        bytes_c = cand[C_bytes_c]
        hff_exp = model[M_hff_exp]
        non_exp = 0.25 * n_gather * h * h * bytes_c * kind[K_n_attMM]
        expert = (0.25 * n_gather * h * bytes_c * kind[K_n_ffMM]
                  * (model[M_n_exp] / ep_k * hff_exp + model[M_n_shared] * hff_exp))
    else:
        non_exp = 0.25 * n_gather * s * b * h                     # non-expert
        # "expert": the dense FFN at cfg.hff of the layer's config, which the kind's own ffn_width
        # already is (bind_layer_stack gives a dense text kind the model's hff; a tower kind its own).
        expert = 0.25 * n_gather * s * b * kind[K_ffn_width]
    return (non_exp + expert) * cand[C_comm_t] / cand[C_cp]


cdef inline double c_nd_ep_volume(const double* model, const double* cand, double ep_k,
                                  double h, double s) noexcept nogil:
    # EP bytes of one layer, dispatch + combine (§2.6 ep_comm_layer, mb = 1); h and s as
    # c_nd_tp_volume's (the tokens a rank sends and their width).
    cdef double local, cross
    if ep_k <= 1.0 or cand[C_comm_ep] == 0.0:
        return 0.0
    local = cand[C_ep_local_tokens]
    if not local > 0.0:
        local = model[M_n_chosen] * s * cand[C_b] / cand[C_cp]
    cross = local * (ep_k - 1.0) / ep_k                      # tokens leaving the rank
    return cross * h * cand[C_bytes_c] * 2.0


cdef inline double c_nd_cp_volume(const double* kind, const double* model, const double* cand,
                                  double rf, double h, double s) noexcept nogil:
    # CP volume of one body layer (§2.6 cp_comm_layer_detailed(...).comm_volume); h and s are its
    # submodule's cfg.h and cfg.s (CP is priced for body layers only).
    cdef double coef, attention, ffn
    if cand[C_cp_ring] != 0.0:
        coef = 2.0 * 0.5 * rf + 0.5                          # ring (colossalai_cp)
    else:
        coef = 0.5 * rf + 0.5                                # Ulysses
    attention = coef * kind[K_n_attMM] * h                   # attention exchange
    ffn = kind[K_n_ffMM] * kind[K_ffn_width]                 # FFN term (the kind's own width)
    return cand[C_comm_cp] * 2.0 * s * cand[C_b] * (attention + ffn) / cand[C_t]


cdef inline void c_nd_layer_comm(const double* kind, const double* model, const double* cand,
                                 long long option, long long keep_mask, double* out) noexcept nogil:
    # One body layer run as *option*: its comm before the per-stage multipliers, and what its
    # recompute sends again, into out[LC_*] (§2.6 "Per stage, per layer", "Recompute comm").
    # The TP, EP and CP volumes (and so what recompute re-sends) take the layer's SUBMODULE's h
    # and s (ND walks each submodule on its own config); DP counts parameters, which the kind
    # table already holds per kind.
    cdef double ep_k = c_nd_kind_ep(kind, cand)
    cdef bint full = option == OPTION_FULL
    cdef bint selective = option == OPTION_SELECTIVE
    cdef double gather_kept = <double>((keep_mask >> BIT_gather) & 1)
    cdef double tp_full, rf, cp
    cdef double share, h, heads, hff, s
    c_nd_sub_dims(kind, model, cand, &h, &heads, &hff, &s)
    # DP: every option is priced as NOT_REC (ctx.current_node = NOT_REC for the DP term).
    out[LC_dp] = c_nd_dp_layer(kind, cand, ep_k, &share)
    out[LC_dp_reduce] = share
    # TP: rec_coeff(SEL?, gather) = the gather switch on a selective layer, 1 otherwise. ND reuses
    # the memory-buffer coefficient here, so a SEL layer that recomputes its gather prices no TP.
    tp_full = c_nd_tp_volume(kind, model, cand, ep_k, h, s)
    out[LC_tp] = (gather_kept if selective else 1.0) * tp_full
    out[LC_ep] = c_nd_ep_volume(model, cand, ep_k, h, s)
    # CP: rf = (not SEL or gather kept)·(p == 1).
    rf = (gather_kept if selective else 1.0) * (1.0 if cand[C_p] == 1.0 else 0.0)
    cp = c_nd_cp_volume(kind, model, cand, rf, h, s)
    out[LC_cp] = cp
    # _recomputed_comm: FULL sends its whole TP and EP again and half its CP (the forward
    # exchange); SEL only what the gather switch drops, and half its CP only when the gather is
    # recomputed. Parameter traffic is never re-sent.
    if full:
        out[LC_re_tp] = tp_full
        out[LC_re_ep] = out[LC_ep]
        out[LC_re_cp] = 0.5 * cp
    elif selective:
        out[LC_re_tp] = tp_full * (1.0 - gather_kept)
        out[LC_re_ep] = 0.0
        out[LC_re_cp] = 0.5 * cp if gather_kept == 0.0 else 0.0
    elif option == OPTION_NONE:
        out[LC_re_tp] = 0.0
        out[LC_re_ep] = 0.0
        out[LC_re_cp] = 0.0
    else:
        out[LC_re_tp] = NAN
        out[LC_re_ep] = NAN
        out[LC_re_cp] = NAN


cdef inline bint c_nd_cand_ok(const double* cand) noexcept nogil:
    # Every divisor of the walks is positive (NaN fails).
    return (cand[C_t] > 0.0 and cand[C_cp] > 0.0 and cand[C_sp] > 0.0 and cand[C_t_exp] > 0.0
            and cand[C_ep] > 0.0 and cand[C_dpn] > 0.0 and cand[C_m] > 0.0)


def nd_fsdp_part_traffic(double size, double computed, double kept, double group, double gathers,
                         double reduces, double bytes_p, double bytes_grad, double[::1] out):
    """ND's FSDP traffic of one parameter part, (traffic, all-reduce share) into out[0:2] (docs/ND_MODEL.md §2.6)."""
    if out.shape[0] < 2:
        raise ValueError(f"out must have length at least 2, got {out.shape[0]}")
    out[0] = c_nd_part_traffic(size, computed, kept, group, gathers, reduces, bytes_p, bytes_grad, &out[1])


cdef void c_nd_stage_sums(const double* kinds, Py_ssize_t n_kinds, const double* model, const double* cand,
                          const double* counts, Py_ssize_t n_stages, const long long* slot_option,
                          const long long* slot_mask, Py_ssize_t n_slots, long long emb_stage,
                          long long out_stage, double* out) noexcept nogil:
    # ND's compute and communication walks, per stage (§2.5, §2.6), on raw pointers: kinds
    # (n_kinds, K_COUNT), counts (n_stages, n_kinds*n_slots) and out (n_stages, S_COUNT), all
    # row-major. The caller has checked every length, that emb_stage/out_stage are -1 or a stage,
    # and, when either is a stage, that model[M_default_kind] is a kind row.
    cdef Py_ssize_t n_cols = n_kinds * n_slots
    cdef Py_ssize_t k, o, col, st, f
    cdef bint have_loads, used, fsdp
    cdef double count, plain, recomputed, load, resent
    cdef double f_dp, f_tp, f_ep, f_cp, dpn, a3
    cdef double b, s, t, cp_deg, h, v, m, bytes_p, bytes_grad, shard_nonexp, root_gathers, reduces, d
    cdef double node_ep_k, node_tp, node_ep, shard_embed, gather_embed, computed, traffic, share
    cdef double copies, output
    cdef double loads[ND_OP_COUNT]
    cdef double factors[ND_OP_COUNT]
    cdef double comm[LC_COUNT]
    cdef const double* kind
    cdef const double* node
    cdef double* row
    if not c_nd_cand_ok(cand):
        for st in range(n_stages * S_COUNT):
            out[st] = NAN
        return
    for st in range(n_stages * S_COUNT):
        out[st] = 0.0
    # §2.6 per-stage post-processing as one factor per part (steps 2-4): TP ×= max(1, ⌊t/dpn⌋),
    # EP ×= max(1, ⌊ep/dpn⌋), CP ×= max(1, ⌊cp/dpn⌋); DP ×= 1 − dp_overlap, TP ×= 1 − tp_overlap;
    # on A3 every part /2.
    dpn = cand[C_dpn]
    a3 = 0.5 if cand[C_is_a3] != 0.0 else 1.0
    f_dp = (1.0 - cand[C_dp_overlap]) * a3
    f_tp = c_nd_at_least_one(floor(cand[C_t] / dpn)) * (1.0 - cand[C_tp_overlap]) * a3
    f_ep = c_nd_at_least_one(floor(cand[C_ep] / dpn)) * a3
    f_cp = c_nd_at_least_one(floor(cand[C_cp] / dpn)) * a3

    # Body layers: price each (kind, option slot) once, then weigh it by its count per stage.
    for k in range(n_kinds):
        kind = kinds + k * K_COUNT
        have_loads = False
        for o in range(n_slots):
            col = k * n_slots + o
            used = False
            for st in range(n_stages):
                if counts[st * n_cols + col] != 0.0:
                    used = True
                    break
            if not used:
                continue
            if not have_loads:
                c_nd_op_loads(kind, model, cand, loads)
                have_loads = True
            c_nd_recompute_factors(kind, slot_option[o], slot_mask[o], factors)
            # §2.4 get_table_quantity: plain Σ load; recomputed Σ (1 + f)·load over the ops it has.
            plain = 0.0
            recomputed = 0.0
            for f in range(ND_OP_COUNT):
                load = loads[f]
                plain += load
                if load != 0.0:
                    recomputed += (1.0 + factors[f]) * load
            c_nd_layer_comm(kind, model, cand, slot_option[o], slot_mask[o], comm)
            resent = f_tp * comm[LC_re_tp] + f_ep * comm[LC_re_ep] + f_cp * comm[LC_re_cp]
            for st in range(n_stages):
                count = counts[st * n_cols + col]
                if count == 0.0:
                    continue
                row = out + st * S_COUNT
                row[S_comp] += count * plain
                row[S_recomp] += count * recomputed
                row[S_dp] += count * comm[LC_dp]
                row[S_dp_reduce] += count * comm[LC_dp_reduce]
                row[S_tp] += count * comm[LC_tp]
                row[S_ep] += count * comm[LC_ep]
                row[S_cp] += count * comm[LC_cp]
                row[S_recomm] += count * resent

    # The embedding and output nodes: priced on the model config, i.e. as a layer of the
    # default kind, rec_coeff 1. ND adds their TP and, as ep_comm_layer ignores the node,
    # their EP too; no CP; DP only for FSDP's root parts.
    if emb_stage >= 0 or out_stage >= 0:
        b = cand[C_b]
        s = cand[C_s]
        t = cand[C_t]
        cp_deg = cand[C_cp]
        h = model[M_h]
        v = model[M_v]
        node = kinds + (<Py_ssize_t>model[M_default_kind]) * K_COUNT
        node_ep_k = c_nd_kind_ep(node, cand)
        # The nodes run on the text model's config: model h and the candidate's s, whatever
        # the default kind's submodule columns say (they are the text model's anyway).
        node_tp = c_nd_tp_volume(node, model, cand, node_ep_k, h, s)
        node_ep = c_nd_ep_volume(model, cand, node_ep_k, h, s)
        fsdp = cand[C_fsdp] != 0.0
        m = cand[C_m]
        bytes_p = cand[C_bytes_p]
        bytes_grad = cand[C_bytes_grad]
        shard_nonexp = cand[C_shard_nonexp_partial]
        root_gathers = 1.0 if cand[C_reshard] != 0.0 else 1.0 / m   # _fsdp_rounds: root
        reduces = 1.0 / m if shard_nonexp > t * cp_deg else 1.0
        d = cand[C_d]
        if emb_stage >= 0:
            row = out + emb_stage * S_COUNT
            row[S_tp] += node_tp
            row[S_ep] += node_ep
            # FSDP root part: the embedding (h·v over shard_embed/gather_embed, sharded over
            # shard_embed, held by d·that); none when tied to the output with p ≤ 1.
            if fsdp and not (cand[C_tie_emb] != 0.0 and cand[C_p] <= 1.0):
                shard_embed = cand[C_shard_embed]
                gather_embed = cand[C_gather_embed]
                computed = shard_embed / gather_embed if gather_embed > 0.0 else NAN
                traffic = c_nd_part_traffic(h * v, computed, shard_embed, d * computed,
                                            root_gathers, reduces, bytes_p, bytes_grad, &share)
                row[S_dp] += traffic
                row[S_dp_reduce] += share
        if out_stage >= 0:
            row = out + out_stage * S_COUNT
            # §2.5 output layer: (1 if dc_kv == 0 else n_mtp)·(1/16)·6·b·v·h·s·bytes_p/t, not
            # /cp, the same with and without recompute. ND's oddity kept: on an MLA model the
            # output counts n_mtp times (0 times without MTP layers).
            copies = 1.0 if model[M_dc_kv] == 0.0 else model[M_n_mtp]
            output = copies * (1.0 / 16.0) * 6.0 * b * v * h * s * bytes_p / t   # 1/16: bias_imbalance
            row[S_comp] += output
            row[S_recomp] += output
            row[S_tp] += node_tp
            row[S_ep] += node_ep
            if fsdp:
                # FSDP root part: the output (h·v + v over t, sharded like the non-expert part).
                traffic = c_nd_part_traffic(h * v + v, t, shard_nonexp, d * cp_deg * t,
                                            root_gathers, reduces, bytes_p, bytes_grad, &share)
                row[S_dp] += traffic
                row[S_dp_reduce] += share

    # §2.6 per-stage post-processing; dp_reduce is part of dp and takes dp's factor.
    for st in range(n_stages):
        row = out + st * S_COUNT
        row[S_dp] *= f_dp
        row[S_dp_reduce] *= f_dp
        row[S_tp] *= f_tp
        row[S_ep] *= f_ep
        row[S_cp] *= f_cp
        # Stage comm = TP + DP + EP + CP; with recompute, plus what recompute sends again.
        row[S_recomm] = row[S_tp] + row[S_dp] + row[S_ep] + row[S_cp] + row[S_recomm]


def nd_stage_sums(const double[:, ::1] kinds, const double[::1] model, const double[::1] cand,
                  const double[:, ::1] counts, const long long[::1] slot_option,
                  const long long[::1] slot_mask, long long emb_stage, long long out_stage,
                  double[:, ::1] out):
    """ND's compute and communication walks, per stage (docs/ND_MODEL.md §2.5, §2.6).

    counts[s, k·O + o]: layers of kind k running slot o (``slot_option[o]``, ``slot_mask[o]``) on
    stage s; emb_stage/out_stage: −1 for none. out[s] gets STAGE_FIELDS: comp, recomp, dp (with
    dp_reduce), dp_reduce, tp, ep, cp after the per-stage multipliers, and recomm (comm total with
    what recompute sends again). A non-positive t, cp, sp, t_exp, ep, dpn or m gives NaN everywhere.
    """
    cdef Py_ssize_t n_kinds = kinds.shape[0], n_slots = slot_option.shape[0], n_stages = counts.shape[0]
    cdef double default_kind
    if n_kinds and kinds.shape[1] != K_COUNT:
        raise ValueError(f"kinds must have {K_COUNT} columns, got {kinds.shape[1]}")
    if model.shape[0] != M_COUNT:
        raise ValueError(f"model must have length {M_COUNT}, got {model.shape[0]}")
    if cand.shape[0] != C_COUNT:
        raise ValueError(f"cand must have length {C_COUNT}, got {cand.shape[0]}")
    if slot_mask.shape[0] != n_slots:
        raise ValueError(f"slot_mask must have length {n_slots}, got {slot_mask.shape[0]}")
    if n_stages and counts.shape[1] != n_kinds * n_slots:
        raise ValueError(f"counts must have {n_kinds * n_slots} columns, got {counts.shape[1]}")
    if out.shape[0] and out.shape[1] != S_COUNT:
        raise ValueError(f"out must have {S_COUNT} columns, got {out.shape[1]}")
    if out.shape[0] != n_stages:
        raise ValueError(f"out must have {n_stages} rows (one per row of counts), got {out.shape[0]}")
    if emb_stage >= n_stages:
        raise ValueError(f"emb_stage must be -1 or a stage in [0, {n_stages}), got {emb_stage}")
    if out_stage >= n_stages:
        raise ValueError(f"out_stage must be -1 or a stage in [0, {n_stages}), got {out_stage}")
    default_kind = model[M_default_kind]
    if emb_stage >= 0 or out_stage >= 0:
        if not (0.0 <= default_kind < n_kinds and default_kind == floor(default_kind)):
            raise ValueError(f"model[default_kind] must be a kind row in [0, {n_kinds}), got {default_kind}")
    if n_stages == 0:
        return
    with nogil:
        c_nd_stage_sums(&kinds[0, 0] if n_kinds else NULL, n_kinds, &model[0], &cand[0], &counts[0, 0],
                        n_stages, &slot_option[0] if n_slots else NULL, &slot_mask[0] if n_slots else NULL,
                        n_slots, emb_stage if emb_stage >= 0 else -1, out_stage if out_stage >= 0 else -1,
                        &out[0, 0])

