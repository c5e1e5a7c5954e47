"""Check the memory model against published peak-memory measurements (``ndcost validate --memory``).

The rows are ``data/validation/h100_memory_facts.yaml``: each a published run (model, strategy,
framework, hardware) with its peak memory and which figure that is -- ``reserved``
(torch.cuda.max_memory_reserved: what the caching allocator holds) or ``allocated`` / ``active``
(the tensors). The estimate compared is the matching one: :attr:`MemoryEstimate.peak_reserved` or
:attr:`MemoryEstimate.peak_allocated` of the fullest stage. A row whose figure's kind is unknown is
listed, not scored.

The rows are torchtitan's (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md), read with
torchtitan's own settings at that commit (each rule below states its source in the facts file):
FSDP2 over ``fsdp`` ranks with the parameters kept sharded in fp32, gradients reduced in fp32, AdamW's
two fp32 states (ZeRO-3 with 4-byte parameters, gradients and states and no separate master copy);
per-op SAC (:mod:`ndcost.spec.torchtitan_sac`) or full recompute; torchao float8 as fp8; a pipeline split
into as many micro-batches as stages (torchtitan's default ``pipeline_parallel_microbatches``); the
Grand Teton H100 (96 GB HBM2e).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..spec.device import Cluster
from ..errors import SpecError
from ..spec.exec_spec import ExecSpec
from ..spec.model import Model
from ..spec.software_fields import TORCHTITAN_LOGIT_BYTES, TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES, software_fields
from .run_facts import GRAND_TETON_H100, figure_int, figure_value

__all__ = ["MEMORY_FACTS", "MemoryRow", "MemoryReport", "validate_memory", "build_memory_run",
           "TORCHTITAN_LOGIT_BYTES", "TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES"]

MEMORY_FACTS = Path(__file__).parents[1] / "data" / "validation" / "h100_memory_facts.yaml"
_GIB = 2**30


@dataclass(frozen=True)
class MemoryRow:
    """One published peak against the estimate (GiB); error = estimate / measured - 1."""

    id: str
    kind: str
    measured_gib: float
    estimate_gib: float | None = None
    allocated_gib: float | None = None
    skipped: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def error(self) -> float | None:
        if self.estimate_gib is None:
            return None
        return self.estimate_gib / self.measured_gib - 1.0


@dataclass(frozen=True)
class MemoryReport:
    rows: tuple[MemoryRow, ...]

    @property
    def scored(self) -> tuple[MemoryRow, ...]:
        return tuple(row for row in self.rows if row.error is not None)

    @property
    def mae(self) -> float:
        scored = self.scored
        return sum(abs(r.error) for r in scored) / len(scored) if scored else math.nan

    @property
    def max_abs_error(self) -> float:
        scored = self.scored
        return max(abs(r.error) for r in scored) if scored else math.nan

    @property
    def signed_mean(self) -> float:
        """Mean signed error (negative: ndcost under-estimates the memory); NaN when no row is scored."""
        scored = self.scored
        return sum(r.error for r in scored) / len(scored) if scored else math.nan

    def table(self) -> str:
        lines = ["| run | figure | estimate (GiB) | measured (GiB) | error | notes |", "|---|---|---:|---:|---:|---|"]
        for row in self.rows:
            figure = f"{row.kind} peak"      # the memory vocabulary's name of the figure compared
            if row.skipped:
                lines.append(f"| {row.id} | {figure} | - | {row.measured_gib:.1f} | skipped | {row.skipped} |")
                continue
            lines.append(f"| {row.id} | {figure} | {row.estimate_gib:.1f} | {row.measured_gib:.1f} | "
                         f"{100 * row.error:+.1f}% | {'; '.join(row.notes)} |")
        if self.scored:
            lines += ["", f"**{len(self.scored)} rows: {100 * self.mae:.1f}% mean absolute error "
                          f"(max {100 * self.max_abs_error:.1f}%), signed mean {100 * self.signed_mean:+.1f}%**"]
        else:
            lines += ["", "**no row could be priced**"]
        lines += [f"skipped (not in the error): {row.id}: {row.skipped}" for row in self.rows if row.skipped]
        return "\n".join(lines)


def _text(entry: Any) -> str:
    value = figure_value(entry)
    return "" if value is None or value is False else str(value).lower()


def build_memory_run(row: Mapping) -> tuple[Model, ExecSpec, Cluster, list[str]]:
    """(model, spec, cluster, notes) of one torchtitan row."""
    from ..spec.torchtitan_sac import torchtitan_op_census

    run_id = str(row.get("id", "?"))
    notes: list[str] = []
    catalog = (row.get("model") or {}).get("catalog")
    if not catalog:
        raise SpecError("model.catalog", run_id, "name a catalog model", catalog)
    model = Model.from_catalog(catalog)
    st = row.get("strategy") or {}
    gpus = figure_int(st.get("gpus"))
    dp, tp, pp, cp = (figure_int(st.get(key)) or 1 for key in ("fsdp", "tp", "pp", "cp"))
    local, seq = figure_int(st.get("local_batch")), figure_int(st.get("seq_len"))
    if gpus is None or local is None or seq is None or dp * tp * pp * cp != gpus:
        raise SpecError("strategy", run_id, "state gpus = fsdp·tp·pp·cp, local_batch and seq_len",
                        (gpus, dp, tp, pp, cp, local, seq))
    ac = _text(st.get("activation_checkpointing"))
    fields: dict[str, Any] = {}
    if ac.startswith("selective") and "op" in ac:
        model = model.with_census(torchtitan_op_census(model))
        fields.update(recompute="selective", selective_rule="hyperparallel")
    elif ac.startswith("full"):
        fields["recompute"] = "full"
    else:
        raise SpecError("activation_checkpointing", run_id, "be selective (op) or full", ac)
    schedule = _text(st.get("pp_schedule"))
    micro = local
    if pp > 1:
        micro = max(1, local // pp)    # torchtitan's default: as many micro-batches as stages
        notes.append(f"{local // micro} micro-batches of {micro} (torchtitan's default: one per stage)")
        fields["pp_schedule"] = "interleaved" if "interleaved" in schedule else "1f1b"
        notes.append("FSDP2 under PP: bf16 params unsharded, fp32 gradients accumulated unsharded")
        if fields["pp_schedule"] == "interleaved":
            fields["vpp"] = 2            # torchtitan's Interleaved1F1B: two stages per rank by default
    if cp > 1:
        notes.append("CP: PyTorch's all-gather ring (torchtitan's default rotate method)")
    # what torchtitan fixes for this strategy: FSDP2's widths, its loss, torchao's casts, its CP ring
    fields.update(software_fields("torchtitan-compile", tp, pp, cp))
    spec = ExecSpec(dp=dp, tp=tp, pp=pp, cp=cp, micro_batch_size=micro, global_batch_size=local * dp,
                    seq_length=seq, precision="fp8" if _text(st.get("float8")).startswith("torchao") else "bf16",
                    **fields)
    hardware = str((row.get("hardware") or {}).get("gpu", "")).lower()
    overrides = dict(GRAND_TETON_H100) if "hbm2e" in hardware else {}
    device = "h200" if "h200" in hardware else "h100-sxm"
    return model, spec, Cluster(device, gpus, **overrides), notes


def validate_memory(path: str | Path = MEMORY_FACTS) -> MemoryReport:
    """Estimate the peak memory of every row of a memory facts file and compare."""
    from ..price.estimate import estimate
    from ..files import read_mapping

    doc = read_mapping(path, "a peak-memory facts file (data/validation/h100_memory_facts.yaml)")
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise SpecError(str(path), "ndcost", "hold a list of rows under 'rows:'", type(rows).__name__)
    out = []
    for row in rows:
        figure = row.get("figure") or {}
        run_id, kind = str(row.get("id", "?")), str(figure.get("kind"))
        measured = float(figure.get("value_gib"))
        if kind not in ("reserved", "allocated", "active"):
            out.append(MemoryRow(run_id, kind, measured, skipped="the source does not say which figure it is"))
            continue
        try:
            model, spec, cluster, notes = build_memory_run(row)
            memory = estimate(model, spec, cluster).memory
        except SpecError as exc:
            out.append(MemoryRow(run_id, kind, measured, skipped=str(exc)))
            continue
        value = memory.peak_reserved if kind == "reserved" else memory.peak_allocated
        out.append(MemoryRow(run_id, kind, measured, value / _GIB, memory.peak_allocated / _GIB, notes=tuple(notes)))
    return MemoryReport(tuple(out))
