"""Check seconds mode against published training runs (``validate_runs``).

A runs file is shaped like ``src/ndcost/data/validation/public_runs.yaml`` (docs/VALIDATION.md): each row has a
``model`` block (layers, hidden, heads, kv_heads, ffn_hidden, vocab, seq_len), a ``strategy``
block (gpus, tp, pp, dp, vpp, micro_batch, global_batch, recompute, zero, sequence_parallel,
precision), a ``hardware`` key into the file's ``hardware`` table, and ``measured`` figures. A
figure may be a plain value or ``{value, derived, how}``.

For each row :func:`validate_runs` builds a GPT-style :class:`~ndcost.spec.model.Model` (GELU
2-matmul MLP, LayerNorm, biases, learned positions -- the GPT-2/3 family Megatron-LM trains),
an :class:`~ndcost.spec.exec_spec.ExecSpec` and a :class:`~ndcost.spec.device.Cluster`, estimates the step
with :func:`ndcost.tables.seconds.seconds_estimate` and compares it with the measured iteration time.
Nothing is fitted: the rates are :mod:`ndcost.spec.rates`' defaults with the row's software
generation (below). What a row does not state is
filled by the rules below, each noted on the row; a row that lacks what cannot be filled is
skipped with the reason.

Rules for what the rows leave out (the runs are 2021-2022 Megatron-LM / DeepSpeed runs):

* micro_batch missing: 1 (noted).
* recompute missing: :data:`SOURCE_FACTS` when the row's cited source states it, else skipped.
* zero missing: 0 (plain data parallelism; Megatron-LM had no distributed optimizer in 2021).
* vpp missing: 1; sequence_parallel missing: off (it arrived in 2022, Korthikanti et al.).
* flash attention off (FlashAttention, Dao et al., appeared in May 2022 and is in none of these
  runs' frameworks); gradients reduced after the backward, not overlapped (Megatron-LM's 2021
  ``allreduce_gradients`` runs after the last micro-batch; ``overlap_grad_reduce`` came in 2023).
* gradient bytes: 2 for fp16 (Megatron-LM's ``--accumulate-allreduce-grads-in-fp32`` is off
  unless bf16; DeepSpeed's fp16 engine reduces fp16 gradients), 4 for bf16.
* dropout on (Megatron-LM's default hidden and attention dropout 0.1): 1-byte masks.
* the attention probabilities kept in 16 bits (``softmax_bytes`` 2) up to 2,048 keys: Megatron-LM's fused
  scale-mask-softmax kernel (on by default) takes and saves them in the 16-bit input's dtype
  (NVIDIA/Megatron-LM@0fa7175f0936db7fbe303ca47b25fafca49ef032 megatron/model/fused_softmax.py:L29-37, L132-147:
  key length 16 < sk <= 2048); beyond it the unfused path keeps the fp32 softmax output (4).
* tied input/output embeddings (Megatron-LM's GPT default) unless the model note says untied.
* the scale-out bandwidth from the hardware block's ``scale_out`` text where it states the
  links ("8x 200 Gb/s ... per node", "4 OPA links per node": Intel Omni-Path, 100 Gb/s per
  port), per device; else the catalog's.
* the training software of the period (:func:`software`): Megatron-LM 2021 and its forks add
  each micro-batch's weight gradients into the main gradient with a separate kernel (no
  gradient-accumulation fusion: ``Rates.for_software(device, "megatron-2021")``); a DeepSpeed
  ZeRO-3 row runs DeepSpeed's 2021 ZeRO-3 -- blocking per-parameter fetches at their measured
  rate, a re-fetch for the recompute forward, all-reduced gradients ("deepspeed-2021" with
  ``ndcost.tables.seconds.DEEPSPEED_2021``), holding one gathered parameter and its gradient at a time
  (``ExecSpec.zero3_parameter_fetch``). Each figure's source is in ``ndcost.spec.rates.SOFTWARE_PRESETS``;
  a caller's own ``rates`` / ``overlap`` replace them.
* measured iteration time: ``iteration_s``; else derived from ``tflops_per_gpu`` when the row
  says its FLOPs follow Narayanan et al. 2021 Eq. 3 with recompute (96·B·s·l·h²·(1 + s/6h +
  V/16lh)), or when the framework logs it that way (:data:`EQ3_FRAMEWORKS`); else skipped.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any, Mapping

from ..spec.device import Cluster
from ..errors import SpecError
from ..files import read_mapping
from ..spec.exec_spec import ExecSpec
from ..spec.model import Model
from ..spec.model_catalog import catalog_model_of
from ..spec.rates import Rates
from .run_facts import facts_for, figure_int as _int, figure_value as _value, modern_run
from ..tables.seconds import DEEPSPEED_2021, Overlap, seconds_estimate
from ..tables.joint_rules import validate

__all__ = ["BUILTIN_RUNS", "gpt_model", "RunResult", "ValidationReport", "validate_runs", "build_run", "software", "SOURCE_FACTS", "SOURCE_MODEL_FACTS", "EQ3_FRAMEWORKS"]

#: Strategy fields a row omits but its cited source states: row id -> (fields, citation).
SOURCE_FACTS: Mapping[str, tuple[dict, str]] = {
    "megatron_readme21_gpt3_175b_1024gpu": (
        {"recompute": "full", "micro_batch": 1},
        "NVIDIA/Megatron-LM examples/pretrain_gpt3_175B.sh (the row's cited script): "
        "--micro-batch-size 1 --checkpoint-activations",
    ),
    "bloom176b_tr11_384gpu": (
        {"recompute": "full"},
        "bigscience-workshop/bigscience train/tr11-176B-ml/tr11-176B-ml.slurm: --checkpoint-activations",
    ),
}

#: Model dimensions a row omits but a source states: row id -> (model-block fields, citation).
SOURCE_MODEL_FACTS: Mapping[str, tuple[dict, str]] = {
    "opt175b_992gpu": (
        {"vocab": 50272},
        "facebookresearch/metaseq@f7ffa5fd61cf90f498a36d365c13dd7f1a912ff7: GPT-2 BPE's 50265 tokens "
        "(projects/OPT/assets/gpt2-vocab.json) and 4 special tokens padded to a multiple of 8 "
        "(metaseq/tasks/streaming_language_modeling.py:L218-226); metaseq/cli/interactive_ft.py:L192 "
        "--vocab-size default 50272",
    ),
}

#: Rows whose TFLOP/s the framework logs with Narayanan et al. 2021 Eq. 3 (factor 4 with
#: activation checkpointing): row id -> citation.
EQ3_FRAMEWORKS: Mapping[str, str] = {
    "gptneox20b_96gpu": "EleutherAI/gpt-neox megatron/logging.py get_flops: 24·4·B·s·l·h²·(1 + s/6h + V/16lh) "
                        "with checkpoint_activations",
}

#: The published runs the project checks itself against, shipped with the package (copies of
#: ../shared/validation, each row with its source): name -> path. ``ndcost validate --builtin``.
BUILTIN_RUNS: Mapping[str, Path] = {
    "a100": Path(__file__).parents[1] / "data" / "validation" / "public_runs.yaml",
    "h100": Path(__file__).parents[1] / "data" / "validation" / "h100_runs.yaml",
    "moe": Path(__file__).parents[1] / "data" / "validation" / "moe_runs.yaml",
}

#: Intel Omni-Path 100 series: 100 Gb/s per port (Intel OPA HFI datasheet).
OMNI_PATH_GBPS = 100.0


@dataclass(frozen=True)
class RunResult:
    """One row: the estimate against the measurement (signed error = estimate/measured - 1)."""

    id: str
    family: str
    estimate_s: float | None = None
    measured_s: float | None = None
    measured_derived: bool = False
    notes: tuple[str, ...] = ()
    skipped: str | None = None
    parts: Mapping[str, float] = field(default_factory=dict)
    mfu: float | None = None
    #: The MFU the source publishes (a fraction, its own FLOP count and peak), when it gives one.
    published_mfu: float | None = None
    #: The catalog device the row ran on and the training stack it was priced with (``Rates.for_software``'s
    #: name), where the row could be built: what ``ndcost.io.measured_error`` groups the errors by.
    device: str | None = None
    software: str | None = None
    #: The catalog model the row priced (``model_catalog.catalog_model_of``; None for a model the catalog does not
    #: hold): what ``measured_error.model_error`` groups by.
    model: str | None = None

    @property
    def estimated_mfu(self) -> float | None:
        """The estimate's MFU in the source's own convention: its FLOPs over the estimated step
        (published MFU x measured / estimated step), to compare with :attr:`published_mfu`."""
        if self.published_mfu is None or not self.estimate_s or not self.measured_s:
            return None
        return self.published_mfu * self.measured_s / self.estimate_s

    @property
    def error(self) -> float | None:
        if self.estimate_s is None or not self.measured_s:
            return None
        return self.estimate_s / self.measured_s - 1.0


@dataclass(frozen=True)
class ValidationReport:
    """Every row's result, with mean absolute errors per family and overall."""

    rows: tuple[RunResult, ...]

    @property
    def scored(self) -> tuple[RunResult, ...]:
        return tuple(row for row in self.rows if row.error is not None)

    @property
    def mae(self) -> float:
        """Mean |estimate/measured - 1| over the scored rows (NaN when none)."""
        scored = self.scored
        return sum(abs(row.error) for row in scored) / len(scored) if scored else math.nan

    @property
    def signed_mean(self) -> float:
        """Mean (estimate/measured - 1) over the scored rows: its bias, negative when ndcost is optimistic
        (NaN when none)."""
        scored = self.scored
        return sum(row.error for row in scored) / len(scored) if scored else math.nan

    @property
    def max_abs_error(self) -> float:
        scored = self.scored
        return max(abs(row.error) for row in scored) if scored else math.nan

    @property
    def skipped(self) -> dict[str, str]:
        """The rows not priced, by id, with why."""
        return {row.id: row.skipped for row in self.rows if row.skipped}

    def _families(self) -> dict[str, list[float]]:
        families: dict[str, list[float]] = {}
        for row in self.scored:
            families.setdefault(row.family, []).append(row.error)
        return families

    def family_mae(self) -> dict[str, float]:
        return {name: sum(abs(e) for e in errors) / len(errors) for name, errors in self._families().items()}

    def family_signed_mean(self) -> dict[str, float]:
        """Per family, the mean signed error (negative: ndcost optimistic)."""
        return {name: sum(errors) / len(errors) for name, errors in self._families().items()}

    def table(self) -> str:
        """A markdown table: one line per row, then the MAE and the signed mean per family and overall, and
        the rows not priced, named."""
        with_mfu = any(row.published_mfu is not None for row in self.rows)
        lines = ["| run | family | estimate (s) | measured (s) | error |" + (" MFU est / published |" if with_mfu
                                                                            else "") + " notes |",
                 "|---|---|---:|---:|---:|" + ("---:|" if with_mfu else "") + "---|"]
        for row in self.rows:
            if row.skipped:
                lines.append(f"| {row.id} | {row.family} | - | - | skipped |{' - |' if with_mfu else ''} {row.skipped} |")
                continue
            measured = f"{row.measured_s:.2f}" + ("*" if row.measured_derived else "")
            mfu = ""
            if with_mfu:
                mfu = (f" {100 * row.estimated_mfu:.1f} / {100 * row.published_mfu:.1f} |"
                       if row.published_mfu is not None else " - |")
            lines.append(f"| {row.id} | {row.family} | {row.estimate_s:.2f} | {measured} | "
                         f"{100.0 * row.error:+.1f}% |{mfu} {'; '.join(row.notes)} |")
        lines.append("")
        lines.append("| family | rows | MAE | signed mean |")
        lines.append("|---|---:|---:|---:|")
        signed = self.family_signed_mean()
        for name, mae in self.family_mae().items():
            lines.append(f"| {name} | {len(self._families()[name])} | {100.0 * mae:.1f}% | {100.0 * signed[name]:+.1f}% |")
        if self.scored:
            overall = f"**{100.0 * self.mae:.1f}%** (max {100.0 * self.max_abs_error:.1f}%)"
            lines.append(f"| **all** | {len(self.scored)} | {overall} | **{100.0 * self.signed_mean:+.1f}%** |")
        else:
            lines.append("| **all** | 0 | no row could be priced | - |")
        lines.append("")
        lines.append("signed mean: estimate/measured - 1 averaged with its sign (negative: ndcost is optimistic).")
        if any(row.measured_derived for row in self.scored):
            lines.append("\\* measured iteration time derived from the row's TFLOP/s with Narayanan et al. Eq. 3.")
        for run_id, why in self.skipped.items():
            lines.append(f"skipped (not in the MAE): {run_id}: {why}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


#: The longest key sequence Megatron-LM's 2021 fused softmax kernel takes (fused_softmax.py:L132).
FUSED_SOFTMAX_MAX_KEYS = 2048


def _family(run_id: str) -> str:
    """The run's family: its id without the trailing size and GPU-count tokens."""
    tokens = run_id.split("_")
    while len(tokens) > 1 and re.fullmatch(r"\d+(p\d+)?b|\d+gpu", tokens[-1]):
        tokens.pop()
    return "_".join(tokens)


def _device_name(hardware: Mapping) -> str | None:
    gpu = str(hardware.get("gpu", ""))
    if "A100" in gpu and "80GB" in gpu:
        return "a100-80g"
    if "A100" in gpu and "40GB" in gpu:
        return "a100-40g"
    return None


def _scale_out(hardware: Mapping, per_node: int) -> tuple[float | None, str | None]:
    """Scale-out bytes/s per device from the hardware block's text, with a note."""
    text = str(hardware.get("scale_out", ""))
    links = re.search(r"(\d+)\s*x\s*(\d+)\s*Gb/s", text)
    if links:
        total = int(links.group(1)) * int(links.group(2))
        return total * 1e9 / 8.0 / per_node, f"scale-out {total} Gb/s per node"
    opa = re.search(r"(\d+)\s+OPA links per node", text)
    if opa:
        total = int(opa.group(1)) * OMNI_PATH_GBPS
        return total * 1e9 / 8.0 / per_node, f"scale-out {int(total)} Gb/s per node (Omni-Path)"
    return None, None


def _recompute(entry: Any) -> str | None:
    text = str(_value(entry) or "").strip().lower()
    for option in ("full", "selective", "none"):
        if text.startswith(option):
            return option
    return None


def _zero(entry: Any) -> int | None:
    value = _value(entry)
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if "zero-1-equivalent" in str(value).lower():
        # DeepSpeed's BF16_Optimizer under "stage 0" keeps only its rank's fp32 master partition in the
        # optimizer (microsoft/DeepSpeed@56c522386878df2513ccb548de76b50191ae3af7
        # deepspeed/runtime/bf16_optimizer.py:L147-202): ZeRO-1's sharding of the optimizer states
        return 1
    found = re.search(r"\d", str(value))
    return int(found.group(0)) if found else None


def _precision(entry: Any) -> str | None:
    text = str(_value(entry) or "").lower()
    if "bf16" in text:
        return "bf16"
    if "fp16" in text:
        return "fp16"
    return None


def _eq3_flops(model: Mapping, batch: int) -> float:
    """Narayanan et al. 2021 Eq. 3, with full recompute: 96·B·s·l·h²·(1 + s/6h + V/16lh)."""
    s, l, h, v = (_value(model[key]) for key in ("seq_len", "layers", "hidden", "vocab"))
    return 96.0 * batch * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h))


