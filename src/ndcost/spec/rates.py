"""Achievable rates of a device: the share of each datasheet peak that real kernels reach.

A :class:`~ndcost.spec.device.Device` states peaks (dense FLOP/s per dtype, HBM and link bandwidths);
seconds mode prices work at what is *achievable*: a large GEMM reaches ``matmul_efficiency`` of
the dense peak, a flash-attention kernel ``attention_efficiency``, a streaming kernel
``hbm_efficiency`` of the HBM bandwidth, NCCL ``intra_node_efficiency`` / ``inter_node_efficiency``
of the link rates, and every kernel costs ``kernel_overhead`` seconds on top (launch, ramp-up and
tail). Compute-bound kernels run at the clock a power-saturated part settles at in a training step
(MSMF, the sustained matmul rate, where one is published), not the boost clock of a short burst. Small
GEMMs are slower through that fixed cost: the effective efficiency of a compute-bound
GEMM of F FLOPs is ``matmul_efficiency · F / (F + F½)`` with ``F½ = matmul_efficiency · peak ·
kernel_overhead`` (see ``ndcost.kernels.seconds``).

:data:`DEFAULT_RATES` holds one :class:`Rates` per catalog device, every figure with its source.
None is fitted to the published runs seconds mode is checked against
(``ndcost.io.validation``). Everything is overridable: ``Rates.for_device("a100-80g").replace(...)``
or a hand-built ``Rates``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import SpecError
from .all_to_all_rates import with_all_to_all
from .fp8_recipes import FP8_BACKWARD_CASTS, FP8_RECIPES, FP8_SPLIT_CASTS
from .attention_rates import CUDNN_SDPA_SOURCE, CUDNN_SDPA_TOKENS, attention_burst_share, with_attention_shape
from .gemm_part_ratios import GB300_GEMM_SOURCE, GB300_OVER_GB200
from .straggler import BLACKWELL_BUSY, HOPPER_BUSY, NO_BUSY_SOURCE as _NO_BUSY, with_busy_node as _busy
from .moe_kernels import (
    GRACE_HOST_FACTOR, GRACE_LAUNCH_SOURCE, MOE_KERNEL_DEFAULTS, MOE_KERNEL_SOURCES,
)
from .rope_scaling import ROPE_SCALE_DEFAULT
from .deepep_rates import (
    DEEPEP_CALL_OVERHEAD, DEEPEP_INTRANODE_EFFICIENCY, DEEPEP_NVLINK_EFFICIENCY, DEEPEP_SOURCES, DEEPEP_TOKEN_OVERHEAD,
)
from .software_sources import TODAY_SOFTWARE_SOURCES
from .rates_checks import ATTENTION_KERNELS, ELEMENTWISE, check_rates

__all__ = ["Rates", "DEFAULT_RATES", "GENERIC_RATES", "GEMM_TILE_OUTPUTS", "SOFTWARE_PRESETS", "FP8_RECIPES",
           "FP8_BACKWARD_CASTS", "FP8_SPLIT_CASTS", "DEEPEP_NVLINK_EFFICIENCY", "ATTENTION_KERNELS", "ELEMENTWISE"]

_OWNER = "Rates"

#: Outputs of one GEMM tile: 256 x 128, the tile of NVIDIA's wave-quantization example on A100
#: (Matrix Multiplication Background User's Guide §3.2; cuBLAS's large fp16 tiles, §2.3).
GEMM_TILE_OUTPUTS = 256 * 128


# ---------------------------------------------------------------------------- sources

_GA100 = "NVIDIA A100 Tensor Core GPU Architecture whitepaper: the A100 enables 108 SMs"
_GH100 = "NVIDIA H100 Tensor Core GPU Architecture whitepaper: H100 SXM5 has 132 SMs"
_GB200 = ("Chips and Cheese, 'Nvidia's B200: Keeping the CUDA Juggernaut Rolling': 74 SMs enabled per die, "
          "148 SMs across the GPU")
_MAMF = ("stas00/ml-engineering, compute/accelerator/README.md, 'Maximum Achievable Matmul FLOPS "
         "comparison table' (mamf-finder.py, mean of 100 iterations, best shape)")
_AIC = ("ai-dynamo/aiconfigurator (NVIDIA), systems/a100_sxm.yaml and h800_sxm.yaml: "
        "mem_bw_empirical_scaling_factor 0.8, mem_empirical_constant_latency 3 us")
_CALCULON = ("calculon-ai/calculon systems/a100_80g.json: matrix gflops_efficiency 0.6 at 1 GFLOP and "
             "0.9 at 16 GFLOP (of 0.95): F_half 0.6-0.9 GFLOP, vs 0.869 x 312e12 x 3e-6 = 0.81 GFLOP here")
_NCCL_NVLINK = ("NVIDIA/nccl-tests issue #212 (NCCL maintainer sjeaugey): 'With the protocol overhead (~20%) "
                "NCCL can get an effective NVLink bandwidth of 370GB/s' of the 450 GB/s line rate on H100")
_NCCL_NET = ("calculon-ai/calculon systems/a100_80g.json networks[1].efficiency 0.9 (InfiniBand); "
             "NVIDIA/nccl-tests issue #119: all-reduce bus bandwidth 84.8 GB/s average, 96 GB/s peak "
             "of 100 GB/s on 4x HDR per 8 A100")
_FA2 = ("Dao 2023, FlashAttention-2 (arXiv 2307.08691), abstract: 'reaching 50-73% of the theoretical "
        "maximum FLOPs/s on A100' (forward + backward): the midpoint 0.615")
_FA3 = ("Shah et al. 2024, FlashAttention-3 (arXiv 2407.08608): FlashAttention-2 'achieves only 35% "
        "utilization on H100', FlashAttention-3 'up to 740 TFLOPs/s (75% utilization)' in BF16: the "
        "midpoint 0.55")


@dataclass(frozen=True)
class Rates:
    """Achievable shares of a device's peaks, and the fixed cost of a kernel.

    Attributes:
        matmul_efficiency: Share of the dense 16-bit peak a large GEMM sustains in a training step:
            MSMF / peak (the power-saturated, settled-clock rate) where a part's is measured, else
            MAMF / peak (the boost-clock burst).
        attention_efficiency: Share of the 16-bit peak a flash-attention kernel reaches, forward
            and backward together, on the FLOPs it runs (causal: half the score matrix).
        attention_head64_share: Share of that rate a flash kernel reaches at head dim 64 (measured at 128);
            other head dims under 128 by the law of ``ndcost.kernels.window_attention``; 1: not applied.
        fa2_attention_head64_share: The same for FlashAttention-2 where the software runs it (``attention_kernel``
            "fa2"); None: ``attention_head64_share``.
        attention_reference_tokens: The causal sequence lengths ``attention_efficiency`` was measured at (its
            rate their mean): a layer of another length is priced at its tile efficiency against theirs
            (``ndcost.kernels.window_attention``); empty: the rate holds at every length.
        hbm_efficiency: Share of the HBM bandwidth a streaming (elementwise) kernel reaches.
        kernel_overhead: Seconds each kernel costs beyond its roofline time (launch, ramp, tail).
        intra_node_efficiency: Share of the scale-up link rate NCCL reaches (bus bandwidth); ``all_to_all_efficiency``
            the same for an all-to-all (measured: :mod:`~ndcost.spec.all_to_all_rates`; None: the former).
        inter_node_efficiency: Share of the scale-out NIC rate NCCL reaches.
        sm_count: Compute units that each run one GEMM tile at a time (NVIDIA SMs): with
            :data:`GEMM_TILE_OUTPUTS` it sets how many outputs one wave of tiles covers.
        fp8_matmul_efficiency: Share of the dense fp8 peak a large fp8 GEMM reaches; None where
            the part has no fp8 tensor cores (or no measurement: then ``matmul_efficiency``).
        zero3_fetch_bandwidth: Bytes/s per device at which the training framework's ZeRO-3
            parameter fetch delivers gathered parameters, when slower than NCCL's all-gather;
            0 (default): NCCL's rate. A software figure, set by :meth:`for_software`.
        zero3_recompute_gather: The framework releases ZeRO-3 parameters after every use, so a
            recompute forward gathers them again (default False: FSDP recomputes under the
            backward's own gather).
        zero3_grad_all_reduce: ZeRO-3 reduces gradients with an all-reduce rather than a
            reduce-scatter (default False).
        grad_reduce_bytes: Bytes per gradient element the data-parallel reduction moves, where the
            framework reduces in another width than it holds the gradients in; 0 (default): the held
            width (``ExecSpec.grad_bytes``). FSDP2 under ``MixedPrecisionPolicy(reduce_dtype=float32)``
            over bf16 gradients (NeMo AutoModel's parallelizer) upcasts them for the reduce-scatter: 4.
        grad_accumulation_fusion: The weight-gradient GEMM accumulates into the main gradient
            (default True, Megatron's ``--gradient-accumulation-fusion``); False: a separate kernel
            adds a 16-bit gradient into it every micro-batch.
        gemm_wave_tail: Waves of tiles a GEMM leaves idle on average beyond its work (wave
            quantization): NVIDIA's guide's worst case is half a wave (0.5); the default rates carry
            what the device's cuBLAS leaves, fitted to its public GEMM measurements by shape.
        fa2_attention_efficiency: Share of the 16-bit peak FlashAttention-2 reaches on the part
            (what PyTorch's SDPA runs); None: ``attention_efficiency``.
        attention_kernel: "best" (the part's best fused attention: ``attention_efficiency``) or
            "fa2" (FlashAttention-2, ``fa2_attention_efficiency``). Software.
        fp8_recipe: How fp8 GEMM inputs are scaled and cast (:data:`FP8_RECIPES`): "delayed"
            (Transformer Engine's DelayedScaling), "current" (TE's per-tensor current scaling),
            "blockwise" (DeepSeek-V3's 1x128 / 128x128 blocks), "torchao" (torchao Float8Linear,
            tensorwise dynamic, weights cast every forward). Software.
        elementwise: "fused" (Megatron/TE fused kernels, or ``torch.compile``) or "eager" (one
            PyTorch op per kernel: RMSNorm, RoPE and SwiGLU unfused). Software.
        attention_copies: The model code copies K/V per query head (GQA's repeat_kv) and the
            attention output back to its layout (torchtitan's Llama). Software.
        tp_overlap_splits: With TP comm overlap, the chunks a GEMM before a reduce-scatter runs in
            (Transformer Engine userbuffers' "pipeline" method, num_splits). Software.
        tp_overlap_sms: With TP comm overlap, SMs the pipelined reduce-scatter kernels hold while
            that GEMM runs (userbuffers num_sm). Software.
        collective_overlap_slowdown: How much longer compute takes while an NCCL collective runs beside it
            (0.189: 1.189x as long): the data-parallel traffic hidden under the backward and forward, the
            context-parallel ring under the attention core, NCCL's all-to-all beside another micro-batch's
            compute. Software.
        grouped_gemm_tile_overhead: A grouped GEMM tile's fixed cost, in elements of its inner dimension
            (the routed experts' GEMMs: ``ndcost.kernels.seconds_moe``).
        grouped_gemm_exposed: Share of the shorter of a grouped GEMM's compute and weight-stream times
            that is not hidden under the longer.
        grouped_gemm_impl: "cutlass" (one grouped kernel a call) or "multi_stream" (a cuBLAS GEMM per local
            expert): how many kernels the host launches. Software.
        launch_overhead: Host seconds to launch one kernel eagerly; a layer's pass takes at least its
            kernels' launches.
        graph_kernel_overhead: Seconds per kernel replayed from a CUDA graph (ExecSpec.cuda_graphs).
        moe_permute: How tokens are permuted to their experts and back: "fused", "unfused" (PyTorch ops
            on a dense routing map) or "sort" (an argsort, an index gather, a scatter-add). Software.
        moe_router_fusion: The router's score, top-k and aux loss run as one fused kernel. Software.
        moe_aux_loss: A load-balancing auxiliary loss is computed from the routing. Software.
        expert_bias: How the routed experts' biases are added, for a model whose experts carry them
            (:data:`~ndcost.spec.moe_kernels.EXPERT_BIASES`): "epilogue", "down_split", "split" or "gathered".
            Software.
        glu_clamp: How the experts' GLU halves are clamped, for a model that clamps them (gpt-oss's swiglu_limit;
            :data:`~ndcost.spec.moe_kernels.GLU_CLAMPS`): "fused", "separate" or "concatenated". Software.
        rope_scale: How a RoPE attention factor other than 1 (Model.rope_attention_factor, YaRN's) is applied, where
            the elementwise ops are fused (:data:`~ndcost.spec.rope_scaling.ROPE_SCALES`): "fused" (inside the
            kernel or on the cos / sin tables: no extra pass) or "unfused" (Megatron-Core's PyTorch fallback).
            Software.
        scatter_add_rate: 16-bit elements a second that an atomic scatter-add (index_add_, scatter_add_)
            adds into its targets: the unfused and sort permutations' scatter-adds (0: not priced).
        deepep_nvlink_efficiency: Share of the scale-up link rate DeepEP's normal dispatch and combine
            kernels reach as DeepEP publishes it, counted as DeepEP counts it: the bytes a rank receives from its
            node, its own share included (:data:`DEEPEP_NVLINK_EFFICIENCY`); the NVLink stage of a call across
            nodes. Software.
        deepep_intranode_efficiency, deepep_call_overhead, deepep_token_overhead: A DeepEP call inside a node: the
            share of the link its bytes reach, the seconds the call costs beside them, and the seconds each token
            the rank sends adds (``ndcost.spec.deepep_rates``). Software.
        busy_clock_share, clock_sigma: A busy node's mean sustained rate over one GPU's alone, and the standard
            deviation of its GPUs' rates (a share of the mean): a job of N > 1 GPUs runs its compute-bound kernels
            at the slowest one's, ``ndcost.spec.straggler.job_clock_share`` (1 and 0: no measurement, none).
        sources: Figure name -> where its value comes from; read-only.

    The last four describe the training software, not the silicon; the defaults are today's
    Megatron-LM / FSDP. :data:`SOFTWARE_PRESETS` holds sourced older generations.
    """

    matmul_efficiency: float
    attention_efficiency: float
    hbm_efficiency: float
    kernel_overhead: float
    intra_node_efficiency: float
    inter_node_efficiency: float
    sm_count: int
    fp8_matmul_efficiency: float | None = None
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    zero3_fetch_bandwidth: float = 0.0
    zero3_recompute_gather: bool = False
    zero3_grad_all_reduce: bool = False
    grad_reduce_bytes: int = 0
    grad_accumulation_fusion: bool = True
    gemm_wave_tail: float = 0.5
    fa2_attention_efficiency: float | None = None
    all_to_all_efficiency: float | None = None
    attention_kernel: str = "best"
    fp8_recipe: str = "delayed"
    elementwise: str = "fused"
    attention_copies: bool = False
    tp_overlap_splits: int = 4
    tp_overlap_sms: float = 22.0
    collective_overlap_slowdown: float = 0.189
    grouped_gemm_tile_overhead: float = MOE_KERNEL_DEFAULTS["grouped_gemm_tile_overhead"]
    grouped_gemm_exposed: float = MOE_KERNEL_DEFAULTS["grouped_gemm_exposed"]
    grouped_gemm_impl: str = MOE_KERNEL_DEFAULTS["grouped_gemm_impl"]
    launch_overhead: float = MOE_KERNEL_DEFAULTS["launch_overhead"]
    graph_kernel_overhead: float = MOE_KERNEL_DEFAULTS["graph_kernel_overhead"]
    moe_permute: str = MOE_KERNEL_DEFAULTS["moe_permute"]
    moe_router_fusion: bool = MOE_KERNEL_DEFAULTS["moe_router_fusion"]
    moe_aux_loss: bool = MOE_KERNEL_DEFAULTS["moe_aux_loss"]
    scatter_add_rate: float = MOE_KERNEL_DEFAULTS["scatter_add_rate"]
    expert_bias: str = MOE_KERNEL_DEFAULTS["expert_bias"]
    glu_clamp: str = MOE_KERNEL_DEFAULTS["glu_clamp"]
    rope_scale: str = ROPE_SCALE_DEFAULT
    deepep_nvlink_efficiency: float = DEEPEP_NVLINK_EFFICIENCY
    deepep_intranode_efficiency: float = DEEPEP_INTRANODE_EFFICIENCY
    deepep_call_overhead: float = DEEPEP_CALL_OVERHEAD
    deepep_token_overhead: float = DEEPEP_TOKEN_OVERHEAD
    busy_clock_share: float = 1.0
    clock_sigma: float = 0.0
    attention_head64_share: float = 1.0
    fa2_attention_head64_share: float | None = None
    attention_reference_tokens: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        check_rates(self)   # each field's rule, and the canonical float / mapping forms (ndcost.spec.rates_checks)

    def __hash__(self) -> int:
        # Hashed on every seconds estimate (the rates vector's cache key): computed once, the
        # fields being frozen.
        known = self.__dict__.get("_hash")
        if known is None:
            known = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "sources"))
            object.__setattr__(self, "_hash", known)
        return known

    def __reduce__(self):
        state = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        state["sources"] = dict(self.sources)
        return (_rebuild, (state,))

    def replace(self, **changes: Any) -> Rates:
        """A copy with *changes*; each changed figure's source becomes ``"override"``."""
        sources = dict(self.sources)
        for name in changes:
            if name != "sources":
                sources[name] = "override"
        changes.setdefault("sources", sources)
        return dataclasses.replace(self, **changes)

    def matmul_share(self, precision: str) -> float:
        """The matmul efficiency of *precision* ("fp8" reads ``fp8_matmul_efficiency`` when stated)."""
        if precision == "fp8" and self.fp8_matmul_efficiency is not None:
            return self.fp8_matmul_efficiency
        return self.matmul_efficiency

    def attention_share(self) -> float:
        """The attention kernel's share of the 16-bit peak: FlashAttention-2's where the software
        runs it and the part states it, else the part's best kernel's."""
        if self.attention_kernel == "fa2" and self.fa2_attention_efficiency is not None:
            return self.fa2_attention_efficiency
        return self.attention_efficiency

    def head64_share(self) -> float:
        """The attention kernel's share of its head-dim-128 rate at head dim 64: FlashAttention-2's where the software
        runs it and the part states it, else the part's best kernel's."""
        if self.attention_kernel == "fa2" and self.fa2_attention_head64_share is not None:
            return self.fa2_attention_head64_share
        return self.attention_head64_share

    def all_to_all_share(self) -> float:
        """The share of the scale-up link an NCCL all-to-all reaches: the part's measured one, else
        ``intra_node_efficiency``."""
        return self.intra_node_efficiency if self.all_to_all_efficiency is None else self.all_to_all_efficiency

    def fp8_cast(self) -> tuple[float, float, float]:
        """(bytes per element, kernels, weights cast every micro-batch) of one fp8 cast under
        ``fp8_recipe`` and ``elementwise`` (:data:`FP8_RECIPES`)."""
        moved, kernels, every = FP8_RECIPES[self.fp8_recipe][self.elementwise == "eager"]
        return moved, kernels, every

    def fp8_backward_casts(self) -> tuple[float, float, float, float]:
        """(bytes per element and kernels of an output gradient's cast, of a cached input's re-quantization) in
        the backward under ``fp8_recipe`` and ``elementwise`` (:data:`FP8_BACKWARD_CASTS`)."""
        return FP8_BACKWARD_CASTS[self.fp8_recipe][self.elementwise == "eager"]

    def fp8_split_casts(self) -> bool:
        """Whether a GEMM per expert (``grouped_gemm_impl`` "multi_stream") casts each expert's rows to fp8 by
        its own kernels under ``fp8_recipe`` (:data:`FP8_SPLIT_CASTS`)."""
        return self.fp8_recipe in FP8_SPLIT_CASTS

    @classmethod
    def for_software(cls, device: Any, software: str) -> Rates:
        """The default rates of *device* with the training-software figures of *software*, a
        :data:`SOFTWARE_PRESETS` name (each figure's source recorded)."""
        if software not in SOFTWARE_PRESETS:
            from ..suggest import did_you_mean

            rule = f"be one of {', '.join(map(repr, SOFTWARE_PRESETS))}{did_you_mean(software, SOFTWARE_PRESETS)}"
            raise SpecError("software", _OWNER, rule, software)
        base = cls.for_device(device)
        figures, cited = SOFTWARE_PRESETS[software]
        sources = dict(base.sources)
        sources.update({name: cited[name] for name in figures})
        return dataclasses.replace(base, sources=sources, **figures)

    @classmethod
    def for_device(cls, device: Any) -> Rates:
        """The default rates of a catalog device (a name, a Device or a Cluster); :data:`GENERIC_RATES`
        for a part the catalog does not know."""
        name = getattr(getattr(device, "device", device), "name", device)
        return DEFAULT_RATES.get(name, GENERIC_RATES)


def _rebuild(state: dict) -> Rates:
    return Rates(**state)


_GUIDE_TAIL = ("NVIDIA Matrix Multiplication Background User's Guide §3.2 (wave quantization): a shape not chosen to "
               "fill the last wave leaves on average half of it idle; no measurement by shape for this part")
_FA2_H100 = ("Shah et al. 2024, FlashAttention-3 (arXiv 2407.08608), abstract: 'FlashAttention-2 achieving only 35% "
             "utilization on H100'")


def _rates(matmul: float, matmul_source: str, attention: float, attention_source: str,
           sms: int, sms_source: str, fp8: float | None = None, fp8_source: str | None = None, *,
           assumed: str = "", wave_tail: tuple[float, str] = (0.5, ""),
           fa2: tuple[float | None, str] = (None, "")) -> Rates:
    """NVIDIA-style defaults: HBM, kernel and NCCL shares as sourced above; *wave_tail* and *fa2*
    are (value, source)."""
    sources = {
        "sm_count": sms_source,
        "matmul_efficiency": matmul_source,
        "attention_efficiency": attention_source,
        "hbm_efficiency": _AIC + assumed,
        "kernel_overhead": f"{_AIC}; consistent with {_CALCULON}" + assumed,
        "intra_node_efficiency": _NCCL_NVLINK + assumed,
        "inter_node_efficiency": _NCCL_NET + assumed,
        "deepep_nvlink_efficiency": DEEPEP_SOURCES["deepep_nvlink_efficiency"] + assumed,
        "deepep_call_overhead": DEEPEP_SOURCES["deepep_call_overhead"] + assumed,
        "deepep_token_overhead": DEEPEP_SOURCES["deepep_token_overhead"] + assumed,
        "deepep_intranode_efficiency": DEEPEP_SOURCES["deepep_intranode_efficiency"] + assumed,
        "all_to_all_efficiency": "None: no measured NCCL all-to-all of this part; intra_node_efficiency's share",
    }
    sources.update(TODAY_SOFTWARE_SOURCES)
    sources.update(MOE_KERNEL_SOURCES)
    sources["busy_clock_share"] = sources["clock_sigma"] = _NO_BUSY
    sources["gemm_wave_tail"] = wave_tail[1] or _GUIDE_TAIL
    sources["attention_reference_tokens"] = ("none: the attention rate is not a measurement at stated lengths; "
                                            "it holds at every length")
    sources["attention_head64_share"] = ("no measurement of this part at head dim 64: 1, every head dim at the "
                                        "head-dim-128 rate")
    if fa2[0] is not None:
        sources["fa2_attention_efficiency"] = fa2[1]
    if fp8 is not None:
        sources["fp8_matmul_efficiency"] = fp8_source
    return Rates(matmul_efficiency=matmul, attention_efficiency=attention, hbm_efficiency=0.8,
                 kernel_overhead=3e-6, intra_node_efficiency=0.8, inter_node_efficiency=0.9,
                 sm_count=sms, fp8_matmul_efficiency=fp8, sources=sources, gemm_wave_tail=wave_tail[0],
                 fa2_attention_efficiency=fa2[0], deepep_nvlink_efficiency=DEEPEP_NVLINK_EFFICIENCY)


#: Sustained GEMM rates. A GEMM that fills the SMs draws the part's full power and runs at the
#: settled clock, not the boost clock the datasheet peak and MAMF (a short burst) are measured at:
#: MSMF, the "Maximum Sustainable Matmul FLOPS", is "the number that matches sustained training
#: throughput". Measured beside MAMF on the same node and software: H200 SXM bf16 708.5 (MAMF 841.9,
#: ~693 W @ 1465 MHz against 1980), fp8 1288.7 (1491.9); B200 SXM bf16 1456.3 (1770.9, ~994 W @ 1339 MHz
#: against 1965), fp8 2795.7 (3435.2).
_MSMF = ("stas00/ml-engineering, branch fast-mamf (merge 996698d, 2026-08-15), compute/accelerator/README.md "
         "'Maximum Achievable Matmul FLOPS comparison table': MSMF (Maximum Sustainable Matmul FLOPS, a "
         "power-saturated GPU at its settled clock, 'the number that matches sustained training throughput') "
         "beside MAMF (the boost-clock burst), torch 2.13.0+cu130, one GPU with idle siblings")
#: The H200's sustained share of its burst, bf16 and fp8: the H100 and H800 are the same GH100 silicon
#: at the same 700 W, and no MSMF of theirs is published.
_HOPPER_SUSTAINED = (708.5 / 841.9, 1288.7 / 1491.9)
#: The B200's, for the GB200 and GB300 (the same Blackwell GPUs; no MSMF of theirs is published).
_BLACKWELL_SUSTAINED = (1456.3 / 1770.9, 2795.7 / 3435.2)
_MEASURED_TAIL = ("{guide}. Measured (ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/systems/data/{part}/"
                  "gemm/trtllm/{version}/gemm_perf.parquet: bf16 GEMM latencies by (m, n, k)): a tail of {tail} "
                  "matches the median of {count} shapes (m >= 512, 1024 <= n, k <= 16384). With the GEMM rate "
                  "at the sustained clock (MSMF), the shape's own tail is what remains"
                  ).replace("{guide}", _GUIDE_TAIL.replace("; no measurement by shape for this part", ""))


def _sustained(mamf: float, peak: float, share: float, what: str) -> tuple[float, str]:
    """(efficiency, source) of a part whose sustained rate is its MAMF x a measured MSMF/MAMF *share*."""
    return (mamf * share / peak,
            f"{what} {mamf} of {peak:g} TFLOPS ({_MAMF}) x the sustained share {share:.4f} ({_MSMF})")


#: Attention kernels saturate the tensor cores as GEMMs do and run at the same settled clock: the
#: published flash-attention utilizations are benchmark bursts (FlashAttention-3 paper, Figs. 5-6),
#: so each part prices them at its bf16 sustained share of them.
_SETTLED = ("; a benchmark burst: x the part's bf16 sustained share {share:.4f} (the settled clock of a "
            "training step, " + "{part}" + " MSMF/MAMF, " + _MSMF + ")")
_HOPPER_FA3 = (0.55 * _HOPPER_SUSTAINED[0], _FA3 + _SETTLED.format(share=_HOPPER_SUSTAINED[0], part="the H200's"))
_HOPPER_FA2 = (0.35 * _HOPPER_SUSTAINED[0], _FA2_H100 + _SETTLED.format(share=_HOPPER_SUSTAINED[0], part="the H200's"))
_BLACKWELL_SETTLED = _SETTLED.format(share=_BLACKWELL_SUSTAINED[0], part="the B200's")
#: The A100 has no MSMF: its GEMMs at the clock it holds at its power limit under tensor-core GEMMs, 1305 of 1410
#: MHz, the clock NVIDIA states HPL's peak at -- an estimate (HPL's FP64 GEMMs set it, not a bf16 step's); its
#: GEMMs' measured wave tail with it, as the sustained parts'.
_A100_SUSTAINED = 1305.0 / 1410.0
_A100_CLOCK = ("; x the A100's clock at its power limit, 1305 of 1410 MHz (an estimate: glennklockwood.com/garden/"
               "peak-FLOPS: NVIDIA's HPL peak is taken at 'the clock that can be sustained at a GPU's power limit "
               "while running HPL (e.g., 1305 MHz for A100)'; no MSMF of the A100 is published)")


def _a100(note: str) -> Rates:
    return _rates(271.2 / 312.0 * _A100_SUSTAINED, f"{_MAMF}: NVIDIA A100 SXM 271.2 of 312 TFLOPS (86.9%), torch "
                  f"2.6.0+cu126{note}{_A100_CLOCK}", 0.615 * _A100_SUSTAINED, f"{_FA2}; a benchmark burst{_A100_CLOCK}",
                  108, _GA100, wave_tail=(0.25, _MEASURED_TAIL.format(part="a100_sxm", version="1.0.0", count=1176,
                                                                       tail=0.25) + note))


_A100, _A100_40 = _a100(""), _a100("; measured on the 80GB part: same GA100 silicon and clocks")
#: Blackwell bf16 matmul bursts (MAMF, TFLOP/s) and dense peaks of the B200 and the GB200.
_B200_MAMF, _GB200_MAMF, _B200_PEAK, _GB200_PEAK = 1770.9, 1822.0, 2250.0, 2500.0


def _measured_fa(rows: str, peak: float, note: str = "") -> tuple[float, str]:
    """(efficiency, source): cuDNN's *rows* (ndcost.spec.attention_rates) of *peak*, at the sustained share."""
    return (attention_burst_share(rows, peak) * _BLACKWELL_SUSTAINED[0],
            CUDNN_SDPA_SOURCE.replace("{part}", rows) + note + _BLACKWELL_SETTLED)


#: Blackwell's fused attention, measured: the GB200's and the GB300's own cuDNN rows; the B200 (the GB200's GPU at
#: 1000 W) at the GB200's rate scaled by the two parts' measured matmul bursts (attention saturates the tensor cores
#: as a GEMM does).
_GB200_FA, _GB300_FA = _measured_fa("gb200", _GB200_PEAK), _measured_fa("gb300", _GB200_PEAK)
_B200_FA = _measured_fa("gb200", _B200_PEAK * _GB200_MAMF / _B200_MAMF,
                        f", x the B200's MAMF over the GB200's ({_B200_MAMF} / {_GB200_MAMF}, {_MAMF})")
_H100_MM = _sustained(794.5, 989.0, _HOPPER_SUSTAINED[0], "NVIDIA H100 SXM MAMF")
_H100_F8 = _sustained(1402.6, 1979.0, _HOPPER_SUSTAINED[1], "NVIDIA H100 SXM FP8 MAMF")
_H100 = _rates(_H100_MM[0], _H100_MM[1] + "; the H200's bf16 MSMF/MAMF (same GH100, same 700 W)",
               *_HOPPER_FA3, 132, _GH100, _H100_F8[0], _H100_F8[1] + "; the H200's fp8 MSMF/MAMF",
               wave_tail=(0.10, _MEASURED_TAIL.format(part="h100_sxm", version="1.3.0rc20", count=6860, tail=0.10)),
               fa2=_HOPPER_FA2)
_H200 = _rates(708.5 / 989.0, f"{_MSMF}: NVIDIA H200 SXM MSMF 708.5 of 989 TFLOPS (71.6%)",
               *_HOPPER_FA3, 132, f"{_GH100} (the H200 is the same GH100 part with HBM3e)", 1288.7 / 1979.0,
               f"{_MSMF}: NVIDIA H200 SXM FP8 MSMF 1288.7 of 1979 TFLOPS (65.1%)",
               wave_tail=(0.05, _MEASURED_TAIL.format(part="h200_sxm", version="1.3.0rc20", count=6860, tail=0.05)),
               fa2=(_HOPPER_FA2[0], _HOPPER_FA2[1] + " (the H200 is the same GH100 part)"))
#: The H200's streaming bandwidth is measured: a 1 GiB device-to-device copy moves 4.2 TB/s (read + write)
#: of the 4.8 TB/s datasheet figure.
_H200 = dataclasses.replace(_H200, hbm_efficiency=4.2 / 4.8, sources={
    **_H200.sources, "hbm_efficiency": "../shared/measurements/h200/h200.json 'hbm' (tests/data/h200/h200_grouped.json): "
    "a 1 GiB device-to-device copy on one H200 SXM, 4.2 TB/s read + write of 4.8 TB/s"})
_H800 = _rates(_H100_MM[0], _H100_MM[1] + "; the H800 is the same SM90 silicon and HBM as the H100 (aiconfigurator "
               "systems/h800_sxm.yaml: compute 'identical to H100 SXM')", *_HOPPER_FA3, 132,
               f"{_GH100} (the H800 is the same SM90 part)", _H100_F8[0], _H100_F8[1] + "; the H800 is the same SM90 part",
               wave_tail=(0.10, _MEASURED_TAIL.format(part="h100_sxm", version="1.3.0rc20", count=6860, tail=0.10)
                          + "; the H800 is the same SM90 silicon"),
               fa2=(_HOPPER_FA2[0], _HOPPER_FA2[1] + " (the H800 is the same SM90 part)"))
_B200_TAIL = _MEASURED_TAIL.format(part="b200_sxm", version="1.3.0rc20", count=6860, tail=0.35)
_B200 = _rates(1456.3 / 2250.0, f"{_MSMF}: NVIDIA B200 SXM MSMF 1456.3 of 2250 TFLOPS (64.7%)",
               *_B200_FA, 148, _GB200, 2795.7 / 4500.0,
               f"{_MSMF}: NVIDIA B200 SXM FP8 MSMF 2795.7 of 4500 TFLOPS (62.1%)", wave_tail=(0.35, _B200_TAIL))
_NVL72_NOTE = (" [assumption for the NVL72 rack: no public measurement of this figure on the part; the figure "
               "measured on earlier NVIDIA parts is used, the NVLink share across the rack's NVLink Switch trays "
               "taken as inside an 8-GPU NVSwitch node]")
_GB200_MM = _sustained(_GB200_MAMF, _GB200_PEAK, _BLACKWELL_SUSTAINED[0], "NVIDIA GB200 SXM MAMF")
_GB200_F8 = _sustained(3615.6, 5000.0, _BLACKWELL_SUSTAINED[1], "NVIDIA GB200 SXM FP8 MAMF")
def _nvl72_rack(rates: Rates) -> Rates:
    """*rates* in a GB200 / GB300 NVL72 rack: a Grace host, whose eager launches are slower; liquid-cooled, where
    the B200 board whose busy-node spread was measured is air-cooled ("liquid-cooled nodes typically deliver higher
    sustained MAMF than air-cooled nodes with identical silicon", ndcost.spec.straggler's source): none carried."""
    sources = dict(rates.sources, launch_overhead=GRACE_LAUNCH_SOURCE)
    sources["busy_clock_share"] = sources["clock_sigma"] = _NO_BUSY + " (a liquid-cooled NVL72 rack)"
    return rates.replace(launch_overhead=rates.launch_overhead * GRACE_HOST_FACTOR, sources=sources)


_GB200_NVL72 = _rates(_GB200_MM[0], _GB200_MM[1] + "; the B200's bf16 MSMF/MAMF (the same Blackwell GPUs)",
                      *_GB200_FA, 148,
                      f"{_GB200}; the GB200 superchip carries two of the same B200 GPUs (stas00/ml-engineering "
                      "compute/accelerator/README.md, TFLOPS table note 23)", _GB200_F8[0],
                      _GB200_F8[1] + "; the B200's fp8 MSMF/MAMF", assumed=_NVL72_NOTE,
                      wave_tail=(0.35, "assumption: the B200's (the GB200 carries the same Blackwell GPUs); "
                                 + _B200_TAIL))
#: The GB300: no MAMF or MSMF of its own is published; the GB200's sustained rate times the GB300's measured GEMM
#: speed over the GB200's (ndcost.spec.gemm_part_ratios: one harness timing the same shapes on both parts).
def _gb300(gb200: tuple[float, str], dtype: str) -> tuple[float, str]:
    """(efficiency, source) of the GB300's *dtype* GEMMs: the GB200's *gb200* times the measured ratio."""
    ratio = GB300_OVER_GB200[dtype]
    return (gb200[0] * ratio, f"the GB200's ({gb200[1]}) x {ratio:.3f}, the GB300's {dtype} GEMMs over the GB200's "
                              f"({GB300_GEMM_SOURCE})")


_GB300_MM, _GB300_F8 = _gb300(_GB200_MM, "bf16"), _gb300(_GB200_F8, "fp8")
_GB300_NVL72 = _rates(_GB300_MM[0], _GB300_MM[1], *_GB300_FA, 160,
                      "NVIDIA Technical Blog, 'Inside NVIDIA Blackwell Ultra: The Chip Powering the AI Factory Era': "
                      "'160 Streaming Multiprocessors (SMs) across two dies'", _GB300_F8[0], _GB300_F8[1],
                      assumed=_NVL72_NOTE,
                      wave_tail=(0.35, "assumption: the B200's (no GEMM measurement by shape of the GB300); "
                                 + _B200_TAIL))
_ASCEND_NOTE = (" [assumption for Ascend: no public measurement found; the NVIDIA figure is used and HCCS/"
                "RoCE are taken to reach the same shares as NVLink/InfiniBand]")
_ASCEND = _rates(794.5 / 989.0, "assumption: no public MAMF measurement of Ascend; the median of the NVIDIA "
                 f"parts of {_MAMF} (A100 86.9%, H100 80.3%, B200 77.6%)", 0.55,
                 f"assumption: no public Ascend figure; the H100 one ({_FA3})", 132,
                 "assumption: Ascend's cube units tile GEMMs differently; the H100's 132 SMs", assumed=_ASCEND_NOTE)


_SAME_GH100 = (" (the same GH100 silicon; cross-checked against FlashAttention-3's H100 figures, "
               "tests/test_attention_head_dim.py)")
_H100, _H200, _H800 = (with_attention_shape(rates, "h200", _SAME_GH100) for rates in (_H100, _H200, _H800))
_B200 = with_attention_shape(_B200, "gb200", " (the GB200 carries the same Blackwell GPU)", CUDNN_SDPA_TOKENS)
_GB200_NVL72 = with_attention_shape(_GB200_NVL72, "gb200", "", CUDNN_SDPA_TOKENS)
_GB300_NVL72 = with_attention_shape(_GB300_NVL72, "gb300", "", CUDNN_SDPA_TOKENS)


#: Default rates per catalog device name (``ndcost.devices()``).
#: Each part's measured all-to-all share is added to it by name (``with_all_to_all``).
DEFAULT_RATES: Mapping[str, Rates] = MappingProxyType({name: with_all_to_all(name, rates) for name, rates in {
    "a100-40g": _A100_40,
    "a100-80g": _A100,
    "h100-sxm": _busy(_H100, HOPPER_BUSY),
    "h200": _busy(_H200, HOPPER_BUSY),
    "h800": _busy(_H800, HOPPER_BUSY),
    "b200": _busy(_B200, BLACKWELL_BUSY),
    "gb200-nvl72": _nvl72_rack(_GB200_NVL72),
    "gb300-nvl72": _nvl72_rack(_GB300_NVL72),
    "ascend-910b": _ASCEND,
    "ascend-910c": _ASCEND,
}.items()})

#: Rates of a part the catalog does not know: the H100's, marked as an assumption.
_H100_A2A = with_all_to_all("h100-sxm", _H100)     # the H100's figures, its measured all-to-all share included
GENERIC_RATES: Rates = _H100_A2A.replace(sources={
    name: f"assumption for an uncatalogued part: the H100 SXM figure ({text})"
    for name, text in _H100_A2A.sources.items()
})

# The training stacks' figures live in ndcost.spec.software_rates (imported last: it reads nothing of this
# module's, this module's Rates.for_software reads its table).
from .software_rates import SOFTWARE_PRESETS  # noqa: E402
