"""NVIDIA's HybridEP (DeepEP's hybrid-ep branch) as published: how its NVLink kernels slow as the NVLink group grows,
and what its buffers hold.

Megatron-Core's flex dispatcher runs HybridEP (``--moe-flex-dispatcher-backend hybridep``) on B200, GB200 and GB300
and across H100 nodes. Seconds mode prices it with DeepEP's model (``ndcost.kernels.seconds_comm._exchange``: a call's
fixed cost, a token's, the received bytes at a share of the link fitted to DeepEP's measured calls,
``ndcost.spec.deepep_rates``) and two facts of its own:

* **Its NVLink kernels lose bandwidth as the group grows.** HybridEP's README times its kernels alone ("Kernel
  Only") on GB200 NVL72 at 8-36 ranks, 4096 tokens a rank, hidden 7168, top-8, 8 experts a rank, random uniform
  routing, 32 SMs (the count Megatron-Bridge and Megatron-LM's recipes give it); the algorithm bandwidth of the
  bytes each rank receives. Dispatch (BF16) and combine, averaged: 750.6 GB/s at 8 ranks, 686.6 at 16, 652.9 at 24,
  623.7 at 32, 614.7 at 36. At 8 ranks that is DeepEP's fitted 0.8436 of the 900 GB/s link (759 GB/s) -- the
  model's byte rate -- so the byte rate is scaled by each group's figure over the 8-rank one
  (:data:`HYBRIDEP_NVLINK_SCALE`), linearly between the published sizes; beyond 36 ranks (an NVL72's EP 64) the
  36-rank figure is held: an assumption, the README publishes no larger group. The README's "Torch API" times add
  0.12-0.23 ms a call on top (a pass over the received tokens that seconds mode prices as the permutation, and the
  call's own cost, which the DeepEP model carries).
* **Across nodes, its RDMA stage runs at its own published share of the NIC.** HybridEP's README times it on H100
  (one 400 Gb/s ConnectX-7 a GPU, 8 GPUs a node) at 16, 32 and 64 ranks, 4096 tokens a rank, hidden 7168, top-8,
  8 experts a rank, random uniform routing, "Kernel Only", the algorithm bandwidth of the bytes it sends over
  RDMA, counted as DeepEP counts them (a token once per node it reaches, its own node included: tests/test_hybrid_ep.py
  ``count_rdma_send_from_routing_map``). With 8 SMs a call -- the default HybridEP's Configurer gives a group that
  spans nodes (``num_sms_dispatch_api.value_or((num_of_nodes == 1) ? 24 : 8)``, csrc/hybrid_ep/config.cuh), which
  Megatron-Core keeps (``moe_hybridep_num_sms`` None) -- dispatch (BF16) and combine average 72.4 GB/s over 2 nodes,
  55.45 over 4 and 50.79 over 8 (16 SMs: within 7.5% of them, direction by direction). Of those bytes (N-1)/N leave
  the node, so the NIC carries 36.2, 41.6 and 44.4 GB/s: 0.724, 0.832 and 0.889 of the 50 GB/s link
  (:data:`HYBRIDEP_RDMA_SHARE`), where seconds mode gives NCCL and DeepEP 0.9. The share is the whole call's (at 2
  nodes the forwarding over NVLink with 8 SMs may bind it): seconds mode prices HybridEP's RDMA stage at it, linearly
  between the published node counts, the 2-node share below them and the 8-node one beyond (an assumption: none larger
  is published), on any part and whatever ``Rates.inter_node_efficiency`` (NCCL's share) says: a property of
  HybridEP's kernels, measured on the H100's NIC, that stands for other parts' (an assumption where the NIC differs).
  The README's "Torch API" times add 0.33-1.34 ms a call on top (the copy out of the receive buffer and a device sync:
  tests bound the price by both).
* **Its forward dispatch first gathers the routing maps.** A dispatch handed no handle -- each forward dispatch in
  Megatron-Core, which passes the routing map -- all-gathers every rank's bool routing map (tokens x experts bytes)
  over the group, with HybridEP's own one-shot NVLink kernel inside one domain and NCCL's all-gather across nodes,
  then scans the gathered maps (csrc/hybrid_ep/executor/executor.cu ``allgather_routing_map``,
  ``metadata_preprocess_core``). The published tables time calls that reuse a handle (tests/test_hybrid_ep.py), so
  seconds mode prices the gather and the scan on top of the forward dispatch (``seconds_comm.seconds_routing_gather``):
  about 0.2 ms a forward dispatch at EP 64 on a GB200 NVL72 with 16384 tokens a rank and 128 experts.
* **Its dispatch blocks the host.** Without an upper bound on the tokens a rank receives (dropless training,
  Megatron-Core passes ``num_permuted_tokens=None``: "None means no up-bound, will cause a CPU sync",
  token_dispatcher.py), HybridEP's metadata preprocessing ends in ``cudaStreamSynchronize`` so that the host can
  size the permuted output (executor.cu). Measured on the seven published runs that pair it with Megatron-Core's
  1F1B EP overlap (GB200, GB300, H100; Qwen3-235B-A22B, DeepSeek-V3, gpt-oss-120b; Megatron-Bridge 26.04 and
  Megatron-LM's recipes: docs/VALIDATION.md "Stop 45"), the phase of the overlapped pair that holds the dispatches
  hides none of them, where DeepEP and NCCL's all-to-all hide them whole (the three runs that pair those). Seconds
  mode prices that phase serially for HybridEP (``seconds_comm._paired_layer``): an estimate from those runs, the
  mechanism (the host resuming its launches only after the drain) not profiled.

Its buffers (:func:`hybridep_buffer_bytes`): HybridEP sizes its NVLink receive buffer for the worst case, every
token of every rank of the group routed to one rank (``max_num_of_tokens = max_num_of_tokens_per_rank x
ranks_per_node x nodes``, intranode.cu), one buffer shared by dispatch and combine (``use_shared_buffer`` True by
default, hybrid_ep_buffer.py): BF16 tokens, an FP32 probability per token and expert of the NVLink group, and an
FP32 scale per 128 elements of a token.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

__all__ = ["HYBRIDEP_KERNEL_GBS", "HYBRIDEP_NVLINK_SCALE", "HYBRIDEP_SOURCE", "HYBRIDEP_BLOCKING_SOURCE",
           "HYBRIDEP_RDMA_SOURCE", "HYBRIDEP_RDMA_KERNEL_GBS", "HYBRIDEP_RDMA_SHARE",
           "hybridep_buffer_bytes", "hybridep_token_bytes"]

HYBRIDEP_SOURCE = ("deepseek-ai/DeepEP@94a9f8f6b146c07d97ec58f67cd6d303296d6098 (hybrid-ep) docs/README_Hybrid-EP.md "
                   "'GB200 Platform', HybridEP Performance Results, 32 SMs, Kernel Only: Dispatch (BF16) and Combine "
                   "GB/s (algorithm bandwidth), 4096 tokens, hidden 7168, top-8, 8 local experts")
HYBRIDEP_BLOCKING_SOURCE = (
    "deepseek-ai/DeepEP@94a9f8f6b146c07d97ec58f67cd6d303296d6098 (hybrid-ep) csrc/hybrid_ep/executor/executor.cu "
    "metadata_preprocess_core ('if (!non_blocking) { cudaStreamSynchronize(stream); ...'); NVIDIA/Megatron-LM@"
    "d7288711ba278d160d2a5a22c099915c9fe1395c megatron/core/transformer/moe/token_dispatcher.py _HybridEPManager "
    "(num_permuted_tokens None in dropless: 'will cause a CPU sync')")

#: NVLink group size -> (dispatch BF16, combine) GB/s of HybridEP's kernels alone, as published (HYBRIDEP_SOURCE).
HYBRIDEP_KERNEL_GBS: Mapping[int, tuple[float, float]] = MappingProxyType({
    8: (764.03, 737.13),
    16: (706.95, 666.26),
    24: (665.97, 639.80),
    32: (642.23, 605.15),
    36: (632.31, 596.99),
})


def _mean(gbs: tuple[float, float]) -> float:
    """A published (dispatch, combine) pair's mean: seconds mode prices both directions at one byte rate."""
    return (gbs[0] + gbs[1]) / 2.0


