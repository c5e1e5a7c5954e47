"""Measured runs to fit rates to: a strategy on one cluster and the step time it measured.

:func:`ndcost.fit_rates` reads its runs through :func:`as_runs`, which takes

* :class:`MeasuredRun` objects, or ``(model, spec, cluster, step_seconds)`` tuples;
* a runs file of this module's own format (below), CSV or YAML;
* a validation file shaped like ``validation/public_runs.yaml`` (``ndcost.io.validation``): each row
  built as ``ndcost validate`` builds it, with the row's training-software rates and overlap
  (``ndcost.io.validation.software``); rows that cannot be built are skipped, with the reason.

The runs format. YAML::

    device: h100-sxm              # optional; must agree with --device / device= when both are given
    model: llama3-8b              # the runs' model: catalog name, config.json or YAML model file
    defaults:                     # optional: ExecSpec fields every run shares
      seq_length: 4096
      global_batch_size: 256
    runs:
      - {label: tp2, tp: 2, dp: 4, recompute: none, step_time: 1.234}
      - {label: tp4-mbs2, tp: 4, dp: 2, micro_batch_size: 2, step_time_ms: 1310}

CSV: a header line and one run a row, the columns below (``model`` then states each row's model).

Per run: ``step_time`` (measured seconds per step) or ``step_time_ms``; any
:class:`~ndcost.spec.exec_spec.ExecSpec` field by its name (``dp``, ``tp``, ``pp``, ``vpp``, ``cp``,
``ep``, ``micro_batch_size``, ``global_batch_size``, ``seq_length``, ``recompute``,
``sequence_parallel``, ``zero_stage``, ``precision``, ...); optionally ``label``, ``model`` (a
path is read relative to the file first) and ``devices`` (the cluster's size; default the
strategy's dp·tp·pp·cp). A CSV cell is read as an integer, a number, true/false, or text.
Errors are :class:`SpecError` with ``"<path>, run <n>"`` (YAML) or ``"<path>, line <n>"`` (CSV)
as the owner.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..spec.device import Cluster, Device
from ..errors import SpecError
from ..files import read_yaml
from ..price.estimate import as_cluster, as_model
from ..spec.exec_spec import ExecSpec
from ..spec.model import Model
from ..spec.model_source import model_from_text
from ..spec.rates import Rates
from ..tables.seconds import Overlap
from ..tables.joint_rules import validate

__all__ = ["MeasuredRun", "FitRuns", "as_runs", "read_runs", "validation_runs", "device_of", "RUN_COLUMNS"]

_OWNER = "MeasuredRun"
_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(ExecSpec))
#: The columns a run states besides ExecSpec's fields.
RUN_COLUMNS: tuple[str, ...] = ("label", "model", "devices", "step_time", "step_time_ms")
_WORDS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


@dataclass(frozen=True, eq=False)
class MeasuredRun:
    """One measured run: what ran, where, and the step time it measured.

    Attributes:
        model, spec, cluster: The strategy that ran (validated together when built).
        step_time: The measured step, seconds.
        label: A name for reports (default: the strategy's degrees).
        rates: The rates of the software the run used, where it is not the fit's base (a
            validation row's ``Rates.for_software``); the fit replaces only its fitted figures.
        overlap: Its comm/compute overlap, where not the default ``Overlap()``.
    """

    model: Model
    spec: ExecSpec
    cluster: Cluster
    step_time: float
    label: str = ""
    rates: Rates | None = None
    overlap: Overlap | None = None

    def __post_init__(self) -> None:
        owner = self.label or _OWNER
        for name, kind in (("model", Model), ("spec", ExecSpec), ("cluster", Cluster)):
            if not isinstance(getattr(self, name), kind):
                raise SpecError(name, owner, f"be a {kind.__name__}", getattr(self, name))
        step = self.step_time
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step) or step <= 0:
            raise SpecError("step_time", owner, "be a measured step in seconds, a finite number > 0", step)
        object.__setattr__(self, "step_time", float(step))
        if self.rates is not None and not isinstance(self.rates, Rates):
            raise SpecError("rates", owner, "be a Rates or None", self.rates)
        if self.overlap is not None and not isinstance(self.overlap, Overlap):
            raise SpecError("overlap", owner, "be an Overlap or None", self.overlap)
        if not isinstance(self.label, str):
            raise SpecError("label", owner, "be a string", self.label)
        validate(self.model, self.spec, self.cluster)
        if not self.label:
            s = self.spec
            object.__setattr__(self, "label", f"dp{s.dp} tp{s.tp} pp{s.pp}" + (f" cp{s.cp}" if s.cp > 1 else "")
                               + f" mbs{s.micro_batch_size} rc={s.recompute_option}")


class FitRuns(Sequence[MeasuredRun]):
    """The runs read from one file, in file order.

    Attributes:
        runs: The runs.
        path: The file, or None.
        skipped: (label, reason) of each row of a validation file that could not be built.
    """

    def __init__(self, runs: Sequence[MeasuredRun], path: str | None = None,
                 skipped: Sequence[tuple[str, str]] = ()) -> None:
        self.runs = tuple(runs)
        self.path = path
        self.skipped = tuple(skipped)

    def __len__(self) -> int:
        return len(self.runs)

    def __getitem__(self, index):  # type: ignore[override]
        return self.runs[index]

    def __iter__(self) -> Iterator[MeasuredRun]:
        return iter(self.runs)


def device_of(device: Any, owner: str) -> Device | None:
    """The Device of a device name, Device or Cluster (None stays None)."""
    if device is None:
        return None
    if isinstance(device, Cluster):
        return device.device
    if isinstance(device, (str, Device)):
        return Cluster(device, num_devices=1).device
    raise SpecError("device", owner, "be a device name, a Device or a Cluster", device)


def _cell(text: str) -> Any:
    """A CSV cell as YAML would read it: int, float, true/false, or the text."""
    text = text.strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        pass
    return _WORDS.get(text.lower(), text)


def _load_model(text: Any, base: Path | None, owner: str, cache: dict) -> Model:
    if isinstance(text, Model):
        return text
    if not isinstance(text, str) or not text:
        raise SpecError("model", owner, "be a catalog name, a config.json path or a YAML model file", text)
    key = text
    if base is not None and not os.path.isabs(text) and (base / text).exists():
        key = str(base / text)
    if key not in cache:
        cache[key] = model_from_text(key)
    return cache[key]


def _run_from_fields(fields: Mapping[str, Any], owner: str, *, model: Any, device: Device | None,
                     base: Path | None, models: dict) -> MeasuredRun:
    """One run from its fields (a YAML mapping or a CSV row's cells)."""
    if device is None:
        raise SpecError("device", owner, "be given (device=, --device or the file's `device:`)", None)
    unknown = [name for name in fields if name not in _SPEC_FIELDS and name not in RUN_COLUMNS]
    if unknown:
        rule = f"name ExecSpec fields or {', '.join(RUN_COLUMNS)}"
        raise SpecError(str(unknown[0]), owner, rule, unknown[0])
    if ("step_time" in fields) == ("step_time_ms" in fields):
        raise SpecError("step_time", owner, "be stated once: step_time (seconds) or step_time_ms",
                        {k: fields.get(k) for k in ("step_time", "step_time_ms")})
    step = fields.get("step_time", fields.get("step_time_ms"))
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step) or step <= 0:
        column = "step_time" if "step_time" in fields else "step_time_ms"
        raise SpecError(column, owner, "be a finite number > 0", step)
    seconds = float(step) if "step_time" in fields else float(step) / 1e3
    run_model = _load_model(fields.get("model", model), base, owner, models)
    try:
        spec = ExecSpec(**{name: value for name, value in fields.items() if name in _SPEC_FIELDS})
        devices = fields.get("devices", spec.num_devices)
        cluster = Cluster(device, num_devices=devices)
        label = fields.get("label")
        return MeasuredRun(run_model, spec, cluster, seconds, label="" if label is None else str(label))
    except SpecError as exc:
        raise SpecError(exc.parameter, f"{owner} ({exc.owner})", exc.rule, exc.value) from None


def _is_validation(doc: Any) -> bool:
    runs = doc.get("runs") if isinstance(doc, Mapping) else None
    return isinstance(doc, Mapping) and "hardware" in doc and isinstance(runs, list) and all(
        isinstance(row, Mapping) and "strategy" in row for row in runs)


def validation_runs(source: Any, *, family: str | None = None, ids: Sequence[str] | None = None) -> FitRuns:
    """The rows of a validation file as runs, each built as ``ndcost validate`` builds it.

    Args:
        source: A path to a YAML shaped like ``validation/public_runs.yaml``, or its loaded mapping.
        family: Keep only the rows of this family (``ndcost.io.validation``'s family of a row id).
        ids: Keep only these row ids (in the file's order).

    Rows that cannot be built (``validation.build_run`` refuses them) are skipped, with the reason.
    """
    from .validation import _family, build_row

    path = None
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        doc = read_yaml(path, "a validation runs file")
    else:
        doc = source
    if not _is_validation(doc):
        raise SpecError("source", path or "validation_runs", "be a validation file (hardware and runs with a "
                        "strategy block each)", type(doc).__name__)
    wanted = None if ids is None else set(ids)
    runs, skipped = [], []
    for row in doc["runs"]:
        run_id = str(row.get("id", "?"))
        if (family is not None and _family(run_id) != family) or (wanted is not None and run_id not in wanted):
            continue
        try:
            # as ndcost validate reads it: with the row's facts file where one ships beside the runs file
            built = build_row(row, doc.get("hardware") or {}, path)
            runs.append(MeasuredRun(built.model, built.spec, built.cluster, built.measured_s, label=run_id,
                                    rates=built.rates, overlap=built.overlap))
        except SpecError as exc:
            skipped.append((run_id, str(exc)))
    return FitRuns(runs, path, skipped)


def read_runs(path: str | os.PathLike, *, device: Any = None) -> FitRuns:
    """The runs of a runs file (CSV or YAML, the module doc's format) or of a validation YAML.

    Args:
        path: The file.
        device: The cluster's device (a name, Device or Cluster) for a runs file; a YAML runs file
            may state it as ``device:`` instead (both given: they must agree).
    """
    name = os.fspath(path)
    file = Path(name)
    if not file.is_file():
        raise SpecError("path", "read_runs", "be a runs file (CSV or YAML)", name)
    base = file.parent
    wanted = device_of(device, name)
    models: dict = {}
    runs = []
    if file.suffix.lower() == ".csv":
        with file.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            if not reader.fieldnames:
                raise SpecError("path", name, "hold a header line (step_time and ExecSpec fields)", name)
            for line, row in enumerate(reader, start=2):
                fields = {key.strip(): _cell(value) for key, value in row.items()
                          if key and value is not None and value.strip()}
                runs.append(_run_from_fields(fields, f"{name}, line {line}", model=None, device=wanted,
                                             base=base, models=models))
        return FitRuns(runs, name)
    doc = read_yaml(file, "a runs file")
    if _is_validation(doc):
        return validation_runs(name)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("runs"), list):
        raise SpecError("runs", name, "be a list of runs (the YAML runs format, or a validation file)",
                        type(doc.get("runs") if isinstance(doc, Mapping) else doc).__name__)
    unknown = [key for key in doc if key not in ("device", "model", "defaults", "runs")]
    if unknown:
        raise SpecError(str(unknown[0]), name, "be one of device, model, defaults, runs", unknown[0])
    stated = device_of(doc.get("device"), name)
    if wanted is not None and stated is not None and wanted.name != stated.name:
        raise SpecError("device", name, f"agree with the device given ({wanted.name})", doc.get("device"))
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise SpecError("defaults", name, "be a mapping of ExecSpec fields", defaults)
    for index, entry in enumerate(doc["runs"], start=1):
        owner = f"{name}, run {index}"
        if not isinstance(entry, Mapping):
            raise SpecError("runs", owner, "be a mapping of a run's fields", entry)
        runs.append(_run_from_fields({**defaults, **entry}, owner, model=doc.get("model"),
                                     device=wanted or stated, base=base, models=models))
    return FitRuns(runs, name)


