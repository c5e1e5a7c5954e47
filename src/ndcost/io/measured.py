"""Measured runs: ND's classified CSV, one strategy and its measured step a row.

ND compares its parts with a round of strategies run on a cluster, whose
profiles ``nd.trace_classify`` splits into waits (docs/ND_MODEL.md §2.10, §4.7).
The CSV has a header line and one row per run:

* ``time``: the measured step, in milliseconds (``time_unit="s"`` reads seconds);
* the degrees, by ND's dimension names (any case): ``dp``, ``tp`` (or ND's
  ``mp``), ``pp``, ``cp``, ``ep``, ``vpp``, ``mb`` (micro_batch_num), ``mbs``
  (micro_batch_size), ``op`` (the optimizer shard), ``sp`` (sequence
  parallelism) and ``etp``; long names (``micro_batch_num``, ...) are read too;
* the classified times, in the unit of ``time``: ``comp``, ``dp_wait``,
  ``op_wait``, ``mp_wait``, ``sp_wait``, ``ep_wait``, ``cp_wait``, ``pp_wait``;
* optionally ``step_trainer`` (the trainer's own step time, kept apart
  because the profiler inflates ``time``) and ``recompute`` (the run's
  activation recompute: ``none``/``off``, ``full``, ``selective``).

``dp`` is required, and ``mb`` unless the run's global batch is given (then
mb = global_batch_size / (mbs * dp)); a missing degree column is 1, ND's
default of every dimension. Every row becomes an :class:`ExecSpec` through
:meth:`ExecSpec.from_strategy` (ND's keyword strategy), with what the CSV
does not state (``seq_length``, the global batch, any other ExecSpec field)
passed in by the caller. Columns this reader does not know (trace_classify's
``unclassified``, a label, ...) are skipped and listed in
:attr:`MeasuredRuns.ignored`.

Errors are :class:`SpecError` naming the column, with ``"<path>, line <n>"``
as the owner.
"""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterator, Mapping, Sequence

from ..errors import SpecError
from ..spec.exec_spec import ExecSpec

__all__ = ["MeasuredRow", "MeasuredRuns", "read_measured", "MEASURED_COLUMNS", "DEGREE_COLUMNS", "TIME_UNITS"]

#: The classified columns (ND's RealParts plus trace_classify's op_wait and sp_wait).
MEASURED_COLUMNS: tuple[str, ...] = ("comp", "dp_wait", "op_wait", "mp_wait", "sp_wait", "ep_wait", "cp_wait",
                                     "pp_wait")

#: Header (lower case) -> the degree it states, named as ND's keyword strategy does.
DEGREE_COLUMNS: Mapping[str, str] = MappingProxyType({
    "dp": "dp",
    "tp": "mp", "mp": "mp",
    "pp": "pp",
    "cp": "cp",
    "ep": "ep",
    "etp": "etp",
    "vpp": "vpp", "vp": "vpp",
    "mb": "mb", "mbn": "mb", "micro_batch_num": "mb",
    "mbs": "mbs", "micro_batch_size": "mbs",
    "op": "op", "optimizer_shard": "op",
    "sp": "sp", "sequence_parallel": "sp",
})

#: The units ``time`` and the classified columns may be read in -> milliseconds per unit.
TIME_UNITS: Mapping[str, float] = MappingProxyType({"ms": 1.0, "s": 1e3})

# The ExecSpec field an ND keyword sets, to name a column when the spec refuses a value.
_FIELD_OF_KEYWORD = {"mp": "tp", "mb": "micro_batch_num", "mbs": "micro_batch_size", "op": "optimizer_shard",
                     "sp": "sequence_parallel"}
_KEYWORD_OF_FIELD = {value: key for key, value in _FIELD_OF_KEYWORD.items()}

_RECOMPUTE_MODES = {"none": "none", "off": "none", "false": "none", "0": "none", "no": "none",
                    "full": "full", "true": "full", "1": "full", "yes": "full",
                    "selective": "selective"}
_BOOLEANS = {"true": True, "1": True, "yes": True, "on": True,
             "false": False, "0": False, "no": False, "off": False}

_OWNER = "MeasuredRow"


def _finite(value: Any, parameter: str, owner: str, *, positive: bool) -> float:
    rule = "be a finite number > 0" if positive else "be a finite number >= 0"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(parameter, owner, rule, value)
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise SpecError(parameter, owner, rule, value)
    return number


