"""Recompute as a choice: the kernels behind switch settings, fronts and stage plans (oracle).

docs/ND_MODEL.md §4.4 (seed ``recompute/profile.py``; upstream ``front.py`` and
``knapsack.py``). Three kernels:

* :func:`switch_settings` prices every setting of a layer kind's acting
  switches from the base cost and each switch's cost alone, by additivity.
* :func:`dominance_front` keeps the options no other option dominates.
* :func:`mck_min_time` solves one stage's multiple-choice knapsack: one
  option per layer, least total time within a memory budget.

A cost row is a flat vector; ``ndcost.price.switch_profile`` fixes its layout.
"""
from __future__ import annotations

import math

__all__ = ["switch_settings", "dominance_front", "mck_min_time"]

INF = math.inf


def _shape2(array) -> tuple[int, int]:
    """(rows, columns) of a 2-D array or a list of equal rows."""
    shape = getattr(array, "shape", None)
    if shape is not None:
        return int(shape[0]), int(shape[1])
    rows = len(array)
    return rows, (len(array[0]) if rows else 0)


def _acting_bits(acting_mask: int, n_switches: int) -> list[int]:
    """The switch indices set in *acting_mask*, lowest first; ValueError beyond ``n_switches``."""
    if acting_mask < 0 or acting_mask >> n_switches:
        raise ValueError(f"acting_mask must name rows of alone (bits 0..{n_switches - 1}); got {acting_mask}")
    return [s for s in range(n_switches) if acting_mask >> s & 1]


def switch_settings(plain, alone, acting_mask: int, out) -> None:
    """Price every setting of the acting switches by additivity.

    Row *r* of *out* is the setting that recomputes acting switch *j* (the
    *j*-th set bit of *acting_mask*, counted from bit 0) exactly when bit *j*
    of *r* is set: ``plain + Σ (alone[s] − plain)`` over those switches, summed
    from the lowest switch up (the order ``SwitchProfile.selective`` adds
    them in, so the two agree to the last bit). Row 0 is *plain* itself.

    Args:
        plain: The cost row every setting adds up from (the base).
        alone: One cost row per switch: that switch alone recomputed.
        acting_mask: Bit *s* set when switch *s* (row *s* of *alone*) acts.
        out: ``2**popcount(acting_mask)`` rows of *plain*'s width, written.
    """
    width = len(plain)
    n_switches, alone_width = _shape2(alone)
    bits = _acting_bits(int(acting_mask), n_switches)
    if n_switches and alone_width != width:
        raise ValueError(f"alone must have one row of plain's width ({width}) per switch; got width {alone_width}")
    out_rows, out_width = _shape2(out)
    if out_rows != 1 << len(bits) or (out_rows and out_width != width):
        raise ValueError(f"out must have 2**{len(bits)} rows of plain's width ({width}); "
                         f"got shape ({out_rows}, {out_width})")
    base = [float(plain[c]) for c in range(width)]
    rows = [base]
    # Rows 2**h .. 2**(h+1) - 1 are rows 0 .. 2**h - 1 with switch h recomputed
    # as well: each row adds its highest switch last.
    for s in bits:
        delta = [float(alone[s][c]) - base[c] for c in range(width)]
        rows.extend([[row[c] + delta[c] for c in range(width)] for row in rows])
    for r, row in enumerate(rows):
        for c in range(width):
            out[r][c] = row[c]


def _beats(w: list, w_index: int, x: list, x_index: int) -> tuple[bool, bool]:
    """(row w dominates row x, row x dominates row w) over the criteria both lists hold."""
    le = ge = True
    for a, b in zip(w, x):
        if not a <= b:
            le = False
        if not a >= b:
            ge = False
        if not (le or ge):
            break
    if le and ge:  # equal on every criterion: the lower index wins
        return w_index < x_index, x_index < w_index
    return le, ge


