"""The figures of a MoE layer's kernels and of the host that launches every kernel, with their sources.

:class:`~ndcost.spec.rates.Rates` carries them (its fields ``grouped_gemm_tile_overhead``,
``grouped_gemm_exposed``, ``grouped_gemm_impl``, ``launch_overhead``, ``graph_kernel_overhead``,
``moe_permute``, ``moe_router_fusion``, ``moe_aux_loss``, ``scatter_add_rate``); this module holds their
vocabularies, their defaults and the texts that say where each comes from, so that ``rates.py`` stays about
the device.

Three of the figures are fitted, across a family of measured kernels and never to a training run:
the grouped GEMM's per-tile fixed cost and the share of its weight stream left exposed, by
``tools/fit_grouped_gemm.py`` over the 34 ``torch._grouped_mm`` timings at 128-4096 rows an expert of
``tests/data/h200/h200_grouped.json`` (six expert shapes of Qwen3-30B-A3B, gpt-oss-120b and DeepSeek-V3
on one H200), priced at the part's own GEMM rate and HBM bandwidth; and the atomic scatter-add rate, by
``tools/fit_scatter_add.py`` over the device-bound expert blocks of ``tests/data/h200/moe.json``.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

__all__ = ["GROUPED_GEMMS", "MOE_PERMUTES", "EXPERT_BIASES", "GLU_CLAMPS", "MOE_KERNEL_DEFAULTS", "MOE_KERNEL_SOURCES",
           "GRACE_HOST_FACTOR", "GRACE_LAUNCH_SOURCE",
           "TORCHTITAN_MOE", "MCORE_MOE", "MCORE_MOE_SOURCES", "TORCHTITAN_MOE_SOURCES"]

#: How a stack runs a grouped GEMM (Rates.grouped_gemm_impl): one CUTLASS grouped kernel a call
#: (torch._grouped_mm, DeepGEMM, TE's CUTLASS path), or one cuBLAS GEMM per local expert on a few streams
#: (Transformer Engine's GroupedLinear on Hopper: nvte_multi_stream_cublas_gemm).
GROUPED_GEMMS: tuple[str, ...] = ("cutlass", "multi_stream")
#: How tokens are permuted to their experts and back (Rates.moe_permute); ``ndcost.kernels.columns.MOE_PERMUTES``.
MOE_PERMUTES: tuple[str, ...] = ("fused", "unfused", "sort")
#: How a stack adds the routed experts' biases, for a model whose experts carry them (gpt-oss; Rates.expert_bias):
#: in the GEMM's epilogue (free), the down projection's added expert by expert after its GEMM with the routing
#: probabilities while the gate-up one rides the epilogue (Megatron-Core's TEGroupedMLP), both added expert by
#: expert (NeMo AutoModel's DeepEP experts), or both gathered into a row-shaped tensor and added (torchtitan).
EXPERT_BIASES: tuple[str, ...] = ("epilogue", "down_split", "split", "gathered")
#: How a stack clamps the two halves of a gated expert's input before its activation, for a model whose GLU clamps
#: them (gpt-oss's swiglu_limit; Rates.glu_clamp): inside the activation's kernel (compiled or fused), as separate
#: eager kernels on the two halves (OpenAI's reference swiglu: chunk, clamp, clamp; torch.compile fuses them where
#: the stack compiles its elementwise ops), or separate and concatenated again before a fused activation that takes
#: one tensor (Megatron-Core's weighted_bias_quick_geglu_impl).
GLU_CLAMPS: tuple[str, ...] = ("fused", "separate", "concatenated")

_FIT = ("fitted across a family of measured kernels (tools/fit_grouped_gemm.py): the 34 torch._grouped_mm timings "
        "at 128-4096 rows an expert of tests/data/h200/h200_grouped.json (../shared/measurements/h200/h200.json "
        "'grouped', 16 experts, Qwen3-30B-A3B 2048->1536 and 768->2048, gpt-oss 2880->5760 and 2880->2880, "
        "DeepSeek-V3 7168->4096 and 2048->7168, one H200, PyTorch 2.11), priced at the part's GEMM rate and HBM "
        "bandwidth (the H200's: MSMF 708.5 TFLOP/s, a 4.2 TB/s copy) with each shape's tiles as pytorch/pytorch aten/src/ATen/native/cuda/GroupMM.cu dispatches them "
        "on sm90 (128x256 tiles, 64x128 when an expert has <= 128 rows or columns) and whole waves over the SMs: "
        "mean error 7.5%, worst 23%; checked against deepseek-ai/DeepGEMM@55ab91f README.md's H800 fp8 grouped "
        "GEMM table (tests/test_seconds_grouped_gemm.py)")

#: Default values of the figures (today's Megatron-Core as NVIDIA's recipes configure it, on an H100-class host).
MOE_KERNEL_DEFAULTS: Mapping[str, object] = MappingProxyType({
    "grouped_gemm_tile_overhead": 60.0,
    "grouped_gemm_exposed": 0.35,
    "grouped_gemm_impl": "multi_stream",
    "launch_overhead": 9.58e-6,
    "graph_kernel_overhead": 0.84e-6,
    "moe_permute": "fused",
    "moe_router_fusion": True,
    "moe_aux_loss": True,
    "scatter_add_rate": 1.0e11,
    "expert_bias": "down_split",
    "glu_clamp": "concatenated",
})

_LAUNCH = ("../shared/measurements/h200/launch.json (tests/data/h200/launch.json): 20,000 one-element in-place adds "
           "from eager PyTorch 2.11 on the H200 machine's host, synchronised at the end: 9.58 us a launch")
#: A Grace host launches slower than an x86 one: the same PyTorch op (a bf16 Linear forward, hidden 2048, 8192
#: tokens) takes 37.08 us of CPU time on GB200's Grace and 13.48 us on an H100 DGX's Xeon Platinum 8480C, measured by
#: one script (NVIDIA/TransformerEngine issue 2053, "High CPU overhead on Grace systems", 2025-08-11; GH200's Grace:
#: 33.17 us). GB200 and GB300 NVL72 price an eager launch at the H200 host's 9.58 us times that ratio.
GRACE_HOST_FACTOR = 37.08 / 13.48
GRACE_LAUNCH_SOURCE = ("the H200 machine's eager launch (9.58 us, launch.json) x 37.08 / 13.48, a PyTorch Linear "
                       "forward's CPU time on GB200's Grace over an H100 DGX's Xeon Platinum 8480C by the same script "
                       "(NVIDIA/TransformerEngine issue 2053, 'High CPU overhead on Grace systems'): 26.4 us")
_GRAPH = ("../shared/measurements/h200/launch.json (tests/data/h200/launch.json): the same kernels captured in a "
          "CUDA graph of 1,000 and replayed: 0.84 us a kernel")

#: Where each default comes from.
MOE_KERNEL_SOURCES: Mapping[str, str] = MappingProxyType({
    "grouped_gemm_tile_overhead": "60 elements of a tile's inner dimension: a tile's prologue and epilogue, "
                                  "not hidden under a short main loop; " + _FIT,
    "grouped_gemm_exposed": "0.35 of the shorter of a grouped GEMM's compute and its weight stream left exposed "
                            "(a few hundred rows an expert: the weights' bytes rival the FLOPs); " + _FIT,
    "grouped_gemm_impl": "default 'multi_stream': Megatron-Core's GroupedMLP / TEGroupedMLP run Transformer Engine's "
                    "GroupedLinear, which on Hopper launches one cuBLAS GEMM per local expert over 4 streams "
                    "(NVIDIA/TransformerEngine transformer_engine/common/gemm/cublaslt_gemm.cu "
                    "nvte_multi_stream_cublas_gemm; common/include/transformer_engine/multi_stream.h num_streams = 4)",
    "launch_overhead": _LAUNCH + "; an assumption for other hosts",
    "graph_kernel_overhead": _GRAPH + "; an assumption for other hosts",
    "moe_permute": "default 'fused': NVIDIA's Megatron-Bridge MoE recipes set moe_permute_fusion true "
                   "(data/validation/h100_run_facts.yaml 'moe_permute_fusion', qwen_provider.py:L375, "
                   "deepseek_v3.py:L109): Transformer Engine's moe_permute / moe_unpermute kernels",
    "moe_router_fusion": "default True: the same recipes set moe_router_fusion true (h100_run_facts.yaml "
                         "'moe_router'): Transformer Engine's fused top-k router and aux-loss kernels "
                         "(Megatron-Core transformer_config.py moe_router_fusion, TE >= 2.7)",
    "moe_aux_loss": "default True: Megatron-Core's moe_router_load_balancing_type defaults to 'aux_loss'; the "
                    "Qwen3 recipes keep it at coefficient 1e-3 (h100_run_facts.yaml 'moe_router')",
    "expert_bias": "default 'down_split': Megatron-Core's TEGroupedMLP "
                   "(NVIDIA/Megatron-LM@0fcbc3db89c448a52c0ad6e17b882ebada1d8782, branch 26.04-alpha, "
                   "megatron/core/transformer/moe/experts.py) builds linear_fc1 with skip_bias_add False (the gate-up "
                   "bias in Transformer Engine's GEMM epilogue) and linear_fc2 with skip_bias_add True, whose bias "
                   "_apply_bias (L755-772) adds expert by expert: torch.split of the output by the token counts, "
                   "t + b * p with the fp32 routing probabilities, torch.cat, .to(dtype)",
    "glu_clamp": "default 'concatenated': Megatron-Core's TEGroupedMLP with bias_activation_fusion (set by "
                 "Megatron-Bridge's gpt_oss_bridge.py, with activation_func_clamp_value 7.0 and glu_linear_offset 1.0) "
                 "runs fused_bias_geglu.py weighted_bias_quick_geglu_impl (NVIDIA/Megatron-LM@0fcbc3db89c4, branch "
                 "26.04-alpha, L410-442): input.chunk(2, -1), clamp of each half, torch.cat, then a "
                 "torch.tensor(linear_offset, device=...) copied to the device, before the jit-fused "
                 "WeightedQuickGeGLUFunction; the clamps' backward is PyTorch's clamp_backward "
                 "(torch/csrc/autograd/FunctionsManual.cpp: a comparison or two, logical_and_, where against a "
                 "scalar_tensor zero) and the chunk's gradient a torch.cat",
    "scatter_add_rate": "16-bit atomic adds a second of an index_add_ / scatter_add_ into a token-major target, "
                        "fitted across a family of measured blocks (tools/fit_scatter_add.py): the five device-bound "
                        "expert blocks of tests/data/h200/moe.json (../shared/measurements/h200/moe.json, one H200, "
                        "PyTorch 2.11), whose whole block runs two such scatter-adds (the un-permutation and the "
                        "gather's backward) beyond its GEMM block; an assumption for other parts",
})

#: Megatron-Core as NVIDIA's recipes configure it: the "megatron-te" and "nemo" presets. (Megatron-LM's own
#: argument defaults leave both fusions off -- transformer_config.py moe_permute_fusion / moe_router_fusion
#: False --: state them with moe_permute="unfused", moe_router_fusion=False.)
MCORE_MOE: Mapping[str, object] = MappingProxyType({
    name: MOE_KERNEL_DEFAULTS[name] for name in ("grouped_gemm_impl", "moe_permute", "moe_router_fusion",
                                                 "moe_aux_loss", "expert_bias", "glu_clamp")})
MCORE_MOE_SOURCES: Mapping[str, str] = MappingProxyType({name: MOE_KERNEL_SOURCES[name] for name in MCORE_MOE})

#: torchtitan's MoE (torchtitan/models/moe): the torchtitan presets.
TORCHTITAN_MOE: Mapping[str, object] = MappingProxyType({
    "grouped_gemm_impl": "cutlass", "moe_permute": "sort", "moe_router_fusion": False, "moe_aux_loss": False,
    "expert_bias": "gathered", "glu_clamp": "separate",
})
TORCHTITAN_MOE_SOURCES: Mapping[str, str] = MappingProxyType({
    "grouped_gemm_impl": "pytorch/torchtitan torchtitan/models/moe: GroupedExperts run torch._grouped_mm (one CUTLASS "
                    "grouped kernel a call, after a setup kernel: pytorch/pytorch aten/src/ATen/native/cuda/"
                    "GroupMM.cu prepare_grouped_gemm_data)",
    "moe_permute": "pytorch/torchtitan torchtitan/models/moe: the chosen experts argsort-ed, tokens per expert "
                   "by histogram, the tokens gathered by index and scattered back with scatter_add",
    "moe_router_fusion": "pytorch/torchtitan torchtitan/models/moe TokenChoiceTopKRouter: softmax or sigmoid, "
                         "top-k and the score renormalisation as PyTorch ops",
    "expert_bias": "pytorch/torchtitan@02694955e16accd7c3d7dd03d35d101b9749b79b torchtitan/models/gpt_oss/moe.py "
                   "GptOssGroupedExperts.forward: each expert bias repeat_interleave-d to the rows (output_size "
                   "given: no host sync) and added after its grouped GEMM, gate-up and down alike",
    "glu_clamp": "pytorch/torchtitan@b5bcd76c66d0 torchtitan/models/gpt_oss/moe.py swiglu: the two halves clamped as "
                 "eager PyTorch ops before the activation (fused by torch.compile where the stack compiles; its "
                 "halves are strided views, whose gradients cost more than a chunk's: not priced)",
    "moe_aux_loss": "pytorch/torchtitan torchtitan/models/moe: load balancing by the aux-loss-free expert bias "
                    "(load_balance_coeff), updated from the token counts once a step: no aux-loss kernels",
})