@dataclass(frozen=True)
class MeasuredRow:
    """One measured run: the strategy, its step and its classified times.

    Attributes:
        spec: The strategy that ran.
        time: The measured step, in milliseconds (ND's unit).
        parts: Classified time per `MEASURED_COLUMNS` entry, in milliseconds;
            every column is present (a column left out when building a row by
            hand is 0, as ND's ``fit_ratios`` reads a missing one). Read-only.
        step_trainer: The trainer's own step time in milliseconds, or None.
        recompute: The run's recompute as the CSV stated it, or None.
        source: Where the row came from (``"runs.csv, line 3"``), or None.
        degrees: The degrees as the CSV stated them, by ND keyword (``dp``,
            ``mp``, ``mb``, ...); used to label the row. Read-only.
    """

    spec: ExecSpec
    time: float
    parts: Mapping[str, float] = field(default_factory=dict)
    step_trainer: float | None = None
    recompute: str | None = None
    source: str | None = None
    degrees: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        owner = self.source or _OWNER
        if not isinstance(self.spec, ExecSpec):
            raise SpecError("spec", owner, "be an ExecSpec", self.spec)
        object.__setattr__(self, "time", _finite(self.time, "time", owner, positive=True))
        if not isinstance(self.parts, Mapping):
            raise SpecError("parts", owner, f"be a mapping of {', '.join(MEASURED_COLUMNS)} to times", self.parts)
        parts = {}
        for name in self.parts:
            if name not in MEASURED_COLUMNS:
                raise SpecError("parts", owner, f"have only the keys {', '.join(MEASURED_COLUMNS)}", name)
        for name in MEASURED_COLUMNS:
            parts[name] = _finite(self.parts.get(name, 0.0), name, owner, positive=False)
        object.__setattr__(self, "parts", MappingProxyType(parts))
        if self.step_trainer is not None:
            object.__setattr__(self, "step_trainer",
                               _finite(self.step_trainer, "step_trainer", owner, positive=True))
        if self.recompute is not None and not isinstance(self.recompute, str):
            raise SpecError("recompute", owner, "be None or a string", self.recompute)
        if not isinstance(self.degrees, Mapping):
            raise SpecError("degrees", owner, "be a mapping of ND keywords to degrees", self.degrees)
        object.__setattr__(self, "degrees", MappingProxyType(dict(self.degrees)))

    def __hash__(self) -> int:
        # The read-only proxies do not hash: hash their items.
        return hash((self.spec, self.time, tuple(self.parts.items()), self.step_trainer, self.recompute,
                     self.source, tuple(self.degrees.items())))

    def __reduce__(self):
        # Read-only proxies neither pickle nor deep-copy: rebuild from plain values.
        return (MeasuredRow, (self.spec, self.time, dict(self.parts), self.step_trainer, self.recompute,
                              self.source, dict(self.degrees)))

    @property
    def busy(self) -> float:
        """The classified times summed: the step less idle, which ND does not price."""
        return math.fsum(self.parts.values())

    @property
    def label(self) -> str:
        """The strategy in ND's words: its degrees above 1, DP always (``DP 4 MP 2 PP 2 MB 8``)."""
        return label_of(self.spec, self.recompute)

    def strategy(self) -> dict[str, Any]:
        """The strategy as a JSON-ready dict of ND keywords (what ``_fitted_on`` records)."""
        spec = self.spec
        out: dict[str, Any] = {"dp": spec.dp, "mp": spec.tp, "pp": spec.pp, "vpp": spec.vpp, "cp": spec.cp,
                               "ep": spec.ep, "mb": spec.resolved_micro_batch_num, "mbs": spec.micro_batch_size,
                               "op": _optimizer_shard(spec),
                               "sp": spec.sequence_parallel, "zero_stage": spec.zero_stage}
        recompute = spec.recompute_option
        out["recompute"] = recompute if isinstance(recompute, str) else "ranges"
        return out


def _optimizer_shard(spec: ExecSpec) -> int:
    """ND's OP degree of a spec: 1 without optimizer sharding, else the ranks the shards span."""
    if spec.zero_stage == 0:
        return 1
    return spec.optimizer_shard if spec.optimizer_shard is not None else spec.dp


def label_of(spec: ExecSpec, recompute: str | None = None) -> str:
    """ND's label of a strategy: DP always, then each degree above 1."""
    words = [f"DP {spec.dp}"]
    for name, value in (("MP", spec.tp), ("PP", spec.pp), ("VPP", spec.vpp), ("CP", spec.cp), ("EP", spec.ep),
                        ("MB", spec.resolved_micro_batch_num), ("MBS", spec.micro_batch_size)):
        if value != 1:
            words.append(f"{name} {value}")
    if spec.optimizer_shard is not None and spec.optimizer_shard != 1:
        words.append(f"OP {_optimizer_shard(spec)}")
    if recompute:
        words.append(f"rec {recompute}")
    return " ".join(words)


