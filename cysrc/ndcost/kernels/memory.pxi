# Memory per pipeline stage, in bytes (twin of ndcost/kernels/memory.py; the
# formulas' sources are cited there and again here, term by term).
# docs/ND_MODEL.md §3.6 (in flight), Korthikanti et al. 2022 §4 / Table 2 (one
# layer's activations), docs/ND_MODEL.md §3.4-3.7 (the stage sum).

# The schedule, attention and FFN codes (_MEM_SCHED_*, _MEM_ATT_*, _MEM_FFN_*), the recompute options (OPTION_*
# of kernels/columns.pxi), the keep-mask bits (BIT_*, recompute_spec.SWITCHES order; the gather bit stores
# nothing more: Megatron keeps the SP shard and re-gathers, Korthikanti §4.2.2), ALL_KEPT, _MEM_COLUMNS (the
# seven parts and their total) and the byte widths (_MEM_FP32_BYTES: fp32 logsumexp, FlashAttention-2
# Algorithm 1, and fp32 GDN chunk states; the routing's _MEM_*_BYTES): kernels/codes.pxi.


# ---------------------------------------------------------------- in flight

cdef inline long long c_mem_chunk_share(long long forwards, long long size, long long chunk) noexcept nogil:
    # of a group's first `forwards` forwards, those on `chunk` (the oracle's _chunk_share)
    cdef long long mine = forwards - chunk * size
    return size if mine > size else (mine if mine > 0 else 0)


cdef inline long long c_mem_one_f_one_b(long long p, long long m, long long vp, long long stage,
                                        long long chunk) noexcept nogil:
    # 1F1B vp = 1 (docs/ND_MODEL.md §3.6), interleaved as Megatron-Core's schedule holds it (the oracle's
    # _one_f_one_b: its warm-up plus the first steady forward, in its table's order).
    cdef long long base = p if p < m else m
    cdef long long forwards, first, second, size
    if vp == 1:
        return base - stage
    forwards = 2 * (p - stage - 1) + (vp - 1) * p + 1
    first = forwards if forwards < base * vp else base * vp
    second = forwards - first if m > p else 0
    size = m - p if m - p < p else p
    return c_mem_chunk_share(first, base, chunk) + (c_mem_chunk_share(second, size, chunk) if second > 0 else 0)


cdef inline double c_inflight_micro_batches(long long schedule, long long p, long long m, long long vp,
                                            long long stage, long long chunk, long long seq_split) noexcept nogil:
    cdef long long base, count
    if p < 1 or m < 1 or vp < 1 or seq_split < 1:
        return NAN
    if stage < 0 or stage >= p or chunk < 0 or chunk >= vp:
        return NAN
    base = p if p < m else m
    if schedule == _MEM_SCHED_1F1B:
        count = c_mem_one_f_one_b(p, m, vp, stage, chunk)
    elif schedule == _MEM_SCHED_GPIPE:
        if vp != 1:
            return NAN
        count = m  # GPipe holds every micro-batch (Huang et al. 2019 §2.2); ND uses p
    elif schedule == _MEM_SCHED_ZERO_BUBBLE_V:
        if vp != 2:
            return NAN
        count = 2 * base - 1 - stage if chunk == 0 else stage  # §3.6 DualPipeV
    elif schedule == _MEM_SCHED_SEQ1F1B:
        count = c_mem_one_f_one_b(p, m, vp, stage, chunk)
        if chunk == 0:
            count += seq_split - 1  # §3.6 Seq1F1B: base − stage + n_s_split − 1
    elif schedule == _MEM_SCHED_DUALPIPEV:
        if vp != 2:
            return NAN
        count = 2 * base - stage if chunk == 0 else stage + 1  # deepseek-ai/DualPipe dualpipev.py: PP + 1
    elif schedule == _MEM_SCHED_DUALPIPE:
        if vp != 1:
            return NAN
        count = base - stage  # dualpipe.py: the 1F1B counts of a rank's two stages (c_mem_pair_dualpipe)
    else:
        return NAN
    return <double>(count if count > 1 else 1)


