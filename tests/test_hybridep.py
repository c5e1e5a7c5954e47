"""NVIDIA's HybridEP as a dispatcher of its own (``moe_dispatcher='hybridep'``): its NVLink kernels against their
published GB200 times, its RDMA stage against its published H100 times across nodes, its routing-map gather by hand,
its blocking dispatch in Megatron-Core's overlapped F&B pair, its buffers by hand; both backends.

HybridEP's README (deepseek-ai/DeepEP@94a9f8f6 hybrid-ep, docs/README_Hybrid-EP.md, "GB200 Platform", 32 SMs): 4096
tokens a rank, hidden 7168, top-8, 8 experts a rank, random uniform routing, BF16; the algorithm bandwidth of the
bytes a rank receives (tests/test_hybrid_ep.py ``nvl_dispatch = dispatched_hidden.numel() * 2``), timed for the
kernels alone and through the Torch API (which adds a copy out of the receive buffer and the call's host work).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import ndcost
from ndcost import _backend
from ndcost.kernels.columns import RATE, SECONDS_LAYER_FIELDS, SECONDS_STAGE
from ndcost.spec.hybridep_rates import HYBRIDEP_KERNEL_GBS, HYBRIDEP_RDMA_KERNEL_GBS, hybridep_buffer_bytes
from ndcost.spec.rates import Rates
from ndcost.tables.memory_overheads import spec_dispatcher_bytes
from ndcost.tables.seconds import seconds_arrays, seconds_estimate, rates_vector

TOKENS, HIDDEN, TOPK, LOCAL = 4096.0, 7168.0, 8.0, 8
DEEPEP, HYBRIDEP = 1, 2
BF16 = 2.0
#: NVLink ranks -> (dispatch BF16, combine) GB/s through the Torch API, 32 SMs, as published (the same table).
TORCH_API_GBS = {8: (545.71, 568.94), 16: (523.48, 521.55), 24: (507.32, 483.76), 32: (484.22, 464.54),
                 36: (479.02, 447.89)}
S = {name: i for i, name in enumerate(SECONDS_STAGE)}


def _gb200_rates():
    return rates_vector(ndcost.Cluster("gb200-nvl72", 72), Rates.for_device("gb200-nvl72"), "bf16")


def _received_bytes(ranks: int) -> float:
    """The bytes a rank receives in expectation: every rank's tokens that route to one of its 8 experts, once."""
    experts = LOCAL * ranks
    missed = math.comb(experts - LOCAL, int(TOPK)) / math.comb(experts, int(TOPK))
    return TOKENS * ranks * (1.0 - missed) * HIDDEN * BF16


@pytest.mark.parametrize("ranks", sorted(HYBRIDEP_KERNEL_GBS))
def test_a_call_lies_between_the_published_kernel_and_torch_api_times(kernels, ranks):
    """Each call's price (DeepEP's call and token costs, HybridEP's NVLink rate for the group) is no less than the
    kernels alone take and no more than the Torch API call, for both directions at each published group size."""
    rate = _gb200_rates()
    got = kernels.seconds_expert_exchange(HYBRIDEP, TOKENS, HIDDEN, TOPK, float(LOCAL * ranks), float(ranks), 1.0, 0.0,
                                          BF16, rate)
    received = _received_bytes(ranks)
    for kernel_gbs, api_gbs in zip(HYBRIDEP_KERNEL_GBS[ranks], TORCH_API_GBS[ranks]):
        assert received / (kernel_gbs * 1e9) < got < received / (api_gbs * 1e9), (ranks, kernel_gbs, api_gbs)


def test_the_group_size_scales_the_nvlink_bytes_by_hand(kernels):
    """Up to 8 ranks HybridEP is priced as DeepEP; at 36 ranks its bytes take 1/0.8189 as long (the published
    kernels' mean rate there over the 8-rank one), held beyond; at 20 ranks half-way between the 16- and 24-rank
    shares. The call's fixed and token costs are DeepEP's."""
    rate = _gb200_rates()
    link = rate[RATE["intra_bw"]] * rate[RATE["dep_intra_eff"]]

    def call(dispatcher, ranks):
        return kernels.seconds_expert_exchange(dispatcher, TOKENS, HIDDEN, TOPK, float(LOCAL * ranks), float(ranks), 1.0,
                                               0.0, BF16, rate)

    assert call(HYBRIDEP, 8) == pytest.approx(call(DEEPEP, 8), rel=1e-15)
    share = {n: sum(gbs) / sum(HYBRIDEP_KERNEL_GBS[8]) for n, gbs in HYBRIDEP_KERNEL_GBS.items()}
    assert share[36] == pytest.approx(0.8189, abs=1e-4)
    for ranks, scale in ((36, share[36]), (64, share[36]), (20, (share[16] + share[24]) / 2.0)):
        moved = _received_bytes(ranks) / link
        assert call(HYBRIDEP, ranks) - call(DEEPEP, ranks) == pytest.approx(moved / scale - moved, rel=1e-9)


