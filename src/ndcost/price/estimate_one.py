"""``estimate()``'s one path for one candidate, in both units: ``estimate_many``'s kernels on a batch of one.

The joint (model, spec, cluster) rules are ``estimate_many``'s (``ndcost.tables.formulas.joint_reason``)
on Python scalars; a broken one re-runs :func:`ndcost.tables.joint_rules.validate` for its descriptive
SpecError. The candidate's derived values and kernel vectors are the scalar twins of the
formulas ``estimate_many`` runs on numpy columns, packed straight into one float64 vector. The
kernels (``nd_estimate_one``, ``seconds_estimate_one``: ``ndcost.kernels.one``) price the unit and
the memory model in one call, each as the batch kernels price a row (the oracle *is* the batch
kernels on a batch of one). What depends only on the model, the layout, the cluster or the
spec is built once and kept with the object it describes (``ndcost.tables.cache``).
"""
from __future__ import annotations

import functools
import threading
import warnings
import weakref
from types import MappingProxyType
from typing import Any

import numpy as np

from .. import _backend
from ..kernels import columns as col
from ..tables.cache import cached, per_object
from ..tables.formulas import (
    SCALAR, derived_columns_scalar, joint_derived_memory_candidate_scalar, joint_nd_memory_candidate_scalar,
    joint_reason_scalar, nd_candidate_columns_scalar,
)
from ..kernels.one import ND_ONE_COUNT, ONE_FIELDS
from ..kernels.seconds_batch import STEP_RATE_FIELDS
from ..tables.layout_pool import LayoutPool, layout_piece, pack_layouts
from ..tables.derive import derived_values, model_constants
from ..spec.device import Cluster
from ..errors import InputWarning, SpecError
from ..spec.exec_spec import ExecSpec
from ..tables.layout import _layout_key, build_layout
from ..tables.memory import MEMORY_PARTS, MemoryEstimate, device_peak_bytes, memory_kind_table, memory_model_vector
from ..tables.memory_overheads import dispatch_tokens, dispatcher_buffer_bytes, fixed_bytes
from ..spec.model import Model
from ..tables.nd_tables import (
    MOE_DISPATCH, cluster_constants, nd_kind_table, nd_model_vector, nd_options_vector, refuse_nd_units,
)
from ..spec.rates import Rates
from ..spec.ratios import Ratios
from ..tables.reasons import REASON_CODES
from .result import Estimate, check_parts_sum
from ..tables.seconds import _extras, rates_vector, seconds_candidate_values, seconds_kind_table, seconds_model_vector
from ..tables.joint_rules import _layout_rules, offset_layer_count, validate

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


_NO_RATIOS = _read_only(np.zeros(0, dtype=np.float64))
_NO_DETAILS = MappingProxyType({})
_N_MEMORY_COLUMNS = len(MEMORY_PARTS) + 1
_N_STAGE_SUMS = len(col.SECONDS_STAGE_FIELDS)
_PART_NAMES = col.PART_NAMES
# Where seconds_estimate_one writes its scalars (ndcost.kernels.one.ONE_FIELDS).
_ONE_STEP, _ONE_PEAK = ONE_FIELDS.index("step_time"), ONE_FIELDS.index("peak")
_ONE_PARTS, _ONE_RATES = ONE_FIELDS.index(col.PART_NAMES[0]), ONE_FIELDS.index(STEP_RATE_FIELDS[0])


class _ModelTables:
    """Everything the one-candidate path reads off a model, built once per model object
    (seconds mode's tables when first asked for)."""

    __slots__ = ("constants", "kinds", "vector", "memory_kinds", "memory_vector", "layouts", "_seconds", "nd_units")

    def __init__(self, model: Model) -> None:
        self.nd_units = False   # refuse_nd_units passed (checked when ND's units first price the model)
        self.constants = model_constants(model)
        self.kinds, self.vector = nd_kind_table(model), nd_model_vector(model)
        self.memory_kinds, self.memory_vector = memory_kind_table(model), memory_model_vector(model)
        self.layouts: dict = {}
        self._seconds = None

    def seconds(self, model: Model) -> tuple:
        """(seconds kind table, seconds model vector)."""
        if self._seconds is None:
            self._seconds = (seconds_kind_table(model), seconds_model_vector(model))
        return self._seconds


