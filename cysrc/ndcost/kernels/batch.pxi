# Batches of candidates (twin of ndcost/kernels/batch.py): ND's score and the memory model over
# N candidates in one call, the GIL released for the whole loop. Needs columns.pxi, nd_comm.pxi
# and nd_combine.pxi (c_nd_stage_sums, c_nd_combine, c_nd_apply_ratios) and memory.pxi (c_layer_activation_bytes,
# c_inflight_micro_batches, c_stage_memory) included before it.
#
# Each candidate is a column of a candidate matrix (fields x N: numpy fills a field's values
# contiguously; the kernel gathers one candidate's into a stack buffer) and the index of its
# layout in a layout table (LY_*), whose arrays sit in two pools: `pool` (float64: chunk-summed counts, per-chunk
# counts, stage x kind presence) and `slot_pool` (int64: slot options, then slot keep masks).
# Shapes, pool spans and every priced row's layout are checked before `nogil`; scratch buffers
# are allocated once per call, sized for the largest layout. A row whose reason is an
# invalid-candidate code (>= RS_COUNT) is skipped with NaN outputs; a priced NaN becomes
# RS_undefined, a peak above capacity RS_no_fit (only rows still RS_ok change).
#
# Memory prices a layer on its kind's own hidden size and tokens (MK_hidden, MK_seq_tokens: a
# vision tower's), attention window (MK_att_window) and census (MK_census_*: a plain layer, and a
# selective one running HyperParallel's policy, HYPER_POLICY_MASK); the embedding, output and MTP
# parts stay on the model's h and the candidate's seq; MM_p_vision_extra sits on the embedding stage.

from libc.stdlib cimport malloc, free


cdef inline double c_batch_max_nan(double best, double value) noexcept nogil:
    # numpy's max step: a NaN wins and stays.
    if value != value or value > best:
        return value
    return best


cdef inline double c_vision_edge_bytes(const double* model, const double* mc) noexcept nogil:
    # A vision tower's patch embedding and merger, kept for one micro-batch (the oracle's
    # _vision_edge_bytes): patches and the norm input on the token shard, fc1's input, GELU's
    # input and output on the merged tokens.
    cdef double patches = model[MM_v_patches], rows, wide, merged
    if patches <= 0.0:
        return 0.0
    rows = mc[MC_b] * patches / mc[MC_cp]
    wide = model[MM_v_hidden] * model[MM_v_merge]
    merged = rows / model[MM_v_merge]
    return (rows * (model[MM_v_patch_in] * mc[MC_bytes_c] + model[MM_v_hidden] * mc[MC_bytes_norm]) / mc[MC_sp]
            + merged * wide * mc[MC_bytes_c] / mc[MC_sp] + 2.0 * merged * wide / mc[MC_tp] * mc[MC_bytes_c])


cdef inline void c_mem_static_layer(const double* kind, const double* mc, double* out3) noexcept nogil:
    # (params, grads, optimizer) bytes of one layer of the kind on one rank (memory.static_layer_bytes):
    # non-expert + shared over tp, ZeRO-sharded over the dense group; routed over ep·etp and the
    # expert data-parallel group (ZeRO, Rajbhandari et al. 2020 §5).
    cdef double dense = (kind[MK_p_nonexp] + kind[MK_p_shared]) / mc[MC_tp]
    cdef double routed
    out3[0] = dense * mc[MC_w_param] / mc[MC_div_param]
    out3[1] = dense * mc[MC_w_grad] / mc[MC_div_grad]
    out3[2] = dense * mc[MC_w_optim] / mc[MC_div_optim]
    out3[0] += dense * mc[MC_w_fp8_cache] / mc[MC_div_param]      # TE's fp8 weight copies
    if kind[MK_p_routed] != 0.0:
        routed = kind[MK_p_routed] / (mc[MC_ep] * mc[MC_etp])
        out3[0] += routed * (mc[MC_w_param] + mc[MC_w_fp8_cache]) / mc[MC_ediv_param]
        out3[1] += routed * mc[MC_w_grad] / mc[MC_ediv_grad]
        out3[2] += routed * mc[MC_w_optim] / mc[MC_ediv_optim]


cdef inline double c_mem_kind_seq(const double* kind, const double* mc) noexcept nogil:
    # Tokens per sequence one layer of the kind runs on: the candidate's seq, or the kind's
    # seq_tokens when > 0 (a vision tower's), split into Seq1F1B's chunks as the candidate's seq
    # is (the in-flight counts count chunks); NaN for a negative or NaN one.
    cdef double seq_tokens = kind[MK_seq_tokens]
    if seq_tokens == 0.0:
        return mc[MC_seq]
    if not seq_tokens > 0.0:
        return NAN
    if mc[MC_schedule] == <double>_MEM_SCHED_SEQ1F1B and mc[MC_seq_split] > 1.0:
        return seq_tokens / mc[MC_seq_split]
    return seq_tokens


cdef inline bint c_mem_census_prices(const double* kind, long long option, long long keep_mask) noexcept nogil:
    # Whether the kind's census prices the setting: a plain layer (census_saved >= 0), or a
    # selective one running HyperParallel's policy (census_sel >= 0).
    if option == OPTION_NONE:
        return kind[MK_census_saved] >= 0.0
    if option == OPTION_SELECTIVE and keep_mask == HYPER_POLICY_MASK:
        return kind[MK_census_sel] >= 0.0
    return False


