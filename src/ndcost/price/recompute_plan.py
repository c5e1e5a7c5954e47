"""``plan_recompute``: each layer's recompute option, chosen per stage within its memory.

ND's per-layer recompute search (docs/ND_MODEL.md §4.4, recompute/candidate.py and
knapsack.py), rebuilt on ndcost's pieces:

1. Per layer kind, a :class:`~ndcost.price.switch_profile.SwitchProfile`: the plain
   layer, each switch recomputed alone, and full recompute, priced by the
   memory model (activation bytes per micro-batch) and by per-layer times in
   the estimate's units: seconds (``seconds_layer_time``: compute, recompute
   and exposed communication of one micro-batch), or ND's (``layer_times``,
   forward and backward with its recompute, as ND's own search prices them).
2. Its dominance front: the settings no other setting beats on memory and time.
3. Per stage, a multiple-choice knapsack over memory (1 MiB buckets, rounded so
   a plan never exceeds its budget) picks each layer's option to minimise the
   stage's time. A layer's memory is its activations times the micro-batches
   in flight on its (stage, chunk).
4. The choice comes back as recompute ranges in model order, the spec they
   make, the memory per stage they reach and the time each stage saves.

The budget of a stage is the device memory less what the choice does not
change (parameters, gradients, optimizer states, buffers, the embedding and
output activations, the reserve) and less the largest working set any choice
could need (a full-recompute layer re-materialises its plain activations at
one micro-batch): conservative, so a plan never exceeds its budget.
"""
from __future__ import annotations

from .software_arg import apply_software
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _backend
from ..kernels.columns import HYPER_POLICY_MASK, OPTION_FULL, OPTION_NONE, OPTION_SELECTIVE
from ..tables.derive import derive
from ..errors import SpecError
from .estimate import UNITS, as_cluster, as_model, layer_times, memory_limit_bytes
from ..spec.exec_spec import ExecSpec
from .knapsack import plan_stage
from ..tables.layout import build_layout
from ..tables.nd_tables import refuse_nd_units
from ..tables.memory import SCHEDULE_CODES, memory_candidate_vector, memory_estimate, memory_kind_table
from ..spec.recompute_spec import ALL_KEPT, SWITCHES, RecomputeRange, switches_from_mask
from ..spec.rates_io import as_rates
from ..tables.seconds import seconds_layer_time
from .switch_profile import FULL_KEEP_MASK, Cost, SwitchProfile

__all__ = ["RecomputePlan", "plan_recompute", "kind_profile"]


@dataclass(frozen=True)
class RecomputePlan:
    """What :func:`plan_recompute` chose.

    Attributes:
        ranges: The recompute of every layer, in model order (layers no range
            covers recompute nothing).
        spec: The input spec with ``recompute=ranges``.
        stage_memory: Bytes per stage the plan reaches (the memory model's totals).
        stage_budget: Bytes per stage the layers' activations were allowed.
        stage_savings: Per stage, the time (ND units) the plan saves against the
            input spec's own recompute; negative when the input spec did not fit
            and the plan had to recompute more.
        feasible: Whether every stage found a plan within its budget.
    """

    ranges: tuple[RecomputeRange, ...]
    spec: ExecSpec
    stage_memory: tuple[float, ...]
    stage_budget: tuple[float, ...]
    stage_savings: tuple[float, ...]
    feasible: bool

    @property
    def time_saved(self) -> float:
        return float(sum(self.stage_savings))


def _layer_timer(model: Any, spec: ExecSpec, cluster: Any, kind: int, units: str, rates: Any = None):
    """(option, keep mask) -> (forward, backward) of one layer of *kind*, in *units*."""
    if units == "nd":
        names = {OPTION_NONE: "none", OPTION_FULL: "full", OPTION_SELECTIVE: "selective"}
        return lambda option, mask: layer_times(model, spec, cluster, kind, names[option],
                                                switches_from_mask(mask) if option == OPTION_SELECTIVE else None)
    return lambda option, mask: seconds_layer_time(model, spec, cluster, kind, option, mask, rates=rates)


