"""Calibration: fit ratios to measured runs, check them by leave-one-out.

A round of strategies measured on a cluster (:mod:`ndcost.measured`) gives,
for each family of parts, how much time the cluster spent where the
estimate put its load. The fitted ratios turn the estimate's parts into
measured time, part by part, and ``estimate(..., ratios=)`` applies them in
either unit (ND_REFERENCE §2.11; seed ``apply_regression_coefficients``).

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
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

from .errors import SpecError
from .estimate import UNITS, estimate
from .measured import MeasuredRow
from .ratios import PART_NAMES, RATIO_KEYS, Ratios

__all__ = [
    "FITS", "METHODS", "NEGLIGIBLE", "FLOOR", "MEASURED_SCALE",
    "EstimatedRuns", "Fit", "LeaveOneOut", "LeftOut",
    "estimate_runs", "fit_ratios", "leave_one_out", "corrected",
    "nnls", "average_ranks", "spearman",
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


# --------------------------------------------------------------------------- small numerics

def nnls(a: Any, b: Any, *, max_iter: int | None = None) -> tuple[np.ndarray, float]:
    """min ‖a·x − b‖₂ subject to x ≥ 0 (Lawson & Hanson 1974, ch. 23, the active-set method).

    Variables move into the passive (free) set one at a time, the one whose
    gradient ``aᵀ(b − a·x)`` is largest; an unconstrained least-squares solve
    on the passive set follows, stepping back to the boundary while any
    passive variable would turn non-positive. It stops when no variable out
    of the set has a positive gradient (the KKT conditions).

    Returns:
        ``(x, residual)``: the solution and ‖a·x − b‖₂.

    Raises:
        ValueError: Shapes that do not match, or values that are not finite.
        ArithmeticError: No convergence within *max_iter* inner steps (only on
            degenerate input; the default allows 50 + 10 per variable).
    """
    a = np.array(a, dtype=np.float64, ndmin=2)
    b = np.array(b, dtype=np.float64).reshape(-1)
    if a.ndim != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(f"nnls: a must be (m, n) and b (m,); got {a.shape} and {b.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("nnls: a and b must be finite")
    m, n = a.shape
    limit = 50 + 10 * n if max_iter is None else int(max_iter)
    scale = float(np.abs(a).sum(axis=0).max(initial=0.0)) * float(np.abs(b).max(initial=0.0))
    tol = 10.0 * np.finfo(np.float64).eps * max(m, n, 1) * scale
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    excluded = np.zeros(n, dtype=bool)  # degenerate entries that cannot enter (see below)
    steps = 0
    gradient = a.T @ (b - a @ x)
    while True:
        free = ~passive & ~excluded & (gradient > tol)
        if not free.any():
            break
        entering = int(np.argmax(np.where(free, gradient, -np.inf)))
        passive[entering] = True
        while True:
            steps += 1
            if steps > limit:
                raise ArithmeticError(f"nnls did not converge in {limit} steps")
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if np.all(z[passive] > 0):
                x = z
                break
            # Step from x toward z as far as the first passive variable reaching 0.
            blocking = np.flatnonzero(passive & (z <= 0))
            gap = x[blocking] - z[blocking]  # > 0 unless x = z = 0, which blocks at once
            shares = np.where(gap > 0, x[blocking] / np.where(gap > 0, gap, 1.0), 0.0)
            first = int(blocking[np.argmin(shares)])
            alpha = float(shares.min())
            x = x + alpha * (z - x)
            x[first] = 0.0
            passive &= x > 0
            x[~passive] = 0.0
        if not passive[entering]:
            # In exact arithmetic the entering variable is positive in its first
            # solve; rounding can deny it, and letting it in again would cycle.
            excluded[entering] = True
        gradient = a.T @ (b - a @ x)
    return x, float(np.linalg.norm(a @ x - b))


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks of *values*, tied values sharing the mean of their ranks."""
    v = np.asarray(values, dtype=np.float64)
    order = np.argsort(v, kind="mergesort")
    ranks = np.empty(len(v), dtype=np.float64)
    ordered = v[order]
    start = 0
    while start < len(v):
        end = start
        while end + 1 < len(v) and ordered[end + 1] == ordered[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman(first: Sequence[float], second: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson's on average ranks), None when undefined.

    Undefined: fewer than three pairs (as ND's), or a series all of one value.
    """
    if len(first) != len(second):
        raise ValueError(f"spearman: {len(first)} values against {len(second)}")
    if len(first) < 3:
        return None
    ra, rb = average_ranks(first), average_ranks(second)
    ra -= ra.mean()
    rb -= rb.mean()
    spread = math.sqrt(float(ra @ ra) * float(rb @ rb))
    return float(ra @ rb) / spread if spread else None


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
        rows: Measured rows (:func:`ndcost.measured.read_measured`).
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


# --------------------------------------------------------------------------- leave-one-out

@dataclass(frozen=True)
class LeftOut:
    """One measured row, predicted with and without it.

    Attributes:
        row: The measured row.
        measured: What the ratios predict, measured (the target: busy time
            for ``"nd"``, the step for ``"nnls"``), in the calibrated unit.
        step: The measured step, in the calibrated unit.
        raw: The uncalibrated estimate (in the estimate's units).
        before: *raw* scaled by the one least-squares factor over all rows.
        fitted: Calibrated by ratios fitted on every row (in sample).
        left_out: Calibrated by ratios fitted on the other rows, or None
            (a single row, or a fold that could not be fitted: see *note*).
        note: Why *left_out* is None, or "".
    """

    row: MeasuredRow
    measured: float
    step: float
    raw: float
    before: float
    fitted: float
    left_out: float | None
    note: str = ""

    @property
    def error_before(self) -> float:
        """before / measured − 1 (NaN for a zero measurement)."""
        return self.before / self.measured - 1.0 if self.measured else math.nan

    @property
    def error_after(self) -> float:
        """left_out / measured − 1 (NaN where undefined)."""
        if self.left_out is None or not self.measured:
            return math.nan
        return self.left_out / self.measured - 1.0


def _mean(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return math.fsum(finite) / len(finite) if finite else math.nan


@dataclass(frozen=True)
class LeaveOneOut:
    """How well ratios fitted on the other rows predict each measured row.

    "Before" is the raw estimate made comparable: the uncalibrated score (ND
    units, or seconds) times the one factor ``k = Σ raw·measured / Σ raw²``
    that fits it best over all rows (least squares, in sample: a generous
    baseline). "After" is each row predicted by ratios fitted on the others.
    Errors are against what the method's ratios predict (busy time for
    ``"nd"``, which prices no idle, as ND's report compares; the step for
    ``"nnls"``); rank correlations are against the measured step, which is
    what a search ranks for.

    Attributes:
        rows: One :class:`LeftOut` per measured row, in input order.
        fit: The fit on every row.
        scale: The "before" factor k.
        target: ``"busy"`` or ``"time"``.
        unit: The calibrated unit (``"ms"`` or ``"s"``).
    """

    rows: tuple[LeftOut, ...]
    fit: Fit
    scale: float
    target: str
    unit: str

    @property
    def mape_before(self) -> float:
        """Mean absolute percentage error of the scaled raw estimate (a fraction; NaN if undefined)."""
        return _mean([abs(r.error_before) for r in self.rows])

    @property
    def mape_after(self) -> float:
        """Mean absolute percentage error of the left-out predictions (a fraction; NaN if none)."""
        return _mean([abs(r.error_after) for r in self.rows])

    @property
    def mae_before(self) -> float:
        """Mean absolute error of the scaled raw estimate, in `unit`."""
        return _mean([abs(r.before - r.measured) for r in self.rows])

    @property
    def mae_after(self) -> float:
        """Mean absolute error of the left-out predictions, in `unit` (NaN if none)."""
        return _mean([abs(r.left_out - r.measured) for r in self.rows if r.left_out is not None])

    @property
    def worse_after(self) -> bool:
        """Whether the ratios predict left-out runs worse (mean absolute error) than the scaled raw estimate."""
        return math.isfinite(self.mae_after) and math.isfinite(self.mae_before) and self.mae_after > self.mae_before

    @property
    def spearman_before(self) -> float | None:
        """Rank correlation of the raw estimate with the measured step."""
        return spearman([r.raw for r in self.rows], [r.step for r in self.rows])

    @property
    def spearman_after(self) -> float | None:
        """Rank correlation of the left-out predictions with the measured step (None if any is missing)."""
        if any(r.left_out is None for r in self.rows):
            return None
        return spearman([r.left_out for r in self.rows], [r.step for r in self.rows])

    @property
    def spearman_fitted(self) -> float | None:
        """Rank correlation of the in-sample calibrated estimate with the measured step (ND's report)."""
        return spearman([r.fitted for r in self.rows], [r.step for r in self.rows])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        def num(value: float | None) -> float | None:
            return None if value is None or not math.isfinite(value) else value

        return {
            "units": self.fit.units, "method": self.fit.method, "unit": self.unit, "target": self.target,
            "ratios": dict(self.fit.ratios.values), "fallbacks": dict(self.fit.fallbacks),
            "floored": list(self.fit.floored), "scale": self.scale,
            "rows": [{"strategy": r.row.label, "source": r.row.source, "measured": r.measured, "step": r.step,
                      "raw": r.raw, "before": r.before, "fitted": r.fitted, "left_out": r.left_out,
                      "error_before": num(r.error_before), "error_after": num(r.error_after), "note": r.note}
                     for r in self.rows],
            "mape_before": num(self.mape_before), "mape_after": num(self.mape_after),
            "mae_before": num(self.mae_before), "mae_after": num(self.mae_after),
            "spearman_before": self.spearman_before, "spearman_after": self.spearman_after,
            "spearman_fitted": self.spearman_fitted, "worse_after": self.worse_after,
        }

    def report(self) -> list[str]:
        """The ratios, each row in and out of sample, and the summary, as lines of text."""
        fit, unit = self.fit, self.unit
        per = "ms per ND unit" if fit.units == "nd" else "measured s per estimated s"
        lines = [f"Ratios ({per}), fitted by {fit.method!r} on {len(self.rows)} runs:"]
        lines += [f"  {key:<10} {value:.6e}" for key, value in fit.ratios.values.items()]
        if fit.fallbacks:
            lines.append(f"  not priced over the runs, so COMPUTE's ratio: {', '.join(fit.fallbacks)}")
        if fit.floored:
            lines.append(f"  fitted to 0, written as {FLOOR:g} x COMPUTE's: {', '.join(fit.floored)}")
        label_width = max([len("strategy")] + [len(r.row.label) for r in self.rows])
        target = "busy time (the classified columns summed)" if self.target == "busy" else "step (time)"
        lines.append(f"Leave-one-out against the measured {target}, in {unit}; before = raw estimate x "
                     f"{self.scale:.6e} (one least-squares factor):")
        lines.append(f"  {'strategy':<{label_width}} {'measured':>11} {'before':>11} {'error':>8} "
                     f"{'left out':>11} {'error':>8}")
        for r in self.rows:
            after = (f"{r.left_out:11.4g} {r.error_after:+8.2%}" if r.left_out is not None
                     else f"{'-':>11} {'-':>8}")
            lines.append(f"  {r.row.label:<{label_width}} {r.measured:11.4g} {r.before:11.4g} "
                         f"{r.error_before:+8.2%} {after}" + (f"  ({r.note})" if r.note else ""))

        def pct(value: float) -> str:
            return "n/a" if not math.isfinite(value) else f"{value:.2%}"

        def amount(value: float) -> str:
            return "n/a" if not math.isfinite(value) else f"{value:.4g} {unit}"

        def rho(value: float | None) -> str:
            return "n/a" if value is None else f"{value:+.3f}"

        lines.append(f"Mean absolute error: before {amount(self.mae_before)} ({pct(self.mape_before)}), "
                     f"after {amount(self.mae_after)} ({pct(self.mape_after)})")
        lines.append(f"Spearman rank correlation with the measured step: before {rho(self.spearman_before)}, "
                     f"after {rho(self.spearman_after)} (in sample {rho(self.spearman_fitted)})")
        if self.worse_after:
            lines.append("WARNING: the fitted ratios predict left-out runs worse than one scale factor does "
                         f"({amount(self.mae_after)} against {amount(self.mae_before)}): too few or too alike runs")
        return lines


def leave_one_out(rows: Sequence[MeasuredRow], model: Any, cluster: Any, units: str = "nd", method: str = "nd",
                  **options: Any) -> LeaveOneOut:
    """Fit on every row but one and predict that one, for each row (see :class:`LeaveOneOut`).

    Each strategy is estimated once; every fold refits from those estimates.

    Args:
        rows: Measured rows, or an :class:`EstimatedRuns` already built for *units*.
        model, cluster, units, method, **options: As :func:`fit_ratios`.

    Raises:
        SpecError: As :func:`fit_ratios` on all rows (a fold that cannot be
            fitted leaves its row's prediction None, with a note).
    """
    fit = fit_ratios(rows, model, cluster, units, method, **options)
    runs = fit.runs
    target = runs.target(method)
    whole_vector = np.array(fit.ratios.vector())
    fitted = runs.parts @ whole_vector
    denominator = float(runs.raw @ runs.raw)
    scale = float(runs.raw @ target) / denominator if denominator else math.nan
    n = len(runs)
    results = []
    for i in range(n):
        left_out: float | None = None
        note = ""
        if n < 2:
            note = "no other run to fit on"
        else:
            others = np.delete(np.arange(n), i)
            try:
                fold = _fit(runs, method, others, owner=f"the fit without {runs.rows[i].source or f'row {i}'}")
            except SpecError as exc:
                note = str(exc)
            else:
                left_out = float(runs.parts[i] @ fold.vector())
        results.append(LeftOut(row=runs.rows[i], measured=float(target[i]), step=float(runs.time[i]),
                               raw=float(runs.raw[i]), before=scale * float(runs.raw[i]),
                               fitted=float(fitted[i]), left_out=left_out, note=note))
    return LeaveOneOut(tuple(results), fit, scale, "busy" if method == "nd" else "time", _CALIBRATED_UNIT[units])
