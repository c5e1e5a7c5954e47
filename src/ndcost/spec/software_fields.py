"""What a training stack implies for a strategy's ExecSpec: the fields its framework fixes.

A :data:`~ndcost.spec.rates.SOFTWARE_PRESETS` name prices the stack's kernels in seconds mode
(``Rates.for_software``). The same stack also decides what memory holds -- how FSDP shards and keeps
parameters, the loss's logits, the fp8 weight copies, the context-parallel ring -- which are ExecSpec
fields. :func:`software_fields` gives them for a strategy (some depend on its pp, tp and cp);
:func:`with_software` applies them where the caller has not stated the field. ExecSpec's defaults are
Megatron-Core's, so the Megatron presets add nothing.

Each torchtitan figure cites torchtitan@9dec370 (the version of its published H100 benchmark).
"""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..errors import SpecError
from .exec_spec import ExecSpec
from .nvidia_recipes import NVIDIA_RECIPE_FIELDS
from .preset_fields import PresetField, StrategyView, preset_values
from .stack_options import TORCHTITAN_OP

__all__ = ["TORCHTITAN_LOGIT_BYTES", "TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES", "BF16_CROSS_ENTROPY_LOGIT_BYTES", "TE_CROSS_ENTROPY_LOGIT_BYTES",
           "TORCHTITAN_FIELDS", "HF_EAGER_FIELDS",
           "PRESET_FIELDS",
           "check_software", "per_op_model", "software_fields", "stack_strategy", "with_software", "software_columns"]

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ExecSpec)}

#: torchtitan's loss at its peak, bytes per logit element on this rank (torchtitan@9dec370 train.py:L131-134,
#: L303-308: ``cross_entropy(pred.flatten(0, 1).float(), labels)``, then ``del pred`` before ``backward``).
#: Without TP (plain cross_entropy) the forward holds the 16-bit logits, their fp32 copy and the fp32
#: log-softmax (2 + 4 + 4); backward, with ``pred`` gone, holds the kept log-softmax, nll_loss's dense
#: gradient and log_softmax_backward's output (4 + 4 + 4) -- the larger is the peak.
TORCHTITAN_LOGIT_BYTES = max(2 + 4 + 4, 4 + 4 + 4)
#: With TP, torchtitan runs DTensor's loss_parallel (torch/distributed/tensor/parallel/loss.py, torch@1963fc83a1c32e162162e2414f78b043f0674bae, the benchmark's torch):
#: its forward ``_log_softmax`` holds the 16-bit logits, the fp32 copy, ``shifted`` and ``exp(shifted)``
#: (2 + 4 + 4 + 4); its fused backward ``_nll_loss_and_log_softmax_backward`` holds the kept
#: log-softmax, ``zeros_like`` (the one-hot), ``exp(x)`` and their sum (4 + 4 + 4 + 4), then the product
#: while ``exp(x)`` is freed (still 16).
TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES = max(2 + 4 + 4 + 4, 4 + 4 + 4 + 4)
#: A plain ``F.cross_entropy`` on the 16-bit logits, with no fp32 upcast and the logits kept alive through
#: backward (NeMo AutoModel's ``MaskedCrossEntropy(fp32_upcast=False)``: its training step holds ``out`` until
#: ``backward()``, Automodel@8d9bfb90 recipes/llm/train_ft.py:L964-976; a pipeline's last stage keeps its
#: output for the backward likewise). Forward: the logits and the log-softmax (2 + 2); backward: the logits,
#: the kept log-softmax, nll_loss's dense gradient and log_softmax_backward's output (2 + 2 + 2 + 2).
BF16_CROSS_ENTROPY_LOGIT_BYTES = max(2 + 2, 2 + 2 + 2 + 2)
#: Transformer Engine's fused cross entropy (Megatron-Core ``cross_entropy_fusion_impl 'te'``,
#: NVIDIA/Megatron-LM@d7288711 megatron/core/models/common/language_module/language_module.py:L141-163 passes
#: the output layer's 16-bit logits to ``te_parallel_cross_entropy``): its Triton forward writes the loss's
#: gradient into the logits tensor in place and saves only that tensor for backward, whose backward scales
#: it in place (NVIDIA/TransformerEngine@fedd9ddc transformer_engine/pytorch/cross_entropy.py:L50-59,
#: triton/cross_entropy.py:L187, L261). No fp32 copy exists at any moment: 2 bytes a logit.
TE_CROSS_ENTROPY_LOGIT_BYTES = 2

_TT = "pytorch/torchtitan@9dec370ad26b5f8e9a7333a0e36165018262644b"


