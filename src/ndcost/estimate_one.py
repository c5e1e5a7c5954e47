"""``estimate()``'s one path for one candidate, in both units: a batch of one through the batch kernels.

The joint (model, spec, cluster) rules are ``estimate_many``'s (``ndcost._formulas.joint_reason``)
on Python scalars; a broken one re-runs :func:`ndcost.validate.validate` for its descriptive
SpecError. The candidate's derived values and kernel columns are the scalar twins of the
formulas ``estimate_many`` runs on numpy columns, packed straight into one float64 column;
the kernels are ``estimate_many``'s (``nd_estimate_batch`` or ``seconds_estimate_batch``, then
``memory_batch``). Everything that depends only on the model, the layout, the cluster or the
rates is built once and kept with the object it describes (``ndcost._cache``).
"""
from __future__ import annotations

import functools
import math
import struct
import threading
from types import MappingProxyType
from typing import Any

import numpy as np

from . import _backend
from . import _columns as col
from ._cache import cached, per_object
from ._formulas import (
    SCALAR, derived_columns_scalar, joint_reason_scalar, memory_candidate_columns_scalar, nd_candidate_columns_scalar,
)
from ._layout_pool import LayoutPool, layout_piece, pack_layouts
from .derive import derived_values, model_constants
from .device import Cluster
from .errors import SpecError
from .exec_spec import ExecSpec
from .layout import _layout_key, build_layout
from .memory import MEMORY_PARTS, MemoryEstimate, memory_kind_table, memory_model_vector
from .memory_overheads import fixed_bytes
from .model import Model
from .nd_tables import MOE_DISPATCH, cluster_constants, nd_kind_table, nd_model_vector, nd_options_vector
from .ratios import Ratios
from .reasons import REASON_CODES
from .result import Estimate, check_parts_sum
from .validate import _layout_rules, validate

__all__ = ["estimate_nd_one", "estimate_seconds_one", "nd_options", "single_layout"]


@functools.lru_cache(maxsize=16)
def nd_options(ratio_type: str, rec_type: str, p2p: bool) -> np.ndarray:
    """ND's estimator options as the kernels read them (read-only, cached)."""
    vec = nd_options_vector(ratio_type, rec_type, p2p)
    vec.setflags(write=False)
    return vec


def _read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


#: A batch of one: row 0 of every table (layout, rates, extras offset 0).
_ONE_ROW = _read_only(np.zeros(1, dtype=np.int64))
_NO_RATIOS = _read_only(np.zeros(0, dtype=np.float64))
_NAN = math.nan
_NO_DETAILS = MappingProxyType({})
_N_CAND = len(col.CAND_FIELDS)
_N_SECONDS_CAND = len(col.SECONDS_CAND_FIELDS)
_N_MEMORY_CAND = len(col.MEMORY_CAND_FIELDS)
_N_PARTS = len(col.PART_NAMES)
_N_MEMORY_COLUMNS = len(MEMORY_PARTS) + 1
_N_STAGE_SUMS = len(col.SECONDS_STAGE_FIELDS)
_PART_NAMES = col.PART_NAMES
# The candidate column, packed as doubles straight from the Python values: the units' own
# vector, then (with memory) the memory model's.
_PACK = {(n, memory): struct.Struct(f"={n + (_N_MEMORY_CAND if memory else 0)}d").pack
         for n in (_N_CAND, _N_SECONDS_CAND) for memory in (False, True)}


class _ModelTables:
    """Everything the one-candidate path reads off a model, built once per model object
    (seconds mode's tables when first asked for)."""

    __slots__ = ("constants", "kinds", "vector", "memory_kinds", "memory_vector", "layouts", "_seconds")

    def __init__(self, model: Model) -> None:
        self.constants = model_constants(model)
        self.kinds, self.vector = nd_kind_table(model), nd_model_vector(model)
        self.memory_kinds, self.memory_vector = memory_kind_table(model), memory_model_vector(model)
        self.layouts: dict = {}
        self._seconds = None

    def seconds(self, model: Model) -> tuple:
        """(seconds kind table, seconds model vector)."""
        if self._seconds is None:
            from .seconds import seconds_kind_table, seconds_model_vector

            self._seconds = (seconds_kind_table(model), seconds_model_vector(model))
        return self._seconds


def _model_tables(model: Model) -> _ModelTables:
    return cached(model, "estimate_tables", lambda: _ModelTables(model))


class _OneLayout:
    """A spec's layout packed for the batch kernels: the pool, and seconds mode's per-stage
    extras (embedding, output head, MTP modules), flat."""

    __slots__ = ("pool", "extras")

    def __init__(self, pool: LayoutPool, extras: np.ndarray) -> None:
        self.pool, self.extras = pool, _read_only(extras)


