"""Rates fitted to a cluster's own measured runs (``ndcost.fit_rates``, ``ndcost calibrate --fit rates``).

Seconds mode prices a step from a device's peaks and a few achievable shares of them
(:class:`~ndcost.spec.rates.Rates`). A user who measured some strategies on their cluster can fit those
shares to their runs: :func:`fit_rates` fits the named Rates figures (by default the six physical
ones: GEMM, attention and HBM efficiency, the kernel overhead, intra- and inter-node link
efficiency) so that seconds mode's step times match the measured ones, and says whether the fit
predicts runs it was not fitted on better than the defaults do.

The fit:

* residuals ``log(estimate / measured)`` per run (relative error, symmetric in over- and
  under-estimate), minimised by bounded Levenberg–Marquardt (:mod:`ndcost.io.lsq`) over the fitted
  figures, each a share in log space, the kernel overhead (whose bound reaches 0) linearly;
  deterministic, from two starts: the defaults and the middle of the bounds; the lower cost wins.
* identifiability first: at the defaults, the Jacobian of the residuals, each column scaled to its
  figure's whole bounded range, says what the runs can determine. A figure whose column is near
  zero (it moves no run's step by :data:`SENSITIVITY_FLOOR` rms over its whole range) is held at
  its default; so is one whose column the already chosen ones nearly span (pivoted Gram–Schmidt,
  largest first: less than :data:`INDEPENDENCE` of it is their own), as the runs then move it only
  together with them; and at most ``runs − 1`` figures are fitted, so that every fit leaves the
  runs a degree of freedom to disagree with it (n runs would be matched exactly by n figures,
  noise included). Each held figure is reported with its reason. A figure whose column vanishes
  at the solution (e.g. its communication became hidden) is held too and the fit redone.
* leave-one-out: each run is predicted by the same procedure fitted on the others. The defaults
  are fitted to nothing, so their leave-one-out error is their plain error. A fit whose
  leave-one-out mean absolute error is not below the defaults' is refused (``accepted=False``,
  with the reason; :meth:`RatesFit.save` then refuses to write it, and ``ndcost calibrate --fit
  rates`` exits 1).

Runs are :mod:`ndcost.io.fit_runs`' (a runs file, a validation file, MeasuredRun objects); all on
one device. A run that carries its own software rates (a validation row) keeps them, the fitted
figures replaced.
"""
from __future__ import annotations

import dataclasses
import datetime
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

from .fit_stats import spearman
from ..tables.derive import derive
from ..errors import SpecError
from .fit_runs import FitRuns, MeasuredRun, as_runs, device_of
from ..tables.layout import build_layout
from .lsq import forward_jacobian, least_squares
from ..spec.rates import Rates
from ..tables.seconds import seconds_estimate

__all__ = ["fit_rates", "RatesFit", "FITTABLE", "DEFAULT_FIT", "SENSITIVITY_FLOOR", "INDEPENDENCE", "predict_runs"]

_OWNER = "fit_rates"

#: Figures fit_rates can fit -> their default bounds. Shares stay in [0.05, 1]: a device reaching
#: less than 5% of a peak is misconfigured, not slow, and a share cannot pass its peak. The kernel
#: overhead stays in [0, 50 us]: a launch costs a few us (the default 3 us, ndcost.spec.rates), and
#: 50 us leaves room for a framework's per-kernel Python dispatch without letting the overhead
#: absorb compute time.
FITTABLE: Mapping[str, tuple[float, float]] = MappingProxyType({
    "matmul_efficiency": (0.05, 1.0),
    "fp8_matmul_efficiency": (0.05, 1.0),
    "attention_efficiency": (0.05, 1.0),
    "hbm_efficiency": (0.05, 1.0),
    "kernel_overhead": (0.0, 50e-6),
    "intra_node_efficiency": (0.05, 1.0),
    "inter_node_efficiency": (0.05, 1.0),
})

