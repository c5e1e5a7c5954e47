"""Seconds mode over a batch of candidates (oracle); the twin is ``cysrc/ndcost/kernels/seconds_batch.pxi``.

Two kernels:

* :func:`seconds_step_rates` -- what a priced step yields besides its time: MFU, HFU, tokens per
  second and the model FLOPs of the step (:data:`STEP_RATE_FIELDS`). ``ndcost.tables.seconds.seconds_estimate``
  and :func:`seconds_estimate_batch` both call it, so that the formula is written once per backend.
* :func:`seconds_estimate_batch` -- N candidates, each :func:`~ndcost.kernels.seconds.seconds_stage_sums`
  + :func:`~ndcost.kernels.seconds.seconds_combine` + :func:`seconds_step_rates`.

The batch follows ``ndcost.kernels.batch``: each candidate is a column of a candidate matrix
(``SECONDS_CAND_FIELDS`` x N) and the index of its layout in a layout table (``LAYOUT_FIELDS``,
``ndcost.tables.layout_pool``) whose chunk-summed counts sit in ``pool`` and whose slot options and keep
masks sit in ``slot_pool``; seconds mode adds each layout's per-stage ``SECONDS_EXTRA_FIELDS`` rows
(embedding, output head and MTP modules per stage) in ``extras``, at ``extras_at[layout]``. A
candidate reads its rates row ``rates[rate_index[i]]`` (one row per precision: the matmul peak and
its achievable share depend on it).

A row whose ``reason`` is an invalid-candidate code (>= len(KERNEL_REASONS)) is skipped: its
outputs are NaN. A priced row whose step time is NaN gets the reason "undefined" (only a row still
"ok" changes). Nothing raises once the shapes are checked.
"""
from __future__ import annotations

import math

from .columns import (
    KERNEL_REASON, KERNEL_REASONS, KIND_FIELDS, LAYOUT, MODEL_FIELDS, PART_NAMES, RATE, RATE_FIELDS, SECONDS_CAND,
    SECONDS_CAND_FIELDS, SECONDS_EXTRA_FIELDS, SECONDS_KIND_FIELDS, SECONDS_MODEL_FIELDS, SECONDS_STAGE,
    SECONDS_STAGE_FIELDS, STEP_RATE_FIELDS,
)
from .batch import _check_common, _check_rows, _columns_as_rows, _flat, _rows
from .seconds import seconds_combine, seconds_stage_sums

__all__ = ["seconds_step_rates", "seconds_estimate_batch"]

NAN = math.nan

_C = SECONDS_CAND
_S = SECONDS_STAGE
_R = RATE
_L = LAYOUT
_N_KERNEL_REASONS = len(KERNEL_REASONS)
_UNDEFINED = KERNEL_REASON["undefined"]
_SR_COUNT = len(STEP_RATE_FIELDS)
_S_COUNT = len(SECONDS_STAGE_FIELDS)
_X_COUNT = len(SECONDS_EXTRA_FIELDS)


def _step_rates(stage, cand, rate, step: float, out) -> None:
    """seconds_step_rates without the checks (the batch's own calls)."""
    model_flops = 0.0
    hw_flops = 0.0
    for row in stage:
        model_flops += row[_S["model_flops"]]
        hw_flops += row[_S["hw_flops"]]
    m, d = cand[_C["m"]], cand[_C["d"]]
    # per step: m micro-batches on each of the d replicas (a stage sum is one micro-batch's FLOPs)
    model_flops = m * d * model_flops
    hw_flops = m * d * hw_flops
    # over step x devices (dp·tp·pp·cp) x the matmul dtype's dense peak
    peak = rate[_R["peak_mm"]] * (d * cand[_C["t"]] * cand[_C["p"]] * cand[_C["cp"]])
    busy = step * peak
    tokens = cand[_C["b"]] * d * m * cand[_C["s"]]     # the global batch (b·d·m samples) x the sequence
    out[0] = model_flops / busy if busy > 0.0 else NAN
    out[1] = hw_flops / busy if busy > 0.0 else NAN
    out[2] = tokens / step if step > 0.0 else NAN
    out[3] = model_flops