#: (NVLink ranks, the byte rate's share of the 8-rank one) at each published size, in order.
HYBRIDEP_NVLINK_SCALE: tuple[tuple[float, float], ...] = tuple(
    (float(ranks), _mean(gbs) / _mean(HYBRIDEP_KERNEL_GBS[8])) for ranks, gbs in sorted(HYBRIDEP_KERNEL_GBS.items()))

HYBRIDEP_RDMA_SOURCE = ("deepseek-ai/DeepEP@cf78085241ebfdd809da8f169b41fa08e589b316 (hybrid-ep) "
                        "docs/README_Hybrid-EP.md 'H100 Platform', HybridEP Performance Results (IB Bandwidth), 8 SMs, "
                        "Kernel Only: Dispatch (BF16) and Combine GB/s (algorithm bandwidth of the RDMA bytes), "
                        "4096 tokens, hidden 7168, top-8, 8 local experts, 8 H100 a node with one 400 Gb/s "
                        "ConnectX-7 each")

#: Ranks (8 H100 a node) -> (dispatch BF16, combine) GB/s of HybridEP's kernels alone across nodes, 8 SMs, as published
#: (HYBRIDEP_RDMA_SOURCE).
HYBRIDEP_RDMA_KERNEL_GBS: Mapping[int, tuple[float, float]] = MappingProxyType({
    16: (76.80, 68.00),
    32: (54.50, 56.40),
    64: (50.55, 51.03),
})
#: The node those figures ran on: 8 H100, one 400 Gb/s ConnectX-7 each, 50 GB/s a direction.
_H100_RANKS_PER_NODE, _H100_NIC_GBS = 8, 50.0

