"""ND's ratios file: the fitted factors that turn ND's score parts into milliseconds.

ND (``run_nd --real_csv X --write_ratios Y``, then ``-c Y``) fits one ratio per
part family against measured step times and writes them as a JSON object,
plus a ``_fitted_on: {csv, strategies}`` block (docs/ND_MODEL.md §2.11)::

    {"COMPUTE": 2.1e-12, "DP_COMM": 3.0e-10, "MP_COMM": ..., "_fitted_on": {...}}

Applying it multiplies each part by its ratio, the compute parts by COMPUTE's
(seed estimate.py, ``apply_regression_coefficients``). A file fitted by an
older tree, or edited by hand, may lack some ratios: a missing one falls back
as ND's ``fit_ratios`` fills a part it cannot fit (seed ``RATIO_FALLBACKS``):
DP_REDUCE takes DP_COMM's (it is the all-reduce share split out of that
traffic), BUBBLE takes PP_COMM's (measurements cannot tell them apart), any
other takes COMPUTE's; each missing key is named once a process. COMPUTE is
the unit everything falls back on, so a file without it is refused.

Parsing is cached by (resolved path, mtime_ns, size), as the seed's
``_parsed_ratios``: re-reading the file per candidate cost 0.7 s over the
Qwen3.5 example's 7216 candidates (docs/ND_MODEL.md §2.11).
"""
from __future__ import annotations

import functools
import json
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from ..errors import SpecError
from ..files import check_regular_file, parse_json

__all__ = ["Ratios", "RATIO_KEYS", "PART_NAMES", "PART_RATIO_KEYS", "RATIO_FALLBACKS", "register_ratio_fitter"]

# ND's PerfParts names a ratios file may state (docs/ND_MODEL.md §2.10/§2.11);
# MP_COMM is ND's name for tensor-parallel traffic.
RATIO_KEYS = ("COMPUTE", "DP_COMM", "DP_REDUCE", "MP_COMM", "EP_COMM", "CP_COMM", "PP_COMM", "BUBBLE")

# ndcost's step-time parts, in the order of Estimate.parts (ndcost.price.result, the public API).
PART_NAMES = ("fw_compute", "bw_compute", "recompute", "dp_comm", "dp_reduce",
              "tp_comm", "ep_comm", "cp_comm", "pp_comm", "bubble")

# The ratio each part is scaled by: the three compute parts share COMPUTE's
# (seed apply_regression_coefficients), the others their own ND part's.
PART_RATIO_KEYS: Mapping[str, str] = MappingProxyType({
    "fw_compute": "COMPUTE",
    "bw_compute": "COMPUTE",
    "recompute": "COMPUTE",
    "dp_comm": "DP_COMM",
    "dp_reduce": "DP_REDUCE",
    "tp_comm": "MP_COMM",
    "ep_comm": "EP_COMM",
    "cp_comm": "CP_COMM",
    "pp_comm": "PP_COMM",
    "bubble": "BUBBLE",
})

# Where a missing ratio is taken from (seed RATIO_FALLBACKS); a key not
# listed here takes COMPUTE's. The chain ends at COMPUTE, which must be stated.
RATIO_FALLBACKS: Mapping[str, str] = MappingProxyType({"DP_REDUCE": "DP_COMM", "BUBBLE": "PP_COMM"})

_COMPUTE = "COMPUTE"
_FITTED_ON = "_fitted_on"

# The fit behind the deprecated Ratios.fit. The spec layer may not import io (tests/test_package_layers.py
# counts imports inside functions too), so ndcost.io.calibrate, which the package's __init__ imports,
# registers its fit_ratios here, as the catalog registers Model.from_catalog's loader.
_ratio_fitter: Callable[..., Any] | None = None

#: The release that deprecated Ratios.fit and the one that removes it (docs/RELEASING.md, deprecation policy).
FIT_DEPRECATED_IN, FIT_REMOVED_IN = "0.2.0", "0.3.0"


def register_ratio_fitter(fitter: Callable[..., Any]) -> None:
    """Make *fitter* (``fit_ratios(rows, model, cluster, units, method, **options) -> Fit``) what the
    deprecated :meth:`Ratios.fit` calls; ndcost.io.calibrate registers its ``fit_ratios``."""
    global _ratio_fitter
    _ratio_fitter = fitter


# The keys a warning has named in this process, each once (seed _MISSING_RATIOS).
_MISSING_WARNED: set[str] = set()


def _reset_missing_warnings() -> None:
    """Forget which missing ratios were named (for tests)."""
    _MISSING_WARNED.clear()


