"""Rebalance a pipeline: move layers between stages until the step stops getting faster.

An even split of the layers is rarely an even split of the work. The first stage also
runs the embedding and, on a vision-language model, the whole vision tower (front-loaded
where the embedding runs, docs/ND_MODEL.md §1.6); the last runs the output layer over the
vocabulary; MoE models mix dense and MoE layers. Megatron-LM answers with uneven
layouts (``--decoder-first-pipeline-num-layers``, ``--pipeline-model-parallel-layout``);
ND's search keeps the even split (its offsets only spread the remainder).

:func:`balance_pipeline` climbs greedily in the offset's terms: from the stage the
estimate finds slowest, one layer to the fastest stage that makes the step faster and
still fits in memory, the same chunk on both for an interleaved pipeline, until no move
off the slowest stage helps. Each move is priced by :func:`ndcost.estimate` itself, so the result is a
spec the estimate stands behind, never a formula's guess. It is a local search, not a
proven optimum: it stops where no single layer leaving the slowest stage shortens the step.
"""
from __future__ import annotations

from .software_arg import apply_software
from dataclasses import dataclass
from typing import Any

from ..errors import SpecError
from .estimate import UNITS, Estimate, as_cluster, as_model, estimate, memory_limit_bytes
from ..spec.exec_spec import ExecSpec
from ..tables.layout import placed_counts
from ..spec.rates_io import as_rates
from ..tables.joint_rules import offset_layer_count

__all__ = ["BalancedPipeline", "balance_pipeline"]


@dataclass(frozen=True)
class BalancedPipeline:
    """The rebalanced spec, its estimate, how many layers moved, and the layers per stage
    (chunks summed, as the offset counts them)."""

    spec: ExecSpec
    estimate: Estimate
    moves: int
    layers_per_stage: tuple[int, ...]


def _with_counts(model: Any, spec: ExecSpec, counts: list[list[int]]) -> ExecSpec:
    """*spec* placing counts[chunk][stage] layers, stated as an offset (1-D when vpp is 1)."""
    per = offset_layer_count(model, spec) // (spec.pp * spec.vpp)
    grid = tuple(tuple(n - per for n in row) for row in counts)
    return spec.replace(offset=grid[0] if spec.vpp == 1 else grid, pp_partition=None)


def balance_pipeline(model: Any, spec: ExecSpec, cluster: Any, *, units: str = "seconds", ratios: Any = None,
                     memory_limit: float | None = None, max_moves: int | None = None,
                     rates: Any = None, software: str | None = None) -> BalancedPipeline:
    """Move layers off the slowest stages while each move shortens the step and the plan fits.

    Args:
        model, spec, cluster: As :func:`ndcost.estimate`. The spec's own placement (even
            split, offset or pp_partition) is where the climb starts.
        units, ratios: The estimate the moves are judged by.
        memory_limit: Bytes a device may use (default: its HBM). A move must keep the peak
            within it or, from a start already over it, not raise the peak.
        max_moves: Most layers moved (default: the layers placed).
        rates: Seconds mode's rates, as :func:`ndcost.estimate`'s.
        software: The training stack the strategy runs on, as :func:`ndcost.estimate`'s.

    Returns:
        A :class:`BalancedPipeline`; ``moves == 0`` and the spec unchanged when no move helps.
    """
    if units not in UNITS:
        raise SpecError("units", "balance_pipeline", f"be one of {', '.join(map(repr, UNITS))}", units)
    if max_moves is not None and (isinstance(max_moves, bool) or not isinstance(max_moves, int) or max_moves < 0):
        raise SpecError("max_moves", "balance_pipeline", "be an integer >= 0", max_moves)
    model = as_model(model)
    cluster = as_cluster(cluster, spec)
    model, spec, rates = apply_software(software, model, spec, cluster, rates, owner="balance_pipeline", units=units)
    rates = as_rates(rates, device=cluster, owner="balance_pipeline")   # a rates file read once
    capacity = memory_limit_bytes(memory_limit, cluster, "balance_pipeline")
    best = estimate(model, spec, cluster, units=units, ratios=ratios, rates=rates)
    # From a start already over the budget a move may not raise the peak; else it must fit.
    capacity = max(capacity, best.memory.device_peak)
    counts = [list(row) for row in placed_counts(model, spec)]
    limit = offset_layer_count(model, spec) if max_moves is None else max_moves
    current, moves = spec, 0
    while moves < limit and spec.pp > 1:
        step = _best_move(model, current, cluster, counts, best, units, ratios, capacity, rates)
        if step is None:
            break
        current, best, counts = step
        moves += 1
    per_stage = tuple(sum(row[s] for row in counts) for s in range(spec.pp))
    return BalancedPipeline(spec=current, estimate=best, moves=moves, layers_per_stage=per_stage)


def _best_move(model, spec, cluster, counts, best, units, ratios, capacity, rates=None):
    """The first move, slowest stage to the fastest that helps, or None."""
    times = best.stage_times
    order = sorted(range(spec.pp), key=lambda s: times[s])
    source = order[-1]
    chunks = sorted(range(spec.vpp), key=lambda v: -counts[v][source])
    for target in order[:-1]:
        for chunk in chunks:
            if counts[chunk][source] == 0:
                continue
            trial = [list(row) for row in counts]
            trial[chunk][source] -= 1
            trial[chunk][target] += 1
            try:
                candidate = _with_counts(model, spec, trial)
                priced = estimate(model, candidate, cluster, units=units, ratios=ratios, rates=rates)
            except SpecError:
                continue  # a placement the spec's other fields forbid (per-stage recompute counts, ...)
            if priced.step_time < best.step_time and priced.memory.device_peak <= capacity:
                return candidate, priced, trial
            break  # the most loaded chunk did not help: the next stage, not a lighter chunk
    return None
