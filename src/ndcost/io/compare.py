"""``compare(a, b)``: two strategies side by side -- part by part, stage by stage -- and why one wins.

A planner reading a search wants to know why #1 beat #2 and whether the gap means anything. This
module prices both (or takes their estimates from a search), lays their parts and stages side by
side, says in words what each differing field did to the parts it drives ("the pipeline bubble
halves (vpp 1 -> 2): -101 ms"), and calls the two **tied** when the gap is inside ndcost's measured
error for that device and stack (``ndcost.io.measured_error``: the validation's mean absolute error,
never a hand constant).

The attribution is by the parts each field drives (:data:`PART_CAUSES`); the numbers are the
estimates' own parts, so the sentences sum to the gap.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import SpecError
from ..kernels.columns import PART_NAMES
from ..spec.exec_spec import ExecSpec
from .measured_error import MeasuredError, measured_error

__all__ = ["Comparison", "compare", "PART_CAUSES", "strategy_words"]

#: Each part of the step in words.
PART_WORDS: Mapping[str, str] = {
    "fw_compute": "forward compute", "bw_compute": "backward compute", "recompute": "recompute",
    "dp_comm": "data-parallel traffic", "dp_reduce": "the gradient reduction", "tp_comm": "tensor-parallel traffic",
    "ep_comm": "expert all-to-all", "cp_comm": "context-parallel traffic", "pp_comm": "pipeline traffic",
    "bubble": "the pipeline bubble",
}

#: Where the layers sit: what every per-layer part of the straggler stage moves with.
_PLACEMENT = ("pp", "vpp", "offset", "pp_partition")
#: The ExecSpec fields that drive each part (a field's difference is named beside the parts it moves).
PART_CAUSES: Mapping[str, tuple[str, ...]] = {
    "fw_compute": ("tp", "micro_batch_size", "precision", "cp", "ep", "sequence_parallel", "tp_overlap") + _PLACEMENT,
    "bw_compute": ("tp", "micro_batch_size", "precision", "cp", "ep", "sequence_parallel", "tp_overlap") + _PLACEMENT,
    "recompute": ("recompute", "selective_rule") + _PLACEMENT,
    "dp_comm": ("dp", "zero_stage", "overlapped_grad_reduce", "tp", "cp", "micro_batch_num") + _PLACEMENT,
    "dp_reduce": ("dp", "zero_stage", "overlapped_grad_reduce", "tp", "cp") + _PLACEMENT,
    "tp_comm": ("tp", "sequence_parallel", "tp_overlap", "micro_batch_size") + _PLACEMENT,
    "ep_comm": ("ep", "moe_dispatcher", "micro_batch_size", "tp") + _PLACEMENT,
    "cp_comm": ("cp", "cp_algo") + _PLACEMENT,
    "pp_comm": ("pp", "vpp", "micro_batch_num", "micro_batch_size", "pp_schedule"),
    "bubble": ("pp", "vpp", "micro_batch_num", "pp_schedule", "seq_split", "offset", "pp_partition", "recompute"),
}

#: Fields a strategy states by construction: not differences worth naming.
_SILENT = ("global_batch_size", "seq_length", "full_recompute", "selective_recompute", "selective_switches")


def strategy_words(spec: ExecSpec) -> str:
    """A strategy in one line: its degrees and what sets it apart from the defaults."""
    words = [f"dp={spec.dp} tp={spec.tp} pp={spec.pp} vpp={spec.vpp} cp={spec.cp} ep={spec.ep} "
             f"mbs={spec.micro_batch_size} m={spec.resolved_micro_batch_num}"]
    option = spec.recompute_option
    words.append("recompute=" + ("per-layer plan" if option == "ranges" else option))
    if spec.offset is not None:
        words.append("offset=" + _value_words("offset", spec.offset))
    if spec.pp_partition is not None:
        words.append("pp_partition=" + _value_words("pp_partition", spec.pp_partition))
    return " ".join(words)


def _value_words(name: str, value: Any) -> str:
    if name == "recompute":
        return "per-layer plan" if isinstance(value, tuple) else str(value)
    if name in ("offset", "pp_partition") and value is not None:
        rows = value if value and isinstance(value[0], tuple) else (value,)
        return "|".join(",".join(map(str, row)) for row in rows)
    return str(value)


def _cause_words(name: str, va: Any, vb: Any) -> str:
    """A differing field as a cause: a layout in words (its offsets are long), anything else as A -> B."""
    if name in ("offset", "pp_partition"):
        if va is None:
            return "layout even split -> rebalanced"
        return "layout rebalanced -> even split" if vb is None else "layout rebalanced differently"
    return f"{name} {_value_words(name, va)} -> {_value_words(name, vb)}"


def _field_differences(a: ExecSpec, b: ExecSpec) -> list[tuple[str, Any, Any]]:
    out = []
    for f in dataclasses.fields(ExecSpec):
        if f.name in _SILENT:
            continue
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if va != vb:
            out.append((f.name, va, vb))
    ma, mb = a.resolved_micro_batch_num, b.resolved_micro_batch_num
    if ma != mb and not any(name == "micro_batch_num" for name, _, _ in out):
        out.append(("micro_batch_num", ma, mb))
    return out


def _change_words(before: float, after: float) -> str:
    if before == 0.0:
        return "appears"
    if after == 0.0:
        return "disappears"
    ratio = after / before
    for target, words in ((2.0, "doubles"), (0.5, "halves"), (3.0, "triples"), (1.0 / 3.0, "falls to a third"),
                          (4.0, "quadruples"), (0.25, "falls to a quarter")):
        if abs(ratio / target - 1.0) < 0.05:
            return words
    return f"grows {ratio:.2f}x" if ratio > 1.0 else f"shrinks to {ratio:.2f}x"


@dataclass(frozen=True)
class Comparison:
    """Strategy B against strategy A: the gap, each part's and stage's difference, why, and whether it is a tie.

    Attributes:
        a, b: The two strategies; ea, eb their estimates (same units).
        gap: ``eb.step_time - ea.step_time`` (positive: B is slower).
        relative_gap: The gap over the faster step time.
        error: ndcost's measured error for the device and stack (``measured_error``).
        tied: Whether the relative gap is inside ``error.mae``.
        differences: (field, A's value, B's value) for every ExecSpec field that differs.
        reasons: Sentences: each part that moved, by how much, and the differing fields that drive it.
    """

    a: ExecSpec
    b: ExecSpec
    ea: Any
    eb: Any
    error: MeasuredError
    differences: tuple[tuple[str, Any, Any], ...]
    reasons: tuple[str, ...] = field(default=())

    @property
    def gap(self) -> float:
        return self.eb.step_time - self.ea.step_time

    @property
    def relative_gap(self) -> float:
        faster = min(self.ea.step_time, self.eb.step_time)
        return self.gap / faster if faster > 0 else math.nan

    @property
    def tied(self) -> bool:
        return bool(abs(self.relative_gap) <= self.error.mae)

    def part_differences(self) -> dict[str, tuple[float, float, float]]:
        """Part -> (A, B, B - A)."""
        return {name: (self.ea.parts[name], self.eb.parts[name], self.eb.parts[name] - self.ea.parts[name])
                for name in PART_NAMES}

    def verdict(self) -> str:
        """One sentence: which is faster, by how much, and whether the gap means anything."""
        unit = _unit(self.ea.units)
        gap = f"{_fmt(self.gap, self.ea.units)} {unit} ({100 * self.relative_gap:+.2f}%)"
        if self.tied:
            return (f"B - A = {gap}: TIED -- inside ndcost's measured error, {self.error.describe()}")
        faster = "A" if self.gap > 0 else "B"
        return f"B - A = {gap}: {faster} is faster, outside ndcost's measured error ({self.error.describe()})"

    def lines(self) -> list[str]:
        """The comparison as text: the strategies, the verdict, why, the parts, the stages, the memory."""
        units = self.ea.units
        unit = _unit(units)
        out = [f"A: {strategy_words(self.a)}  step {_fmt(self.ea.step_time, units)} {unit}",
               f"B: {strategy_words(self.b)}  step {_fmt(self.eb.step_time, units)} {unit}",
               self.verdict()]
        if self.differences:
            out.append("differs in: " + "; ".join(_cause_words(name, va, vb) for name, va, vb in self.differences))
        else:
            out.append("the same strategy")
        if self.reasons:
            out.append("why:")
            out += [f"  - {reason}" for reason in self.reasons]
        out.append(f"parts ({unit}):")
        width = max(len(name) for name in PART_NAMES)
        out.append(f"  {'part':<{width}} {'A':>14} {'B':>14} {'B - A':>14}")
        for name, (va, vb, delta) in self.part_differences().items():
            out.append(f"  {name:<{width}} {_fmt(va, units):>14} {_fmt(vb, units):>14} {_fmt(delta, units):>14}")
        out.append(f"stages (each stage's busy time over the step, {unit}):")
        out.append(f"  {'stage':>5} {'A':>14} {'B':>14} {'B - A':>14}")
        sa, sb = self.ea.stage_times, self.eb.stage_times
        for i in range(max(len(sa), len(sb))):
            ta = sa[i] if i < len(sa) else math.nan
            tb = sb[i] if i < len(sb) else math.nan
            cells = [_fmt(t, units) if t == t else "-" for t in (ta, tb, tb - ta)]
            out.append(f"  {i:>5} " + " ".join(f"{c:>14}" for c in cells))
        if self.ea.memory is not None and self.eb.memory is not None:
            ma, mb = self.ea.memory, self.eb.memory
            out.append(f"memory: reserved peak A {ma.peak_reserved / 2**30:.2f} GiB, B {mb.peak_reserved / 2**30:.2f} "
                       f"GiB; headroom A {ma.headroom / 2**30:.2f} GiB, B {mb.headroom / 2**30:.2f} GiB")
        return out

    def to_dict(self) -> dict:
        return {
            "a": {"strategy": strategy_words(self.a), "estimate": self.ea.to_dict()},
            "b": {"strategy": strategy_words(self.b), "estimate": self.eb.to_dict()},
            "gap": self.gap, "relative_gap": self.relative_gap, "tied": self.tied,
            "measured_error": self.error.to_dict(),
            "differences": [{"field": n, "a": _value_words(n, va), "b": _value_words(n, vb)}
                            for n, va, vb in self.differences],
            "reasons": list(self.reasons),
            "parts": {name: {"a": va, "b": vb, "difference": d} for name, (va, vb, d) in
                      self.part_differences().items()},
        }

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _unit(units: str) -> str:
    return "ms" if units in ("seconds", "nd_ms") else "ND units"


def _fmt(value: float, units: str) -> str:
    if units == "seconds":
        return f"{value * 1e3:.1f}"
    if units == "nd_ms":
        return f"{value:.1f}"
    return f"{value:.4g}"


def _reasons(ea: Any, eb: Any, differences: list[tuple[str, Any, Any]], units: str) -> list[str]:
    """Each part that moved by more than 0.1% of the faster step, largest first, with the differing
    fields that drive it."""
    differing = {name: (va, vb) for name, va, vb in differences}
    floor = 1e-3 * min(ea.step_time, eb.step_time)
    moved = sorted(((eb.parts[n] - ea.parts[n], n) for n in PART_NAMES), key=lambda item: -abs(item[0]))
    out = []
    for delta, name in moved:
        if abs(delta) <= floor or not math.isfinite(delta):
            continue
        causes = list(dict.fromkeys(_cause_words(c, *differing[c]) for c in PART_CAUSES[name] if c in differing))
        because = f" ({', '.join(causes)})" if causes else ""
        sign = "+" if delta > 0 else "-"
        out.append(f"{PART_WORDS[name]} {_change_words(ea.parts[name], eb.parts[name])}{because}: "
                   f"{sign}{_fmt(abs(delta), units)} {_unit(units)}")
    return out


def _priced(item: Any, model: Any, cluster: Any, units: str, ratios: Any, rates: Any,
            software: str | None = None) -> tuple[ExecSpec, Any]:
    """(spec, estimate) of a strategy given as an ExecSpec (run on *software*'s stack), a search's Ranked or a
    (spec, Estimate) pair."""
    if isinstance(item, ExecSpec):
        if model is None or cluster is None:
            raise SpecError("model/cluster", "compare", "be given to price an ExecSpec", None)
        from ..price.estimate import as_cluster, as_model, estimate
        from ..price.software_arg import apply_software

        cluster = as_cluster(cluster, item)
        model, item, rates = apply_software(software, as_model(model), item, cluster, rates, owner="compare",
                                            units=units)
        return item, estimate(model, item, cluster, units=units, ratios=ratios, rates=rates)
    spec, priced = (getattr(item, "spec", None), getattr(item, "estimate", None)) if not isinstance(item, tuple) \
        else (item + (None, None))[:2]
    if not isinstance(spec, ExecSpec) or not hasattr(priced, "parts"):
        raise SpecError("a/b", "compare", "be an ExecSpec, a search's ranked strategy or an (ExecSpec, Estimate) "
                        "pair", type(item).__name__)
    return spec, priced


def compare(a: Any, b: Any, model: Any = None, cluster: Any = None, *, units: str = "seconds", ratios: Any = None,
            rates: Any = None, software: str | None = None) -> Comparison:
    """Strategy *b* against strategy *a*: each an ExecSpec (priced on *model* and *cluster*), a search's
    ranked strategy (``search(...).results[i]``) or an (ExecSpec, Estimate) pair.

    *software* names the training stack an ExecSpec runs on (its strategy fields and rates, as
    :func:`ndcost.estimate`'s; a search's ranked strategy is priced already) and whose measured error decides a
    tie (default: the device's error over every stack).

    Raises:
        SpecError: For a strategy that cannot be priced, or two estimates in different units.
    """
    sa, ea = _priced(a, model, cluster, units, ratios, rates, software)
    sb, eb = _priced(b, model, cluster, units, ratios, rates, software)
    if ea.units != eb.units:
        raise SpecError("units", "compare", "be the same for both strategies", (ea.units, eb.units))
    device = cluster if cluster is not None else "unknown"
    error = measured_error(device, software)
    differences = _field_differences(sa, sb)
    return Comparison(sa, sb, ea, eb, error, tuple(differences), tuple(_reasons(ea, eb, differences, ea.units)))
