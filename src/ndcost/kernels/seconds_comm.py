"""Seconds mode, communication (oracle): one collective over a group's links (alpha-beta rings,
hierarchical across nodes), and how much of it a compute window hides.

Part of the seconds area (:mod:`ndcost.kernels.seconds` states how time is priced).
The twin is ``cysrc/ndcost/kernels/seconds_comm.pxi``.
"""
from __future__ import annotations

import math

from ..spec.hybridep_rates import HYBRIDEP_NVLINK_SCALE, HYBRIDEP_RDMA_SHARE
from .codes import COLLECTIVES, DISPATCHERS, EP_OVERLAPS
from .columns import MODEL, RATE, RATE_FIELDS, SECONDS_CAND, SECONDS_LAYER
from .memory import ROUTING_MAP_BYTES
from .nd_ops import _check_len
from .seconds_ops import _expert_load, _pass

__all__ = ["seconds_collective", "seconds_expert_exchange", "seconds_routing_gather"]

NAN = math.nan

# Column indices, bound once (the kernel ABI of ndcost.kernels.columns).
_R = RATE
_C = SECONDS_CAND
_L = SECONDS_LAYER
_M = MODEL

# Collective codes of seconds_collective, dispatcher codes of seconds_expert_exchange, expert all-to-all
# overlap codes (ndcost.kernels.codes).
ALL_REDUCE, GATHER_OR_SCATTER, ALL_TO_ALL, SEND_RECV = (
    COLLECTIVES.index(name) for name in ("all_reduce", "gather_or_scatter", "all_to_all", "send_recv"))
NCCL_ALL_TO_ALL, DEEPEP, HYBRIDEP = (DISPATCHERS.index(name) for name in ("alltoall", "deepep", "hybridep"))

#: HybridEP's NVLink group sizes with published kernel times (GB200: ndcost.spec.hybridep_rates), in order, and its
#: byte rate at each as a share of the smallest's.
HYBRIDEP_RANKS, HYBRIDEP_SHARES = zip(*HYBRIDEP_NVLINK_SCALE)
#: The node counts of HybridEP's published times across nodes (H100: ndcost.spec.hybridep_rates), in order, and the
#: share of the NIC its RDMA stage reaches at each.
HYBRIDEP_NODES, HYBRIDEP_RDMA_SHARES = zip(*HYBRIDEP_RDMA_SHARE)
EP_NONE, EP_1F1B, EP_DUALPIPE = (EP_OVERLAPS.index(name) for name in ("none", "1f1b", "dualpipe"))


def _ring(steps: float, share: float, moved: float, bw: float, lat: float) -> float:
    """Alpha-beta ring: steps·latency + share·bytes / bandwidth."""
    return steps * lat + share * moved / bw


def seconds_collective(op: int, moved: float, n: float, stride: float, rate) -> float:
    """Seconds of one collective over a group of *n* ranks *stride* apart (ring, alpha-beta).

    *op*: 0 all-reduce, 1 reduce-scatter or all-gather, 2 all-to-all, 3 send/recv. NaN for a
    stride below 1; 0 for a group of one rank or nothing to move.

    *moved* is the collective's full buffer in bytes: the all-reduce buffer, the all-gather's
    output / reduce-scatter's input, the bytes one rank sends in an all-to-all or a send/recv.
    Bandwidths are per device per direction times their achievable share (NCCL "bus bandwidth").

    * In one node (n·stride <= devices per node): ring all-reduce 2(n-1)/n·B/bw + 2(n-1)·alpha,
      reduce-scatter / all-gather (n-1)/n·B/bw + (n-1)·alpha (Thakur, Rabenseifner & Gropp 2005,
      "Optimization of collective communication operations in MPICH", ring algorithms), all-to-all
      (n-1)/n·B/bw + (n-1)·alpha (pairwise exchange), send/recv B/bw + alpha.
    * Across nodes, hierarchical: g = devices_per_node/stride ranks of the group share a node
      (1 when stride >= devices_per_node) and N = n/g nodes. Reduce-scatter in the node, then the
      scale-out collective among N nodes on B/g per rank, then all-gather in the node: all-reduce
      2(g-1)/g·B/bw_in + 2(N-1)/N·(B/g)/bw_out (+ latencies), reduce-scatter / all-gather half of
      it. The inter-node step runs at the scale-out bandwidth of one device: a node's NICs
      (devices_per_node x inter_bw) are shared by its devices, which all take part in a
      collective of the same kind at once (every dp / cp / ep group runs together).
      All-to-all: the intra-node share (g-1)/n of B over NVLink and the rest (n-g)/n over the
      NIC run concurrently (the slower one counts). Send/recv: one scale-out hop.
    """
    _check_len(rate, "rate", len(RATE_FIELDS))
    return _collective(op, moved, n, stride, rate)


