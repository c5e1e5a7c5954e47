"""One candidate in one call (oracle); the twin is ``cysrc/ndcost/kernels/one.pxi``.

What ``estimate()`` asks of the batch kernels for a batch of one -- seconds mode's price and the
memory model -- in one call with no per-row index arrays: the compiled twin saves the second call
and the arguments a batch needs. The oracle is those batch kernels on a batch of one
(:func:`~ndcost.kernels.seconds_batch.seconds_estimate_batch`, :func:`~ndcost.kernels.batch.memory_batch`),
so the two paths cannot drift apart.
"""
from __future__ import annotations

import math

from .columns import (
    CAND, CAND_FIELDS, LAYOUT, LAYOUT_FIELDS, MEMORY_CAND, MEMORY_CAND_FIELDS, PART_NAMES, RATE_FIELDS, SECONDS_CAND,
    SECONDS_CAND_FIELDS, SECONDS_STAGE_FIELDS,
)
from .batch import memory_batch, nd_estimate_batch
from .memory import N_MEMORY_COLUMNS
from .seconds_batch import STEP_RATE_FIELDS, seconds_estimate_batch

__all__ = ["one_tables", "nd_estimate_one", "seconds_estimate_one"]

#: What seconds_estimate_one writes in ``out``, in order (the compiled twin's ONE_* enum);
#: nd_estimate_one writes the first :data:`ND_ONE_COUNT` of them.
ONE_FIELDS = ("step_time", "peak", *PART_NAMES, *STEP_RATE_FIELDS)
ND_ONE_COUNT = 2 + len(PART_NAMES)

_N_SC = len(SECONDS_CAND_FIELDS)
_N_MC = len(MEMORY_CAND_FIELDS)
_N_SS = len(SECONDS_STAGE_FIELDS)


def one_tables(kinds, skinds, model, smodel, mkinds, mmodel, layout, pool, slot_pool, extras) -> tuple:
    """What the one-candidate kernels read of a model and one layout, held in one object (the
    compiled twin acquires and checks the buffers once, here a tuple; the batch kernels check them).

    Args:
        kinds, skinds, model, smodel: as :func:`~ndcost.kernels.seconds_batch.seconds_estimate_batch`.
        mkinds, mmodel: the memory kind table and model vector (as ``memory_batch``'s kinds, model).
        layout: (LAYOUT_FIELDS,) the layout row; pool, slot_pool: the layout's arrays
            (``ndcost.tables.layout_pool``); extras: its (pp, SECONDS_EXTRA_FIELDS) rows, flat.
    """
    _expect("layout", len(LAYOUT_FIELDS), len(layout))
    return kinds, skinds, model, smodel, mkinds, mmodel, layout, pool, slot_pool, extras


def seconds_estimate_one(tables, cand, rate, reserve, out, out_stage_times, out_stage_sums, out_stages) -> None:
    """Seconds mode and the memory model of one candidate on one layout.

    Args:
        tables: :func:`one_tables` of the model and the candidate's layout.
        cand: a tuple of (SECONDS_CAND_FIELDS + MEMORY_CAND_FIELDS,) numbers, the seconds candidate
            vector, then the memory one; (SECONDS_CAND_FIELDS,) without memory. Python values, as
            ``estimate()`` computes them (the compiled twin converts them as struct's ``"d"``).
        rate: (RATE_FIELDS,) the candidate's rates.
        reserve: bytes kept back on every device (the memory model's reserve).
        out: (len(ONE_FIELDS),): step time, memory peak (NaN without memory), the parts, the step rates.
        out_stage_times: (>= pp,) each stage's busy time in the step, NaN beyond pp.
        out_stage_sums: (>= pp, SECONDS_STAGE_FIELDS) each stage's raw sums, NaN beyond pp.
        out_stages: (>= pp, 8) each stage's memory (memory.MEMORY_PARTS, then the total), NaN beyond
            pp; or (0, 8): no memory.
    """
    kinds, skinds, model, smodel, mkinds, mmodel, layout, pool, slot_pool, extras = tables
    with_memory = _check_one(cand, _N_SC, SECONDS_CAND, layout, out, len(ONE_FIELDS), out_stage_times, out_stages)
    _expect("rate", len(RATE_FIELDS), len(rate))
    p = layout[LAYOUT["pp"]]
    n_sums = len(out_stage_sums)
    if n_sums < p or any(len(row) != _N_SS for row in out_stage_sums):
        raise ValueError(f"out_stage_sums must be (>= pp ({p}), {_N_SS})")
    values, layouts, one = [float(v) for v in cand], [[int(v) for v in layout]], [0]
    step, parts, step_rates = [0.0], [[0.0] for _ in PART_NAMES], [[0.0] for _ in STEP_RATE_FIELDS]
    times, sums = [[0.0] * len(out_stage_times)], [[[0.0] * _N_SS for _ in range(n_sums)]]
    seconds_estimate_batch(kinds, skinds, model, smodel, [[v] for v in values[:_N_SC]], [list(rate)], one, one,
                           layouts, pool, slot_pool, extras, one, [0], step, parts, step_rates, times, sums)
    peak = _memory(mkinds, mmodel, values[_N_SC:], layouts, pool, slot_pool, reserve, out_stages) if with_memory \
        else math.nan
    _store(out, [step[0], peak, *(part[0] for part in parts), *(rate_[0] for rate_ in step_rates)],
           out_stage_times, times[0])
    for s in range(n_sums):
        for j in range(_N_SS):
            out_stage_sums[s][j] = sums[0][s][j]