# ---------------------------------------------------------------- one layer

cdef inline double c_mem_kept(long long mask, int bit) noexcept nogil:
    return 1.0 if (mask >> bit) & 1 else 0.0


cdef inline double c_mem_score_bytes(double score_elements, double tokens, double heads_local, long long flash,
                                 long long mask, double compute_bytes, double softmax_bytes,
                                 double dropout_bytes) noexcept nogil:
    cdef double cast_bytes
    if flash:
        return c_mem_kept(mask, BIT_attBMM) * heads_local * tokens * _MEM_FP32_BYTES  # fp32 logsumexp
    # Korthikanti §4.1: softmax 2as²b + dropout mask as²b + dropout output 2as²b.
    cast_bytes = compute_bytes if (dropout_bytes > 0.0 or softmax_bytes != compute_bytes) else 0.0
    return score_elements * (c_mem_kept(mask, BIT_softmax) * softmax_bytes
                             + c_mem_kept(mask, BIT_dropout) * dropout_bytes
                             + c_mem_kept(mask, BIT_headCast) * cast_bytes)


cdef inline double c_mem_full_attention_elements(long long mask, double heads_local, double kv_local, double head_dim,
                                             long long out_gate, long long qk_norm) noexcept nogil:
    # Korthikanti §4.1: Q, K 4sbh; V 2sbh; output-projection input 2sbh (GQA: kv heads).
    cdef double q = heads_local * head_dim
    cdef double kv = kv_local * head_dim
    cdef double elements = q + 2.0 * kv
    elements += q
    if qk_norm:
        elements += c_mem_kept(mask, BIT_normOp) * (q + kv)
    if out_gate:
        elements += 2.0 * q
    return elements


cdef inline double c_mem_mla_elements(long long mask, double heads_local, double q_lora, double kv_lora,
                                  double qk_nope, double qk_rope, double v_dim) noexcept nogil:
    # DeepSeek-V2 report §2.1.2 Eqs. 9-19; latents unsplit over tp (Megatron-Core MLA).
    cdef double qk_head = qk_nope + qk_rope
    cdef double elements = 0.0
    if q_lora > 0.0:
        elements += c_mem_kept(mask, BIT_normOp) * q_lora
        elements += c_mem_kept(mask, BIT_attUp) * heads_local * qk_head
    else:
        elements += heads_local * qk_head
    elements += c_mem_kept(mask, BIT_normOp) * kv_lora
    elements += qk_rope  # the shared k_pe (the normed latents c_q, c_kv: the caller's, at linear_bytes)
    elements += c_mem_kept(mask, BIT_attUp) * heads_local * (qk_head + v_dim)
    elements += heads_local * v_dim
    return elements


cdef inline double c_mem_linear_attention_bytes(long long mask, double tokens, double batch, double tp, double k_heads,
                                            double k_dim, double v_heads, double v_dim, double conv_kernel,
                                            double chunk, double compute_bytes) noexcept nogil:
    # Gated DeltaNet (Yang et al. 2024 §3, chunkwise form), heads split over tp.
    cdef double key_local = k_heads * k_dim / tp
    cdef double value_local = v_heads * v_dim / tp
    cdef double mixed = 2.0 * key_local + value_local
    cdef double elements = mixed
    cdef double total
    elements += mixed
    elements += value_local
    elements += 2.0 * v_heads / tp
    elements += c_mem_kept(mask, BIT_normOp) * value_local
    elements += value_local
    total = tokens * elements * compute_bytes
    total += c_mem_kept(mask, BIT_attBMM) * (tokens / chunk) * (v_heads / tp) * k_dim * v_dim * _MEM_FP32_BYTES
    if conv_kernel > 1.0:
        total += batch * (conv_kernel - 1.0) * mixed * compute_bytes
    return total


