"""Running the seconds kernels on one candidate's arrays (``ndcost.tables.seconds.seconds_arrays``), and copies of
those arrays with some columns changed: shared by the seconds-mode kernel tests."""
from __future__ import annotations

import numpy as np

from ndcost.kernels.columns import (
    KIND, PART_NAMES, RATE, SECONDS_CAND, SECONDS_LAYER_FIELDS, SECONDS_STAGE_FIELDS,
)


def layer_times(kernels, a) -> np.ndarray:
    out = np.empty((a["kinds"].shape[0], len(SECONDS_LAYER_FIELDS)))
    kernels.seconds_layer_times(a["kinds"], a["skinds"], a["model"], a["smodel"], a["cand"], a["rate"], out)
    return out


def stage_sums(kernels, a) -> np.ndarray:
    out = np.empty((a["counts"].shape[0], len(SECONDS_STAGE_FIELDS)))
    kernels.seconds_stage_sums(a["kinds"], a["skinds"], a["model"], a["smodel"], a["cand"], a["rate"], a["counts"],
                               a["slot_option"], a["slot_mask"], a["extras"], out)
    return out


def run_seconds(kernels, a) -> list:
    """[layer times, stage sums, parts, stage times, [step]] of one candidate."""
    layer = layer_times(kernels, a)
    stage = stage_sums(kernels, a)
    parts = np.empty(len(PART_NAMES))
    times = np.empty(stage.shape[0])
    step = kernels.seconds_combine(stage, a["cand"], parts, times)
    return [layer, stage, parts, times, np.array([step])]


def _with(a: dict, key: str, index, row: int | None, values: dict) -> dict:
    a = dict(a)
    table = a[key].copy()
    for name, value in values.items():
        if row is None:
            table[index[name]] = value
        else:
            table[row, index[name]] = value
    a[key] = table
    return a


def with_rate(a: dict, **values) -> dict:
    """A copy of *a* with these rate columns set (the arrays themselves untouched)."""
    return _with(a, "rate", RATE, None, values)


def with_cand(a: dict, **values) -> dict:
    """A copy of *a* with these candidate columns set."""
    return _with(a, "cand", SECONDS_CAND, None, values)


def with_kind(a: dict, k: int = 0, **values) -> dict:
    """A copy of *a* with these columns of kind row *k* set."""
    return _with(a, "kinds", KIND, k, values)
