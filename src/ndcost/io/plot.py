"""Pictures where a picture says more: the Pareto front of a search, the parts of the
top strategies, memory per stage, and a pipeline timeline (matplotlib, an optional extra)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import SpecError
from .timeline import pipeline_timeline  # noqa: F401  (re-exported: its documented home before ndcost.io.timeline)

__all__ = ["plot_pareto", "plot_parts", "plot_memory", "plot_timeline", "pipeline_timeline", "memory_stack"]

_PART_COLOURS = {
    "fw_compute": "#6a3d9a", "bw_compute": "#9e7cc1", "recompute": "#cab2d6", "dp_comm": "#ff7f00",
    "dp_reduce": "#fdbf6f", "tp_comm": "#e31a1c", "ep_comm": "#1f78b4", "cp_comm": "#1b9e77",
    "pp_comm": "#33a02c", "bubble": "#b2df8a",
}


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - depends on the environment
        raise SpecError("plot", "ndcost", "have matplotlib installed (pip install 'ndcost[plot]')", None) from None
    return plt


def _save(fig: Any, path: str) -> str:
    if not str(path).lower().endswith((".png", ".svg")):
        raise SpecError("output", "ndcost plot", "end in .png or .svg", path)
    from ..files import output_path

    import matplotlib.pyplot as plt

    try:
        fig.savefig(output_path(path, "a plot"), dpi=120, bbox_inches="tight")
    except OSError as exc:
        raise SpecError(str(path), "ndcost plot", f"be writable (a plot): {exc.strerror or exc}", str(path)) from None
    finally:
        plt.close(fig)
    return str(path)


def _scale(units: str) -> tuple[float, str]:
    return (1.0, "s") if units == "seconds" else (1.0, "ND units" if units == "nd" else "ms")


def _legend_outside(ax: Any) -> None:
    """The legend right of the axes, where it covers no data."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def plot_pareto(result: Any, path: str) -> str:
    """Every fitting candidate's step time against its reserved peak, the Pareto front highlighted, the
    device's HBM and the usable HBM (the HBM less each strategy's fixed costs: a band where the fixed
    costs differ) as lines; candidates that do not fit are left out (counted in the title)."""
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    reserved, held = result.reserved_memory, result.peak_memory
    fits = np.isfinite(result.step_time) & np.isfinite(held) & (held <= result.capacity)
    scale, unit = _scale(result.units)
    ax.scatter(reserved[fits] / 2**30, result.step_time[fits] * scale, s=6, alpha=0.3, color="grey",
               label="fits")
    front = [(reserved[i] / 2**30, t * scale) for t, _, i in result.pareto]
    if front:
        xs, ys = zip(*sorted(front))
        ax.plot(xs, ys, "o-", color="#e31a1c", label="Pareto front")
    capacity = result.capacity / 2**30
    ax.axvline(capacity, color="black", linestyle="--", label=f"HBM {capacity:.1f} GiB")
    if fits.any():
        usable = (result.capacity - (held[fits] - reserved[fits])) / 2**30     # HBM less each one's fixed costs
        low, high = float(usable.min()), float(usable.max())
        label = f"usable HBM {low:.1f} GiB" if high - low < 0.05 else f"usable HBM {low:.1f}-{high:.1f} GiB"
        ax.axvspan(low, max(high, low + 0.02), color="#1f78b4", alpha=0.25, label=label + " (HBM less fixed costs)")
    ax.set_xlabel("reserved peak per device (GiB)")
    ax.set_ylabel(f"step time ({unit})")
    left_out = int((np.isfinite(result.step_time) & ~fits).sum())
    ax.set_title(f"{result.space_size} candidates, {result.fitting} fit; {left_out} priced that do not fit "
                 f"are left out", fontsize=9)
    _legend_outside(ax)
    return _save(fig, path)