def _model_tables(model: Model) -> _ModelTables:
    return cached(model, "estimate_tables", lambda: _ModelTables(model))


class _Context(threading.local):
    """The (model, cluster) priced last on this thread and their tables: a search prices many
    specs on one of each, so a fresh spec skips the two per-object lookups. Weak references:
    it keeps neither object alive (a dead one's id may be reused, its reference then is None)."""

    def __init__(self) -> None:
        self.model = self.cluster = lambda: None
        self.tables = self.cc = None

    def get(self, model: Model, cluster: Cluster) -> tuple:
        if self.model() is not model or self.cluster() is not cluster:
            self.tables, self.cc = _model_tables(model), cluster_constants(cluster)
            self.model, self.cluster = weakref.ref(model), weakref.ref(cluster)
        return self.tables, self.cc


_CONTEXT = _Context()


#: fixed_bytes (CUDA context, cuBLAS workspace, NCCL buffers, the MoE dispatcher's) by (dp, tp, pp, cp, ep, the
#: dispatcher's buffer bytes), which a search repeats across its candidates (bounded like _RECENT).
_FIXED: dict = {}


def _fixed_bytes(c: dict, model: Any) -> float:
    dispatcher = c["moe_dispatcher"] if model.is_moe else "alltoall"
    # HybridEP's buffer holds every token of the group: the tokens a rank dispatches key it (DeepEP's: its size alone)
    tokens = (dispatch_tokens(c["micro_batch_size"], c["seq_length"], c["tp"], c["cp"], c["sequence_parallel"])
              if dispatcher == "hybridep" else 0)
    key = (c["dp"], c["tp"], c["pp"], c["cp"], c["ep"], dispatcher, model.hidden_size, model.num_experts, tokens)
    fixed = _FIXED.get(key)
    if fixed is None:
        if len(_FIXED) >= 4096:
            _FIXED.clear()
        buffers = dispatcher_buffer_bytes(model, dispatcher, c["ep"], tokens)
        fixed = _FIXED[key] = float(fixed_bytes(*key[:5], buffers))
    return fixed


class _OneLayout:
    """A spec's layout packed for the batch kernels: the pool, and seconds mode's per-stage
    extras (embedding, output head, MTP modules), flat; and, per backend, the kernels' own
    ``one_tables`` of it and the model's tables (``held``: (backend, tables), built on first use)."""

    __slots__ = ("pool", "row", "extras", "held")

    def __init__(self, pool: LayoutPool, extras: np.ndarray) -> None:
        self.pool, self.row, self.extras = pool, pool.layouts[0], _read_only(extras)
        self.held: tuple = (None, None)

    def hold(self, kernels: Any, tables: _ModelTables, model: Model) -> Any:
        """``kernels.one_tables`` of this layout on *model* (kept for the backend last asked)."""
        skinds, smodel = tables.seconds(model)
        held = kernels.one_tables(tables.kinds, skinds, tables.vector, smodel, tables.memory_kinds,
                                  tables.memory_vector, self.row, self.pool.pool, self.pool.slot_pool, self.extras)
        self.held = (kernels, held)
        return held


def _one_layout(model: Model, spec: ExecSpec, layouts: dict, nd: bool) -> _OneLayout:
    """The spec's layout, packed (cached per model, layout key and placement: ND's for ND units)."""
    key = (_layout_key(spec), nd)
    packed = layouts.get(key)
    if packed is None:
        if len(layouts) >= 4096:
            layouts.clear()
        layout = build_layout(model, spec, nd)
        packed = layouts[key] = _OneLayout(pack_layouts([layout_piece(layout)]),
                                           np.ascontiguousarray(_extras(layout).reshape(-1)))
    return packed