#: The figures fitted by default: the six physical rates (and ``fp8_matmul_efficiency`` when a run
#: trains in fp8 on a part that states it: its GEMMs then run at that share, not matmul_efficiency's).
DEFAULT_FIT: tuple[str, ...] = ("matmul_efficiency", "attention_efficiency", "hbm_efficiency", "kernel_overhead",
                                "intra_node_efficiency", "inter_node_efficiency")

#: A figure that moves the runs' log step times by less than this (rms, linearised over its whole
#: bounded range) is not determined by them: 0.1%, below any measurement's repeatability.
SENSITIVITY_FLOOR = 1e-3

#: A figure is fitted only if at least this share of its (range-scaled) Jacobian column lies
#: outside the span of the figures chosen before it: below, the runs move it only together with
#: them, and the fit would amplify their noise by 1/INDEPENDENCE or more.
INDEPENDENCE = 0.05

#: Relative finite-difference step of the Jacobian (in log / scaled parameter space).
_FD_STEP = 1e-7


# --------------------------------------------------------------------------- pricing the runs


@dataclass(frozen=True)
class _Space:
    """The fitted figures' parameter space u: log θ for a figure bounded away from 0 (a share: equal
    steps are equal ratios), θ / (upper − lower) for one whose bound reaches 0 (the kernel overhead)."""

    names: tuple[str, ...]
    lower: np.ndarray      # natural units
    upper: np.ndarray

    @property
    def log(self) -> np.ndarray:
        return self.lower > 0.0

    def to_u(self, theta: np.ndarray) -> np.ndarray:
        u = np.asarray(theta, dtype=np.float64) / (self.upper - self.lower)
        u[self.log] = np.log(np.asarray(theta, dtype=np.float64)[self.log])
        return u

    def to_theta(self, u: np.ndarray) -> np.ndarray:
        theta = np.asarray(u, dtype=np.float64) * (self.upper - self.lower)
        theta[self.log] = np.exp(np.asarray(u, dtype=np.float64)[self.log])
        return theta

    @property
    def u_lower(self) -> np.ndarray:
        return self.to_u(self.lower)

    @property
    def u_upper(self) -> np.ndarray:
        return self.to_u(self.upper)


class _Pricer:
    """Seconds mode's step time of each run at given values of the fitted figures.

    Each run's layout and derived values are built once; a call prices every run (or a subset)
    with its own rates (its software's, else the base), the fitted figures replaced.
    """

    def __init__(self, runs: Sequence[MeasuredRun], base: Rates, names: tuple[str, ...]) -> None:
        self.runs = tuple(runs)
        self.base = base
        self.names = names
        self.prepared = [(build_layout(run.model, run.spec), derive(run.model, run.spec)) for run in self.runs]
        self.log_measured = np.log(np.array([run.step_time for run in self.runs]))

    def rates_of(self, run: MeasuredRun, theta: Sequence[float] | None) -> Rates:
        own = run.rates or self.base
        return own if theta is None else dataclasses.replace(own, **dict(zip(self.names, map(float, theta))))

    def steps(self, theta: Sequence[float] | None, index: Sequence[int]) -> np.ndarray:
        """The step of each run of *index* with the figures at *theta* (None: the rates unchanged)."""
        out = np.empty(len(index))
        for k, i in enumerate(index):
            run = self.runs[i]
            layout, derived = self.prepared[i]
            out[k] = seconds_estimate(run.model, run.spec, run.cluster, layout, rates=self.rates_of(run, theta),
                                      overlap=run.overlap, derived=derived)["step_time"]
        return out


