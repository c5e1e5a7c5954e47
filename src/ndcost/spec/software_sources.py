"""Where the defaults of the software figures of :class:`~ndcost.spec.rates.Rates` come from: today's
Megatron-LM / PyTorch FSDP as their own code and NVIDIA's configs set them (``Rates.sources`` of every device).
The MoE kernels' figures have their own sources in :mod:`ndcost.spec.moe_kernels`."""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from .rope_scaling import ROPE_SCALE_SOURCES

__all__ = ["TODAY_SOFTWARE_SOURCES"]

#: Sources of the software figures' defaults: today's Megatron-LM / PyTorch FSDP.
TODAY_SOFTWARE_SOURCES: Mapping[str, str] = MappingProxyType({
    "zero3_fetch_bandwidth": "default 0: the parameter all-gather at NCCL's rate (PyTorch FSDP gathers a "
                             "whole wrapped unit's flat parameter with one all_gather_into_tensor)",
    "zero3_recompute_gather": "default False: PyTorch FSDP runs the checkpointed forward inside the unit's "
                              "backward, under the backward's own all-gather",
    "zero3_grad_all_reduce": "default False: PyTorch FSDP / ZeRO reduce-scatter the gradients",
    "grad_reduce_bytes": "default 0: the gradients reduced in the width they are held in (Megatron-Core's DDP "
                         "buffer, fp32 or grad_reduce_in_fp32 false's bf16; FSDP2 over fp32 parameters)",
    "grad_accumulation_fusion": "default True: Megatron-LM's --gradient-accumulation-fusion (on by default; "
                                "the wgrad GEMM accumulates into main_grad)",
    "attention_kernel": "default 'best': Megatron-Core with Transformer Engine runs the part's fastest fused "
                        "attention (cuDNN FusedAttention on sm90, FlashAttention on sm80)",
    "fp8_recipe": "default 'delayed': Transformer Engine's DelayedScaling, its default recipe",
    "elementwise": "default 'fused': Megatron-Core / Transformer Engine fused norm, RoPE, SwiGLU, bias-dropout-add",
    "attention_copies": "default False: Transformer Engine attention takes GQA's K/V heads as they are",
    "rope_scale": "default 'unfused': " + ROPE_SCALE_SOURCES["megatron"],
    "tp_overlap_splits": "default 4: NeMo's H100 userbuffers configs run proj_fprop and fc2_fprop as 'pipeline' "
                         "with num_splits 4 (NVIDIA/dgxc-benchmarking, data/validation/h100_run_facts.yaml "
                         "'tp_comm_overlap')",
    "tp_overlap_sms": "default 22: the same configs give the pipelined reduce-scatters num_sm 24 (proj_fprop) and "
                      "20 (fc2_fprop) on H100; their mean",
    "collective_overlap_slowdown": "default 0.189: 'overlapping computation and communication can result in an "
                                   "average computational slowdown of 18.9%, with a maximum of 40.0%' against the "
                                   "same compute with no communication beside it (Characterizing Compute-"
                                   "Communication Overlap in GPU-Accelerated Distributed Deep Learning, arXiv "
                                   "2507.03114v1, abstract: GPT and LLaMA models on 4 A100, H100, MI250 and MI210); "
                                   "the mechanism: NCCL's kernels hold whole SMs while they run ('NCCL CTAs won't "
                                   "share an SM with compute kernels', NVIDIA/nccl#689), 16-32 CTAs a collective "
                                   "(NVIDIA/nccl#892, #2421) of an H100's 132 SMs, and share its HBM",
})