def single_layout(model: Model, spec: ExecSpec, nd: bool = False) -> LayoutPool:
    """The layout pool of a validated spec on *model* (one layout, ND's placement with *nd*; cached
    per model and layout key)."""
    return _one_layout(model, spec, _model_tables(model).layouts, nd).pool


class _Scratch(threading.local):
    """Per-thread output buffers of the one-candidate kernels, read back into Python values
    before the call returns (what the result keeps -- memory stages, stage sums -- is
    allocated fresh); the stage times' buffer per pipeline depth, as a search varies it."""

    def __init__(self) -> None:
        self.one = np.empty(len(ONE_FIELDS), dtype=np.float64)
        self.nd_one = np.empty(ND_ONE_COUNT, dtype=np.float64)
        self.by_pp: dict = {}

    def stage_times(self, pp: int) -> np.ndarray:
        times = self.by_pp.get(pp)
        if times is None:
            times = self.by_pp[pp] = np.empty(pp, dtype=np.float64)
        return times


_SCRATCH = _Scratch()


class _Prepared:
    """One spec made ready for the kernels on one (model, cluster), in one unit: what its joint
    rules, derived values and candidate columns give, none of which depends on anything else.

    Kept for the specs priced last (:data:`_RECENT`; the spec itself is not touched), so a
    spec priced again -- a search revisiting a candidate, ND's drop-in, which interns equal
    configs -- goes straight to the kernels.
    """

    __slots__ = ("model", "cluster", "tables", "cc", "packed", "column", "pp", "fixed", "rate")

    def __init__(self, model: Model, spec: ExecSpec, cluster: Cluster, seconds: bool, with_memory: bool) -> None:
        c = spec.__dict__
        tables, cc = _CONTEXT.get(model, cluster)
        if not seconds and not tables.nd_units:
            refuse_nd_units(model, "estimate")
            tables.nd_units = True
        layout_bad = False
        if c["offset"] is not None or c["pp_partition"] is not None or type(c["recompute"]) is tuple:
            layout_bad = any(True for _ in _layout_rules(model, spec))
        # The joint rules and the candidate's values in one fused twin of the formulas where one exists
        # (tables.formulas_fused): (0, ..., values), or a broken rule's (code, None, None).
        if with_memory and seconds:
            reason, derived, values = joint_derived_memory_candidate_scalar(c, tables.constants, cc, layout_bad, True,
                                                                            REASON_CODES)
        elif with_memory:
            reason, d_exp, values = joint_nd_memory_candidate_scalar(c, tables.constants, cc, layout_bad, True,
                                                                     REASON_CODES, MOE_DISPATCH)
        else:
            reason = joint_reason_scalar(SCALAR, c, tables.constants, cc, layout_bad, True, REASON_CODES)
        if reason:
            validate(model, spec, cluster)
            raise SpecError("spec", "estimate", "pass validate() (ndcost.explain says why)", spec)  # pragma: no cover
        if not with_memory:
            derived = derived_columns_scalar(SCALAR, c, tables.constants)
            values = () if seconds else nd_candidate_columns_scalar(SCALAR, c, derived, cc, MOE_DISPATCH)
        if seconds or not with_memory:
            d_exp = derived["d_exp"]
        if d_exp < 1:
            derived_values(model, spec)  # raises derive's SpecError
        if seconds:
            values = seconds_candidate_values(spec, derived) + values
        # One tuple holds both candidates: the unit's, then the memory model's (the kernel converts it).
        self.column = values
        if not seconds:
            _warn_unplaced(model, spec)
        self.model, self.cluster, self.tables, self.cc = model, cluster, tables, cc
        self.packed = _one_layout(model, spec, tables.layouts, not seconds)
        self.pp = c["pp"]
        self.fixed = _fixed_bytes(c, model) if seconds and with_memory else 0.0
        # seconds mode: the device's own rates of the spec's precision
        gpus = c["dp"] * c["tp"] * c["pp"] * c["cp"]
        self.rate = _rates_row(cluster, None, c["precision"], gpus) if seconds else None


