"""``search``: the best strategies for a model on N devices, why the rest lost.

The space (``search_space.build_space``) is priced in batches by
``estimate_many`` — never a Python loop per candidate. Each candidate either
fits, or is counted under the reason it lost (an invalid rule, or memory), so
that ``fitting`` plus the rejected counts is the space size. The best few are
then offered a rebalanced pipeline (``balance_pipeline``: layers moved off the
slowest stages) and a per-layer recompute plan (``plan_recompute``) that may beat
the even split and the uniform modes. Ranking is deterministic: step time, then peak memory, then the
search dimensions in order (smaller first).
"""
from __future__ import annotations

import math
import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import SpecError, is_finite_number
from .estimate import as_model, estimate
from ..spec.exec_spec import ExecSpec
from ..spec.rates_io import as_rates
from .result import Estimate
from ..spec.search_space import SEARCH_DIMENSIONS, build_space, stack_dimensions
from ..spec.software_fields import check_software, software_fields, stack_columns
from .software_arg import software_rates
from ..tables.layout_nd import nd_search_offset
from ..tables.memory import reserved_peak_bytes
from ..tables.memory_overheads import ALLOCATOR_RESERVE_FACTOR
from .threads import resolve_threads

#: The smallest memory limit a search takes: below 1 GiB no device holds a CUDA context and a model.
MIN_MEMORY_LIMIT = 2**30
#: The reason a priced candidate over the memory limit is counted under (the kernels' own word).
OVER_LIMIT = "does not fit in memory"

__all__ = ["SearchResult", "Ranked", "search", "pareto_front"]

#: Candidates per batch of the space (a Candidates and an estimate_many each): large enough to amortise
#: the calls, small enough to show progress.
BATCH = 65536


@dataclass(frozen=True)
class Ranked:
    """One strategy of the top: the spec and its estimate."""

    spec: ExecSpec
    estimate: Estimate
    per_layer_recompute: bool = False
    rebalanced: bool = False    # layers placed by balance_pipeline (spec.offset), not the even split

    def to_dict(self) -> dict:
        strategy = {name: getattr(self.spec, name) for name in
                    ("dp", "tp", "pp", "vpp", "cp", "ep", "micro_batch_size", "global_batch_size", "seq_length",
                     "zero_stage", "sequence_parallel", "pp_schedule")}
        strategy["micro_batch_num"] = self.spec.resolved_micro_batch_num
        strategy["recompute"] = ("per_layer" if self.per_layer_recompute else self.spec.recompute_option)
        if self.per_layer_recompute:
            from ..spec.recompute_spec import plan_document

            strategy["recompute_ranges"] = plan_document(self.spec)   # what estimate --recompute-plan reads
        if self.rebalanced:
            strategy["offset"] = self.spec.offset
        from ..spec.stack_options import SPEC_DEFAULTS

        strategy.update({name: getattr(self.spec, name) for name, default in SPEC_DEFAULTS.items()
                         if getattr(self.spec, name) != default})
        return {"strategy": strategy, "estimate": self.estimate.to_dict()}


@dataclass(frozen=True)
class SearchResult:
    """The outcome of a search."""

    results: tuple[Ranked, ...]
    space_size: int
    fitting: int
    rejected: Mapping[str, int]
    pareto: tuple[tuple[float, float, int], ...]  # (step_time, reserved peak, index into the space)
    units: str
    columns: Mapping[str, np.ndarray] = field(repr=False, default_factory=dict)
    step_time: np.ndarray = field(repr=False, default=None)
    #: Per candidate: the reserved peak plus the fixed costs (the HBM less the headroom), what the memory
    #: limit is held to and the Pareto front is drawn on; NaN where not priced.
    peak_memory: np.ndarray = field(repr=False, default=None)
    #: Given dimension values that fill no combination of the devices, with why (not in the space).
    excluded: Mapping[str, int] = field(default_factory=dict)
    #: Per candidate: the reserved peak (MemoryEstimate.peak_reserved); NaN where not priced.
    reserved_memory: np.ndarray = field(repr=False, default=None)
    #: The memory limit the candidates were held to (the device's HBM unless a limit was given).
    capacity: float = math.inf
    #: The model as the candidates were priced: with the census of a stack's per-op recompute where *software*
    #: recomputes per op (a ranked spec's ``selective_rule`` "hyperparallel" reads it), else the one given.
    model: Any = field(repr=False, default=None)

    @property
    def best(self) -> Ranked | None:
        return self.results[0] if self.results else None

    def main_rejection(self) -> str | None:
        """Why most candidates lost (the largest rejected count), or why the space is empty."""
        counts = dict(self.rejected) or dict(self.excluded)
        return max(sorted(counts), key=lambda reason: counts[reason]) if counts else None

    def to_dict(self) -> dict:
        return {
            "units": self.units,
            "space_size": self.space_size,
            "fitting": self.fitting,
            "rejected": dict(self.rejected),
            "excluded": dict(self.excluded),
            "results": [r.to_dict() for r in self.results],
            "pareto": [{"step_time": t, **_memory_figures(self, i), "strategy": _row_strategy(self.columns, i)}
                       for t, _, i in self.pareto],
        }


