"""Rates to and from a JSON file: every figure with its source (``--rates FILE``).

The file::

    {
      "format": "ndcost-rates", "version": 1,
      "device": "h100-sxm",                       # the device the rates describe (or null)
      "rates": {"matmul_efficiency": 0.74, ..., "grad_accumulation_fusion": true},
      "sources": {"matmul_efficiency": "fitted to 6 runs on 2025-01-31 (runs.yaml)", ...},
      "fit": {...}                                # optional: what ndcost.fit_rates did
    }

``rates`` holds every :class:`~ndcost.spec.rates.Rates` figure (a figure added to Rates later, with a
default, may be missing from an older file: it takes that default). Loading checks the figures as
``Rates`` does, refuses an unknown key, and refuses a file written for another device when the
caller names one.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

from ..errors import SpecError
from .rates import Rates

__all__ = ["save_rates", "load_rates", "as_rates", "FORMAT", "VERSION"]

FORMAT = "ndcost-rates"
VERSION = 1
_FIELDS = tuple(f.name for f in dataclasses.fields(Rates) if f.name != "sources")
_REQUIRED = tuple(f.name for f in dataclasses.fields(Rates)
                  if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


def save_rates(rates: Rates, path: str | os.PathLike, *, device: str | None = None,
               fit: Mapping[str, Any] | None = None) -> None:
    """Write *rates* (every figure and its source) to *path* as JSON; *fit* is kept as ``"fit"``."""
    if not isinstance(rates, Rates):
        raise SpecError("rates", "save_rates", "be a Rates", rates)
    doc: dict[str, Any] = {
        "format": FORMAT, "version": VERSION, "device": device,
        "rates": {name: getattr(rates, name) for name in _FIELDS},
        "sources": dict(rates.sources),
    }
    if fit is not None:
        doc["fit"] = dict(fit)
    from ..files import write_output

    write_output(path, "a rates JSON", json.dumps(doc, indent=2) + "\n")


def load_rates(path: str | os.PathLike, *, device: Any = None) -> Rates:
    """The Rates of a file :func:`save_rates` wrote.

    Args:
        path: The JSON file.
        device: The device the caller prices (a name, Device or Cluster): the file must be for it.

    Raises:
        SpecError: An unreadable file, another format, a missing, unknown or invalid figure, or
            another device.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise SpecError("path", "load_rates", "be a path to a rates JSON", path)
    from ..files import read_json

    owner = os.fspath(path)
    # a missing, unreadable or non-regular file (a pipe, a device), malformed or too deep JSON: one SpecError
    doc = read_json(path, "a rates JSON", "rates")
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise SpecError("format", owner, f"be {FORMAT!r} (a file ndcost wrote with save_rates or calibrate "
                        "--fit rates)", doc.get("format") if isinstance(doc, Mapping) else type(doc).__name__)
    if doc.get("version") != VERSION:
        raise SpecError("version", owner, f"be {VERSION}", doc.get("version"))
    unknown = [key for key in doc if key not in ("format", "version", "device", "rates", "sources", "fit")]
    if unknown:
        raise SpecError(unknown[0], owner, "be one of format, version, device, rates, sources, fit", unknown[0])
    figures = doc.get("rates")
    if not isinstance(figures, Mapping):
        raise SpecError("rates", owner, "be a mapping of Rates figures", figures)
    for key in figures:
        if key not in _FIELDS:
            raise SpecError(key, owner, f"name a Rates figure ({', '.join(_FIELDS)})", key)
    missing = [name for name in _REQUIRED if name != "sources" and name not in figures]
    if missing:
        raise SpecError(missing[0], owner, "be stated in rates", None)
    sources = doc.get("sources", {})
    if not isinstance(sources, Mapping) or not all(isinstance(v, str) for v in sources.values()):
        raise SpecError("sources", owner, "be a mapping of figure names to source texts", sources)
    written_for = doc.get("device")
    if device is not None and written_for is not None:
        name = getattr(getattr(device, "device", device), "name", device)
        if name != written_for:
            raise SpecError("device", owner, f"be the device priced ({name})", written_for)
    try:
        return Rates(**figures, sources=sources)
    except SpecError as exc:
        raise SpecError(exc.parameter, owner, exc.rule, exc.value) from None


def as_rates(value: Any, *, device: Any = None, owner: str = "rates") -> Rates | None:
    """None, a Rates, a training-software preset name (``Rates.for_software(device, name)``, e.g.
    "torchtitan-eager") or a rates file's path as Rates (:func:`load_rates`)."""
    from .rates import SOFTWARE_PRESETS

    if value is None or isinstance(value, Rates):
        return value
    if isinstance(value, str) and value in SOFTWARE_PRESETS:
        if device is None:
            raise SpecError("rates", owner, "come with a device when it names a software preset", value)
        return Rates.for_software(device, value)
    if isinstance(value, (str, os.PathLike)):
        return load_rates(value, device=device)
    raise SpecError("rates", owner, "be a Rates, a software preset name, a rates JSON path or None", value)
