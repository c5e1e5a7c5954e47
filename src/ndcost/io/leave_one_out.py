"""Leave-one-out check of fitted ratios: each run predicted by ratios fitted to the others.

The errors before (one scale factor) and after (the fitted ratios), their means and the rank
correlations with the measured step (:func:`leave_one_out`, :class:`LeaveOneOut`); the fits
themselves are :mod:`ndcost.io.calibrate`'s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import SpecError
from .measured import MeasuredRow
from .fit_stats import spearman
from .calibrate import FLOOR, Fit, _CALIBRATED_UNIT, _fit, fit_ratios

__all__ = ["LeftOut", "LeaveOneOut", "leave_one_out"]


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