# What a linear layer saves for its weight gradient (linear_bytes): its 16-bit input, or under Transformer
# Engine's fp8 the one fp8-quantized copy its wgrad GEMM reads, of the local shard (NVIDIA/TransformerEngine
# @d0067d0d pytorch/module/linear.py:372, :598-621; layernorm_linear.py:430-435, :477-487, :526-536;
# layernorm_mlp.py:807-822; grouped_linear.py:538-548, :903-914). Sources and what is left out: the oracle.

cdef inline double c_mem_ffn_bytes(long long mask, double width_local, long long gated, double compute_bytes,
                                   double linear_bytes) noexcept nogil:
    # Korthikanti §4.1 MLP: GELU input 8sbh (compute_bytes) + second-linear input 8sbh (4h width), the
    # latter saved by that linear alone (linear_bytes).
    cdef double kept_inputs = 2.0 * width_local if gated else width_local
    return kept_inputs * compute_bytes + c_mem_kept(mask, BIT_ffAct) * width_local * linear_bytes


cdef inline double c_layer_activation_bytes(
        double seq, double batch, double hidden, double tp, double sp, double cp, double etp,
        long long attention, double heads, double kv_heads, double head_dim, long long out_gate, long long qk_norm,
        double q_lora, double kv_lora, double qk_nope, double qk_rope, double v_dim,
        double lin_k_heads, double lin_k_dim, double lin_v_heads, double lin_v_dim, double lin_conv,
        double lin_chunk, long long ffn, long long gated, double ffn_width, double experts, double top_k,
        double shared_width, double token_factor, long long flash, double compute_bytes, double softmax_bytes,
        double dropout_bytes, double norm_bytes, double linear_bytes, long long option, long long keep_mask,
        long long slice_input, double att_window) noexcept nogil:
    # att_window > 0: a query sees at most att_window keys (windowed attention, e.g. Qwen2.5-VL's
    # vision layers); 0 the whole sequence; NaN for a negative or NaN window. The def wrapper
    # layer_activation_bytes passes 0, the memory batch the kind's att_window column.
    cdef double tokens, residual, divisor, total, heads_local, kv_local, score_elements, keys
    cdef double routed_local, routed_tokens, routed_bytes, norms, d_inner, conv
    cdef long long mask
    if seq <= 0.0 or batch <= 0.0 or hidden <= 0.0:
        return NAN
    if tp < 1.0 or sp < 1.0 or cp < 1.0 or etp < 1.0:
        return NAN
    if option < OPTION_NONE or option > OPTION_SELECTIVE or keep_mask < 0 or keep_mask > ALL_KEPT:
        return NAN
    if compute_bytes < 0.0 or softmax_bytes < 0.0 or dropout_bytes < 0.0 or norm_bytes < 0.0:
        return NAN
    if not linear_bytes >= 0.0:
        return NAN
    if not att_window >= 0.0:
        return NAN
    tokens = seq * batch / cp        # CP splits the sequence
    residual = tokens * hidden / sp  # SP splits the residual stream

    if option == OPTION_FULL:
        # Korthikanti Table 2 "full recompute": 2sbh (the input alone).
        divisor = sp
        if slice_input and tp > divisor:
            divisor = tp
        return tokens * hidden * compute_bytes / divisor

    mask = ALL_KEPT if option == OPTION_NONE else keep_mask
    total = 0.0
    norms = 1.0 if attention == _MEM_ATT_NONE or ffn == _MEM_FFN_NONE else 2.0   # a one-part block: 1
    total += c_mem_kept(mask, BIT_normOp) * norms * residual * norm_bytes  # LayerNorms: 4sbh
    total += norms * residual * dropout_bytes                            # residual dropout masks: 2 × sbh

    # ---- attention block
    if attention == _MEM_ATT_FULL or attention == _MEM_ATT_MLA:
        if heads < 1.0:
            return NAN
        heads_local = heads / tp
        if attention == _MEM_ATT_FULL:
            if kv_heads < 1.0 or head_dim <= 0.0:
                return NAN
            total += residual * linear_bytes  # QKV input: 2sbh, the norm's output saved by the QKV linear alone
            kv_local = kv_heads / tp
            if kv_local < 1.0:
                kv_local = 1.0
            total += tokens * compute_bytes * c_mem_full_attention_elements(
                mask, heads_local, kv_local, head_dim, out_gate, qk_norm)
        else:
            if kv_lora <= 0.0 or qk_nope <= 0.0 or v_dim <= 0.0 or q_lora < 0.0 or qk_rope < 0.0:
                return NAN
            # down-projections' input: one shared copy, or one fp8 copy per TELinear (q_down/q_proj, kv_down)
            total += residual * (compute_bytes if linear_bytes == compute_bytes else 2.0 * linear_bytes)
            total += tokens * compute_bytes * c_mem_mla_elements(
                mask, heads_local, q_lora, kv_lora, qk_nope, qk_rope, v_dim)
            total += tokens * linear_bytes * (q_lora + kv_lora)  # c_q, c_kv: the up-projections' inputs
        keys = seq                   # windowed: min(att_window, s) keys per query (Qwen2.5-VL window attention)
        if att_window > 0.0 and att_window < seq:
            keys = att_window
        score_elements = heads_local * tokens * keys  # a·s²·b/(tp·cp)
        total += c_mem_score_bytes(score_elements, tokens, heads_local, flash, mask,
                               compute_bytes, softmax_bytes, dropout_bytes)
    elif attention == _MEM_ATT_LINEAR:
        if lin_k_heads < 1.0 or lin_v_heads < 1.0 or lin_k_dim <= 0.0 or lin_v_dim <= 0.0 or lin_chunk <= 0.0:
            return NAN
        total += residual * compute_bytes
        total += c_mem_linear_attention_bytes(mask, tokens, batch, tp, lin_k_heads, lin_k_dim, lin_v_heads,
                                          lin_v_dim, lin_conv, lin_chunk, compute_bytes)
    elif attention == _MEM_ATT_MAMBA:
        # Mamba-2: in_proj input; z, x, B, C, dt; the conv's x, B, C; y; the gated norm's output
        if lin_k_heads < 1.0 or lin_v_heads < 1.0 or lin_k_dim <= 0.0 or lin_v_dim <= 0.0 or lin_chunk <= 0.0:
            return NAN
        d_inner = lin_v_heads * lin_v_dim
        conv = d_inner + 2.0 * lin_k_heads * lin_k_dim
        total += residual * compute_bytes
        total += tokens * compute_bytes * ((d_inner + conv + lin_v_heads) + conv + 2.0 * d_inner) / tp
    elif attention == _MEM_ATT_MAMBA1:
        # Mamba-1: in_proj input; x, z, the conv's x, delta, y (d_inner each, over tp); dt, B, C (whole)
        if lin_k_heads < 1.0 or lin_v_heads < 1.0 or lin_k_dim <= 0.0:
            return NAN
        total += residual * compute_bytes
        total += tokens * compute_bytes * (5.0 * lin_v_heads / tp + lin_k_heads + 2.0 * lin_k_dim)
    elif attention != _MEM_ATT_NONE:
        return NAN

    # ---- FFN block
    if ffn == _MEM_FFN_NONE:
        return total
    if ffn_width <= 0.0:
        return NAN
    if ffn == _MEM_FFN_DENSE:
        total += residual * linear_bytes  # MLP input: 2sbh, the norm's output saved by fc1 alone
        total += tokens * c_mem_ffn_bytes(mask, ffn_width / tp, gated, compute_bytes, linear_bytes)
    elif ffn == _MEM_FFN_MOE:
        total += residual * compute_bytes  # router input: 2sbh, saved by the router's GEMM (router_gating_linear)
        if experts < 1.0 or top_k < 1.0 or token_factor <= 0.0 or shared_width < 0.0:
            return NAN
        routed_local = tokens / sp
        total += routed_local * (experts * compute_bytes + (experts + top_k) * softmax_bytes)  # router
        routed_tokens = tokens * top_k * token_factor * etp / tp
        routed_bytes = hidden * linear_bytes                              # permuted tokens (fc1 input)
        routed_bytes += c_mem_ffn_bytes(mask, ffn_width / etp, gated, compute_bytes, linear_bytes)  # expert MLP
        routed_bytes += hidden * compute_bytes                            # expert output for the combine
        total += routed_tokens * routed_bytes
        # the routing's indices, map and row probabilities its backward reads (see the oracle)
        total += routed_local * (experts * _MEM_ROUTING_MAP_BYTES + top_k * _MEM_INDEX_BYTES)
        total += routed_tokens * (_MEM_INDEX_BYTES + _MEM_PROBABILITY_BYTES)
        if shared_width > 0.0:
            total += tokens * c_mem_ffn_bytes(mask, shared_width / tp, gated, compute_bytes, linear_bytes)
            if linear_bytes != compute_bytes:
                total += residual * linear_bytes  # their fc1's own quantized copy of the router's input
    else:
        return NAN
    return total