def software(row: Mapping) -> tuple[str, Overlap | None, str | None]:
    """The training-software generation a row's own text selects (ndcost-side reading; the row
    is not changed): (a :data:`ndcost.spec.rates.SOFTWARE_PRESETS` name, the Overlap, a note or None).

    The rows are 2021-2022 runs (module docstring), so every row is read with that generation's
    software: a ZeRO-3 row whose strategy names DeepSpeed (its ``framework`` or ``note``) ran
    DeepSpeed's 2021 ZeRO-3: "deepspeed-2021" with :data:`ndcost.tables.seconds.DEEPSPEED_2021` (noted on
    the row); any other row Megatron-LM 2021 or a fork of it (Megatron-DeepSpeed, GPT-NeoX),
    without gradient-accumulation fusion: "megatron-2021" with the default Overlap.
    """
    strategy = row.get("strategy") or {}
    text = " ".join(str(_value(strategy.get(key)) or "") for key in ("framework", "note", "zero"))
    if _zero(strategy.get("zero")) == 3 and "deepspeed" in text.lower():
        return "deepspeed-2021", DEEPSPEED_2021, "DeepSpeed 2021 ZeRO-3 (blocking per-parameter fetch)"
    return "megatron-2021", None, None


def gpt_model(model_block: Mapping, run_id: str, *, untied: bool) -> Model:
    """The GPT-style Model of a row's model block: GELU 2-matmul MLP, LayerNorm, biases, learned
    positions (the GPT-2/3 family Megatron-LM trains; GPT-3 has no config.json)."""
    for key in ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len"):
        if _int(model_block.get(key)) is None:
            raise SpecError(key, run_id, "be stated in the model block", model_block.get(key))
    heads = _int(model_block["heads"])
    return Model(
        name=run_id, hidden_size=_int(model_block["hidden"]), num_hidden_layers=_int(model_block["layers"]),
        num_attention_heads=heads,
        num_key_value_heads=_int(model_block.get("kv_heads")) or heads,
        intermediate_size=_int(model_block["ffn_hidden"]), vocab_size=_int(model_block["vocab"]),
        gated_ffn=False, norm="layernorm", attention_bias=True, mlp_bias=True,
        learned_position_embeddings=_int(model_block["seq_len"]), tie_word_embeddings=not untied,
        family="gpt2",
    )


