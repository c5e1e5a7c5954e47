# Seconds mode, communication (twin of ndcost/kernels/seconds_comm.py): one collective over a group's
# links (alpha-beta rings, hierarchical across nodes), and how much of it a compute window hides.
# Needs kernels/columns.pxi, kernels/codes.pxi and kernels/seconds_ops.pxi included before it.

from libc.math cimport floor

# Collective codes of seconds_collective (SEC_ALL_REDUCE, ...), dispatcher codes of seconds_expert_exchange
# (SEC_DISPATCH_*), overlap codes (SEC_EP_*): kernels/codes.pxi.


cdef inline double c_sec_ring(double steps, double share, double moved, double bw, double lat) noexcept nogil:
    return steps * lat + share * moved / bw


cdef inline double c_sec_ranks_per_node(double dpn, double stride, double n) noexcept nogil:
    # Ranks of a group of n ranks stride apart that share a node (1 to n).
    cdef double g = floor(dpn / stride) if stride < dpn else 1.0
    if g < 1.0:
        g = 1.0
    return n if g > n else g


cdef inline double c_sec_collective(long long op, double moved, double n, double stride,
                                    const double* rate) noexcept nogil:
    # Alpha-beta ring in one node; hierarchical (intra-node, scale-out on B/g, intra-node) across.
    cdef double dpn, bw_in, lat_in, bw_out, lat_out, g, nodes, inner, outer
    if not stride >= 1.0:
        return NAN
    if n <= 1.0 or moved <= 0.0:
        return 0.0
    dpn = rate[R_dpn]
    # an all-to-all reaches less of the link than a ring (measured: ndcost.spec.all_to_all_rates)
    bw_in = rate[R_intra_bw] * (rate[R_a2a_eff] if op == SEC_ALL_TO_ALL else rate[R_intra_eff])
    lat_in = rate[R_intra_lat]
    bw_out = rate[R_inter_bw] * rate[R_inter_eff]
    lat_out = rate[R_inter_lat]
    if n * stride <= dpn:
        if op == SEC_ALL_REDUCE:
            return c_sec_ring(2.0 * (n - 1.0), 2.0 * (n - 1.0) / n, moved, bw_in, lat_in)
        if op == SEC_SEND_RECV:
            return c_sec_ring(1.0, 1.0, moved, bw_in, lat_in)
        return c_sec_ring(n - 1.0, (n - 1.0) / n, moved, bw_in, lat_in)
    g = c_sec_ranks_per_node(dpn, stride, n)
    nodes = n / g
    if op == SEC_SEND_RECV:
        return c_sec_ring(1.0, 1.0, moved, bw_out, lat_out)
    if op == SEC_ALL_TO_ALL:
        inner = c_sec_ring(g - 1.0, (g - 1.0) / n, moved, bw_in, lat_in)
        outer = c_sec_ring(n - g, (n - g) / n, moved, bw_out, lat_out)
        return inner if inner > outer else outer
    inner = c_sec_ring(g - 1.0, (g - 1.0) / g, moved, bw_in, lat_in)
    outer = c_sec_ring(nodes - 1.0, (nodes - 1.0) / nodes, moved / g, bw_out, lat_out)
    if op == SEC_ALL_REDUCE:
        return 2.0 * (inner + outer)
    return inner + outer


cdef inline double c_sec_missed(double pool, double own, double k) noexcept nogil:
    # C(pool - own, k) / C(pool, k): k picks without replacement miss a given own of the pool.
    cdef double chance = 1.0, i = 0.0
    while i < k:
        if pool - own - i <= 0.0 or pool - i <= 0.0:
            return 0.0
        chance *= (pool - own - i) / (pool - i)
        i += 1.0
    return chance


cdef inline double c_sec_published(const double* points, const double* shares, Py_ssize_t count,
                                   double x) noexcept nogil:
    # A share read off published points (in order): linear between them, the first below them, the last beyond
    # (the oracle's _published).
    cdef double low = points[0], share = shares[0], high, next_share
    cdef Py_ssize_t i
    if x <= low:
        return share
    for i in range(1, count):
        high = points[i]
        next_share = shares[i]
        if x <= high:
            return share + (next_share - share) * (x - low) / (high - low)
        low = high
        share = next_share
    return share


