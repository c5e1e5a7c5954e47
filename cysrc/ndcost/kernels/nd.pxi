# ND's score in ND units (twin of ndcost/_kpy/nd.py): op loads, recompute factors, the stage
# walks, the stage and pipeline combination, and the ratios. Formulas: the seed estimate.py and
# ND_REFERENCE §2.2-§2.10 (§3.3 for the parameter counts the kind table carries); each cdef
# function names its source, and ND's oddities are kept and marked where they happen. Every
# function does its floating-point operations in the oracle's order, so that the two agree to
# rounding. Needs kernels/columns.pxi (the ABI enums) and kernels/pipeline.pxi
# (c_nd_pipeline_time, c_nd_straggler, c_nd_p2p_time) included before it.

from libc.math cimport floor
from libc.stdlib cimport malloc, free

# ND's ops of one layer, in the order of every per-op output (ND_OPS of the oracle).
cdef enum:
    OP_attMM = 0
    OP_linrec = 1
    OP_ffMM = 2
    OP_attBMM = 3
    OP_softmax = 4
    OP_headCast = 5
    OP_gather = 6
    OP_ffAct = 7
    OP_normOp = 8
    OP_qknorm = 9
    OP_dropout = 10
    OP_dispatch = 11
    ND_OP_COUNT = 12

# Keep-mask bits: bit i is SWITCHES[i] of the seed recompute/profile.py, set when kept.
cdef enum:
    BIT_attBMM = 0
    BIT_headCast = 1
    BIT_dropout = 2
    BIT_softmax = 3
    BIT_normOp = 4
    BIT_gather = 5
    BIT_ffAct = 6
    BIT_attUp = 7

# ND's estimator option codes (ND_REFERENCE §2.7) and fields of one layer's comm.
cdef enum:
    RATIO_DYNAMIC = 0
    RATIO_STATIC = 1
    RATIO_COMPUTE_ONLY = 2
    RATIO_COMM_ONLY = 3
    REC_WITH = 0
    REC_NONE = 1
    REC_COMPUTE_ONLY = 2
    REC_COMM_ONLY = 3
    P2P_MANUAL = 1
    LC_dp = 0
    LC_dp_reduce = 1
    LC_tp = 2
    LC_ep = 3
    LC_cp = 4
    LC_re_tp = 5
    LC_re_ep = 6
    LC_re_cp = 7
    LC_COUNT = 8

cdef double ND_BACKWARD_RATIO = 2.0      # seed BACKWARD_RATIO: backward = 2 x forward
cdef double ND_GDN_CHUNK = 64.0          # seed GDN_CHUNK
cdef double ND_MAX_COUNT = 2147483648.0  # 2**31: larger m or vp is NaN (no integer overflow)


cdef inline double c_nd_at_least_one(double x) noexcept nogil:
    # ND's max(1, x); NaN gives 1 as Python's max(1, nan).
    return x if x > 1.0 else 1.0


cdef inline double c_nd_positive(double x) noexcept nogil:
    # ND's max(0, x).
    return x if x > 0.0 else 0.0


cdef inline double c_nd_weigh(double count, double load, double scale) noexcept nogil:
    # An op's entry times its count; a zero count is exactly 0 (no 0·inf).
    if count == 0.0:
        return 0.0
    return count * (load * scale)


