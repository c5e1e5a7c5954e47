"""The table ``ndcost search`` prints: one row per ranked strategy, every pair of rows told apart.

Beside the degrees every search varies, a column is shown for each ExecSpec field the search varied
or the printed rows differ in (ZeRO stage, schedule, sequence parallelism, precision, overlaps, ...);
the layout column marks a rebalanced pipeline with the number of its offset (listed under the
table), the recompute column numbers distinct per-layer plans; a rank within ndcost's measured error
of #1 is marked tied (``~``). The memory column is the reserved peak (docs/MEMORY.md).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from ..spec.exec_spec import ExecSpec
from .args import offset_text

__all__ = ["table_lines", "strategy_cells"]

#: Always shown: the degrees and the micro-batching (header, how to read it off a spec).
_BASE = (("dp", "dp"), ("tp", "tp"), ("pp", "pp"), ("vpp", "vpp"), ("cp", "cp"), ("ep", "ep"),
         ("mbs", "micro_batch_size"), ("m", "resolved_micro_batch_num"))
#: Shown by their own columns (layout, recompute) or fixed by the search itself.
_HANDLED = {"dp", "tp", "pp", "vpp", "cp", "ep", "micro_batch_size", "micro_batch_num", "global_batch_size",
            "seq_length", "offset", "pp_partition", "recompute", "full_recompute", "selective_recompute",
            "selective_switches"}
#: Short headers of the fields a search may vary.
_HEADERS = {"zero_stage": "zero", "pp_schedule": "schedule", "sequence_parallel": "sp", "seq_split": "seq-split"}
_FIELDS = tuple(f.name for f in dataclasses.fields(ExecSpec))


def _stack_options() -> dict:
    """ExecSpec field -> the stack option that states it on the command line (its name and words)."""
    from ..spec.stack_options import SEARCHABLE

    return {field: option for field, option in SEARCHABLE.items() if option.kind != "list"}


def _cell(name: str, value: Any, options: dict) -> str:
    if name in options:
        from ..spec.stack_options import option_text

        return option_text(options[name], value)
    if isinstance(value, bool):
        return "on" if value else "off"
    return "-" if value is None else str(value)


def _extra_fields(specs: Sequence[ExecSpec], searched: set[str]) -> list[str]:
    """The fields beyond the base columns to show: varied by the search, or differing among the rows."""
    out = []
    for name in _FIELDS:
        if name in _HANDLED:
            continue
        if name in searched or len({repr(getattr(spec, name)) for spec in specs}) > 1:
            out.append(name)
    return out


def _searched(columns: Any, stated: Sequence[str] = ()) -> set[str]:
    """What the search varied: its dimensions that held more than one value in the space, and the fields
    the command gave a list of (*stated*). The fields a --software stack fixes per strategy are columns of
    the space too, but nobody searched them: they show only where the printed rows differ in them."""
    from ..spec.search_space import SEARCH_DIMENSIONS

    out = set(stated)
    for name, column in (columns or {}).items():
        if name in SEARCH_DIMENSIONS and len({repr(value) for value in list(column)[:100000]}) > 1:
            out.add(name)
    return out


def strategy_cells(ranked: Sequence[Any], columns: Any = None,
                   stated: Sequence[str] = ()) -> tuple[list[str], list[list[str]], list[str]]:
    """(headers, one row of cells per ranked strategy, footnotes): what tells the strategies apart;
    *stated*: the ExecSpec fields the command gave a list of (shown even where the rows agree)."""
    specs = [r.spec for r in ranked]
    extra = _extra_fields(specs, _searched(columns, stated))
    # a stack option names its column only where its words cover every row's value (fp8_param_gather's
    # on/off are 1- and 2-byte parameters: a 4-byte one is shown as param_bytes)
    options = {name: option for name, option in _stack_options().items()
               if option.values is None or all(getattr(spec, name) in option.values.values() for spec in specs)}
    layouts: dict[str, int] = {}
    plans: dict[str, int] = {}
    notes: list[str] = []
    rows = []
    for r in ranked:
        s = r.spec
        cells = [str(getattr(s, attribute)) for _, attribute in _BASE]
        cells += [_cell(name, getattr(s, name), options) for name in extra]
        if s.recompute_option == "ranges":
            key = repr(s.recompute)
            if key not in plans:
                plans[key] = len(plans) + 1
            cells.append(f"per-layer {plans[key]}")
        else:
            cells.append(s.recompute_option)
        if s.offset is None and s.pp_partition is None:
            cells.append("even")
        else:
            text = (f"--offset={offset_text(s.offset)}" if s.offset is not None
                    else f"--pp-partition {','.join(map(str, s.pp_partition))}")
            if text not in layouts:
                layouts[text] = len(layouts) + 1
                kind = "rebalanced" if getattr(r, "rebalanced", False) else "stated"
                notes.append(f"layout {kind} {layouts[text]}: {text}")
            cells.append(f"{'rebalanced' if getattr(r, 'rebalanced', False) else 'offset'} {layouts[text]}")
        rows.append(cells)
    if len(plans) == 1:    # one plan: no number needed
        rows = [[cell.replace("per-layer 1", "per-layer") for cell in row] for row in rows]
    # a stack option by its flag's name (as --precision, --tp-comm-overlap state it), else a short header
    headers = ([h for h, _ in _BASE] + [options[name].name if name in options else _HEADERS.get(name, name)
                                         for name in extra] + ["recompute", "layout"])
    return headers, rows, notes


def table_lines(result: Any, error: Any = None, stated: Sequence[str] = ()) -> list[str]:
    """The ranked strategies as text: rank (``~``: tied with #1), what tells them apart, step time, MFU,
    tokens/s, reserved peak and the largest parts; then the layouts and the tie rule."""
    ranked = result.results
    headers, rows, notes = strategy_cells(ranked, getattr(result, "columns", None), stated)
    best = ranked[0].estimate.step_time
    marks = []
    for r in ranked:
        gap = (r.estimate.step_time - best) / best if best > 0 else float("nan")
        marks.append("~" if error is not None and r is not ranked[0] and abs(gap) <= error.mae else " ")
    seen: dict[tuple, int] = {}
    for i, row in enumerate(rows):
        key = tuple(row)
        if key in seen:    # the same strategy twice (a plan or balance found nothing new): say so
            row[-1] += f" (= #{seen[key] + 1})"
        seen.setdefault(key, i)
    widths = [max(len(h), *(len(row[j]) for row in rows)) for j, h in enumerate(headers)]
    head = (f"{'#':>4} " + " ".join(h.rjust(w) for h, w in zip(headers, widths))
            + f" {'step':>15} {'MFU':>6} {'tokens/s':>12} {'reserved peak GiB':>17}  top parts")
    lines = [head, "-" * len(head)]
    for rank, (r, row, mark) in enumerate(zip(ranked, rows, marks), 1):
        e = r.estimate
        step = f"{e.step_time * 1e3:12.1f} ms" if result.units == "seconds" else f"{e.step_time:15.4e}"
        mfu = f"{100 * e.mfu:5.1f}%" if e.mfu is not None else "     -"
        tps = f"{e.tokens_per_second:12,.0f}" if e.tokens_per_second is not None else f"{'-':>12}"
        parts = sorted(e.parts.items(), key=lambda kv: -kv[1])[:3]
        share = ", ".join(f"{name} {100 * value / e.step_time:.0f}%" for name, value in parts if value > 0)
        lines.append(f"{rank:>3}{mark} " + " ".join(c.rjust(w) for c, w in zip(row, widths))
                     + f" {step} {mfu} {tps} {e.memory.peak_reserved / 2**30:17.1f}  {share}")
    lines += notes
    if error is not None and any(mark == "~" for mark in marks):
        lines.append(f"~ tied with #1: the gap is inside ndcost's measured error, {error.describe()} "
                     f"(`ndcost compare --search ... --ranks 1,N` says why)")
    return lines
