"""Candidates: many strategies as numpy columns, validated once, vectorised.

:meth:`Candidates.from_arrays` takes ExecSpec's field names, each an array or a
scalar (broadcast), and applies ExecSpec's own rules row by row: a row that
``ExecSpec(...)`` would refuse is not an exception but a reason code
(:attr:`Candidates.reason`, see :mod:`ndcost.tables.reasons`); the joint rules that
need a model and a cluster are applied by ``estimate_many``. ``cands[i]`` turns
a row back into an :class:`~ndcost.spec.exec_spec.ExecSpec` (raising the descriptive
:class:`~ndcost.errors.SpecError` for an invalid row).

Storage, per field kind (what the shared formulas of ``ndcost.tables.formulas`` read):

* ints: int64; optional ints (etp, micro_batch_num, global_batch_size,
  optimizer_shard): int64 with :data:`~ndcost.tables.formulas.NONE_INT` for ``None``;
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

Here: the Candidates class (construction, access, take); the columns are
:mod:`ndcost.price.candidate_columns`', the row rules and layouts :mod:`ndcost.price.candidate_rules`'.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Iterable

import numpy as np

from ..tables.formulas import CHOICES, NONE_INT
from ..errors import SpecError
from ..spec.exec_spec import ExecSpec
from ..spec.recompute_spec import switches_from_mask
from .candidate_columns import (
    FIELDS, _Column, _DEFAULTS, _KIND, _RECOMPUTE_STRINGS, _array_column, _interned, _per_row, _scalar_column,
)
from .candidate_rules import _Rules, _layouts_of, _moe_rules, _probe_structured, _sharding_rules, _spec_rules

__all__ = ["Candidates"]


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
        _moe_rules(cols, reason, layout_fields["full_recompute"])
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
        """int64 (N,), read-only: the first ExecSpec rule each row breaks (0: none); see ndcost.tables.reasons."""
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

    def keeping_reasons(self, prior: np.ndarray) -> Candidates:
        """These candidates with *prior*'s reason on every row where it is not 0 (the first rule a row broke
        before a transformation that rebuilt its columns: a stack's fields filled in by ``software``, which
        decodes each column and so loses a refused value such as a ZeRO stage of 1.5), their own elsewhere;
        such a row holds no layout. *prior* is int64 (N,)."""
        prior = np.asarray(prior, dtype=np.int64)
        if prior.shape != (self._n,):
            raise ValueError(f"prior reasons of shape {prior.shape} for {self._n} candidates")
        if not np.any(prior):
            return self
        other = self.take(np.arange(self._n))
        refused = prior != 0
        other._reason = np.where(refused, prior, self._reason)
        other._reason.setflags(write=False)
        other._layout_index = np.where(refused, -1, self._layout_index).astype(self._layout_index.dtype)
        other._layout_index.setflags(write=False)
        return other

    def layout_spec(self, layout: int) -> ExecSpec:
        """A spec with layout *layout*'s fields (its layout is the layout of every row that has it)."""
        fields = dict(self._layouts[layout])
        mask = fields.pop("keep_mask")
        # no layout depends on the micro-batches: 2·pp of them, which every schedule accepts (DualPipe's least)
        return ExecSpec(micro_batch_num=2 * fields["pp"],
                        selective_switches=switches_from_mask(mask) if mask >= 0 else None, **fields)
