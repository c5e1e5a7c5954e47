"""What a training process holds beyond its tensors: the caching allocator's slack and fixed costs.

ndcost's memory kernels price the tensors alive at a stage's worst moment -- what
``torch.cuda.max_memory_allocated`` reports (:attr:`MemoryEstimate.peak_allocated`). What a job
runs out of is more:

* **The caching allocator's reserve** (``torch.cuda.max_memory_reserved``, what nvidia-smi shows of
  PyTorch): it rounds and caches blocks (512-byte rounding, 2 MiB blocks for small tensors, 20 MiB
  segments split for large ones -- PyTorch c10/cuda/CUDACachingAllocator.cpp), and activations of
  changing sizes leave cached blocks that fit nothing next. :data:`ALLOCATOR_RESERVE_FACTOR` is
  reserved / allocated as published for Megatron training on H100 (an estimate, see its source).
* **Fixed costs every process pays**, outside PyTorch's allocator: the CUDA context with the kernels
  it loads (:data:`CUDA_CONTEXT_BYTES`), the cuBLAS / cuBLASLt workspaces
  (:data:`CUBLAS_WORKSPACE_BYTES`), NCCL's buffers for each communicator the strategy uses
  (``ndcost.tables.formulas.fixed_bytes_columns`` counts them): its channels' FIFOs per peer, which an
  all-to-all group multiplies; and,
  where the MoE dispatcher is DeepEP, its NVLink and RDMA buffers (:func:`deepep_buffer_bytes`); where it is
  HybridEP, its NVLink buffer (``ndcost.spec.hybridep_rates.hybridep_buffer_bytes``).

``fits`` then compares peak_reserved + fixed with the device's HBM; a search's default limit is that.
Every figure is an estimate from the measurement its comment cites, not a fit to a validation row.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any

import numpy as np

from ..spec.hybridep_rates import hybridep_buffer_bytes
from .formulas import SCALAR, fixed_bytes_columns_scalar

__all__ = ["ALLOCATOR_RESERVE_FACTOR", "CUDA_CONTEXT_BYTES", "CUBLAS_WORKSPACE_BYTES", "NCCL_RING_COMM_BYTES",
           "NCCL_ALL_TO_ALL_BYTES", "FIXED_BYTES", "deepep_buffer_bytes", "deepep_column", "fixed_bytes",
           "spec_dispatcher_bytes", "dispatcher_buffer_bytes", "dispatch_tokens", "hybridep_column",
           "tensor_budget"]

#: max_memory_reserved / max_memory_allocated of Megatron training runs on H100, as the Megatron-Bridge
#: model verification cards publish both (NVIDIA-NeMo/Megatron-Bridge examples/model_verification_cards/
#: */card.yaml: Nemotron 3.5 Lightning pretrain 73.893 / 68.547 GiB = 1.078, Gemma 4 26B-A4B SFT
#: 72.356 / 65.223 = 1.109, PEFT 45.637 / 44.252 = 1.031): their mean, 1.073.
ALLOCATOR_RESERVE_FACTOR = (73.893 / 68.547 + 72.356 / 65.223 + 45.637 / 44.252) / 3.0
#: The CUDA context with lazily loaded kernels, per process: "around 400MB if CUDA >= 11.7 is used and
#: lazy module loading enabled (default in PyTorch)" (NVIDIA's ptrblck, pytorch/pytorch#109888).
CUDA_CONTEXT_BYTES = 400 * 2**20
#: cuBLAS and cuBLASLt workspaces: PyTorch's default CUBLAS_WORKSPACE_CONFIG on sm90 is ":4096:8"
#: (8 x 4 MiB per handle, aten/src/ATen/cuda/CublasHandlePool.cpp) and Transformer Engine keeps one
#: 32 MiB cuBLASLt workspace per stream on Hopper (transformer_engine/pytorch/module/base.py
#: get_workspace): 64 MiB for the compute stream and one more.
CUBLAS_WORKSPACE_BYTES = 2 * 32 * 2**20
#: One NCCL communicator running ring collectives: 688 MB measured per group of more than two GPUs
#: (544 MB for two) on NVLink A100s with PyTorch (NVIDIA/nccl#964); the channels' buffers (4 MiB
#: Simple + LL + LL128 FIFOs per peer and channel) dominate it (sjeaugey, NVIDIA/nccl#986).
NCCL_RING_COMM_BYTES = 688e6
NCCL_PAIR_COMM_BYTES = 544e6
#: An all-to-all connects every peer on every channel: 8 H100s went from 1.06 GB to 4.34 GB of NCCL
#: memory at the first all_to_all_single (NVIDIA/nccl#1685): 3.28 GB more than the ring's.
NCCL_ALL_TO_ALL_BYTES = 4.34e9 - 1.06e9


#: What :func:`ndcost.tables.formulas.fixed_bytes_columns` (the communicators a strategy uses, counted) reads
#: of these figures.
FIXED_BYTES = MappingProxyType({
    "base_bytes": float(CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES),
    "ring_bytes": NCCL_RING_COMM_BYTES,
    "pair_bytes": NCCL_PAIR_COMM_BYTES,
    "all_to_all_bytes": NCCL_RING_COMM_BYTES + NCCL_ALL_TO_ALL_BYTES,
})


#: DeepEP's (normal-mode) dispatch and combine configs by expert-parallel group size: (NVLink chunked
#: receive tokens, RDMA chunked send tokens, RDMA chunked receive tokens), as deepseek-ai/DeepEP
#: deep_ep/buffers/legacy.py Buffer.get_dispatch_config / get_combine_config (commit dd758ca) state them.
_DEEPEP_DISPATCH = {2: (256, 6, 128), 4: (256, 6, 128), 8: (256, 6, 128), 16: (288, 20, 128), 24: (288, 8, 128),
                    32: (288, 8, 128), 48: (288, 8, 128), 64: (288, 8, 128), 96: (480, 12, 128),
                    128: (560, 12, 128), 144: (720, 12, 128), 160: (720, 12, 128)}
_DEEPEP_COMBINE = {2: (256, 6, 128), 4: (256, 6, 128), 8: (256, 6, 128), 16: (288, 12, 128), 24: (288, 8, 128),
                   32: (288, 8, 128), 48: (288, 8, 128), 64: (288, 8, 128), 96: (480, 8, 128),
                   128: (560, 8, 128), 144: (720, 8, 128), 160: (720, 8, 128)}
#: Buffer.num_sms, DeepEP's default (Megatron-Core leaves it unless moe_flex_dispatcher_num_sms is set);
#: a channel is two SMs. NVLink peers per node: LEGACY_NUM_MAX_NVL_PEERS 8.
_DEEPEP_SMS, _NVL_PEERS = 20, 8
#: Per received token beyond its hidden bytes (csrc/legacy/config.hpp): its SourceMeta (two ints), 128
#: top-k indices (int64), 128 top-k weights and 128 scales (fp32).
_DEEPEP_TOKEN_META = 8 + 128 * 8 + 128 * 4 + 128 * 4


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def deepep_buffer_bytes(hidden: int, ep: int) -> int:
    """Bytes of DeepEP's NVLink and RDMA buffers on a rank of an *ep*-rank expert-parallel group, as
    Megatron-Core allocates them (megatron/core/transformer/moe/fused_a2a.py get_buffer: the larger of
    the dispatch and combine configs' size hints, hidden bytes = hidden x 2 for bf16 and fp8 tokens)
    by DeepEP's csrc/legacy/config.hpp get_nvl_buffer_size_hint / get_rdma_buffer_size_hint. 0 for one
    rank (no dispatch); a group size DeepEP has no config for is refused by ExecSpec."""
    if ep <= 1:
        return 0
    channels = _DEEPEP_SMS // 2
    hidden_bytes = 2 * hidden
    rdma_ranks, nvl_ranks = max(ep // _NVL_PEERS, 1), min(ep, _NVL_PEERS)
    nvl = rdma = 0
    for config in (_DEEPEP_DISPATCH[ep], _DEEPEP_COMBINE[ep]):
        nvl_recv, rdma_send, rdma_recv = config
        size = channels * nvl_ranks * (2 * rdma_ranks + 3) * 4
        size += channels * nvl_ranks * nvl_recv * (hidden_bytes + _DEEPEP_TOKEN_META)
        nvl = max(nvl, _round_up(size, 128))
        if ep > _NVL_PEERS:
            recv = _round_up(rdma_recv, rdma_send)       # Config rounds the receive queue to the sends
            size = channels * rdma_ranks * (_NVL_PEERS * 2 + 2) * 2 * 4
            size += channels * rdma_ranks * recv * 2 * (hidden_bytes + _DEEPEP_TOKEN_META + 16)
            rdma = max(rdma, _round_up(size, 128))
    return nvl + rdma


def deepep_column(hidden: int, ep: Any, on: Any) -> Any:
    """:func:`deepep_buffer_bytes` per row of a batch: *ep* the rows' degrees, *on* where the dispatcher
    is DeepEP (scalars or arrays); 0 where it is not or where DeepEP has no config for the group."""
    ep, on = np.asarray(ep), np.asarray(on)
    sizes, where = np.unique(ep, return_inverse=True)
    table = np.array([deepep_buffer_bytes(hidden, int(size)) if int(size) in _DEEPEP_DISPATCH else 0
                      for size in sizes.ravel()], dtype=np.float64)
    return np.where(on, table[where].reshape(ep.shape), 0.0)


def hybridep_column(model: Any, ep: Any, tokens: Any, on: Any) -> Any:
    """:func:`ndcost.spec.hybridep_rates.hybridep_buffer_bytes` per row of a batch: *ep* the rows' degrees, *tokens*
    the tokens a rank dispatches a micro-batch, *on* where the dispatcher is HybridEP."""
    ep, tokens = np.asarray(ep, dtype=np.float64), np.asarray(tokens, dtype=np.float64)
    return np.where(on, hybridep_buffer_bytes(int(model.hidden_size), int(model.num_experts), ep, tokens), 0.0)


def dispatch_tokens(micro_batch_size: Any, seq_length: Any, tp: Any, cp: Any, sequence_parallel: Any) -> Any:
    """Tokens a rank hands its MoE dispatcher a micro-batch: the micro-batch's tokens over CP, and over TP where the
    sequence is split across it (Megatron-Core's sequence parallelism, which its MoE layers need at TP > 1). Scalars
    or a batch's columns."""
    return micro_batch_size * seq_length // cp // (1 + (tp - 1) * sequence_parallel)


def dispatcher_buffer_bytes(model: Any, dispatcher: str, ep: int, tokens: int) -> int:
    """Bytes the MoE dispatcher keeps on a rank: DeepEP's NVLink and RDMA buffers (:func:`deepep_buffer_bytes`, 0
    for a group DeepEP has no config for), HybridEP's NVLink buffer (``hybridep_buffer_bytes``), none for NCCL's
    all-to-all or a dense model."""
    if not getattr(model, "is_moe", False):
        return 0
    if dispatcher == "deepep":
        return deepep_buffer_bytes(int(model.hidden_size), int(ep)) if int(ep) in _DEEPEP_DISPATCH else 0
    if dispatcher == "hybridep":
        return hybridep_buffer_bytes(int(model.hidden_size), int(model.num_experts), int(ep), int(tokens))
    return 0


def fixed_bytes(dp: int, tp: int, pp: int, cp: int, ep: int, buffers: float = 0.0) -> float:
    """Bytes a rank holds outside its tensors: CUDA context, cuBLAS workspaces, NCCL buffers
    (:func:`ndcost.tables.formulas.fixed_bytes_columns`, which a batch runs compiled), and *buffers* bytes of the
    MoE dispatcher's own (:func:`dispatcher_buffer_bytes`)."""
    (fixed,) = fixed_bytes_columns_scalar(SCALAR, {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "ep": ep}, **FIXED_BYTES)
    return fixed + buffers


def spec_dispatcher_bytes(model: Any, spec: Any) -> int:
    """The MoE dispatcher's buffers for *spec* on *model* (:func:`dispatcher_buffer_bytes`)."""
    tokens = dispatch_tokens(spec.micro_batch_size, spec.seq_length, spec.tp, spec.cp, spec.sequence_parallel)
    return dispatcher_buffer_bytes(model, spec.moe_dispatcher, spec.ep, tokens)


def tensor_budget(capacity: float, spec: Any, reserve: float, model: Any = None) -> float:
    """The memory kernels' stage total (tensors plus the ``reserve`` they carry) that keeps what the
    device holds -- (total - reserve) x ALLOCATOR_RESERVE_FACTOR + fixed -- within *capacity*."""
    buffers = 0 if model is None else spec_dispatcher_bytes(model, spec)
    fixed = float(fixed_bytes(spec.dp, spec.tp, spec.pp, spec.cp, spec.ep, buffers))
    return (capacity - fixed) / ALLOCATOR_RESERVE_FACTOR + reserve