def build_run(row: Mapping, hardware_table: Mapping) -> tuple[Any, Any, Any, float | None, bool, list[str]]:
    """(model, spec, cluster, measured seconds, measured derived?, notes) of one row.

    Raises:
        SpecError: With the reason, when the row lacks what the estimate needs.
    """
    run_id = str(row.get("id", "?"))
    model_block = row.get("model") or {}
    strategy = dict(row.get("strategy") or {})
    notes: list[str] = []
    facts, citation = SOURCE_FACTS.get(run_id, ({}, ""))
    filled = [f"{key}={value}" for key, value in facts.items() if key not in strategy]
    if filled:
        strategy.update({key: value for key, value in facts.items() if key not in strategy})
        notes.append(f"{', '.join(filled)} from {citation.split(':')[0]}")
    model_facts, model_citation = SOURCE_MODEL_FACTS.get(run_id, ({}, ""))
    stated = [f"{key}={value}" for key, value in model_facts.items() if model_block.get(key) is None]
    if stated:
        model_block = {**model_block, **{key: value for key, value in model_facts.items()
                                         if model_block.get(key) is None}}
        notes.append(f"{', '.join(stated)} from {model_citation.split(':')[0]}")
    model = gpt_model(model_block, run_id, untied="untied" in str(model_block.get("note", "")).lower())
    gpus, tp, pp, dp = (_int(strategy.get(key)) for key in ("gpus", "tp", "pp", "dp"))
    for name, value in (("gpus", gpus), ("tp", tp), ("pp", pp), ("dp", dp)):
        if value is None:
            raise SpecError(name, run_id, "be an integer degree in the strategy", strategy.get(name))
    cp, ep = (_int(strategy.get(key)) or 1 for key in ("cp", "ep"))
    if dp * tp * pp * cp != gpus:
        raise SpecError("dp*tp*pp*cp", run_id, f"equal gpus ({gpus})", dp * tp * pp * cp)
    global_batch = _int(strategy.get("global_batch"))
    if global_batch is None:
        raise SpecError("global_batch", run_id, "be a number of sequences", strategy.get("global_batch"))
    micro_batch = _int(strategy.get("micro_batch"))
    if micro_batch is None:
        micro_batch = 1
        notes.append("micro_batch not stated: 1")
    recompute = _recompute(strategy.get("recompute"))
    if recompute is None:
        raise SpecError("recompute", run_id, "be stated (none, selective or full)", strategy.get("recompute"))
    zero = _zero(strategy.get("zero"))
    if zero is None or zero not in (0, 1, 2, 3):
        raise SpecError("zero", run_id, "be a ZeRO stage 0-3", strategy.get("zero"))
    precision = _precision(strategy.get("precision"))
    if precision is None:
        raise SpecError("precision", run_id, "name fp16 or bf16", strategy.get("precision"))
    hardware = hardware_table.get(row.get("hardware"), {}) if isinstance(hardware_table, Mapping) else {}
    device = _device_name(hardware)
    if device is None:
        raise SpecError("hardware", run_id, "name an A100 40GB or 80GB (a 2021 run), or a block that states its "
                        "device and the row its software (docs/examples/h100_runs_in_row.yaml)", row.get("hardware"))

    spec = ExecSpec(
        dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, vpp=_int(strategy.get("vpp")) or 1, micro_batch_size=micro_batch,
        global_batch_size=global_batch, seq_length=_int(model_block["seq_len"]),
        sequence_parallel=bool(_value(strategy.get("sequence_parallel")) or False),
        recompute=recompute, zero_stage=zero, flash_attention=False, overlapped_grad_reduce=False,
        grad_bytes=2 if precision == "fp16" else 4, precision=precision, dropout_bytes=1,
        softmax_bytes=2 if _int(model_block["seq_len"]) <= FUSED_SOFTMAX_MAX_KEYS else 4,
    )
    per_node = _int(hardware.get("gpus_per_node")) or 8
    overrides = {}
    bandwidth, note = _scale_out(hardware, per_node)
    if bandwidth is not None:
        overrides["inter_node_bandwidth"] = bandwidth
        notes.append(note)
    cluster = Cluster(device, gpus, **overrides)

    measured = row.get("measured") or {}
    iteration = measured.get("iteration_s")
    derived = isinstance(iteration, Mapping) and bool(iteration.get("derived"))
    seconds = _value(iteration)
    if not isinstance(seconds, (int, float)):
        tflops = _value(measured.get("tflops_per_gpu"))
        eq3 = "includes recomputation" in str(measured.get("metric_note", "")) or run_id in EQ3_FRAMEWORKS
        if isinstance(tflops, (int, float)) and eq3 and recompute == "full":
            seconds = _eq3_flops(model_block, global_batch) / (tflops * 1e12 * gpus)
            derived = True
            if run_id in EQ3_FRAMEWORKS:
                notes.append(f"TFLOP/s per {EQ3_FRAMEWORKS[run_id].split(' get_flops')[0]}")
        else:
            raise SpecError("measured", run_id, "state iteration_s or TFLOP/s with Eq. 3 accounting", measured)
    return model, spec, cluster, float(seconds), derived, notes