def _warn_unplaced(model: Model, spec: ExecSpec) -> None:
    """An InputWarning, once per prepared spec, for the layers ND's units leave unplaced: ND's generator
    drops those pp*vpp does not divide when no offset is stated (docs/ND_DIFFERENCES.md). Legal, and ND's
    own behaviour, but surprising."""
    c = spec.__dict__
    if c["offset"] is None and c["pp_partition"] is None:
        cells = c["pp"] * c["vpp"]
        layers = offset_layer_count(model, spec)
        if layers % cells:
            warnings.warn(f"ND's units place {cells} x {layers // cells} layers of {model.name}'s {layers} (pp*vpp = "
                          f"{cells}, no offset stated): the {layers % cells} left over are not priced, as "
                          "HyperParallel's estimator drops them (docs/ND_DIFFERENCES.md); state an offset to place "
                          "them", InputWarning, stacklevel=6)


#: The prepared entries of recently priced specs, by (id(spec), seconds, with_memory), each with a
#: weak reference to its spec (an id is reused once its object dies). Bounded: a caller holding
#: millions of specs does not hold millions of entries; a search revisits few at a time.
_RECENT: dict = {}
_RECENT_LIMIT = 4096


def _prepared(model: Model, spec: ExecSpec, cluster: Cluster, seconds: bool, with_memory: bool) -> _Prepared:
    """The spec's prepared entry on (model, cluster); a broken joint rule raises validate()'s SpecError."""
    key = (id(spec), seconds, with_memory)
    hit = _RECENT.get(key)
    if hit is not None:
        ref, entry = hit
        if ref() is spec and entry.model is model and entry.cluster is cluster:
            return entry
    entry = _Prepared(model, spec, cluster, seconds, with_memory)
    if len(_RECENT) >= _RECENT_LIMIT:
        _RECENT.clear()
    _RECENT[key] = (weakref.ref(spec), entry)
    return entry


def _result(units: str, total: float, parts: dict, times: tuple, memory: Any, fits: bool, mfu: float, hfu: float,
            tokens_per_second: float, details: Any) -> Estimate:
    estimate = object.__new__(Estimate)   # Estimate's fields, without its per-field frozen setattr
    estimate.__dict__.update(
        units=units, step_time=total, parts=MappingProxyType(parts), stage_times=times, memory=memory, fits=fits,
        mfu=mfu, hfu=hfu, tokens_per_second=tokens_per_second, details=details)
    return estimate


def estimate_nd_one(model: Model, spec: ExecSpec, cluster: Cluster, ratios: Any, ratio_type: str,
                    rec_type: str, p2p: bool, with_memory: bool) -> Estimate:
    """ND's score of one spec (and its memory) through ``nd_estimate_one``."""
    prep = _prepared(model, spec, cluster, False, with_memory)
    pp = prep.pp
    kernels, held = prep.packed.held
    if kernels is not _backend.kernels:
        kernels = _backend.kernels
        held = prep.packed.hold(kernels, prep.tables, model)
    ratio_set = Ratios.coerce(ratios) if ratios is not None else None
    scratch = _SCRATCH
    times = scratch.stage_times(pp)
    stages = np.empty((pp, _N_MEMORY_COLUMNS), dtype=np.float64) if with_memory else _NO_MEMORY_STAGES
    kernels.nd_estimate_one(
        held, prep.column, nd_options(ratio_type, rec_type, bool(p2p)),
        _NO_RATIOS if ratio_set is None else np.ascontiguousarray(ratio_set.vector(), dtype=np.float64),
        prep.cc.reserve, scratch.nd_one, times, stages)
    values = scratch.nd_one.tolist()
    total = values[_ONE_STEP]
    part_values = dict(zip(_PART_NAMES, values[_ONE_PARTS:_ONE_RATES]))
    check_parts_sum(part_values, total)
    memory = None
    fits = True
    if with_memory:
        capacity = prep.cc.capacity
        peak = values[_ONE_PEAK]
        reserve = prep.cc.reserve
        # ND's memory model in the one vocabulary: no allocator slack, its reserve standing for the fixed costs
        memory = MemoryEstimate.from_kernel(stages, peak, capacity, reserve, reserve, 1.0)
        fits = peak <= capacity   # memory_batch's fit: the peak stage (its reserve included) within HBM
    # MFU, HFU and tokens/s are not defined on ND's score: None (JSON null), never a NaN to compute with
    return _result("nd" if ratio_set is None else "nd_ms", total, part_values, tuple(times.tolist()),
                   memory, fits, None, None, None, _NO_DETAILS)