def dominance_front(values, n_criteria: int, always_keep, out_keep) -> None:
    """Mark the rows of *values* that no other row dominates (1 kept, 0 dominated).

    Row *j* dominates row *i* when it is <= on each of the first *n_criteria*
    columns and < on at least one. Of rows equal on every criterion, the
    lowest index dominates the others, so exactly one of them stays: the
    caller orders rows by preference. NaN compares neither way (a row with a
    NaN criterion neither dominates nor is dominated). The rows
    *always_keep* lists are kept whatever dominates them.

    Block-nested-loop skyline (Börzsönyi, Kossmann and Stocker, "The Skyline
    Operator", ICDE 2001): a window holds the rows no row seen so far
    dominates; a new row is dropped when a window row dominates it, else it
    evicts the window rows it dominates and joins. The set kept depends on
    the relation alone, so the compiled twin, which visits the rows in
    another order for speed, keeps the same rows.
    """
    n = len(values)
    width = _shape2(values)[1] if n else 0
    if n_criteria < 0 or (n and n_criteria > width):
        raise ValueError(f"n_criteria must be in [0, values' width ({width})]; got {n_criteria}")
    if len(out_keep) != n:
        raise ValueError(f"out_keep must have one entry per row of values ({n}); got {len(out_keep)}")
    for k in range(len(always_keep)):
        if not 0 <= always_keep[k] < n:
            raise ValueError(f"always_keep must hold row indices of values (0..{n - 1}); got {int(always_keep[k])}")
    rows = [[float(values[i][c]) for c in range(n_criteria)] for i in range(n)]
    window: list[int] = []
    for i in range(n):
        evicted = set()
        dominated = False
        for w in window:
            w_beats_i, i_beats_w = _beats(rows[w], w, rows[i], i)
            if w_beats_i:
                dominated = True
                break
            if i_beats_w:
                evicted.add(w)
        window = [w for w in window if w not in evicted]
        if not dominated:
            window.append(i)
    for i in range(n):
        out_keep[i] = 0
    for w in window:
        out_keep[w] = 1
    for k in range(len(always_keep)):
        out_keep[always_keep[k]] = 1


def mck_min_time(weights, values, group_start, budget_buckets: int, out_choice) -> float:
    """Least total time of one option per group within a weight budget (multiple-choice knapsack).

    Group *g* offers options ``group_start[g] .. group_start[g+1] - 1`` of
    *weights* (integer buckets) and *values* (times). The plan takes one
    option of every group with ``Σ weight <= budget_buckets`` and the least
    ``Σ value``, summed in group order. Returns that sum and writes, per
    group, the chosen option's index within its group; +inf and -1
    everywhere when no plan fits (an empty group, or too little budget).
    Ties: of the plans with the least sum, the one whose last group has the
    lowest option index, then the group before it, and so on (with options
    ordered by recompute, the least recompute). An option whose value is NaN
    or +inf is never chosen.

    Dynamic programming over buckets, O(groups · options · buckets): each
    group is first shifted by its lightest option (exact: every plan takes
    one option per group), and the buckets run only up to the smaller of the
    budget left and the most the shifted options can weigh together.
    """
    n_options = len(weights)
    if len(values) != n_options:
        raise ValueError(f"values must have one entry per option ({n_options}); got {len(values)}")
    if len(group_start) < 1:
        raise ValueError("group_start must hold n_groups + 1 offsets; got none")
    n_groups = len(group_start) - 1
    if len(out_choice) != n_groups:
        raise ValueError(f"out_choice must have one entry per group ({n_groups}); got {len(out_choice)}")
    starts = [int(group_start[g]) for g in range(n_groups + 1)]
    if starts[0] != 0 or starts[n_groups] != n_options or any(
            starts[g] > starts[g + 1] for g in range(n_groups)):
        raise ValueError(f"group_start must rise from 0 to the number of options ({n_options})")
    for g in range(n_groups):
        out_choice[g] = -1
    w = [int(weights[o]) for o in range(n_options)]
    v = [float(values[o]) for o in range(n_options)]
    lightest = []
    spread = 0
    for g in range(n_groups):
        if starts[g] == starts[g + 1]:
            return INF
        lo = min(w[starts[g]:starts[g + 1]])
        lightest.append(lo)
        spread += max(w[starts[g]:starts[g + 1]]) - lo
    left = int(budget_buckets) - sum(lightest)
    if left < 0:
        return INF
    cap = min(left, spread)
    best = [0.0] * (cap + 1)  # least time of the groups so far within b buckets
    choices = []
    for g in range(n_groups):
        s0, lo = starts[g], lightest[g]
        cur = [INF] * (cap + 1)
        pick = [-1] * (cap + 1)
        for o in range(s0, starts[g + 1]):
            shifted = w[o] - lo
            value = v[o]
            for b in range(shifted, cap + 1):
                candidate = best[b - shifted] + value
                if candidate < cur[b]:  # strict: the lowest index keeps a tie
                    cur[b] = candidate
                    pick[b] = o - s0
        choices.append(pick)
        best = cur
    total = best[cap]
    if not total < INF:
        return INF
    b = cap
    for g in range(n_groups - 1, -1, -1):
        o = choices[g][b]
        out_choice[g] = o
        b -= w[starts[g] + o] - lightest[g]
    return total
