"""Seconds mode for a batch: N candidates priced by one kernel call per chunk.

What ``estimate_many(units="seconds")`` and the search need, in three pieces:

* :func:`seconds_candidate_columns` / :func:`seconds_candidate_matrix`: the seconds candidate
  vector of every row at once (``SECONDS_CAND_FIELDS`` x N), numpy over the storage columns of a
  :class:`~ndcost.price.candidates.Candidates` and the derived values of ``ndcost.tables.formulas`` -- the
  vectorised twin of :func:`ndcost.tables.seconds.seconds_candidate_vector`;
* :func:`seconds_layouts`: each distinct layout's kernel arrays, once: the counts and slots of
  ``ndcost.tables.layout_pool`` plus the per-stage ``SECONDS_EXTRA_FIELDS`` rows (embedding, output
  head, MTP modules per stage), which the layout pool does not hold;
* :func:`seconds_batch`: ``kernels.seconds_estimate_batch`` over the rows (step time, parts,
  MFU, HFU, tokens per second, optionally per-stage times), row for row what
  :func:`ndcost.tables.seconds.seconds_estimate` returns; :class:`SecondsPricer` is its per-chunk
  step with what does not depend on the rows (cluster, tables, rates) built once per batch, which
  ``estimate_many`` drives chunk by chunk (its formulas under a lock, the kernel without the GIL).

A row that is not a valid candidate keeps its reason and gets NaN; a row whose price is NaN gets
"undefined"; a row whose layout cannot be built gets "layout". Nothing raises per candidate.
"""
from __future__ import annotations

import weakref
from typing import Any, Mapping

import numpy as np

from .. import _backend
from ..tables.cache import per_object
from ..kernels.columns import KERNEL_REASONS, PART_NAMES, RATE_FIELDS, SECONDS_CAND_FIELDS
from ..tables.formulas import ARRAY, CHOICES, ClusterConstants, derived_columns, joint_reason
from ..tables.formulas import seconds_candidate_columns as formula_seconds_columns
from ..kernels.seconds_batch import STEP_RATE_FIELDS
from ..tables.layout_pool import LayoutPool, layout_piece, pack_layouts
from .candidates import Candidates
from ..tables.derive import model_constants
from ..spec.device import Cluster, Device
from ..errors import SpecError
from ..limits import MAX_DEVICES
from .estimate import as_model
from ..tables.layout import layout_if_valid
from ..tables.nd_tables import cluster_constants, nd_kind_table, nd_model_vector
from ..spec.rates import Rates
from ..tables.reasons import REASON_CODES
from ..tables.seconds import (
    _DEFAULT_OVERLAP, FP8_DISPATCH_BYTES, Overlap, _extras, rates_vector, seconds_kind_table, seconds_model_vector,
)

__all__ = ["SecondsLayouts", "seconds_layouts", "seconds_candidate_columns", "seconds_candidate_matrix",
           "SecondsPricer", "seconds_batch", "STEP_RATE_FIELDS"]

_OWNER = "seconds_batch"
#: Rows per kernel call when seconds_batch is given a whole Candidates (estimate_many's chunk).
_CHUNK = 8192
_N_KERNEL_REASONS = len(KERNEL_REASONS)
_LAYOUT_CODE = REASON_CODES["layout"]
_PRECISIONS = CHOICES["precision"]
_N_RATES = len(STEP_RATE_FIELDS)
#: The kernel's "not asked for" outputs (zero-sized: nothing is ever written to them, so shared).
_NO_TIMES = np.empty((0, 0), dtype=np.float64)
_NO_SUMS = np.empty((0, 0, 0), dtype=np.float64)


# --------------------------------------------------------------------------- the candidate matrix


def seconds_candidate_columns(c: Mapping[str, Any], d: Mapping[str, Any], overlap: Overlap | None = None) -> dict:
    """Each ``SECONDS_CAND_FIELDS`` value of the rows, by field name (numpy columns or scalars).

    *c* holds Candidates storage columns (``Candidates.storage``: codes for the choice fields,
    ``ndcost.tables.formulas`` sentinels for the optional ones), *d* their derived values
    (``ndcost.tables.formulas.derived_columns(ARRAY, c, ...)``): the formula
    :func:`ndcost.tables.formulas.seconds_candidate_columns` on columns, whose scalar twin is
    :func:`ndcost.tables.seconds.seconds_candidate_vector`'s; rows that are not valid candidates get
    values nobody reads.
    """
    values = formula_seconds_columns(ARRAY, c, d, _DEFAULT_OVERLAP if overlap is None else overlap, FP8_DISPATCH_BYTES)
    return dict(zip(SECONDS_CAND_FIELDS, values))