cdef inline double c_sec_exchange(double dispatcher, double tokens, double hidden, double topk, double experts,
                                  double n, double stride, double node_limit, double device_limit,
                                  double element_bytes, const double* rate) noexcept nogil:
    # One dispatch or combine: NCCL's all-to-all of every (token, expert) copy, or DeepEP's (HybridEP's) RDMA once
    # per node and NVLink once per rank, concurrently (the oracle's _exchange).
    cdef double token_bytes, g, nodes, per_rank, reached, ranks, received, call, nvlink, rdma, scale, nic
    if not stride >= 1.0:
        return NAN
    if n <= 1.0 or tokens <= 0.0 or topk <= 0.0:
        return 0.0
    token_bytes = hidden * element_bytes
    if dispatcher != SEC_DISPATCH_DEEPEP and dispatcher != SEC_DISPATCH_HYBRIDEP:
        return c_sec_collective(SEC_ALL_TO_ALL, tokens * topk * token_bytes, n, stride, rate)
    g = c_sec_ranks_per_node(rate[R_dpn], stride, n)
    nodes = n / g
    per_rank = experts / n
    if device_limit >= 1.0 and device_limit < n:
        # device-limited routing: the ranks chosen, spread over the nodes (the oracle's)
        ranks = device_limit * (1.0 - c_sec_missed(device_limit * per_rank, per_rank, topk))
        if node_limit >= 1.0 and node_limit < nodes:
            reached = node_limit if node_limit < device_limit else device_limit
            reached = reached if reached < topk else topk
        else:
            reached = nodes * (1.0 - c_sec_missed(n, g, device_limit))
    elif node_limit >= 1.0 and node_limit < nodes:
        reached = node_limit if node_limit < topk else topk
        ranks = node_limit * g * (1.0 - c_sec_missed(node_limit * g * per_rank, per_rank, topk))
    else:
        reached = nodes * (1.0 - c_sec_missed(experts, experts / nodes, topk))
        ranks = n * (1.0 - c_sec_missed(experts, per_rank, topk))
    received = tokens * ranks * token_bytes
    # every call: its fixed cost and its tokens' beside the bytes (the oracle's)
    call = rate[R_dep_call_s] + tokens * rate[R_dep_tok_s]
    scale = 1.0
    nic = rate[R_inter_eff]
    if dispatcher == SEC_DISPATCH_HYBRIDEP:
        scale = c_sec_published(SEC_HYBRIDEP_RANKS, SEC_HYBRIDEP_SHARES, SEC_HYBRIDEP_POINTS, n if nodes <= 1.0 else g)
        nic = c_sec_published(SEC_HYBRIDEP_NODES, SEC_HYBRIDEP_RDMA_SHARES, SEC_HYBRIDEP_RDMA_POINTS, nodes)
    if nodes <= 1.0:
        return call + received / (rate[R_intra_bw] * rate[R_dep_intra_eff] * scale) + rate[R_intra_lat]
    # across nodes: the NVLink stage at DeepEP's share, the RDMA stage at the NIC's (HybridEP's own published one)
    nvlink = received / (rate[R_intra_bw] * rate[R_dep_nvl_eff] * scale)
    rdma = tokens * reached * (nodes - 1.0) / nodes * token_bytes / (rate[R_inter_bw] * nic)
    return call + (rdma if rdma > nvlink else nvlink) + rate[R_inter_lat]


cdef inline double c_sec_routing_gather(double tokens, double experts, double n, double stride,
                                        const double* rate) noexcept nogil:
    # HybridEP's metadata preprocessing before a dispatch that holds no handle: the routing maps gathered (its own
    # one-shot NVLink kernel in one domain, NCCL's all-gather across nodes), then scanned (the oracle's
    # _routing_gather).
    cdef double local, g, gather, scanned
    if not stride >= 1.0:
        return NAN
    if n <= 1.0 or tokens <= 0.0 or experts <= 0.0:
        return 0.0
    local = tokens * experts * _MEM_ROUTING_MAP_BYTES
    g = c_sec_ranks_per_node(rate[R_dpn], stride, n)
    if n / g <= 1.0:
        gather = (n - 1.0) * local / (rate[R_intra_bw] * rate[R_intra_eff]) + rate[R_intra_lat]
    else:
        gather = c_sec_collective(SEC_GATHER_OR_SCATTER, n * local, n, stride, rate)
    scanned = n * local + local + SEC_ROUTING_SCAN_INDEX_BYTES * tokens * n
    return gather + c_sec_pass(scanned, SEC_ROUTING_SCAN_KERNELS, rate)


cdef inline void c_sec_expert_alltoalls(const double* cand, const double* model, double tokens, double h, double bc,
                                        double ep, double t_exp, const double* rate, double* out) noexcept nogil:
    # A MoE layer's dispatches and combines, forward and backward, the dispatch direction at disp_b bytes an
    # element, HybridEP's forward dispatch after its routing-map gather (the oracle's _expert_alltoalls).
    cdef double routed = tokens * c_sec_expert_load(cand), dispatch, a2a, pre = 0.0
    dispatch = c_sec_exchange(cand[SC_ep_disp], routed, h, model[M_n_chosen], model[M_n_exp], ep, t_exp,
                              cand[SC_ep_nodes], cand[SC_ep_devs], cand[SC_disp_b], rate)
    a2a = dispatch + c_sec_exchange(cand[SC_ep_disp], routed, h, model[M_n_chosen], model[M_n_exp], ep, t_exp,
                                    cand[SC_ep_nodes], cand[SC_ep_devs], bc, rate)
    if cand[SC_ep_disp] == SEC_DISPATCH_HYBRIDEP:
        pre = c_sec_routing_gather(tokens, model[M_n_exp], ep, t_exp, rate)
    out[SL_ep_f] = a2a + pre
    out[SL_ep_b] = a2a
    out[SL_ep_d] = dispatch
    out[SL_ep_pre] = pre


