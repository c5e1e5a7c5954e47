"""Recompute as a choice: one stage's layers choose their options under a memory budget.

Each layer of a pipeline stage offers options (its front of recompute
settings, docs/ND_MODEL.md §4.4): what the option keeps in the stage's memory at
the stage's micro-batches in flight, and what it costs in time. The stage
takes one option per layer, keeps the total memory within its budget, and
spends the least time: a multiple-choice knapsack, solved exactly by the
``mck_min_time`` kernel over memory buckets (1 MiB by default, as upstream).

Weights are rounded up to whole buckets and the budget down, so a plan the
kernel accepts never exceeds the budget in bytes; the price is that a plan
within a bucket of the budget may be missed.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np

from .. import _backend
from ..errors import SpecError, check_positive_int

__all__ = ["StagePlan", "plan_stage", "useful_options"]


@dataclass(frozen=True)
class StagePlan:
    """The options one stage's layers take.

    Attributes:
        choice: Per layer, the index of its option in what the caller gave
            (``()`` when nothing fits).
        memory_bytes: The chosen options' memory, summed in bytes (not
            rounded); NaN when nothing fits.
        time: The chosen options' time, summed in layer order; +inf when
            nothing fits.
        feasible: Whether some plan fits the budget.
    """

    choice: tuple[int, ...]
    memory_bytes: float
    time: float
    feasible: bool


def useful_options(memory, time) -> np.ndarray:
    """Indices of the options a least-time plan may need, ascending.

    Drops an option when an earlier one (lower index) needs no more memory
    and no more time: the knapsack would take the earlier one in every plan
    anyway (it prefers the lower index on a tie, and a plan never gets worse
    by taking it), so dropping it changes neither the least time nor the
    plan. A later option that is strictly better is kept: the earlier one
    then may still win a tie of totals, which only the knapsack can tell.
    """
    memory = np.asarray(memory, dtype=np.float64)
    time = np.asarray(time, dtype=np.float64)
    # no_worse[p, o]: option p needs no more memory and no more time than option o. An
    # option some earlier one is no worse than goes; checking every earlier option, not
    # only the kept ones, is the same (the relation is transitive).
    no_worse = (memory[:, None] <= memory[None, :]) & (time[:, None] <= time[None, :])
    return np.flatnonzero(~np.triu(no_worse, 1).any(axis=0)).astype(np.int64)


class _Layer(NamedTuple):
    """A layer's options as the knapsack takes them."""

    useful: np.ndarray  # indices of the options kept (useful_options)
    buckets: np.ndarray  # their memory in whole buckets, rounded up
    times: np.ndarray  # their time
    memory: np.ndarray  # every option's memory in bytes, by the caller's index


def _options_array(options: Any, layer: int) -> np.ndarray:
    owner = "plan_stage"
    parameter = f"options_per_layer[{layer}]"
    try:
        array = np.array(options, dtype=np.float64)
    except (TypeError, ValueError):
        raise SpecError(parameter, owner, "be a sequence of (memory_bytes, time) pairs", options) from None
    if array.ndim != 2 or array.shape[1] != 2 or array.shape[0] < 1:
        raise SpecError(parameter, owner, "be a non-empty sequence of (memory_bytes, time) pairs", options)
    if not np.isfinite(array).all():
        raise SpecError(parameter, owner, "hold finite memory and time", options)
    return array


def _buckets_up(memory: np.ndarray, bucket_bytes: int) -> np.ndarray:
    """Whole buckets that hold *memory*: the ceiling, corrected where the division rounded low."""
    buckets = np.ceil(memory / bucket_bytes)
    buckets += buckets * bucket_bytes < memory
    return buckets.astype(np.int64)


def plan_stage(options_per_layer: Sequence[Any], budget_bytes: float, bucket_bytes: int = 2**20) -> StagePlan:
    """Choose one option per layer of a stage: least total time within *budget_bytes*.

    Args:
        options_per_layer: Per layer, its options as ``(memory_bytes, time)``
            pairs (an ``(n, 2)`` array works), least recompute first: on a tie
            of total time the plan prefers, from the last layer back, the
            lower option index. Memory is what the option keeps at the stage's
            micro-batches in flight (``k · per_mb + once − excess``); time is
            what the layer then takes (forward plus backward). Layers with
            equal options (a layer kind repeated) share their preparation.
        budget_bytes: The bytes the stage's layers may keep together.
        bucket_bytes: The knapsack's memory grain (1 MiB by default). Each
            option's memory is rounded up to whole buckets and the budget
            down, so the plan never exceeds the budget.

    Returns:
        A :class:`StagePlan`; ``feasible`` is False (time +inf) when even the
        lightest options overflow the budget.
    """
    owner = "plan_stage"
    check_positive_int(bucket_bytes, "bucket_bytes", owner)
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, numbers.Real) or not math.isfinite(budget_bytes):
        raise SpecError("budget_bytes", owner, "be a finite number of bytes", budget_bytes)
    if isinstance(options_per_layer, (str, bytes)) or not isinstance(options_per_layer, Sequence):
        raise SpecError("options_per_layer", owner, "be a sequence with one entry per layer", options_per_layer)

    # One preparation per distinct option list: a stage repeats few layer kinds.
    prepared: dict[bytes, _Layer] = {}
    layers: list[_Layer] = []
    for layer, options in enumerate(options_per_layer):
        array = _options_array(options, layer)
        key = array.tobytes()
        if key not in prepared:
            useful = useful_options(array[:, 0], array[:, 1])
            prepared[key] = _Layer(useful, _buckets_up(array[useful, 0], bucket_bytes),
                                   np.ascontiguousarray(array[useful, 1]), array[:, 0])
        layers.append(prepared[key])

    group_start = np.zeros(len(layers) + 1, dtype=np.int64)
    np.cumsum([len(layer.useful) for layer in layers], out=group_start[1:])
    weights = np.concatenate([layer.buckets for layer in layers] or [np.zeros(0, dtype=np.int64)])
    times = np.concatenate([layer.times for layer in layers] or [np.zeros(0, dtype=np.float64)])
    budget_buckets = math.floor(budget_bytes / bucket_bytes)
    if budget_buckets * bucket_bytes > budget_bytes:  # the division rounded up
        budget_buckets -= 1
    chosen = np.empty(len(layers), dtype=np.int64)
    time = _backend.kernels.mck_min_time(weights, times, group_start, budget_buckets, chosen)
    if not time < math.inf:
        return StagePlan((), math.nan, math.inf, False)
    choice = tuple(int(layer.useful[pick]) for layer, pick in zip(layers, chosen))
    memory = 0.0
    for layer, option in zip(layers, choice):
        memory += float(layer.memory[option])
    return StagePlan(choice, memory, float(time), True)
