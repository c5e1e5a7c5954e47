"""Candidates: many strategies as numpy columns, validated once, vectorised.

:meth:`Candidates.from_arrays` takes ExecSpec's field names, each an array or a
scalar (broadcast), and applies ExecSpec's own rules row by row: a row that
``ExecSpec(...)`` would refuse is not an exception but a reason code
(:attr:`Candidates.reason`, see :mod:`ndcost.reasons`); the joint rules that
need a model and a cluster are applied by ``estimate_many``. ``cands[i]`` turns
a row back into an :class:`~ndcost.exec_spec.ExecSpec` (raising the descriptive
:class:`~ndcost.errors.SpecError` for an invalid row).

Storage, per field kind (what the shared formulas of ``ndcost._formulas`` read):

* ints: int64; optional ints (etp, micro_batch_num, global_batch_size,
  optimizer_shard): int64 with :data:`~ndcost._formulas.NONE_INT` for ``None``;
* bools: bool; optional bools (tie_embeddings, reshard_params): int8, -1 for ``None``;
* capacity_factor: float64; moe_dispatch: float64, NaN for ``None`` (a float array's
  NaN reads as None; a NaN among Python values is refused, as ExecSpec refuses it);
* choices (pp_schedule, cp_algo, precision, selective_rule): int codes, the
  index in ExecSpec's choices (an unknown value gets a code past them);
* structured values (recompute, offset, pp_partition, full_recompute,
  selective_recompute, selective_switches): int codes into a table of the
  distinct values. A list or tuple is ONE value for every row (a 1-D offset, a
  tuple of RecomputeRange); per-row values come as a numpy array (dtype object,
  or ints for int offsets), or for ``recompute`` as a list of strings.

A value of the wrong type (2.5 for dp, "x" for a bool) is a row reason too, as
ExecSpec's checks would say. Lenient where numpy is: integral floats are ints.

Layout-dependent quantities are computed once per distinct layout: each valid
row carries a layout index into :attr:`Candidates.layouts` (the layout fields
pp, vpp, pp_schedule, mtp_in_offset, emb_out_in_offset, offset, pp_partition,
the recompute statement and, where a selective layer can occur, the keep mask).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Iterable, Sequence

import numpy as np

from ._formulas import CHOICES, NONE_INT
from .errors import SpecError
from .exec_spec import BYTE_LIMITS, DEGREE_LIMITS, ExecSpec
from .limits import MAX_BATCH, MAX_CAPACITY_FACTOR, MAX_DEVICES, MAX_SEQ_LENGTH
from .reasons import REASON_CODES
from .recompute_spec import SELECTIVE_RULES, mask_from_switches, selective_keep_mask, switches_from_mask

__all__ = ["Candidates", "FIELDS"]

_OWNER = "Candidates"

#: ExecSpec's fields, the column names of a Candidates.
FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ExecSpec))
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ExecSpec)}

_BYTE_MINIMUM = {"param_bytes": 1, "compute_bytes": 1, "softmax_bytes": 1, "grad_bytes": 1,
                 "optimizer_state_bytes": 1, "optimizer_states": 0, "main_param_bytes": 0, "norm_bytes": 1,
                 "dropout_bytes": 0, "logit_bytes": 1}
_DEGREE_FIELDS = ("dp", "tp", "pp", "vpp", "cp", "ep")
_INT_FIELDS = _DEGREE_FIELDS + ("micro_batch_size", "seq_length", "seq_split", "zero_stage") + tuple(_BYTE_MINIMUM)
_OPT_INT_FIELDS = ("etp", "micro_batch_num", "global_batch_size", "optimizer_shard")
_BOOL_FIELDS = ("sequence_parallel", "mtp_in_offset", "emb_out_in_offset", "selective_comm_recompute",
                "recompute_slice_activation", "overlapped_grad_reduce", "deferred_grad_accumulation",
                "shard_spans_cp", "flash_attention", "grouped_gemm", "vocab_emb_dp", "tp_overlap")
_OPT_BOOL_FIELDS = ("tie_embeddings", "reshard_params")
_FLOAT_FIELDS = ("capacity_factor", "moe_imbalance")
_OPT_FLOAT_FIELDS = ("moe_dispatch",)
_CHOICE_FIELDS = tuple(CHOICES)
_OBJECT_FIELDS = ("recompute", "offset", "pp_partition", "full_recompute", "selective_recompute",
                  "selective_switches")
_KIND = {**{f: "int" for f in _INT_FIELDS}, **{f: "opt_int" for f in _OPT_INT_FIELDS},
         **{f: "bool" for f in _BOOL_FIELDS}, **{f: "opt_bool" for f in _OPT_BOOL_FIELDS},
         **{f: "float" for f in _FLOAT_FIELDS}, **{f: "opt_float" for f in _OPT_FLOAT_FIELDS},
         **{f: "choice" for f in _CHOICE_FIELDS}, **{f: "object" for f in _OBJECT_FIELDS}}
if set(_KIND) != set(FIELDS):  # pragma: no cover - a field added to ExecSpec must be given a kind here
    raise ImportError(f"Candidates does not store {sorted(set(FIELDS) ^ set(_KIND))}")

_RECOMPUTE_STRINGS = ("none", "full", "selective")


# --------------------------------------------------------------------------- values


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def _is_number(value: Any) -> bool:
    """A real number a float64 column can store (an int past float64's range is not)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return -(2**1023) < value < 2**1023
    return isinstance(value, (float, np.integer, np.floating)) and not isinstance(value, np.bool_)


def _freeze(value: Any) -> Any:
    """A hashable key that tells values apart as ExecSpec would (lists as tuples, mappings by items)."""
    if isinstance(value, (list, tuple)):
        return (type(value) is list, tuple(_freeze(item) for item in value))
    if isinstance(value, Mapping):
        return ("mapping", tuple(sorted((str(k), _freeze(v)) for k, v in value.items())))
    if isinstance(value, np.generic):
        return value.item()
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return (type(value).__name__, value)


class _Column:
    """One stored field: its array (read-only, length N), its value table (choices and
    structured values), and the rows whose value could not be stored (the raw values)."""

    __slots__ = ("array", "table", "bad", "raw")

    def __init__(self, array: np.ndarray, table: tuple = (), bad: np.ndarray | None = None,
                 raw: dict | None = None) -> None:
        array.setflags(write=False) if array.flags.writeable else None
        self.array, self.table, self.bad, self.raw = array, table, bad, raw or {}


def _per_row(name: str, value: Any) -> bool:
    """Whether *value* gives one value per row (else it is one value for every row)."""
    kind = _KIND[name]
    if isinstance(value, np.ndarray):
        return value.ndim > 0
    if kind == "object":
        # A list of strings is a recompute per row; any other list is one structured value.
        return name == "recompute" and isinstance(value, (list, tuple)) and len(value) > 0 and all(
            isinstance(item, str) for item in value)
    if kind == "choice":
        return isinstance(value, (list, tuple))
    return isinstance(value, (list, tuple))


def _broadcast(array: np.ndarray, n: int) -> np.ndarray:
    return array if array.shape == (n,) else np.broadcast_to(array, (n,))


def _scalar_column(name: str, value: Any, n: int) -> _Column:
    kind = _KIND[name]
    everyone = np.ones(n, dtype=bool)
    if kind == "int" or kind == "opt_int":
        if kind == "opt_int" and value is None:
            return _Column(np.broadcast_to(np.int64(NONE_INT), (n,)))
        if _is_int(value) and -2**62 < int(value) < 2**62:
            return _Column(np.broadcast_to(np.int64(value), (n,)))
        if isinstance(value, (float, np.floating)) and math.isfinite(value) and value == int(value):
            return _Column(np.broadcast_to(np.int64(int(value)), (n,)))
        return _Column(np.broadcast_to(np.int64(0), (n,)), bad=everyone, raw={-1: value})
    if kind == "bool":
        if _is_bool(value):
            return _Column(np.broadcast_to(np.bool_(value), (n,)))
        return _Column(np.broadcast_to(np.bool_(False), (n,)), bad=everyone, raw={-1: value})
    if kind == "opt_bool":
        if value is None:
            return _Column(np.broadcast_to(np.int8(-1), (n,)))
        if _is_bool(value):
            return _Column(np.broadcast_to(np.int8(1 if value else 0), (n,)))
        return _Column(np.broadcast_to(np.int8(0), (n,)), bad=everyone, raw={-1: value})
    if kind in ("float", "opt_float"):
        if kind == "opt_float" and value is None:
            return _Column(np.broadcast_to(np.float64(np.nan), (n,)))
        if _is_number(value) and not (kind == "opt_float" and value != value):
            return _Column(np.broadcast_to(np.float64(value), (n,)))
        return _Column(np.broadcast_to(np.float64(np.nan), (n,)), bad=everyone, raw={-1: value})
    if kind == "choice":
        choices = CHOICES[name]
        if isinstance(value, str) and value in choices:
            return _Column(np.broadcast_to(np.int32(choices.index(value)), (n,)), table=choices)
        return _Column(np.broadcast_to(np.int32(len(choices)), (n,)), table=choices + (value,))
    # structured value: a table of one (recompute strings keep their fixed codes).
    if name == "recompute":
        table = _RECOMPUTE_STRINGS
        if isinstance(value, str) and value in table:
            return _Column(np.broadcast_to(np.int32(table.index(value)), (n,)), table=table)
        return _Column(np.broadcast_to(np.int32(len(table)), (n,)), table=table + (value,))
    return _Column(np.broadcast_to(np.int32(0), (n,)), table=(value,))


def _array_column(name: str, value: Any, n: int) -> _Column:
    kind = _KIND[name]
    if isinstance(value, (list, tuple)) and kind in ("choice", "object"):
        array = np.empty(len(value), dtype=object)
        array[:] = list(value)
    else:
        array = np.asarray(value)
    if array.ndim != 1:
        raise SpecError(name, "Candidates.from_arrays", "be a scalar or a 1-D array", f"an array of shape {array.shape}")
    if kind in ("int", "opt_int"):
        if array.dtype.kind in "iu":
            return _Column(_broadcast(array.astype(np.int64), n))
        if array.dtype.kind == "f":
            with np.errstate(invalid="ignore"):
                integral = np.isfinite(array) & (np.abs(array) < 2.0**62)
                integral &= np.where(integral, array, 0.0) == np.floor(np.where(integral, array, 0.0))
            stored = np.where(integral, array, 0.0).astype(np.int64)
            bad = ~integral
            raw = {int(i): float(array[i]) for i in np.flatnonzero(bad)[:64]}
            return _Column(_broadcast(stored, n), bad=_broadcast(bad, n) if bad.any() else None, raw=raw)
        items = list(array)
        stored = np.zeros(len(items), dtype=np.int64)
        bad = np.zeros(len(items), dtype=bool)
        raw = {}
        for i, item in enumerate(items):
            if kind == "opt_int" and item is None:
                stored[i] = NONE_INT
            elif _is_int(item) and -2**62 < int(item) < 2**62:
                stored[i] = int(item)
            else:
                bad[i] = True
                raw[i] = item
        return _Column(_broadcast(stored, n), bad=_broadcast(bad, n) if bad.any() else None, raw=raw)
    if kind == "bool":
        if array.dtype.kind == "b":
            return _Column(_broadcast(array.copy(), n))
        items = list(array)
        bad = np.array([not _is_bool(item) for item in items], dtype=bool)
        stored = np.array([bool(item) if _is_bool(item) else False for item in items], dtype=bool)
        raw = {i: items[i] for i in np.flatnonzero(bad)}
        return _Column(_broadcast(stored, n), bad=_broadcast(bad, n) if bad.any() else None, raw=raw)
    if kind == "opt_bool":
        items = list(array)
        stored = np.zeros(len(items), dtype=np.int8)
        bad = np.zeros(len(items), dtype=bool)
        raw = {}
        for i, item in enumerate(items):
            if item is None:
                stored[i] = -1
            elif _is_bool(item):
                stored[i] = 1 if item else 0
            else:
                bad[i] = True
                raw[i] = item
        return _Column(_broadcast(stored, n), bad=_broadcast(bad, n) if bad.any() else None, raw=raw)
    if kind in ("float", "opt_float"):
        if array.dtype.kind in "iuf":
            return _Column(_broadcast(array.astype(np.float64), n))
        items = list(array)
        stored = np.full(len(items), np.nan)
        bad = np.zeros(len(items), dtype=bool)
        raw = {}
        for i, item in enumerate(items):
            if kind == "opt_float" and item is None:
                continue
            if _is_number(item) and not (kind == "opt_float" and item != item):  # NaN here is not None
                stored[i] = float(item)
            else:
                bad[i] = True
                raw[i] = item
        return _Column(_broadcast(stored, n), bad=_broadcast(bad, n) if bad.any() else None, raw=raw)
    table = list(CHOICES[name]) if kind == "choice" else (list(_RECOMPUTE_STRINGS) if name == "recompute" else [])
    if array.dtype.kind == "U":
        # Strings: intern the distinct values only (np.unique), not every row.
        uniques, inverse = np.unique(array, return_inverse=True)
        codes_of = []
        for value in uniques.tolist():
            if value not in table:
                table.append(value)
            codes_of.append(table.index(value))
        stored = np.asarray(codes_of, dtype=np.int32)[inverse.reshape(-1)]
        return _Column(_broadcast(stored, n), table=tuple(table))
    return _interned(array, n, table)


def _interned(array: np.ndarray, n: int, table: list) -> _Column:
    """Codes into a table of distinct values (the table's first entries keep their codes)."""
    index = {_freeze(value): i for i, value in enumerate(table)}
    stored = np.empty(len(array), dtype=np.int32)
    for i, value in enumerate(array.tolist() if array.dtype.kind != "O" else list(array)):
        key = _freeze(value)
        code = index.get(key)
        if code is None:
            code = index[key] = len(table)
            table.append(value)
        stored[i] = code
    return _Column(_broadcast(stored, n), table=tuple(table))


# --------------------------------------------------------------------------- the rules


class _Rules:
    """ExecSpec's checks over columns: the first broken one per row (its __post_init__ order)."""

    def __init__(self, n: int) -> None:
        self.reason = np.zeros(n, dtype=np.int64)

    def add(self, name: str, broken: Any) -> None:
        if broken is None or broken is False:
            return
        broken = np.asarray(broken)
        if not broken.any():
            return
        self.reason[(self.reason == 0) & broken] = REASON_CODES[name]


def _bad(column: _Column) -> np.ndarray:
    """The rows whose value could not be stored (a bool column; a view of False when none)."""
    if column.bad is not None:
        return column.bad
    return np.broadcast_to(np.False_, column.array.shape)


def _spec_rules(cols: dict[str, _Column], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(reason, the rows whose pp and vpp allow probing the structured fields) before the probe."""
    a = {name: column.array for name, column in cols.items()}
    rules = _Rules(n)
    with np.errstate(all="ignore"):
        # _check_scalars
        for name in _DEGREE_FIELDS:
            rules.add("bad_degree", _bad(cols[name]) | (a[name] < 1) | (a[name] > DEGREE_LIMITS[name]))
        rules.add("bad_degree", (a["etp"] != NONE_INT) & (_bad(cols["etp"]) | (a["etp"] < 1)
                                                          | (a["etp"] > MAX_DEVICES)))
        # In float64: four bounded degrees can multiply past int64, never past float64's range, and a
        # product above 2**24 cannot round down to it.
        devices = (a["dp"].astype(np.float64) * a["tp"] * a["pp"] * a["cp"])
        rules.add("too_many_devices", devices > MAX_DEVICES)
        for name in _BOOL_FIELDS:
            rules.add("bad_flag", _bad(cols[name]))
        for name, limit in (("micro_batch_size", MAX_BATCH), ("seq_length", MAX_SEQ_LENGTH),
                            ("seq_split", MAX_SEQ_LENGTH)):
            rules.add("bad_size", _bad(cols[name]) | (a[name] < 1) | (a[name] > limit))
        for name, minimum in _BYTE_MINIMUM.items():
            rules.add("bad_bytes", _bad(cols[name]) | (a[name] < minimum) | (a[name] > BYTE_LIMITS[name]))
        for name in ("cp_algo", "precision", "selective_rule"):
            rules.add("bad_choice", a[name] >= len(CHOICES[name]))
        rules.add("bad_flag", _bad(cols["tie_embeddings"]))
        factor = a["capacity_factor"]
        rules.add("bad_moe_setting", _bad(cols["capacity_factor"]) | ~np.isfinite(factor) | ~(factor >= 1.0)
                  | (factor > MAX_CAPACITY_FACTOR))
        imbalance = a["moe_imbalance"]
        rules.add("bad_moe_setting", _bad(cols["moe_imbalance"]) | ~np.isfinite(imbalance) | ~(imbalance >= 1.0)
                  | (imbalance > MAX_CAPACITY_FACTOR))
        dispatch = a["moe_dispatch"]
        rules.add("bad_moe_setting", _bad(cols["moe_dispatch"])
                  | (~np.isnan(dispatch) & (~np.isfinite(dispatch) | (dispatch < 0.0))))
        # _check_pipeline
        schedule = a["pp_schedule"]
        codes = {name: i for i, name in enumerate(CHOICES["pp_schedule"])}
        rules.add("bad_choice", schedule >= len(codes))
        pp, vpp = a["pp"], a["vpp"]
        rules.add("vpp_without_pp", (vpp > 1) & (pp == 1))
        rules.add("schedule_vpp", ((schedule == codes["interleaved"]) & (vpp == 1))
                  | ((schedule == codes["zero_bubble_v"]) & (vpp != 2))
                  | ((schedule == codes["gpipe"]) & (vpp != 1)))
        seq_split = a["seq_split"]
        safe_split = np.where(seq_split > 0, seq_split, 1)
        rules.add("bad_seq_split", (seq_split != 1)
                  & ((schedule != codes["seq1f1b"]) | (a["seq_length"] % safe_split != 0)))
        # _check_batch
        mbn, gbs = a["micro_batch_num"], a["global_batch_size"]
        mbn_stated, gbs_stated = mbn != NONE_INT, gbs != NONE_INT
        rules.add("bad_batch", mbn_stated & (_bad(cols["micro_batch_num"]) | (mbn < 1) | (mbn > MAX_BATCH)))
        rules.add("bad_batch", gbs_stated & (_bad(cols["global_batch_size"]) | (gbs < 1) | (gbs > MAX_BATCH)))
        rules.add("bad_batch", ~mbn_stated & ~gbs_stated)
        per_micro_batch = a["micro_batch_size"] * a["dp"]
        safe = np.where(per_micro_batch > 0, per_micro_batch, 1)
        rules.add("batch_not_divisible", gbs_stated & (gbs % safe != 0))
        # gbs is a multiple of per_micro_batch here (the rule above comes first), so it equals
        # per_micro_batch*mbn iff gbs // per_micro_batch == mbn: no product that could overflow.
        rules.add("batch_mismatch", gbs_stated & mbn_stated & (gbs // safe != mbn))
        # ExecSpec bounds the global batch micro_batch_num states (mbs*dp*mbn <= MAX_BATCH).
        rules.add("bad_batch", ~gbs_stated & mbn_stated & (mbn > MAX_BATCH // safe))
    probe_rows = (pp >= 1) & (vpp >= 1) & ~((vpp > 1) & (pp == 1)) & ~_bad(cols["pp"]) & ~_bad(cols["vpp"])
    return rules.reason, probe_rows


def _sharding_rules(cols: dict[str, _Column], reason: np.ndarray) -> None:
    a = {name: column.array for name, column in cols.items()}
    rules = _Rules(len(reason))
    rules.reason = reason
    with np.errstate(all="ignore"):
        zero = a["zero_stage"]
        rules.add("bad_zero_stage", _bad(cols["zero_stage"]) | (zero < 0) | (zero > 3))
        shard = a["optimizer_shard"]
        safe = np.where(shard > 0, shard, 1)
        rules.add("bad_optimizer_shard", (shard != NONE_INT)
                  & (_bad(cols["optimizer_shard"]) | (shard < 1) | (shard > MAX_DEVICES) | (a["dp"] % safe != 0)))
        rules.add("bad_flag", _bad(cols["reshard_params"]))
        rules.add("bad_reshard", (a["reshard_params"] == 1) & (zero != 3))


def _combine_keys(columns: Sequence[np.ndarray], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group id per row, -1 outside *rows*; the first row of each group) for the distinct
    tuples of int *columns* over *rows* (a mixed-radix key, counted densely when small)."""
    n = len(rows)
    group = np.full(n, -1, dtype=np.int64)
    if not rows.any():
        return group, np.zeros(0, dtype=np.int64)
    key = np.zeros(n, dtype=np.int64)
    product = 1
    for column in columns:
        values = np.where(rows, column, 0).astype(np.int64)
        values -= values.min()
        radix = int(values.max()) + 1
        if product * radix >= 2**62:
            stacked = np.stack([np.asarray(column)[rows].astype(np.int64) for column in columns], axis=1)
            _, inverse = np.unique(stacked, axis=0, return_inverse=True)
            group[rows] = inverse.reshape(-1)
            return group, _first_rows(group)
        key = key * radix + values
        product *= radix
    if product <= max(1 << 20, 4 * n):
        used = np.zeros(product, dtype=bool)
        used[key[rows]] = True
        ids = np.cumsum(used) - 1
        group[rows] = ids[key[rows]]
    else:
        _, inverse = np.unique(key[rows], return_inverse=True)
        group[rows] = inverse.reshape(-1)
    return group, _first_rows(group)


def _first_rows(group: np.ndarray) -> np.ndarray:
    valid = np.flatnonzero(group >= 0)
    if not len(valid):
        return np.zeros(0, dtype=np.int64)
    _, first = np.unique(group[valid], return_index=True)
    return valid[first]


def _probe_parameter_reason(error: SpecError) -> str:
    parameter = error.parameter.split(".")[0]
    return "bad_layout_field" if parameter in ("offset", "pp_partition") else "bad_recompute"


class Candidates:
    """N strategies as numpy columns named as ExecSpec's fields (see the module docstring).

    Build with :meth:`from_arrays` or :meth:`from_specs`; ``len(c)``; ``c[i]`` is row i as
    an ExecSpec; ``c["dp"]`` / ``c.dp`` / :meth:`column` a read-only column (choices and
    structured fields decoded to their values); :attr:`reason` the ExecSpec rule each row
    breaks (0: none); :attr:`layout_index` the distinct layout of each valid row (-1 for an
    invalid one) in :attr:`layouts`.
    """

    __slots__ = ("_n", "_cols", "_reason", "_layout_index", "_layouts", "_cache", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("build Candidates with Candidates.from_arrays(...) or Candidates.from_specs(...)")

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_arrays(cls, **columns: Any) -> Candidates:
        """Candidates from ExecSpec field values: arrays (one value per row) or scalars (every row).

        Raises:
            SpecError: For an unknown field name, an array that is not 1-D, or arrays
                of lengths that do not broadcast. A bad *value* is a row reason instead.
        """
        for name in columns:
            if name not in _KIND:
                raise SpecError(name, "Candidates.from_arrays", "be an ExecSpec field", name)
        lengths = {name: len(value) for name, value in columns.items() if _per_row(name, value)}
        sizes = set(lengths.values()) - {1}
        if len(sizes) > 1:
            raise SpecError("columns", "Candidates.from_arrays", "have one length (or length 1)", lengths)
        n = sizes.pop() if sizes else (1 if not lengths else 1)
        stored = {}
        for name in FIELDS:
            value = columns.get(name, _DEFAULTS[name])
            stored[name] = _array_column(name, value, n) if _per_row(name, value) else _scalar_column(name, value, n)
        return cls._finish(n, stored)

    @classmethod
    def from_specs(cls, specs: Iterable[ExecSpec]) -> Candidates:
        """Candidates from ExecSpecs (each already valid on its own: every reason starts at 0)."""
        specs = list(specs)
        for i, spec in enumerate(specs):
            if not isinstance(spec, ExecSpec):
                raise SpecError(f"specs[{i}]", "Candidates.from_specs", "be an ExecSpec", spec)
        n = len(specs)
        stored = {}
        for name in FIELDS:
            kind = _KIND[name]
            values = [spec.__dict__[name] for spec in specs]
            if kind == "int":
                stored[name] = _Column(np.fromiter(values, dtype=np.int64, count=n))
            elif kind == "opt_int":
                stored[name] = _Column(np.fromiter((NONE_INT if v is None else v for v in values), np.int64, n))
            elif kind == "bool":
                stored[name] = _Column(np.fromiter(values, dtype=bool, count=n))
            elif kind == "opt_bool":
                stored[name] = _Column(np.fromiter((-1 if v is None else int(v) for v in values), np.int8, n))
            elif kind in ("float", "opt_float"):
                stored[name] = _Column(np.fromiter((np.nan if v is None else v for v in values), np.float64, n))
            else:
                array = np.empty(n, dtype=object)
                array[:] = values
                table = list(CHOICES[name]) if kind == "choice" else (
                    list(_RECOMPUTE_STRINGS) if name == "recompute" else [])
                stored[name] = _interned(array, n, table)
        return cls._finish(n, stored)

    @classmethod
    def _finish(cls, n: int, cols: dict[str, _Column]) -> Candidates:
        self = object.__new__(cls)
        self._n = n
        self._cols = cols
        self._cache = {}
        reason, probe_rows = _spec_rules(cols, n)
        probe_code, layout_fields = _probe_structured(cols, probe_rows & (reason == 0), n)
        rules = _Rules(n)
        rules.reason = reason
        rules.add("bad_layout_field", probe_code == 1)
        rules.add("bad_recompute", probe_code == 2)
        _sharding_rules(cols, reason)
        self._reason = reason
        self._reason.setflags(write=False)
        self._layout_index, self._layouts = _layouts_of(cols, reason == 0, layout_fields, n)
        self._layout_index.setflags(write=False)
        return self

    # ------------------------------------------------------------------ access

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        invalid = int(np.count_nonzero(self._reason))
        return f"Candidates({self._n} rows, {invalid} invalid, {len(self._layouts)} layouts)"

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, str):
            return self.column(item)
        if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            return self.spec(int(item))
        raise TypeError("index Candidates with a row number (an ExecSpec) or a field name (a column)")

    def __getattr__(self, name: str) -> Any:
        if name in _KIND:
            return self.column(name)
        raise AttributeError(name)

    @property
    def fields(self) -> tuple[str, ...]:
        return FIELDS

    @property
    def reason(self) -> np.ndarray:
        """int64 (N,), read-only: the first ExecSpec rule each row breaks (0: none); see ndcost.reasons."""
        return self._reason

    @property
    def layout_index(self) -> np.ndarray:
        """int64 (N,), read-only: each valid row's layout in :attr:`layouts` (-1 for an invalid row)."""
        return self._layout_index

    @property
    def layouts(self) -> tuple[Mapping[str, Any], ...]:
        """The distinct layouts: their layout fields (keep_mask -1 when no layer can be selective)."""
        return self._layouts

    def column(self, name: str) -> np.ndarray:
        """The column of an ExecSpec field, read-only: stored numbers, or (choices and
        structured fields, optional fields holding None) the values as an object array."""
        if name not in _KIND:
            raise KeyError(name)
        column = self._cols[name]
        kind = _KIND[name]
        if kind in ("int", "bool", "float"):
            return column.array
        cached = self._cache.get(("column", name))
        if cached is not None:
            return cached
        if kind in ("choice", "object"):
            table = np.empty(len(column.table), dtype=object)
            table[:] = list(column.table)
            values = table[column.array]
        elif kind == "opt_int":
            values = np.where(column.array == NONE_INT, None, column.array.astype(object))
        elif kind == "opt_bool":
            values = np.where(column.array < 0, None, column.array > 0)
        else:
            values = np.where(np.isnan(column.array), None, column.array.astype(object))
        values = np.asarray(values, dtype=object)
        values.setflags(write=False)
        self._cache[("column", name)] = values
        return values

    def storage(self, name: str) -> np.ndarray:
        """The stored column as the shared formulas read it (codes, sentinels), read-only."""
        return self._cols[name].array

    def value(self, name: str, row: int) -> Any:
        """Field *name* of row *row* as the Python value it was given."""
        column = self._cols[name]
        if column.bad is not None and column.bad[row]:
            return column.raw.get(row, column.raw.get(-1))
        kind = _KIND[name]
        stored = column.array[row]
        if kind == "int":
            return int(stored)
        if kind == "opt_int":
            return None if stored == NONE_INT else int(stored)
        if kind == "bool":
            return bool(stored)
        if kind == "opt_bool":
            return None if stored < 0 else bool(stored > 0)
        if kind == "float":
            return float(stored)
        if kind == "opt_float":
            return None if math.isnan(stored) else float(stored)
        return column.table[int(stored)]

    def spec(self, row: int) -> ExecSpec:
        """Row *row* as an ExecSpec (raising the SpecError an invalid row deserves)."""
        if not -self._n <= row < self._n:
            raise IndexError(f"row {row} of {self._n} candidates")
        row %= self._n
        return ExecSpec(**{name: self.value(name, row) for name in FIELDS})

    def take(self, rows: Any) -> Candidates:
        """The candidates at *rows* (indices or a boolean mask), sharing this one's layouts."""
        index = np.arange(self._n)[np.asarray(rows)] if np.asarray(rows).dtype == bool else np.asarray(rows, np.int64)
        index = np.where(index < 0, index + self._n, index)
        other = object.__new__(Candidates)
        other._n = len(index)
        other._cols = {}
        for name, column in self._cols.items():
            bad = None if column.bad is None else np.ascontiguousarray(column.bad[index])
            raw = {}
            kept_rows = [row for row in column.raw if row >= 0]
            if kept_rows:
                for new in np.flatnonzero(np.isin(index, kept_rows)).tolist():
                    raw[new] = column.raw[int(index[new])]
            if -1 in column.raw:
                raw[-1] = column.raw[-1]
            array = column.array
            if array.strides[0] == 0 and array.shape[0]:      # one value for every row stays one value
                taken = np.broadcast_to(array[:1], (len(index),))
            else:
                taken = np.ascontiguousarray(array[index])
            other._cols[name] = _Column(taken, column.table, bad, raw)
        other._reason = np.ascontiguousarray(self._reason[index])
        other._reason.setflags(write=False)
        other._layout_index = np.ascontiguousarray(self._layout_index[index])
        other._layout_index.setflags(write=False)
        other._layouts = self._layouts
        other._cache = {}
        return other

    def layout_spec(self, layout: int) -> ExecSpec:
        """A spec with layout *layout*'s fields (its layout is the layout of every row that has it)."""
        fields = dict(self._layouts[layout])
        mask = fields.pop("keep_mask")
        return ExecSpec(micro_batch_num=1, selective_switches=switches_from_mask(mask) if mask >= 0 else None,
                        **fields)


# --------------------------------------------------------------------------- structured fields and layouts


def _probe_structured(cols: dict[str, _Column], rows: np.ndarray, n: int) -> tuple[np.ndarray, dict]:
    """ExecSpec's _check_layout and _check_recompute per distinct (pp, vpp, structured values):
    (per row 0 ok / 1 bad layout field / 2 bad recompute; per row what the layout needs)."""
    arrays = [cols["pp"].array, cols["vpp"].array] + [cols[name].array for name in _OBJECT_FIELDS]
    group, first = _combine_keys(arrays, rows)
    n_groups = len(first)
    status = np.zeros(n_groups + 1, dtype=np.int8)       # the last entry serves rows of no group
    normal_code = np.zeros(n_groups + 1, dtype=np.int64)
    switches_mask = np.full(n_groups + 1, -1, dtype=np.int64)
    selective_possible = np.zeros(n_groups + 1, dtype=bool)
    normals: dict[Any, int] = {}
    normal_values: list[tuple] = []
    for g, row in enumerate(first.tolist()):
        values = {name: cols[name].table[int(cols[name].array[row])] for name in _OBJECT_FIELDS}
        try:
            probe = ExecSpec(pp=int(cols["pp"].array[row]), vpp=int(cols["vpp"].array[row]), micro_batch_num=1,
                             **values)
        except SpecError as error:
            status[g] = 1 if _probe_parameter_reason(error) == "bad_layout_field" else 2
            continue
        normal = tuple(getattr(probe, name) for name in ("offset", "pp_partition", "recompute", "full_recompute",
                                                         "selective_recompute"))
        key = _freeze(normal)
        if key not in normals:
            normals[key] = len(normal_values)
            normal_values.append(normal)
        normal_code[g] = normals[key]
        if probe.selective_switches is not None:
            switches_mask[g] = mask_from_switches(probe.selective_switches)
        selective_possible[g] = not (probe.recompute in ("none", "full")
                                     and probe.selective_recompute in (None, False))
    slot = np.where(group >= 0, group, n_groups)
    return status[slot], {
        "normal_code": normal_code[slot], "normal_values": normal_values,
        "switches_mask": switches_mask[slot], "selective_possible": selective_possible[slot],
    }


def _rule_masks() -> np.ndarray:
    """keep mask by (selective_rule code, flash_attention, sp > 1, selective_comm_recompute)."""
    table = np.zeros((len(SELECTIVE_RULES), 2, 2, 2), dtype=np.int64)
    for r, rule in enumerate(SELECTIVE_RULES):
        for flash in (0, 1):
            for sharded in (0, 1):
                for comm in (0, 1):
                    table[r, flash, sharded, comm] = selective_keep_mask(
                        rule, flash_attention=bool(flash), sequence_parallel_degree=2 if sharded else 1,
                        comm_recompute=bool(comm))
    return table


_RULE_MASKS = _rule_masks()


def _layouts_of(cols: dict[str, _Column], rows: np.ndarray, structured: dict, n: int) -> tuple[np.ndarray, tuple]:
    """(layout index per row, -1 outside *rows*; the distinct layouts' fields)."""
    a = {name: cols[name].array for name in ("pp", "vpp", "pp_schedule", "mtp_in_offset", "emb_out_in_offset",
                                             "selective_rule", "flash_attention", "sequence_parallel", "tp",
                                             "selective_comm_recompute")}
    rule = np.clip(a["selective_rule"], 0, len(SELECTIVE_RULES) - 1)
    sharded = a["sequence_parallel"] & (a["tp"] > 1)
    rule_mask = _RULE_MASKS[rule, a["flash_attention"].astype(np.int64), sharded.astype(np.int64),
                            a["selective_comm_recompute"].astype(np.int64)]
    keep = np.where(structured["switches_mask"] >= 0, structured["switches_mask"], rule_mask)
    layout_mask = np.where(structured["selective_possible"], keep, -1)
    columns = [a["pp"], a["vpp"], a["pp_schedule"], a["mtp_in_offset"], a["emb_out_in_offset"],
               structured["normal_code"], layout_mask + 1]
    group, first = _combine_keys(columns, rows)
    layouts = []
    for row in first.tolist():
        offset, partition, recompute, full, selective = structured["normal_values"][int(structured["normal_code"][row])]
        layouts.append(MappingProxyType({
            "pp": int(a["pp"][row]), "vpp": int(a["vpp"][row]),
            "pp_schedule": CHOICES["pp_schedule"][int(a["pp_schedule"][row])],
            "mtp_in_offset": bool(a["mtp_in_offset"][row]), "emb_out_in_offset": bool(a["emb_out_in_offset"][row]),
            "offset": offset, "pp_partition": partition, "recompute": recompute, "full_recompute": full,
            "selective_recompute": selective, "keep_mask": int(layout_mask[row]),
        }))
    return group.astype(np.int64), tuple(layouts)