def predict_runs(runs: Any, rates: Rates | None = None, *, device: Any = None,
                 figures: Sequence[str] = tuple(FITTABLE)) -> np.ndarray:
    """Seconds mode's step time of each run with *rates*; a run that carries its own software rates
    keeps them, *figures* replaced by *rates*' values. None: each run's own rates, else its
    device's defaults."""
    fit_runs = as_runs(runs, device=device, owner="predict_runs")
    out = np.empty(len(fit_runs))
    for k, run in enumerate(fit_runs):
        if rates is None:
            run_rates = run.rates or Rates.for_device(run.cluster.device)
        elif run.rates is None:
            run_rates = rates
        else:
            run_rates = dataclasses.replace(run.rates, **{name: getattr(rates, name) for name in figures})
        out[k] = seconds_estimate(run.model, run.spec, run.cluster, rates=run_rates, overlap=run.overlap)["step_time"]
    return out


# --------------------------------------------------------------------------- the procedure


@dataclass(frozen=True)
class _Solution:
    theta: np.ndarray                 # every figure of the space, natural units
    fitted: tuple[str, ...]
    held: Mapping[str, str]


def _identify(jac: np.ndarray, space: _Space, cap: int) -> tuple[list[int], dict[str, str]]:
    """The figures the runs determine (pivoted Gram–Schmidt on range-scaled columns) and why the
    others are held."""
    n_runs = jac.shape[0]
    widths = space.u_upper - space.u_lower
    columns = jac * widths / math.sqrt(n_runs)
    sensitivity = np.linalg.norm(columns, axis=0)
    held: dict[str, str] = {}
    remaining = []
    for j, name in enumerate(space.names):
        if sensitivity[j] < SENSITIVITY_FLOOR:
            held[name] = (f"moves the runs' step times by {sensitivity[j]:.1e} (rms of log) over its whole range "
                          f"at the defaults, under {SENSITIVITY_FLOOR:g}: these runs do not determine it")
        else:
            remaining.append(j)
    chosen: list[int] = []
    basis: list[np.ndarray] = []
    while remaining:
        left = {j: columns[:, j] - sum((b @ columns[:, j]) * b for b in basis) for j in remaining}
        share = {j: float(np.linalg.norm(left[j])) / sensitivity[j] for j in remaining}
        own = [j for j in remaining if share[j] >= INDEPENDENCE]
        if not own or len(chosen) >= cap:
            break
        best = max(own, key=lambda j: (float(np.linalg.norm(left[j])), -j))
        chosen.append(best)
        basis.append(left[best] / np.linalg.norm(left[best]))
        remaining.remove(best)
    picked = [space.names[j] for j in chosen]
    for j in remaining:
        name = space.names[j]
        if len(chosen) >= cap and share[j] >= INDEPENDENCE:
            held[name] = (f"{n_runs} run(s) fit at most {cap} figure(s) (one degree of freedom kept), "
                          f"and {', '.join(picked)} move(s) the steps more")
        else:
            held[name] = (f"only {share[j]:.1%} of its effect on these runs is its own (under {INDEPENDENCE:.0%}): "
                          f"they move it together with {', '.join(picked) or 'the others'}")
    return chosen, held