# ---------------------------------------------------------------- def wrappers

def inflight_micro_batches(long long schedule, long long p, long long m, long long vp, long long stage,
                           long long chunk, long long seq_split) -> float:
    """Micro-batches in flight on (stage, chunk) as warm-up ends (docs/ND_MODEL.md §3.6); >= 1, NaN if undefined."""
    return c_inflight_micro_batches(schedule, p, m, vp, stage, chunk, seq_split)


def layer_activation_bytes(double seq, double batch, double hidden, double tp, double sp, double cp,
                           double etp, long long attention, double heads, double kv_heads, double head_dim,
                           long long out_gate, long long qk_norm, double q_lora, double kv_lora, double qk_nope,
                           double qk_rope, double v_dim, double lin_k_heads, double lin_k_dim,
                           double lin_v_heads, double lin_v_dim, double lin_conv, double lin_chunk,
                           long long ffn, long long gated, double ffn_width, double experts, double top_k,
                           double shared_width, double token_factor, long long flash, double compute_bytes,
                           double softmax_bytes, double dropout_bytes, double norm_bytes, double linear_bytes,
                           long long option, long long keep_mask, long long slice_input) -> float:
    """Bytes one transformer layer keeps for ONE micro-batch on one rank (Korthikanti et al. 2022 Table 2)."""
    return c_layer_activation_bytes(seq, batch, hidden, tp, sp, cp, etp, attention, heads, kv_heads, head_dim,
                                    out_gate, qk_norm, q_lora, kv_lora, qk_nope, qk_rope, v_dim, lin_k_heads,
                                    lin_k_dim, lin_v_heads, lin_v_dim, lin_conv, lin_chunk, ffn, gated,
                                    ffn_width, experts, top_k, shared_width, token_factor, flash, compute_bytes,
                                    softmax_bytes, dropout_bytes, norm_bytes, linear_bytes, option, keep_mask,
                                    slice_input, 0.0)