@dataclass(frozen=True)
class MeasuredRuns(Sequence[MeasuredRow]):
    """The rows of one CSV, in file order (a sequence of :class:`MeasuredRow`).

    Attributes:
        rows: The rows.
        path: The CSV file.
        ignored: Header names the reader does not know and skipped.
    """

    rows: tuple[MeasuredRow, ...]
    path: str | None = None
    ignored: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index):  # type: ignore[override]
        return self.rows[index]

    def __iter__(self) -> Iterator[MeasuredRow]:
        return iter(self.rows)


def _cell(row: Mapping[str, Any], column: str) -> str:
    value = row.get(column)
    return "" if value is None else str(value).strip()


def _number(text: str, column: str, owner: str, *, positive: bool, scale: float = 1.0) -> float:
    rule = "be a finite number > 0" if positive else "be a finite number >= 0"
    try:
        number = float(text)
    except ValueError:
        raise SpecError(column, owner, rule, text) from None
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise SpecError(column, owner, rule, text)
    return number * scale


def _degree(text: str, column: str, owner: str) -> int:
    rule = "be an integer >= 1"
    try:
        number = float(text)
    except ValueError:
        raise SpecError(column, owner, rule, text) from None
    # pandas writes an integer column holding a gap as floats ("8.0"): take those too.
    if not math.isfinite(number) or number != int(number) or number < 1:
        raise SpecError(column, owner, rule, text)
    return int(number)


def _boolean(text: str, column: str, owner: str) -> bool:
    value = _BOOLEANS.get(text.lower())
    if value is None:
        raise SpecError(column, owner, f"be one of {', '.join(_BOOLEANS)}", text)
    return value


def _header(fieldnames: Sequence[str] | None, path: str) -> dict[str, str]:
    """Lower-case name -> the header as written; refuses an empty or ambiguous header."""
    if not fieldnames:
        raise SpecError("path", path, "hold a header line (time, the degrees, comp and the *_wait columns)", path)
    header: dict[str, str] = {}
    seen: dict[str, str] = {}
    for raw in fieldnames:
        name = (raw or "").strip().lower()
        if not name:
            continue
        if name in header:
            raise SpecError(raw, f"{path}, line 1", "be stated once (a duplicate column)", raw)
        degree = DEGREE_COLUMNS.get(name)
        if degree is not None:
            if degree in seen:
                raise SpecError(raw, f"{path}, line 1",
                                f"be left out: column {seen[degree]!r} states the same degree", raw)
            seen[degree] = raw.strip()
        header[name] = raw
    return header


