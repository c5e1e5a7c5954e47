"""Pictures where a picture says more: the Pareto front of a search, the parts of the
top strategies, memory per stage, and a pipeline timeline (matplotlib, an optional extra)."""
from __future__ import annotations

from typing import Any, Sequence

from ..errors import SpecError

__all__ = ["plot_pareto", "plot_parts", "plot_memory", "plot_timeline", "pipeline_timeline"]

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

    fig.savefig(output_path(path, "a plot"), dpi=120, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return str(path)


def _scale(units: str) -> tuple[float, str]:
    return (1.0, "s") if units == "seconds" else (1.0, "ND units" if units == "nd" else "ms")


def plot_pareto(result: Any, path: str) -> str:
    """Every fitting candidate's step time against its peak memory, the Pareto front highlighted."""
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ok = np.isfinite(result.step_time) & np.isfinite(result.peak_memory)
    scale, unit = _scale(result.units)
    ax.scatter(result.peak_memory[ok] / 2**30, result.step_time[ok] * scale, s=6, alpha=0.3, color="grey",
               label="priced")
    front = [(m / 2**30, t * scale) for t, m, _ in result.pareto]
    if front:
        xs, ys = zip(*sorted(front))
        ax.plot(xs, ys, "o-", color="#e31a1c", label="Pareto front")
    ax.set_xlabel("peak memory per device (GiB)")
    ax.set_ylabel(f"step time ({unit})")
    ax.set_title(f"{result.space_size} candidates, {result.fitting} fit")
    ax.legend()
    return _save(fig, path)


def plot_parts(ranked: Sequence[Any], path: str) -> str:
    """Stacked parts of each strategy of a top list."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(ranked) + 2), 4.5))
    labels = [f"#{i + 1}\ndp{r.spec.dp} tp{r.spec.tp}\npp{r.spec.pp} ep{r.spec.ep}" for i, r in enumerate(ranked)]
    bottoms = [0.0] * len(ranked)
    units = ranked[0].estimate.units if ranked else "seconds"
    for part, colour in _PART_COLOURS.items():
        values = [r.estimate.parts[part] for r in ranked]
        ax.bar(labels, values, bottom=bottoms, color=colour, label=part)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.set_ylabel(f"step time ({_scale(units)[1]})")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def memory_stack(memory: Any) -> list[tuple[str, list[float]]]:
    """The parts a device holds per stage, bottom to top, in bytes, named in the memory vocabulary
    (``ndcost.tables.memory.MEMORY_FIGURES``): the tensors' parts (their sum is the stage's allocated
    peak), the caching allocator's slack over them (up to the reserved peak; none in ND's units) and
    the fixed costs (CUDA context, workspaces, NCCL; ND's safety reserve in ND's units), so the
    fullest stage's bar is the HBM less the headroom."""
    from ..tables.memory_words import STAGE_COLUMNS

    stages = memory.stages
    stack = [(name, [getattr(stage, name) for stage in stages]) for name in STAGE_COLUMNS[:-2]]
    if memory.slack != 1.0:
        allocated = [stage.total - stage.reserve for stage in stages]
        stack.append(("allocator slack (reserved peak - allocated peak)",
                      [a * (memory.slack - 1.0) for a in allocated]))
    what = "ND's safety reserve" if memory.slack == 1.0 else "CUDA context, workspaces, NCCL"
    stack.append((f"fixed costs ({what})", [memory.fixed_bytes] * len(stages)))
    return stack


def plot_memory(estimate: Any, path: str, capacity_bytes: float | None = None) -> str:
    """Per-stage memory, stacked by part (:func:`memory_stack`), with the device's capacity."""
    plt = _pyplot()
    stages = estimate.memory.stages
    fig, ax = plt.subplots(figsize=(max(5, 0.5 * len(stages) + 2), 4.5))
    bottoms = [0.0] * len(stages)
    for name, parts in memory_stack(estimate.memory):
        values = [value / 2**30 for value in parts]
        ax.bar(range(len(stages)), values, bottom=bottoms, label=name)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    if capacity_bytes:
        ax.axhline(capacity_bytes / 2**30, color="black", linestyle="--", label="device memory")
    ax.set_xticks(range(len(stages)))        # one tick per stage, not matplotlib's fractional ones
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("GiB")
    ax.legend(fontsize=7)
    return _save(fig, path)


def pipeline_timeline(forward: Sequence[float], backward: Sequence[float], micro_batches: int,
                      schedule: str = "1f1b") -> list[tuple[int, int, str, float, float]]:
    """When each micro-batch's forward and backward run on each stage: (stage, micro-batch, "F"/"B", start, end).

    Event simulation of 1F1B (warm-up forwards, one-forward-one-backward, cool-down;
    Narayanan et al. 2021 §2.2) or GPipe (all forwards, then all backwards), with
    each stage waiting for the activation (forward) or gradient (backward) of its
    neighbour. Interleaved and zero-bubble schedules are drawn as 1F1B.
    """
    p = len(forward)
    orders = []
    for s in range(p):
        if schedule == "gpipe":
            order = [("F", i) for i in range(micro_batches)] + [("B", i) for i in range(micro_batches)]
        else:
            warm = min(p - s - 1, micro_batches)
            order = [("F", i) for i in range(warm)]
            f, b = warm, 0
            while b < micro_batches:
                if f < micro_batches:
                    order.append(("F", f))
                    f += 1
                order.append(("B", b))
                b += 1
        orders.append(order)
    done: dict[tuple[str, int, int], float] = {}
    free = [0.0] * p
    position = [0] * p
    events = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            if position[s] >= len(orders[s]):
                continue
            op, i = orders[s][position[s]]
            dep = ("F", s - 1, i) if op == "F" and s > 0 else (("B", s + 1, i) if op == "B" and s < p - 1 else None)
            if op == "B" and s == p - 1:
                dep = ("F", s, i)
            if dep is not None and dep not in done:
                continue
            start = max(free[s], done.get(dep, 0.0) if dep else 0.0)
            end = start + (forward[s] if op == "F" else backward[s])
            done[(op, s, i)] = end
            free[s] = end
            events.append((s, i, op, start, end))
            position[s] += 1
            remaining -= 1
            progressed = True
        if not progressed:  # pragma: no cover - the orders above cannot deadlock
            raise RuntimeError("pipeline timeline deadlocked")
    return events


def plot_timeline(estimate: Any, spec: Any, path: str) -> str:
    """Which micro-batch runs where, when: a Gantt chart of one step's pipeline."""
    plt = _pyplot()
    compute = estimate.parts["fw_compute"] + estimate.parts["bw_compute"] + estimate.parts["recompute"]
    forward_share = estimate.parts["fw_compute"] / compute if compute else 1.0 / 3.0
    forward = [t * forward_share for t in estimate.stage_times]
    backward = [t * (1.0 - forward_share) for t in estimate.stage_times]
    events = pipeline_timeline(forward, backward, spec.resolved_micro_batch_num, spec.schedule)
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(forward) + 1.5))
    for stage, micro, op, start, end in events:
        ax.barh(stage, end - start, left=start, color="#1f78b4" if op == "F" else "#33a02c", edgecolor="white")
        if end - start > 0:
            ax.text((start + end) / 2, stage, str(micro), ha="center", va="center", fontsize=6, color="white")
    ax.set_yticks(range(len(forward)))
    ax.set_yticklabels([f"stage {s}" for s in range(len(forward))])
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({_scale(estimate.units)[1]}); blue forward, green backward")
    return _save(fig, path)
