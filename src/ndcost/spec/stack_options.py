"""The training stack's choices a user states by name: one table, read by every command and runs file.

Each :class:`StackOption` is one row: the name a user types (``--tp-comm-overlap`` on the command line,
``tp_comm_overlap`` in a runs file's strategy block), the :class:`~ndcost.spec.exec_spec.ExecSpec`,
:class:`~ndcost.spec.rates.Rates` or :class:`~ndcost.tables.seconds.Overlap` field it sets, how its
value is read, its help line, the commands that take it, and what a strategy must be for it to mean
anything (an fp8 recipe under bf16 is refused, never ignored). ``ndcost estimate``, ``explain``,
``search``, ``plot`` and ``validate`` build their flags from :data:`STACK_OPTIONS`, a search takes any
``spec`` row as a dimension (``--tp-comm-overlap on,off``), and a runs file's rows state the same names:
a field added to ExecSpec or Rates reaches all of them with one row here.

A stated option overrides what ``--software``'s stack sets for the field (``ndcost.spec.software_fields``,
``Rates.for_software``); where the option is a Rates figure that a ``--rates`` file also states (a
source other than the device's default), the two must agree.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import SpecError
from .exec_spec_rules import CHOICE_SPELLINGS, CP_ALGOS, CUDA_GRAPHS, EP_OVERLAPS, MOE_DISPATCHERS, PRECISIONS
from .moe_kernels import EXPERT_BIASES, GLU_CLAMPS, GROUPED_GEMMS, MOE_PERMUTES
from .rope_scaling import ROPE_SCALES
from .recompute_spec import SELECTIVE_RULES
from .rates import ATTENTION_KERNELS, ELEMENTWISE, FP8_RECIPES

__all__ = ["StackOption", "STACK_OPTIONS", "MEGATRON_EP_OVERLAP", "OPTIONS", "TORCHTITAN_OP", "SEARCHABLE", "option_for_field",
           "SPEC_DEFAULTS", "parse_option", "parse_option_list", "option_text", "check_applies", "stack_fields", "option_applies",
           "with_torchtitan_op"]

#: The commands of ``ndcost`` that price a strategy, and ``validate``'s runs files.
ALL_COMMANDS = frozenset(("estimate", "explain", "search", "plot", "validate"))
#: torchtitan's per-op selective activation checkpointing (``selective_ac_option = "op"``): priced as
#: HyperParallel's policy on the census of what it recomputes (``ndcost.spec.torchtitan_sac``).
TORCHTITAN_OP = "torchtitan-op"

_TRUE = ("on", "true", "yes", "1")
_FALSE = ("off", "false", "no", "0")


def _moe(fields: Any, model: Any) -> Any:
    return bool(getattr(model, "is_moe", False))


def _fp8(fields: Any, model: Any) -> Any:
    return _is(fields["precision"], "fp8")


def _recomputes_selectively(fields: Any, model: Any) -> Any:
    """A strategy whose recompute is selective: the statement "selective", or a per-layer plan (a tuple of
    ranges) with a selective range (a search's column of statements compares element-wise)."""
    recompute = fields["recompute"]
    if isinstance(recompute, tuple):
        return any(getattr(item, "option", None) == "selective" for item in recompute)
    return _is(recompute, "selective")


def _overlap_context(value: Any) -> dict[str, Any]:
    """A spec an expert all-to-all overlap means something in: an EP group, and DualPipe's schedule for its own."""
    if value == "dualpipe":
        return {"ep": 2, "pp": 2, "pp_schedule": "dualpipe", "micro_batch_num": 4}
    return {"ep": 2}


def _is(value: Any, name: str) -> Any:
    """A field (or a search's column of it) equal to a choice's *name*."""
    import numpy as np

    return np.asarray(value) == name


@dataclass(frozen=True, eq=False)      # one object per row: compared and hashed by identity
class StackOption:
    """One row of :data:`STACK_OPTIONS`.

    Attributes:
        name: What a user types: ``--`` + name with dashes on the command line, name in a runs file.
        field: The field it sets.
        owner: ``"spec"`` (ExecSpec), ``"rates"`` (Rates: one per priced batch, not a search
            dimension) or ``"overlap"`` (the Overlap validate prices a row with; not a command flag).
        kind: ``"bool"`` (on/off), ``"choice"``, ``"number"``, ``"int"`` or ``"list"`` (of choices: one value,
            written with commas on the command line).
        help: The help line (it states the default).
        choices: A choice's values, as the user types them.
        values: The user's value -> the field's, where they differ (dropout on -> 1-byte masks).
        applies: (fields, model) -> whether the option means anything for a strategy; *fields* maps
            ExecSpec field names to values or to a search's columns (then it answers per row).
        needs: What ``applies`` asks, in words (the refusal says it).
        commands: The commands that take it.
        seconds_only: ND's units do not price it.
        convert: A list's choices -> the field's value, and back (``(to_field, to_words)``).
        context: value -> the other fields a spec needs for the value to mean anything (a search checks each
            value's own rules in such a spec: fp8 dispatch under fp8, an all-to-all overlap with an EP group).
        canonical: A choice's other spellings -> its name (a CUDA-graph set in any order), applied before the
            value is checked against ``choices``; a spelling it does not know is returned as given.
    """

    name: str
    field: str
    owner: str
    kind: str
    help: str
    choices: tuple = ()
    values: Mapping[Any, Any] | None = None
    applies: Callable[[Any, Any], Any] | None = None
    needs: str = ""
    commands: frozenset = ALL_COMMANDS
    seconds_only: bool = True
    convert: tuple[Callable[[tuple], Any], Callable[[Any], tuple]] | None = None
    context: Callable[[Any], Mapping[str, Any]] | None = None
    canonical: Callable[[Any], Any] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _switches_of(modules: tuple) -> dict:
    """Megatron-Core's ``recompute_modules`` as the switches they recompute (0) and keep (1)."""
    from .recompute_spec import MEGATRON_RECOMPUTE_MODULES, SWITCHES

    recomputed = {switch for module in modules for switch in MEGATRON_RECOMPUTE_MODULES[module]}
    return {name: 0 if name in recomputed else 1 for name in SWITCHES}


def _modules_of(switches: Any) -> tuple:
    """The fewest ``recompute_modules`` (in Megatron-Core's order) that recompute exactly these switches."""
    from .recompute_spec import MEGATRON_RECOMPUTE_MODULES

    wanted = {name for name, keep in dict(switches).items() if not keep}
    chosen, covered = [], set()
    for module, recomputed in MEGATRON_RECOMPUTE_MODULES.items():
        if set(recomputed) <= wanted and not set(recomputed) <= covered:
            chosen.append(module)
            covered |= set(recomputed)
    if covered != wanted:
        raise SpecError("selective_switches", "--recompute-modules", "be what Megatron-Core's modules recompute",
                        dict(switches))
    return tuple(chosen)


def _module_names() -> tuple:
    from .recompute_spec import MEGATRON_RECOMPUTE_MODULES

    return tuple(MEGATRON_RECOMPUTE_MODULES)


#: Every stack choice a user can state, one row each (the order of --help and of a search's columns).
STACK_OPTIONS: tuple[StackOption, ...] = (
    StackOption("precision", "precision", "spec", "choice",
                "matmul precision: bf16, fp16 or fp8 (fp8 needs a device with an fp8 peak; search: a list, e.g. "
                "bf16,fp8) (default bf16)", choices=PRECISIONS, seconds_only=False),
    StackOption("fp8_recipe", "fp8_recipe", "rates", "choice",
                "how fp8 GEMM inputs are scaled and cast: delayed (Transformer Engine's DelayedScaling), current "
                "(per-tensor current scaling, Megatron's --fp8-recipe tensorwise), blockwise (1x128 / 128x128 blocks, "
                "Transformer Engine's), deepseek (DeepSeek-V3's blocks as its framework runs them: the backward "
                "re-quantizes each cached input, report §3.5.2), torchao (torchtitan's Float8Linear) (default: the "
                "--software stack's, else delayed)",
                choices=tuple(FP8_RECIPES), applies=_fp8, needs="--precision fp8"),
    StackOption("param_dtype", "param_bytes", "spec", "choice",
                "the dtype the model's parameters are held in: fp32 (FSDP2 over fp32 parameters, bf16 gathered to "
                "compute: torchtitan, Transformers), bf16 (16-bit weights: Megatron, or a model cast to bf16 as NeMo "
                "AutoModel's), fp8 (as --fp8-param-gather) (default bf16; the --software stack's)",
                choices=("fp32", "bf16", "fp8"), values={"fp32": 4, "bf16": 2, "fp8": 1}, seconds_only=False),
    StackOption("fp8_param_gather", "param_bytes", "spec", "bool",
                "keep the parameters in fp8 and all-gather them in fp8 (Megatron's --fp8-param-gather: 1-byte "
                "parameters beside the fp32 master copy; off: 16-bit ones) (default off)", values={True: 1, False: 2},
                applies=_fp8, needs="--precision fp8", seconds_only=False),
    StackOption("fp8_weight_cache", "fp8_weight_cache", "spec", "bool",
                "keep each weight's fp8 copy and transpose across a step's micro-batches (Transformer Engine); off: "
                "cast at each forward and freed (torchao) (default on, off under torchtitan's --software)",
                applies=_fp8, needs="--precision fp8", seconds_only=False),
    StackOption("fp8_transpose_cache", "fp8_transpose_cache", "spec", "bool",
                "keep the fp8 weights' transposes across micro-batches (Transformer Engine); off: transpose for each "
                "backward and free it, as DeepSeek-V3's framework (default on)",
                applies=lambda f, m: _fp8(f, m) & f["fp8_weight_cache"], needs="--precision fp8 and --fp8-weight-cache",
                seconds_only=False, context=lambda value: {"precision": "fp8"}),
    StackOption("zero3_parameter_fetch", "zero3_parameter_fetch", "spec", "bool",
                "ZeRO-3 gathers one parameter at a time and reduces its gradient alone, as DeepSpeed's 2021 ZeRO-3; "
                "off: whole layers with the next prefetched (FSDP) (default off)",
                applies=lambda f, m: f["zero_stage"] == 3, needs="--zero-stage 3", seconds_only=False,
                context=lambda value: {"zero_stage": 3}),
    StackOption("autocast", "autocast", "spec", "bool",
                "fp32 parameters under torch.autocast with an fp32 residual stream (plain PyTorch + Transformers): "
                "every weight and projection input cast each forward (default off, on under --software hf-eager)",
                seconds_only=False),
    StackOption("grads_set_to_none", "grads_set_to_none", "spec", "bool",
                "gradients exist only from the backward on (zero_grad(set_to_none=True)): with one micro-batch "
                "they are never held beside the forward's activations (default off, on under --software hf-eager)",
                seconds_only=False),
    StackOption("moe_weighted_activation", "moe_weighted_activation", "spec", "bool",
                "weight each routed token by its router probability inside the expert activation, so the experts' "
                "outputs are not kept for backward (Megatron-Core since core_v0.13) (default on, off under torchtitan's "
                "and hf-eager's --software)", applies=_moe, needs="a MoE model", seconds_only=False),
    StackOption("tp_comm_overlap", "tp_overlap", "spec", "bool",
                "overlap tensor-parallel communication with the GEMMs (Megatron's --tp-comm-overlap, Transformer "
                "Engine userbuffers; torchtitan's async TP) (default off, or the --software stack's)",
                applies=lambda f, m: f["tp"] > 1, needs="tp > 1"),
    StackOption("overlap_grad_reduce", "overlapped_grad_reduce", "spec", "bool",
                "reduce gradients under the last micro-batch's backward, bucket by bucket (Megatron's "
                "--overlap-grad-reduce) (default on)"),
    StackOption("defer_grad_reduce", "deferred_grad_accumulation", "spec", "bool",
                "reduce the gradients once a step, after the last micro-batch (Megatron's DDP, torchtitan's FSDP stage "
                "modules under torch.distributed.pipelining); off: every micro-batch's backward reduces them and "
                "ZeRO-3 gathers the weights again for the next forward (FSDP2 at its defaults, as NeMo AutoModel "
                "runs) (default off; on under --software torchtitan with PP)"),
    StackOption("overlap_param_gather", "overlapped_param_gather", "spec", "bool",
                "all-gather the next step's ZeRO-1/2 parameters under its first forward (Megatron's "
                "--overlap-param-gather) (default off)",
                applies=lambda f, m: (f["zero_stage"] == 1) | (f["zero_stage"] == 2), needs="--zero-stage 1 or 2"),
    StackOption("selective_rule", "selective_rule", "spec", "choice",
                "which ops selective recompute recomputes: megatron (core attention), mindformers, hyperparallel "
                "(with --census), torchtitan-op (torchtitan's per-op SAC) (default megatron)",
                choices=SELECTIVE_RULES + (TORCHTITAN_OP,),
                applies=_recomputes_selectively, needs="--recompute selective (or a plan with selective ranges)",
                seconds_only=False),
    StackOption("recompute_modules", "selective_switches", "spec", "list",
                "what selective recompute recomputes, as Megatron-Core's --recompute-modules: core_attn, layernorm, "
                "moe_act, mlp_act, mla_up_proj, mlp, moe (comma-separated; instead of --selective-rule) (default: "
                "the --selective-rule's)", choices=_module_names(), convert=(_switches_of, _modules_of),
                applies=lambda f, m: f["recompute"] == "selective", needs="--recompute selective", seconds_only=False),
    StackOption("reshard_after_forward", "reshard_params", "spec", "bool",
                "FSDP frees each gathered unit's parameters after its forward and gathers them again for its "
                "backward (FSDP2's reshard_after_forward) (default on at --zero-stage 3, or the --software stack's)",
                applies=lambda f, m: f["zero_stage"] == 3, needs="--zero-stage 3", seconds_only=False),
    StackOption("cp_algo", "cp_algo", "spec", "choice",
                "context-parallel algorithm: ring (Transformer Engine's P2P ring), ulysses, or ring-allgather "
                "(PyTorch's context_parallel as torchtitan runs it: a backward holds all ranks' K/V) (default "
                "ring)", choices=CP_ALGOS, applies=lambda f, m: f["cp"] > 1, needs="cp > 1", seconds_only=False),
    StackOption("moe_dispatcher", "moe_dispatcher", "spec", "choice",
                "MoE token dispatcher: alltoall (NCCL's all-to-all, a copy per token and expert), deepep (DeepEP's "
                "normal kernels: RDMA once per node, NVLink once per rank; its buffers held beside NCCL's) or "
                "hybridep (NVIDIA's HybridEP: DeepEP's traffic at its own NVLink rates, a buffer for every token of "
                "the group, a dispatch that blocks the host) (default alltoall)", choices=MOE_DISPATCHERS,
                applies=_moe, needs="a MoE model", seconds_only=False),
    StackOption("moe_dispatcher_sms", "moe_dispatcher_sms", "spec", "int",
                "SMs DeepEP's or HybridEP's kernels hold, taken from compute while they overlap it (Megatron-Core's "
                "--moe-deepep-num-sms / --moe-hybridep-num-sms) (default 20, Megatron-Core's DeepEP default and "
                "DeepSeek-V3's)",
                applies=lambda f, m: _moe(f, m) & (_is(f["moe_dispatcher"], "deepep") | _is(f["moe_dispatcher"],
                                                                                             "hybridep")),
                needs="--moe-dispatcher deepep or hybridep"),
    StackOption("moe_node_limit", "moe_node_limit", "spec", "int",
                "node-limited routing: the nodes of its expert-parallel group a token is sent to at most "
                "(DeepSeek-V3: 4; Megatron-Core's --moe-router-group-topk with a group per node) (default 0: no limit)",
                applies=_moe, needs="a MoE model"),
    StackOption("moe_device_limit", "moe_device_limit", "spec", "int",
                "device-limited routing: the ranks of its expert-parallel group a token's experts lie on at most "
                "(DeepSeek-V2: 3; Megatron-Core's --moe-router-group-topk with a group per EP rank) (default 0: no "
                "limit)", applies=_moe, needs="a MoE model"),
    StackOption("moe_dispatch_fp8", "moe_dispatch_fp8", "spec", "bool",
                "dispatch (and the combine's backward) in fp8 with 1x128 scales, the combine in bf16, as DeepSeek-V3 "
                "(default off)", applies=lambda f, m: _moe(f, m) & _fp8(f, m), needs="a MoE model and --precision fp8",
                context=lambda value: {"precision": "fp8"}),
    StackOption("fp8_activation_storage", "fp8_activation_storage", "spec", "bool",
                "store activations as DeepSeek-V3 does (its report §3.3.2): the MoE SwiGLU's cached inputs in fp8, "
                "the attention output in E5M6, each with 1x128-tile scales (default off)",
                applies=_fp8, needs="--precision fp8", seconds_only=False, context=lambda value: {"precision": "fp8"}),
    StackOption("ep_overlap", "ep_overlap", "spec", "choice",
                "how the expert all-to-all overlaps compute: none, 1f1b (Megatron-Core's "
                "--overlap-moe-expert-parallel-comm: a forward and a backward micro-batch co-scheduled; vpp > 1 when "
                "pp > 1, no full recompute) or dualpipe (DualPipe's overlapped chunks, with --pp-schedule dualpipe, "
                "dualpipev or zero_bubble_v) (default none)", choices=EP_OVERLAPS, applies=_moe, needs="a MoE model",
                context=_overlap_context),
    StackOption("grouped_gemm", "grouped_gemm", "spec", "bool",
                "dropless MoE with grouped GEMMs; off: capacity mode with --capacity-factor (default on)",
                applies=_moe, needs="a MoE model", seconds_only=False),
    StackOption("capacity_factor", "capacity_factor", "spec", "number",
                "MoE capacity factor of the token-dropping mode (default 1.0)",
                applies=lambda f, m: _moe(f, m) & ~_as_bool(f["grouped_gemm"]),
                needs="a MoE model in capacity mode (--no-grouped-gemm)", seconds_only=False),
    StackOption("moe_imbalance", "moe_imbalance", "spec", "number",
                "the busiest expert-parallel rank's routed tokens over the mean, dropless mode (default 1.0: "
                "balanced)", applies=lambda f, m: _moe(f, m) & _as_bool(f["grouped_gemm"]),
                needs="a dropless MoE model (grouped GEMMs)", seconds_only=False),
    StackOption("flash_attention", "flash_attention", "spec", "bool",
                "a fused flash-attention kernel (off: the unfused softmax of 2021's Megatron-LM) (default on)",
                seconds_only=False),
    StackOption("dropout", "dropout_bytes", "spec", "bool",
                "hidden and attention dropout (1-byte masks; Megatron-LM's 0.1 default, GPT-3-style runs) (default "
                "off, as Llama, Qwen and DeepSeek train)", values={True: 1, False: 0}, seconds_only=False),
    StackOption("grad_bytes", "grad_bytes", "spec", "int",
                "bytes per gradient element as reduced: 4 (fp32, Megatron's bf16 default), 2 (fp16 runs that "
                "reduce 16-bit gradients) (default 4)", choices=(2, 4), seconds_only=False),
    StackOption("softmax_bytes", "softmax_bytes", "spec", "int",
                "bytes per attention probability an unfused attention keeps for its backward: 2 (Megatron-LM's fused "
                "scale-mask-softmax, up to 2,048 keys), 4 (an fp32 softmax) (default 4; flash attention keeps none)",
                choices=(2, 4), seconds_only=False),
    StackOption("logit_bytes", "logit_bytes", "spec", "int",
                "bytes per logit element the loss holds at its peak: 4 (Megatron's fused vocab-parallel cross "
                "entropy), 8 (F.cross_entropy on the bf16 logits, kept to backward: NeMo AutoModel's fp32_upcast "
                "false), 12 (the loss on an fp32 copy: torchtitan, Transformers), 16 (DTensor's loss_parallel) "
                "(default 4; the --software stack's)", seconds_only=False),
    StackOption("master_weights", "main_param_bytes", "spec", "choice",
                "the optimizer's master copy of the weights: fp32 (4 bytes a parameter) or remainder (2: the 16-bit "
                "weights and a stored 16-bit remainder, Apex's store_param_remainders, NeMo's bf16 default under its "
                "distributed Adam) (default fp32)", choices=("fp32", "remainder"), values={"fp32": 4, "remainder": 2},
                seconds_only=False),
    StackOption("adam_moments", "optimizer_state_bytes", "spec", "choice",
                "Adam's two moments: fp32 (4 bytes each a parameter) or bf16 (2: Megatron-Core's precision-aware "
                "optimizer with exp_avg_dtype and exp_avg_sq_dtype bf16, as Megatron-Bridge's DeepSeek-V3 recipe and "
                "DeepSeek-V3's report §3.3.3 train) (default fp32)", choices=("fp32", "bf16"),
                values={"fp32": 4, "bf16": 2}, seconds_only=False),
    StackOption("gradient_accumulation_fusion", "grad_accumulation_fusion", "rates", "bool",
                "the weight-gradient GEMM accumulates into the fp32 main gradient (Megatron's "
                "--gradient-accumulation-fusion); off: a separate add every micro-batch (default: the --software "
                "stack's, else on)"),
    StackOption("grad_reduce_dtype", "grad_reduce_bytes", "rates", "choice",
                "the dtype the data-parallel gradient reduction moves, where it is not the one the gradients are held "
                "in: fp32 (FSDP2's MixedPrecisionPolicy reduce_dtype float32 over bf16 gradients, as NeMo AutoModel "
                "sets it), bf16; held: the gradients' own (default held)",
                choices=("held", "fp32", "bf16"), values={"held": 0, "fp32": 4, "bf16": 2}),
    StackOption("attention_kernel", "attention_kernel", "rates", "choice",
                "attention kernel: best (the part's fastest fused attention) or fa2 (FlashAttention-2, PyTorch's "
                "SDPA) (default: the --software stack's, else best)", choices=ATTENTION_KERNELS),
    StackOption("elementwise", "elementwise", "rates", "choice",
                "elementwise ops: fused (Megatron/TE kernels or torch.compile) or eager (one PyTorch op per kernel) "
                "(default: the --software stack's, else fused)", choices=ELEMENTWISE),
    StackOption("attention_copies", "attention_copies", "rates", "bool",
                "the model code copies K/V per query head (GQA's repeat_kv) and the attention output (torchtitan's "
                "Llama) (default: the --software stack's, else off)"),
    StackOption("cuda_graphs", "cuda_graphs", "spec", "choice",
                "the scopes of each layer the stack replays from CUDA graphs instead of launching from the host: "
                "none, attn (the attention sub-block), router (a MoE layer's pre-norm, router, shared experts and "
                "permutation: Megatron's moe_router moe_preprocess scopes), moe_router (attn and router), ffn (the "
                "rest of the FFN), layer (all three; torch.compile mode=reduce-overhead), or a set joined with + "
                "(attn+ffn) (default none)", choices=CUDA_GRAPHS, canonical=CHOICE_SPELLINGS["cuda_graphs"]),
    StackOption("moe_permute", "moe_permute", "rates", "choice",
                "how a MoE layer's tokens are permuted to their experts and back: fused (Transformer Engine's "
                "moe_permute, Megatron's --moe-permute-fusion), unfused (Megatron-Core's PyTorch ops) or sort "
                "(torchtitan's argsort, gather and scatter-add) (default: the --software stack's, else fused)",
                choices=MOE_PERMUTES, applies=_moe, needs="a MoE model"),
    StackOption("moe_router_fusion", "moe_router_fusion", "rates", "bool",
                "the router's score, top-k and aux loss as one fused kernel (Megatron's --moe-router-fusion) "
                "(default: the --software stack's, else on)", applies=_moe, needs="a MoE model"),
    StackOption("moe_aux_loss", "moe_aux_loss", "rates", "bool",
                "a load-balancing aux loss computed from the routing (default: the --software stack's, else on)",
                applies=_moe, needs="a MoE model"),
    StackOption("grouped_gemm_impl", "grouped_gemm_impl", "rates", "choice",
                "how the experts' grouped GEMMs run: cutlass (one grouped kernel: torch._grouped_mm, DeepGEMM) or "
                "multi_stream (Transformer Engine's GroupedLinear: a cuBLAS GEMM per expert) (default: the "
                "--software stack's, else multi_stream)", choices=GROUPED_GEMMS, applies=_moe, needs="a MoE model"),
    StackOption("expert_bias", "expert_bias", "rates", "choice",
                "how the routed experts' biases are added, for a model whose experts carry them (gpt-oss): epilogue "
                "(in the GEMM), down_split (the down projection's expert by expert with the routing probabilities: "
                "Megatron-Core), split (both expert by expert: NeMo AutoModel) or gathered (both gathered into the "
                "rows and added: torchtitan) (default: the --software stack's, else down_split)",
                choices=EXPERT_BIASES, applies=_moe, needs="a MoE model"),
    StackOption("glu_clamp", "glu_clamp", "rates", "choice",
                "how a gated expert's two halves are clamped, for a model that clamps them (gpt-oss's swiglu_limit): "
                "fused (inside the activation's kernel), separate (eager clamp kernels, fused where the stack "
                "compiles its elementwise ops) or concatenated (the clamped halves concatenated again before the "
                "fused activation: Megatron-Core) (default: the --software stack's, else concatenated)",
                choices=GLU_CLAMPS, applies=_moe, needs="a MoE model"),
    StackOption("rope_scale", "rope_scale", "rates", "choice",
                "how a RoPE attention factor other than 1 (YaRN's, gpt-oss) is applied where elementwise ops are "
                "fused: fused (inside the kernel or on the cos / sin tables) or unfused (Megatron-Core's PyTorch "
                "fallback: Transformer Engine's fused RoPE takes no factor) (default: the --software stack's, else "
                "unfused)", choices=ROPE_SCALES),
    StackOption("launch_overhead", "launch_overhead", "rates", "number",
                "host seconds to launch one kernel eagerly; a layer's pass takes at least its launches (default "
                "9.58e-6, measured on an H200's host)"),
    StackOption("hbm_efficiency", "hbm_efficiency", "rates", "number",
                "share of the HBM bandwidth memory-bound kernels reach (default: the device's, 0.8 on NVIDIA parts; "
                "DeepSeek-V3's profile measured 0.3155 for its stack on H800)"),
    StackOption("graph_kernel_overhead", "graph_kernel_overhead", "rates", "number",
                "seconds per kernel replayed from a CUDA graph (default 0.84e-6, measured on an H200)"),
    StackOption("grouped_gemm_tile_overhead", "grouped_gemm_tile_overhead", "rates", "number",
                "a grouped GEMM tile's fixed cost, in elements of its inner dimension (default 60, fitted to "
                "measured grouped GEMMs)", applies=_moe, needs="a MoE model"),
    StackOption("grouped_gemm_exposed", "grouped_gemm_exposed", "rates", "number",
                "share of a grouped GEMM's shorter of compute and weight stream left exposed (default 0.35, fitted "
                "to measured grouped GEMMs)", applies=_moe, needs="a MoE model"),
    StackOption("scatter_add_rate", "scatter_add_rate", "rates", "number",
                "16-bit elements a second an atomic scatter-add adds (the unfused and sort permutations) (default "
                "1e11, fitted to an H200's measured expert blocks)", applies=_moe, needs="a MoE model"),
)
#: A runs file's name for Megatron-Core's EP overlap (validate only): ``overlap_moe_expert_parallel_comm: on`` is
#: ``ep_overlap: 1f1b`` (kept out of STACK_OPTIONS' flags and search dimensions, where ``ep_overlap`` states it).
MEGATRON_EP_OVERLAP = StackOption(
    "overlap_moe_expert_parallel_comm", "ep_overlap", "spec", "bool",
    "Megatron-Core's --overlap-moe-expert-parallel-comm (a runs file's alias of ep_overlap 1f1b) (default off)",
    values={True: "1f1b", False: "none"}, applies=_moe, needs="a MoE model", commands=frozenset(("validate",)))

#: Name -> option (the runs files' alias of ep_overlap too).
OPTIONS: Mapping[str, StackOption] = {option.name: option for option in STACK_OPTIONS + (MEGATRON_EP_OVERLAP,)}
#: The ExecSpec fields a search takes as dimensions through an option (by field name). Where two options set one
#: field (``--param-dtype`` and ``--fp8-param-gather``), the first listed, the more general, names it.
def _first_option_of_each_field() -> dict[str, StackOption]:
    first: dict[str, StackOption] = {}
    for option in STACK_OPTIONS:
        if option.owner == "spec":
            first.setdefault(option.field, option)
    return first


SEARCHABLE: Mapping[str, StackOption] = _first_option_of_each_field()


def _spec_defaults() -> dict[str, Any]:
    import dataclasses

    from .exec_spec import ExecSpec

    return {f.name: f.default for f in dataclasses.fields(ExecSpec)}


#: ExecSpec's default of each field an option sets (what a row the option means nothing to keeps).
SPEC_DEFAULTS: Mapping[str, Any] = {name: value for name, value in _spec_defaults().items() if name in SEARCHABLE}


def _as_bool(value: Any) -> Any:
    """A bool, or a column of them (a search's), as a value ``&`` and ``~`` work on."""
    import numpy as np

    return np.asarray(value, dtype=bool)


def option_for_field(field: str) -> StackOption | None:
    """The option that sets ExecSpec *field* (None when no option does)."""
    return SEARCHABLE.get(field)


def parse_option(option: StackOption, raw: Any, where: str = "ndcost") -> Any:
    """The field value *raw* states (a command-line word or a runs-file value), checked against the option's kind.

    Raises:
        SpecError: Naming the option's flag (or row key), the rule and the value.
    """
    parameter = option.flag if where == "ndcost" else option.name
    if option.kind == "bool":
        value = _bool(raw)
        if value is None:
            raise SpecError(parameter, where, "be on or off", raw)
    elif option.kind == "list":
        items = raw.split(",") if isinstance(raw, str) else raw
        if not isinstance(items, (list, tuple)) or not items:
            raise SpecError(parameter, where, f"be a comma-separated list of {', '.join(option.choices)}", raw)
        for item in items:
            if str(item).strip() not in option.choices:
                from ..suggest import did_you_mean

                raise SpecError(parameter, where, f"name {', '.join(option.choices)}"
                                f"{did_you_mean(str(item), option.choices)}", item)
        value = option.convert[0](tuple(str(item).strip() for item in items))
    elif option.kind == "choice":
        value = raw if option.canonical is None else option.canonical(raw)
        if isinstance(raw, str) and option.choices and isinstance(option.choices[0], int):
            value = int(raw) if raw.strip().isdigit() else raw
        if value not in option.choices:
            from ..suggest import did_you_mean

            names = tuple(map(str, option.choices))
            raise SpecError(parameter, where, f"be one of {', '.join(names)}{did_you_mean(str(raw), names)}", raw)
    elif option.kind == "int":
        value = raw
        if isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
            value = int(raw)
        if isinstance(value, bool) or not isinstance(value, int) or (option.choices and value not in option.choices):
            rule = f"be one of {', '.join(map(str, option.choices))}" if option.choices else "be an integer"
            raise SpecError(parameter, where, rule, raw)
    else:
        value = raw
        if isinstance(raw, str):
            try:
                value = float(raw)
            except ValueError:
                value = raw
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SpecError(parameter, where, "be a finite number", raw)
        value = float(value)
    if option.values is not None:
        value = option.values[value]
    return value


def parse_option_list(option: StackOption, text: str, where: str = "ndcost search") -> list:
    """A search's comma-separated values of an option (``on,off``; ``bf16,fp8``), each parsed."""
    items = [item.strip() for item in str(text).split(",")]
    if not all(items):      # `bf16,,fp8`: an empty item is a typo, not a value to drop (as search's dimensions)
        raise SpecError(option.flag, where, "be a value or a comma-separated list, no item empty", text)
    values = [parse_option(option, item) for item in items]
    if len(set(map(repr, values))) != len(values):
        raise SpecError(option.flag, where, "list each value once", text)
    return values


def option_text(option: StackOption, value: Any) -> str:
    """The word a command line states the field value *value* with (the inverse of :func:`parse_option`)."""
    if option.values is not None:
        value = next(user for user, field in option.values.items() if field == value)
    if option.kind == "list":
        return ",".join(option.convert[1](value))
    if option.kind == "bool":
        return "on" if value else "off"
    if option.kind == "number":
        return repr(float(value))
    return str(value)


def option_applies(option: StackOption, fields: Any, model: Any) -> Any:
    """Whether *option* means anything for the strategy (or each row of a search's *fields* columns)."""
    return True if option.applies is None else option.applies(fields, model)


def check_applies(stated: Mapping[StackOption, Any], spec: Any, model: Any, where: str = "ndcost") -> None:
    """Refuse an option stated for a strategy it means nothing to (an fp8 recipe under bf16, ...)."""
    fields = vars(spec)
    for option, value in stated.items():
        if option.owner != "overlap" and not bool(option_applies(option, fields, model)):
            shown = option_text(option, value) if option.values is None or value in option.values.values() else value
            raise SpecError(option.flag if where == "ndcost" else option.name, where,
                            f"be given only with {option.needs}", shown)


def stack_fields(stated: Mapping[StackOption, Any]) -> tuple[dict, dict, dict]:
    """(ExecSpec fields, Rates figures, Overlap shares) that the *stated* options set (option -> field value);
    an option whose value maps to None (``--no-fp8-param-gather``) leaves its field as the stack sets it."""
    out: dict[str, dict] = {"spec": {}, "rates": {}, "overlap": {}}
    setter: dict[tuple[str, str], StackOption] = {}
    for option, value in stated.items():
        if value is None:
            continue
        first = setter.setdefault((option.owner, option.field), option)
        if first is not option and out[option.owner][option.field] != value:
            raise SpecError(option.flag, "ndcost", f"agree with {first.flag} {option_text(first, out[option.owner][option.field])} "
                            f"(both set {option.field})", option_text(option, value))
        out[option.owner][option.field] = value
    return out["spec"], out["rates"], out["overlap"]


def _bool(raw: Any) -> bool | None:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        word = raw.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    return None


def with_torchtitan_op(model: Any, fields: dict, where: str = "ndcost") -> tuple[Any, dict]:
    """(model, fields) with ``selective_rule`` "torchtitan-op" (a value, or one of a search's list) priced as
    it runs: HyperParallel's policy on the census of what torchtitan's per-op SAC recomputes
    (:func:`ndcost.spec.torchtitan_sac.torchtitan_op_census`); the model keeps any other rule as it is."""
    rule = fields.get("selective_rule")
    rules = rule if isinstance(rule, list) else [rule]
    if TORCHTITAN_OP not in rules:
        return model, fields
    parameter = OPTIONS["selective_rule"].flag if where == "ndcost" else "selective_rule"
    if "hyperparallel" in rules:
        raise SpecError(parameter, where, "list torchtitan-op or hyperparallel, not both (each prices HyperParallel's "
                        "policy on its own census)", rule)
    if getattr(model, "census", ()):
        raise SpecError(parameter, where, "be torchtitan-op only on a model without a --census (it states its own)",
                        rule)
    from .torchtitan_sac import torchtitan_op_census

    try:
        census = torchtitan_op_census(model)
    except SpecError as exc:
        raise SpecError(parameter, where,
                        f"be torchtitan-op only for a model torchtitan's census covers (it must {exc.rule})",
                        getattr(model, "name", model)) from None
    mapped = ["hyperparallel" if item == TORCHTITAN_OP else item for item in rules]
    return model.with_census(census), {**fields, "selective_rule": mapped if isinstance(rule, list) else mapped[0]}