cdef inline double c_mem_census_activation(const double* kind, const double* mc, long long option,
                                           long long keep_mask) noexcept nogil:
    # docs/ND_MODEL.md §3.4 "Census path": tokens × (saved/sp + saved_tp/tp) bytes (selective /
    # selective_tp under the policy); the caller has checked c_mem_census_prices.
    cdef double split, split_tp, seq, batch = mc[MC_b], tp = mc[MC_tp], sp = mc[MC_sp], cp = mc[MC_cp]
    if option == OPTION_NONE:
        split = kind[MK_census_saved]
        split_tp = kind[MK_census_saved_tp]
    else:
        split = kind[MK_census_sel]
        split_tp = kind[MK_census_sel_tp]
    if keep_mask < 0 or keep_mask > ALL_KEPT:
        return NAN
    seq = c_mem_kind_seq(kind, mc)
    if not (seq > 0.0 and batch > 0.0 and tp >= 1.0 and sp >= 1.0 and cp >= 1.0 and split_tp >= 0.0):
        return NAN
    return seq * batch / cp * (split / sp + split_tp / tp)


cdef inline double c_mem_layer_activation(const double* kind, const double* mc,
                                          long long option, long long keep_mask) noexcept nogil:
    # One layer of the kind for one micro-batch: its census where one prices the setting, else the formulas.
    if c_mem_census_prices(kind, option, keep_mask):
        return c_mem_census_activation(kind, mc, option, keep_mask)
    return c_mem_formula_activation(kind, mc, option, keep_mask)


cdef inline double c_mem_layer_params(const double* kind, const double* mc) noexcept nogil:
    # kernels/batch.py _layer_params: a whole layer's parameters on one rank.
    return (kind[MK_p_nonexp] + kind[MK_p_shared]) / mc[MC_tp] + kind[MK_p_routed] / (mc[MC_ep] * mc[MC_etp])


cdef inline double c_mem_autocast_activation(const double* kind, const double* mc, long long option,
                                             long long keep_mask, double tokens) noexcept nogil:
    # What one layer keeps beyond the formulas' count under torch.autocast with an fp32 stream (the oracle's
    # _autocast_activation): its weights' 16-bit casts, the pre-norms' fp32 normalised inputs, the extra
    # input casts of q/k/v and gate/up, o_proj's contiguous input copy, eager SwiGLU's product; under full
    # recompute the fp32 checkpoint's extra bytes only.
    cdef double c, tp, sp, h, extra, divisor, residual, norms
    cdef long long mask
    if mc[MC_autocast] == 0.0:
        return 0.0
    c = mc[MC_bytes_c]
    tp = mc[MC_tp]
    sp = mc[MC_sp]
    h = kind[MK_hidden]
    if option == OPTION_FULL:
        divisor = sp
        if mc[MC_slice_input] != 0.0 and tp > divisor:
            divisor = tp
        return tokens * h * (_MEM_FP32_BYTES - c) / divisor
    extra = c_mem_layer_params(kind, mc) * c
    mask = ALL_KEPT if option == OPTION_NONE else keep_mask
    residual = tokens * h / sp
    norms = kind[MK_extra_norms]
    if kind[MK_attention] != _MEM_ATT_NONE:
        norms += 1.0
    if kind[MK_ffn] != _MEM_FFN_NONE:
        norms += 1.0
    extra += c_mem_kept(mask, BIT_normOp) * norms * residual * _MEM_FP32_BYTES
    if kind[MK_attention] == _MEM_ATT_FULL:
        extra += 2.0 * residual * c + tokens * kind[MK_heads] / tp * kind[MK_head_dim] * c
    if kind[MK_ffn] == _MEM_FFN_DENSE and kind[MK_gated] != 0.0:
        extra += residual * c + c_mem_kept(mask, BIT_ffAct) * tokens * kind[MK_ffn_width] / tp * c
    return extra


cdef inline double c_mem_weighted_activation_output(const double* kind, const double* mc,
                                                   long long option, double tokens) noexcept nogil:
    # the experts' outputs c_layer_activation_bytes keeps for the probability-weighted combine, which a stack
    # weighting the tokens inside the expert activation does not keep (ExecSpec.moe_weighted_activation,
    # _weighted_activation_output); tokens of one micro-batch on the rank
    cdef double routed
    if mc[MC_moe_weighted_act] == 0.0 or kind[MK_ffn] != _MEM_FFN_MOE or option == OPTION_FULL:
        return 0.0
    routed = tokens * kind[MK_top_k] * mc[MC_token_factor] * mc[MC_etp] / mc[MC_tp]
    return routed * kind[MK_hidden] * mc[MC_bytes_c]


cdef inline double c_mem_fp8_gain(double compute_bytes, double stored_bytes) noexcept nogil:
    # bytes an element saves stored at stored_bytes instead of the compute width (never negative)
    cdef double gain = compute_bytes - stored_bytes
    return gain if gain > 0.0 else 0.0


cdef inline double c_mem_fp8_storage_saving(const double* kind, const double* mc,
                                            long long option, double tokens) noexcept nogil:
    # what one layer keeps below the formulas' count when the stack stores activations as DeepSeek-V3 does
    # (ExecSpec.fp8_activation_storage; ndcost.kernels.activation_storage._fp8_storage_saving): the attention
    # output in E5M6, the MoE SwiGLU's cached inputs (routed and shared experts) in fp8
    cdef double c, tp, saving = 0.0, inputs, routed, elements, head
    if mc[MC_fp8_act_store] == 0.0 or option == OPTION_FULL:
        return 0.0
    c = mc[MC_bytes_c]
    tp = mc[MC_tp]
    if kind[MK_attention] == _MEM_ATT_MLA or kind[MK_attention] == _MEM_ATT_FULL:
        head = kind[MK_v_dim] if kind[MK_attention] == _MEM_ATT_MLA else kind[MK_head_dim]
        saving += tokens * kind[MK_heads] / tp * head * c_mem_fp8_gain(c, _MEM_E5M6_STORED_BYTES)
    if kind[MK_ffn] == _MEM_FFN_MOE:
        inputs = 2.0 if kind[MK_gated] != 0.0 else 1.0
        routed = tokens * kind[MK_top_k] * mc[MC_token_factor] * mc[MC_etp] / tp
        elements = routed * inputs * kind[MK_ffn_width] / mc[MC_etp]
        elements += tokens * inputs * kind[MK_shared_width] / tp
        saving += elements * c_mem_fp8_gain(c, _MEM_FP8_STORED_BYTES)
    return saving