def _freeze(value: Any) -> Any:
    """A read-only deep copy of JSON-like metadata: dicts -> proxies, lists -> tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: _freeze(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item) for item in value)
    return value


def _thaw(value: Any) -> Any:
    """The plain JSON form of `_freeze`'s output."""
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


def _positive_ratio(ratio: Any, key: str, owner: str) -> float:
    """*ratio* as a float if it is a finite number > 0 (a bool is not a number)."""
    if not isinstance(ratio, bool) and isinstance(ratio, (int, float)):
        try:
            number = float(ratio)
        except OverflowError:  # an int beyond float range
            number = math.inf
        if math.isfinite(number) and number > 0:
            return number
    raise SpecError(key, owner, "be a finite number > 0", ratio)


@dataclass(frozen=True)
class Ratios:
    """A parsed ratios file (or mapping): one positive factor per ratio key.

    Attributes:
        values: Ratio key -> factor (read-only); keys among `RATIO_KEYS`, COMPUTE
            always present. Keys starting with ``_`` are metadata: ``_fitted_on``
            moves to `fitted_on`, others are dropped.
        fitted_on: ND's ``_fitted_on`` block (``{csv, strategies}``), read-only, or None.
        source: Where the ratios came from (the resolved path), or None.

    Raises:
        SpecError: No COMPUTE ratio, an unknown key, or a ratio that is not a
            finite number > 0.
    """

    values: Mapping[str, float]
    fitted_on: Mapping | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        owner = self.source if self.source is not None else "Ratios"
        if self.source is not None and not isinstance(self.source, str):
            raise SpecError("source", "Ratios", "be None or a string", self.source)
        if not isinstance(self.values, Mapping):
            raise SpecError("values", owner, "be a mapping of ratio keys to numbers", self.values)
        fitted_on = self.fitted_on
        ratios: dict[str, float] = {}
        for key, ratio in self.values.items():
            if isinstance(key, str) and key.startswith("_"):
                # Metadata ND writes next to the ratios; only _fitted_on is kept.
                if key == _FITTED_ON and fitted_on is None:
                    fitted_on = ratio
                continue
            if key not in RATIO_KEYS:
                rule = f"be a ratio key ({', '.join(RATIO_KEYS)}) or metadata starting with '_'"
                raise SpecError(key, owner, rule, ratio)
            ratios[key] = _positive_ratio(ratio, key, owner)
        if _COMPUTE not in ratios:
            rule = "be stated: it turns ND's units into milliseconds, and every missing ratio falls back on it"
            raise SpecError(_COMPUTE, owner, rule, None)
        if fitted_on is not None and not isinstance(fitted_on, Mapping):
            raise SpecError(_FITTED_ON, owner, "be a JSON object (ND writes {csv, strategies})", fitted_on)
        object.__setattr__(self, "values", MappingProxyType(ratios))
        object.__setattr__(self, "fitted_on", None if fitted_on is None else _freeze(fitted_on))

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.values.items())), self.source))

    def __reduce__(self):
        # Proxies cannot be pickled or deep-copied; rebuild from plain data.
        fitted_on = None if self.fitted_on is None else _thaw(self.fitted_on)
        return (Ratios, (dict(self.values), fitted_on, self.source))

    def ratio(self, key: str) -> float:
        """The ratio for *key* (one of `RATIO_KEYS`, any case): stated, or its fallback.

        A missing key takes its `RATIO_FALLBACKS` key's ratio (itself resolved the
        same way), else COMPUTE's; each missing key is named once a process in a
        `RuntimeWarning`, as the seed's ``_part_ratio`` logs it.
        """
        name = key.upper() if isinstance(key, str) else key
        if name not in RATIO_KEYS:
            raise SpecError("key", "Ratios.ratio", f"be one of {', '.join(RATIO_KEYS)}", key)
        while name not in self.values:
            fallback = RATIO_FALLBACKS.get(name, _COMPUTE)
            if name not in _MISSING_WARNED:
                _MISSING_WARNED.add(name)
                where = f" {self.source}" if self.source else ""
                warnings.warn(f"the ratios file{where} states no {name} ratio: that part takes {fallback}'s",
                              RuntimeWarning, stacklevel=2)
            name = fallback
        return self.values[name]

    def part_ratio(self, part_name: str) -> float:
        """The ratio for an ndcost part (``"fw_compute"``, ``"tp_comm"``, ...; see `PART_NAMES`)."""
        key = PART_RATIO_KEYS.get(part_name) if isinstance(part_name, str) else None
        if key is None:
            raise SpecError("part_name", "Ratios.part_ratio", f"be one of {', '.join(PART_NAMES)}", part_name)
        return self.ratio(key)

    def vector(self) -> tuple[float, ...]:
        """One ratio per `PART_NAMES` entry, in that order (what the kernels take)."""
        cached = self.__dict__.get("_vector")
        if cached is None:
            cached = tuple(self.ratio(PART_RATIO_KEYS[part]) for part in PART_NAMES)
            # Not a field: equality, hashing and repr ignore it.
            object.__setattr__(self, "_vector", cached)
        return cached

    def apply(self, parts: Mapping[str, float]) -> dict[str, float]:
        """*parts* (ndcost part name -> ND units) scaled to milliseconds, part by part.

        A zero part stays exactly zero, as in the seed's ``apply_regression_coefficients``;
        the sum of the result is ND's calibrated score.
        """
        return {part: 0.0 if value == 0.0 else value * self.part_ratio(part) for part, value in parts.items()}

    @classmethod
    def load(cls, path: "str | os.PathLike[str]") -> "Ratios":
        """The ratios file at *path*; the same object again while the file is unchanged.

        Raises:
            SpecError: Unreadable file, invalid JSON, or invalid ratios (owner: the path).
        """
        resolved = str(Path(os.fspath(path)).expanduser().resolve())
        try:
            stat = check_regular_file(resolved, "a ratios file", "path", owner=resolved)
        except OSError as exc:
            rule = f"name a readable ratios file ({exc.strerror})"
            raise SpecError("path", resolved, rule, os.fspath(path)) from None
        return _load_cached(resolved, stat.st_mtime_ns, stat.st_size)

    @classmethod
    def coerce(cls, ratios: "Ratios | str | os.PathLike[str] | Mapping | None") -> "Ratios | None":
        """A `Ratios` from what a caller passes as ``ratios=``: itself, a path, a mapping, or None."""
        if ratios is None or isinstance(ratios, Ratios):
            return ratios
        if isinstance(ratios, (str, os.PathLike)):
            return cls.load(ratios)
        if isinstance(ratios, Mapping):
            return cls(ratios)
        rule = "be a Ratios, a path to a ratios JSON file, a mapping of ratio keys to numbers, or None"
        raise SpecError("ratios", "Ratios.coerce", rule, ratios)

    @classmethod
    def fit(cls, rows: Any, model: Any, cluster: Any, units: str = "nd", method: str = "nd",
            **options: Any) -> "Ratios":
        """Deprecated since 0.2.0, removed in 0.3.0: ``fit_ratios(rows, model, cluster, units, method,
        **options).ratios`` (``ndcost.io.calibrate``), which also reports what fell back or was floored.

        Ratios fitted to measured runs, exactly as that call fits them; warns `DeprecationWarning`.
        """
        if _ratio_fitter is None:
            raise RuntimeError("ndcost.io.calibrate is not imported (ndcost/__init__ imports it)")
        replacement = f"{_ratio_fitter.__module__}.{_ratio_fitter.__qualname__}"
        warnings.warn(f"Ratios.fit is deprecated since ndcost {FIT_DEPRECATED_IN} and will be removed in "
                      f"{FIT_REMOVED_IN}; use {replacement}(rows, model, cluster, units, method, ...).ratios",
                      DeprecationWarning, stacklevel=2)
        return _ratio_fitter(rows, model, cluster, units, method, **options).ratios

    def save(self, path: "str | os.PathLike[str]") -> None:
        """Write the ratios as ND's JSON (keys in `RATIO_KEYS` order, then ``_fitted_on``)."""
        doc: dict[str, Any] = {key: self.values[key] for key in RATIO_KEYS if key in self.values}
        if self.fitted_on is not None:
            doc[_FITTED_ON] = _thaw(self.fitted_on)
        from ..files import write_output

        # written then renamed, so that a reader (cached by mtime and size) never sees half a file
        write_output(os.fspath(path), "a ratios JSON", json.dumps(doc, indent=2) + "\n")


@functools.lru_cache(maxsize=8)
def _load_cached(resolved: str, mtime_ns: int, size: int) -> Ratios:  # noqa: ARG001 - they key the cache
    """Parse *resolved*; *mtime_ns* and *size* only key the cache (seed ``_parsed_ratios``)."""
    try:
        with open(resolved, encoding="utf-8") as stream:
            text = stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError("path", resolved, f"name a readable ratios file ({exc})", resolved) from None
    doc = parse_json(text, "a ratios file", "path", owner=resolved)
    if not isinstance(doc, dict):
        raise SpecError("path", resolved, "hold a JSON object of ratio keys to numbers", type(doc).__name__)
    return Ratios(doc, source=resolved)