def nd_estimate_one(tables, cand, options, ratios, reserve, out, out_stage_times, out_stages) -> None:
    """ND's score and the memory model of one candidate on one layout.

    Args:
        tables: :func:`one_tables` of the model and the candidate's layout.
        options, ratios: as :func:`~ndcost.kernels.batch.nd_estimate_batch`.
        cand: a tuple of (CAND_FIELDS + MEMORY_CAND_FIELDS,) numbers, ND's candidate vector, then
            the memory one; (CAND_FIELDS,) without memory (as :func:`seconds_estimate_one`'s).
        reserve: as :func:`seconds_estimate_one`.
        out: (ND_ONE_COUNT,): step, memory peak (NaN without memory), the parts (ONE_FIELDS order).
        out_stage_times, out_stages: as :func:`seconds_estimate_one`.
    """
    kinds, _, model, _, mkinds, mmodel, layout, pool, slot_pool, _ = tables
    with_memory = _check_one(cand, len(CAND_FIELDS), CAND, layout, out, ND_ONE_COUNT, out_stage_times, out_stages)
    n_cand = len(CAND_FIELDS)
    values, layouts, one = [float(v) for v in cand], [[int(v) for v in layout]], [0]
    step, parts, times = [0.0], [[0.0] for _ in PART_NAMES], [[0.0] * len(out_stage_times)]
    nd_estimate_batch(kinds, model, [[v] for v in values[:n_cand]], one, layouts, pool, slot_pool, options, ratios,
                      [0], step, parts, times)
    peak = _memory(mkinds, mmodel, values[n_cand:], layouts, pool, slot_pool, reserve, out_stages) if with_memory \
        else math.nan
    _store(out, [step[0], peak, *(part[0] for part in parts)], out_stage_times, times[0])


def _check_one(cand, n_cand, index, layout, out, n_out, out_stage_times, out_stages) -> bool:
    """The shapes both kernels share; whether memory is asked for."""
    with_memory = len(out_stages) != 0
    if type(cand) is not tuple:
        raise TypeError(f"cand must be a tuple of numbers, got {type(cand).__name__}")
    _expect("cand", n_cand + _N_MC if with_memory else n_cand, len(cand))
    _expect("out", n_out, len(out))
    p, vp = layout[LAYOUT["pp"]], layout[LAYOUT["vpp"]]
    if cand[index["p"]] != p or cand[index["vp"]] != vp:
        raise ValueError("cand must have the pp and vpp of its layout")
    if with_memory and (cand[n_cand + MEMORY_CAND["p"]] != p or cand[n_cand + MEMORY_CAND["vp"]] != vp):
        raise ValueError("cand's memory part must have the pp and vpp of its layout")
    if len(out_stage_times) < p:
        raise ValueError(f"out_stage_times must have length >= pp ({p})")
    if (with_memory and len(out_stages) < p) or any(len(row) != N_MEMORY_COLUMNS for row in out_stages):
        raise ValueError(f"out_stages must be (0, {N_MEMORY_COLUMNS}) or (>= pp ({p}), {N_MEMORY_COLUMNS})")
    return with_memory


def _memory(mkinds, mmodel, mcand, layouts, pool, slot_pool, reserve, out_stages) -> float:
    """memory_batch on the one candidate: its stages into *out_stages*; returns the peak."""
    peaks, stages = [0.0], [[[0.0] * N_MEMORY_COLUMNS for _ in range(len(out_stages))]]
    memory_batch(mkinds, mmodel, [[v] for v in mcand], [0], layouts, pool, slot_pool, reserve, math.inf, [0], peaks,
                 [0], stages)
    for s, row in enumerate(stages[0]):
        for j, value in enumerate(row):
            out_stages[s][j] = value
    return peaks[0]


def _store(out, scalars, out_stage_times, times) -> None:
    for j, value in enumerate(scalars):
        out[j] = value
    for s in range(len(out_stage_times)):
        out_stage_times[s] = times[s]


def _expect(name: str, length: int, got: int) -> None:
    if got != length:
        raise ValueError(f"{name} must have length {length}, got {got}")