cdef inline double c_sec_exposed_paired(double comm, double window, double share, double sms,
                                        bint static) noexcept nogil:
    # Comm beside another micro-batch's compute on kernels holding sms of the SMs (the oracle's): while the
    # comm runs, or (static, DualPipe's fixed split) for the whole window.
    cdef double exposed = comm - share * window
    cdef double held
    if static:
        if not comm > 0.0:
            return 0.0 if comm == 0.0 else comm
        held = window * sms / (1.0 - sms) if sms < 1.0 else comm
        return exposed if exposed > held else held
    held = sms * comm
    exposed = exposed if exposed > held else held
    return exposed if exposed < comm else comm


cdef inline double c_sec_exposed(double comm, double window, double share) noexcept nogil:
    cdef double hidden = share * (window if window < comm else comm)
    return comm - hidden


cdef inline double c_sec_paired_share(const double* cand, Py_ssize_t n_stages, Py_ssize_t stage) noexcept nogil:
    # The share of a stage's micro-batches run in overlapped F&B pairs (the oracle's _paired_share).
    cdef double mode = cand[SC_ep_mode], m = cand[SC_m], vp = cand[SC_vp], total, alone, paired
    if mode == SEC_EP_DUALPIPE:
        return 1.0
    if mode != SEC_EP_1F1B:
        return 0.0
    total = m * vp
    if total <= 0.0:
        return 0.0
    alone = 1.0 if n_stages <= 1 else (n_stages - stage - 1.0) * 2.0 + (vp - 1.0) * n_stages + 1.0
    paired = total - alone
    return paired / total if paired > 0.0 else 0.0


cdef inline double c_sec_paired_layer(const double* layer, double share, double sms, bint static,
                                      bint blocking) noexcept nogil:
    # A layer's all-to-alls in an F&B pair: the three phases of Megatron-Core's combined 1F1B, the forward dispatch's
    # preprocessing in the middle one, which runs serially where the dispatch blocks the host (HybridEP) (the
    # oracle's _paired_layer).
    cdef double dispatch = layer[SL_ep_d], pre = layer[SL_ep_pre]
    cdef double combine = layer[SL_ep_f] - pre - dispatch
    cdef double att_f = layer[SL_att_f], att_b = layer[SL_att_b]
    cdef double mlp = layer[SL_fw] - att_f + layer[SL_bw] + layer[SL_bw_w] - att_b
    cdef double middle = pre + dispatch + combine
    if not blocking:
        middle = c_sec_exposed_paired(middle, mlp if mlp > 0.0 else 0.0, share, sms, static)
    return (c_sec_exposed_paired(dispatch, att_f, share, sms, static) + middle
            + c_sec_exposed_paired(combine, att_b, share, sms, static))


cdef inline double c_sec_slowed(double comm, double exposed, double slow) noexcept nogil:
    # exposed plus what the compute beside the hidden rest loses (the oracle's _slowed)
    return exposed + slow * (comm - exposed)


cdef inline double c_sec_exposed_slowed(double comm, double window, double share, double slow) noexcept nogil:
    # c_sec_exposed with the compute beside the hidden part slowed (the oracle's _exposed_slowed)
    return c_sec_slowed(comm, c_sec_exposed(comm, window, share), slow)


cdef inline double c_sec_exposed_tail(double comm, double window, double share, double layers,
                                      double slow) noexcept nogil:
    cdef double exposed = c_sec_exposed(comm, window, share)
    cdef double floor_ = comm / layers if layers > 1.0 else comm
    return c_sec_slowed(comm, exposed if exposed > floor_ else floor_, slow)


def seconds_collective(long long op, double moved, double n, double stride, const double[::1] rate) -> float:
    """Seconds of one collective over n ranks stride apart (ring, alpha-beta, hierarchical); see the oracle."""
    c_sec_check_len("rate", R_COUNT, rate.shape[0])
    return c_sec_collective(op, moved, n, stride, &rate[0])


def seconds_expert_exchange(long long dispatcher, double tokens, double hidden, double topk, double experts,
                            double n, double stride, double node_limit, double element_bytes,
                            const double[::1] rate, double device_limit=0.0) -> float:
    """Seconds of one MoE dispatch (or combine) on a rank of an expert-parallel group; see the oracle."""
    c_sec_check_len("rate", R_COUNT, rate.shape[0])
    return c_sec_exchange(<double>dispatcher, tokens, hidden, topk, experts, n, stride, node_limit, device_limit,
                          element_bytes, &rate[0])


def seconds_routing_gather(double tokens, double experts, double n, double stride, const double[::1] rate) -> float:
    """Seconds of HybridEP's metadata preprocessing (routing maps gathered, then scanned); see the oracle."""
    c_sec_check_len("rate", R_COUNT, rate.shape[0])
    return c_sec_routing_gather(tokens, experts, n, stride, &rate[0])