def kind_profile(model: Any, spec: ExecSpec, cluster: Any, kind: int, *, units: str = "seconds",
                 rates: Any = None) -> SwitchProfile:
    """The SwitchProfile of one layer kind: memory from the memory model, times in *units*
    (``"seconds"`` or ``"nd"``).

    Each setting's bytes are what ``memory_batch`` charges the kind (``kind_activation_bytes``:
    its own tokens and attention window, and its census). Where a census prices the kind
    (docs/ND_MODEL.md §4.4 ``SwitchProfile`` with census), the plain layer is the census's, the
    settings add up from the layer selective with every op kept (the formulas'), and
    HyperParallel's policy is taken whole: the census's bytes, its shares' recompute time.
    """
    row = memory_kind_table(model)[kind]
    mc = memory_candidate_vector(model, spec)
    kernels = _backend.kernels

    def activation(option: int, mask: int) -> float:
        return float(kernels.kind_activation_bytes(row, mc, option, mask))

    if units not in UNITS:
        raise SpecError("units", "kind_profile", f"be one of {', '.join(map(repr, UNITS))}", units)
    time = _layer_timer(model, spec, cluster, kind, units, rates)
    forward, backward = time(OPTION_NONE, ALL_KEPT)
    plain = Cost(activation(OPTION_NONE, ALL_KEPT), 0.0, backward)
    census = model.kind_census(model.kinds[kind].name)
    extra: dict[str, Any] = {}
    base = plain
    if census is not None:
        _, bw_base = time(OPTION_SELECTIVE, ALL_KEPT)
        base = extra["selective_base"] = Cost(activation(OPTION_SELECTIVE, ALL_KEPT), 0.0, bw_base)
        _, bw_policy = time(OPTION_SELECTIVE, HYPER_POLICY_MASK)
        recomputed = frozenset(name for bit, name in enumerate(SWITCHES) if not HYPER_POLICY_MASK >> bit & 1)
        extra["whole"] = {recomputed: Cost(activation(OPTION_SELECTIVE, HYPER_POLICY_MASK), 0.0, bw_policy)}
    alone = {}
    for bit, name in enumerate(SWITCHES):
        mask = ALL_KEPT & ~(1 << bit)
        memory = activation(OPTION_SELECTIVE, mask)
        if not memory < base.memory_per_micro_batch:
            # Recomputing an op that keeps nothing saves nothing: not a choice. (ND's
            # units would otherwise make it a free win: a selective layer that
            # recomputes its gather prices its TP traffic at a third, docs/ND_MODEL.md §2.6.)
            alone[name] = base
            continue
        _, bw = time(OPTION_SELECTIVE, mask)
        alone[name] = Cost(memory, 0.0, bw)
    _, bw_full = time(OPTION_FULL, 0)
    full = Cost(activation(OPTION_FULL, 0), 0.0, bw_full)
    return SwitchProfile(forward_time=forward, plain=plain, alone=alone, full=full, **extra)