cdef inline double c_mem_formula_activation(const double* kind, const double* mc,
                                            long long option, long long keep_mask) noexcept nogil:
    # Korthikanti et al. 2022 Table 2 for one layer of the kind, on the kind's hidden size, tokens and
    # attention window, plus the inputs of the norms beyond its pre-norms (Gemma's post-norms), plus what
    # autocast's fp32 stream adds
    cdef double seq = c_mem_kind_seq(kind, mc)
    cdef double tokens = seq * mc[MC_b] / mc[MC_cp]
    cdef double extra = c_mem_autocast_activation(kind, mc, option, keep_mask, tokens), residual
    cdef long long mask
    if kind[MK_extra_norms] > 0.0 and option != OPTION_FULL:
        mask = ALL_KEPT if option == OPTION_NONE else keep_mask
        residual = tokens * kind[MK_hidden] / mc[MC_sp]
        extra += c_mem_kept(mask, BIT_normOp) * kind[MK_extra_norms] * residual * mc[MC_bytes_norm]
    extra -= c_mem_weighted_activation_output(kind, mc, option, tokens)
    extra -= c_mem_fp8_storage_saving(kind, mc, option, tokens)
    return extra + c_layer_activation_bytes(
        seq, mc[MC_b], kind[MK_hidden], mc[MC_tp], mc[MC_sp], mc[MC_cp], mc[MC_etp],
        <long long>kind[MK_attention], kind[MK_heads], kind[MK_kv_heads], kind[MK_head_dim],
        <long long>kind[MK_out_gate], <long long>kind[MK_qk_norm], kind[MK_q_lora], kind[MK_kv_lora],
        kind[MK_qk_nope], kind[MK_qk_rope], kind[MK_v_dim], kind[MK_lin_k_heads], kind[MK_lin_k_dim],
        kind[MK_lin_v_heads], kind[MK_lin_v_dim], kind[MK_lin_conv], kind[MK_lin_chunk],
        <long long>kind[MK_ffn], <long long>kind[MK_gated], kind[MK_ffn_width], kind[MK_experts],
        kind[MK_top_k], kind[MK_shared_width], mc[MC_token_factor], <long long>mc[MC_flash],
        mc[MC_bytes_c], mc[MC_bytes_softmax], mc[MC_bytes_dropout], mc[MC_bytes_norm], mc[MC_bytes_linear],
        option, keep_mask, <long long>mc[MC_slice_input], kind[MK_att_window])


cdef inline double c_mem_largest_weight(const double* kind, const double* mc) noexcept nogil:
    """kernels/batch.py _largest_weight: the layer's largest weight matrix on one rank."""
    cdef double dense = kind[MK_p_largest] / mc[MC_tp]
    cdef double expert = kind[MK_p_largest_expert] / mc[MC_etp]
    return dense if dense > expert else expert


cdef inline void c_mem_comm_buffers(const double* kind, const double* mc,
                                    double* main, double* ep_buffer) noexcept nogil:
    # (max(dp, tp, cp), ep) buffer bytes of one layer of the kind (docs/ND_MODEL.md §3.2 comm_expr),
    # on the kind's hidden size and tokens.
    cdef double tokens = c_mem_kind_seq(kind, mc) * mc[MC_b] / mc[MC_cp]
    cdef double h = kind[MK_hidden], c = mc[MC_bytes_c], tp = mc[MC_tp]
    cdef double tp_buffer = 0.0, cp_buffer = 0.0, dp_buffer = 0.0, params, routed_tokens
    cdef double heads_local, kv_local, k_width, v_width, q_width
    if mc[MC_sp] > 1.0:
        tp_buffer = tokens * h * c                               # SP's all-gathered layer input
    if mc[MC_cp] > 1.0 and kind[MK_attention] != _MEM_ATT_LINEAR:
        heads_local = kind[MK_heads] / tp
        if kind[MK_attention] == _MEM_ATT_MLA:
            k_width = heads_local * (kind[MK_qk_nope] + kind[MK_qk_rope])
            v_width = heads_local * kind[MK_v_dim]
            q_width = k_width
        else:
            kv_local = kind[MK_kv_heads] / tp
            if 1.0 > kv_local:
                kv_local = 1.0                                   # each rank keeps one kv head
            k_width = kv_local * kind[MK_head_dim]
            v_width = k_width
            q_width = heads_local * kind[MK_head_dim]
        if mc[MC_cp_ring] == _MEM_CP_RING_ALLGATHER:
            cp_buffer = 0.0                                      # held in the backward's working set
        elif mc[MC_cp_ring] != 0.0:
            cp_buffer = 2.0 * tokens * (k_width + v_width) * c   # ring: K/V chunks double-buffered
        else:
            cp_buffer = 2.0 * tokens * (q_width + k_width + v_width) * c  # Ulysses: q, k, v in and out
    if mc[MC_shards_grads] != 0.0:
        if mc[MC_z3_param_fetch] != 0.0:
            params = c_mem_largest_weight(kind, mc)              # one parameter's gradient, reduced alone
        else:                                                    # one layer's gradient bucket
            params = c_mem_layer_params(kind, mc)
        dp_buffer = params * mc[MC_w_grad]
    ep_buffer[0] = 0.0
    if kind[MK_ffn] == _MEM_FFN_MOE and mc[MC_ep] > 1.0:
        routed_tokens = tokens * kind[MK_top_k] * mc[MC_token_factor] * mc[MC_etp] / tp
        ep_buffer[0] = 2.0 * routed_tokens * h * c               # dispatch + combine buffers
    main[0] = dp_buffer
    if tp_buffer > main[0]:
        main[0] = tp_buffer
    if cp_buffer > main[0]:
        main[0] = cp_buffer