def plot_parts(ranked: Sequence[Any], path: str) -> str:
    """Stacked parts of each strategy of a top list."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(ranked) + 2), 4.5))
    labels = [f"#{i + 1}\ndp{r.spec.dp} tp{r.spec.tp}\npp{r.spec.pp} vpp{r.spec.vpp} ep{r.spec.ep}\n"
              f"{'per-layer' if r.spec.recompute_option == 'ranges' else r.spec.recompute_option}"
              f"{' rebal.' if getattr(r, 'rebalanced', False) else ''}" for i, r in enumerate(ranked)]
    bottoms = [0.0] * len(ranked)
    units = ranked[0].estimate.units if ranked else "seconds"
    for part, colour in _PART_COLOURS.items():
        values = [r.estimate.parts[part] for r in ranked]
        ax.bar(labels, values, bottom=bottoms, color=colour, label=part)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.set_ylabel(f"step time ({_scale(units)[1]})")
    _legend_outside(ax)
    return _save(fig, path)


def memory_stack(memory: Any) -> list[tuple[str, list[float]]]:
    """The parts a device holds per stage, bottom to top, in bytes, named in the memory vocabulary
    (``ndcost.tables.memory.MEMORY_FIGURES``): the fixed costs (CUDA context, workspaces, NCCL; ND's
    safety reserve in ND's units), the tensors' parts (their sum is the stage's allocated peak) and the
    caching allocator's slack over them (up to the reserved peak; none in ND's units) -- so every bar
    above the fixed costs is the stage's reserved peak in its usable HBM, and the fullest stage's bar
    reaches the HBM less the headroom."""
    from ..tables.memory_words import STAGE_COLUMNS

    stages = memory.stages
    what = "ND's safety reserve" if memory.slack == 1.0 else "CUDA context, workspaces, NCCL"
    stack = [(f"fixed costs ({what})", [memory.fixed_bytes] * len(stages))]
    stack += [(name, [getattr(stage, name) for stage in stages]) for name in STAGE_COLUMNS[:-2]]
    if memory.slack != 1.0:
        allocated = [stage.total - stage.reserve for stage in stages]
        stack.append(("allocator slack (reserved peak - allocated peak)",
                      [a * (memory.slack - 1.0) for a in allocated]))
    return stack


def plot_memory(estimate: Any, path: str, capacity_bytes: float | None = None) -> str:
    """Per-stage memory, stacked by part (:func:`memory_stack`), with the HBM and the usable HBM (the
    HBM less the fixed costs) as lines; the legend right of the bars."""
    plt = _pyplot()
    memory = estimate.memory
    stages = memory.stages
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(stages) + 4), 4.5))
    bottoms = [0.0] * len(stages)
    for name, parts in memory_stack(memory):
        values = [value / 2**30 for value in parts]
        ax.bar(range(len(stages)), values, bottom=bottoms, label=name)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    capacity = memory.capacity_bytes if capacity_bytes is None else capacity_bytes
    if capacity and capacity != float("inf"):
        ax.axhline(capacity / 2**30, color="black", linestyle="--", label=f"HBM {capacity / 2**30:.1f} GiB")
        usable = (capacity - memory.fixed_bytes) / 2**30
        ax.axhline(usable, color="#1f78b4", linestyle=":", label=f"usable HBM {usable:.1f} GiB "
                   f"(headroom {memory.headroom / 2**30:.1f} GiB)")
    ax.set_xticks(range(len(stages)))        # one tick per stage, not matplotlib's fractional ones
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("GiB")
    _legend_outside(ax)
    return _save(fig, path)


@dataclass(frozen=True)
class _Drawn:
    """A bounded timeline as drawn: each steady-state band shortened; *regions* (displayed start, end, time
    left out up to its end) say how to read the axis."""

    events: tuple
    bands: tuple
    regions: tuple = ()


def _compressed(timeline: Any) -> _Drawn:
    """The timeline with its k-th steady-state band (one per stage, the same length on every stage) drawn
    at most half as long as what is drawn one by one, and everything after it moved earlier by what that
    leaves out -- the same on every stage, so the stages stay aligned."""
    per_stage: dict[int, list] = {}
    for stage, start, end, count in timeline.bands:
        per_stage.setdefault(stage, []).append((start, end, count))
    if not per_stage:
        return _Drawn(timeline.events, ())
    kinds = len(next(iter(per_stage.values())))
    lengths = [max(bands[k][1] - bands[k][0] for bands in per_stage.values()) for k in range(kinds)]
    rest = max(end for *_, end in timeline.events) - sum(lengths)
    hidden = [max(0.0, length - 0.5 * rest / kinds) for length in lengths]
    before = [sum(hidden[:k]) for k in range(kinds + 1)]    # time left out before band k (before[k+1]: after it)

    def shift(stage: int, start: float) -> float:
        # an event is moved by the bands that end at or before its start (one ends where the next begins)
        return before[sum(1 for _, end, _ in per_stage.get(stage, ()) if start >= end)]

    events = tuple((stage, micro, op, start - shift(stage, start), end - shift(stage, start))
                   for stage, micro, op, start, end in timeline.events)
    bands, regions = [], []
    for k in range(kinds):
        drawn = [(stage, bands_[k][0] - before[k], bands_[k][1] - before[k + 1], bands_[k][2])
                 for stage, bands_ in per_stage.items()]
        bands += drawn
        regions.append((min(b[1] for b in drawn), max(b[2] for b in drawn), before[k + 1]))
    return _Drawn(events, tuple(bands), tuple(regions) if before[-1] > 0.0 else ())


def _true_time(regions: tuple):
    """A tick formatter reading true time off an axis whose *regions* are shortened (blank inside them)."""
    def label(x: float, _: Any) -> str:
        hidden = 0.0
        for low, high, after in regions:
            if low < x < high:
                return ""
            if x >= high:
                hidden = after
        return f"{x + hidden:g}"
    return label


def plot_timeline(estimate: Any, spec: Any, path: str) -> str:
    """Which micro-batch runs where, when: a Gantt chart of one step's pipeline, its first and last
    micro-batches drawn one by one and the steady state between as one band per stage
    (:func:`ndcost.io.timeline.bounded_timeline`), so any step draws in bounded time and memory."""
    from .timeline import bounded_timeline

    plt = _pyplot()
    compute = estimate.parts["fw_compute"] + estimate.parts["bw_compute"] + estimate.parts["recompute"]
    forward_share = estimate.parts["fw_compute"] / compute if compute else 1.0 / 3.0
    m = spec.resolved_micro_batch_num
    # stage_times hold each stage's busy time over the step: a micro-batch's share of it
    forward = [t / m * forward_share for t in estimate.stage_times]
    backward = [t / m * (1.0 - forward_share) for t in estimate.stage_times]
    timeline = _compressed(bounded_timeline(forward, backward, m, spec.schedule))
    p = len(forward)
    fig, ax = plt.subplots(figsize=(11, 0.5 * p + 1.8))
    for op, colour, label in (("F", "#1f78b4", "forward"), ("B", "#33a02c", "backward")):
        for stage in range(p):
            spans = [(start, end - start) for s, _, o, start, end in timeline.events if s == stage and o == op]
            ax.broken_barh(spans, (stage - 0.4, 0.8), facecolors=colour, edgecolor="white", linewidth=0.3,
                           label=label if stage == 0 else None)
    if len(timeline.events) <= 400 and m <= 1000:     # numbers only where they can be read
        for stage, micro, _, start, end in timeline.events:
            if end > start:
                ax.text((start + end) / 2, stage, str(micro), ha="center", va="center", fontsize=6, color="white")
    unit = _scale(estimate.units)[1]
    for i, (stage, start, end, count) in enumerate(timeline.bands):
        ax.broken_barh([(start, end - start)], (stage - 0.4, 0.8), facecolors="#dddddd", edgecolor="grey",
                       hatch="//", label=f"steady state: {count:,} more micro-batches" if i == 0 else None)
    if timeline.regions:
        # the bands are drawn shorter than they last: the axis reads true time on both sides of each
        from matplotlib.ticker import FuncFormatter

        ax.xaxis.set_major_formatter(FuncFormatter(_true_time(timeline.regions)))
        left_out = timeline.regions[-1][2]
        ax.text(0.5, -0.22, f"steady state drawn shortened ({left_out:,.6g} {unit} left out; the axis reads "
                f"true time either side)", transform=ax.transAxes, ha="center", va="top", fontsize=7)
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"stage {s}" for s in range(p)])
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    ax.set_title(f"{m:,} micro-batches ({spec.schedule}" + (", drawn as 1F1B" if spec.schedule not in ("1f1b", "gpipe")
                                                           else "") + ")", fontsize=9)
    _legend_outside(ax)
    return _save(fig, path)