@dataclass(frozen=True)
class BuiltRow:
    """One runs-file row as ``ndcost validate`` prices it: the strategy, the measured step, the
    rates and overlap of its software, and the notes on how it was read."""

    model: Model
    spec: ExecSpec
    cluster: Cluster
    measured_s: float
    derived: bool
    rates: Rates
    overlap: Overlap | None
    notes: tuple[str, ...]
    software: str | None = None    # the stack's Rates.for_software name the row is priced with


def build_row(row: Mapping, hardware_table: Mapping, path: str | PathLike | None, *, rates: Any = None,
              overlap: Overlap | None = None, cluster: Mapping | None = None) -> BuiltRow:
    """A row of the runs file at *path*, read with its facts file where one ships (``run_facts``), as the
    stack it states (``run_rows``: *cluster*, a ``--cluster`` file's options, stands for a row that names no
    hardware), or with the 2021 rules of the module's docstring; validated, with its software's rates
    (*rates* / *overlap* replace them).

    Raises:
        SpecError: With the reason, when the row cannot be priced.
    """
    from ..spec.software_fields import software_fields
    from .run_rows import is_stated, stated_run

    run_id = str(row.get("id", "?"))
    facts = facts_for(path, run_id) if path is not None else None
    changes: Mapping[str, Any] = {}
    if facts is not None:
        built = modern_run(row, hardware_table, facts, gpt_model)
        model, spec, cluster_, measured, derived = built.model, built.spec, built.cluster, built.measured_s, False
        notes, generation, row_overlap, changes = list(built.notes), built.software, built.overlap, built.rates_changes
        note = f"software {generation}" + "".join(f", {k} {v}" for k, v in changes.items())
    elif is_stated(row, hardware_table):
        stated = stated_run(row, hardware_table, gpt_model, cluster)
        model, spec, cluster_, measured, derived = stated.model, stated.spec, stated.cluster, stated.measured_s, False
        notes, generation, row_overlap, changes = list(stated.notes), stated.software, stated.overlap, \
            stated.rates_figures
        note = f"software {generation or 'default'}" + "".join(f", {k} {v}" for k, v in changes.items())
    else:
        model, spec, cluster_, measured, derived, notes = build_run(row, hardware_table)
        generation, row_overlap, note = software(row)
        # the fields the period's software fixes (DeepSpeed 2021's ZeRO-3: one gathered parameter at a time)
        spec = spec.replace(**software_fields(generation, spec.tp, spec.pp, spec.cp, zero_stage=spec.zero_stage))
    validate(model, spec, cluster_)
    if note and (rates is None or overlap is None):
        notes = [*notes, note]
    if rates is None:
        from ..spec.stack_rates import stack_rates

        row_rates = stack_rates(cluster_.device, software=generation, figures=changes, owner=run_id,
                                flags={name: f"the run's {name}" for name in changes}) \
            or Rates.for_device(cluster_.device)
    else:
        # the caller's rates stand for the software's; what the row states of its own run (its fp8 recipe) holds
        sources = {**rates.sources, **{name: f"the run's {name} ({run_id})" for name in changes}}
        row_rates = rates.replace(sources=sources, **changes) if changes else rates
    return BuiltRow(model, spec, cluster_, float(measured), derived, row_rates,
                    row_overlap if overlap is None else overlap, tuple(notes), generation)