def _options_of(profile: SwitchProfile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Front settings, least recompute first: (keep masks, memory per micro-batch, time)."""
    settings = profile.all_settings()
    rows = np.asarray(profile.front(), dtype=np.int64)
    masks = np.asarray(settings.keep_mask)[rows]
    full = masks == FULL_KEEP_MASK
    recomputed = np.array([bin(int(m) ^ ALL_KEPT).count("1") if not f else 99 for m, f in zip(masks, full)])
    order = np.lexsort((rows, recomputed))
    rows, masks = rows[order], masks[order]
    memory = np.asarray(settings.memory_per_micro_batch)[rows]
    time = profile.forward_time + np.asarray(settings.backward_time)[rows]
    return masks, memory, time


def _ranges(choices: list[tuple[int, int]]) -> tuple[RecomputeRange, ...]:
    """Runs of equal (option, mask) in model order, as ranges (a layer that recomputes nothing is left out)."""
    out, first = [], 0
    for i in range(1, len(choices) + 1):
        if i < len(choices) and choices[i] == choices[first]:
            continue
        option, mask = choices[first]
        if option == OPTION_FULL:
            out.append(RecomputeRange(first=first, count=i - first, option="full"))
        elif option == OPTION_SELECTIVE:
            out.append(RecomputeRange(first=first, count=i - first, option="selective",
                                      switches=switches_from_mask(mask)))
        first = i
    return tuple(out)


def plan_recompute(model: Any, spec: ExecSpec, cluster: Any, *, memory_limit: float | None = None,
                   units: str = "seconds", rates: Any = None, software: str | None = None) -> RecomputePlan:
    """Choose each layer's recompute (none, a selective setting, or full) to fit each stage's memory.

    Args:
        model, spec, cluster: As :func:`ndcost.estimate`; the spec's own recompute is
            the baseline the savings are measured against.
        memory_limit: Bytes a device may use (default: its HBM).
        units: The units of the layer times the plan minimises, as :func:`ndcost.estimate`'s:
            ``"seconds"`` (default) or ``"nd"`` (ND's per-layer times; the plan's
            ``stage_savings`` then feed ``estimate(units="nd", stage_savings=...)``).
        rates: Seconds mode's rates, as :func:`ndcost.estimate`'s.
        software: The training stack the strategy runs on, as :func:`ndcost.estimate`'s.
    """
    if units not in UNITS:
        raise SpecError("units", "plan_recompute", f"be one of {', '.join(map(repr, UNITS))}", units)
    if units == "nd" and rates is not None:
        raise SpecError("rates", "plan_recompute", "be given in seconds units only (ND's units price no rates)", rates)
    model = as_model(model)
    if units == "nd":
        refuse_nd_units(model, "plan_recompute")
    cluster = as_cluster(cluster, spec)
    model, spec, rates = apply_software(software, model, spec, cluster, rates, owner="plan_recompute", units=units)
    rates = as_rates(rates, device=cluster, owner="plan_recompute")
    capacity = memory_limit_bytes(memory_limit, cluster, "plan_recompute")
    if units == "seconds":
        # what the device holds must fit: the tensors' budget leaves the allocator's slack and the
        # process's fixed costs (ndcost.tables.memory_overheads)
        from ..tables.memory_overheads import tensor_budget

        capacity = tensor_budget(capacity, spec, float(cluster.memory_reserve_bytes), model)
    plain_spec = spec.replace(recompute="none", full_recompute=None, selective_recompute=None)
    nd = units == "nd"   # ND's placement in ND's units (ndcost.tables.layout_nd)
    layout = build_layout(model, plain_spec, nd)
    base = memory_estimate(model, plain_spec, cluster, layout)
    derived = derive(model, plain_spec, cluster)
    p, vp = spec.pp, spec.vpp
    profiles = [kind_profile(model, plain_spec, cluster, k, units=units, rates=rates) for k in range(len(model.kinds))]
    options = [_options_of(profile) for profile in profiles]
    schedule = SCHEDULE_CODES[spec.schedule]
    inflight = np.array([[_backend.kernels.inflight_micro_batches(schedule, p, derived.micro_batch_num, vp, s, c,
                                                                  spec.seq_split) for c in range(vp)]
                         for s in range(p)])

    # Layers per stage in model order, with what they keep when plain.
    stage_layers: list[list[tuple[int, int, int]]] = [[] for _ in range(p)]
    for index, (s, c, k, _) in enumerate(layout.positions):
        stage_layers[s].append((index, c, k))
    choices: list[tuple[int, int]] = [(OPTION_NONE, ALL_KEPT)] * len(layout.positions)
    budgets, feasible = [], True
    for s in range(p):
        layers = stage_layers[s]
        kept_plain = sum(inflight[s, c] * profiles[k].plain.memory_per_micro_batch for _, c, k in layers)
        worst_working = max((profiles[k].plain.memory_per_micro_batch for _, _, k in layers), default=0.0)
        fixed = base.stages[s].total - kept_plain - base.stages[s].working_set
        budget = capacity - fixed - worst_working
        budgets.append(budget)
        per_layer = [np.column_stack([inflight[s, c] * options[k][1], options[k][2]]) for _, c, k in layers]
        plan = plan_stage(per_layer, budget) if layers else None
        if plan is None:
            continue
        if not plan.feasible:
            feasible = False
            chosen = [len(options[k][0]) - 1 for _, _, k in layers]  # the least memory: full recompute
        else:
            chosen = list(plan.choice)
        for (index, _, k), pick in zip(layers, chosen):
            mask = int(options[k][0][pick])
            if mask == FULL_KEEP_MASK:
                choices[index] = (OPTION_FULL, 0)
            elif mask == ALL_KEPT:
                choices[index] = (OPTION_NONE, ALL_KEPT)
            else:
                choices[index] = (OPTION_SELECTIVE, mask)

    ranges = _ranges(choices)
    planned = spec.replace(recompute=ranges, full_recompute=None, selective_recompute=None)
    planned_memory = memory_estimate(model, planned, cluster, build_layout(model, planned, nd))
    savings = _stage_savings(model, spec, planned, cluster, profiles, nd)
    return RecomputePlan(
        ranges=ranges, spec=planned, stage_memory=tuple(st.total for st in planned_memory.stages),
        stage_budget=tuple(budgets), stage_savings=savings, feasible=feasible,
    )


def _stage_savings(model: Any, before: ExecSpec, after: ExecSpec, cluster: Any,
                   profiles: list[SwitchProfile], nd: bool) -> tuple[float, ...]:
    """Per stage, Σ layer times under *before*'s recompute minus under *after*'s (the profiles' units)."""

    def stage_times(spec: ExecSpec) -> np.ndarray:
        layout = build_layout(model, spec, nd)
        out = np.zeros(spec.pp)
        for s, _, k, o in layout.positions:
            option, mask = int(layout.slot_option[o]), int(layout.slot_mask[o])
            if option == OPTION_NONE:
                cost = profiles[k].plain
            elif option == OPTION_FULL:
                cost = profiles[k].full
            else:
                cost = profiles[k].selective(name for bit, name in enumerate(SWITCHES) if not mask >> bit & 1)
            out[s] += profiles[k].forward_time + cost.backward_time
        return out

    return tuple(float(x) for x in stage_times(before) - stage_times(after))