def _solve(pricer: _Pricer, space: _Space, theta0: np.ndarray, index: np.ndarray) -> _Solution:
    """The fit on the runs *index*: identify, fit from two starts, hold what vanished, refit."""
    log_measured = pricer.log_measured[index]
    u0 = space.to_u(theta0)
    lower, upper = space.u_lower, space.u_upper
    cap = max(len(index) - 1, 1) if len(index) > 1 else 0

    def residuals_of(free: list[int]):
        def fun(u_free: np.ndarray) -> np.ndarray:
            u = u0.copy()
            u[free] = u_free
            return np.log(pricer.steps(space.to_theta(u), index)) - log_measured
        return fun

    every = list(range(len(space.names)))
    fun_all = residuals_of(every)
    r0 = fun_all(u0)
    if not np.all(np.isfinite(r0)):
        bad = int(index[int(np.flatnonzero(~np.isfinite(r0))[0])])
        raise SpecError("runs", _OWNER, "be priced by seconds mode at the base rates", pricer.runs[bad].label)
    if cap == 0:
        held = {name: "a single run leaves no degree of freedom to fit with" for name in space.names}
        return _Solution(theta0.copy(), (), held)
    chosen, held = _identify(forward_jacobian(fun_all, u0, r0, lower, upper, _FD_STEP), space, cap)
    while chosen:
        fun = residuals_of(chosen)
        starts = (u0[chosen], 0.5 * (lower[chosen] + upper[chosen]))
        best = min((least_squares(fun, start, lower[chosen], upper[chosen], step=_FD_STEP) for start in starts),
                   key=lambda result: result.cost)
        u = u0.copy()
        u[chosen] = best.x
        # A figure whose column vanished at the solution is not determined there: hold it, refit.
        jac = forward_jacobian(fun, best.x, best.residuals, lower[chosen], upper[chosen], _FD_STEP)
        widths = (upper - lower)[chosen]
        sensitivity = np.linalg.norm(jac * widths, axis=0) / math.sqrt(len(index))
        vanished = [chosen[k] for k in range(len(chosen)) if sensitivity[k] < SENSITIVITY_FLOOR]
        if not vanished:
            return _Solution(space.to_theta(u), tuple(space.names[j] for j in chosen), held)
        for j in vanished:
            held[space.names[j]] = (f"moves the runs' step times by under {SENSITIVITY_FLOOR:g} (rms of log) at the "
                                    "fitted point: these runs do not determine it there")
            chosen.remove(j)
    return _Solution(theta0.copy(), (), held)


# --------------------------------------------------------------------------- the result


def _json(value: float) -> float | None:
    """A float for JSON: None for NaN (a run not predicted)."""
    return None if not math.isfinite(value) else float(value)