cdef inline double c_largest_work(const double* work_per_layer, const double* row, Py_ssize_t n_kinds,
                                  Py_ssize_t n_slots) noexcept nogil:
    # The largest working set of the layers present in one chunk's row (a NaN wins and stays).
    cdef double working = 0.0, work
    cdef Py_ssize_t kind, slot
    for kind in range(n_kinds):
        for slot in range(n_slots):
            work = work_per_layer[kind * n_slots + slot]
            if row[kind * n_slots + slot] != 0.0 and working == working and (work != work or work > working):
                working = work
    return working


cdef void c_stage_memory(const double* static_per_layer, const double* act_per_layer,
                         const double* work_per_layer, Py_ssize_t n_kinds, Py_ssize_t n_slots,
                         const double* counts, Py_ssize_t n_stages, Py_ssize_t n_chunks,
                         const double* inflight, const double* stage_static, const double* extra_act,
                         const double* comm_buffers, double reserve, double* out,
                         bint overlapped_chunks) noexcept nogil:
    # Per-stage memory breakdown (docs/ND_MODEL.md §3.4-3.7) on raw row-major pointers: static
    # (K, 3), act and work (K, O), counts (p, vp, K*O), inflight and extra_act (p, vp),
    # stage_static (p, 3), comm_buffers (p,), out (p, 8). The caller has checked the shapes.
    cdef Py_ssize_t n_cols = n_kinds * n_slots
    cdef Py_ssize_t stage, chunk, kind, slot, last_chunk
    cdef double params, grads, optimizer, activations, working, chunk_bytes, layers, comm, total
    cdef const double* row
    cdef double* out_row
    for stage in range(n_stages):
        params = stage_static[stage * 3 + 0]
        grads = stage_static[stage * 3 + 1]
        optimizer = stage_static[stage * 3 + 2]
        activations = 0.0
        working = 0.0
        last_chunk = -1
        for chunk in range(n_chunks):
            row = counts + (stage * n_chunks + chunk) * n_cols
            chunk_bytes = extra_act[stage * n_chunks + chunk]
            for kind in range(n_kinds):
                for slot in range(n_slots):
                    layers = row[kind * n_slots + slot]
                    if layers == 0.0:
                        continue
                    last_chunk = chunk
                    params += layers * static_per_layer[kind * 3 + 0]
                    grads += layers * static_per_layer[kind * 3 + 1]
                    optimizer += layers * static_per_layer[kind * 3 + 2]
                    chunk_bytes += layers * act_per_layer[kind * n_slots + slot]
            activations += inflight[stage * n_chunks + chunk] * chunk_bytes
        if last_chunk >= 0:
            # Working set: the largest of the layers in the last non-empty chunk; with overlapped
            # chunks (DualPipeV) the sum of each chunk's largest (the oracle's docstring)
            if overlapped_chunks:
                for chunk in range(n_chunks):
                    working += c_largest_work(work_per_layer, counts + (stage * n_chunks + chunk) * n_cols,
                                              n_kinds, n_slots)
            else:
                working = c_largest_work(work_per_layer, counts + (stage * n_chunks + last_chunk) * n_cols,
                                         n_kinds, n_slots)
        comm = comm_buffers[stage]
        total = params + grads + optimizer + activations + comm + working + reserve
        out_row = out + stage * _MEM_COLUMNS
        out_row[0] = params
        out_row[1] = grads
        out_row[2] = optimizer
        out_row[3] = activations
        out_row[4] = comm
        out_row[5] = working
        out_row[6] = reserve
        out_row[7] = total