_NO_MEMORY_STAGES = np.empty((0, _N_MEMORY_COLUMNS), dtype=np.float64)   # nothing is written to it


def _rates_row(cluster: Cluster, rates: Any, precision: str, gpus: int) -> np.ndarray:
    """(RATE_FIELDS,): the rates of one precision for a job of *gpus* GPUs; the device's own (*rates* None) are
    kept with the cluster."""
    if rates is not None:
        return rates_vector(cluster, rates, precision, gpus)
    rows = per_object(cluster).setdefault("seconds_rate_rows", {})
    row = rows.get((precision, gpus))
    if row is None:
        row = rows[(precision, gpus)] = rates_vector(cluster, Rates.for_device(cluster.device), precision, gpus)
    return row


def estimate_seconds_one(model: Model, spec: ExecSpec, cluster: Cluster, ratios: Any, rates: Any,
                         with_memory: bool) -> Estimate:
    """Seconds mode of one spec (and its memory, with the process's overheads) through ``seconds_estimate_one``.

    *rates* is a :class:`~ndcost.spec.rates.Rates` or None (the device's); ``details`` carries the
    step's model FLOPs, the raw per-stage sums (``SECONDS_STAGE_FIELDS`` columns) and what was priced
    (model, spec, cluster, rates: ``Estimate.ops``).
    """
    prep = _prepared(model, spec, cluster, True, with_memory)
    pp = prep.pp
    kernels, held = prep.packed.held
    if kernels is not _backend.kernels:
        kernels = _backend.kernels
        held = prep.packed.hold(kernels, prep.tables, model)
    scratch = _SCRATCH
    times = scratch.stage_times(pp)
    sums = np.empty((pp, _N_STAGE_SUMS), dtype=np.float64)   # kept by the result (details["stage_sums"])
    stages = np.empty((pp, _N_MEMORY_COLUMNS), dtype=np.float64) if with_memory else _NO_MEMORY_STAGES
    kernels.seconds_estimate_one(
        held, prep.column, prep.rate if rates is None else _rates_row(cluster, rates, spec.precision, spec.num_devices),
        prep.cc.reserve, scratch.one, times, sums, stages)
    values = scratch.one.tolist()
    total = values[_ONE_STEP]
    part_values = dict(zip(_PART_NAMES, values[_ONE_PARTS:_ONE_RATES]))
    mfu, hfu, tokens_per_second, model_flops = values[_ONE_RATES:]
    ratio_set = Ratios.coerce(ratios) if ratios is not None else None
    if ratio_set is not None:
        # In seconds mode a ratio corrects its part's seconds (issue: calibration in both units).
        part_values = {name: value * ratio_set.part_ratio(name) for name, value in part_values.items()}
        total = sum(part_values.values())
    check_parts_sum(part_values, total)
    memory = None
    fits = True
    if with_memory:
        cc = prep.cc
        # seconds mode holds the process to what it really takes (ndcost.tables.memory_overheads)
        memory = MemoryEstimate.from_kernel(stages, values[_ONE_PEAK], cc.capacity, prep.fixed, cc.reserve)
        fits = device_peak_bytes(values[_ONE_PEAK], cc.reserve, prep.fixed) <= cc.capacity   # memory.fits(capacity)
    return _result("seconds", total, part_values, tuple(times.tolist()), memory, fits, mfu, hfu,
                   tokens_per_second, MappingProxyType({"model_flops": model_flops, "stage_sums": sums,
                                                        "inputs": (model, spec, cluster, rates)}))
