"""``estimate()``: one strategy, priced, in seconds or in ND's units.

The Python layer validates once, builds (or fetches from cache) the layout and
the flat arrays, and hands them to the backend's kernels; it computes no
price itself, so both backends price every candidate the same way.
"""
from __future__ import annotations

import functools
import math
import struct
import threading
from types import MappingProxyType
from typing import Any

import numpy as np

from . import _columns as col
from . import _backend
from ._cache import cached
from ._formulas import (
    SCALAR, derived_columns_scalar, joint_reason_scalar, memory_candidate_columns_scalar, nd_candidate_columns_scalar,
)
from ._layout_pool import LayoutPool, layout_piece, pack_layouts
from .derive import derive, derived_values, model_constants
from .device import Cluster
from .errors import SpecError
from .exec_spec import ExecSpec
from .layout import Layout, _layout_key, build_layout
from .memory import MEMORY_PARTS, MemoryEstimate, memory_kind_table, memory_model_vector
from .model import Model
from .nd_tables import (
    MOE_DISPATCH, cluster_constants, nd_candidate_vector, nd_kind_table, nd_model_vector, nd_options_vector,
    refuse_nd_units,
)
from .ratios import Ratios
from .reasons import REASON_CODES
from .result import Estimate, check_parts_sum
from .validate import _layout_rules, validate

__all__ = ["estimate", "nd_estimate", "layer_times", "UNITS", "as_model", "as_cluster"]

UNITS = ("seconds", "nd")


def as_model(model: Any) -> Model:
    """A Model from a Model or a catalog name."""
    if isinstance(model, Model):
        return model
    if isinstance(model, str):
        return Model.from_catalog(model)
    raise SpecError("model", "estimate", "be a Model or a catalog model name", model)


def as_cluster(cluster: Any, spec: ExecSpec | None = None) -> Cluster:
    """A Cluster from a Cluster, or a device name sized to the spec."""
    if isinstance(cluster, Cluster):
        return cluster
    if isinstance(cluster, str) and spec is not None:
        return Cluster(cluster, num_devices=spec.num_devices)
    raise SpecError("cluster", "estimate", "be a Cluster (or a device name, sized to the spec)", cluster)


def _empty_savings() -> np.ndarray:
    return np.zeros(0, dtype=np.float64)