def _memory_figures(result: SearchResult, i: int) -> dict:
    """Candidate *i*'s memory in the vocabulary's names (MEMORY_FIGURES): its reserved peak, and its fixed
    costs and headroom from what it holds (the reserved peak plus the fixed costs)."""
    reserved, held = float(result.reserved_memory[i]), float(result.peak_memory[i])
    return {"peak_reserved": reserved, "fixed_bytes": held - reserved, "headroom": result.capacity - held}


def _row_strategy(columns: Mapping[str, np.ndarray], i: int) -> dict:
    return {name: (col[i].item() if hasattr(col[i], "item") else col[i]) for name, col in columns.items()}


def pareto_front(step_time: np.ndarray, memory: np.ndarray, mask: np.ndarray) -> list[int]:
    """Indices (of *mask*ed rows) no other row beats on both step time and memory, by increasing time."""
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return []
    order = idx[np.lexsort((memory[idx], step_time[idx]))]
    front, best_memory = [], math.inf
    for i in order:
        if memory[i] < best_memory:
            front.append(int(i))
            best_memory = memory[i]
    return front


def _spec_of(columns: Mapping[str, np.ndarray], i: int, fixed: Mapping[str, Any]) -> ExecSpec:
    fields = {name: (col[i].item() if hasattr(col[i], "item") else col[i]) for name, col in columns.items()}
    fields.update(fixed)
    return ExecSpec(**fields)