def _ranks_per_node(dpn: float, stride: float, n: float) -> float:
    """Ranks of a group of *n* ranks *stride* apart that share a node of *dpn* devices (1 to n)."""
    g = math.floor(dpn / stride) if stride < dpn else 1.0
    if g < 1.0:
        g = 1.0
    return n if g > n else g


def _collective(op: int, moved: float, n: float, stride: float, rate) -> float:
    """seconds_collective without the length check (the kernels' own calls)."""
    if not stride >= 1.0:
        return NAN
    if n <= 1.0 or moved <= 0.0:
        return 0.0
    dpn = rate[_R["dpn"]]
    # an all-to-all sends to every rank at once through the switch and reaches less of the link than a
    # ring (ndcost.spec.all_to_all_rates: NCCL's alltoall_perf, measured)
    bw_in = rate[_R["intra_bw"]] * (rate[_R["a2a_eff"]] if op == ALL_TO_ALL else rate[_R["intra_eff"]])
    lat_in = rate[_R["intra_lat"]]
    bw_out = rate[_R["inter_bw"]] * rate[_R["inter_eff"]]
    lat_out = rate[_R["inter_lat"]]
    if n * stride <= dpn:  # the whole group in one node
        if op == ALL_REDUCE:
            return _ring(2.0 * (n - 1.0), 2.0 * (n - 1.0) / n, moved, bw_in, lat_in)
        if op == SEND_RECV:
            return _ring(1.0, 1.0, moved, bw_in, lat_in)
        return _ring(n - 1.0, (n - 1.0) / n, moved, bw_in, lat_in)
    g = _ranks_per_node(dpn, stride, n)
    nodes = n / g
    if op == SEND_RECV:
        return _ring(1.0, 1.0, moved, bw_out, lat_out)
    if op == ALL_TO_ALL:
        inner = _ring(g - 1.0, (g - 1.0) / n, moved, bw_in, lat_in)
        outer = _ring(n - g, (n - g) / n, moved, bw_out, lat_out)
        return inner if inner > outer else outer
    inner = _ring(g - 1.0, (g - 1.0) / g, moved, bw_in, lat_in)
    outer = _ring(nodes - 1.0, (nodes - 1.0) / nodes, moved / g, bw_out, lat_out)
    if op == ALL_REDUCE:
        return 2.0 * (inner + outer)
    return inner + outer


def _missed(pool: float, own: float, k: float) -> float:
    """The chance that *k* picks drawn without replacement from *pool* items miss a given *own* of them:
    C(pool - own, k) / C(pool, k) = prod_{i<k} (pool - own - i) / (pool - i); 0 when they cannot."""
    chance = 1.0
    i = 0.0
    while i < k:
        if pool - own - i <= 0.0 or pool - i <= 0.0:
            return 0.0
        chance *= (pool - own - i) / (pool - i)
        i += 1.0
    return chance


