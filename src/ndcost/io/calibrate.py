"""Calibration: fit ratios to measured runs, check them by leave-one-out.

A round of strategies measured on a cluster (:mod:`ndcost.io.measured`) gives,
for each family of parts, how much time the cluster spent where the
estimate put its load. The fitted ratios turn the estimate's parts into
measured time, part by part, and ``estimate(..., ratios=)`` applies them in
either unit (docs/ND_MODEL.md §2.11; seed ``apply_regression_coefficients``).

Two fits:

``method="nd"`` (ND's ``fit_ratios``)
    Each ratio key of :data:`FITS` is fitted to its measured columns:
    ratio = Σ measured / Σ estimated over the rows. COMPUTE (FW + BW + REC)
    ↔ ``comp``; DP_COMM ↔ ``op_wait`` (FSDP gathers and reduce-scatters);
    DP_REDUCE ↔ ``dp_wait`` (all-reduces); MP_COMM ↔ ``mp_wait + sp_wait``;
    EP_COMM ↔ ``ep_wait``; CP_COMM ↔ ``cp_wait``; PP_COMM (PP_COMM + BUBBLE)
    ↔ ``pp_wait``. What it predicts is the busy time (the classified
    columns summed): ND prices no idle.

``method="nnls"``
    One least-squares fit of the measured step (``time``) against the
    estimated parts grouped as :data:`FITS` groups them, the ratios held
    non-negative (Lawson–Hanson, :func:`nnls`). It needs only ``time``, and
    its ratios absorb idle.

Both share ND's rules: a key estimated at or below 1e-9 of the whole
(summed over the rows) is not fitted and takes COMPUTE's ratio (it is then
only a change of unit, as the estimate weighs every part in one unit);
BUBBLE takes PP_COMM's (measurements cannot tell the bubble from P2P time);
with no compute priced there is nothing to fall back on, a :class:`SpecError`.
One rule is ndcost's own: a ratios file refuses a ratio <= 0 (a zero reads
as a typo in a file edited by hand), so a key fitted to exactly 0 (a part
the cluster hid completely) is written as ``1e-9 ×`` COMPUTE's ratio, which
weighs nothing on any step, and is listed in :attr:`Fit.floored`. A COMPUTE
fitted to 0 is refused.

Units: in ND units a ratio is measured milliseconds per ND unit (ND's
files); in seconds it is measured seconds per estimated second, a
dimensionless correction. Measured rows always hold milliseconds; they are
divided by 1000 for a seconds fit. ``_fitted_on`` records which.

Here: the fits (:func:`fit_ratios`, :func:`estimate_runs`, :func:`corrected`); leave-one-out is
:mod:`ndcost.io.leave_one_out`'s, the small numerics (nnls, Spearman) :mod:`ndcost.io.fit_stats`'.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import SpecError
from ..price.estimate import UNITS, estimate
from .measured import MeasuredRow
from ..spec.ratios import PART_NAMES, RATIO_KEYS, Ratios, register_ratio_fitter
from .fit_stats import nnls

__all__ = [
    "FITS", "METHODS", "NEGLIGIBLE", "FLOOR", "MEASURED_SCALE",
    "EstimatedRuns", "Fit", "estimate_runs", "fit_ratios", "corrected",
]

#: Each fitted ratio key: the estimate's parts it scales and the measured columns
#: it is fitted to (seed ``nd/ratios.py`` FITS). BUBBLE is not fitted: it takes
#: PP_COMM's ratio.
FITS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("COMPUTE", ("fw_compute", "bw_compute", "recompute"), ("comp",)),
    ("DP_COMM", ("dp_comm",), ("op_wait",)),
    ("DP_REDUCE", ("dp_reduce",), ("dp_wait",)),
    ("MP_COMM", ("tp_comm",), ("mp_wait", "sp_wait")),
    ("EP_COMM", ("ep_comm",), ("ep_wait",)),
    ("CP_COMM", ("cp_comm",), ("cp_wait",)),
    ("PP_COMM", ("pp_comm", "bubble"), ("pp_wait",)),
)

#: The fits.
METHODS: tuple[str, ...] = ("nd", "nnls")

#: The share of the whole estimate at or below which a key is not priced (ND's
#: NEGLIGIBLE: a bubble without a pipeline leaves a rounding residue of 1e-16).
NEGLIGIBLE = 1e-9

#: A key fitted to 0 is written as this share of COMPUTE's ratio (see the module doc).
FLOOR = 1e-9

#: Measured milliseconds -> the calibrated unit of each estimate unit
#: (ND units: milliseconds, as ND's ratios; seconds: seconds).
MEASURED_SCALE: Mapping[str, float] = MappingProxyType({"nd": 1.0, "seconds": 1e-3})

_CALIBRATED_UNIT = {"nd": "ms", "seconds": "s"}
_PART_INDEX = {name: i for i, name in enumerate(PART_NAMES)}
_GROUPS = tuple((key, tuple(_PART_INDEX[p] for p in parts)) for key, parts, _ in FITS)
_KEY_INDEX = {key: i for i, (key, _, _) in enumerate(FITS)}
# The FITS group whose ratio each part takes (BUBBLE with PP_COMM's).
_PART_GROUP = np.array([next(g for g, (_, parts) in enumerate(_GROUPS) if i in parts) for i in range(len(PART_NAMES))])


# --------------------------------------------------------------------------- estimated runs

@dataclass(frozen=True, eq=False)
class EstimatedRuns:
    """Measured rows beside their estimates, as arrays (row i is ``rows[i]``).

    Built once by :func:`estimate_runs`; every fit and fold reads it, so a
    leave-one-out estimates each strategy once.

    Attributes:
        rows: The measured rows.
        units: The estimate's units (``"nd"`` or ``"seconds"``).
        parts: (n, len(PART_NAMES)) estimated parts, uncalibrated.
        raw: (n,) estimated step times, uncalibrated.
        measured: (n, len(FITS)) measured time of each key's columns, in the
            calibrated unit (ms for ND units, s for seconds).
        time: (n,) measured steps, in the calibrated unit.
        busy: (n,) the measured columns summed, in the calibrated unit.
    """

    rows: tuple[MeasuredRow, ...]
    units: str
    parts: np.ndarray
    raw: np.ndarray
    measured: np.ndarray
    time: np.ndarray
    busy: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def grouped(self) -> np.ndarray:
        """(n, len(FITS)) estimated parts summed per ratio key."""
        out = np.zeros((len(self.rows), len(_GROUPS)))
        for g, (_, indices) in enumerate(_GROUPS):
            out[:, g] = self.parts[:, list(indices)].sum(axis=1)
        return out

    def target(self, method: str) -> np.ndarray:
        """What *method*'s ratios predict, per row: busy time (nd) or the step (nnls)."""
        return self.busy if method == "nd" else self.time


