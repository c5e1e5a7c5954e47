# ND's score in ND units, part 1 of 3 (twin of ndcost/kernels/nd_ops.py): the op loads and the
# recompute factors of one layer. Parts 2 and 3: nd_comm.pxi (the communication of one layer
# and the stage walks) and nd_combine.pxi (the stage and pipeline combination, the ratios),
# included in that order. Formulas: the seed estimate.py and docs/ND_MODEL.md §2.2-§2.10 (§3.3 for
# the parameter counts the kind table carries); each cdef function names its source, and ND's
# oddities are kept and marked where they happen. Every function does its floating-point
# operations in the oracle's order, so that the two agree to rounding. Needs
# kernels/columns.pxi and kernels/codes.pxi (the ABI enums and codes) included before it.
#
# A multimodal model's submodules are priced each on its own config (seed _submodule_parts):
# every PER-LAYER formula reads the kind's submodule dimensions (c_nd_sub_dims), while the
# embedding and output nodes, the FSDP root parts, the DYNAMIC ratio, P2P and the pipeline
# stay on the text model's.

# ND's ops of one layer (OP_*, ND_OP_COUNT: ND_OPS of the oracle), the keep-mask bits (BIT_*: bit i is
# SWITCHES[i] of the seed recompute/profile.py, set when kept) and ND_GDN_CHUNK: kernels/codes.pxi.


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


cdef inline void c_nd_sub_dims(const double* kind, const double* model, const double* cand,
                               double* h, double* heads, double* hff, double* s) noexcept nogil:
    # (h, a, hff, s) of the submodule a body layer of the kind belongs to: ND's cfg.h, cfg.a,
    # cfg.hff and cfg.s of the submodule's own config (seed _submodule_parts prices each
    # submodule on its copy). A text kind carries the model's values; a vision-tower kind its
    # own. sub_seq <= 0 (or NaN) means the candidate's s, as the ABI says. sub_h, sub_a and
    # sub_hff of exactly 0 mean the model's h, a and hff: a zero width is no submodule (a table
    # written before these columns existed); NaN or a negative value passes through.
    h[0] = kind[K_sub_h] if kind[K_sub_h] != 0.0 else model[M_h]
    heads[0] = kind[K_sub_a] if kind[K_sub_a] != 0.0 else model[M_a]
    hff[0] = kind[K_sub_hff] if kind[K_sub_hff] != 0.0 else model[M_hff]
    s[0] = kind[K_sub_seq] if kind[K_sub_seq] > 0.0 else cand[C_s]


cdef inline void c_nd_op_loads(const double* kind, const double* model, const double* cand,
                               double* out) noexcept nogil:
    # One layer of the kind: every op's load x its count x bytes_p/t/cp (seed op_table +
    # _flavour_tables; docs/ND_MODEL.md §2.2, §2.3). Every cfg.h, cfg.a, cfg.hff and cfg.s of the
    # seed's table is the layer's SUBMODULE's (c_nd_sub_dims): h in attMM, the default head dim
    # h/a, ffMM, gather, normOp, dropout and dispatch; the heads in softmax, headCast and
    # dropout; hff in a dense ffMM/ffAct; s in every entry. b, t, sp, cp, bytes_p and the MoE
    # constants are the run's / the model's.
    cdef double b = cand[C_b], t = cand[C_t], sp = cand[C_sp], cp = cand[C_cp]
    cdef double h, heads, hff, s
    cdef double a = kind[K_att_a]
    cdef double n_kv, d_h, d_q, g, d_qk, att_mm, n_att, n_v, d_k, d_v, linrec, att_bmm
    cdef double softmax, head_cast, gather, norm_op, qknorm, ts, dropout, dispatch, ff_mm, ff_act
    cdef double n_shared, n_chosen, n_ffmm, n_ff, gate, experts, width, scale
    cdef int op
    c_nd_sub_dims(kind, model, cand, &h, &heads, &hff, &s)
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
    # §2.2 n_softmax / n_headCast / n_dropout take cfg.a, not att.a: the SUBMODULE's heads.
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
        ff_mm = 6.0 * b * s * h * width                                # exp n_ffMM (= base·width/hff), sub h
        ff_act = 21.0 * b * s * experts                                # exp n_ffAct (= base·experts/hff)
        # §2.3 dispatch: MOE_DISPATCH·b·s·h·max(1, n_chosen)·max(1, ep), linear in EP; the
        # tokens and width are the submodule's (cfg.s, cfg.h of its config).
        dispatch = cand[C_moe_dispatch] * b * s * h * n_chosen * c_nd_at_least_one(cand[C_ep])
    else:
        # A dense kind runs cfg.hff (seed op_table), not the kind's ffn_width: the SUBMODULE's hff.
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
    if keep_mask == HYPER_POLICY_MASK and kind[K_census_att] >= 0.0:
        # selective_shares: a kind with a census running HyperParallel's policy re-runs the
        # census' shares of its projection matmuls (attention and FFN); every other op keeps
        # its switch.
        out[OP_attMM] = kind[K_census_att]
        out[OP_ffMM] = kind[K_census_ffn]
    elif kind[K_is_mla] != 0.0 and not ((keep_mask >> BIT_attUp) & 1):
        # MLA with attUp recomputed: attMM re-runs the up-projections' share up/W.
        w = kind[K_mla_w]
        out[OP_attMM] = kind[K_mla_up] / w if w > 0.0 else NAN



def nd_op_loads(const double[:, ::1] kinds, const double[::1] model, const double[::1] cand,
                long long k, double[::1] out):
    """Every op's load for ONE layer of kind *k*, in ``ND_OPS`` order (docs/ND_MODEL.md §2.2, §2.3)."""
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
    """Per op (``ND_OPS`` order) the recompute factor f of a layer of kind *k* (docs/ND_MODEL.md §2.4)."""
    if kinds.shape[0] and kinds.shape[1] != K_COUNT:
        raise ValueError(f"kinds must have {K_COUNT} columns, got {kinds.shape[1]}")
    if out.shape[0] != ND_OP_COUNT:
        raise ValueError(f"out must have length {ND_OP_COUNT}, got {out.shape[0]}")
    if not 0 <= k < kinds.shape[0]:
        raise ValueError(f"k must be a kind row in [0, {kinds.shape[0]}), got {k}")
    with nogil:
        c_nd_recompute_factors(&kinds[k, 0], option, keep_mask, &out[0])