def seconds_step_rates(stage, cand, rate, step: float, out) -> None:
    """MFU, HFU, tokens per second and model FLOPs of a step of *step* seconds, into out[STEP_RATE_FIELDS].

    *stage* is seconds_stage_sums' output (pp x SECONDS_STAGE_FIELDS; ``model_flops`` and
    ``hw_flops`` are one micro-batch's FLOPs without and with recompute). Per step they are m x d
    times the stage sums; MFU and HFU divide them by step x devices (dp·tp·pp·cp) x the matmul
    dtype's dense peak (Korthikanti et al. 2022 §6 / Narayanan et al. 2021 Eq. 3); tokens per second
    is b·d·m·s over the step. NaN where the step (or the busy time) is not positive, or NaN.
    """
    for row in stage:
        if len(row) != _S_COUNT:
            raise ValueError(f"stage must have {_S_COUNT} columns, got {len(row)}")
    if len(cand) != len(SECONDS_CAND_FIELDS):
        raise ValueError(f"cand must have length {len(SECONDS_CAND_FIELDS)}, got {len(cand)}")
    if len(rate) != len(RATE_FIELDS):
        raise ValueError(f"rate must have length {len(RATE_FIELDS)}, got {len(rate)}")
    if len(out) != _SR_COUNT:
        raise ValueError(f"out must have length {_SR_COUNT}, got {len(out)}")
    _step_rates(stage, cand, rate, float(step), out)