def _pipelined(view: Any) -> bool:
    return view.pp > 1


def _one_micro_batch_per_stage(view: Any) -> bool:
    """torchtitan runs a rank's local batch as one forward and backward (no gradient accumulation), split under
    PP into as many micro-batches as stages -- where the caller states the batch and no micro-batching of its
    own."""
    return view.states("global_batch_size") and not view.states("micro_batch_size") and not view.states("micro_batch_num")


def _stage_micro_batch_size(view: Any) -> int | None:
    """The local batch over the stages; None where it does not split evenly, or where the row's degrees are
    not positive (a row of a batch its own rules refuse: it keeps its reason, estimate_many prices the rest)."""
    ranks = view.dp * view.pp
    if not ranks >= 1:
        return None
    share, left = divmod(view.global_batch_size, ranks)
    return share if share >= 1 and not left else None


#: torchtitan (FSDP2, its loss, torchao's fp8, PyTorch's CP and pipelining), each row at torchtitan@9dec370, the
#: version of its published H100 benchmark.
TORCHTITAN_FIELDS: tuple[PresetField, ...] = (
    PresetField("zero_stage", 3, "", f"{_TT} torchtitan/parallelisms/parallelize_llama.py apply_fsdp: FSDP2 "
                "(fully_shard) over dp_shard x cp"),
    PresetField("param_bytes", 2, "pp > 1", f"{_TT} parallelize_llama.py:L309-339 reshard_after_forward False with "
                "PP: the stage's bf16 parameters stay unsharded beside their fp32 shards", _pipelined),
    PresetField("param_bytes", 4, "pp 1", f"{_TT} parallelize_llama.py apply_fsdp MixedPrecisionPolicy("
                "param_dtype=bf16, reduce_dtype=fp32): fp32 shards, bf16 gathered to compute"),
    PresetField("main_param_bytes", 4, "pp > 1", "the fp32 shards beside the unsharded bf16 parameters (as "
                "param_bytes)", _pipelined),
    PresetField("main_param_bytes", 0, "pp 1", "the fp32 shards are the master copy (no other)"),
    PresetField("grad_bytes", 4, "", f"{_TT} parallelize_llama.py MixedPrecisionPolicy reduce_dtype fp32"),
    PresetField("optimizer_state_bytes", 4, "", f"{_TT} torchtitan/optimizer.py AdamW on the fp32 shards"),
    PresetField("optimizer_states", 2, "", f"{_TT} torchtitan/optimizer.py AdamW: two moments"),
    PresetField("logit_bytes", TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES, "tp > 1", "DTensor's loss_parallel (torch/"
                "distributed/tensor/parallel/loss.py, torch@1963fc83a1c32e162162e2414f78b043f0674bae): 2 + 4 + 4 + 4 "
                "bytes forward, 4 + 4 + 4 + 4 backward", lambda view: view.tp > 1),
    PresetField("logit_bytes", TORCHTITAN_LOGIT_BYTES, "tp 1", f"{_TT} train.py:L131-134, L303-308 cross_entropy("
                "pred.flatten(0, 1).float(), labels), then del pred: 2 + 4 + 4 bytes forward, 4 + 4 + 4 backward"),
    PresetField("fp8_weight_cache", False, "", f"{_TT} torchtitan/float8.py: torchao's Float8Linear casts each "
                "weight at each forward"),
    PresetField("sequence_parallel", lambda view: view.tp > 1, "", f"{_TT} parallelize_llama.py apply_tp: the "
                "norms' sequence sharded (SequenceParallel) with TP", shown="tp > 1"),
    PresetField("reshard_params", False, "pp > 1", f"{_TT} parallelize_llama.py:L309-339 reshard_after_forward "
                "False with PP", _pipelined),
    PresetField("deferred_grad_accumulation", True, "pp > 1", "torch.distributed.pipelining: gradient sync off but "
                "for the last micro-batch (the unsharded fp32 gradients accumulate until then)", _pipelined),
    PresetField("cp_algo", "ring-allgather", "cp > 1", f"{_TT} torchtitan/config_manager.py "
                "--experimental.context_parallel_rotate_method default 'allgather'", lambda view: view.cp > 1),
    PresetField("selective_rule", TORCHTITAN_OP, "recompute selective (no switches stated)", f"{_TT} "
                "train_configs/llama3_8b.toml:L53-55 mode 'selective', selective_ac_option 'op' (per-op SAC: "
                "parallelize_llama.py _apply_ac_to_transformer_block's _save_list)",
                lambda view: view.recompute == "selective" and not view.states("selective_switches") and view.per_op),
    PresetField("micro_batch_num", lambda view: view.pp if _stage_micro_batch_size(view) else None,
                "the global batch stated and no micro-batching", f"{_TT} train.py:L281-308 one pp_schedule.step "
                "(or, without PP, one forward and loss.backward()) over the local batch a step: no gradient "
                "accumulation; torchtitan/parallelisms/pipelining_utils.py:L79-81 n_microbatches defaults to "
                "pipeline_parallel_degree (one per stage)", _one_micro_batch_per_stage, shown="pp"),
    PresetField("micro_batch_size", _stage_micro_batch_size, "as micro_batch_num", "the local batch in one "
                "micro-batch, split under PP into pp of them", _one_micro_batch_per_stage,
                shown="global_batch_size / (dp * pp)"),
    PresetField("moe_weighted_activation", False, "", "pytorch/torchtitan@b5bcd76c6 "
                "torchtitan/models/common/token_dispatcher.py:L158-161: the experts' outputs times their scores, "
                "then scatter_add (the outputs are kept for the multiply's backward; a dense model has none)"),
)