cdef inline void c_nd_op_loads(const double* kind, const double* model, const double* cand,
                               double* out) noexcept nogil:
    # One layer of the kind: every op's load x its count x bytes_p/t/cp (seed op_table +
    # _flavour_tables; ND_REFERENCE §2.2, §2.3).
    cdef double b = cand[C_b], s = cand[C_s], t = cand[C_t], sp = cand[C_sp], cp = cand[C_cp]
    cdef double h = model[M_h], heads = model[M_a], a = kind[K_att_a]
    cdef double n_kv, d_h, d_q, g, d_qk, hff, att_mm, n_att, n_v, d_k, d_v, linrec, att_bmm
    cdef double softmax, head_cast, gather, norm_op, qknorm, ts, dropout, dispatch, ff_mm, ff_act
    cdef double n_shared, n_chosen, n_ffmm, n_ff, gate, experts, width, scale
    cdef int op
    if not (t > 0.0 and cp > 0.0 and sp > 0.0 and a > 0.0):
        for op in range(ND_OP_COUNT):
            out[op] = NAN
        return
    # The kind's attention flavour (§2.2, the seed's `att`).
    n_kv = kind[K_att_n_kv]
    d_h = kind[K_att_dh] if kind[K_att_dh] != 0.0 else h / a          # head dim: dh or h/a
    d_q = a * d_h                                                     # query width
    g = 2.0 if kind[K_att_gate] != 0.0 else 1.0                       # a fused output gate doubles Q
    d_qk = (kind[K_qk_nope] if kind[K_qk_nope] != 0.0 else d_h) + kind[K_dhr]  # a head's q/k width
    hff = model[M_hff]

    # §2.2 n_attMM: Q and O h x d_q each (Q doubled by a gate), K and V h x n_kv·d_h.
    att_mm = 1.5 * b * s * h * ((g + 1.0) * d_q + 2.0 * n_kv * d_h)
    if kind[K_is_mla] != 0.0:
        # §2.2 MLA: 6·b·s·W/(n_attMM or 4), W = every attention weight (mla_weights). ND reads
        # n_attMM off the model config (the default kind's count); ndcost the kind's own.
        n_att = kind[K_n_attMM]
        att_mm = 6.0 * b * s * kind[K_mla_w] / (n_att if n_att != 0.0 else 4.0)
    # §2.2 n_linrec: the chunked gated delta rule, only for a kind that declares it.
    n_v = kind[K_lin_n_v]
    d_k = kind[K_lin_d_k]
    d_v = kind[K_lin_d_v]
    linrec = 0.0
    if n_v * d_k * d_v != 0.0:
        linrec = 3.0 * b * s * n_v * (2.0 * ND_GDN_CHUNK * (3.0 * d_k + 2.0 * d_v) + 6.0 * d_k * d_v)
    att_bmm = 3.0 * b * s * s * a * (d_qk + d_h)                      # §2.2 n_attBMM
    # §2.2 n_softmax / n_headCast / n_dropout take the MODEL's heads (seed: cfg.a, not att.a).
    softmax = 13.0 * heads * b * s * s
    head_cast = 3.0 * heads * b * s * s
    gather = b * s * h * (t - 1.0)                                    # §2.2 n_gather
    norm_op = 30.0 * b * s * h * t / sp                               # §2.2 n_normOp
    qknorm = 30.0 * b * s * (a + n_kv) * d_h                          # §2.2 n_qknorm
    ts = 3.0 * h * t / sp
    dropout = 3.0 * b * s * (heads * s if heads * s > ts else ts)     # §2.2 n_dropout: max(a·s, 3·h·t/sp)
    dispatch = 0.0
    if kind[K_is_moe] != 0.0:
        # §2.3 expert table: the experts a token runs plus the shared ones, and the router
        # (and shared gate) spread over the kind's FFN matmuls.
        n_shared = model[M_n_shared]
        n_chosen = c_nd_at_least_one(model[M_n_chosen])
        n_ffmm = kind[K_n_ffMM]
        n_ff = n_ffmm if n_ffmm != 0.0 else 3.0
        gate = 1.0 if (n_shared != 0.0 and model[M_shared_gate] != 0.0) else 0.0
        experts = model[M_hff_exp] * (n_chosen * cand[C_cap_fact] + n_shared)
        width = experts + (model[M_n_exp] + gate) / n_ff
        ff_mm = 6.0 * b * s * h * width                                # exp n_ffMM (= base·width/hff)
        ff_act = 21.0 * b * s * experts                                # exp n_ffAct (= base·experts/hff)
        # §2.3 dispatch: MOE_DISPATCH·b·s·h·max(1, n_chosen)·max(1, ep), linear in EP.
        dispatch = cand[C_moe_dispatch] * b * s * h * n_chosen * c_nd_at_least_one(cand[C_ep])
    else:
        # A dense kind runs the MODEL's hff (seed op_table reads cfg.hff, not the kind's width).
        ff_mm = 6.0 * b * s * h * hff                                  # §2.2 n_ffMM
        ff_act = 21.0 * b * s * hff                                    # §2.2 n_ffAct
    # Every entry x bytes_p/t/cp (§2.2), then x the kind's op count (§2.4 get_table_quantity).
    scale = cand[C_bytes_p] / t / cp
    out[OP_attMM] = c_nd_weigh(kind[K_n_attMM], att_mm, scale)
    out[OP_linrec] = c_nd_weigh(kind[K_n_linrec], linrec, scale)
    out[OP_ffMM] = c_nd_weigh(kind[K_n_ffMM], ff_mm, scale)
    out[OP_attBMM] = c_nd_weigh(kind[K_n_attBMM], att_bmm, scale)
    out[OP_softmax] = c_nd_weigh(kind[K_n_softmax], softmax, scale)
    out[OP_headCast] = c_nd_weigh(kind[K_n_headCast], head_cast, scale)
    out[OP_gather] = c_nd_weigh(kind[K_n_gather], gather, scale)
    out[OP_ffAct] = c_nd_weigh(kind[K_n_ffAct], ff_act, scale)
    out[OP_normOp] = c_nd_weigh(kind[K_n_normOp], norm_op, scale)
    out[OP_qknorm] = c_nd_weigh(kind[K_n_qknorm], qknorm, scale)
    out[OP_dropout] = c_nd_weigh(kind[K_n_dropout], dropout, scale)
    out[OP_dispatch] = c_nd_weigh(kind[K_n_dispatch], dispatch, scale)