#: (nodes, the share of the NIC HybridEP's RDMA stage reaches: the (N-1)/N of the bytes that leave the node) at each
#: published node count, in order.
HYBRIDEP_RDMA_SHARE: tuple[tuple[float, float], ...] = tuple(
    (ranks / _H100_RANKS_PER_NODE, _mean(gbs) * (1.0 - _H100_RANKS_PER_NODE / ranks) / _H100_NIC_GBS)
    for ranks, gbs in sorted(HYBRIDEP_RDMA_KERNEL_GBS.items()))

#: Bytes a buffer holds a token element (BF16), a probability (FP32), and a scale per 128 elements (FP32).
_TOKEN_BYTES, _PROB_BYTES, _SCALE_BYTES, _SCALE_BLOCK = 2, 4, 4, 128


def hybridep_token_bytes(hidden: int, experts: int) -> int:
    """Bytes HybridEP's NVLink buffer holds a token slot: its BF16 elements, an FP32 probability per expert of the
    group and an FP32 scale per 128 elements."""
    return hidden * _TOKEN_BYTES + experts * _PROB_BYTES + (hidden // _SCALE_BLOCK) * _SCALE_BYTES


def hybridep_buffer_bytes(hidden: int, experts: int, ep: Any, tokens_per_rank: Any) -> Any:
    """Bytes of HybridEP's NVLink buffers on a rank of an expert-parallel group of *ep* ranks, each sending up to
    *tokens_per_rank* tokens of *hidden* elements to *experts* experts: the shared dispatch/combine token buffer for
    every token of the group, its probabilities (one per token and expert of the group: exact inside one NVLink
    domain, an over-count of a group spread over several, whose probabilities cover one domain's experts), and the
    FP8 scales buffer HybridEP allocates beside it. 0 for a group of one rank. The RDMA staging buffers of a group
    spread over several nodes are not priced. *ep* and *tokens_per_rank* may be a batch's columns (numpy arrays)."""
    return tokens_per_rank * ep * hybridep_token_bytes(hidden, experts) * ((ep > 1) & (tokens_per_rank > 0))