#: Ranks (8 H100 a node) -> (dispatch BF16, combine) GB/s through the Torch API across nodes, 8 SMs, as published
#: (docs/README_Hybrid-EP.md "H100 Platform", deepseek-ai/DeepEP@cf780852 hybrid-ep).
H100_TORCH_API_GBS = {16: (57.74, 56.96), 32: (46.54, 50.68), 64: (41.46, 47.68)}


def _rdma_bytes(ranks: int) -> float:
    """The RDMA bytes the H100 table counts a rank's call by: each token once per node it reaches, its own included
    (tests/test_hybrid_ep.py count_rdma_send_from_routing_map), in expectation."""
    nodes, experts = ranks // 8, LOCAL * ranks
    missed = math.comb(experts - experts // nodes, int(TOPK)) / math.comb(experts, int(TOPK))
    return TOKENS * nodes * (1.0 - missed) * HIDDEN * BF16


@pytest.mark.parametrize("ranks", sorted(HYBRIDEP_RDMA_KERNEL_GBS))
def test_a_call_across_h100_nodes_lies_between_the_published_kernel_and_torch_api_times(kernels, ranks):
    """Across 2, 4 and 8 H100 nodes (8 SMs a call, HybridEP's default there) a call's price is no less than the mean of
    the published kernel-only dispatch and combine times and no more than either Torch API call; DeepEP's model with the
    NCCL share of the NIC (0.9) is faster than HybridEP's kernels alone at 2 nodes (the share HybridEP reaches is its
    own)."""
    rate = rates_vector(ndcost.Cluster("h100-sxm", 64), Rates.for_device("h100-sxm"), "bf16")
    moved = _rdma_bytes(ranks)

    def call(dispatcher):
        return kernels.seconds_expert_exchange(dispatcher, TOKENS, HIDDEN, TOPK, float(LOCAL * ranks), float(ranks),
                                               1.0, 0.0, BF16, rate)

    kernel_times = [moved / (gbs * 1e9) for gbs in HYBRIDEP_RDMA_KERNEL_GBS[ranks]]
    api_times = [moved / (gbs * 1e9) for gbs in H100_TORCH_API_GBS[ranks]]
    assert sum(kernel_times) / 2.0 < call(HYBRIDEP) < min(api_times), (ranks, call(HYBRIDEP), kernel_times, api_times)
    if ranks == 16:
        assert call(DEEPEP) < min(kernel_times)


def test_the_rdma_share_by_hand(kernels):
    """HybridEP's RDMA stage over 4 nodes moves tokens x nodes reached x 3/4 x bytes at 50 GB/s x 0.8318 (the published
    4-node mean, 55.45 GB/s, x 3/4 / 50); over 3 nodes half-way between the 2- and 4-node shares; over 16 the 8-node
    share held. The call's fixed and token costs are DeepEP's."""
    rate = rates_vector(ndcost.Cluster("h100-sxm", 128), Rates.for_device("h100-sxm"), "bf16")
    shares = {2: 72.4 * 0.5 / 50.0, 4: 55.45 * 0.75 / 50.0, 8: 50.79 * 0.875 / 50.0}
    fixed = rate[RATE["dep_call_s"]] + TOKENS * rate[RATE["dep_tok_s"]] + rate[RATE["inter_lat"]]
    for nodes, share in ((4, shares[4]), (3, (shares[2] + shares[4]) / 2.0), (16, shares[8])):
        ranks, experts = 8 * nodes, LOCAL * 8 * nodes
        reached = nodes * (1.0 - math.comb(experts - experts // nodes, int(TOPK)) / math.comb(experts, int(TOPK)))
        rdma = TOKENS * reached * (nodes - 1) / nodes * HIDDEN * BF16 / (rate[RATE["inter_bw"]] * share)
        got = kernels.seconds_expert_exchange(HYBRIDEP, TOKENS, HIDDEN, TOPK, float(experts), float(ranks), 1.0, 0.0,
                                              BF16, rate)
        assert got == pytest.approx(fixed + rdma, rel=1e-9), nodes


def test_the_routing_map_gather_by_hand(kernels):
    """Before each forward dispatch HybridEP gathers every rank's bool routing map (tokens x experts bytes) and scans
    the gathered maps (executor.cu allgather_routing_map, metadata_preprocess_core). In one NVLink domain (EP 64 of a
    GB200 NVL72) its own kernel writes each map to every other rank once: 63 maps at the link's collective share, one
    latency; across H100 nodes (EP 32 over 4) NCCL's all-gather: in the node 7 ring steps on 7/8 of the 32 maps over
    NVLink, then 3 steps on 3/4 of the 4 maps a node's rank carries over the NIC. The scan reads the n maps and writes
    the local-expert map and an int32 a token and rank, in 3 kernels."""
    tokens, experts = 16384.0, 128.0
    local = tokens * experts

    def scan(rate, n):
        moved = n * local + local + 4.0 * tokens * n
        return moved / (rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]) + 3.0 * rate[RATE["kernel_s"]]

    rate = _gb200_rates()
    gather = 63.0 * local / (rate[RATE["intra_bw"]] * rate[RATE["intra_eff"]]) + rate[RATE["intra_lat"]]
    got = kernels.seconds_routing_gather(tokens, experts, 64.0, 1.0, rate)
    assert got == pytest.approx(gather + scan(rate, 64.0), rel=1e-12)
    assert 150e-6 < got < 250e-6                     # 132 MB received over NVLink: about 0.2 ms a forward dispatch

    rate = rates_vector(ndcost.Cluster("h100-sxm", 256), Rates.for_device("h100-sxm"), "bf16")
    tokens = 2048.0
    local = tokens * experts
    inner = (7.0 * rate[RATE["intra_lat"]]
             + 7.0 / 8.0 * 32.0 * local / (rate[RATE["intra_bw"]] * rate[RATE["intra_eff"]]))
    outer = 3.0 * rate[RATE["inter_lat"]] + 3.0 / 4.0 * 4.0 * local / (rate[RATE["inter_bw"]] * rate[RATE["inter_eff"]])
    got = kernels.seconds_routing_gather(tokens, experts, 32.0, 1.0, rate)
    assert got == pytest.approx(inner + outer + scan(rate, 32.0), rel=1e-12)
    assert math.isnan(kernels.seconds_routing_gather(tokens, experts, 32.0, 0.5, rate))
    assert kernels.seconds_routing_gather(tokens, experts, 1.0, 1.0, rate) == 0.0


def test_only_hybridep_forward_dispatches_gather_routing_maps(kernels):
    """The gather is in the forward all-to-all of a HybridEP layer only: its backward passes reuse the dispatch's
    handle, and DeepEP's notify kernel is in its fitted call cost."""
    model = ndcost.Model.from_catalog("qwen3-235b-a22b")
    spec = ndcost.ExecSpec(dp=64, ep=64, global_batch_size=512, seq_length=4096, moe_dispatcher="hybridep",
                           moe_dispatcher_sms=32)
    cluster = ndcost.Cluster("gb200-nvl72", 64)
    layers = {}
    for dispatcher in ("hybridep", "deepep"):
        a = seconds_arrays(model, spec.replace(moe_dispatcher=dispatcher), cluster)
        out = np.zeros((len(model.kinds), len(SECONDS_LAYER_FIELDS)))
        kernels.seconds_layer_times(a["kinds"], a["skinds"], a["model"], a["smodel"], a["cand"], a["rate"], out)
        layers[dispatcher] = dict(zip(SECONDS_LAYER_FIELDS, out[-1]))
    hybrid = layers["hybridep"]
    tokens = spec.micro_batch_size * spec.seq_length
    pre = kernels.seconds_routing_gather(tokens, float(model.num_experts), 64.0, 1.0, a["rate"])
    assert hybrid["ep_pre"] == pytest.approx(pre, rel=1e-12)
    assert hybrid["ep_f"] - hybrid["ep_b"] == pytest.approx(pre, rel=1e-12)
    assert layers["deepep"]["ep_pre"] == 0.0
    assert layers["deepep"]["ep_f"] == layers["deepep"]["ep_b"]


def _qwen3(dispatcher, overlap="1f1b"):
    model = ndcost.Model.from_catalog("qwen3-235b-a22b")
    spec = ndcost.ExecSpec(dp=64, ep=64, global_batch_size=512, seq_length=4096, moe_dispatcher=dispatcher,
                           moe_dispatcher_sms=32, ep_overlap=overlap)
    return model, spec, ndcost.Cluster("gb200-nvl72", 64)


def test_a_blocking_dispatch_runs_the_pairs_middle_phase_serially(kernels, backend_name):
    """Megatron-Core's overlapped pair (combine backward | dispatch forward + dispatch backward | combine forward
    beside attention forward | MLP backward + MLP forward | attention backward): with HybridEP the middle phase's
    all-to-alls, and the forward dispatch's routing-map gather before them, are not hidden; the combines beside the
    attention are, as with DeepEP (32 SMs of the GB200's held while they run)."""
    model, spec, cluster = _qwen3("hybridep")
    a = seconds_arrays(model, spec, cluster)
    out = np.zeros((len(model.kinds), len(SECONDS_LAYER_FIELDS)))
    kernels.seconds_layer_times(a["kinds"], a["skinds"], a["model"], a["smodel"], a["cand"], a["rate"], out)
    layer = dict(zip(SECONDS_LAYER_FIELDS, out[-1]))
    held = 32.0 / a["rate"][RATE["sms"]]

    def left(comm, window):
        return min(comm, max(comm - window, held * comm))

    dispatch, pre = layer["ep_d"], layer["ep_pre"]
    combine = layer["ep_f"] - pre - dispatch
    assert pre > 0.0 and combine > 0.0
    pair = left(dispatch, layer["att_f"]) + pre + dispatch + combine + left(combine, layer["att_b"])
    with _backend.use(backend_name):
        hybrid = seconds_estimate(model, spec, cluster)
        deepep = seconds_estimate(model, spec.replace(moe_dispatcher="deepep"), cluster)
    m = spec.global_batch_size / (spec.dp * spec.micro_batch_size)     # 8 micro-batches
    layers = model.num_hidden_layers
    paired = (m - 1.0) / m                       # no pipeline: the first forward and the last backward run alone
    alone = (layer["ep_f"] + layer["ep_b"]) / m
    assert hybrid["stage_sums"][0, S["ep"]] == pytest.approx(layers * (paired * pair + alone), rel=1e-9)
    assert hybrid["parts"]["ep_comm"] > deepep["parts"]["ep_comm"]


def test_hybridep_buffers_by_hand():
    """gpt-oss-120b as Megatron-Bridge ran it on GB200 (EP 64, MBS 4 x 4096 tokens, no TP): one buffer for every
    token of the group -- 16384 x 64 slots of 2880 BF16 elements, 128 FP32 probabilities and 22 FP32 scales."""
    model = ndcost.Model.from_catalog("gpt-oss-120b")
    spec = ndcost.ExecSpec(dp=64, ep=64, micro_batch_size=4, global_batch_size=1280, seq_length=4096,
                           moe_dispatcher="hybridep")
    slot = 2880 * 2 + 128 * 4 + 22 * 4
    assert hybridep_buffer_bytes(2880, 128, 64, 16384) == 16384 * 64 * slot
    assert spec_dispatcher_bytes(model, spec) == 16384 * 64 * slot
    assert spec_dispatcher_bytes(model, spec.replace(moe_dispatcher="alltoall")) == 0
    assert hybridep_buffer_bytes(2880, 128, 1, 16384) == 0


def test_one_and_many_agree_on_a_hybridep_fit(backend_name):
    """estimate and estimate_many hold the same fixed bytes for a HybridEP row (its buffer in both)."""
    model = ndcost.Model.from_catalog("gpt-oss-120b")
    spec = ndcost.ExecSpec(dp=64, ep=64, micro_batch_size=4, global_batch_size=1280, seq_length=4096,
                           moe_dispatcher="hybridep")
    cluster = ndcost.Cluster("gb200-nvl72", 64)
    with _backend.use(backend_name):
        one = ndcost.estimate(model, spec, cluster, units="seconds")
        many = ndcost.estimate_many(model, [spec, spec.replace(moe_dispatcher="alltoall")], cluster, units="seconds")
    assert bool(many.fits[0]) == bool(one.fits)
    assert float(many.step_time[0]) == pytest.approx(one.step_time, rel=1e-12)


@pytest.mark.cython
def test_the_routing_map_gather_compiled_matches_oracle(ckernels, pykernels):
    """Seeded draws over groups in one NVLink domain and across nodes, strides and token counts, and planted edges (no
    tokens, no experts, one rank, a stride below 1, a NaN token count): the compiled twin to 1e-12."""
    rng = np.random.default_rng(1207)
    base = _gb200_rates()
    cases = [(0.0, 128.0, 64.0, 1.0), (4096.0, 0.0, 8.0, 1.0), (4096.0, 128.0, 1.0, 1.0), (4096.0, 128.0, 8.0, 0.5),
             (float("nan"), 128.0, 8.0, 1.0), (4096.0, 128.0, 72.0, 1.0), (4096.0, 128.0, 73.0, 1.0)]
    for _ in range(300):
        cases.append((float(rng.choice([1.0, 517.0, 2048.0, 16384.0])), float(rng.choice([8, 64, 128, 256, 384])),
                      float(rng.choice([2, 8, 16, 32, 64, 72, 128])), float(rng.choice([1.0, 2.0, 4.0, 8.0, 16.0]))))
    for tokens, experts, n, stride in cases:
        rate = base.copy()
        rate[RATE["dpn"]] = float(rng.choice([4.0, 8.0, 72.0]))
        rate[RATE["intra_eff"]] = float(rng.uniform(0.2, 1.0))
        args = (tokens, experts, n, stride, rate)
        got, want = ckernels.seconds_routing_gather(*args), pykernels.seconds_routing_gather(*args)
        assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, rel=1e-12, abs=0.0), args