cdef struct MemScratch:
    double* static_  # (K, 3)
    double* act      # (K, O)
    double* work     # (K, O)
    double* comm_main  # (K,)
    double* comm_ep    # (K,)
    double* inflight   # (p, vp)
    double* stage_static  # (p, 3)
    double* extra_act  # (p, vp)
    double* comm       # (p,)
    double* out        # (p, 8)


cdef inline double c_mem_ring_allgather_work(const double* kind, const double* mc) noexcept nogil:
    # Bytes the backward of one attention layer holds for PyTorch's all-gather ring (cp_ring 2):
    # every CP rank's K/V (as the model passes them: torchtitan repeats them per query head), fp32
    # dQ/dK/dV accumulators and the fp32 dK/dV out and in (twin: batch.py _ring_allgather_work).
    cdef double tokens, heads_local, q_width, k_width, v_width
    if mc[MC_cp_ring] != _MEM_CP_RING_ALLGATHER or mc[MC_cp] <= 1.0 or kind[MK_attention] == _MEM_ATT_LINEAR:
        return 0.0
    tokens = c_mem_kind_seq(kind, mc) * mc[MC_b] / mc[MC_cp]
    heads_local = kind[MK_heads] / mc[MC_tp]
    if kind[MK_attention] == _MEM_ATT_MLA:
        q_width = heads_local * (kind[MK_qk_nope] + kind[MK_qk_rope])
        k_width = q_width
        v_width = heads_local * kind[MK_v_dim]
    else:
        q_width = heads_local * kind[MK_head_dim]
        k_width = q_width
        v_width = q_width
    return tokens * (mc[MC_cp] * (k_width + v_width) * mc[MC_bytes_c]
                     + _MEM_FP32_BYTES * (q_width + k_width + v_width)
                     + 2.0 * _MEM_FP32_BYTES * (k_width + v_width))


