"""The strategy spec: how a model is split and run (:class:`ExecSpec`).

An :class:`ExecSpec` states every strategy field once, in Megatron-style
names (degrees, micro-batching, pipeline schedule and layout, recompute,
ZeRO/FSDP sharding, byte widths, kernels). It validates its own fields when
built (the rules are :mod:`ndcost.spec.exec_spec_rules`); what depends on the model or the cluster is checked by
:func:`ndcost.tables.joint_rules.validate`, and ND's derived values (sharding factors,
comm flags, ...) come from :func:`ndcost.tables.derive.derive`.

:meth:`ExecSpec.from_strategy` reads ND's keyword strategy
(``dp, mp, pp, mb, mbs, op, sp, ...``), with the semantics of the seed
``nd/common/apply_exec.py`` ``strategy_exec`` (docs/ND_MODEL.md §1.4; :mod:`ndcost.spec.nd_strategy`).
"""
from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import SpecError
from .exec_spec_rules import (
    BYTE_LIMITS, CHECKS, CP_ALGOS, CUDA_GRAPHS, DEGREE_LIMITS, EP_OVERLAPS, MOE_DISPATCHERS, PP_SCHEDULES, PRECISIONS,
    ZERO_STAGES, check_scalars, scalars_hold, states_per_stage,
)
from .nd_strategy import spec_from_strategy
from .recompute_spec import RecomputeRange, mask_from_switches, selective_keep_mask, switches_from_mask

__all__ = ["ExecSpec", "RecomputeRange", "PP_SCHEDULES", "CP_ALGOS", "MOE_DISPATCHERS", "EP_OVERLAPS", "CUDA_GRAPHS",
           "PRECISIONS", "ZERO_STAGES",
           "DEGREE_LIMITS", "BYTE_LIMITS"]

_OWNER = "ExecSpec"