def _check_units_method(units: Any, method: Any, owner: str) -> None:
    if units not in UNITS:
        raise SpecError("units", owner, f"be one of {', '.join(map(repr, UNITS))}", units)
    if method not in METHODS:
        raise SpecError("method", owner, f"be one of {', '.join(map(repr, METHODS))}", method)


def estimate_runs(rows: Sequence[MeasuredRow], model: Any, cluster: Any, *, units: str = "nd",
                  **options: Any) -> EstimatedRuns:
    """Estimate every measured row's strategy (uncalibrated) and tabulate both.

    Args:
        rows: Measured rows (:func:`ndcost.io.measured.read_measured`).
        model: A Model or a catalog name.
        cluster: A Cluster of every row's device count, or a device name (each
            row then runs on exactly its strategy's devices).
        units: ``"nd"`` or ``"seconds"``.
        **options: Passed to :func:`ndcost.estimate` (``ratio_type``, ``p2p``, ...).

    Raises:
        SpecError: No rows, a row that is not a MeasuredRow, or a strategy the
            estimate refuses (owner: the row's CSV line).
    """
    owner = "estimate_runs"
    if units not in UNITS:
        raise SpecError("units", owner, f"be one of {', '.join(map(repr, UNITS))}", units)
    if "ratios" in options:
        raise SpecError("ratios", owner, "be left out: the fit estimates uncalibrated parts", options["ratios"])
    rows = tuple(rows)
    if not rows:
        raise SpecError("rows", owner, "hold at least one measured run", rows)
    scale = MEASURED_SCALE[units]
    n = len(rows)
    parts = np.zeros((n, len(PART_NAMES)))
    raw = np.zeros(n)
    measured = np.zeros((n, len(FITS)))
    time = np.zeros(n)
    for i, row in enumerate(rows):
        if not isinstance(row, MeasuredRow):
            raise SpecError("rows", owner, "hold only MeasuredRow entries", row)
        try:
            result = estimate(model, row.spec, cluster, units=units, with_memory=False, **options)
        except SpecError as exc:
            where = row.source or f"row {i}"
            raise SpecError(exc.parameter, f"{where} ({exc.owner})", exc.rule, exc.value) from None
        parts[i] = [result.parts[name] for name in PART_NAMES]
        raw[i] = result.step_time
        for g, (_, _, columns) in enumerate(FITS):
            measured[i, g] = math.fsum(row.parts[c] for c in columns) * scale
        time[i] = row.time * scale
    busy = measured.sum(axis=1)
    for array in (parts, raw, measured, time, busy):
        array.setflags(write=False)
    return EstimatedRuns(rows, units, parts, raw, measured, time, busy)