cdef double c_candidate_memory(const double* kinds, Py_ssize_t n_kinds, const double* model, const double* mc,
                               const long long* layout, const double* pool, const long long* slot_pool,
                               double reserve, MemScratch* scratch) noexcept nogil:
    # One candidate's memory per stage into scratch.out (p, 8); returns the peak (NaN if a stage is).
    cdef Py_ssize_t p = layout[LY_pp], vp = layout[LY_vpp], n_slots = layout[LY_n_slots]
    cdef const long long* options = slot_pool + layout[LY_slots_at]
    cdef const long long* masks = options + n_slots
    cdef const double* present = pool + layout[LY_present_at]
    cdef const double* kind
    cdef Py_ssize_t k, o, s, v, j
    cdef Py_ssize_t emb_stage = layout[LY_emb_stage], out_stage = layout[LY_out_stage]
    cdef double plain, plain_formula, base, gathered, kept, extra, ring, tp = mc[MC_tp], sp = mc[MC_sp]
    cdef double embedding, vision, head, word, tokens, h, v_size, c, n, dropout, logits
    cdef double emb_act, out_act, mtp_act, main, ep_buffer, peak, grads, acts, held
    cdef double mtp_out = <double>layout[LY_mtp_out]
    cdef bint split_ends, tied
    cdef long long schedule = <long long>mc[MC_schedule], m = <long long>mc[MC_m]
    cdef long long seq_split = <long long>mc[MC_seq_split]
    cdef double widths[3]
    cdef double divisors[3]
    for k in range(n_kinds):
        kind = kinds + k * MK_COUNT
        c_mem_static_layer(kind, mc, scratch.static_ + k * 3)
        plain = c_mem_layer_activation(kind, mc, OPTION_NONE, ALL_KEPT)
        # What a selective setting the formulas price recomputes: the formulas' plain layer minus
        # what it keeps (the census's plain layer, where one exists, is not on their scale).
        plain_formula = plain
        if kind[MK_census_saved] >= 0.0:
            plain_formula = c_mem_formula_activation(kind, mc, OPTION_NONE, ALL_KEPT)
        gathered = 0.0
        if mc[MC_fsdp_gathers] != 0.0 and mc[MC_z3_param_fetch] != 0.0:
            gathered = c_mem_largest_weight(kind, mc) * mc[MC_w_param]   # one parameter gathered at a time
        elif mc[MC_fsdp_gathers] != 0.0:
            # docs/ND_MODEL.md §3.7 FSDP extras: a backward holds two layers' gathered parameters.
            gathered = 2.0 * c_mem_layer_params(kind, mc) * mc[MC_w_param]
        ring = c_mem_ring_allgather_work(kind, mc)
        for o in range(n_slots):
            kept = c_mem_layer_activation(kind, mc, options[o], masks[o])
            extra = 0.0
            if options[o] == OPTION_FULL:
                extra = plain                     # §3.7 FULL_REC: the plain layer re-materialised
            elif options[o] == OPTION_SELECTIVE:
                # The recomputed ops come back, at one micro-batch: measured against the plain
                # layer of the same pricing (the census's for its policy, else the formulas').
                base = plain_formula
                if masks[o] == HYPER_POLICY_MASK and kind[MK_census_sel] >= 0.0:
                    base = plain
                extra = base - kept
                if 0.0 > extra:
                    extra = 0.0
            scratch.act[k * n_slots + o] = kept
            # the larger of the two backward moments (batch.py _candidate_memory says why)
            scratch.work[k * n_slots + o] = (ring if ring > extra else extra) + gathered
        c_mem_comm_buffers(kind, mc, scratch.comm_main + k, scratch.comm_ep + k)

    for s in range(p):
        for v in range(vp):
            scratch.inflight[s * vp + v] = c_inflight_micro_batches(schedule, p, m, vp, s, v, seq_split)

    # Outside the layers: embedding, output head, MTP extras (memory._stage_static, _extra_activations).
    widths[0] = mc[MC_w_param]
    widths[1] = mc[MC_w_grad]
    widths[2] = mc[MC_w_optim]
    divisors[0] = mc[MC_div_param]
    divisors[1] = mc[MC_div_grad]
    divisors[2] = mc[MC_div_optim]
    for j in range(p * 3):
        scratch.stage_static[j] = 0.0
    embedding = model[MM_p_embedding] / tp
    # A vision tower's patch embedding and merger sit with the embedding, sharded as a layer's
    # non-expert params (over tp, then the ZeRO divisors of non-expert state).
    vision = model[MM_p_vision_extra] / tp
    for j in range(3):
        scratch.stage_static[emb_stage * 3 + j] += embedding * widths[j] / divisors[j]
        if vision != 0.0:
            scratch.stage_static[emb_stage * 3 + j] += vision * widths[j] / divisors[j]
    split_ends = emb_stage != out_stage
    tied = mc[MC_tie_emb] != 0.0
    word = model[MM_word_embedding]
    head = (0.0 if (tied and not split_ends) else word) + model[MM_p_final_norm]
    if mtp_out > 0.0 and model[MM_n_mtp] > 0.0:
        head += mtp_out * model[MM_p_mtp_module]
        if split_ends and not tied:
            head += word                          # Megatron-Core: the MTP stage builds the embedding too
    head = head / tp
    for j in range(3):
        scratch.stage_static[out_stage * 3 + j] += head * widths[j] / divisors[j]

    tokens = mc[MC_seq] * mc[MC_b] / mc[MC_cp]
    h = model[MM_h]
    v_size = model[MM_v]
    c = mc[MC_bytes_c]
    n = mc[MC_bytes_norm]
    dropout = mc[MC_bytes_dropout]
    logits = tokens * v_size * mc[MC_bytes_logit] / tp               # the loss's logits (ExecSpec.logit_bytes)
    emb_act = tokens * 8.0 + tokens * h * dropout / sp               # int64 token ids (memory.TOKEN_ID_BYTES) + dropout mask
    emb_act += c_vision_edge_bytes(model, mc)
    out_act = tokens * h * n / sp + tokens * h * c / sp + logits      # final norm, head input, logits
    if mc[MC_autocast] != 0.0:
        # autocast: the final norm's fp32 normalised input and the head weight's 16-bit cast
        out_act += tokens * h * _MEM_FP32_BYTES / sp + word / tp * c
    mtp_act = tokens * (2.0 * h * n + 2.0 * h * c + h * n + h * c) / sp + logits
    for j in range(p * vp):
        scratch.extra_act[j] = 0.0
    scratch.extra_act[emb_stage * vp + layout[LY_emb_chunk]] += emb_act
    scratch.extra_act[out_stage * vp + layout[LY_out_chunk]] += out_act + mtp_out * mtp_act

    for s in range(p):
        main = scratch.comm_main[0] if present[s * n_kinds] != 0.0 else 0.0
        ep_buffer = scratch.comm_ep[0] if present[s * n_kinds] != 0.0 else 0.0
        for k in range(1, n_kinds):
            main = c_batch_max_nan(main, scratch.comm_main[k] if present[s * n_kinds + k] != 0.0 else 0.0)
            ep_buffer = c_batch_max_nan(ep_buffer, scratch.comm_ep[k] if present[s * n_kinds + k] != 0.0 else 0.0)
        scratch.comm[s] = main + ep_buffer

    c_stage_memory(scratch.static_, scratch.act, scratch.work, n_kinds, n_slots, pool + layout[LY_mcounts_at],
                   p, vp, scratch.inflight, scratch.stage_static, scratch.extra_act, scratch.comm, reserve,
                   scratch.out, mc[MC_schedule] == <double>_MEM_SCHED_ZERO_BUBBLE_V
                   or mc[MC_schedule] == <double>_MEM_SCHED_DUALPIPEV)
    if mc[MC_grads_none] != 0.0 and m == 1:
        # gradients made by the backward as it frees activations (the oracle's _grads_from_backward)
        for s in range(p):
            grads = scratch.out[s * _MEM_COLUMNS + 1]
            acts = scratch.out[s * _MEM_COLUMNS + 3]
            held = grads - acts if grads > acts else 0.0
            scratch.out[s * _MEM_COLUMNS + _MEM_COLUMNS - 1] += held - grads
            scratch.out[s * _MEM_COLUMNS + 1] = held
    if mc[MC_schedule] == <double>_MEM_SCHED_DUALPIPE:
        c_mem_pair_dualpipe(scratch.out, p)
    peak = scratch.out[_MEM_COLUMNS - 1]
    for s in range(1, p):
        peak = c_batch_max_nan(peak, scratch.out[s * _MEM_COLUMNS + _MEM_COLUMNS - 1])
    return peak