cdef inline double c_nd_switch_factor(long long keep_mask, int bit) noexcept nogil:
    # SEL: 1 − switch (1 keeps the op's activation).
    return 1.0 - <double>((keep_mask >> bit) & 1)


cdef inline void c_nd_recompute_factors(const double* kind, long long option, long long keep_mask,
                                        double* out) noexcept nogil:
    # Per op, what a recompute re-runs (seed get_recomp_factor + selective_shares, §2.4).
    cdef int op
    cdef double fill, w
    if option == OPTION_FULL:
        for op in range(ND_OP_COUNT):
            out[op] = 1.0
        return
    if option != OPTION_SELECTIVE:
        fill = 0.0 if option == OPTION_NONE else NAN
        for op in range(ND_OP_COUNT):
            out[op] = fill
        return
    # Ops without a switch (attMM, linrec, ffMM, dispatch) are kept; qknorm follows normOp.
    out[OP_attMM] = 0.0
    out[OP_linrec] = 0.0
    out[OP_ffMM] = 0.0
    out[OP_attBMM] = c_nd_switch_factor(keep_mask, BIT_attBMM)
    out[OP_softmax] = c_nd_switch_factor(keep_mask, BIT_softmax)
    out[OP_headCast] = c_nd_switch_factor(keep_mask, BIT_headCast)
    out[OP_gather] = c_nd_switch_factor(keep_mask, BIT_gather)
    out[OP_ffAct] = c_nd_switch_factor(keep_mask, BIT_ffAct)
    out[OP_normOp] = c_nd_switch_factor(keep_mask, BIT_normOp)
    out[OP_qknorm] = c_nd_switch_factor(keep_mask, BIT_normOp)
    out[OP_dropout] = c_nd_switch_factor(keep_mask, BIT_dropout)
    out[OP_dispatch] = 0.0
    if kind[K_is_mla] != 0.0 and not ((keep_mask >> BIT_attUp) & 1):
        # MLA with attUp recomputed: attMM re-runs the up-projections' share up/W.
        w = kind[K_mla_w]
        out[OP_attMM] = kind[K_mla_up] / w if w > 0.0 else NAN


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
                                  double ep_k) noexcept nogil:
    # TP volume of one layer with rec_coeff 1 (§2.6 tp_comm_layer, mb = 1).
    cdef double s = cand[C_s], b = cand[C_b], h = model[M_h], n_gather = kind[K_n_gather]
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
        expert = 0.25 * n_gather * s * b * kind[K_ffn_width]      # "expert": the dense FFN
    return (non_exp + expert) * cand[C_comm_t] / cand[C_cp]