def _one_layout(model: Model, spec: ExecSpec, layouts: dict) -> _OneLayout:
    """The spec's layout, packed (cached per model and layout key)."""
    key = _layout_key(spec)
    packed = layouts.get(key)
    if packed is None:
        from .seconds import _extras

        if len(layouts) >= 4096:
            layouts.clear()
        layout = build_layout(model, spec)
        packed = layouts[key] = _OneLayout(pack_layouts([layout_piece(layout)]),
                                           np.ascontiguousarray(_extras(layout).reshape(-1)))
    return packed


def single_layout(model: Model, spec: ExecSpec) -> LayoutPool:
    """The layout pool of a validated spec on *model* (one layout; cached per model and layout key)."""
    return _one_layout(model, spec, _model_tables(model).layouts).pool


class _Scratch(threading.local):
    """Per-thread output buffers of the one-candidate path, read back into Python values
    before the call returns (what the result keeps -- memory stages, stage sums -- is
    allocated fresh)."""

    def __init__(self) -> None:
        self.pp = -1

    def sized(self, pp: int) -> "_Scratch":
        self.pp = pp
        self.reason = np.zeros(1, dtype=np.int64)
        self.step = np.empty(1, dtype=np.float64)
        self.parts = np.empty((_N_PARTS, 1), dtype=np.float64)
        self.rates = np.empty((4, 1), dtype=np.float64)
        self.times = np.empty((1, pp), dtype=np.float64)
        self.peak = np.empty(1, dtype=np.float64)
        self.fit = np.empty(1, dtype=np.uint8)
        return self


_SCRATCH = _Scratch()


def _scratch(pp: int) -> _Scratch:
    scratch = _SCRATCH
    return scratch if scratch.pp == pp else scratch.sized(pp)


def _checked(model: Model, spec: ExecSpec, cluster: Cluster) -> tuple:
    """(spec fields, model tables, cluster constants, derived values) of a spec that passes every
    joint rule; a broken rule raises validate()'s SpecError (or derive's)."""
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
    return c, tables, cc, derived


def _memory_of(kernels: Any, tables: _ModelTables, column: np.ndarray, n_cand: int, pool: LayoutPool,
               cc: Any, scratch: _Scratch, pp: int) -> MemoryEstimate:
    """memory_batch on the column's memory part (after its first *n_cand* rows)."""
    stages = np.empty((1, pp, _N_MEMORY_COLUMNS), dtype=np.float64)   # kept by the result
    scratch.reason[0] = 0
    kernels.memory_batch(tables.memory_kinds, tables.memory_vector, column[n_cand:], _ONE_ROW, pool.layouts,
                         pool.pool, pool.slot_pool, cc.reserve, cc.capacity, scratch.reason, scratch.peak,
                         scratch.fit, stages)
    return MemoryEstimate.from_kernel(stages[0], scratch.peak.item(), cc.capacity)


def _result(units: str, total: float, parts: dict, times: tuple, memory: Any, fits: bool, mfu: float, hfu: float,
            tokens_per_second: float, details: Any) -> Estimate:
    estimate = object.__new__(Estimate)   # Estimate's fields, without its per-field frozen setattr
    estimate.__dict__.update(
        units=units, step_time=total, parts=MappingProxyType(parts), stage_times=times, memory=memory, fits=fits,
        mfu=mfu, hfu=hfu, tokens_per_second=tokens_per_second, details=details)
    return estimate


def estimate_nd_one(model: Model, spec: ExecSpec, cluster: Cluster, ratios: Any, ratio_type: str,
                    rec_type: str, p2p: bool, with_memory: bool) -> Estimate:
    """ND's score of one spec through ``nd_estimate_batch`` (and ``memory_batch``), as a batch of one."""
    c, tables, cc, derived = _checked(model, spec, cluster)
    packed = _one_layout(model, spec, tables.layouts)
    pool = packed.pool
    ratio_set = Ratios.coerce(ratios) if ratios is not None else None
    values = nd_candidate_columns_scalar(SCALAR, c, derived, cc, MOE_DISPATCH)
    if with_memory:
        values += memory_candidate_columns_scalar(SCALAR, c, derived)
    column = np.frombuffer(_PACK[_N_CAND, with_memory](*values)).reshape(-1, 1)
    pp = c["pp"]
    scratch = _scratch(pp)
    scratch.reason[0] = 0
    kernels = _backend.kernels
    kernels.nd_estimate_batch(
        tables.kinds, tables.vector, column[:_N_CAND], _ONE_ROW, pool.layouts, pool.pool, pool.slot_pool,
        nd_options(ratio_type, rec_type, bool(p2p)),
        _NO_RATIOS if ratio_set is None else np.ascontiguousarray(ratio_set.vector(), dtype=np.float64),
        scratch.reason, scratch.step, scratch.parts, scratch.times)
    total = scratch.step.item()
    part_values = dict(zip(_PART_NAMES, scratch.parts.ravel().tolist()))
    check_parts_sum(part_values, total)
    memory = None
    fits = True
    if with_memory:
        memory = _memory_of(kernels, tables, column, _N_CAND, pool, cc, scratch, pp)
        fits = bool(scratch.fit[0])
    return _result("nd" if ratio_set is None else "nd_ms", total, part_values, tuple(scratch.times[0].tolist()),
                   memory, fits, _NAN, _NAN, _NAN, _NO_DETAILS)