@dataclass(frozen=True, eq=False)
class RatesFit:
    """Rates fitted to measured runs, with how well they predict runs left out.

    Attributes:
        rates: The fitted rates: the base with the fitted figures replaced, each with the source
            ``"fitted to N runs on <date> (<file>)"``; held figures keep the base's value and source.
        base: The rates the fit started from (the defaults).
        fitted: The figures fitted.
        held: Figures asked for but held at the base, -> why.
        runs: The runs.
        measured: (n,) measured step seconds.
        default: (n,) seconds mode's step with the base rates (each run's own, where it has them).
        estimate: (n,) with the fitted rates (in sample).
        left_out: (n,) each run predicted by the procedure fitted on the others (NaN: one run only).
        accepted: Whether the fit predicts left-out runs better than the defaults.
        reason: Why it was refused, or "".
        source: The runs' file, or "".
        at_bound: Fitted figures that ended on a bound -> "lower" or "upper" (the runs asked
            for more than the bound allows: the model may lack an effect they show).
    """

    rates: Rates
    base: Rates
    fitted: tuple[str, ...]
    held: Mapping[str, str]
    runs: tuple[MeasuredRun, ...]
    measured: np.ndarray
    default: np.ndarray
    estimate: np.ndarray
    left_out: np.ndarray
    accepted: bool
    reason: str
    source: str = ""
    at_bound: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def default_errors(self) -> np.ndarray:
        """default / measured − 1 per run."""
        return self.default / self.measured - 1.0

    @property
    def residuals(self) -> np.ndarray:
        """estimate / measured − 1 per run (in sample)."""
        return self.estimate / self.measured - 1.0

    @property
    def left_out_errors(self) -> np.ndarray:
        """left_out / measured − 1 per run (NaN where not predicted)."""
        return self.left_out / self.measured - 1.0

    @property
    def default_error(self) -> float:
        """Mean |default / measured − 1|: the defaults' leave-one-out error (they fit nothing)."""
        return float(np.mean(np.abs(self.default_errors)))

    @property
    def fit_error(self) -> float:
        """Mean |estimate / measured − 1|, in sample."""
        return float(np.mean(np.abs(self.residuals)))

    @property
    def loo_error(self) -> float:
        """Mean |left_out / measured − 1| (NaN with a single run)."""
        errors = self.left_out_errors
        return float(np.mean(np.abs(errors))) if np.all(np.isfinite(errors)) else math.nan

    def predict(self, runs: Any) -> np.ndarray:
        """Seconds mode's step of each of *runs* with the fitted rates (:func:`predict_runs`)."""
        return predict_runs(runs, self.rates, figures=self.fitted)

    def save(self, path: Any, *, force: bool = False) -> None:
        """Write the fitted rates as JSON (``ndcost.spec.rates_io``); a refused fit only with *force*."""
        from ..spec.rates_io import save_rates

        if not self.accepted and not force:
            raise SpecError("fit", "RatesFit.save", "be accepted (or force=True)", self.reason)
        save_rates(self.rates, path, device=self.runs[0].cluster.device.name, fit=self.summary())

    def summary(self) -> dict[str, Any]:
        """What the fit did, JSON-ready: figures fitted and held, errors, accepted."""
        return {"runs": len(self.runs), "source": self.source or None, "fitted": list(self.fitted),
                "held": dict(self.held), "at_bound": dict(self.at_bound), "default_error": _json(self.default_error),
                "fit_error": _json(self.fit_error), "loo_error": _json(self.loo_error), "accepted": self.accepted,
                "reason": self.reason or None}

    def to_dict(self) -> dict[str, Any]:
        """The summary, the rates (fitted figures) and every run, JSON-ready."""
        out = self.summary()
        out["rates"] = {name: getattr(self.rates, name) for name in FITTABLE}
        out["base"] = {name: getattr(self.base, name) for name in FITTABLE}
        out["rows"] = [{"label": run.label, "measured": float(self.measured[i]), "default": float(self.default[i]),
                        "estimate": float(self.estimate[i]), "left_out": _json(self.left_out[i]),
                        "default_error": float(self.default_errors[i]), "residual": float(self.residuals[i]),
                        "left_out_error": _json(self.left_out_errors[i])} for i, run in enumerate(self.runs)]
        out["spearman_default"] = spearman(self.default.tolist(), self.measured.tolist())
        out["spearman_left_out"] = (spearman(self.left_out.tolist(), self.measured.tolist())
                                    if np.all(np.isfinite(self.left_out)) else None)
        return out

    def report(self) -> list[str]:
        """The figures, each run in and out of sample, and the verdict, as lines of text."""
        lines = [f"Rates fitted to {len(self.runs)} runs" + (f" ({self.source})" if self.source else "") + ":"]
        for name in FITTABLE:
            value, start = getattr(self.rates, name), getattr(self.base, name)
            if name not in self.fitted and name not in self.held:
                continue
            shown = (lambda v: "-" if v is None else (f"{v * 1e6:.3f} us" if name == "kernel_overhead" else f"{v:.4f}"))
            state = "fitted" if name in self.fitted else "held"
            if name in self.fitted and name in self.at_bound:
                state += f", at its {self.at_bound[name]} bound"
            lines.append(f"  {name:<22} {shown(value):>10}  (default {shown(start)}, {state})")
        for name, why in self.held.items():
            lines.append(f"  held {name}: {why}")
        width = max([len("run")] + [len(run.label) for run in self.runs])
        lines.append(f"  {'run':<{width}} {'measured s':>11} {'default':>8} {'fitted':>8} {'left out':>9}")
        for i, run in enumerate(self.runs):
            left = self.left_out_errors[i]
            lines.append(f"  {run.label:<{width}} {self.measured[i]:11.4g} {self.default_errors[i]:+8.2%} "
                         f"{self.residuals[i]:+8.2%} " + ("        -" if not math.isfinite(left) else f"{left:+9.2%}"))
        loo = "n/a" if not math.isfinite(self.loo_error) else f"{self.loo_error:.2%}"
        lines.append(f"Mean absolute error: defaults {self.default_error:.2%}, fitted in sample {self.fit_error:.2%}, "
                     f"fitted leave-one-out {loo}")
        lines.append("accepted: the fit predicts left-out runs better than the defaults" if self.accepted
                     else f"REFUSED: {self.reason}")
        return lines