def _published(points, shares, x: float) -> float:
    """A share read off published *points* (in order) at *x*: linear between them, the first share below them, the
    last beyond (an assumption: nothing larger is published). HybridEP's NVLink byte rate by group size
    (``HYBRIDEP_RANKS`` / ``HYBRIDEP_SHARES``) and its RDMA share by node count (``HYBRIDEP_NODES`` /
    ``HYBRIDEP_RDMA_SHARES``)."""
    low, share = points[0], shares[0]
    if x <= low:
        return share
    for i in range(1, len(points)):
        high, next_share = points[i], shares[i]
        if x <= high:
            return share + (next_share - share) * (x - low) / (high - low)
        low, share = high, next_share
    return share


def _exchange(dispatcher: float, tokens: float, hidden: float, topk: float, experts: float, n: float,
              stride: float, node_limit: float, device_limit: float, element_bytes: float, rate) -> float:
    """seconds_expert_exchange without the length check (the kernels' own calls)."""
    if not stride >= 1.0:
        return NAN
    if n <= 1.0 or tokens <= 0.0 or topk <= 0.0:
        return 0.0
    token_bytes = hidden * element_bytes
    if dispatcher != DEEPEP and dispatcher != HYBRIDEP:
        return _collective(ALL_TO_ALL, tokens * topk * token_bytes, n, stride, rate)
    g = _ranks_per_node(rate[_R["dpn"]], stride, n)
    nodes = n / g
    per_rank = experts / n                          # experts on each rank of the group
    if device_limit >= 1.0 and device_limit < n:
        # device-limited routing (DeepSeek-V2 §2.2.1): the k experts among those of the device_limit ranks
        # chosen by their experts' top affinities, each holding one; the ranks spread over the group's nodes
        # as uniformly chosen, or over the node_limit nodes chosen
        ranks = device_limit * (1.0 - _missed(device_limit * per_rank, per_rank, topk))
        if node_limit >= 1.0 and node_limit < nodes:
            reached = node_limit if node_limit < device_limit else device_limit
            reached = reached if reached < topk else topk
        else:
            reached = nodes * (1.0 - _missed(n, g, device_limit))
    elif node_limit >= 1.0 and node_limit < nodes:
        # the k experts among the node_limit nodes chosen (DeepSeek-V3 §2.1.2: the nodes by their
        # experts' top affinities, so each chosen node holds one of the token's experts)
        reached = node_limit if node_limit < topk else topk
        ranks = node_limit * g * (1.0 - _missed(node_limit * g * per_rank, per_rank, topk))
    else:
        reached = nodes * (1.0 - _missed(experts, experts / nodes, topk))
        ranks = n * (1.0 - _missed(experts, per_rank, topk))
    received = tokens * ranks * token_bytes
    # every call: its fixed cost and its tokens' beside the bytes (ndcost.spec.deepep_rates)
    call = rate[_R["dep_call_s"]] + tokens * rate[_R["dep_tok_s"]]
    # HybridEP's NVLink kernels: the byte rate its published times give the NVLink group (1 up to 8 ranks)
    hybrid = dispatcher == HYBRIDEP
    scale = _published(HYBRIDEP_RANKS, HYBRIDEP_SHARES, n if nodes <= 1.0 else g) if hybrid else 1.0
    if nodes <= 1.0:
        return call + received / (rate[_R["intra_bw"]] * rate[_R["dep_intra_eff"]] * scale) + rate[_R["intra_lat"]]
    # across nodes the NVLink stage forwards what arrives over RDMA, at DeepEP's published share; the RDMA stage at
    # the NIC's NCCL share, HybridEP's at its own published one
    nvlink = received / (rate[_R["intra_bw"]] * rate[_R["dep_nvl_eff"]] * scale)
    nic = _published(HYBRIDEP_NODES, HYBRIDEP_RDMA_SHARES, nodes) if hybrid else rate[_R["inter_eff"]]
    rdma = tokens * reached * (nodes - 1.0) / nodes * token_bytes / (rate[_R["inter_bw"]] * nic)
    return call + (rdma if rdma > nvlink else nvlink) + rate[_R["inter_lat"]]


