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
from typing import Any, Mapping

import numpy as np

from ..errors import SpecError
from .exec_spec import ExecSpec

__all__ = ["TORCHTITAN_LOGIT_BYTES", "TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES", "software_fields", "with_software",
           "software_columns"]

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

#: Stacks whose framework fields are ExecSpec's defaults (Megatron-Core's), or that ndcost prices in time only.
_NO_FIELDS = ("megatron-2021", "deepspeed-2021", "megatron-te", "nemo")


def _torchtitan(tp: int, pp: int, cp: int) -> dict[str, Any]:
    fields: dict[str, Any] = dict(
        zero_stage=3,                    # FSDP2 (fully_shard) over dp_shard x cp: parallelize_llama.py
        param_bytes=4, main_param_bytes=0,   # FSDP2 shards fp32 parameters, gathers bf16 ones to compute
        grad_bytes=4, optimizer_state_bytes=4, optimizer_states=2,   # fp32 reduce dtype, AdamW
        logit_bytes=TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES if tp > 1 else TORCHTITAN_LOGIT_BYTES,
        fp8_weight_cache=False,          # torchao's Float8Linear casts at each forward (float8.py)
        sequence_parallel=tp > 1,        # its TP plan shards the norms' sequence (SequenceParallel)
    )
    if pp > 1:
        # FSDP2 keeps a pipelined stage's parameters unsharded in bf16 for the whole step beside their
        # fp32 shards (reshard_after_forward False with PP: parallelize_llama.py:L309-339), and torch's
        # pipeline stage accumulates the micro-batches' gradients unsharded in the fp32 reduce dtype
        # until the last backward (torch.distributed.pipelining: gradient sync off but for the last)
        fields.update(reshard_params=False, deferred_grad_accumulation=True, param_bytes=2, main_param_bytes=4)
    if cp > 1:
        # PyTorch's context_parallel with rotate_method "allgather", torchtitan's default
        # (config_manager.py: --experimental.context_parallel_rotate_method)
        fields["cp_algo"] = "ring-allgather"
    return fields


def software_fields(software: str, tp: int = 1, pp: int = 1, cp: int = 1) -> Mapping[str, Any]:
    """The ExecSpec fields the training stack *software* (a ``SOFTWARE_PRESETS`` name) fixes for a
    strategy of these degrees; empty for the stacks whose fields are ExecSpec's defaults."""
    if software in ("torchtitan-eager", "torchtitan-compile"):
        return _torchtitan(tp, pp, cp)
    if software in _NO_FIELDS:
        return {}
    from .rates import SOFTWARE_PRESETS
    from ..suggest import did_you_mean

    raise SpecError("software", "software_fields",
                    f"be one of {', '.join(map(repr, SOFTWARE_PRESETS))}{did_you_mean(software, SOFTWARE_PRESETS)}",
                    software)


def with_software(software: str | None, stated: Mapping[str, Any]) -> ExecSpec:
    """An ExecSpec of the *stated* fields, the stack's own fields filling every field not stated."""
    if software is None:
        return ExecSpec(**stated)
    fields = software_fields(software, stated.get("tp", 1), stated.get("pp", 1), stated.get("cp", 1))
    return ExecSpec(**{**fields, **stated})


def software_columns(software: str, columns: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Columns of the fields *software* fixes for each row of a batch whose *columns* state its tp, pp and cp
    (a search space's): one per field the stack fixes that *columns* do not hold, ExecSpec's default where
    the stack leaves a row's field alone (its CP ring at cp 1, say)."""
    degrees = np.stack([np.asarray(columns[name], dtype=np.int64) for name in ("tp", "pp", "cp")], axis=1)
    combos, row_combo = np.unique(degrees, axis=0, return_inverse=True)
    per_combo = [software_fields(software, *(int(x) for x in combo)) for combo in combos]
    names = sorted(set().union(*per_combo) - set(columns)) if per_combo else []
    out = {}
    for name in names:
        values = [fields.get(name, _DEFAULTS[name]) for fields in per_combo]
        out[name] = np.asarray(values, dtype=object if isinstance(values[0], str) else None)[row_combo.ravel()]
    return out