# --------------------------------------------------------------------------- fit_rates


def _space(names: Any, bounds: Any) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    if isinstance(names, str) or not isinstance(names, Sequence) or not names:
        raise SpecError("fit", _OWNER, f"be a non-empty sequence of figure names ({', '.join(FITTABLE)})", names)
    names = tuple(names)
    for name in names:
        if name not in FITTABLE:
            raise SpecError("fit", _OWNER, f"name figures of {', '.join(FITTABLE)}", name)
    if len(set(names)) != len(names):
        raise SpecError("fit", _OWNER, "name each figure once", names)
    bounds = {} if bounds is None else bounds
    if not isinstance(bounds, Mapping):
        raise SpecError("bounds", _OWNER, "be a mapping of figure name -> (lower, upper)", bounds)
    lower, upper = [], []
    for name in bounds:
        if name not in names:
            raise SpecError("bounds", _OWNER, f"name fitted figures ({', '.join(names)})", name)
    for name in names:
        lo, hi = bounds.get(name, FITTABLE[name])
        floor, ceiling = FITTABLE[name]
        share = name != "kernel_overhead"
        valid = (all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (lo, hi))
                 and lo < hi and (0.0 < lo and hi <= 1.0 if share else 0.0 <= lo))
        if not valid:
            rule = ("be (lower, upper) with 0 < lower < upper <= 1" if share
                    else "be (lower, upper) with 0 <= lower < upper")
            raise SpecError(f"bounds[{name!r}]", _OWNER, rule, bounds.get(name))
        lower.append(float(lo))
        upper.append(float(hi))
    return names, np.array(lower), np.array(upper)


def _base_rates(fit_runs: FitRuns, base_rates: Any) -> Rates:
    if base_rates is not None:
        if not isinstance(base_rates, Rates):
            raise SpecError("base_rates", _OWNER, "be a Rates or None", base_rates)
        return base_rates
    own = {run.rates for run in fit_runs}
    if len(own) == 1 and None not in own:
        return own.pop()   # every run ran the same software: its rates
    return Rates.for_device(fit_runs[0].cluster.device)