_HF = "huggingface/transformers (5.x)"
_TORCH = "pytorch/pytorch (2.x)"

#: Plain PyTorch + Hugging Face Transformers as ``Trainer`` / ``accelerate`` users run a decoder (hf-eager):
#: fp32 parameters under ``torch.autocast(bfloat16)``, the model's eager modules, SDPA, its own loss, fused
#: AdamW, ``zero_grad(set_to_none=True)``, one checkpoint per decoder layer when recompute is full. Checked
#: against real steps on one H200 (../shared/measurements/h200/measure_h200.py, tests/test_hf_eager_h200.py).
HF_EAGER_FIELDS: tuple[PresetField, ...] = (
    PresetField("zero_stage", 0, "", f"{_HF} Trainer / accelerate wrap the model in DistributedDataParallel when "
                "neither FSDP nor DeepSpeed is configured: every rank holds everything"),
    PresetField("param_bytes", 4, "", f"{_HF} from_pretrained / LlamaForCausalLM(config) builds fp32 parameters "
                "(torch_dtype float32); bf16 is autocast's, not the weights'"),
    PresetField("main_param_bytes", 0, "", "the fp32 parameters are the optimizer's: no other copy"),
    PresetField("grad_bytes", 4, "", f"{_TORCH} autograd accumulates each parameter's .grad in its dtype (fp32)"),
    PresetField("optimizer_state_bytes", 4, "", f"{_TORCH} torch/optim/adamw.py (fused=True): exp_avg and exp_avg_sq "
                "zeros_like(param), fp32"),
    PresetField("optimizer_states", 2, "", f"{_TORCH} torch/optim/adamw.py: two moments"),
    PresetField("norm_bytes", 4, "", f"{_HF} modeling_llama.py LlamaRMSNorm: the norm's input is the fp32 residual "
                "stream (the embedding's output is fp32 under autocast: embedding is on none of its lists)"),
    PresetField("logit_bytes", TORCHTITAN_LOGIT_BYTES, "", f"{_HF} transformers/loss/loss_utils.py ForCausalLMLoss: "
                "logits.float() then cross_entropy; the 16-bit logits of the model's output are freed with it "
                "before backward: 2 + 4 + 4 bytes forward, 4 + 4 + 4 backward"),
    PresetField("autocast", True, "", f"{_TORCH} torch.autocast('cuda', dtype=torch.bfloat16) over fp32 parameters "
                "(aten/src/ATen/autocast_mode.cpp cached_cast: each weight cast once a region, each non-leaf input "
                "at each use)"),
    PresetField("grads_set_to_none", True, "", f"{_TORCH} torch/optim/optimizer.py zero_grad(set_to_none=True), "
                "the default since PyTorch 2.0: the gradients are freed after each step and made by the backward"),
    PresetField("sequence_parallel", False, "", "no tensor parallelism in a plain PyTorch model"),
    PresetField("moe_weighted_activation", False, "", f"{_HF} models/qwen3_moe/modeling_qwen3_moe.py "
                "Qwen3MoeSparseMoeBlock: each expert's output times its routing weight, then index_add_ (the "
                "weighted outputs are kept for backward; a dense model has none to keep)"),
)