cdef inline double c_nd_ep_volume(const double* model, const double* cand, double ep_k) noexcept nogil:
    # EP bytes of one layer, dispatch + combine (§2.6 ep_comm_layer, mb = 1).
    cdef double local, cross
    if ep_k <= 1.0 or cand[C_comm_ep] == 0.0:
        return 0.0
    local = cand[C_ep_local_tokens]
    if not local > 0.0:
        local = model[M_n_chosen] * cand[C_s] * cand[C_b] / cand[C_cp]
    cross = local * (ep_k - 1.0) / ep_k                      # tokens leaving the rank
    return cross * model[M_h] * cand[C_bytes_c] * 2.0


cdef inline double c_nd_cp_volume(const double* kind, const double* model, const double* cand,
                                  double rf) noexcept nogil:
    # CP volume of one body layer (§2.6 cp_comm_layer_detailed(...).comm_volume).
    cdef double coef, attention, ffn
    if cand[C_cp_ring] != 0.0:
        coef = 2.0 * 0.5 * rf + 0.5                          # ring (colossalai_cp)
    else:
        coef = 0.5 * rf + 0.5                                # Ulysses
    attention = coef * kind[K_n_attMM] * model[M_h]          # attention exchange
    ffn = kind[K_n_ffMM] * kind[K_ffn_width]                 # FFN term
    return cand[C_comm_cp] * 2.0 * cand[C_s] * cand[C_b] * (attention + ffn) / cand[C_t]


cdef inline void c_nd_layer_comm(const double* kind, const double* model, const double* cand,
                                 long long option, long long keep_mask, double* out) noexcept nogil:
    # One body layer run as *option*: its comm before the per-stage multipliers, and what its
    # recompute sends again, into out[LC_*] (§2.6 "Per stage, per layer", "Recompute comm").
    cdef double ep_k = c_nd_kind_ep(kind, cand)
    cdef bint full = option == OPTION_FULL
    cdef bint selective = option == OPTION_SELECTIVE
    cdef double gather_kept = <double>((keep_mask >> BIT_gather) & 1)
    cdef double tp_full, rf, cp
    cdef double share
    # DP: every option is priced as NOT_REC (ctx.current_node = NOT_REC for the DP term).
    out[LC_dp] = c_nd_dp_layer(kind, cand, ep_k, &share)
    out[LC_dp_reduce] = share
    # TP: rec_coeff(SEL?, gather) = the gather switch on a selective layer, 1 otherwise. ND reuses
    # the memory-buffer coefficient here, so a SEL layer that recomputes its gather prices no TP.
    tp_full = c_nd_tp_volume(kind, model, cand, ep_k)
    out[LC_tp] = (gather_kept if selective else 1.0) * tp_full
    out[LC_ep] = c_nd_ep_volume(model, cand, ep_k)
    # CP: rf = (not SEL or gather kept)·(p == 1).
    rf = (gather_kept if selective else 1.0) * (1.0 if cand[C_p] == 1.0 else 0.0)
    cp = c_nd_cp_volume(kind, model, cand, rf)
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


cdef inline void c_nd_weights(const double* model, const double* cand, const double* options,
                              double* comp_w, double* comm_w) noexcept nogil:
    # (comp_w, comm_w) of ND's ratio type (seed estimate_stage, get_dynamic_ratio; §2.7).
    cdef double ratio_type = options[O_ratio_type]
    cdef double h, s, width
    comp_w[0] = 1.0
    if ratio_type == RATIO_DYNAMIC:
        # 1.5·(hff + s)·8192/(h + s), the routed width in place of hff when the MODEL has experts.
        h = model[M_h]
        s = cand[C_s]
        width = model[M_hff_exp] if model[M_n_exp] > 1.0 else model[M_hff]
        if not h + s > 0.0:
            comm_w[0] = NAN
        else:
            comm_w[0] = 3.0 / 2.0 * (width + s) * (8192.0 / (h + s))
    elif ratio_type == RATIO_STATIC:
        comm_w[0] = options[O_static_ratio]
    elif ratio_type == RATIO_COMPUTE_ONLY:
        comm_w[0] = 0.0
    elif ratio_type == RATIO_COMM_ONLY:
        comp_w[0] = 0.0
        comm_w[0] = 1.0
    else:
        comp_w[0] = NAN
        comm_w[0] = NAN