def seconds_estimate_batch(kinds, skinds, model, smodel, cands, rates, rate_index, layout_index, layouts, pool,
                           slot_pool, extras, extras_at, reason, out_step, out_parts, out_rates,
                           out_stage_times, out_stage_sums) -> None:
    """Seconds mode's step time of N candidates (one stage walk, combine and step rates each).

    Args:
        kinds: (K, KIND_FIELDS); skinds: (K, SECONDS_KIND_FIELDS); model: (MODEL_FIELDS,);
            smodel: (SECONDS_MODEL_FIELDS,).
        cands: (SECONDS_CAND_FIELDS, N), a candidate per column.
        rates: (Q, RATE_FIELDS), Q >= 1; rate_index: (N,) each candidate's rates row.
        layout_index: (N,) the layout row of each candidate; layouts: (L, LAYOUT_FIELDS).
        pool, slot_pool: the layouts' arrays (``ndcost.tables.layout_pool``; the batch reads the
            chunk-summed counts and the slots).
        extras: float64, each layout's (pp, SECONDS_EXTRA_FIELDS) rows from ``extras_at[layout]``;
            extras_at: (L,) int64.
        reason: (N,) IN/OUT reason codes; out_step: (N,) seconds per step.
        out_parts: (PART_NAMES, N), a part per row; out_rates: (STEP_RATE_FIELDS, N).
        out_stage_times: (N, >= max pp) each stage's busy time in the step (seconds_combine's
            stage_times), NaN beyond the candidate's pp, or (0, 0) for none.
        out_stage_sums: (N, >= max pp, SECONDS_STAGE_FIELDS) each stage's raw sums (seconds_stage_sums'
            output, what ``estimate()`` keeps as ``details["stage_sums"]``), NaN beyond the candidate's
            pp, or (0, 0, 0) for none.
    """
    n, n_kinds, rows = _check_common(kinds, len(KIND_FIELDS), model, len(MODEL_FIELDS), cands,
                                     len(SECONDS_CAND_FIELDS), layout_index, layouts, pool, slot_pool, reason)
    if len(skinds) != n_kinds or any(len(row) != len(SECONDS_KIND_FIELDS) for row in skinds):
        raise ValueError(f"skinds must be ({n_kinds}, {len(SECONDS_KIND_FIELDS)})")
    if len(smodel) != len(SECONDS_MODEL_FIELDS):
        raise ValueError(f"smodel must have length {len(SECONDS_MODEL_FIELDS)}, got {len(smodel)}")
    n_rates = len(rates)
    if n_rates < 1 or any(len(row) != len(RATE_FIELDS) for row in rates):
        raise ValueError(f"rates must be (Q, {len(RATE_FIELDS)}) with Q >= 1")
    if len(rate_index) != n:
        raise ValueError(f"rate_index must have length {n}, got {len(rate_index)}")
    if len(extras_at) != len(rows):
        raise ValueError(f"extras_at must have length {len(rows)}, got {len(extras_at)}")
    n_extras = len(extras)
    for li, row in enumerate(rows):
        at = extras_at[li]
        if at < 0 or at + row[_L["pp"]] * _X_COUNT > n_extras:
            raise ValueError(f"extras_at[{li}] must hold a span of pp x {_X_COUNT} within extras")
    n_parts = len(PART_NAMES)
    if len(out_step) != n:
        raise ValueError(f"out_step must have length {n}, got {len(out_step)}")
    if len(out_parts) != n_parts or any(len(part) != n for part in out_parts):
        raise ValueError(f"out_parts must be ({n_parts}, {n})")
    if len(out_rates) != _SR_COUNT or any(len(part) != n for part in out_rates):
        raise ValueError(f"out_rates must be ({_SR_COUNT}, {n})")
    n_times = len(out_stage_times[0]) if len(out_stage_times) else 0
    if len(out_stage_times) not in (0, n) or (len(out_stage_times) and any(n_times < row[_L["pp"]] for row in rows)):
        raise ValueError(f"out_stage_times must be (0, 0) or ({n}, >= the largest pp)")
    n_sums = len(out_stage_sums[0]) if len(out_stage_sums) else 0
    if len(out_stage_sums) not in (0, n) or (len(out_stage_sums) and (
            any(n_sums < row[_L["pp"]] for row in rows) or any(len(s) != _S_COUNT for s in out_stage_sums[0]))):
        raise ValueError(f"out_stage_sums must be (0, 0, 0) or ({n}, >= the largest pp, {_S_COUNT})")
    cand_rows = _columns_as_rows(cands)
    _check_rows(cand_rows, layout_index, reason, rows, SECONDS_CAND_FIELDS.index("p"), SECONDS_CAND_FIELDS.index("vp"))
    for i in range(n):
        if reason[i] < _N_KERNEL_REASONS and not 0 <= rate_index[i] < n_rates:
            raise ValueError(f"rate_index[{i}] must be a rates row in [0, {n_rates}), got {rate_index[i]}")
    kind_rows, skind_rows, rate_rows = _rows(kinds), _rows(skinds), _rows(rates)
    model_row, smodel_row = _flat(model), _flat(smodel)
    pool_list, slots, extras_list = _flat(pool), _flat(slot_pool), _flat(extras)
    skipped_parts, skipped_rates = [NAN] * n_parts, [NAN] * _SR_COUNT
    for i in range(n):
        if reason[i] >= _N_KERNEL_REASONS:
            # not priced: the row's outputs NaN, written as a priced row's are (no stage: p = 0)
            _store(i, NAN, skipped_parts, skipped_rates, (), (), 0, out_step, out_parts, out_rates, out_stage_times,
                   n_times, out_stage_sums, n_sums)
            continue
        li = layout_index[i]
        row = rows[li]
        p, n_slots = row[_L["pp"]], row[_L["n_slots"]]
        k_o = n_kinds * n_slots
        at = row[_L["counts_at"]]
        counts = [pool_list[at + s * k_o: at + (s + 1) * k_o] for s in range(p)]
        x_at = extras_at[li]
        extra_rows = [extras_list[x_at + s * _X_COUNT: x_at + (s + 1) * _X_COUNT] for s in range(p)]
        slot_at = row[_L["slots_at"]]
        cand, rate = cand_rows[i], rate_rows[rate_index[i]]
        stage = [[0.0] * _S_COUNT for _ in range(p)]
        seconds_stage_sums(kind_rows, skind_rows, model_row, smodel_row, cand, rate, counts,
                           slots[slot_at: slot_at + n_slots], slots[slot_at + n_slots: slot_at + 2 * n_slots],
                           extra_rows, stage)
        parts = [0.0] * n_parts
        times = [0.0] * p
        total = seconds_combine(stage, cand, parts, times)
        step_rates = [0.0] * _SR_COUNT
        _step_rates(stage, cand, rate, total, step_rates)
        _store(i, total, parts, step_rates, times, stage, p, out_step, out_parts, out_rates, out_stage_times, n_times,
               out_stage_sums, n_sums)
        if total != total and reason[i] == 0:
            reason[i] = _UNDEFINED


def _store(i, total, parts, step_rates, times, stage, p, out_step, out_parts, out_rates, out_stage_times, n_times,
           out_stage_sums, n_sums) -> None:
    """Row *i*'s outputs: its step time, parts, step rates and the first *p* stage times and stage
    sums (NaN past p)."""
    out_step[i] = total
    for j in range(len(parts)):
        out_parts[j][i] = parts[j]
    for j in range(_SR_COUNT):
        out_rates[j][i] = step_rates[j]
    for s in range(n_times):
        out_stage_times[i][s] = times[s] if s < p else NAN
    for s in range(n_sums):
        for j in range(_S_COUNT):
            out_stage_sums[i][s][j] = stage[s][j] if s < p else NAN