def seconds_candidate_matrix(c: Mapping[str, Any], d: Mapping[str, Any], n: int, overlap: Overlap | None = None,
                             out: np.ndarray | None = None) -> np.ndarray:
    """(len(SECONDS_CAND_FIELDS), n) float64: a candidate per column (what seconds_estimate_batch reads)."""
    values = formula_seconds_columns(ARRAY, c, d, _DEFAULT_OVERLAP if overlap is None else overlap, FP8_DISPATCH_BYTES)
    matrix = np.empty((len(SECONDS_CAND_FIELDS), n), dtype=np.float64) if out is None else out
    for j, value in enumerate(values):
        matrix[j] = value
    return matrix


# --------------------------------------------------------------------------- layouts


class SecondsLayouts:
    """The distinct layouts of a Candidates on a model, packed for ``seconds_estimate_batch``.

    Attributes:
        pool: The :class:`~ndcost.tables.layout_pool.LayoutPool` of the layouts that can be built
            (its LAYOUT_FIELDS table, ``pool`` and ``slot_pool``; ``max_pp``).
        extras: float64, each table row's (pp, SECONDS_EXTRA_FIELDS) rows, flat, from
            ``extras_at[row]`` (int64, one per table row).
        row: int64 (len(candidates.layouts) + 1,): the table row of each Candidates layout, -1
            when it cannot be built; the last entry (-1) serves the layout index -1 of an invalid row.
        bad: bool, as *row*: the layout breaks validate's rule 7 (the reason "layout").
    """

    __slots__ = ("pool", "extras", "extras_at", "row", "bad")

    def __init__(self, pool: LayoutPool, extras: np.ndarray, extras_at: np.ndarray, row: np.ndarray,
                 bad: np.ndarray) -> None:
        self.pool, self.extras, self.extras_at, self.row, self.bad = pool, extras, extras_at, row, bad
        for array in (extras, extras_at, row, bad):
            array.setflags(write=False)


def seconds_layouts(model: Any, candidates: Candidates) -> SecondsLayouts:
    """The layouts of *candidates* on *model* (each built once per model and layout; cached per pair)."""
    model = as_model(model)
    cached = candidates._cache.get(("seconds_layouts", id(model)))
    if cached is not None and cached[0]() is model:
        return cached[1]
    built = per_object(model).setdefault("seconds_layout_pieces", {})
    pieces, extras, extras_at, rows, bad = [], [], [], [], []
    at = 0
    for index, fields in enumerate(candidates.layouts):
        key = tuple(fields.values())
        entry = built.get(key)
        if entry is None:
            layout = layout_if_valid(model, candidates.layout_spec(index))
            entry = built[key] = ((True, None, None) if layout is None else
                                  (False, layout_piece(layout), np.ascontiguousarray(_extras(layout).reshape(-1))))
        broken, piece, extra = entry
        bad.append(broken)
        if piece is None:
            rows.append(-1)
            continue
        rows.append(len(pieces))
        pieces.append(piece)
        extras.append(extra)
        extras_at.append(at)
        at += extra.shape[0]
    result = SecondsLayouts(
        pack_layouts(pieces), np.concatenate(extras) if extras else np.zeros(0, dtype=np.float64),
        np.asarray(extras_at, dtype=np.int64), np.asarray(rows + [-1], dtype=np.int64),
        np.asarray(bad + [False], dtype=bool))
    candidates._cache[("seconds_layouts", id(model))] = (weakref.ref(model), result)
    return result


# --------------------------------------------------------------------------- the batch