@dataclass(frozen=True, init=False)
class ExecSpec:
    """Every field of a training strategy (the comments beside the fields say what each means).

    Degrees: ``dp * tp * pp * cp`` devices; ``ep`` and ``etp`` fold the
    experts over those (Megatron's expert grid). Batch: state
    ``global_batch_size`` or ``micro_batch_num`` (or both, in agreement);
    the other follows as ``global_batch_size = micro_batch_size * dp *
    micro_batch_num``.

    The spec is immutable: lists are stored as tuples and mappings as
    read-only proxies, copied from the caller's (whose objects are never
    changed). :meth:`replace` returns a new, validated spec.
    """

    # -- degrees (devices = dp*tp*pp*cp; EP folds into dp*cp*tp, Megatron's expert grid)
    dp: int = 1
    tp: int = 1
    pp: int = 1
    vpp: int = 1  # model chunks per stage (ND's vp)
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # expert TP; None: experts follow tp (ND derive step 2)
    sequence_parallel: bool = False  # Megatron SP: ND's sp = tp, else 1
    # -- batch (global_batch_size = micro_batch_size*dp*micro_batch_num, ND's gbs = b*d*m)
    micro_batch_size: int = 1
    micro_batch_num: int | None = None  # None: global_batch_size // (micro_batch_size*dp)
    global_batch_size: int | None = None  # None: micro_batch_size*dp*micro_batch_num
    seq_length: int = 4096
    # -- pipeline (docs/ND_MODEL.md §1.6, §3.6)
    pp_schedule: str = "1f1b"  # "1f1b" with vpp > 1 runs interleaved (see `schedule`); PP_SCHEDULES
    seq_split: int = 1  # Seq1F1B sequence chunks (ND's n_s_split)
    #: The step's micro-batches run as this many whole pipeline schedules, each with its own fill and drain (a
    #: training loop that accumulates gradients over schedule runs: torch.distributed.pipelining under NeMo
    #: AutoModel's and torchtitan's gradient accumulation, one ``schedule.step()`` per local batch); 1: one
    #: schedule over all of them (Megatron-LM). Divides the micro-batch count; needs pp > 1. Seconds mode.
    pp_runs: int = 1
    offset: tuple | None = None  # layers added per stage (1-D) or per chunk and stage (vpp x pp)
    pp_partition: tuple | None = None  # layers per stage; excludes offset
    mtp_in_offset: bool = True  # the offset counts the MTP layers (ND's is_mtp_in_offset)
    emb_out_in_offset: bool = False  # the offset counts embedding and output as layers
    # -- recompute (switches: 1 keeps an op's activation, 0 recomputes it)
    recompute: str | tuple = "none"  # "none" | "full" | "selective" | RecomputeRange, ...
    full_recompute: bool | tuple | None = None  # ND's full_rec: all, or the first k layers per stage
    selective_recompute: bool | tuple | None = None  # ND's sel_rec, same shapes
    selective_rule: str = "megatron"  # switches of "selective" unless selective_switches states them
    selective_switches: Mapping[str, int] | None = None
    selective_comm_recompute: bool = False  # MindFormers' select_comm_recompute (the SP gather)
    recompute_slice_activation: bool = False  # a fully recomputed layer keeps its input split over tp
    # -- sharding and gradient reduction
    zero_stage: int = 1  # 0 DDP, 1 optimizer states, 2 + gradients, 3 + parameters (FSDP)
    optimizer_shard: int | None = None  # ND's os_max_shard: DP ranks the shards span (None: dp)
    reshard_params: bool | None = None  # FSDP reshard after forward (None: True at ZeRO-3)
    overlapped_grad_reduce: bool = True
    #: ZeRO-1/2: the next step's parameter all-gather runs under its first forward, bucket by bucket
    #: (Megatron's --overlap-param-gather, off by default there); seconds mode only.
    overlapped_param_gather: bool = False
    deferred_grad_accumulation: bool = False  # reduce gradients once, after the last micro-batch
    shard_spans_cp: bool = True  # ZeRO shards span dp*cp (Megatron's DP x CP optimizer group)
    # -- byte widths (per element)
    param_bytes: int = 2
    compute_bytes: int = 2
    softmax_bytes: int = 4
    grad_bytes: int = 4
    #: Bytes each logit of the loss holds at its peak: 4, Megatron's fp32 logits of its vocab-parallel
    #: cross entropy (Korthikanti et al. 2022 §4.3); 10 where the loss upcasts a copy and keeps its
    #: fp32 log-softmax beside the 16-bit logits (torchtitan's cross_entropy_loss, pred.float()).
    logit_bytes: int = 4
    optimizer_state_bytes: int = 4
    optimizer_states: int = 2  # Adam's two moments
    main_param_bytes: int = 4  # fp32 master copy of the params (0: none)
    norm_bytes: int = 2
    # Dropout mask bytes; 0: no dropout, as Llama, Qwen and DeepSeek train (their config.json
    # attention_dropout is 0.0). GPT-3-style runs (Korthikanti et al.'s assumptions) set 1.
    dropout_bytes: int = 0
    # -- kernels and model-side choices
    flash_attention: bool = True
    grouped_gemm: bool = True  # dropless MoE; False: capacity mode with capacity_factor
    capacity_factor: float = 1.0
    #: Dropless MoE: the busiest expert's routed tokens over the mean (1: balanced, as NVIDIA's
    #: published runs force it); the straggler's grouped GEMMs and all-to-all carry this load.
    moe_imbalance: float = 1.0
    cp_algo: str = "ring"  # "ring" (ND's colossalai_cp) | "ulysses" | "ring-allgather" (CP_ALGOS)
    vocab_emb_dp: bool = False  # ND: the embedding is not split over tp when pp == 1
    tie_embeddings: bool | None = None  # None: the model's tie_word_embeddings
    moe_dispatch: float | None = None  # ND's MOE_DISPATCH (None: 1040; 0 prices no dispatch)
    #: ND's op count ``n_dispatch``: how many times a MoE layer's dispatch is charged (ND units only).
    #: HyperParallel's estimator weighs the dispatch term by this count of the layer's config, which
    #: reads 0 when the config does not state it and nothing in upstream's code sets it: ND prices no
    #: dispatch. 1 charges it once per MoE layer, as the MOE_DISPATCH comment's measurements do
    #: (docs/ND_MODEL.md §2.3 open point; docs/ND_DIFFERENCES.md).
    moe_dispatch_count: float = 0.0
    #: "alltoall" (NCCL's all-to-all) | "deepep" (DeepEP's normal kernels) | "hybridep" (NVIDIA's HybridEP)
    #: (MOE_DISPATCHERS)
    moe_dispatcher: str = "alltoall"
    #: SMs DeepEP's or HybridEP's kernels hold while they run, taken from compute when they overlap it (Megatron-Core's
    #: moe_deepep_num_sms, default 20; moe_hybridep_num_sms, 16, the recipes 32; DeepSeek-V3 report §3.2.2: 20 of the
    #: H800's 132).
    moe_dispatcher_sms: int = 20
    #: Node-limited routing: each token is sent to at most this many nodes of its expert-parallel group
    #: (DeepSeek-V3 §2.1.2: M = 4, the nodes chosen by their experts' top affinities); 0: no limit.
    moe_node_limit: int = 0
    #: Device-limited routing: each token's experts lie on at most this many ranks of its expert-parallel group
    #: (DeepSeek-V2 §2.2.1, arXiv 2405.04434: the M devices holding its top-affinity experts, M = 3; NeMo
    #: AutoModel's benchmark gate, whose k consecutive experts span one or two ranks); 0: no limit.
    moe_device_limit: int = 0
    #: The dispatch direction (the forward dispatch, the combine's backward) moved in fp8 with a 4-byte
    #: scale per 128 elements (DeepSeek-V3 §3.3.4; Megatron-Core's moe_dispatch_fwd_dtype 'mxfp8' moves
    #: the same 1 + 1/32 bytes); the combine direction stays 16-bit. Needs precision 'fp8'.
    moe_dispatch_fp8: bool = False
    #: How the expert all-to-all overlaps compute (EP_OVERLAPS): "none"; "1f1b", Megatron-Core's
    #: --overlap-moe-expert-parallel-comm (a forward and a backward micro-batch co-scheduled layer by
    #: layer, each one's all-to-all under the other's compute); "dualpipe", DualPipe's and DualPipeV's
    #: overlapped forward-and-backward chunks (pp_schedule 'dualpipe' or 'dualpipev').
    ep_overlap: str = "none"
    precision: str = "bf16"
    tp_overlap: bool = False  # seconds mode: TP comm overlapped with compute
    #: Seconds mode: the scopes of each layer the stack replays from CUDA graphs instead of launching their
    #: kernels from the host (ndcost.spec.graph_scopes): "none", "attn", "router" (a MoE layer's pre-norm,
    #: router, shared experts and token preprocessing), "moe_router" (attention and router), "ffn", "layer"
    #: (all three), or any set of attn, router and ffn joined with "+"; held by its canonical name.
    cuda_graphs: str = "none"
    #: Under fp8, Transformer Engine keeps each weight's fp8 copy and its fp8 transpose across a step's
    #: micro-batches (TE v1.10 module/linear.py: get_fp8_workspace(cache_name="weight",
    #: with_transpose=...) whenever is_first_microbatch is passed, as Megatron-Core does): 2 bytes per
    #: weight parameter on the rank, 1 when the weights are fp8 already (param_bytes 1, TE's
    #: fp8_model_init: the transpose only). False: casts made at each forward and freed (torchao's
    #: Float8Linear, torchtitan's fp8). Memory only. It names the fp8 linear too: True (TE's modules) saves
    #: the fp8 copy of each linear's input for the weight gradient, False (torchao) the 16-bit input
    #: (ndcost/kernels/memory.py, the comment above _ffn_bytes).
    fp8_weight_cache: bool = True
    #: fp32 parameters trained under ``torch.autocast`` (16-bit compute), as plain PyTorch + Hugging Face
    #: Transformers run them (the hf-eager preset): each forward casts every linear weight to 16 bits
    #: (autocast's cache keeps the copy for the forward; autograd until the layer's backward), each
    #: linear casts its own fp32 input, and the residual stream between the blocks is fp32 (the
    #: embedding's output is fp32; ``+`` is on none of autocast's lists). Needs param_bytes 4.
    autocast: bool = False
    #: Gradients exist only from the backward on (``optimizer.zero_grad(set_to_none=True)``, PyTorch's
    #: default since 2.0): with one micro-batch a step they are never held beside the forward's
    #: activations. Memory only.
    grads_set_to_none: bool = False
    #: A MoE layer weights each routed token by its router probability inside the expert activation, so
    #: the un-permutation sums without weights and the experts' outputs are not kept for backward
    #: (Megatron-Core since core_v0.13, NVIDIA/Megatron-LM@2659630721 "Memory efficient token permutation":
    #: moe/experts.py weighted_bias_swiglu_impl(fc1_output, bias, permuted_probs), token_dispatcher.py
    #: unpermute without probs). False: the probabilities weight the experts' outputs before the combine,
    #: which keeps them (torchtitan@b5bcd76c6 models/common/token_dispatcher.py:L158-161, Transformers'
    #: MoE blocks). Memory only.
    moe_weighted_activation: bool = True
    #: DeepSeek-V3's low-precision activation storage (DeepSeek-V3 technical report, arXiv 2412.19437,
    #: §3.3.2 "Low-Precision Activation"): the inputs the MoE SwiGLU caches for its recomputed output are
    #: stored in fp8 with the 1x128-tile scales of §3.3.1, and the attention output -- the input of the
    #: linear after it, which the attention's backward also reads -- in the E5M6 format, one copy for both.
    #: Needs precision 'fp8'. Memory only (the quantizing kernels' time is not priced).
    fp8_activation_storage: bool = False
    #: Under fp8 with ``fp8_weight_cache``: the weight's fp8 transpose (the copy the input-gradient GEMM reads on
    #: Hopper, whose fp8 tensor-core GEMMs take both operands K-major) is kept across the step's micro-batches, as
    #: Transformer Engine keeps it. False: made for each backward and freed, as DeepSeek-V3's framework does --
    #: its published profile (deepseek-ai/profile-data@449602428a1b train.json) transposes every fp8 weight of a
    #: layer in each backward (batched_transpose on fp8 data, grids = the weights in 128x128 tiles, e.g. 2304 for
    #: q_b 1536x24576, 3584 for the 4 local experts' 2048x7168; tests/test_fp8_transpose_cache.py): 1 byte per
    #: weight parameter less. Memory only; the transient transpose (one weight at a time) is not priced.
    fp8_transpose_cache: bool = True
    #: ZeRO-3 gathers one parameter at a time, when its module runs, and reduces its gradient alone, as
    #: DeepSpeed's ZeRO-3 of 2021 does (a blocking fetch per parameter: the seconds mode's "deepspeed-2021"
    #: software prices the same): at most the largest weight and its gradient are held whole. False (default):
    #: whole layers, the next one prefetched, and a layer's gradient bucket (FSDP; docs/ND_MODEL.md §3.7). Memory
    #: only; needs zero_stage 3.
    zero3_parameter_fetch: bool = False

    # ------------------------------------------------------------------ construction and validation

    def __init__(self, *args: Any, **fields: Any) -> None:
        # The dataclass's own __init__ would store every field with its own object.__setattr__ (frozen);
        # a search builds a spec per candidate, so the fields become the instance dict in one step,
        # and the rule groups then check (and canonicalise) them in place.
        if args:
            fields = _with_positional(args, fields)
        values = {**_DEFAULTS, **fields}
        if len(values) != len(_DEFAULTS):
            _reject_unknown(fields)
        object.__setattr__(self, "__dict__", values)
        if not scalars_hold(values):
            check_scalars(self)
        for check in _STRUCTURE_CHECKS:
            check(self)

    @classmethod
    def problems(cls, **fields: Any) -> list[SpecError]:
        """Every group of rules *fields* break, one SpecError each, where ``ExecSpec(**fields)`` stops at
        the first: the scalars, then (when they hold) the pipeline, the batch, the layout, recompute
        and sharding rules -- each group checked on its own. [] when the spec is valid."""
        unknown = sorted(set(fields) - set(_DEFAULTS))
        if unknown:
            return [SpecError(unknown[0], _OWNER, "be an ExecSpec field", fields[unknown[0]])]
        spec = object.__new__(cls)
        object.__setattr__(spec, "__dict__", {**_DEFAULTS, **fields})
        found: list[SpecError] = []
        for check in CHECKS:
            try:
                check(spec)
            except SpecError as exc:
                found.append(exc)
                if check is check_scalars:
                    break       # the other groups read the scalars: undefined past a bad one
        return found

    # ------------------------------------------------------------------ identity

    def __hash__(self) -> int:
        # selective_switches is a read-only proxy, which does not hash.
        return hash(tuple(
            tuple(value.items()) if type(value) is MappingProxyType else value
            for value in map(self.__getattribute__, _FIELD_NAMES)
        ))

    def __reduce__(self):
        # A mappingproxy neither pickles nor deep-copies: rebuild from plain values.
        return (_rebuild, (self._plain_fields(),))

    def _plain_fields(self) -> dict[str, Any]:
        state = {name: getattr(self, name) for name in _FIELD_NAMES}
        if state["selective_switches"] is not None:
            state["selective_switches"] = dict(state["selective_switches"])
        return state

    def replace(self, **changes: Any) -> ExecSpec:
        """A copy with *changes* applied, validated again."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ derived views

    @property
    def sp(self) -> int:
        """ND's sequence-parallel factor: tp with sequence parallelism, else 1
        (docs/ND_MODEL.md §1.3 ``sp``; derive step 1)."""
        return self.tp if self.sequence_parallel else 1

    @property
    def schedule(self) -> str:
        """The pipeline schedule that runs: ``"1f1b"`` with vpp > 1 is
        ``"interleaved"`` (ND's 1f1b with vp > 1, docs/ND_MODEL.md §3.6)."""
        if self.pp_schedule == "1f1b" and self.vpp > 1:
            return "interleaved"
        return self.pp_schedule

    @property
    def num_devices(self) -> int:
        """Devices the strategy occupies: dp*tp*pp*cp (ND's strategy_num_devices,
        docs/ND_MODEL.md §1.3); EP folds into these."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def resolved_micro_batch_num(self) -> int:
        """Micro-batches per step: as stated, else global_batch_size // (micro_batch_size*dp)."""
        if self.micro_batch_num is not None:
            return self.micro_batch_num
        return self.global_batch_size // (self.micro_batch_size * self.dp)

    @property
    def resolved_global_batch_size(self) -> int:
        """Samples per step: as stated, else micro_batch_size*dp*micro_batch_num."""
        if self.global_batch_size is not None:
            return self.global_batch_size
        return self.micro_batch_size * self.dp * self.micro_batch_num

    @property
    def resolved_reshard_params(self) -> bool:
        """Whether FSDP reshards after forward: as stated, else True at zero_stage 3."""
        if self.reshard_params is not None:
            return self.reshard_params
        return self.zero_stage == 3

    @property
    def recompute_option(self) -> str:
        """How the spec states its recompute.

        ``"ranges"`` for a tuple of :class:`RecomputeRange`; for a per-stage
        statement, ``"full"``/``"selective"`` when it is ``True`` (every
        layer) and ``"per_stage"`` for layer counts (full wins over selective,
        as ND's partition generator reads ``full_rec`` first,
        docs/ND_MODEL.md §1.6); else the ``recompute`` string (``"none"``,
        ``"full"``, ``"selective"``).
        """
        if isinstance(self.recompute, tuple):
            return "ranges"
        if states_per_stage(self.full_recompute):
            return "full" if self.full_recompute is True else "per_stage"
        if states_per_stage(self.selective_recompute):
            return "selective" if self.selective_recompute is True else "per_stage"
        return self.recompute

    @property
    def selective_setting(self) -> dict[str, int]:
        """The switches (1 keep, 0 recompute) a selective layer runs with:
        ``selective_switches`` if stated, else the ``selective_rule``'s."""
        return switches_from_mask(self.keep_mask)

    @property
    def keep_mask(self) -> int:
        """The selective setting as a keep mask (bit i set: ``SWITCHES[i]`` kept):
        ``selective_switches`` if stated, else the ``selective_rule``'s."""
        if self.selective_switches is not None:
            return mask_from_switches(self.selective_switches)
        return selective_keep_mask(
            self.selective_rule,
            flash_attention=self.flash_attention,
            sequence_parallel_degree=self.sp,
            comm_recompute=self.selective_comm_recompute,
        )

    def range_keep_mask(self, recompute_range: RecomputeRange) -> int:
        """The keep mask a range runs with: its own, or the spec's for a selective
        range that states no switches (docs/ND_MODEL.md §1.4 derive step 7)."""
        own = recompute_range.keep_mask
        return self.keep_mask if own is None else own

    # ------------------------------------------------------------------ ND's keyword strategy

    from_strategy = classmethod(spec_from_strategy)


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(ExecSpec))
# Every field has a default (None where the spec derives the value), so a spec's values are these
# updated by what its caller states.
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ExecSpec)}
#: The rule groups after the scalars, which ExecSpec(...) checks first (and fast when they hold).
_STRUCTURE_CHECKS = CHECKS[1:]
# The signature the dataclass's __init__ had: for help() and inspect.signature (the fields, in order).
ExecSpec.__signature__ = inspect.Signature([
    inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=f.default, annotation=f.type)
    for f in dataclasses.fields(ExecSpec)
])


def _with_positional(args: tuple, fields: dict[str, Any]) -> dict[str, Any]:
    """The keywords positional *args* state (fields in declaration order), as the dataclass took them."""
    if len(args) > len(_FIELD_NAMES):
        raise TypeError(f"ExecSpec() takes at most {len(_FIELD_NAMES)} positional arguments ({len(args)} given)")
    named = dict(zip(_FIELD_NAMES, args))
    for name in fields:
        if name in named:
            raise TypeError(f"ExecSpec() got multiple values for argument {name!r}")
    named.update(fields)
    return named


def _reject_unknown(fields: dict[str, Any]) -> None:
    from ..errors import UnknownFieldError
    from ..suggest import did_you_mean

    unknown = next(name for name in fields if name not in _DEFAULTS)
    raise UnknownFieldError(unknown, _OWNER, f"be an ExecSpec field{did_you_mean(unknown, _DEFAULTS)}",
                            fields[unknown])


def _rebuild(state: dict[str, Any]) -> ExecSpec:
    return ExecSpec(**state)