def _nd_stage_sums(model: Model, spec: ExecSpec, cluster: Cluster, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """The ND walk: per-stage raw sums (p, STAGE_FIELDS) and the candidate vector."""
    derived = derive(model, spec, cluster)
    cand = nd_candidate_vector(spec, derived, cluster)
    stage = np.empty((layout.pp, len(col.STAGE_FIELDS)), dtype=np.float64)
    _backend.kernels.nd_stage_sums(
        nd_kind_table(model), nd_model_vector(model), cand, layout.stage_counts(),
        layout.slot_option, layout.slot_mask, layout.emb_stage, layout.out_stage, stage,
    )
    return stage, cand


@functools.lru_cache(maxsize=16)
def nd_options(ratio_type: str, rec_type: str, p2p: bool) -> np.ndarray:
    """ND's estimator options as the kernels read them (read-only, cached)."""
    vec = nd_options_vector(ratio_type, rec_type, p2p)
    vec.setflags(write=False)
    return vec


_options = nd_options


def nd_estimate(model: Model, spec: ExecSpec, cluster: Cluster, layout: Layout, *, ratios: Any = None,
                ratio_type: str = "DYNAMIC", rec_type: str = "WITH", p2p: bool = False,
                stage_savings: Any = None, stage_focused: int | None = None) -> dict:
    """ND's score of a validated strategy (seed estimate_performance), as a dict of results."""
    stage, cand = _nd_stage_sums(model, spec, cluster, layout)
    savings = _empty_savings() if stage_savings is None else np.ascontiguousarray(stage_savings, dtype=np.float64)
    if savings.shape[0] not in (0, layout.pp):
        raise SpecError("stage_savings", "estimate", f"hold one value per stage ({layout.pp})", len(savings))
    focus = -1 if stage_focused is None else int(stage_focused)
    if not -1 <= focus < layout.pp:
        raise SpecError("stage_focused", "estimate", f"be a stage index in [0, {layout.pp})", stage_focused)
    parts = np.empty(len(col.PART_NAMES), dtype=np.float64)
    stage_times = np.empty(layout.pp, dtype=np.float64)
    total = _backend.kernels.nd_combine(stage, cand, nd_model_vector(model), _options(ratio_type, rec_type, bool(p2p)),
                               savings, focus, parts, stage_times)
    units = "nd"
    ratio_set = Ratios.coerce(ratios)
    if ratio_set is not None:
        scaled = np.empty_like(parts)
        total = _backend.kernels.nd_apply_ratios(parts, np.asarray(ratio_set.vector(), dtype=np.float64), scaled)
        parts = scaled
        units = "nd_ms"
    return {"units": units, "step_time": float(total), "parts": dict(zip(col.PART_NAMES, map(float, parts))),
            "stage_times": tuple(map(float, stage_times))}


def estimate(model: Any, spec: ExecSpec, cluster: Any, *, units: str = "seconds", ratios: Any = None,
             ratio_type: str = "DYNAMIC", rec_type: str = "WITH", p2p: bool = False,
             stage_savings: Any = None, stage_focused: int | None = None,
             with_memory: bool = True, rates: Any = None) -> Estimate:
    """Price one strategy.

    Args:
        model: A :class:`Model` or a catalog name.
        spec: The strategy.
        cluster: A :class:`Cluster` (or a device name: a cluster of exactly the spec's devices).
        units: ``"seconds"`` (default) or ``"nd"`` (ND's score; with *ratios*, milliseconds).
        ratios: A :class:`Ratios`, a path to a ratios JSON, or a mapping.
        ratio_type, rec_type, p2p: ND's estimator options (CustomConfig rtype, retype, ptype), nd units only.
        stage_savings: Per stage, the recompute time a per-layer plan saves (ND's stage_savings).
        stage_focused: The stage whose parts are reported (ND's stage_focused); default the straggler.
        with_memory: Also estimate memory per stage and whether it fits.
        rates: Seconds mode's achievable rates: a :class:`~ndcost.rates.Rates` or a rates JSON
            (``ndcost.rates_io``, e.g. fitted by ``ndcost.fit_rates``); default the device's.

    Raises:
        SpecError: For anything invalid, naming the parameter, the rule and the value.
    """
    if units not in UNITS:
        raise SpecError("units", "estimate", f"be one of {', '.join(map(repr, UNITS))}", units)
    if not isinstance(spec, ExecSpec):
        raise SpecError("spec", "estimate", "be an ExecSpec", spec)
    model = as_model(model)
    cluster = as_cluster(cluster, spec)
    if units == "nd" and rates is not None:
        raise SpecError("rates", "estimate", "be given in seconds units only (ND's units price no rates)", rates)
    if units == "nd":
        refuse_nd_units(model, "estimate")
    if units == "seconds":
        # Seconds mode prices a per-layer plan as it runs (plan.spec's ranges), so ND's
        # stage_savings adjustment and its stage_focused view have no meaning there.
        for name, value in (("stage_savings", stage_savings), ("stage_focused", stage_focused)):
            if value is not None:
                raise SpecError(name, "estimate", "be given in nd units only (in seconds, price plan.spec)", value)
    if units == "nd" and stage_savings is None and stage_focused is None:
        return _estimate_nd_one(model, spec, cluster, ratios, ratio_type, rec_type, p2p, with_memory)
    validate(model, spec, cluster)
    layout = build_layout(model, spec)
    derived = derive(model, spec, cluster)
    memory = _memory(model, spec, cluster, derived) if with_memory else None
    if units == "nd":
        priced = nd_estimate(model, spec, cluster, layout, ratios=ratios, ratio_type=ratio_type,
                             rec_type=rec_type, p2p=p2p, stage_savings=stage_savings, stage_focused=stage_focused)
    else:
        priced = _seconds(model, spec, cluster, layout, derived, ratios=ratios, rates=rates)
    check_parts_sum(priced["parts"], priced["step_time"])
    if memory is not None and units == "seconds":
        # seconds mode holds the process to what it really takes (ndcost.memory_overheads)
        from .memory_overheads import fixed_bytes

        memory.with_overheads(float(fixed_bytes(spec.dp, spec.tp, spec.pp, spec.cp, spec.ep)),
                              float(cluster.memory_reserve_bytes))
    fits = True if memory is None else memory.fits(cluster.device.hbm_bytes)
    return Estimate(
        units=priced["units"], step_time=priced["step_time"], parts=priced["parts"],
        stage_times=priced["stage_times"], memory=memory, fits=fits,
        mfu=priced.get("mfu", math.nan), hfu=priced.get("hfu", math.nan),
        tokens_per_second=priced.get("tokens_per_second", math.nan),
        details={k: v for k, v in priced.items() if k not in ("units", "step_time", "parts", "stage_times",
                                                              "mfu", "hfu", "tokens_per_second")},
    )


_ONE_ROW = np.zeros(1, dtype=np.int64)
_ONE_ROW.setflags(write=False)
_NO_RATIOS = np.zeros(0, dtype=np.float64)
_NO_RATIOS.setflags(write=False)
_NAN = math.nan


class _ModelTables:
    """Everything the one-candidate path reads off a model, built once per model object."""

    __slots__ = ("constants", "kinds", "vector", "memory_kinds", "memory_vector", "layouts")

    def __init__(self, model: Model) -> None:
        self.constants = model_constants(model)
        self.kinds, self.vector = nd_kind_table(model), nd_model_vector(model)
        self.memory_kinds, self.memory_vector = memory_kind_table(model), memory_model_vector(model)
        self.layouts: dict = {}


def _model_tables(model: Model) -> _ModelTables:
    return cached(model, "estimate_tables", lambda: _ModelTables(model))


def _single_layout(model: Model, spec: ExecSpec, layouts: dict) -> LayoutPool:
    """The spec's layout packed for the batch kernels (cached per model and layout key)."""
    key = _layout_key(spec)
    pool = layouts.get(key)
    if pool is None:
        if len(layouts) >= 4096:
            layouts.clear()
        pool = layouts[key] = pack_layouts([layout_piece(build_layout(model, spec))])
    return pool


_N_CAND = len(col.CAND_FIELDS)
# The candidate column, packed as doubles straight from the Python values.
_PACK_ND = struct.Struct(f"={_N_CAND}d").pack
_PACK_BOTH = struct.Struct(f"={_N_CAND + len(col.MEMORY_CAND_FIELDS)}d").pack


class _Scratch(threading.local):
    """Per-thread output buffers of the one-candidate path, read back into Python values
    before the call returns (the memory stages, which the result keeps, are allocated fresh)."""

    def __init__(self) -> None:
        self.pp = -1

    def sized(self, pp: int) -> "_Scratch":
        self.pp = pp
        self.reason = np.zeros(1, dtype=np.int64)
        self.step = np.empty(1, dtype=np.float64)
        self.parts = np.empty((len(col.PART_NAMES), 1), dtype=np.float64)
        self.times = np.empty((1, pp), dtype=np.float64)
        self.peak = np.empty(1, dtype=np.float64)
        self.fit = np.empty(1, dtype=np.uint8)
        return self


_SCRATCH = _Scratch()


def _scratch(pp: int) -> _Scratch:
    scratch = _SCRATCH
    return scratch if scratch.pp == pp else scratch.sized(pp)


_N_PARTS = len(col.PART_NAMES)
_N_MEMORY_COLUMNS = len(MEMORY_PARTS) + 1
_NO_DETAILS = MappingProxyType({})


def _estimate_nd_one(model: Model, spec: ExecSpec, cluster: Cluster, ratios: Any, ratio_type: str,
                     rec_type: str, p2p: bool, with_memory: bool) -> Estimate:
    """ND's score of one spec through the batch kernels, as a batch of one.

    The joint rules are ``estimate_many``'s (``ndcost._formulas.joint_reason``) on Python
    scalars; a broken one re-runs :func:`validate` for its descriptive SpecError.
    """
    c = spec.__dict__
    tables = _model_tables(model)
    cc = cluster_constants(cluster)
    layout_bad = False
    if c["offset"] is not None or c["pp_partition"] is not None or type(c["recompute"]) is tuple:
        layout_bad = any(True for _ in _layout_rules(model, spec))
    if joint_reason_scalar(SCALAR, c, tables.constants, cc, layout_bad, True, REASON_CODES):
        validate(model, spec, cluster)
        raise SpecError("spec", "estimate", "pass validate() (ndcost.explain says why)", spec)  # pragma: no cover
    derived = derived_columns_scalar(SCALAR, c, tables.constants)
    if derived["d_exp"] < 1:
        derived_values(model, spec)  # raises derive's SpecError
    pool = _single_layout(model, spec, tables.layouts)
    ratio_set = Ratios.coerce(ratios) if ratios is not None else None
    # One column holds both candidate vectors: ND's, then the memory model's.
    values = nd_candidate_columns_scalar(SCALAR, c, derived, cc, MOE_DISPATCH)
    if with_memory:
        values += memory_candidate_columns_scalar(SCALAR, c, derived)
    column = np.frombuffer(_PACK_BOTH(*values) if with_memory else _PACK_ND(*values)).reshape(-1, 1)
    scratch = _scratch(spec.pp)
    reason, step, parts, times = scratch.reason, scratch.step, scratch.parts, scratch.times
    reason[0] = 0
    kernels = _backend.kernels
    kernels.nd_estimate_batch(
        tables.kinds, tables.vector, column[:_N_CAND], _ONE_ROW, pool.layouts, pool.pool, pool.slot_pool,
        nd_options(ratio_type, rec_type, bool(p2p)),
        _NO_RATIOS if ratio_set is None else np.ascontiguousarray(ratio_set.vector(), dtype=np.float64),
        reason, step, parts, times)
    total = step.item()
    part_values = dict(zip(col.PART_NAMES, parts.ravel().tolist()))
    check_parts_sum(part_values, total)
    memory = None
    fits = True
    if with_memory:
        peak, fit = scratch.peak, scratch.fit
        stages = np.empty((1, spec.pp, _N_MEMORY_COLUMNS), dtype=np.float64)   # kept by the result
        kernels.memory_batch(tables.memory_kinds, tables.memory_vector, column[_N_CAND:], _ONE_ROW, pool.layouts,
                             pool.pool, pool.slot_pool, cc.reserve, cc.capacity, reason, peak, fit, stages)
        memory = MemoryEstimate.from_kernel(stages[0], peak.item(), cc.capacity)
        fits = bool(fit[0])
    estimate = object.__new__(Estimate)   # Estimate's fields, without its per-field frozen setattr
    estimate.__dict__.update(
        units="nd" if ratio_set is None else "nd_ms", step_time=total, parts=MappingProxyType(part_values),
        stage_times=tuple(times[0].tolist()), memory=memory, fits=fits, mfu=_NAN, hfu=_NAN,
        tokens_per_second=_NAN, details=_NO_DETAILS)
    return estimate


def _memory(model: Model, spec: ExecSpec, cluster: Cluster, derived: Any):
    """The memory model's estimate of a validated spec (its *derived* values given), on the
    layout pool the ND path caches per model (``memory_estimate`` packs it on every call)."""
    from .memory import memory_candidate_vector, run_memory_batch

    pool = _single_layout(model, spec, _model_tables(model).layouts)
    return run_memory_batch(model, memory_candidate_vector(model, spec, derived).reshape(-1, 1), pool, cluster)


def _seconds(model: Model, spec: ExecSpec, cluster: Cluster, layout: Layout, derived: Any, *, ratios: Any,
             rates: Any = None) -> dict:
    from .rates_io import as_rates
    from .seconds import seconds_estimate  # the physics model

    rate_set = as_rates(rates, device=cluster, owner="estimate")
    priced = dict(seconds_estimate(model, spec, cluster, layout, derived=derived, rates=rate_set))
    priced["units"] = "seconds"
    ratio_set = Ratios.coerce(ratios)
    if ratio_set is not None:
        # In seconds mode a ratio corrects its part's seconds (issue: calibration in both units).
        parts = {name: value * ratio_set.part_ratio(name) for name, value in priced["parts"].items()}
        priced["parts"] = parts
        priced["step_time"] = sum(parts.values())
    return priced


def layer_times(model: Any, spec: ExecSpec, cluster: Any, kind: int, option: str = "none",
                switches: Any = None) -> tuple[float, float]:
    """(forward, backward) of one layer of *kind* in ND's units, as the seeds' ``estimate_layer_times``.

    The layer runs alone on the first stage of the spec's pipeline; backward
    includes its recompute (priced at a third, as a stage prices it). Cached
    per (model, spec, cluster, kind, option, switches) like the seeds' LayerTimes.
    """
    from .recompute_spec import mask_from_switches

    model = as_model(model)
    cluster = as_cluster(cluster, spec)
    if not isinstance(kind, int) or not 0 <= kind < len(model.kinds):
        raise SpecError("kind", "layer_times", f"be a kind index in [0, {len(model.kinds)})", kind)
    codes = {"none": col.OPTION_NONE, "full": col.OPTION_FULL, "selective": col.OPTION_SELECTIVE}
    if option not in codes:
        raise SpecError("option", "layer_times", "be 'none', 'full' or 'selective'", option)
    if option == "selective":
        mask = spec.keep_mask if switches is None else mask_from_switches(switches)
    else:
        mask = 0xFF if option == "none" else 0
    return _layer_times(model, spec, cluster, kind, codes[option], mask)


@functools.lru_cache(maxsize=4096)
def _layer_times(model: Model, spec: ExecSpec, cluster: Cluster, kind: int, option: int, mask: int) -> tuple[float, float]:
    derived = derive(model, spec, cluster)
    cand = nd_candidate_vector(spec, derived, cluster)
    counts = np.zeros((spec.pp, len(model.kinds) * 1), dtype=np.float64)
    counts[0, kind] = 1.0
    stage = np.empty((spec.pp, len(col.STAGE_FIELDS)), dtype=np.float64)
    _backend.kernels.nd_stage_sums(nd_kind_table(model), nd_model_vector(model), cand, counts,
                          np.array([option], dtype=np.int64), np.array([mask], dtype=np.int64), -1, -1, stage)
    # One stage, one micro-batch: the pipeline is the stage itself (seed estimate_stage on the lone layer).
    one = cand.copy()
    one[col.CAND["p"]] = 1.0
    one[col.CAND["m"]] = 1.0
    one[col.CAND["vp"]] = 1.0
    parts = np.empty(len(col.PART_NAMES), dtype=np.float64)
    times = np.empty(1, dtype=np.float64)
    total = _backend.kernels.nd_combine(np.ascontiguousarray(stage[:1]), one, nd_model_vector(model),
                               _options("DYNAMIC", "WITH", False), _empty_savings(), -1, parts, times)
    once = total - parts[col.PART["recompute"]]
    forward = once / 3.0  # BACKWARD_RATIO = 2: the forward is a third of a pass (seed estimate_layer_times)
    return float(forward), float(total - forward)