def nd_op_loads(const double[:, ::1] kinds, const double[::1] model, const double[::1] cand,
                long long k, double[::1] out):
    """Every op's load for ONE layer of kind *k*, in ``ND_OPS`` order (ND_REFERENCE §2.2, §2.3)."""
    if kinds.shape[0] and kinds.shape[1] != K_COUNT:
        raise ValueError(f"kinds must have {K_COUNT} columns, got {kinds.shape[1]}")
    if model.shape[0] != M_COUNT:
        raise ValueError(f"model must have length {M_COUNT}, got {model.shape[0]}")
    if cand.shape[0] != C_COUNT:
        raise ValueError(f"cand must have length {C_COUNT}, got {cand.shape[0]}")
    if out.shape[0] != ND_OP_COUNT:
        raise ValueError(f"out must have length {ND_OP_COUNT}, got {out.shape[0]}")
    if not 0 <= k < kinds.shape[0]:
        raise ValueError(f"k must be a kind row in [0, {kinds.shape[0]}), got {k}")
    with nogil:
        c_nd_op_loads(&kinds[k, 0], &model[0], &cand[0], &out[0])


def nd_recompute_factors(const double[:, ::1] kinds, long long k, long long option, long long keep_mask,
                         double[::1] out):
    """Per op (``ND_OPS`` order) the recompute factor f of a layer of kind *k* (ND_REFERENCE §2.4)."""
    if kinds.shape[0] and kinds.shape[1] != K_COUNT:
        raise ValueError(f"kinds must have {K_COUNT} columns, got {kinds.shape[1]}")
    if out.shape[0] != ND_OP_COUNT:
        raise ValueError(f"out must have length {ND_OP_COUNT}, got {out.shape[0]}")
    if not 0 <= k < kinds.shape[0]:
        raise ValueError(f"k must be a kind row in [0, {kinds.shape[0]}), got {k}")
    with nogil:
        c_nd_recompute_factors(&kinds[k, 0], option, keep_mask, &out[0])


def nd_fsdp_part_traffic(double size, double computed, double kept, double group, double gathers,
                         double reduces, double bytes_p, double bytes_grad, double[::1] out):
    """ND's FSDP traffic of one parameter part, (traffic, all-reduce share) into out[0:2] (ND_REFERENCE §2.6)."""
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
        node_tp = c_nd_tp_volume(node, model, cand, node_ep_k)
        node_ep = c_nd_ep_volume(model, cand, node_ep_k)
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