cdef int c_layout_row_fault(const long long* row, Py_ssize_t n_kinds, Py_ssize_t n_pool,
                            Py_ssize_t n_slot_pool) noexcept nogil:
    # What is wrong with one layout row (LY_* fields), 0 nothing: 1 its degrees, 2 its pool spans
    # (within the pools), 3 its placements (c_layout_row_check says it in words).
    cdef long long p = row[LY_pp], vp = row[LY_vpp], n_slots = row[LY_n_slots], k_o
    if p < 1 or vp < 1 or n_slots < 1 or p > 1 << 20 or vp > 1 << 20 or n_slots > 1 << 20:
        return 1
    k_o = n_kinds * n_slots
    if (row[LY_counts_at] < 0 or row[LY_counts_at] + p * k_o > n_pool
            or row[LY_mcounts_at] < 0 or row[LY_mcounts_at] + p * vp * k_o > n_pool
            or row[LY_present_at] < 0 or row[LY_present_at] + p * n_kinds > n_pool
            or row[LY_slots_at] < 0 or row[LY_slots_at] + 2 * n_slots > n_slot_pool):
        return 2
    if not (0 <= row[LY_emb_stage] < p and 0 <= row[LY_out_stage] < p
            and 0 <= row[LY_emb_chunk] < vp and 0 <= row[LY_out_chunk] < vp and row[LY_mtp_out] >= 0):
        return 3
    return 0


cdef int c_layout_row_raise(int fault, Py_ssize_t li) except -1:
    if fault == 1:
        raise ValueError(f"layouts[{li}] must hold pp, vpp, n_slots >= 1")
    if fault == 2:
        raise ValueError(f"layouts[{li}] must hold pool spans within the pools")
    if fault == 3:
        raise ValueError(f"layouts[{li}] must place the embedding and output on a stage and chunk of its layout")
    return 0


cdef int c_layout_row_check(const long long* row, Py_ssize_t li, Py_ssize_t n_kinds, Py_ssize_t n_pool,
                            Py_ssize_t n_slot_pool) except -1:
    # One layout row (LY_* fields): its degrees, its pool spans within the pools and its placements.
    return c_layout_row_raise(c_layout_row_fault(row, n_kinds, n_pool, n_slot_pool), li)


cdef int c_mem_scratch_alloc(MemScratch* scratch, Py_ssize_t n_kinds, Py_ssize_t max_slots, Py_ssize_t max_p,
                             Py_ssize_t max_pv) except -1:
    # c_candidate_memory's buffers, sized for the largest layout; free with c_mem_scratch_free (also
    # after a MemoryError: every pointer is set, NULL or allocated).
    scratch.static_ = <double*>malloc(n_kinds * 3 * sizeof(double))
    scratch.act = <double*>malloc(n_kinds * max_slots * sizeof(double))
    scratch.work = <double*>malloc(n_kinds * max_slots * sizeof(double))
    scratch.comm_main = <double*>malloc(n_kinds * sizeof(double))
    scratch.comm_ep = <double*>malloc(n_kinds * sizeof(double))
    scratch.inflight = <double*>malloc(max_pv * sizeof(double))
    scratch.stage_static = <double*>malloc(max_p * 3 * sizeof(double))
    scratch.extra_act = <double*>malloc(max_pv * sizeof(double))
    scratch.comm = <double*>malloc(max_p * sizeof(double))
    scratch.out = <double*>malloc(max_p * _MEM_COLUMNS * sizeof(double))
    if (scratch.static_ == NULL or scratch.act == NULL or scratch.work == NULL or scratch.comm_main == NULL
            or scratch.comm_ep == NULL or scratch.inflight == NULL or scratch.stage_static == NULL
            or scratch.extra_act == NULL or scratch.comm == NULL or scratch.out == NULL):
        raise MemoryError()
    return 0


cdef void c_mem_scratch_free(MemScratch* scratch) noexcept:
    free(scratch.static_)
    free(scratch.act)
    free(scratch.work)
    free(scratch.comm_main)
    free(scratch.comm_ep)
    free(scratch.inflight)
    free(scratch.stage_static)
    free(scratch.extra_act)
    free(scratch.comm)
    free(scratch.out)


cdef Py_ssize_t c_batch_check(Py_ssize_t n_kinds, Py_ssize_t n_rows, const long long[::1] layout_index,
                              const long long[:, ::1] layouts, Py_ssize_t n_pool, Py_ssize_t n_slot_pool,
                              const long long[::1] reason, const double[:, :] cands, Py_ssize_t p_column,
                              Py_ssize_t vp_column, Py_ssize_t* max_p, Py_ssize_t* max_pv,
                              Py_ssize_t* max_slots) except -1:
    # The shapes both batch kernels share, every layout's pool spans and places, and every priced
    # row's layout (in range, same pp and vpp); the largest pp, pp·vpp and slot count for the scratch.
    cdef Py_ssize_t i, li, bad, n_layouts = layouts.shape[0]
    cdef long long p, vp, n_slots
    cdef int fault
    if n_kinds < 1:
        raise ValueError("kinds must have at least one row")
    if layouts.shape[0] and layouts.shape[1] != LY_COUNT:
        raise ValueError(f"layouts must have {LY_COUNT} columns, got {layouts.shape[1]}")
    if layout_index.shape[0] != n_rows:
        raise ValueError(f"layout_index must have length {n_rows}, got {layout_index.shape[0]}")
    if reason.shape[0] != n_rows:
        raise ValueError(f"reason must have length {n_rows}, got {reason.shape[0]}")
    max_p[0] = 1
    max_pv[0] = 1
    max_slots[0] = 1
    fault = 0
    bad = -1
    # Every layout and every priced row, without the GIL (the threads of estimate_many check their
    # chunks at once); the first fault is raised after, with the GIL.
    with nogil:
        for li in range(n_layouts):
            fault = c_layout_row_fault(&layouts[li, 0], n_kinds, n_pool, n_slot_pool)
            if fault:
                bad = li
                break
            p = layouts[li, LY_pp]
            vp = layouts[li, LY_vpp]
            n_slots = layouts[li, LY_n_slots]
            if p > max_p[0]:
                max_p[0] = p
            if p * vp > max_pv[0]:
                max_pv[0] = p * vp
            if n_slots > max_slots[0]:
                max_slots[0] = n_slots
        if not fault:
            for i in range(n_rows):
                if reason[i] >= RS_COUNT:
                    continue
                li = layout_index[i]
                if li < 0 or li >= n_layouts:
                    fault = 4
                elif (cands[p_column, i] != <double>layouts[li, LY_pp]
                        or cands[vp_column, i] != <double>layouts[li, LY_vpp]):
                    fault = 5
                if fault:
                    bad = i
                    break
    if fault == 4:
        raise ValueError(f"layout_index[{bad}] must be a layout row in [0, {n_layouts}), got {layout_index[bad]}")
    if fault == 5:
        raise ValueError(f"candidate {bad} must have the pp and vpp of its layout {layout_index[bad]}")
    c_layout_row_raise(fault, bad)
    return 0