@functools.lru_cache(maxsize=1024)
def _fixed_bytes(dp: int, tp: int, pp: int, cp: int, ep: int) -> float:
    return float(fixed_bytes(dp, tp, pp, cp, ep))


def _rates_row(cluster: Cluster, rates: Any, precision: str) -> np.ndarray:
    """(1, RATE_FIELDS): the rates of one precision as the batch kernel's rates table; the
    device's own rates (*rates* None) are kept with the cluster."""
    from .seconds import rates_vector

    if rates is not None:
        return rates_vector(cluster, rates, precision).reshape(1, -1)
    rows = per_object(cluster).setdefault("seconds_rate_rows", {})
    row = rows.get(precision)
    if row is None:
        from .rates import Rates

        row = rows[precision] = rates_vector(cluster, Rates.for_device(cluster.device), precision).reshape(1, -1)
    return row


def estimate_seconds_one(model: Model, spec: ExecSpec, cluster: Cluster, ratios: Any, rates: Any,
                         with_memory: bool) -> Estimate:
    """Seconds mode of one spec through ``seconds_estimate_batch`` (and ``memory_batch``), as a batch of one.

    *rates* is a :class:`~ndcost.rates.Rates` or None (the device's); ``details`` carries the
    step's model FLOPs and the raw per-stage sums (``SECONDS_STAGE_FIELDS`` columns).
    """
    from .seconds import seconds_candidate_values

    c, tables, cc, derived = _checked(model, spec, cluster)
    packed = _one_layout(model, spec, tables.layouts)
    pool = packed.pool
    rate_row = _rates_row(cluster, rates, c["precision"])
    values = seconds_candidate_values(spec, derived)
    if with_memory:
        values += memory_candidate_columns_scalar(SCALAR, c, derived)
    column = np.frombuffer(_PACK[_N_SECONDS_CAND, with_memory](*values)).reshape(-1, 1)
    pp = c["pp"]
    scratch = _scratch(pp)
    scratch.reason[0] = 0
    sums = np.empty((1, pp, _N_STAGE_SUMS), dtype=np.float64)   # kept by the result (details["stage_sums"])
    kernels = _backend.kernels
    skinds, smodel = tables.seconds(model)
    kernels.seconds_estimate_batch(
        tables.kinds, skinds, tables.vector, smodel, column[:_N_SECONDS_CAND], rate_row, _ONE_ROW, _ONE_ROW,
        pool.layouts, pool.pool, pool.slot_pool, packed.extras, _ONE_ROW, scratch.reason, scratch.step,
        scratch.parts, scratch.rates, scratch.times, sums)
    total = scratch.step.item()
    part_values = dict(zip(_PART_NAMES, scratch.parts.ravel().tolist()))
    mfu, hfu, tokens_per_second, model_flops = scratch.rates.ravel().tolist()
    ratio_set = Ratios.coerce(ratios) if ratios is not None else None
    if ratio_set is not None:
        # In seconds mode a ratio corrects its part's seconds (issue: calibration in both units).
        part_values = {name: value * ratio_set.part_ratio(name) for name, value in part_values.items()}
        total = sum(part_values.values())
    check_parts_sum(part_values, total)
    memory = None
    fits = True
    if with_memory:
        memory = _memory_of(kernels, tables, column, _N_SECONDS_CAND, pool, cc, scratch, pp)
        # seconds mode holds the process to what it really takes (ndcost.memory_overheads)
        memory.with_overheads(_fixed_bytes(c["dp"], c["tp"], pp, c["cp"], c["ep"]), cc.reserve)
        fits = memory.fits(cc.capacity)
    return _result("seconds", total, part_values, tuple(scratch.times[0].tolist()), memory, fits, mfu, hfu,
                   tokens_per_second, MappingProxyType({"model_flops": model_flops, "stage_sums": sums[0]}))