cdef double c_nd_combine(const double* stage, Py_ssize_t n_stages, const double* cand, const double* model,
                         const double* options, const double* stage_savings, Py_ssize_t n_savings,
                         long long stage_focused, double* parts, double* stage_times,
                         double* reruns) noexcept nogil:
    # ND's score from the per-stage sums (seed estimate_stage, _save_recompute, estimate_pipeline,
    # estimate_p2p; §2.7-§2.10) on raw pointers: stage (n_stages, S_COUNT) row-major, parts
    # (P_COUNT), stage_times and the caller's scratch reruns (n_stages each). The caller has
    # checked the lengths, n_savings in {0, n_stages} and stage_focused < n_stages.
    cdef Py_ssize_t i, focus
    cdef double m, vp, comp_w, comm_w, rec_type, comp, comm, perf, recomp, recomm, rerun, time
    cdef double pipeline, mf, forward, fw, bw, rec, dp, dp_reduce, tp, ep, cp, time_sum, bubble
    cdef double p2p, slowest
    cdef long long micro_batches, vpp
    cdef bint rec_comp, rec_comm, rec_known
    cdef const double* row
    m = cand[C_m]
    vp = cand[C_vp]
    if n_stages == 0 or not (1.0 <= m <= ND_MAX_COUNT and 1.0 <= vp <= ND_MAX_COUNT):
        for i in range(P_COUNT):
            parts[i] = NAN
        for i in range(n_stages):
            stage_times[i] = NAN
        return NAN
    micro_batches = <long long>m
    vpp = <long long>vp
    c_nd_weights(model, cand, options, &comp_w, &comm_w)
    rec_type = options[O_rec_type]
    # RecType: which recompute lists are priced; an unpriced one is [0]·p (seed _stage_parts).
    rec_comp = rec_type == REC_WITH or rec_type == REC_COMPUTE_ONLY
    rec_comm = rec_type == REC_WITH or rec_type == REC_COMM_ONLY
    rec_known = rec_comp or rec_comm or rec_type == REC_NONE
    for i in range(n_stages):
        row = stage + i * S_COUNT
        comp = row[S_comp]
        comm = row[S_tp] + row[S_dp] + row[S_ep] + row[S_cp]
        perf = comp_w * comp + comm_w * comm
        recomp = row[S_recomp] if rec_comp else 0.0
        recomm = row[S_recomm] if rec_comm else 0.0
        # "ignores comm recomp, to improve": the re-run's share, a third being the forward's.
        rerun = (c_nd_positive(comp_w * (recomp - comp))
                 + c_nd_positive(comm_w * (recomm - comm))) / (1.0 + ND_BACKWARD_RATIO)
        if not rec_known:
            rerun = NAN
        reruns[i] = rerun
        time = perf + rerun
        if n_savings:
            time = time - stage_savings[i]               # _save_recompute
        stage_times[i] = time

    pipeline = c_nd_pipeline_time(stage_times, n_stages, micro_batches, vpp)
    focus = <Py_ssize_t>stage_focused if stage_focused >= 0 else c_nd_straggler(stage_times, n_stages)
    row = stage + focus * S_COUNT
    mf = <double>micro_batches
    forward = comp_w * row[S_comp] / (1.0 + ND_BACKWARD_RATIO)   # FW = comp_w·comp/3
    fw = forward * mf
    bw = forward * ND_BACKWARD_RATIO * mf                        # BW = 2·FW
    rec = reruns[focus] - stage_savings[focus] if n_savings else reruns[focus]
    rec = rec * mf
    dp = comm_w * row[S_dp] * mf
    dp_reduce = comm_w * row[S_dp_reduce] * mf
    tp = comm_w * row[S_tp] * mf
    ep = comm_w * row[S_ep] * mf
    cp = comm_w * row[S_cp] * mf
    # The bubble is the pipeline less the parts (DP still holding its all-reduce), so that
    # the parts and the bubble sum to the total; then DP_COMM gives DP_REDUCE its share.
    time_sum = dp + tp + ep + cp + fw + bw + rec
    bubble = pipeline - time_sum
    dp = dp - dp_reduce
    p2p = 0.0
    if options[O_p2p] == P2P_MANUAL:
        slowest = stage_times[0]
        for i in range(n_stages):
            if stage_times[i] > slowest:
                slowest = stage_times[i]
        p2p = c_nd_p2p_time(n_stages, micro_batches, vpp, slowest, cand[C_sp], options[O_p2p_ratio])
    parts[P_fw_compute] = fw
    parts[P_bw_compute] = bw
    parts[P_recompute] = rec
    parts[P_dp_comm] = dp
    parts[P_dp_reduce] = dp_reduce
    parts[P_tp_comm] = tp
    parts[P_ep_comm] = ep
    parts[P_cp_comm] = cp
    parts[P_pp_comm] = p2p
    parts[P_bubble] = bubble
    return pipeline + p2p


cdef double c_nd_apply_ratios(const double* parts, const double* ratios, double* out) noexcept nogil:
    # Each part × its ratio, a zero part staying exactly 0; the score in ms as ND's real parts:
    # COMP (FW + BW + REC) + DP_WAIT (DP + DP_REDUCE) + MP + EP + CP + PP_WAIT (BUBBLE + PP_COMM)
    # (seed apply_regression_coefficients; §2.10, §2.11).
    cdef Py_ssize_t i
    cdef double comp, dp_wait, pp_wait
    for i in range(P_COUNT):
        out[i] = 0.0 if parts[i] == 0.0 else parts[i] * ratios[i]
    comp = out[P_fw_compute] + out[P_bw_compute] + out[P_recompute]
    dp_wait = out[P_dp_comm] + out[P_dp_reduce]
    pp_wait = out[P_bubble] + out[P_pp_comm]
    return comp + dp_wait + out[P_tp_comm] + out[P_ep_comm] + out[P_cp_comm] + pp_wait


