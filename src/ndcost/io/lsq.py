"""Bounded nonlinear least squares: projected Levenberg–Marquardt with a finite-difference Jacobian.

min ½‖r(x)‖² subject to lower ≤ x ≤ upper, for a residual function r that is cheap, smooth in
pieces and has no derivative of its own (seconds mode's step time against its rates:
:mod:`ndcost.fit_rates`). Deterministic: no random start, no random step.

The method is Levenberg's damped Gauss–Newton step with Marquardt's scaling (Marquardt 1963,
"An Algorithm for Least-Squares Estimation of Nonlinear Parameters", SIAM J. Appl. Math. 11(2),
eq. 27: solve (JᵀJ + λ·diag(JᵀJ)) δ = −Jᵀr). Marquardt divides or multiplies λ by 10 after a
step that lowers the cost or does not; here by 3 and 4 (a choice: the damping then falls more
slowly after a success and rises faster after a failure, fewer wasted trial steps on the kinks
of a max()). Bounds by projection
with an active set: a variable at a bound whose gradient points out of the box is held for the
step, the others step and are clipped back into the box (Kanzow, Yamashita & Fukushima 2004,
"Levenberg–Marquardt methods with strong local convergence properties for solving nonlinear
equations with convex constraints", J. Comput. Appl. Math. 172, the projected LM step). The
Jacobian is by forward differences, a backward one where the forward step would leave the box.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["LeastSquares", "least_squares", "forward_jacobian"]

#: Damping at the first step (Marquardt 1963 §5 starts at 1e-2; a smaller start lets a
#: near-linear problem take its Gauss–Newton step at once).
_DAMPING_START = 1e-3
#: Damping beyond which no step can lower the cost: the point is a minimum to rounding.
_DAMPING_MAX = 1e12


@dataclass(frozen=True, eq=False)
class LeastSquares:
    """The result of :func:`least_squares`.

    Attributes:
        x: The solution, within the bounds.
        residuals: r(x).
        cost: ½‖r(x)‖².
        iterations: Jacobians evaluated.
        evaluations: Calls of the residual function.
        converged: A stopping test passed (False: the iteration limit was reached).
    """

    x: np.ndarray
    residuals: np.ndarray
    cost: float
    iterations: int
    evaluations: int
    converged: bool


def forward_jacobian(fun: Callable[[np.ndarray], np.ndarray], x: np.ndarray, r: np.ndarray, lower: np.ndarray,
                     upper: np.ndarray, step: float) -> np.ndarray:
    """∂r/∂x by forward differences of size ``step·(1 + |x_j|)``, backward where x_j + h > upper_j.

    A step that yields non-finite residuals gives a zero column: a variable the residuals
    cannot be differentiated in is not moved by a Gauss–Newton step.
    """
    jac = np.zeros((r.shape[0], x.shape[0]))
    for j in range(x.shape[0]):
        h = step * (1.0 + abs(x[j]))
        if x[j] + h > upper[j]:
            h = -h
        probe = x.copy()
        probe[j] += h
        moved = fun(probe)
        if np.all(np.isfinite(moved)):
            jac[:, j] = (moved - r) / h
    return jac


def least_squares(fun: Callable[[np.ndarray], np.ndarray], x0, lower, upper, *, max_iter: int = 100,
                  step: float = 1e-7, xtol: float = 1e-13, gtol: float = 1e-15, ftol: float = 1e-14) -> LeastSquares:
    """min ½‖fun(x)‖² for lower ≤ x ≤ upper, from *x0* (clipped into the box).

    Args:
        fun: x (n,) -> residuals (m,); a trial point with non-finite residuals is rejected.
        x0, lower, upper: Start and bounds, shape (n,); lower ≤ upper.
        max_iter: Jacobians at most.
        step: Relative finite-difference step.
        xtol: Stop after an accepted step smaller than ``xtol·(1 + ‖x‖∞)``.
        gtol: Stop when the projected gradient's largest entry is at most *gtol*.
        ftol: Stop when an accepted step lowers the cost by at most ``ftol·cost``, or the cost is
            at most ``ftol²`` (an exact fit).

    Raises:
        ValueError: Bad shapes or bounds, or non-finite residuals at the start.
    """
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    x = np.clip(np.asarray(x0, dtype=np.float64), lower, upper)
    if x.ndim != 1 or lower.shape != x.shape or upper.shape != x.shape or np.any(lower > upper):
        raise ValueError("least_squares: x0, lower and upper must be (n,) with lower <= upper")
    evaluations = 1
    r = np.asarray(fun(x), dtype=np.float64)
    if r.ndim != 1 or not np.all(np.isfinite(r)):
        raise ValueError("least_squares: the residuals at the start must be a finite (m,) vector")
    cost = 0.5 * float(r @ r)
    damping = _DAMPING_START
    iterations = 0
    converged = False
    while iterations < max_iter:
        if cost <= 0.5 * ftol * ftol:
            converged = True
            break
        jac = forward_jacobian(fun, x, r, lower, upper, step)
        evaluations += x.shape[0]
        iterations += 1
        gradient = jac.T @ r
        # Held for this step: at a bound with the descent direction (-gradient) pointing out.
        held = ((x <= lower) & (gradient > 0)) | ((x >= upper) & (gradient < 0))
        free = ~held
        if not free.any() or float(np.abs(gradient[free]).max()) <= gtol:
            converged = True
            break
        jf = jac[:, free]
        normal = jf.T @ jf
        scale = np.diag(normal).copy()
        scale = np.maximum(scale, 1e-12 * max(float(scale.max()), 1e-300))
        accepted = False
        while damping <= _DAMPING_MAX:
            try:
                delta = np.linalg.solve(normal + damping * np.diag(scale), -gradient[free])
            except np.linalg.LinAlgError:
                delta = np.linalg.lstsq(normal + damping * np.diag(scale), -gradient[free], rcond=None)[0]
            trial = x.copy()
            trial[free] += delta
            trial = np.clip(trial, lower, upper)
            evaluations += 1
            r_trial = np.asarray(fun(trial), dtype=np.float64)
            cost_trial = 0.5 * float(r_trial @ r_trial) if np.all(np.isfinite(r_trial)) else np.inf
            if cost_trial < cost:
                accepted = True
                break
            damping *= 4.0
        if not accepted:
            converged = True  # no step lowers the cost: a minimum, to rounding
            break
        moved = float(np.abs(trial - x).max())
        reduction = cost - cost_trial
        x, r, cost = trial, r_trial, cost_trial
        damping = max(damping / 3.0, 1e-15)
        if moved <= xtol * (1.0 + float(np.abs(x).max())) or reduction <= ftol * (cost + reduction):
            converged = True
            break
    return LeastSquares(x=x, residuals=r, cost=cost, iterations=iterations, evaluations=evaluations,
                        converged=converged)
