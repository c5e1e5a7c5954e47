"""The fp8 recipes' casts as seconds mode prices them: what each recipe's cast of a 16-bit tensor moves and launches,
forward and in the backward, fused and eager, and the recipes Transformer Engine's GroupedLinear casts once per expert.

Part of the achievable rates (:mod:`ndcost.spec.rates` re-exports every name; ``Rates.fp8_recipe`` picks a row).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

__all__ = ["FP8_RECIPES", "FP8_BACKWARD_CASTS", "FP8_SPLIT_CASTS"]

#: fp8 recipes: name -> ((bytes moved per element cast, kernels, weights cast every micro-batch)
#: fused, the same run eagerly). A cast reads the 16-bit tensor and writes its fp8 copy and the
#: transposed fp8 copy the other GEMMs of the layer read (Hopper's fp8 tensor cores take TN
#: operands only): 2 + 1 + 1 bytes.
#: * delayed: Transformer Engine's DelayedScaling -- the scale comes from the amax history, the
#:   amax of this tensor is taken inside the same fused cast-transpose kernel
#:   (transformer_engine/common/transpose/cast_transpose.cu): 4 bytes, 1 kernel.
#: * current: per-tensor current scaling (TE Float8CurrentScaling, Megatron-Bridge "fp8_cs"): the
#:   amax of the tensor itself is read first (one more read of 2 bytes): 6 bytes, in 4 kernels -- the
#:   amax zeroed, the amax pass, the scale computed from it (one thread each), the cast
#:   (NVIDIA/TransformerEngine@v2.13 transformer_engine/common/recipe/current_scaling.cu L75 zero_amax_kernel,
#:   L97-107 the amax kernel, L258 compute_scale_from_amax_kernel; pytorch/csrc/quantizer.cpp
#:   Float8CurrentScalingQuantizer::quantize_impl, then nvte_quantize_v2).
#:   The shape of this cost is checked against the public fp8 GEMM measurements of
#:   ai-dynamo/aiconfigurator (systems/data/h100_sxm/gemm, TRT-LLM dynamic per-tensor fp8 whose
#:   latency "includes the compute-scale overhead": tests/test_seconds_fp8.py).
#: * blockwise: 1x128 activation / 128x128 weight blocks (DeepSeek-V3 report §3.3.1) as Transformer Engine's
#:   Float8BlockScaling casts them: the block amax and the cast in one kernel that writes both layouts
#:   (TE@71bbefbf transformer_engine/common/transpose/quantize_transpose_vector_blockwise.cu, its rowwise and
#:   columnwise options): 4, 1.
#: * deepseek: DeepSeek-V3's own fine-grained recipe as its framework runs it (report §3.3.1: 1x128 activation
#:   tiles, 128x128 weight blocks): the forward casts an input to its 1x128 tiles alone (read 2, write 1: 3
#:   bytes, one kernel), and the backward re-quantizes it (:data:`FP8_BACKWARD_CASTS`).
#: * torchao: Float8Linear with tensorwise dynamic scaling (pytorch/ao torchao/float8, used by
#:   torchtitan): amax, then scale-and-cast, then the transposed copy; compiled (inductor fuses the
#:   scale into the cast): 2 + 2 + 1 + 1 = 6 bytes in 2 kernels; eager (abs, amax, mul, clamp, to,
#:   t().contiguous() one op each): 2+2, 2, 2+2, 2+2, 2+1, 1+1 = 19 bytes in 6 kernels. Its weights
#:   are cast on every forward (bf16 parameters, FSDP gathering them each micro-batch).
FP8_RECIPES: Mapping[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = MappingProxyType({
    "delayed": ((4.0, 1.0, 0.0), (4.0, 1.0, 0.0)),
    "current": ((6.0, 4.0, 0.0), (6.0, 4.0, 0.0)),
    "blockwise": ((4.0, 1.0, 0.0), (4.0, 1.0, 0.0)),
    "torchao": ((6.0, 2.0, 1.0), (19.0, 6.0, 1.0)),
    "deepseek": ((3.0, 1.0, 0.0), (3.0, 1.0, 0.0)),
})
#: The backward's fp8 casts of each recipe: name -> ((bytes per element and kernels casting an output gradient,
#: bytes per element and kernels re-quantizing a cached fp8 input for the weight gradient) fused, eager). Every
#: recipe but DeepSeek's casts a gradient as it casts a forward input (the same passes, both layouts written) and
#: keeps the input's transposed copy from the forward, so re-quantizes nothing. DeepSeek-V3 (report §3.5.2):
#: "activations during the forward pass are quantized into 1x128 FP8 tiles and stored. During the backward pass,
#: the matrix needs to be read out, dequantized, transposed, re-quantized into 128x1 tiles, and stored in HBM" --
#: a dequantizing pass (read 1, write 2) and a cast-and-transpose (read 2, write 1): 6 bytes in 2 kernels; a
#: gradient is cast twice, to 1x128 tiles for the input gradient and transposed to 128x1 for the weight
#: gradient: 6 bytes in 2 kernels. DeepSeek's published profile of a DualPipe pair
#: (deepseek-ai/profile-data@449602428a1b train.json) runs these as per_token_cast_to_fp8, cast_back_impl and
#: per_channel_cast_and_transpose kernels.
FP8_BACKWARD_CASTS: Mapping[str, tuple[tuple[float, float, float, float], tuple[float, float, float, float]]] = (
    MappingProxyType({name: tuple((moved, kernels, 0.0, 0.0) for moved, kernels, _ in passes)
                      for name, passes in FP8_RECIPES.items()} | {"deepseek": ((6.0, 2.0, 6.0, 2.0),) * 2}))

#: The recipes whose casts Transformer Engine's GroupedLinear runs once per expert: its split_quantize fuses the
#: casts of all the experts' rows into one multi-tensor kernel for delayed scaling alone and otherwise quantizes
#: each split with its own kernels (NVIDIA/TransformerEngine@v2.13 transformer_engine/pytorch/csrc/extensions/
#: cast.cpp multi_tensor_quantize_impl: "Currently only have fused kernel for FP8 delayed scaling"; MXFP8,
#: which ndcost prices as blockwise, goes the same per-split way). DeepSeek's and torchao's casts are not TE's:
#: one cast of all the rows.
FP8_SPLIT_CASTS: frozenset[str] = frozenset({"current", "blockwise"})