def _cluster_of(cluster: Any) -> tuple[Cluster, ClusterConstants]:
    """(a Cluster whose device gives the rates, the constants the joint rules read)."""
    if isinstance(cluster, Cluster):
        return cluster, cluster_constants(cluster)
    if isinstance(cluster, (str, Device)):
        sized = Cluster(cluster, num_devices=1)   # a bare device: each candidate on its own devices
        return sized, ClusterConstants(None, sized.device)
    raise SpecError("cluster", _OWNER, "be a Cluster, a Device or a device name", cluster)


def _rate_row(cluster: Cluster, rates: Rates, key: int) -> np.ndarray:
    """(RATE_FIELDS,): the rates of a (precision code + len(PRECISIONS) x job GPUs) *key*; NaN for a dtype the
    device states no peak for (such a row prices as "undefined")."""
    gpus, q = divmod(key, len(_PRECISIONS))
    try:
        return rates_vector(cluster, rates, _PRECISIONS[q], gpus)
    except SpecError:
        return np.full(len(RATE_FIELDS), np.nan)


def _rate_keys(c: Mapping[str, Any], n: int) -> np.ndarray:
    """(n,) int64: each row's rate key, its precision code (clipped: a code past the choices is a bad row, priced
    by nobody) + len(PRECISIONS) x its job's GPUs (dp·tp·pp·cp: the compute-bound shares are the slowest GPU's,
    ``ndcost.spec.straggler``)."""
    precision = np.clip(c["precision"], 0, len(_PRECISIONS) - 1)
    gpus = np.clip(np.asarray(c["dp"]) * c["tp"] * c["pp"] * c["cp"], 1, MAX_DEVICES)
    return np.broadcast_to(np.asarray(precision + len(_PRECISIONS) * gpus, dtype=np.int64), (n,))


def _output(out: Mapping[str, Any] | None, name: str, shape: tuple) -> np.ndarray:
    array = None if out is None else out.get(name)
    if array is None:
        return np.empty(shape, dtype=np.float64)
    if not isinstance(array, np.ndarray) or array.shape != shape or array.dtype != np.float64:
        raise SpecError(f"out[{name!r}]", _OWNER, f"be a float64 array of shape {shape}", type(array).__name__)
    return array


def _reason_array(rows: Any, n: int) -> np.ndarray:
    """*rows* itself when it can be written in place (int64, C-contiguous, writable), else a copy."""
    if (isinstance(rows, np.ndarray) and rows.dtype == np.int64 and rows.flags.c_contiguous
            and rows.flags.writeable and rows.shape == (n,)):
        return rows
    array = np.array(rows, dtype=np.int64)
    if array.shape != (n,):
        raise SpecError("rows", _OWNER, f"hold one reason code per row ({n})", f"shape {array.shape}")
    return array