#: DeepSpeed's ZeRO-3 of 2021 (0.3.16, the seconds preset's "deepspeed-2021"): a parameter is gathered when its
#: module runs and its gradient reduced alone, so a stage holds one gathered weight, not whole layers.
DEEPSPEED_2021_FIELDS = (
    PresetField("zero3_parameter_fetch", True, "zero_stage 3", "deepspeedai/DeepSpeed v0.3.16 "
                "deepspeed/runtime/zero/stage3.py: PartitionedParameterCoordinator (L287) fetches a submodule's "
                "parameters in its pre-forward / pre-backward hook (fetch_sub_module L390) and releases them after "
                "(release_sub_module L448); each gradient goes to a reduce bucket as its hook fires, one larger than "
                "the bucket alone (L1885-1905). Not priced: the two preallocated bucket buffers (reduce_bucket_size "
                "5e8 elements by default, L2933-2940: 1.86 GiB at fp16)",
                applies=lambda view: view.zero_stage == 3),
)

#: Preset name -> the ExecSpec fields it fixes (none: ExecSpec's defaults, Megatron-Core's, hold).
PRESET_FIELDS: Mapping[str, tuple[PresetField, ...]] = MappingProxyType({
    "megatron-2021": (), "deepspeed-2021": DEEPSPEED_2021_FIELDS, "megatron-te": (), **NVIDIA_RECIPE_FIELDS,
    "torchtitan-eager": TORCHTITAN_FIELDS, "torchtitan-compile": TORCHTITAN_FIELDS, "hf-eager": HF_EAGER_FIELDS,
})


def check_software(software: Any, owner: str = "software_fields", parameter: str = "software") -> None:
    """Refuse a name that is no preset, with the nearest one."""
    if not isinstance(software, str) or software not in PRESET_FIELDS:
        from .rates import SOFTWARE_PRESETS
        from ..suggest import did_you_mean

        raise SpecError(parameter, owner, f"be one of {', '.join(map(repr, SOFTWARE_PRESETS))}"
                        f"{did_you_mean(str(software), SOFTWARE_PRESETS)}", software)


def software_fields(software: str, tp: int = 1, pp: int = 1, cp: int = 1, *, moe: bool = False,
                    per_op: bool = True, **stated: Any) -> Mapping[str, Any]:
    """The ExecSpec fields the training stack *software* (a ``SOFTWARE_PRESETS`` name) fixes for a strategy
    of these degrees and *stated* fields (none of which it sets), in a MoE model or not, one that takes a per-op
    recompute census or not (*per_op*); empty for the stacks whose fields are ExecSpec's defaults."""
    check_software(software)
    return preset_values(PRESET_FIELDS[software], StrategyView({"tp": tp, "pp": pp, "cp": cp, **stated}, moe,
                                                                   per_op=per_op))


def per_op_model(model: Any) -> bool:
    """Whether torchtitan's per-op recompute can be priced on *model*: a dense text model with no census of its
    own (``ndcost.spec.torchtitan_sac.torchtitan_op_census``'s rule); a stack's per-op rule is not set
    elsewhere (its selective recompute is then priced as Megatron's)."""
    return (model is not None and not getattr(model, "census", ()) and not getattr(model, "is_moe", False)
            and getattr(model, "vision", None) is None)


def stack_strategy(software: str | None, model: Any, stated: Mapping[str, Any],
                   where: str = "with_software") -> tuple[Any, ExecSpec]:
    """(model, ExecSpec) of the *stated* fields with *software*'s own filling every field not stated; a
    selective rule ``torchtitan-op`` (stated or the stack's) priced as it runs, on the model's census
    (``ndcost.spec.stack_options.with_torchtitan_op``)."""
    from .stack_options import with_torchtitan_op

    fields = dict(stated)
    if software is not None:
        fields = {**software_fields(software, moe=bool(getattr(model, "is_moe", False)), per_op=per_op_model(model),
                                    **stated), **stated}
    if fields.get("selective_rule") == TORCHTITAN_OP and model is None:
        raise SpecError("selective_rule", where, "be torchtitan-op only with a model to take its census "
                        "of (ndcost.spec.software_fields.stack_strategy)", TORCHTITAN_OP)
    model, fields = with_torchtitan_op(model, fields, where)
    return model, ExecSpec(**fields)


def with_software(software: str | None, stated: Mapping[str, Any]) -> ExecSpec:
    """An ExecSpec of the *stated* fields, the stack's own fields filling every field not stated (a dense
    model's; :func:`stack_strategy` with the model where the strategy may recompute per op)."""
    return stack_strategy(software, None, stated)[1]


#: The strategy fields a preset's rows read (their conditions and values): what a batch's rows are grouped by.
PRESET_READS = ("tp", "pp", "cp", "dp", "precision", "zero_stage", "recompute", "global_batch_size")