#: HybridEP's metadata preprocessing, beside the all-gather of the routing map: the kernels it launches (the scan of the
#: gathered map, the padding of tokens-per-expert, the permutation's preprocessing) and the int32 it writes a token
#: and rank of the group (sparse_to_dense_map): deepseek-ai/DeepEP@cf780852 csrc/hybrid_ep/executor/executor.cu
#: metadata_preprocess_core.
ROUTING_SCAN_KERNELS = 3.0
ROUTING_SCAN_INDEX_BYTES = 4.0


def _routing_gather(tokens: float, experts: float, n: float, stride: float, rate) -> float:
    """seconds_routing_gather without the length check (the kernels' own calls)."""
    if not stride >= 1.0:
        return NAN
    if n <= 1.0 or tokens <= 0.0 or experts <= 0.0:
        return 0.0
    local = tokens * experts * ROUTING_MAP_BYTES    # the rank's bool routing map
    g = _ranks_per_node(rate[_R["dpn"]], stride, n)
    if n / g <= 1.0:
        # HybridEP's own one-shot kernel: every rank writes its map into every other rank's buffer over NVLink
        gather = (n - 1.0) * local / (rate[_R["intra_bw"]] * rate[_R["intra_eff"]]) + rate[_R["intra_lat"]]
    else:
        gather = _collective(GATHER_OR_SCATTER, n * local, n, stride, rate)
    scanned = n * local + local + ROUTING_SCAN_INDEX_BYTES * tokens * n
    return gather + _pass(scanned, ROUTING_SCAN_KERNELS, rate)


def seconds_routing_gather(tokens: float, experts: float, n: float, stride: float, rate) -> float:
    """Seconds of HybridEP's metadata preprocessing before a dispatch that holds no handle (each forward dispatch in
    Megatron-Core: token_dispatcher.py _HybridEPManager passes the routing map, not a handle) on a rank of an
    expert-parallel group of *n* ranks *stride* apart, *tokens* tokens a rank, *experts* experts. NaN for a stride
    below 1; 0 for a group of one rank.

    deepseek-ai/DeepEP@cf780852 (hybrid-ep) csrc/hybrid_ep/executor/executor.cu: ``allgather_routing_map`` gathers
    every rank's bool routing map (tokens x experts bytes) -- inside one NVLink domain with HybridEP's own kernel, each
    rank writing its map into every other's buffer once (n - 1 maps received at the link's collective share and one
    latency: the kernel's rate is not published, an assumption), across nodes with NCCL's
    ``all_gather_into_tensor`` over the group (:func:`seconds_collective`) -- then ``metadata_preprocess_core`` scans
    the gathered map (n maps read, the rank's local-expert map and an int32 a token and rank written) in
    ROUTING_SCAN_KERNELS kernels. The dispatch kernels HybridEP's README times reuse a handle
    (tests/test_hybrid_ep.py), so none of this is in the published rates ``seconds_expert_exchange`` is priced
    at.
    """
    _check_len(rate, "rate", len(RATE_FIELDS))
    return _routing_gather(tokens, experts, n, stride, rate)