# --------------------------------------------------------------------------- the fit

@dataclass(frozen=True)
class _Fitted:
    values: dict[str, float]
    fallbacks: dict[str, str]
    floored: tuple[str, ...]

    def vector(self) -> np.ndarray:
        """One ratio per PART_NAMES entry."""
        by_group = np.array([self.values[key] for key, _ in _GROUPS])
        return by_group[_PART_GROUP]


def _fit(table: EstimatedRuns, method: str, index: np.ndarray | None = None, owner: str = "fit_ratios") -> _Fitted:
    """The ratios *method* fits on the rows *index* (default all) of *table*."""
    grouped = table.grouped if index is None else table.grouped[index]
    estimated = grouped.sum(axis=0)
    whole = float(table.parts.sum() if index is None else table.parts[index].sum())
    priced = estimated > NEGLIGIBLE * whole
    compute = _KEY_INDEX["COMPUTE"]
    if not priced[compute] or whole <= 0:
        rule = ("be priced over the rows (the estimate's fw/bw/recompute above 1e-9 of the whole): "
                "every ratio falls back on it")
        raise SpecError("COMPUTE", owner, rule, float(estimated[compute]))
    fitted = np.zeros(len(_GROUPS))
    if method == "nd":
        measured = table.measured if index is None else table.measured[index]
        fitted[priced] = measured.sum(axis=0)[priced] / estimated[priced]
    else:
        target = table.time if index is None else table.time[index]
        columns = np.flatnonzero(priced)
        design = grouped[:, columns]
        norms = np.linalg.norm(design, axis=0)
        norms[norms == 0] = 1.0
        solution, _ = nnls(design / norms, target)
        fitted[columns] = solution / norms
    if fitted[compute] <= 0:
        rule = f"come out > 0 from the {method!r} fit: the measured times do not follow the estimate's compute"
        raise SpecError("COMPUTE", owner, rule, float(fitted[compute]))
    unit = float(fitted[compute])
    values: dict[str, float] = {}
    fallbacks: dict[str, str] = {}
    floored: list[str] = []
    for g, (key, _) in enumerate(_GROUPS):
        if not priced[g]:
            values[key] = unit
            fallbacks[key] = "COMPUTE"
        elif fitted[g] <= 0:
            values[key] = FLOOR * unit
            floored.append(key)
        else:
            values[key] = float(fitted[g])
    values["BUBBLE"] = values["PP_COMM"]
    return _Fitted(values, fallbacks, tuple(floored))