def _codes(column: Any) -> np.ndarray:
    """Each row's index among the column's distinct values."""
    values = np.asarray(column)
    try:
        return np.unique(values, return_inverse=True)[1].ravel()
    except TypeError:          # structured values (recompute ranges) do not sort: distinct by identity of value
        seen: dict[Any, int] = {}
        return np.fromiter((seen.setdefault(repr(v), len(seen)) for v in values.tolist()), np.int64, len(values))


def software_columns(software: str, columns: Mapping[str, Any], *, moe: bool = False,
                     stated: Any = None, per_op: bool = True) -> dict[str, np.ndarray]:
    """Columns of the fields *software* fixes for each row of a batch of *columns* (a search space's): the stack's
    value where a row does not state the field, the row's own where it does, ExecSpec's default where the stack
    leaves a row's field alone (its CP ring at cp 1, say). *stated*: the names the batch states, for every row
    (default every column: a search space's dimensions), or a mapping of names to a bool per row -- a batch of
    specs, each stating the fields it sets apart from their defaults, so that a row is priced as
    ``estimate(spec, software=...)`` prices it whatever its neighbours state."""
    reads = [name for name in PRESET_READS if name in columns]
    n = len(np.asarray(columns[reads[0]] if reads else next(iter(columns.values()))))
    masks = _stated_masks(columns, stated, n)
    varying = [mask for mask in masks.values() if mask.any() and not mask.all()]   # a uniform mask splits no group
    keys = [_codes(columns[name]) for name in reads] + [mask.astype(np.int64) for mask in varying]
    groups = np.stack(keys, axis=1) if keys else np.zeros((n, 1), np.int64)
    _, first, row_combo = np.unique(groups, axis=0, return_index=True, return_inverse=True)
    row_combo = row_combo.ravel()
    rows = PRESET_FIELDS[software] if software in PRESET_FIELDS else check_software(software)
    per_combo = []
    for i in first.tolist():
        values = {name: _scalar(columns[name], i) for name in reads}
        named = {name for name, mask in masks.items() if mask[i]}
        per_combo.append(preset_values(rows, StrategyView(values, moe, named, per_op)))
    everywhere = {name for name, mask in masks.items() if mask.all()}
    out = {}
    for name in sorted(set().union(*per_combo) - everywhere) if per_combo else []:
        by_combo = [fields.get(name, _DEFAULTS[name]) for fields in per_combo]
        mask = masks.get(name)
        if mask is None or not mask.any():
            out[name] = np.asarray(by_combo, dtype=object if isinstance(by_combo[0], str) else None)[row_combo]
            continue
        # the rows that state it keep their own value
        values = np.asarray(by_combo, dtype=object)[row_combo]
        values[mask] = np.asarray(columns[name], dtype=object)[mask]
        text = any(isinstance(value, str) for value in values.tolist())
        out[name] = values if text else np.asarray(values.tolist())
    return out


def _stated_masks(columns: Mapping[str, Any], stated: Any, n: int) -> dict[str, np.ndarray]:
    """*stated* (None, names, or names to a bool per row) as a bool (n,) per column of the batch."""
    if isinstance(stated, Mapping):
        return {name: np.broadcast_to(np.asarray(stated.get(name, False), dtype=bool), (n,)) for name in columns}
    named = set(columns) if stated is None else set(stated)
    return {name: np.full(n, name in named) for name in columns}


def _scalar(column: Any, i: int) -> Any:
    value = np.asarray(column, dtype=object)[i]
    return value.item() if hasattr(value, "item") else value


def stack_columns(software: str, model: Any, columns: Mapping[str, Any], *,
                  stated: Any = None) -> tuple[Any, dict[str, Any]]:
    """(model, columns) of a batch (a search space, a Candidates' columns) under *software*: the columns with
    the fields the stack fixes where the batch does not state them (:func:`software_columns`), a per-op
    selective rule ``torchtitan-op`` priced as it runs (HyperParallel's policy on the model's census)."""
    from .stack_options import with_torchtitan_op

    added = software_columns(software, columns, moe=bool(getattr(model, "is_moe", False)), stated=stated,
                             per_op=per_op_model(model))
    rule = added.get("selective_rule")
    if rule is not None and TORCHTITAN_OP in set(rule.tolist()):
        model, _ = with_torchtitan_op(model, {"selective_rule": TORCHTITAN_OP}, where="software")
        added["selective_rule"] = np.where(rule == TORCHTITAN_OP, "hyperparallel", rule).astype(object)
    return model, {**columns, **added}