def validate_runs(path: str | PathLike, *, rates: Any = None, overlap: Overlap | None = None,
                  cluster: Mapping | None = None) -> ValidationReport:
    """Estimate every row of a runs YAML and compare with its measured iteration time.

    Args:
        path: A YAML file shaped like ``validation/public_runs.yaml``.
        rates: :class:`~ndcost.spec.rates.Rates` for every row (default: each device's).
        overlap: :class:`~ndcost.tables.seconds.Overlap` for every row (default: Overlap()).
        cluster: The cluster options (``ndcost.spec.cluster_options.read_cluster_file``) of every row that
            names no hardware.
    """
    doc = read_mapping(path, "a runs file shaped like validation/public_runs.yaml")
    hardware_table = doc.get("hardware") or {}
    runs = doc.get("runs")
    if not isinstance(hardware_table, Mapping):
        raise SpecError(str(path), "ndcost", "map hardware names to their blocks under 'hardware:'",
                        type(hardware_table).__name__)
    if not isinstance(runs, list) or not all(isinstance(row, Mapping) for row in runs):
        raise SpecError(str(path), "ndcost", "hold a list of runs (mappings with id, model, strategy, measured) "
                        "under 'runs:'", runs if not isinstance(runs, list) else "a list with a non-mapping entry")
    results = []
    for row in runs:
        run_id = str(row.get("id", "?"))
        family = str(row.get("family") or _family(run_id))  # a row may name its model family
        try:
            built = build_row(row, hardware_table, path, rates=rates, overlap=overlap, cluster=cluster)
        except SpecError as exc:
            results.append(RunResult(run_id, family, skipped=str(exc)))
            continue
        result = seconds_estimate(built.model, built.spec, built.cluster, rates=built.rates, overlap=built.overlap)
        published = _value((row.get("measured") or {}).get("mfu"))
        results.append(RunResult(run_id, family, estimate_s=result["step_time"], measured_s=built.measured_s,
                                 measured_derived=built.derived, notes=built.notes, parts=result["parts"],
                                 mfu=result["mfu"], published_mfu=published / 100.0
                                 if isinstance(published, (int, float)) else None,
                                 device=built.cluster.device.name, software=built.software,
                                 model=catalog_model_of(built.model)))
    return ValidationReport(tuple(results))


if __name__ == "__main__":  # python -m ndcost.io.validation PATH
    import sys

    print(validate_runs(sys.argv[1] if len(sys.argv) > 1 else "../shared/validation/public_runs.yaml"))