def seconds_expert_exchange(dispatcher: int, tokens: float, hidden: float, topk: float, experts: float, n: float,
                            stride: float, node_limit: float, element_bytes: float, rate,
                            device_limit: float = 0.0) -> float:
    """Seconds of one MoE dispatch (or one combine) on a rank of an expert-parallel group of *n* ranks
    *stride* apart: *tokens* routed by the rank, each to *topk* of *experts* experts, *hidden* elements of
    *element_bytes* each. NaN for a stride below 1; 0 for a group of one rank or nothing to move.

    * 0, NCCL all-to-all (Megatron-Core's alltoall dispatcher): every (token, expert) pair is a copy,
      tokens·topk·hidden·bytes sent through :func:`seconds_collective`'s all-to-all.
    * 1, DeepEP's normal kernels (deepseek-ai/DeepEP, csrc/kernels/legacy/intranode.cu, internode.cu;
      DeepSeek-V3 report §3.2.2): a token crosses the scale-out network once per *node* it goes to
      (RDMA to the same local rank there, none for its own node: internode.cu writes its own node's
      share into the receive buffer directly), then is forwarded over NVLink once per *rank* of that
      node holding one of its experts. Over g = devices_per_node/stride ranks a node and N = n/g
      nodes, with uniform routing (the balanced load NVIDIA's runs force), a token reaches
      ranks R = n·(1 - C(E - E/n, k)/C(E, k)) and nodes N·(1 - C(E - E/N, k)/C(E, k)); with
      node-limited routing to M < N nodes (*node_limit*) it reaches min(M, k) nodes and
      M·g·(1 - C(M·g·E/n - E/n, k)/C(M·g·E/n, k)) ranks; with device-limited routing to D < n ranks
      (*device_limit*, DeepSeek-V2 §2.2.1) it reaches D·(1 - C(D·E/n - E/n, k)/C(D·E/n, k)) ranks and
      the nodes D ranks chosen uniformly span, N·(1 - C(n - g, D)/C(n, D)) (min(M, D, k) within a node
      limit). Time: the larger of the RDMA stage,
      tokens·nodes·(N-1)/N·bytes at the NIC's NCCL share, and the NVLink stage, tokens·R·bytes
      (every rank receives what it computes, its own share included, as DeepEP counts it) at
      DeepEP's published NVLink share (``dep_nvl_eff``), which run concurrently (warp-specialised:
      IB send, IB-to-NVLink forward, NVLink receive), plus one latency. Inside one node, the NVLink
      stage alone at the share measured for a direct send (``dep_intra_eff``). Every call adds its
      fixed cost (``dep_call_s``) and its tokens' (tokens·``dep_tok_s``; with ``dep_intra_eff`` fitted
      to measured H100 calls: ``ndcost.spec.deepep_rates``).
    * 2, NVIDIA's HybridEP (DeepEP's hybrid-ep branch): DeepEP's model, its NVLink byte rate scaled to the
      NVLink group's size by HybridEP's published GB200 kernel times, and across nodes its RDMA stage at the share
      of the NIC its published H100 kernel times reach at the node count (:func:`_published`,
      ``ndcost.spec.hybridep_rates``).

    A combine moves the same tokens back (its element bytes are the caller's: DeepEP combines in
    BF16). The busiest rank's extra load is the caller's (*tokens* scaled).
    """
    _check_len(rate, "rate", len(RATE_FIELDS))
    return _exchange(dispatcher, tokens, hidden, topk, experts, n, stride, node_limit, device_limit, element_bytes,
                     rate)