cdef inline double c_nd_price(const double* kinds, Py_ssize_t n_kinds, const double* model, const double* cand,
                              const long long* layout, const double* pool, const long long* slot_pool,
                              const double* options, const double* ratios, double* stage, double* parts,
                              double* times, double* reruns) noexcept nogil:
    # ND's score of one candidate on its layout row (LY_* fields): the stage walk, the combine and,
    # with *ratios* (NULL: none), the parts in milliseconds; returns the step. The scratch (stage:
    # pp x S_COUNT; times, reruns: pp) is the caller's.
    cdef Py_ssize_t p = layout[LY_pp], n_slots = layout[LY_n_slots], j
    cdef const long long* slots = slot_pool + layout[LY_slots_at]
    cdef double total
    cdef double scaled[P_COUNT]
    c_nd_stage_sums(kinds, n_kinds, model, cand, pool + layout[LY_counts_at], p, slots, slots + n_slots, n_slots,
                    layout[LY_emb_stage], layout[LY_out_stage], stage)
    total = c_nd_combine(stage, p, cand, model, options, NULL, 0, -1, parts, times, reruns)
    if ratios != NULL:
        total = c_nd_apply_ratios(parts, ratios, scaled)
        for j in range(P_COUNT):
            parts[j] = scaled[j]
    return total


def nd_estimate_batch(const double[:, ::1] kinds,          # IN (K, K_COUNT)
                      const double[::1] model,             # IN (M_COUNT,)
                      const double[:, :] cands,            # IN (C_COUNT, N): a candidate per column, any strides
                      const long long[::1] layout_index,   # IN (N,)
                      const long long[:, ::1] layouts,     # IN (L, LY_COUNT)
                      const double[::1] pool,              # IN
                      const long long[::1] slot_pool,      # IN
                      const double[::1] options,           # IN (O_COUNT,)
                      const double[::1] ratios,            # IN (P_COUNT,) or (0,)
                      long long[::1] reason,               # IN/OUT (N,)
                      double[::1] out_step,                # OUT (N,)
                      double[:, :] out_parts,              # OUT (P_COUNT, N), any strides (a part per row)
                      double[:, ::1] out_stage_times) -> None:  # OUT (N, >= max pp) or (0, 0)
    """ND's score of N candidates (docs/ND_MODEL.md §2.2-§2.10), one stage walk and combine each."""
    cdef Py_ssize_t n = cands.shape[1], n_kinds = kinds.shape[0], i, j, s, p, n_times
    cdef Py_ssize_t max_p, max_pv, max_slots
    cdef bint with_ratios = ratios.shape[0] != 0
    cdef double total
    cdef double cand[C_COUNT]
    cdef double parts[P_COUNT]
    cdef const long long* layout
    cdef double* stage
    cdef double* times
    cdef double* reruns
    if n_kinds and kinds.shape[1] != K_COUNT:
        raise ValueError(f"kinds must have {K_COUNT} columns, got {kinds.shape[1]}")
    if model.shape[0] != M_COUNT:
        raise ValueError(f"model must have length {M_COUNT}, got {model.shape[0]}")
    if cands.shape[0] != C_COUNT:
        raise ValueError(f"cands must have {C_COUNT} rows (a candidate per column), got {cands.shape[0]}")
    if options.shape[0] != O_COUNT:
        raise ValueError(f"options must have length {O_COUNT}, got {options.shape[0]}")
    if with_ratios and ratios.shape[0] != P_COUNT:
        raise ValueError(f"ratios must have length 0 or {P_COUNT}, got {ratios.shape[0]}")
    if out_step.shape[0] != n:
        raise ValueError(f"out_step must have length {n}, got {out_step.shape[0]}")
    if out_parts.shape[0] != P_COUNT or out_parts.shape[1] != n:
        raise ValueError(f"out_parts must be ({P_COUNT}, {n})")
    if not (0.0 <= model[M_default_kind] < n_kinds and model[M_default_kind] == floor(model[M_default_kind])):
        raise ValueError(f"model[default_kind] must be a kind row in [0, {n_kinds})")
    c_batch_check(n_kinds, n, layout_index, layouts, pool.shape[0], slot_pool.shape[0], reason, cands,
                  C_p, C_vp, &max_p, &max_pv, &max_slots)
    n_times = out_stage_times.shape[1] if out_stage_times.shape[0] else 0
    if out_stage_times.shape[0] not in (0, n) or (out_stage_times.shape[0] and n_times < max_p):
        raise ValueError(f"out_stage_times must be (0, 0) or ({n}, >= the largest pp ({max_p}))")
    stage = <double*>malloc(max_p * S_COUNT * sizeof(double))
    times = <double*>malloc(max_p * sizeof(double))
    reruns = <double*>malloc(max_p * sizeof(double))
    try:
        if stage == NULL or times == NULL or reruns == NULL:
            raise MemoryError()
        with nogil:
            for i in range(n):
                if reason[i] >= RS_COUNT:
                    out_step[i] = NAN
                    for j in range(P_COUNT):
                        out_parts[j, i] = NAN
                    for s in range(n_times):
                        out_stage_times[i, s] = NAN
                    continue
                layout = &layouts[layout_index[i], 0]
                p = layout[LY_pp]
                for j in range(C_COUNT):
                    cand[j] = cands[j, i]
                total = c_nd_price(&kinds[0, 0], n_kinds, &model[0], cand, layout, &pool[0], &slot_pool[0],
                                   &options[0], &ratios[0] if with_ratios else NULL, stage, parts, times, reruns)
                out_step[i] = total
                for j in range(P_COUNT):
                    out_parts[j, i] = parts[j]
                for s in range(n_times):
                    out_stage_times[i, s] = times[s] if s < p else NAN
                if total != total and reason[i] == RS_ok:
                    reason[i] = RS_undefined
    finally:
        free(stage)
        free(times)
        free(reruns)


