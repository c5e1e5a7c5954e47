"""How the fields of many strategies are stored as numpy columns (a :class:`~ndcost.price.candidates.Candidates`'s storage).

Each ExecSpec field has a kind (int, optional int, bool, optional bool, float, optional float, choice,
structured object) and a column of that kind: a scalar broadcast, or an array per row; a value of the
wrong type is marked bad (a row reason later, as ExecSpec's checks would say). Structured values are
int codes into a table of their distinct values.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from ..tables.formulas import CHOICES, NONE_INT
from ..errors import SpecError
from ..spec.exec_spec import ExecSpec
from ..spec.exec_spec_rules import CHOICE_SPELLINGS

__all__ = ["FIELDS"]

#: ExecSpec's fields, the column names of a Candidates.
FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ExecSpec))
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ExecSpec)}

_BYTE_MINIMUM = {"param_bytes": 1, "compute_bytes": 1, "softmax_bytes": 1, "grad_bytes": 1,
                 "optimizer_state_bytes": 1, "optimizer_states": 0, "main_param_bytes": 0, "norm_bytes": 1,
                 "dropout_bytes": 0, "logit_bytes": 1}
_DEGREE_FIELDS = ("dp", "tp", "pp", "vpp", "cp", "ep")
_INT_FIELDS = (_DEGREE_FIELDS + ("micro_batch_size", "seq_length", "seq_split", "pp_runs", "zero_stage",
                                  "moe_dispatcher_sms", "moe_node_limit",
                                  "moe_device_limit") + tuple(_BYTE_MINIMUM))
_OPT_INT_FIELDS = ("etp", "micro_batch_num", "global_batch_size", "optimizer_shard")
_BOOL_FIELDS = ("sequence_parallel", "mtp_in_offset", "emb_out_in_offset", "selective_comm_recompute",
                "recompute_slice_activation", "overlapped_grad_reduce", "overlapped_param_gather", "deferred_grad_accumulation",
                "shard_spans_cp", "flash_attention", "grouped_gemm", "vocab_emb_dp", "tp_overlap",
                "fp8_weight_cache", "moe_dispatch_fp8", "autocast", "grads_set_to_none",
                "moe_weighted_activation", "fp8_activation_storage", "fp8_transpose_cache",
                "zero3_parameter_fetch")
_OPT_BOOL_FIELDS = ("tie_embeddings", "reshard_params")
_FLOAT_FIELDS = ("capacity_factor", "moe_imbalance", "moe_dispatch_count")
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


def _spelled_column(spell: Callable[[Any], Any], array: np.ndarray) -> np.ndarray:
    """A choice column with each value by its canonical name (*spell*: :data:`CHOICE_SPELLINGS`); unchanged where
    every value is a name already."""
    items = array.tolist()
    try:
        distinct = set(items)
    except TypeError:                                  # an unhashable value: spelled (and refused) below
        distinct = None
    if distinct is not None:
        names = {value: spell(value) for value in distinct}
        if all(names[value] == value for value in distinct):
            return array
    out = np.empty(len(items), dtype=object)
    out[:] = [spell(item) for item in items]
    return out


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
        spell = CHOICE_SPELLINGS.get(name)
        value = value if spell is None else spell(value)
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
    if isinstance(value, (list, tuple)) and (kind in ("choice", "object") or len({type(v) for v in value}) > 1):
        # a plain list keeps each item as given: numpy would coerce [True, 1, "x"] to strings and
        # [8, True] to ints, refusing the good rows with the bad one or taking True for 1
        array = np.empty(len(value), dtype=object)
        array[:] = list(value)
    else:
        array = np.asarray(value)
    if array.ndim != 1:
        raise SpecError(name, "Candidates.from_arrays", "be a scalar or a 1-D array", f"an array of shape {array.shape}")
    if name in CHOICE_SPELLINGS:
        array = _spelled_column(CHOICE_SPELLINGS[name], array)
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
    items = array.tolist() if array.dtype.kind != "O" else list(array)
    # Every value a name the table holds (a search's schedules and recompute modes): a lookup per row
    # at C speed (set, map), no per-row key; the codes are the loop's below, the table unchanged.
    names = {value: i for i, value in enumerate(table) if type(value) is str}
    try:
        distinct = set(items)
    except TypeError:                                  # an unhashable value: the loop keys it
        distinct = None
    if distinct is not None and all(type(value) is str and value in names for value in distinct):
        stored = np.fromiter(map(names.__getitem__, items), dtype=np.int32, count=len(items))
        return _Column(_broadcast(stored, n), table=tuple(table))
    index = {_freeze(value): i for i, value in enumerate(table)}
    stored = np.empty(len(array), dtype=np.int32)
    for i, value in enumerate(items):
        key = _freeze(value)
        code = index.get(key)
        if code is None:
            code = index[key] = len(table)
            table.append(value)
        stored[i] = code
    return _Column(_broadcast(stored, n), table=tuple(table))