def _expert_alltoalls(cand, model, tokens: float, h: float, bc: float, ep: float, t_exp: float, rate, out) -> None:
    """A MoE layer's all-to-alls on a rank of its expert-parallel group (*ep* ranks *t_exp* apart: Megatron-Core
    orders its expert ranks expert-tp, ep, expert-dp, pp, parallel_state's expert RankGenerator "tp-ep-dp-pp"),
    which routes *tokens* tokens of *h* elements, into a layer row: a dispatch and a combine (:func:`_exchange`:
    NCCL's all-to-all, DeepEP's or HybridEP's) forward (ep_f) and backward (ep_b), of the rank's tokens times the
    busiest rank's load (the capacity factor, or the imbalance dropless). The dispatch direction -- the forward
    dispatch and the combine's backward, which sends the output gradients to the experts -- moves disp_b bytes an
    element (fp8 with its scales where the stack quantizes it, DeepSeek-V3 §3.3.4; ep_d: one such call), the
    combine direction the 16-bit activations (DeepEP combines in BF16). HybridEP's forward dispatch first gathers
    the group's routing maps (ep_pre, :func:`seconds_routing_gather`, in ep_f); its backward passes reuse the
    forward's handle."""
    args = (cand[_C["ep_disp"]], tokens * _expert_load(cand), h, model[_M["n_chosen"]], model[_M["n_exp"]], ep, t_exp,
            cand[_C["ep_nodes"]], cand[_C["ep_devs"]])
    dispatch = _exchange(*args, cand[_C["disp_b"]], rate)
    a2a = dispatch + _exchange(*args, bc, rate)
    pre = _routing_gather(tokens, model[_M["n_exp"]], ep, t_exp, rate) if cand[_C["ep_disp"]] == HYBRIDEP else 0.0
    out[_L["ep_f"]] = a2a + pre
    out[_L["ep_b"]] = a2a
    out[_L["ep_d"]] = dispatch
    out[_L["ep_pre"]] = pre


def _exposed(comm: float, window: float, share: float) -> float:
    """Comm left on the critical path when *share* of a compute *window* can hide it."""
    hidden = share * (window if window < comm else comm)
    return comm - hidden


def _exposed_paired(comm: float, window: float, share: float, sms: float, static: bool) -> float:
    """Comm left on the critical path when it runs beside another micro-batch's compute *window*
    (an F&B pair) on kernels that hold a share *sms* of the SMs: the compute meanwhile runs on the
    rest. *share* of the window can hide it (1: all of it).

    * Held while the comm runs (Megatron-Core's combined 1F1B): the pair takes max(window + sms·comm,
      comm) -- the comm's SM time added, or the comm itself when longer than the window.
    * *static*, DualPipe's fixed split: DeepSeek-V3 "manually adjust[s] the ratio of GPU SMs dedicated to
      communication versus computation" for the overlapped chunk pair (report §3.2.1; 20 SMs, §3.2.2), so
      the pair's compute runs on the other SMs throughout: max(window / (1 - sms), comm). DeepSeek's
      published profile of such a pair (deepseek-ai/profile-data@449602428a1b train.json: 4 MoE layers, EP 64)
      has DeepEP's kernels resident on their stream 114.5 ms of the pair's 128.5, and its fp8 GEMMs, launched
      on 112 CTAs, take 15.8 ms a layer on the compute stream -- ndcost's 13.4 ms for them on the whole H800
      (with the blockwise recipe's casts) times 132/112 (tests/test_ep_overlap_schedules.py)."""
    exposed = comm - share * window
    if static:
        if not comm > 0.0:
            return 0.0 if comm == 0.0 else comm   # no all-to-all in the phase (a dense layer) holds no SMs; NaN stays
        held = window * sms / (1.0 - sms) if sms < 1.0 else comm
        return exposed if exposed > held else held
    held = sms * comm
    exposed = exposed if exposed > held else held
    return exposed if exposed < comm else comm


def _paired_share(cand, n_stages: int, stage: int) -> float:
    """The share of a stage's micro-batches that run in overlapped forward-and-backward pairs.

    * Megatron-Core's EP overlap (ep_mode 1; Megatron-LM pipeline_parallel/combined_1f1b.py,
      schedules.py get_pp_rank_microbatches): without a pipeline the first forward and the last
      backward run alone, (m - 1)/m paired; interleaved, the m·v chunks but the warm-up ones --
      (p - stage - 1)·2 + (v - 1)·p, plus the one extra forward the overlap schedules before the
      1F1B phase -- are paired, as many backwards in the cool-down alone.
    * DualPipe and DualPipeV (ep_mode 2): 1 -- the schedule's own bubble (seconds_combine, the
      README's formula against m overlapped pairs) holds the chunks that run alone.
    * none: 0.
    """
    mode = cand[_C["ep_mode"]]
    if mode == EP_DUALPIPE:
        return 1.0
    if mode != EP_1F1B:
        return 0.0
    m, vp = cand[_C["m"]], cand[_C["vp"]]
    total = m * vp
    if total <= 0.0:
        return 0.0
    alone = 1.0 if n_stages <= 1 else (n_stages - stage - 1.0) * 2.0 + (vp - 1.0) * n_stages + 1.0
    paired = total - alone
    return paired / total if paired > 0.0 else 0.0