@dataclass(frozen=True)
class Fit:
    """Ratios fitted to measured runs, and how.

    Attributes:
        ratios: The fitted ratios, every key of `RATIO_KEYS` stated, with
            ``_fitted_on = {csv, strategies, units, method}``.
        method: ``"nd"`` or ``"nnls"``.
        units: The estimate's units the ratios apply to.
        fallbacks: Keys not priced over the rows -> the key whose ratio they
            took (``"COMPUTE"``); BUBBLE, which always takes PP_COMM's, is not listed.
        floored: Keys fitted to 0 and written as `FLOOR` × COMPUTE's ratio.
        runs: The rows beside their estimates.
    """

    ratios: Ratios
    method: str
    units: str
    fallbacks: Mapping[str, str]
    floored: tuple[str, ...]
    runs: EstimatedRuns = field(repr=False)


def _csv_of(rows: Sequence[MeasuredRow]) -> str | None:
    """The one CSV the rows came from, or None."""
    paths = {row.source.rsplit(", line ", 1)[0] for row in rows if row.source}
    return paths.pop() if len(paths) == 1 else None


def fit_ratios(rows: Sequence[MeasuredRow], model: Any, cluster: Any, units: str = "nd", method: str = "nd", *,
               csv: str | None = None, **options: Any) -> Fit:
    """Fit ratios to measured *rows* (see the module doc for the rules).

    Args:
        rows: Measured rows, or an :class:`EstimatedRuns` already built for *units*.
        model, cluster, **options: As :func:`estimate_runs`.
        units: ``"nd"`` (ratios in ms per ND unit) or ``"seconds"`` (dimensionless).
        method: ``"nd"`` (ND's per-part fit) or ``"nnls"`` (least squares on the step).
        csv: The CSV recorded in ``_fitted_on`` (default: the rows' own file, if one).

    Raises:
        SpecError: Bad units or method, no compute priced, a COMPUTE fitted to 0,
            or a row the estimate refuses.
    """
    owner = "fit_ratios"
    _check_units_method(units, method, owner)
    if isinstance(rows, EstimatedRuns):
        if rows.units != units:
            raise SpecError("rows", owner, f"be estimated in {units!r}", rows.units)
        runs = rows
    else:
        runs = estimate_runs(rows, model, cluster, units=units, **options)
    fitted = _fit(runs, method, owner=owner)
    fitted_on = {
        "csv": csv if csv is not None else _csv_of(runs.rows),
        "strategies": [row.strategy() for row in runs.rows],
        "units": units,
        "method": method,
    }
    if fitted.fallbacks:
        fitted_on["fallbacks"] = dict(fitted.fallbacks)
    if fitted.floored:
        fitted_on["floored"] = list(fitted.floored)
    ratios = Ratios({key: fitted.values[key] for key in RATIO_KEYS}, fitted_on=fitted_on)
    return Fit(ratios, method, units, dict(fitted.fallbacks), fitted.floored, runs)


# The deprecated Ratios.fit calls fit_ratios through this hook: spec may not import io.
register_ratio_fitter(fit_ratios)


def corrected(parts: Mapping[str, float], ratios: Any) -> float:
    """An estimate's *parts* calibrated by *ratios* and summed: what ``estimate(..., ratios=)`` reports.

    ND's ``corrected``: each part times its ratio (the compute parts COMPUTE's,
    the bubble BUBBLE's), a zero part staying zero. *ratios* is anything
    ``estimate`` takes (a Ratios, a path, a mapping). This is the score a
    search ranks by when it is given ratios.
    """
    ratio_set = Ratios.coerce(ratios)
    if ratio_set is None:
        raise SpecError("ratios", "corrected", "be a Ratios, a ratios file or a mapping", ratios)
    return math.fsum(ratio_set.apply(parts).values())
