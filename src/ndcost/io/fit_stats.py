"""The small numerics of fitting measured runs and judging the fit: non-negative least squares
(Lawson-Hanson) and Spearman's rank correlation with average ranks for ties.

Used by the ratio fits (:mod:`ndcost.io.calibrate`, :mod:`ndcost.io.leave_one_out`) and the rate fits
(:mod:`ndcost.fit_rates`).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np


__all__ = ["nnls", "average_ranks", "spearman"]


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