def memory_batch(const double[:, ::1] kinds,          # IN (K, MK_COUNT)
                 const double[::1] model,             # IN (MM_COUNT,)
                 const double[:, :] cands,            # IN (MC_COUNT, N): a candidate per column, any strides
                 const long long[::1] layout_index,   # IN (N,)
                 const long long[:, ::1] layouts,     # IN (L, LY_COUNT)
                 const double[::1] pool,              # IN
                 const long long[::1] slot_pool,      # IN
                 double reserve,
                 double capacity,
                 long long[::1] reason,               # IN/OUT (N,)
                 double[::1] out_peak,                # OUT (N,)
                 unsigned char[::1] out_fits,         # OUT (N,)
                 double[:, :, ::1] out_stages) -> None:  # OUT (N, >= max pp, 8) or (0, 0, 8)
    """Memory of N candidates (docs/ND_MODEL.md §3; Korthikanti et al. 2022): the peak stage and whether it fits."""
    cdef Py_ssize_t n = cands.shape[1], n_kinds = kinds.shape[0], i, j, s, p, n_stage_rows
    cdef Py_ssize_t max_p, max_pv, max_slots
    cdef double peak
    cdef double mc[MC_COUNT]
    cdef const long long* layout
    cdef MemScratch scratch
    if n_kinds and kinds.shape[1] != MK_COUNT:
        raise ValueError(f"kinds must have {MK_COUNT} columns, got {kinds.shape[1]}")
    if model.shape[0] != MM_COUNT:
        raise ValueError(f"model must have length {MM_COUNT}, got {model.shape[0]}")
    if cands.shape[0] != MC_COUNT:
        raise ValueError(f"cands must have {MC_COUNT} rows (a candidate per column), got {cands.shape[0]}")
    if out_peak.shape[0] != n or out_fits.shape[0] != n:
        raise ValueError(f"out_peak and out_fits must have length {n}")
    c_batch_check(n_kinds, n, layout_index, layouts, pool.shape[0], slot_pool.shape[0], reason, cands,
                  MC_p, MC_vp, &max_p, &max_pv, &max_slots)
    n_stage_rows = out_stages.shape[1] if out_stages.shape[0] else 0
    if out_stages.shape[0] not in (0, n) or out_stages.shape[2] != _MEM_COLUMNS or (
            out_stages.shape[0] and n_stage_rows < max_p):
        raise ValueError(f"out_stages must be (0, 0, {_MEM_COLUMNS}) or ({n}, >= the largest pp ({max_p}), {_MEM_COLUMNS})")
    try:
        c_mem_scratch_alloc(&scratch, n_kinds, max_slots, max_p, max_pv)
        with nogil:
            for i in range(n):
                if reason[i] >= RS_COUNT:
                    out_peak[i] = NAN
                    out_fits[i] = 0
                    for s in range(n_stage_rows):
                        for j in range(_MEM_COLUMNS):
                            out_stages[i, s, j] = NAN
                    continue
                layout = &layouts[layout_index[i], 0]
                p = layout[LY_pp]
                for j in range(MC_COUNT):
                    mc[j] = cands[j, i]
                peak = c_candidate_memory(&kinds[0, 0], n_kinds, &model[0], mc, layout, &pool[0], &slot_pool[0],
                                          reserve, &scratch)
                out_peak[i] = peak
                out_fits[i] = 1 if peak <= capacity else 0
                for s in range(n_stage_rows):
                    for j in range(_MEM_COLUMNS):
                        out_stages[i, s, j] = scratch.out[s * _MEM_COLUMNS + j] if s < p else NAN
                if reason[i] == RS_ok:
                    if peak != peak:
                        reason[i] = RS_undefined
                    elif not peak <= capacity:
                        reason[i] = RS_no_fit
    finally:
        c_mem_scratch_free(&scratch)


def kind_activation_bytes(const double[::1] kind,   # IN (MK_COUNT,): one row of the memory kind table
                          const double[::1] mc,     # IN (MC_COUNT,): one memory candidate
                          long long option, long long keep_mask):
    """Bytes one layer of a kind keeps for one micro-batch, as memory_batch prices it (the kind's
    tokens, attention window and census included)."""
    if kind.shape[0] != MK_COUNT:
        raise ValueError(f"kind must have length {MK_COUNT}, got {kind.shape[0]}")
    if mc.shape[0] != MC_COUNT:
        raise ValueError(f"mc must have length {MC_COUNT}, got {mc.shape[0]}")
    return c_mem_layer_activation(&kind[0], &mc[0], option, keep_mask)
