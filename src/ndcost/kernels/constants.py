"""The numbers the compiled kernels read from the oracle, by their C names (one source each).

Each value stays in its oracle module, beside its source; this table names the C constant the twin
reads it as. ``python tools/gen_columns.py`` writes them, with the codes of ``ndcost.kernels.codes``,
into ``cysrc/ndcost/kernels/codes.pxi`` (an int as a C enum, a float as a ``cdef double``), so that a
recipe changes a number in one place. :func:`kernel_codes` is the oracle's twin of the compiled
module's: every code and constant by its C name, the values each backend reads
(tests/test_codes.py compares them).
"""
from __future__ import annotations

from ..spec.mamba import SELECTIVE_SCAN_FLOPS
from ..spec.recompute_spec import ALL_KEPT
from . import (
    activation_storage, eager_passes, memory, nd_combine, nd_ops, seconds, seconds_comm, seconds_layer, seconds_moe,
    seconds_ops, window_attention,
)
from .codes import ENUMS, ND_OPS, c_name

__all__ = ["kernel_codes"]

#: C name -> the oracle's value. An int is written as a C enum (usable as an array size), a float as a double, a
#: tuple of floats as a C array.
CONSTANTS: dict[str, int | float | tuple[float, ...]] = {
    # the recompute switches' keep mask with every switch kept (recompute_spec.ALL_KEPT)
    "ALL_KEPT": ALL_KEPT,
    # ND units (nd_ops, nd_combine)
    "ND_OP_COUNT": len(ND_OPS),
    "ND_GDN_CHUNK": nd_ops._GDN_CHUNK,
    "ND_BACKWARD_RATIO": nd_combine._BACKWARD_RATIO,
    "ND_MAX_COUNT": nd_combine._MAX_COUNT,
    # the memory model (memory)
    "_MEM_COLUMNS": memory.N_MEMORY_COLUMNS,
    "_MEM_FP32_BYTES": memory._FP32_BYTES,
    "_MEM_ROUTING_MAP_BYTES": memory.ROUTING_MAP_BYTES,
    "_MEM_INDEX_BYTES": memory.INDEX_BYTES,
    "_MEM_PROBABILITY_BYTES": memory.PROBABILITY_BYTES,
    "_MEM_FP8_STORED_BYTES": activation_storage.FP8_STORED_BYTES,
    "_MEM_E5M6_STORED_BYTES": activation_storage.E5M6_STORED_BYTES,
    # seconds mode: ops (seconds_ops)
    "SEC_NOTE_SIZE": seconds_ops.NOTE_SIZE,
    # seconds mode: HybridEP's NVLink byte rate by group size, its published points (seconds_comm)
    "SEC_HYBRIDEP_POINTS": len(seconds_comm.HYBRIDEP_RANKS),
    "SEC_HYBRIDEP_RANKS": seconds_comm.HYBRIDEP_RANKS,
    "SEC_HYBRIDEP_SHARES": seconds_comm.HYBRIDEP_SHARES,
    # ... and the share of the NIC its RDMA stage reaches by node count, its published points (seconds_comm)
    "SEC_HYBRIDEP_RDMA_POINTS": len(seconds_comm.HYBRIDEP_NODES),
    "SEC_HYBRIDEP_NODES": seconds_comm.HYBRIDEP_NODES,
    "SEC_HYBRIDEP_RDMA_SHARES": seconds_comm.HYBRIDEP_RDMA_SHARES,
    # ... and its metadata preprocessing's scan of the gathered routing map (seconds_comm)
    "SEC_ROUTING_SCAN_KERNELS": seconds_comm.ROUTING_SCAN_KERNELS,
    "SEC_ROUTING_SCAN_INDEX_BYTES": seconds_comm.ROUTING_SCAN_INDEX_BYTES,
    "SEC_POINTWISE_BACKWARD_BYTES": seconds_ops.POINTWISE_BACKWARD_BYTES,
    "SEC_EAGER_SWIGLU_PASSES": seconds_ops.EAGER_SWIGLU_PASSES,
    "SEC_AUTOCAST_FP32_BYTES": seconds_ops.AUTOCAST_FP32_BYTES,
    "SEC_AUTOCAST_RMSNORM_BYTES": seconds_ops.AUTOCAST_RMSNORM_BYTES,
    "SEC_AUTOCAST_RMSNORM_KERNELS": seconds_ops.AUTOCAST_RMSNORM_KERNELS,
    "SEC_AUTOCAST_RMSNORM_BACKWARD_BYTES": seconds_ops.AUTOCAST_RMSNORM_BACKWARD_BYTES,
    "SEC_AUTOCAST_RMSNORM_BACKWARD_KERNELS": seconds_ops.AUTOCAST_RMSNORM_BACKWARD_KERNELS,
    "SEC_AUTOCAST_ROPE_FP32_BYTES": seconds_ops.AUTOCAST_ROPE_FP32_BYTES,
    "SEC_AUTOCAST_ROPE_KERNELS": seconds_ops.AUTOCAST_ROPE_KERNELS,
    "SEC_AUTOCAST_RESIDUAL_FP32_BYTES": seconds_ops.AUTOCAST_RESIDUAL_FP32_BYTES,
    "SEC_AUTOCAST_RESIDUAL_BACKWARD_FP32_BYTES": seconds_ops.AUTOCAST_RESIDUAL_BACKWARD_FP32_BYTES,
    "SEC_AUTOCAST_CE_FORWARD_FP32_BYTES": seconds_ops.AUTOCAST_CE_FORWARD_FP32_BYTES,
    "SEC_AUTOCAST_CE_FORWARD_KERNELS": seconds_ops.AUTOCAST_CE_FORWARD_KERNELS,
    "SEC_AUTOCAST_CE_BACKWARD_FP32_BYTES": seconds_ops.AUTOCAST_CE_BACKWARD_FP32_BYTES,
    "SEC_AUTOCAST_CE_BACKWARD_KERNELS": seconds_ops.AUTOCAST_CE_BACKWARD_KERNELS,
    # seconds mode: a MoE block (seconds_moe)
    "SEC_GROUPED_TILE_M": seconds_moe.GROUPED_TILE[0],
    "SEC_GROUPED_TILE_N": seconds_moe.GROUPED_TILE[1],
    "SEC_GROUPED_SMALL_TILE_M": seconds_moe.GROUPED_SMALL_TILE[0],
    "SEC_GROUPED_SMALL_TILE_N": seconds_moe.GROUPED_SMALL_TILE[1],
    "SEC_GROUPED_SMALL": seconds_moe.GROUPED_SMALL,
    "SEC_MULTI_STREAMS": seconds_moe.MULTI_STREAMS,
    "SEC_PROB_BYTES": seconds_moe.PROB_BYTES,
    "SEC_INDEX_BYTES": seconds_moe.INDEX_BYTES,
    "SEC_CLAMP_FORWARD_WIDTHS": seconds_moe.CLAMP_FORWARD_WIDTHS,
    "SEC_CLAMP_BACKWARD_WIDTHS": seconds_moe.CLAMP_BACKWARD_WIDTHS,
    "SEC_CLAMP_BACKWARD_MASK_BYTES": seconds_moe.CLAMP_BACKWARD_MASK_BYTES,
    "SEC_CLAMP_FORWARD_KERNELS": seconds_moe.CLAMP_KERNELS[0],
    "SEC_CLAMP_BACKWARD_KERNELS": seconds_moe.CLAMP_KERNELS[1],
    "SEC_CONCAT_WIDTHS": seconds_moe.CONCAT_WIDTHS,
    "SEC_CONCAT_KERNELS": seconds_moe.CONCAT_KERNELS,
    # seconds mode: a layer (seconds_layer; the Mamba-1 scan's FLOPs are ndcost.spec.mamba's)
    "SEC_SELECTIVE_SCAN_FLOPS": SELECTIVE_SCAN_FLOPS,
    "SEC_FLASH_BACKWARD_FLOPS": seconds_layer.FLASH_BACKWARD_FLOPS,
    "SEC_FLASH_CAUSAL_SHARE": seconds_layer.FLASH_CAUSAL_SHARE,
    "SEC_WINDOW_TILE": window_attention.WINDOW_TILE,
    "SEC_WINDOW_FIXED_KEYS": window_attention.WINDOW_FIXED_KEYS,
    "SEC_EAGER_RMSNORM_FP32_BYTES": eager_passes.EAGER_RMSNORM_FP32_BYTES,
    "SEC_EAGER_RMSNORM_KERNELS": eager_passes.EAGER_RMSNORM_KERNELS,
    "SEC_EAGER_ROPE_FP32_BYTES": eager_passes.EAGER_ROPE_FP32_BYTES,
    "SEC_EAGER_ROPE_KERNELS": eager_passes.EAGER_ROPE_KERNELS,
    "SEC_MEGATRON_ROPE_PASSES_F": eager_passes.MEGATRON_ROPE_PASSES_F,
    "SEC_MEGATRON_ROPE_KERNELS_F": eager_passes.MEGATRON_ROPE_KERNELS_F,
    "SEC_MEGATRON_ROPE_PASSES_B": eager_passes.MEGATRON_ROPE_PASSES_B,
    "SEC_MEGATRON_ROPE_KERNELS_B": eager_passes.MEGATRON_ROPE_KERNELS_B,
    # seconds mode: the output head (seconds)
    "SEC_CE_FORWARD_BYTES": seconds.CE_FORWARD_BYTES,
    "SEC_CE_BACKWARD_BYTES": seconds.CE_BACKWARD_BYTES,
    "SEC_SOFTCAP_BYTES": seconds.SOFTCAP_BYTES,
    "SEC_CE_FORWARD_KERNELS": seconds.CE_FORWARD_KERNELS,
    "SEC_CE_ALL_REDUCES": seconds.CE_ALL_REDUCES,
    "SEC_CE_REDUCE_BYTES": seconds.CE_REDUCE_BYTES,
}


def kernel_codes() -> dict:
    """Every code (``ndcost.kernels.codes.ENUMS``) and constant (:data:`CONSTANTS`) the kernels read, by its
    C name: the values this backend reads."""
    codes = {c_name(prefix, name, upper): i for prefix, names, upper in ENUMS for i, name in enumerate(names)}
    return {**codes, **CONSTANTS}