def as_runs(runs: Any, *, device: Any = None, owner: str = "fit_rates") -> FitRuns:
    """*runs* as :class:`FitRuns`: a path (:func:`read_runs`), a FitRuns, or a sequence of
    :class:`MeasuredRun` and ``(model, spec, cluster, step_seconds)`` tuples (model a Model or a
    catalog name; cluster a Cluster, or a device name: the strategy's own devices)."""
    if isinstance(runs, FitRuns):
        return runs
    if isinstance(runs, (str, os.PathLike)):
        return read_runs(runs, device=device)
    if not isinstance(runs, Sequence):
        raise SpecError("runs", owner, "be a runs file or a sequence of MeasuredRun", type(runs).__name__)
    out = []
    for index, run in enumerate(runs):
        if isinstance(run, MeasuredRun):
            out.append(run)
        elif isinstance(run, tuple) and len(run) == 4:
            model, spec, cluster, seconds = run
            if not isinstance(spec, ExecSpec):
                raise SpecError(f"runs[{index}]", owner, "hold an ExecSpec second", spec)
            out.append(MeasuredRun(as_model(model), spec, as_cluster(cluster, spec), seconds))
        else:
            raise SpecError(f"runs[{index}]", owner, "be a MeasuredRun or a (model, spec, cluster, seconds) tuple",
                            type(run).__name__)
    return FitRuns(out)