def nd_stage_sums(const double[:, ::1] kinds, const double[::1] model, const double[::1] cand,
                  const double[:, ::1] counts, const long long[::1] slot_option,
                  const long long[::1] slot_mask, long long emb_stage, long long out_stage,
                  double[:, ::1] out):
    """ND's compute and communication walks, per stage (ND_REFERENCE §2.5, §2.6).

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


def nd_combine(const double[:, ::1] stage, const double[::1] cand, const double[::1] model,
               const double[::1] options, const double[::1] stage_savings, long long stage_focused,
               double[::1] parts, double[::1] stage_times) -> float:
    """ND's score from the per-stage sums of nd_stage_sums (ND_REFERENCE §2.7-§2.10).

    p = the rows of *stage*; stage_savings: length p or 0; stage_focused: −1 for the straggler.
    *parts* (PART_NAMES order) gets that stage's parts × m, P2P and the bubble, summing to the
    returned total = pipeline + P2P. *stage_times* (length p) gets each stage's time per
    micro-batch, recompute and savings included. No stage, or m or vp outside [1, 2**31], gives NaN.
    """
    cdef Py_ssize_t n_stages = stage.shape[0], n_savings = stage_savings.shape[0]
    cdef double total
    cdef double* reruns
    if n_stages and stage.shape[1] != S_COUNT:
        raise ValueError(f"stage must have {S_COUNT} columns, got {stage.shape[1]}")
    if cand.shape[0] != C_COUNT:
        raise ValueError(f"cand must have length {C_COUNT}, got {cand.shape[0]}")
    if model.shape[0] != M_COUNT:
        raise ValueError(f"model must have length {M_COUNT}, got {model.shape[0]}")
    if options.shape[0] != O_COUNT:
        raise ValueError(f"options must have length {O_COUNT}, got {options.shape[0]}")
    if parts.shape[0] != P_COUNT:
        raise ValueError(f"parts must have length {P_COUNT}, got {parts.shape[0]}")
    if stage_times.shape[0] != n_stages:
        raise ValueError(f"stage_times must have length {n_stages}, got {stage_times.shape[0]}")
    if n_savings != 0 and n_savings != n_stages:
        raise ValueError(f"stage_savings must have length 0 or {n_stages}, got {n_savings}")
    if stage_focused >= n_stages:
        raise ValueError(f"stage_focused must be -1 or a stage in [0, {n_stages}), got {stage_focused}")
    reruns = <double*>malloc((n_stages if n_stages > 0 else 1) * sizeof(double))
    if reruns == NULL:
        raise MemoryError()
    try:
        with nogil:
            total = c_nd_combine(&stage[0, 0] if n_stages else NULL, n_stages, &cand[0], &model[0],
                                 &options[0], &stage_savings[0] if n_savings else NULL, n_savings,
                                 stage_focused, &parts[0], &stage_times[0] if n_stages else NULL, reruns)
    finally:
        free(reruns)
    return total


def nd_apply_ratios(const double[::1] parts, const double[::1] ratios, double[::1] out) -> float:
    """Each part × its ratio, a zero part staying exactly 0; returns the score in ms (ND_REFERENCE §2.10, §2.11)."""
    cdef double total
    if parts.shape[0] != P_COUNT:
        raise ValueError(f"parts must have length {P_COUNT}, got {parts.shape[0]}")
    if ratios.shape[0] != P_COUNT:
        raise ValueError(f"ratios must have length {P_COUNT}, got {ratios.shape[0]}")
    if out.shape[0] != P_COUNT:
        raise ValueError(f"out must have length {P_COUNT}, got {out.shape[0]}")
    with nogil:
        total = c_nd_apply_ratios(&parts[0], &ratios[0], &out[0])
    return total