def fit_rates(runs: Any, *, cluster: Any = None, device: Any = None, base_rates: Rates | None = None,
              fit: Sequence[str] | None = None, bounds: Mapping[str, tuple[float, float]] | None = None,
              source: str | None = None) -> RatesFit:
    """Fit Rates figures to measured runs on one cluster (see the module doc for the procedure).

    Args:
        runs: A runs file or validation file (path), or a sequence of :class:`MeasuredRun` /
            ``(model, spec, cluster, step_seconds)`` (``ndcost.io.fit_runs``).
        cluster, device: The cluster (or its device) a runs file's strategies ran on; runs that
            carry their own cluster must be on this device.
        base_rates: Where the fit starts and what it keeps of the unfitted figures (default: the
            runs' own software rates when they all share one, else the device's defaults).
        fit: The figures to fit (names of :data:`FITTABLE`); None: :data:`DEFAULT_FIT`, with
            ``fp8_matmul_efficiency`` when a run trains in fp8 and the base rates state that figure.
        bounds: Per fitted figure, (lower, upper) replacing :data:`FITTABLE`'s; they must contain
            the base value.
        source: Names the runs in the fitted figures' sources (default: the runs' file).

    Returns:
        A :class:`RatesFit`; ``accepted`` is False (with ``reason``) when the fit does not predict
        left-out runs better than the defaults.

    Raises:
        SpecError: Bad arguments, no runs, runs on different devices, a run seconds mode cannot price.
    """
    if cluster is not None and device is not None:
        raise SpecError("device", _OWNER, "be left out when cluster is given", device)
    fit_runs = as_runs(runs, device=cluster if cluster is not None else device)
    if not len(fit_runs):
        raise SpecError("runs", _OWNER, "hold at least one measured run", list(fit_runs))
    devices = {run.cluster.device for run in fit_runs}
    if len(devices) != 1:
        names = sorted({d.name for d in devices})
        raise SpecError("runs", _OWNER, "all run on one device (the cluster fitted)",
                        names if len(names) > 1 else f"{names[0]} with different figures (Cluster overrides)")
    wanted = device_of(cluster if cluster is not None else device, _OWNER)
    if wanted is not None and wanted.name != fit_runs[0].cluster.device.name:
        raise SpecError("device", _OWNER, f"be the device the runs ran on ({fit_runs[0].cluster.device.name})",
                        wanted.name)
    base = _base_rates(fit_runs, base_rates)
    if fit is None:
        fp8 = any(run.spec.precision == "fp8" and (run.rates or base).fp8_matmul_efficiency is not None
                  for run in fit_runs)
        fit = DEFAULT_FIT + (("fp8_matmul_efficiency",) if fp8 else ())
    names, lower, upper = _space(fit, bounds)
    space = _Space(names, lower, upper)
    starting = []
    for name, lo, hi in zip(names, lower, upper):
        value = getattr(base, name)
        if value is None:   # fp8_matmul_efficiency unstated: fp8 GEMMs run at matmul_efficiency
            value = base.matmul_efficiency
        if not lo <= value <= hi:   # held figures stay at the base: it must be a point of the box
            raise SpecError(f"bounds[{name!r}]", _OWNER, f"contain the base value ({value:g})", (lo, hi))
        starting.append(value)
    theta0 = np.array(starting)
    pricer = _Pricer(fit_runs, base, names)
    n = len(fit_runs)
    everything = np.arange(n)
    solution = _solve(pricer, space, theta0, everything)
    default = pricer.steps(None, everything)
    estimate = pricer.steps(solution.theta, everything)
    left_out = np.full(n, math.nan)
    if n > 1:
        for i in range(n):
            fold = _solve(pricer, space, theta0, np.delete(everything, i))
            left_out[i] = pricer.steps(fold.theta, [i])[0]
    label = source if source is not None else (fit_runs.path or "")
    stamp = f"fitted to {n} runs on {datetime.date.today().isoformat()}" + (f" ({label})" if label else "")
    sources = dict(base.sources)
    sources.update({name: stamp for name in solution.fitted})
    fitted_values = {name: float(solution.theta[names.index(name)]) for name in solution.fitted}
    rates = dataclasses.replace(base, sources=sources, **fitted_values)
    at_bound = {}
    for name in solution.fitted:
        j = names.index(name)
        if solution.theta[j] <= lower[j] * (1 + 1e-9):
            at_bound[name] = "lower"
        elif solution.theta[j] >= upper[j] * (1 - 1e-9):
            at_bound[name] = "upper"
    measured = np.array([run.step_time for run in fit_runs])
    result = RatesFit(rates=rates, base=base, fitted=solution.fitted, held=MappingProxyType(dict(solution.held)),
                      runs=tuple(fit_runs), measured=measured, default=default, estimate=estimate,
                      left_out=left_out, accepted=False, reason="", source=label,
                      at_bound=MappingProxyType(at_bound))
    for array in (measured, default, estimate, left_out):
        array.setflags(write=False)
    if n < 2:
        reason = "leave-one-out needs at least 2 runs: nothing checks the fit"
    elif not solution.fitted:
        reason = "these runs determine none of the figures asked for (see held)"
    elif not result.loo_error < result.default_error:
        reason = (f"its leave-one-out error ({result.loo_error:.2%}) is not below the defaults' "
                  f"({result.default_error:.2%}): it would predict new runs no better")
    else:
        return dataclasses.replace(result, accepted=True)
    return dataclasses.replace(result, reason=reason)