def _paired_layer(layer, share: float, sms: float, static: bool, blocking: bool = False) -> float:
    """What a layer's dispatches and combines leave exposed when one micro-batch's forward runs beside
    another's backward (an F&B pair: both passes' all-to-alls, 2·ep_f). Megatron-Core's combined 1F1B
    (models/common/model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run) runs three phases,
    each the comm stream beside the compute stream:

      comm: combine backward     | dispatch forward, dispatch backward | combine forward
      comp: attention forward    | MLP backward (+ its dW), MLP forward | attention backward

    DeepSeek-V3's DualPipe pairs the same four components of a chunk (report §3.2.1, Figure 4). The
    combine's backward moves the dispatch direction's bytes (ep_d), the dispatch's backward the
    combine's (ep_f - ep_d); the attention sub-block is att_f / att_b, the MLP the rest of the pass.
    Each phase leaves :func:`_exposed_paired` of its comm (*static*: DualPipe's fixed SM split). The forward
    dispatch's metadata preprocessing (ep_pre, HybridEP's routing-map gather: :func:`seconds_routing_gather`) runs
    in the middle phase before it. *blocking* (HybridEP, whose dispatch synchronises the host:
    ndcost.spec.hybridep_rates): the middle phase runs serially -- an estimate from the published runs that pair
    HybridEP with the overlap."""
    dispatch = layer[_L["ep_d"]]
    pre = layer[_L["ep_pre"]]
    combine = layer[_L["ep_f"]] - pre - dispatch
    att_f, att_b = layer[_L["att_f"]], layer[_L["att_b"]]
    mlp = layer[_L["fw"]] - att_f + layer[_L["bw"]] + layer[_L["bw_w"]] - att_b
    middle = pre + dispatch + combine
    if not blocking:
        middle = _exposed_paired(middle, mlp if mlp > 0.0 else 0.0, share, sms, static)
    return _exposed_paired(dispatch, att_f, share, sms, static) + middle + _exposed_paired(combine, att_b, share,
                                                                                           sms, static)


def _slowed(comm: float, exposed: float, slow: float) -> float:
    """*exposed* of *comm* plus what the compute beside the hidden rest loses: *slow* of its time (``ov_slow``, s / (1
    + s) for compute that takes 1 + s times as long beside a collective: Rates.collective_overlap_slowdown)."""
    return exposed + slow * (comm - exposed)


def _exposed_slowed(comm: float, window: float, share: float, slow: float) -> float:
    """:func:`_exposed` with the compute beside the hidden part slowed (:func:`_slowed`)."""
    return _slowed(comm, _exposed(comm, window, share), slow)


def _exposed_tail(comm: float, window: float, share: float, layers: float, slow: float) -> float:
    """Exposed bucketed traffic: at most *share* of *window* hides it, never the last layer's bucket; the compute
    beside the hidden part loses *slow* of its time (:func:`_slowed`).

    Megatron's overlap_grad_reduce launches a bucket's reduction as soon as its gradients are
    ready, during the last micro-batch's backward; the bucket of the stage's first layer is ready
    only when the backward ends (Megatron-LM distributed/param_and_grad_buffer.py, 2023+).
    """
    exposed = _exposed(comm, window, share)
    floor = comm / layers if layers > 1.0 else comm
    return _slowed(comm, exposed if exposed > floor else floor, slow)