def read_measured(path: "str | os.PathLike[str]", *, seq_length: int, global_batch_size: int | None = None,
                  time_unit: str = "ms", require_parts: bool = True, **spec_fields: Any) -> MeasuredRuns:
    """The measured runs of ND's classified CSV at *path*, one :class:`MeasuredRow` a row.

    Args:
        path: The CSV file.
        seq_length: The runs' sequence length (the CSV does not state it).
        global_batch_size: The runs' global batch, if known: it gives ``mb``
            where the CSV has no such column, and is checked against
            mbs * dp * mb where it has one.
        time_unit: ``"ms"`` (ND's) or ``"s"``: the unit of ``time``, the
            classified columns and ``step_trainer``; rows hold milliseconds.
        require_parts: Whether the classified columns must be there (a fit to
            the total step, ``method="nnls"``, needs only ``time``).
        **spec_fields: Other ExecSpec fields the runs share (``zero_stage``,
            ``recompute``, ``sequence_parallel``, ...); a ``recompute`` or
            ``sp`` column overrides them row by row.

    Raises:
        SpecError: An unreadable file; a missing or malformed column or cell
            (named, with ``"<path>, line <n>"`` as owner); a strategy the spec
            refuses (the column that states it named).
    """
    owner_file = os.fspath(path)
    if time_unit not in TIME_UNITS:
        raise SpecError("time_unit", "read_measured", f"be one of {', '.join(map(repr, TIME_UNITS))}", time_unit)
    scale = TIME_UNITS[time_unit]
    for name in ("dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch_num", "micro_batch_size", "global_batch_size",
                 "seq_length", "optimizer_shard"):
        if name in spec_fields:
            rule = "be stated by the CSV's columns or read_measured's own arguments, not as a shared field"
            raise SpecError(name, "read_measured", rule, spec_fields[name])
    try:
        handle = open(owner_file, newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise SpecError("path", owner_file, f"name a readable CSV file ({exc.strerror})", owner_file) from None
    with handle:
        try:
            reader = csv.DictReader(handle)
            header = _header(reader.fieldnames, owner_file)
            required = ["time", "dp", *(MEASURED_COLUMNS if require_parts else ())]
            for name in required:
                if name not in header:
                    rule = "be a column of the CSV (ND's measured format: time, the degrees, comp, *_wait)"
                    raise SpecError(name, f"{owner_file}, line 1", rule, None)
            if "mb" not in {DEGREE_COLUMNS[n] for n in header if n in DEGREE_COLUMNS} and global_batch_size is None:
                rule = "be a column of the CSV, or the runs' global batch size be given"
                raise SpecError("mb", f"{owner_file}, line 1", rule, None)
            known = {"time", "step_trainer", "recompute", *MEASURED_COLUMNS, *DEGREE_COLUMNS}
            ignored = tuple(header[name].strip() for name in header if name not in known)
            rows = []
            for record in reader:
                owner = f"{owner_file}, line {reader.line_num}"
                cells = {name: _cell(record, raw) for name, raw in header.items()}
                if not any(cells.values()) and not record.get(None):
                    continue  # a blank line
                if record.get(None):
                    raise SpecError("row", owner, f"have at most {len(reader.fieldnames or ())} cells (the header's)",
                                    len(reader.fieldnames or ()) + len(record[None]))
                rows.append(_row(cells, header, owner, scale, seq_length, global_batch_size, spec_fields))
        except csv.Error as exc:
            raise SpecError("path", f"{owner_file}, line {reader.line_num}", f"be valid CSV ({exc})",
                            owner_file) from None
        except UnicodeDecodeError as exc:
            raise SpecError("path", owner_file, f"be UTF-8 text ({exc.reason})", owner_file) from None
    if not rows:
        raise SpecError("path", owner_file, "hold at least one measured run below its header", owner_file)
    return MeasuredRuns(tuple(rows), owner_file, ignored)


def _row(cells: Mapping[str, str], header: Mapping[str, str], owner: str, scale: float, seq_length: int,
         global_batch_size: int | None, spec_fields: Mapping[str, Any]) -> MeasuredRow:
    def named(name: str) -> str:
        return header[name].strip()

    for name, text in cells.items():
        if not text and (name in ("time", "dp") or name in MEASURED_COLUMNS):
            raise SpecError(named(name), owner, "be filled in", text)
    time = _number(cells["time"], named("time"), owner, positive=True, scale=scale)
    parts = {name: _number(cells[name], named(name), owner, positive=False, scale=scale)
             for name in MEASURED_COLUMNS if name in cells}
    step_trainer = None
    if cells.get("step_trainer"):
        step_trainer = _number(cells["step_trainer"], named("step_trainer"), owner, positive=True, scale=scale)
    keywords: dict[str, Any] = {}
    columns: dict[str, str] = {}  # ND keyword -> the column that stated it
    for name, text in cells.items():
        keyword = DEGREE_COLUMNS.get(name)
        if keyword is None or not text:
            continue
        columns[keyword] = named(name)
        keywords[keyword] = _boolean(text, named(name), owner) if keyword == "sp" else _degree(text, named(name), owner)
    degrees = dict(keywords)
    fields = dict(spec_fields)
    fields["seq_length"] = seq_length
    recompute = cells.get("recompute") or None
    if recompute is not None:
        mode = _RECOMPUTE_MODES.get(recompute.lower())
        if mode is None:
            rule = "be none (or off), full or selective"
            raise SpecError(named("recompute"), owner, rule, recompute)
        fields["recompute"] = mode
    keywords.setdefault("mp", 1)
    keywords.setdefault("pp", 1)
    mbs = keywords.setdefault("mbs", 1)
    if "mb" not in keywords:
        if global_batch_size is None:
            raise SpecError("mb", owner, "be filled in, or the runs' global batch size be given", "")
        per_micro_batch = mbs * keywords["dp"]
        if not isinstance(global_batch_size, int) or global_batch_size % per_micro_batch:
            rule = f"divide the global batch size ({global_batch_size}), as mbs*dp"
            raise SpecError(columns.get("dp", "dp"), owner, rule, per_micro_batch)
        keywords["mb"] = global_batch_size // per_micro_batch
    elif global_batch_size is not None:
        fields["global_batch_size"] = global_batch_size
    try:
        spec = ExecSpec.from_strategy(**keywords, **fields)
    except SpecError as exc:
        keyword = _KEYWORD_OF_FIELD.get(exc.parameter, exc.parameter)
        column = columns.get(keyword)
        if column is None and exc.parameter == "global_batch_size" and "mb" in columns:
            column = columns["mb"]  # mbs*dp*mb disagrees with the run's global batch
        raise SpecError(column or exc.parameter, f"{owner} ({exc.owner})", exc.rule, exc.value) from None
    return MeasuredRow(spec=spec, time=time, parts=parts, step_trainer=step_trainer, recompute=recompute,
                       source=owner, degrees=degrees)