cdef inline double c_mem_larger(double a, double b) noexcept nogil:
    return a if a > b else b


cdef void c_mem_pair_dualpipe(double* out, Py_ssize_t n_stages) noexcept nogil:
    # DualPipe's devices: rows i and p-1-i both become stage i's plus stage p-1-i's (the oracle's
    # pair_dualpipe_rows): params, grads, activations added, the optimizer halved and added, the larger
    # comm buffers and working set, one reserve.
    cdef Py_ssize_t stage, column
    cdef double* mine
    cdef double* mirror
    cdef double values[_MEM_COLUMNS]
    for stage in range(n_stages // 2):
        mine = out + stage * _MEM_COLUMNS
        mirror = out + (n_stages - 1 - stage) * _MEM_COLUMNS
        values[0] = mine[0] + mirror[0]
        values[1] = mine[1] + mirror[1]
        values[2] = 0.5 * (mine[2] + mirror[2])
        values[3] = mine[3] + mirror[3]
        values[4] = c_mem_larger(mine[4], mirror[4])
        values[5] = c_mem_larger(mine[5], mirror[5])
        values[6] = mine[6]
        values[7] = values[0] + values[1] + values[2] + values[3] + values[4] + values[5] + values[6]
        for column in range(_MEM_COLUMNS):
            mine[column] = values[column]
            mirror[column] = values[column]


def pair_dualpipe_rows(double[:, ::1] out) -> None:
    """DualPipe's devices from the stages' memory rows, in place; see the oracle."""
    if out.shape[1] != _MEM_COLUMNS:
        raise ValueError("out must be (p, 8)")
    if out.shape[0] == 0:
        return
    with nogil:
        c_mem_pair_dualpipe(&out[0, 0], out.shape[0])


def stage_memory(const double[:, ::1] static_per_layer,   # IN (K, 3)
                 const double[:, ::1] act_per_layer,      # IN (K, O)
                 const double[:, ::1] work_per_layer,     # IN (K, O)
                 const double[:, :, ::1] counts,          # IN (p, vp, K*O)
                 const double[:, ::1] inflight,           # IN (p, vp)
                 const double[:, ::1] stage_static,       # IN (p, 3)
                 const double[:, ::1] extra_act,          # IN (p, vp)
                 const double[::1] comm_buffers,          # IN (p,)
                 double reserve,
                 double[:, ::1] out,                      # OUT (p, 8)
                 long long overlapped_chunks=0) -> None:
    """Per-stage memory breakdown, written to ``out`` (p, 8): params, grads, optimizer,
    activations, comm_buffers, working_set, reserve, total (docs/ND_MODEL.md §3.4-3.7)."""
    cdef Py_ssize_t n_kinds = static_per_layer.shape[0]
    cdef Py_ssize_t n_slots = act_per_layer.shape[1]
    cdef Py_ssize_t n_stages = counts.shape[0]
    cdef Py_ssize_t n_chunks = counts.shape[1]
    if n_kinds < 1 or static_per_layer.shape[1] != 3:
        raise ValueError("static_per_layer must be (K, 3) with K >= 1")
    if act_per_layer.shape[0] != n_kinds or n_slots < 1:
        raise ValueError("act_per_layer must be (K, O) with O >= 1")
    if work_per_layer.shape[0] != n_kinds or work_per_layer.shape[1] != n_slots:
        raise ValueError("work_per_layer must have the shape of act_per_layer")
    if n_stages < 1:
        raise ValueError("counts must have at least one stage")
    if n_chunks < 1 or counts.shape[2] != n_kinds * n_slots:
        raise ValueError("counts must be (p, vp, K*O)")
    if inflight.shape[0] != n_stages or inflight.shape[1] != n_chunks:
        raise ValueError("inflight must be (p, vp)")
    if stage_static.shape[0] != n_stages or stage_static.shape[1] != 3:
        raise ValueError("stage_static must be (p, 3)")
    if extra_act.shape[0] != n_stages or extra_act.shape[1] != n_chunks:
        raise ValueError("extra_act must be (p, vp)")
    if comm_buffers.shape[0] != n_stages:
        raise ValueError("comm_buffers must be (p,)")
    if out.shape[0] != n_stages or out.shape[1] != _MEM_COLUMNS:
        raise ValueError("out must be (p, 8)")
    with nogil:
        c_stage_memory(&static_per_layer[0, 0], &act_per_layer[0, 0], &work_per_layer[0, 0], n_kinds, n_slots,
                       &counts[0, 0, 0], n_stages, n_chunks, &inflight[0, 0], &stage_static[0, 0],
                       &extra_act[0, 0], &comm_buffers[0], reserve, &out[0, 0], overlapped_chunks != 0)
