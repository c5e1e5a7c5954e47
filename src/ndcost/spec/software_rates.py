"""The figures of each training stack (``--software``, ``Rates.for_software``): how its kernels run, each with
its source -- the Rates side of a preset; ``ndcost.spec.software_fields`` holds its strategy side (ExecSpec rows).

A preset's figures replace the device's where the stack runs otherwise (Megatron-LM 2021 adds each micro-batch's
weight gradient separately; torchtitan runs PyTorch's SDPA, ...). The silicon figures stay the device's.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

from .moe_kernels import MCORE_MOE, MCORE_MOE_SOURCES, TORCHTITAN_MOE, TORCHTITAN_MOE_SOURCES
from .nvidia_recipes import MEGATRON_BRIDGE_RATES, MEGATRON_LM_RATES, NEMO_FP8_SOURCE
from .rope_scaling import ROPE_SCALE_SOURCES

__all__ = ["SOFTWARE_PRESETS", "SOFTWARE_TITLES", "DEFAULT_STACK_TEXT", "DEFAULT_SOFTWARE", "NO_SOFTWARE"]

_MEGATRON_2021_GRAD = (
    "Megatron-LM v2.x (2021) megatron/model/distributed.py _make_param_hook: the weight-gradient GEMM "
    "returns param.grad and the hook runs param.main_grad.add_(param.grad.data) every micro-batch; the "
    "wgrad GEMM accumulating into main_grad (--gradient-accumulation-fusion, fused_weight_gradient_mlp_cuda) "
    "came with Megatron-LM v3 (2022). DeepSpeed's engine (GPT-NeoX, ZeRO-3) accumulates through autograd's "
    "param.grad, also a separate add")
#: 10.2 GB of fp16 parameters fetched in ~420 ms.
_DS_FETCH = (
    "deepspeedai/DeepSpeed issue #1174 (2021-06-19; DeepSpeed 0.3.16, PyTorch 1.8, 8x A100 NVLink, p4d): a "
    "5.1B-parameter BERT (hidden 2560, 64 layers; fp16 10.2 GB) ran its forward in ~480 ms under ZeRO-3 "
    "against ~60 ms under ZeRO-2: 10.2 GB fetched in ~420 ms = 24.3 GB/s. One all_gather per parameter "
    "tensor, a torch.cuda.synchronize() and an explicit copy after each (PR #1188, 2021-06-25, items 2-3)")
_DS_RELEASE = (
    "DeepSpeed ZeRO-3 before ZeRO-Infinity (v0.3.13-0.3.14, March-April 2021, the code of Narayanan et al. "
    "2021's ZeRO-3 rows) releases each sub-module's parameters after its forward and fetches them at the "
    "next use (stage3.py fetch_sub_module / release_sub_module); max_reuse_distance came with ZeRO-Infinity")
_DS_ALLREDUCE = (
    "deepspeedai/DeepSpeed issue #1173 (2021-06-21): profiling ZeRO-3 shows 'nccl-all-reduce' kernels and no "
    "reduce-scatter for the gradient reduction; the DeepSpeed team's reply does not dispute it")

_MCORE_GRAD = ("Megatron-Core (2024-25) gradient_accumulation_fusion true: NVIDIA/dgxc-benchmarking and "
               "Megatron-Bridge perf configs (ndcost data/validation/h100_run_facts.yaml 'fusions')")
_TITAN_GRAD = ("pytorch/torchtitan@9dec370: FSDP2 reduce-scatters each parameter's gradient into its sharded "
               ".grad once per backward; with one micro-batch a step there is nothing to accumulate")

_MCORE_ATTN = ("Megatron-Core's TE DotProductAttention: on sm90 Transformer Engine prefers cuDNN FusedAttention "
               "(NVIDIA/dgxc-benchmarking and Megatron-Bridge configs, ndcost data/validation/h100_run_facts.yaml "
               "'attention_backend'); GQA runs natively (no K/V copies)")
_MCORE_FUSED = ("Megatron-Core with TE: fused LayerNorm/RMSNorm, fused RoPE (apply_rope_fusion), fused SwiGLU and "
                "bias-dropout-add (h100_run_facts.yaml 'fusions')")
_TE_RECIPE = ("Transformer Engine's default recipe is DelayedScaling (transformer_engine/common/recipe); a run on "
              "current scaling states it (Megatron-Bridge 'fp8_cs')")
_TITAN_SDPA = ("pytorch/torchtitan@9dec370 llama/model.py: F.scaled_dot_product_attention(is_causal=True); for bf16 "
               "on sm90 PyTorch's SDPA runs its FlashAttention-2 backend (h100_run_facts.yaml 'attention')")
_TITAN_EAGER = ("pytorch/torchtitan@9dec370: RMSNorm (norm_type 'rmsnorm', torchtitan/models/norms.py), "
                "apply_rotary_emb and F.silu(w1(x)) * w3(x) are PyTorch ops, one kernel each without torch.compile")
_TITAN_COMPILE = ("pytorch/torchtitan@9dec370 parallelize_llama.apply_compile: each TransformerBlock "
                  "torch.compile(fullgraph=True): inductor fuses its pointwise ops and reductions")
_TITAN_COPIES = ("pytorch/torchtitan@9dec370 llama/model.py Attention.forward: repeat_kv (expand + reshape: a copy "
                 "for GQA) before SDPA and output.transpose(1, 2).contiguous() after it")
_TITAN_FP8 = ("pytorch/torchtitan@9dec370 float8.py: torchao Float8Linear, tensorwise dynamic scaling for input, "
              "weight and grad_output (h100_run_facts.yaml 'float8_scaling')")

_HF_SDPA = ("huggingface/transformers (5.x) integrations/sdpa_attention.py: F.scaled_dot_product_attention(is_causal"
            "=True) with enable_gqa when no mask is needed (use_gqa_in_sdpa, torch >= 2.5): no K/V copies; for bf16 on "
            "sm90 PyTorch's SDPA runs its FlashAttention-2 backend")
_HF_EAGER = ("huggingface/transformers (5.x) modeling_llama.py: LlamaRMSNorm, apply_rotary_pos_emb (rotate_half) and "
             "down_proj(act_fn(gate_proj(x)) * up_proj(x)) are PyTorch ops, one kernel each (no torch.compile)")
_HF_GRAD = ("pytorch/pytorch torch/optim/optimizer.py zero_grad(set_to_none=True) and one micro-batch: the backward "
            "assigns each fp32 .grad (torch/csrc/autograd/functions/accumulate_grad.h takes the new gradient when "
            ".grad is None); nothing to accumulate")
_HF_COPIES = ("huggingface/transformers (5.x) sdpa_attention.py: GQA through SDPA's enable_gqa (no repeat_kv copies); "
              "its output's transpose(1, 2).contiguous() copy is not priced")

#: Megatron-Core with Transformer Engine (2024-25): the figures of the "megatron-te" and "nemo" presets.
_MCORE_TE = (
    MappingProxyType({"grad_accumulation_fusion": True, "attention_kernel": "best", "elementwise": "fused",
                      "attention_copies": False, "fp8_recipe": "delayed", "rope_scale": "unfused"}),
    MappingProxyType({"grad_accumulation_fusion": _MCORE_GRAD, "attention_kernel": _MCORE_ATTN,
                      "elementwise": _MCORE_FUSED, "attention_copies": _MCORE_ATTN, "fp8_recipe": _TE_RECIPE,
                      "rope_scale": ROPE_SCALE_SOURCES["megatron"]}),
)


def _mcore_preset(changes: tuple[Mapping[str, Any], Mapping[str, str]]) -> tuple[Mapping[str, Any], Mapping[str, str]]:
    """Megatron-Core with TE and its MoE kernels (NVIDIA's recipes: fused permutation and router), with *changes*
    (figures, sources) of a preset (:mod:`ndcost.spec.nvidia_recipes`)."""
    return (MappingProxyType({**_MCORE_TE[0], **MCORE_MOE, **changes[0]}),
            MappingProxyType({**_MCORE_TE[1], **MCORE_MOE_SOURCES, **changes[1]}))


def _torchtitan(elementwise: str, elementwise_source: str) -> tuple[Mapping[str, Any], Mapping[str, str]]:
    """torchtitan's figures: eager and torch.compile differ only in how the elementwise ops run."""
    return (MappingProxyType({"grad_accumulation_fusion": True, "attention_kernel": "fa2", "elementwise": elementwise,
                              "attention_copies": True, "fp8_recipe": "torchao", "rope_scale": "fused",
                              **TORCHTITAN_MOE}),
            MappingProxyType({"grad_accumulation_fusion": _TITAN_GRAD, "attention_kernel": _TITAN_SDPA,
                              "elementwise": elementwise_source, "attention_copies": _TITAN_COPIES,
                              "fp8_recipe": _TITAN_FP8, "rope_scale": ROPE_SCALE_SOURCES["torchtitan"],
                              **TORCHTITAN_MOE_SOURCES}))


#: Training-software generations: name -> (Rates figures, their sources). ``Rates.for_software``.
SOFTWARE_PRESETS: Mapping[str, tuple[Mapping[str, Any], Mapping[str, str]]] = MappingProxyType({
    "megatron-2021": (
        MappingProxyType({"grad_accumulation_fusion": False}),
        MappingProxyType({"grad_accumulation_fusion": _MEGATRON_2021_GRAD}),
    ),
    "deepspeed-2021": (
        MappingProxyType({"grad_accumulation_fusion": False, "zero3_fetch_bandwidth": 10.2e9 / 0.42,
                          "zero3_recompute_gather": True, "zero3_grad_all_reduce": True}),
        MappingProxyType({"grad_accumulation_fusion": _MEGATRON_2021_GRAD, "zero3_fetch_bandwidth": _DS_FETCH,
                          "zero3_recompute_gather": _DS_RELEASE, "zero3_grad_all_reduce": _DS_ALLREDUCE}),
    ),
    # MoE kernels as NVIDIA's recipes (NeMo, Megatron-Bridge) configure Megatron-Core: fused permutation and router
    "megatron-te": (MappingProxyType({**_MCORE_TE[0], **MCORE_MOE}),
                    MappingProxyType({**_MCORE_TE[1], **MCORE_MOE_SOURCES})),
    "nemo": _mcore_preset(({}, {"fp8_recipe": NEMO_FP8_SOURCE})),
    "megatron-bridge": _mcore_preset(MEGATRON_BRIDGE_RATES),
    "megatron-lm": _mcore_preset(MEGATRON_LM_RATES),
    "torchtitan-eager": _torchtitan("eager", _TITAN_EAGER),
    "torchtitan-compile": _torchtitan("fused", _TITAN_COMPILE),
    "hf-eager": (MappingProxyType({"grad_accumulation_fusion": True, "attention_kernel": "fa2", "elementwise": "eager",
                                   "attention_copies": False, "rope_scale": "fused"}),
                 MappingProxyType({"grad_accumulation_fusion": _HF_GRAD, "attention_kernel": _HF_SDPA,
                                   "elementwise": _HF_EAGER, "attention_copies": _HF_COPIES,
                                   "rope_scale": ROPE_SCALE_SOURCES["hf"]})),
})


#: What each preset stands for, in one line (``ndcost software``, docs/STACKS.md).
SOFTWARE_TITLES: Mapping[str, str] = MappingProxyType({
    "megatron-2021": "Megatron-LM v2 (2021): each micro-batch's weight gradient added separately",
    "deepspeed-2021": "DeepSpeed ZeRO-3 as of 0.3.16 (2021): per-tensor fetches, a synchronize after each",
    "megatron-te": "Megatron-Core with Transformer Engine (2024-25), its MoE kernels fused; ExecSpec's fields as given",
    "nemo": "NVIDIA NeMo 2.0's recipes: Megatron-Core + TE, TP comm overlap, param-gather overlap, fp8 delayed scaling",
    "megatron-bridge": "NVIDIA Megatron-Bridge's recipes: as NeMo's, fp8 as per-tensor current scaling (FP8-CS)",
    "megatron-lm": "plain Megatron-LM pretrain_gpt.py with no stack flag: DDP, no overlap, MoE kernels unfused",
    "torchtitan-eager": "torchtitan (FSDP2, per-op SAC, torchao float8) without torch.compile",
    "torchtitan-compile": "torchtitan with torch.compile on each TransformerBlock",
    "hf-eager": "plain PyTorch + Hugging Face Transformers (Trainer, accelerate): fp32 weights under bf16 autocast, eager",
})

#: What is priced when no stack is stated (``ndcost estimate`` prints it; docs/STACKS.md explains it).
DEFAULT_STACK_TEXT = ("none stated: the device's rates (Megatron-Core with Transformer Engine's kernels) and the "
                      "strategy's fields as given (no overlap the strategy does not state)")

#: The stack the command line and a user's runs file price where none is named: Megatron-Core as NVIDIA's recipes
#: configure it, what most teams training at scale run (docs/STACKS.md lists it field by field).
DEFAULT_SOFTWARE = "megatron-bridge"
#: ``--software none`` (``software: none`` in a runs file): the strategy and the device's rates exactly as stated
#: (the Python API's default).
NO_SOFTWARE = "none"
