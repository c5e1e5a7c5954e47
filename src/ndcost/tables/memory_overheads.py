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
  (:data:`CUBLAS_WORKSPACE_BYTES`), and NCCL's buffers for each communicator the strategy uses
  (:func:`nccl_bytes`): its channels' FIFOs per peer, which an all-to-all group multiplies.

``fits`` then compares peak_reserved + fixed with the device's HBM; a search's default limit is that.
Every figure is an estimate from the measurement its comment cites, not a fit to a validation row.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ALLOCATOR_RESERVE_FACTOR", "CUDA_CONTEXT_BYTES", "CUBLAS_WORKSPACE_BYTES", "NCCL_RING_COMM_BYTES",
           "NCCL_ALL_TO_ALL_BYTES", "communicators", "nccl_bytes", "fixed_bytes"]

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


def communicators(dp: Any, tp: Any, pp: Any, cp: Any, ep: Any) -> tuple:
    """(ring groups, pair groups, all-to-all groups) a rank uses: tp, the data-parallel group (dp·cp,
    the gradients' and ZeRO's), cp, the pipeline's send/recv pairs, ep's all-to-all, and the world
    (the loss and gradient-norm reductions). Arrays or scalars."""
    if all(isinstance(x, (int, float)) for x in (dp, tp, pp, cp, ep)):
        # one candidate (estimate()): plain floats, no numpy on the per-call path
        ring = float(tp > 1) + float(dp * cp > 1) + float(cp > 1) + float(dp * tp * pp * cp > 1)
        return ring, float(pp > 1), float(ep > 1)
    dp, tp, pp, cp, ep = (np.asarray(x, dtype=np.float64) for x in (dp, tp, pp, cp, ep))
    ring = (tp > 1).astype(float) + (dp * cp > 1).astype(float) + (cp > 1).astype(float) \
        + (dp * tp * pp * cp > 1).astype(float)
    pairs = (pp > 1).astype(float)
    all_to_all = (ep > 1).astype(float)
    return ring, pairs, all_to_all


def nccl_bytes(dp: Any, tp: Any, pp: Any, cp: Any, ep: Any) -> Any:
    """NCCL's buffers on a rank for the strategy's communicators."""
    ring, pairs, all_to_all = communicators(dp, tp, pp, cp, ep)
    return ring * NCCL_RING_COMM_BYTES + pairs * NCCL_PAIR_COMM_BYTES \
        + all_to_all * (NCCL_RING_COMM_BYTES + NCCL_ALL_TO_ALL_BYTES)


def fixed_bytes(dp: Any, tp: Any, pp: Any, cp: Any, ep: Any) -> Any:
    """Bytes a rank holds outside its tensors: CUDA context, cuBLAS workspaces, NCCL buffers."""
    return CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES + nccl_bytes(dp, tp, pp, cp, ep)


def tensor_budget(capacity: float, spec: Any, reserve: float) -> float:
    """The memory kernels' stage total (tensors plus the ``reserve`` they carry) that keeps what the
    device holds -- (total - reserve) x ALLOCATOR_RESERVE_FACTOR + fixed -- within *capacity*."""
    fixed = float(fixed_bytes(spec.dp, spec.tp, spec.pp, spec.cp, spec.ep))
    return (capacity - fixed) / ALLOCATOR_RESERVE_FACTOR + reserve