def _nd_search_offsets(model: Any, columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """Each candidate's offset as ND's search states it (ndcost.tables.layout_nd.nd_search_offset):
    ND's generator drops the layers pp*vpp leaves over when a strategy states no offset, and ND's
    search never prices one without (docs/ND_MODEL.md §1.6 "Offsets in the search"). None where the
    layers divide evenly."""
    layers = model.num_layers_with_mtp          # ND's lay: the search's specs count MTP in the offset
    pp, vpp = columns["pp"], columns["vpp"]
    offsets = np.empty(len(pp), dtype=object)
    by_pipeline: dict[tuple[int, int], Any] = {}
    for i, key in enumerate(zip(pp.tolist(), vpp.tolist())):
        if key not in by_pipeline:
            by_pipeline[key] = nd_search_offset(layers, *key)
        offsets[i] = by_pipeline[key]
    return offsets


def search(model: Any, cluster: Any, *, global_batch_size: int, seq_length: int, top: int = 10,
           units: str = "seconds", ratios: Any = None, memory_limit: float | None = None,
           allow_cross_node_tp: bool = False, per_layer_recompute: int = 3, balance: int = 3,
           progress: Callable[[int, int], None] | None = None, rates: Any = None, threads: int | None = None,
           software: str | None = None, **dims: Any) -> SearchResult:
    """The *top* strategies for *model* on *cluster*, ranked by step time.

    Args:
        model: A Model or a catalog name.
        cluster: A Cluster (its device count is the search's).
        global_batch_size, seq_length: Required: what every candidate trains.
        top: How many to return.
        units: "seconds" or "nd"; *ratios* calibrates either. In ND's units every candidate
            states the offset ND's search gives it (``_nd_search_offsets``), as ND's search does.
        memory_limit: Bytes a device may use (default its HBM).
        allow_cross_node_tp: Let tp exceed a node.
        per_layer_recompute: How many of the best to offer a per-layer recompute plan (0: none).
        balance: How many of the best to offer a rebalanced pipeline (0: none): layers moved
            between stages while the step gets faster (``ndcost.price.pipeline_balance``).
        progress: Called with (priced, total) after each batch.
        rates: Seconds mode's rates, as :func:`ndcost.estimate`'s (a rates JSON is read once).
        threads: Threads each batch of the space is priced on, as :func:`ndcost.estimate_many`'s: None
            (default) as many as its size pays for, up to the cores the process may use
            (``NDCOST_THREADS`` caps it), 1 the calling thread only; the result is the same whatever
            the count.
        software: A training stack (``Rates.for_software``'s names): every candidate takes the
            fields it fixes for its strategy (``ndcost.spec.software_fields``; a search dimension it
            fixes, such as torchtitan's ZeRO-3, is fixed unless given; a per-op selective rule priced on the
            model's census), and its rates fill those *rates* does not state (a figure *rates* states wins).
        **dims: Each search dimension (tp, pp, cp, dp, ep, micro_batch_size, vpp, zero_stage,
            sequence_parallel, pp_schedule, recompute) fixed (a value), a list, or searched (absent); and
            any ExecSpec field a stack option sets (``ndcost.spec.stack_options.SEARCHABLE``: tp_overlap,
            precision, moe_dispatcher, ...) fixed or listed, taken only where it means something.
    """
    from .candidates import Candidates
    from .estimate_many import REASONS, estimate_many

    model = as_model(model)
    if units == "nd":
        from ..tables.nd_tables import refuse_nd_units

        refuse_nd_units(model, "search")
    if not hasattr(cluster, "num_devices"):
        raise SpecError("cluster", "search", "be a Cluster", cluster)
    for name, value in (("global_batch_size", global_batch_size), ("seq_length", seq_length), ("top", top)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(name, "search", "be an integer >= 1", value)
    for name, value in (("per_layer_recompute", per_layer_recompute), ("balance", balance)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SpecError(name, "search", "be an integer >= 0", value)
    resolve_threads(threads, "search")     # checked before the space is built
    if progress is not None and not callable(progress):
        raise SpecError("progress", "search", "be None or a callable taking (priced, total)", progress)
    if units == "nd" and rates is not None:
        raise SpecError("rates", "search", "be given in seconds units only (ND's units price no rates)", rates)
    if software is not None:
        check_software(software, "search")               # the name checked before anything is built
        if dims.get("zero_stage") is None and "zero_stage" in software_fields(software):
            dims["zero_stage"] = software_fields(software)["zero_stage"]
        if units != "nd":
            rates = software_rates(software, cluster, rates, "search")
    rates = as_rates(rates, device=cluster, owner="search")
    if memory_limit is not None and not (is_finite_number(memory_limit) and memory_limit >= MIN_MEMORY_LIMIT):
        raise SpecError("memory_limit", "search", f"be a finite number of bytes >= {MIN_MEMORY_LIMIT} (1 GiB)",
                        memory_limit)
    precisions = dims.get("precision")
    if "fp8" in (precisions if isinstance(precisions, (list, tuple)) else [precisions]) and \
            "fp8" not in cluster.device.peak_flops:
        raise SpecError("precision", "search", f"be fp8 only on a device with an fp8 peak ({cluster.device.name} "
                        f"has {', '.join(cluster.device.peak_flops)})", precisions)
    capacity = float(cluster.device.memory_bytes if memory_limit is None else memory_limit)
    space = build_space(model, cluster.num_devices, cluster.device.devices_per_node,
                        global_batch_size=global_batch_size, seq_length=seq_length, dims=dims,
                        allow_cross_node_tp=allow_cross_node_tp)
    if software is not None:
        model, columns = stack_columns(software, model, space.columns)
        space = replace(space, columns=columns)
    if units == "nd":
        space = replace(space, columns={**space.columns, "offset": _nd_search_offsets(model, space.columns)})
    n = space.size
    step = np.full(n, np.nan)
    memory = np.full(n, np.nan)
    reserved = np.full(n, np.nan)
    slack = ALLOCATOR_RESERVE_FACTOR if units == "seconds" else 1.0   # ND's units price no allocator slack
    reason = np.zeros(n, dtype=np.int64)
    for start in range(0, n, BATCH):
        # One batch at a time: its Candidates (ExecSpec's rules over its columns, under the GIL) then its
        # prices, on every thread estimate_many's *threads* gives it (docs/PERFORMANCE.md: the search).
        stop = min(n, start + BATCH)
        chunk = {name: col[start:stop] for name, col in space.columns.items()}
        batch = estimate_many(model, Candidates.from_arrays(**chunk), cluster, units=units, ratios=ratios, rates=rates,
                              threads=threads)
        step[start:stop] = batch.step_time
        memory[start:stop] = batch.device_memory   # what the device holds (seconds: + slack, fixed)
        reserved[start:stop] = reserved_peak_bytes(batch.peak_memory, cluster.memory_reserve_bytes, slack)
        reason[start:stop] = batch.reason
        if progress is not None:
            progress(stop, n)

    valid = reason == 0
    priced = valid & np.isfinite(step) & np.isfinite(memory)
    fits = priced & (memory <= capacity)
    codes, counts = np.unique(reason[~valid], return_counts=True)
    rejected = Counter({REASONS[int(code)]: int(count) for code, count in zip(codes, counts)})
    over = int((priced & ~fits).sum())
    if over:
        rejected[OVER_LIMIT] += over
    unpriced = int((valid & ~priced).sum())
    if unpriced:
        rejected["not priced (an undefined step or memory)"] += unpriced
    if int(fits.sum()) + sum(rejected.values()) != n:
        # every candidate is ranked or counted under one reason: a mismatch is a bug here, not input
        raise RuntimeError(f"search accounting: {int(fits.sum())} fit + {sum(rejected.values())} rejected "
                           f"!= {n} candidates")

    # Deterministic order of the rows that fit: step time, peak memory, then each search dimension and
    # stack choice (smaller first; names in sorted order).
    fit_rows = np.flatnonzero(fits)
    keys = [_rank_codes(space.columns[d][fit_rows])
            for d in reversed(SEARCH_DIMENSIONS + stack_dimensions(space.columns))]
    order = fit_rows[np.lexsort(tuple(keys) + (memory[fit_rows], step[fit_rows]))]
    ranked_rows = [int(i) for i in order[: max(top, per_layer_recompute, balance)]]
    fixed = {"global_batch_size": global_batch_size, "seq_length": seq_length}
    results = []
    for i in ranked_rows:
        spec = _spec_of({k: v for k, v in space.columns.items() if k not in fixed}, i, fixed)
        results.append(Ranked(spec, estimate(model, spec, cluster, units=units, ratios=ratios, rates=rates)))
    results += _balanced(model, cluster, results[:balance], capacity, units, ratios, rates)
    results.sort(key=_rank_key)
    results += _planned(model, cluster, results[:per_layer_recompute], capacity, units, ratios, rates)
    results.sort(key=_rank_key)
    front = pareto_front(step, reserved, fits)     # step time against the reserved peak (MEMORY_FIGURES)
    return SearchResult(
        results=tuple(results[:top]), space_size=n, fitting=int(fits.sum()), rejected=dict(rejected),
        excluded=dict(space.excluded or {}),
        pareto=tuple((float(step[i]), float(reserved[i]), i) for i in front), units=units,
        columns=space.columns, step_time=step, peak_memory=memory, reserved_memory=reserved, capacity=capacity,
        model=model,
    )


def _rank_codes(column: np.ndarray) -> np.ndarray:
    """A dimension's column as sortable codes: numbers as they are; other values by their rank among the
    column's distinct values, in order (strings), or (a dict of switches) by their text's; a lookup per row
    at C speed, not a sort of the rows."""
    if column.dtype != object:
        return column
    values = column.tolist()
    try:
        distinct = sorted(set(values))
    except TypeError:                                # unhashable or unordered values: their text
        values = [repr(value) for value in values]
        distinct = sorted(set(values))
    rank = {value: i for i, value in enumerate(distinct)}
    return np.fromiter(map(rank.__getitem__, values), dtype=np.int64, count=len(values))


def _rank_key(ranked: Ranked) -> tuple:
    return ranked.estimate.step_time, ranked.estimate.memory.peak


def _balanced(model: Any, cluster: Any, best: list[Ranked], capacity: float, units: str, ratios: Any,
              rates: Any = None) -> list[Ranked]:
    """Rebalanced pipelines for the best few, kept where a layer moved (each move made the step faster)."""
    from .pipeline_balance import balance_pipeline

    out = []
    for ranked in best:
        if ranked.spec.pp == 1:
            continue
        balanced = balance_pipeline(model, ranked.spec, cluster, units=units, ratios=ratios, memory_limit=capacity,
                                    rates=rates)
        if balanced.moves:
            out.append(Ranked(balanced.spec, balanced.estimate, rebalanced=True))
    return out


def _planned(model: Any, cluster: Any, best: list[Ranked], capacity: float, units: str, ratios: Any,
             rates: Any = None) -> list[Ranked]:
    """Per-layer recompute plans for the best few, kept where they beat their uniform mode."""
    from .recompute_plan import plan_recompute

    out = []
    for ranked in best:
        if ranked.spec.recompute_option == "none":
            continue  # nothing recomputed: a plan can only match it
        plan = plan_recompute(model, ranked.spec, cluster, memory_limit=capacity, units=units, rates=rates)
        if not plan.feasible or not plan.ranges:
            continue
        priced = estimate(model, plan.spec, cluster, units=units, ratios=ratios, rates=rates)
        if priced.memory.device_peak <= capacity and priced.step_time < ranked.estimate.step_time:
            out.append(Ranked(plan.spec, priced, per_layer_recompute=True, rebalanced=ranked.rebalanced))
    return out


def print_progress(done: int, total: int, stream=sys.stderr) -> None:
    """A one-line progress bar on *stream*."""
    width = 30
    filled = int(width * done / total) if total else width
    stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} candidates")
    if done >= total:
        stream.write("\n")
    stream.flush()