class SecondsPricer:
    """What seconds mode reads that does not depend on the rows, built once per batch: the
    cluster's constants (a bare device sized once), the model's tables and constants, the rates; a rate row
    per (precision, job size) is built the first time a chunk meets it and kept. :meth:`inputs` then :meth:`run`
    price a chunk of rows; nothing else is written after construction, so the threads of ``estimate_many``
    share one.

    Raises:
        SpecError: For a bad cluster, rates, overlap or layouts.
    """

    __slots__ = ("layouts", "constants", "mc", "tables", "cluster", "rates", "overlap", "rows")

    def __init__(self, model: Any, cluster: Any, layouts: SecondsLayouts, *, rates: Rates | None = None,
                 overlap: Overlap | None = None) -> None:
        model = as_model(model)
        if overlap is not None and not isinstance(overlap, Overlap):
            raise SpecError("overlap", _OWNER, "be an Overlap or None", overlap)
        device_cluster, self.constants = _cluster_of(cluster)
        rates = Rates.for_device(device_cluster.device) if rates is None else rates
        if not isinstance(rates, Rates):
            raise SpecError("rates", _OWNER, "be a Rates or None", rates)
        if not isinstance(layouts, SecondsLayouts):
            raise SpecError("layout_pool", _OWNER, "be seconds_layouts(model, candidates) or None", layouts)
        self.layouts, self.overlap = layouts, overlap
        self.mc = model_constants(model)
        self.tables = (nd_kind_table(model), seconds_kind_table(model), nd_model_vector(model),
                       seconds_model_vector(model))
        self.cluster, self.rates = device_cluster, rates
        # rate rows by key, filled as chunks meet them (a dict's reads and writes are atomic under the GIL; a row
        # two threads build at once is the same row)
        self.rows: dict[int, np.ndarray] = {}

    def inputs(self, c: Mapping[str, Any], d: Mapping[str, Any], reason: np.ndarray,
               layout_index: np.ndarray) -> tuple:
        """The kernel's per-row inputs of rows *c* (storage columns, a constant column may be a
        scalar) with derived values *d*: (candidate matrix, rate table, rate index, layout table row). Gives
        a row whose layout cannot be built the reason "layout" (*reason* is written in place)."""
        n = layout_index.shape[0]
        table_row = self.layouts.row[layout_index]
        reason[(reason < _N_KERNEL_REASONS) & (table_row < 0)] = _LAYOUT_CODE
        return (seconds_candidate_matrix(c, d, n, self.overlap), *self._rate_table(_rate_keys(c, n)), table_row)

    def rate_rows(self, storage: Mapping[str, Any], start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(rate table, each row's index into it) of storage rows start..stop: its precision's rates (a code past
        the choices is a bad row, priced by nobody) for its job's GPUs."""
        c = {name: storage[name][start:stop] for name in ("precision", "dp", "tp", "pp", "cp")}
        return self._rate_table(_rate_keys(c, stop - start))

    def _rate_table(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the rate rows of *keys*' distinct values, each key's index among them)."""
        n = keys.shape[0]
        if n == 0 or (keys == keys[0]).all():          # one precision and job size: a search's rows
            unique, index = keys[:1], np.zeros(n, dtype=np.int64)
        else:
            unique, index = np.unique(keys, return_inverse=True)
        rows = []
        for key in unique.tolist():
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = _rate_row(self.cluster, self.rates, key)
            rows.append(row)
        return np.array(rows, dtype=np.float64).reshape(len(rows), len(RATE_FIELDS)), np.ascontiguousarray(index,
                                                                                                            np.int64)

    def run(self, inputs: tuple, reason: np.ndarray, step: np.ndarray, parts: np.ndarray,
            step_rates: np.ndarray, times: np.ndarray | None) -> None:
        """``kernels.seconds_estimate_batch`` over the rows of :meth:`inputs` (the GIL released):
        writes *step* (n,), *parts* (PART_NAMES, n), *step_rates* (STEP_RATE_FIELDS, n), *times*
        (n, >= max pp) or None, and each row's reason."""
        matrix, rate_table, rate_index, table_row = inputs
        pool = self.layouts.pool
        _backend.kernels.seconds_estimate_batch(
            *self.tables, matrix, rate_table, rate_index, table_row, pool.layouts, pool.pool, pool.slot_pool,
            self.layouts.extras, self.layouts.extras_at, reason, step, parts, step_rates,
            _NO_TIMES if times is None else times, _NO_SUMS)


def seconds_batch(model: Any, candidates: Any, cluster: Any, rows: Any = None, layout_index: Any = None,
                  layout_pool: SecondsLayouts | None = None, *, rates: Rates | None = None,
                  overlap: Overlap | None = None, stage_times: bool = False,
                  out: Mapping[str, Any] | None = None, derived: Mapping[str, Any] | None = None) -> dict:
    """Seconds mode over a batch: row for row what :func:`ndcost.tables.seconds.seconds_estimate` returns.

    Args:
        model: A Model or a catalog name.
        candidates: A :class:`~ndcost.price.candidates.Candidates`, or the storage columns of some of its
            rows (``{field: Candidates.storage(field)[rows]}``, a column with one value for every
            row may be a scalar: ``estimate_many``'s chunk); the latter needs *layout_index* and
            *layout_pool*.
        cluster: A Cluster, a Device or a device name: its device gives the rates (a strategy's
            own dp·tp·pp·cp devices are priced, whatever the cluster's size).
        rows: int64 (N,) reason codes, IN/OUT (ndcost.tables.reasons: a row >= len(KERNEL_REASONS) is
            not priced); updated in place when it is a writable C-contiguous int64 array.
            None (a Candidates only): the Candidates' own reasons, then the joint rules of
            (model, spec, cluster) as ``estimate_many`` applies them.
        layout_index: int64 (N,), each row's index in ``candidates.layouts`` (-1 for an invalid
            row); None: ``candidates.layout_index``.
        layout_pool: :func:`seconds_layouts` of the Candidates (built when None).
        rates: Achievable rates (default: ``Rates.for_device(device)``).
        overlap: Comm/compute overlap shares (default: :class:`~ndcost.tables.seconds.Overlap`'s).
        stage_times: Also return each stage's busy time in the step (N, max pp), NaN past a
            row's pp.
        out: Arrays to write into, by result name (float64, the result's shape; any subset).
        derived: ``ndcost.tables.formulas.derived_columns(ARRAY, c, ...)`` of storage columns *c* when the
            caller has them (``estimate_many``'s chunk); computed when None.

    Returns:
        A dict of arrays with one entry per row: ``step_time`` (N,), ``parts`` (PART_NAMES, N),
        ``mfu``, ``hfu``, ``tokens_per_second``, ``model_flops`` (N,), ``reason`` (N,), and
        ``stage_times`` (N, max pp) or None.

    Raises:
        SpecError: For bad arguments (never for a bad candidate: see ``reason``).
    """
    model = as_model(model)
    whole = isinstance(candidates, Candidates)
    if whole:
        n = len(candidates)
        layout_pool = seconds_layouts(model, candidates) if layout_pool is None else layout_pool
        layout_index = candidates.layout_index if layout_index is None else layout_index
    elif not isinstance(candidates, Mapping) or layout_index is None or layout_pool is None or rows is None:
        raise SpecError("candidates", _OWNER, "be a Candidates, or storage columns with rows, layout_index and "
                        "layout_pool", type(candidates).__name__)
    else:
        n = len(layout_index)
    pricer = SecondsPricer(model, cluster, layout_pool, rates=rates, overlap=overlap)
    layout_index = np.asarray(layout_index, dtype=np.int64)
    if layout_index.shape != (n,):
        raise SpecError("layout_index", _OWNER, f"hold one layout index per row ({n})", f"shape {layout_index.shape}")
    reason = None if rows is None else _reason_array(rows, n)

    max_pp = layout_pool.pool.max_pp
    step = _output(out, "step_time", (n,))
    parts = _output(out, "parts", (len(PART_NAMES), n))
    step_rates = np.empty((_N_RATES, n), dtype=np.float64)
    want_times = stage_times or (out is not None and out.get("stage_times") is not None)
    times = _output(out, "stage_times", (n, max_pp)) if want_times else None

    if whole:
        storage = {name: candidates.storage(name) for name in candidates.fields}
        # A column that is one value broadcast (stride 0) enters the formulas as a numpy scalar.
        constant = {name: column[0] for name, column in storage.items()
                    if column.ndim == 1 and column.shape[0] and column.strides[0] == 0}
        varying = [name for name in storage if name not in constant]
        if reason is None:
            reason = np.array(candidates.reason, dtype=np.int64)
            spec_reason = candidates.reason
        chunks = range(0, n, _CHUNK)
    else:
        chunks = range(0, n, n) if n else range(0)

    mc = pricer.mc
    with np.errstate(all="ignore"):
        for start in chunks:
            stop = min(n, start + (_CHUNK if whole else n))
            if whole:
                c = dict(constant)
                for name in varying:
                    c[name] = storage[name][start:stop]
            else:
                c = candidates
            li = layout_index[start:stop]
            chunk_reason = reason[start:stop]
            if whole and rows is None:
                joint = joint_reason(ARRAY, c, mc, pricer.constants, layout_pool.bad[li], True, REASON_CODES)
                chunk_reason[...] = np.where(spec_reason[start:stop] != 0, spec_reason[start:stop], joint)
            d = derived_columns(ARRAY, c, mc) if derived is None or whole else derived
            pricer.run(pricer.inputs(c, d, chunk_reason, li), chunk_reason, step[start:stop], parts[:, start:stop],
                       step_rates[:, start:stop], None if times is None else times[start:stop])

    result = {"step_time": step, "parts": parts, "reason": reason, "stage_times": times}
    for j, name in enumerate(STEP_RATE_FIELDS):
        target = None if out is None else out.get(name)
        if target is not None:
            _output(out, name, (n,))[...] = step_rates[j]
            result[name] = target
        else:
            result[name] = step_rates[j]
    return result
