"""The strategies a search prices: every combination of the dimensions, as columns.

ND's loop nest (docs/ND_MODEL.md §4.1) and more: tp, pp, cp, then dp as what is
left of the devices; ep, micro-batch size, vpp, zero stage, sequence
parallelism, schedule and recompute mode. A dimension is fixed (an int or a
string), given as a list, or searched over its default domain below. Any
ExecSpec field a stack option sets (``ndcost.spec.stack_options``: TP comm
overlap, precision, the MoE dispatcher, ...) is a dimension too when given,
taking its values only on the rows where it means something (TP overlap at
tp > 1) and its default on the others. The space is the cartesian product; each candidate then either prices, is invalid
(a rule it breaks, counted by reason), or does not fit. Nothing is dropped
silently: ``space_size`` counts every combination that fills the devices.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from collections import Counter

from ..errors import SpecError, check_bool, check_choice, check_positive_int
from ..limits import MAX_BATCH, MAX_DEVICES, MAX_SEQ_LENGTH

__all__ = ["SEARCH_DIMENSIONS", "SearchSpace", "build_space", "divisors", "stack_dimensions"]

#: The dimensions a search enumerates, in the order ties are broken (smaller first).
SEARCH_DIMENSIONS = ("tp", "pp", "cp", "ep", "micro_batch_size", "vpp", "zero_stage", "sequence_parallel",
                     "pp_schedule", "recompute")


def divisors(n: int) -> list[int]:
    """The divisors of *n*, ascending (pairs up to sqrt(n): a 2**24-device cluster takes 4096 steps)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def _powers_of_two(limit: int) -> list[int]:
    out, value = [], 1
    while value <= limit:
        out.append(value)
        value *= 2
    return out


@dataclass(frozen=True)
class SearchSpace:
    """Columns of every combination (ExecSpec field names), and the size of the space."""

    columns: Mapping[str, np.ndarray]
    size: int
    #: Given values that fill no combination, with why: "tp 3 does not divide the 8 devices" -> 1.
    excluded: Mapping[str, int] = None  # type: ignore[assignment]


def _checked(name: str, values: list) -> list:
    """The values a search is given for *name*, each checked by ExecSpec's rule for the field."""
    from .exec_spec import PP_SCHEDULES, ZERO_STAGES
    from .recompute_spec import RECOMPUTE_OPTIONS

    for value in values:
        if name == "pp_schedule":
            check_choice(value, name, "search", PP_SCHEDULES)
        elif name == "recompute":
            check_choice(value, name, "search", RECOMPUTE_OPTIONS)
        elif name == "zero_stage":
            check_choice(value, name, "search", ZERO_STAGES)
        elif name == "sequence_parallel":
            check_bool(value, name, "search")
        else:
            check_positive_int(value, name, "search", maximum=MAX_BATCH if name == "micro_batch_size" else MAX_DEVICES)
    return values


def _choices(name: str, given: Any, default: Iterable) -> list:
    if given is None:
        return list(default)
    if isinstance(given, (list, tuple)):
        if not given:
            raise SpecError(name, "search", "be a value, a non-empty list, or None (searched)", given)
        return _checked(name, list(given))
    return _checked(name, [given])


#: Each column's dtype: the two choice dimensions hold their names (objects), sequence parallelism bools.
_DTYPES = {"pp_schedule": object, "recompute": object, "sequence_parallel": bool}


def _product_columns(blocks: list[tuple[dict[str, Any], dict[str, list]]], dims: tuple[str, ...]) -> dict:
    """The columns of every block's cartesian product of *dims* (the first dimension slowest, as
    ``itertools.product`` orders it), each block's fixed values repeated over its rows; built with numpy
    (repeat and tile per block), not a Python loop per row."""
    parts: dict[str, list[np.ndarray]] = {name: [] for name in SEARCH_DIMENSIONS + ("dp",)}
    for fixed, per_dim in blocks:
        sizes = [len(per_dim[name]) for name in dims]
        rows = math.prod(sizes)
        for name, value in fixed.items():
            parts[name].append(np.full(rows, value, dtype=np.int64))
        inner = rows
        for name, size in zip(dims, sizes):
            inner //= size
            values = np.empty(size, dtype=_DTYPES.get(name, np.int64))
            values[:] = per_dim[name]
            parts[name].append(np.tile(np.repeat(values, inner), rows // (size * inner)))
    return {name: (np.concatenate(arrays) if arrays else np.zeros(0, dtype=_DTYPES.get(name, np.int64)))
            for name, arrays in parts.items()}


def build_space(model: Any, num_devices: int, devices_per_node: int, *, global_batch_size: int, seq_length: int,
                dims: Mapping[str, Any] | None = None, allow_cross_node_tp: bool = False) -> SearchSpace:
    """Every combination of the search dimensions that fills *num_devices*.

    Default domains (a dimension absent from *dims* or None is searched):
    tp: powers of two up to a node (up to the devices, with allow_cross_node_tp);
    pp: divisors of devices/tp up to the layer count; cp: 1 below 16k tokens, else
    powers of two up to 8; dp: the rest; ep (MoE): powers of two up to the experts
    and the ranks dp·tp·cp, 1 for a dense model; micro_batch_size: 1, 2, 4;
    vpp: 1, 2, 4 (1 when pp == 1); zero_stage: 1 (Megatron's distributed optimizer);
    sequence_parallel: on when tp > 1; pp_schedule: 1f1b (interleaved when vpp > 1);
    recompute: none, selective, full.
    """
    # The sizes every row states, bounded as ExecSpec bounds them (an int64 column holds them).
    check_positive_int(global_batch_size, "global_batch_size", "search", maximum=MAX_BATCH)
    check_positive_int(seq_length, "seq_length", "search", maximum=MAX_SEQ_LENGTH)
    dims = dict(dims or {})
    from .stack_options import SEARCHABLE

    unknown = set(dims) - set(SEARCH_DIMENSIONS) - {"dp"} - set(SEARCHABLE)
    if unknown:
        names = SEARCH_DIMENSIONS + ("dp",) + tuple(SEARCHABLE)
        raise SpecError(sorted(unknown)[0], "search", f"be one of {', '.join(names)}", dims[sorted(unknown)[0]])
    stack = {name: _stack_values(name, dims.pop(name)) for name in list(dims) if name in SEARCHABLE
             and dims[name] is not None}
    layers = model.num_hidden_layers + model.num_nextn_predict_layers
    tp_limit = num_devices if allow_cross_node_tp else min(devices_per_node, num_devices)
    tps = _choices("tp", dims.get("tp"), [t for t in _powers_of_two(tp_limit) if num_devices % t == 0])
    excluded: Counter = Counter()
    for name in ("micro_batch_size", "vpp", "zero_stage", "sequence_parallel", "pp_schedule", "recompute", "ep", "dp"):
        if dims.get(name) is not None:
            _choices(name, dims[name], [])          # every given value checked, even where no tp reaches it
    cps_default = [1] if seq_length < 16384 else _powers_of_two(8)
    blocks: list[tuple[dict[str, Any], dict[str, list]]] = []        # (one value per dimension, the rest's lists)
    other_dims = ("micro_batch_size", "vpp", "zero_stage", "sequence_parallel", "pp_schedule", "recompute")
    for tp in tps:
        if num_devices % tp:
            excluded[f"tp {tp} does not divide the {num_devices} devices"] += 1
            continue
        pps = _choices("pp", dims.get("pp"), [p for p in divisors(num_devices // tp) if p <= layers])
        for pp in pps:
            if (num_devices // tp) % pp:
                excluded[f"pp {pp} does not divide the {num_devices // tp} devices left by tp {tp}"] += 1
                continue
            for cp in _choices("cp", dims.get("cp"), cps_default):
                if (num_devices // tp // pp) % cp:
                    excluded[f"cp {cp} does not divide the {num_devices // tp // pp} devices left by tp {tp} "
                             f"and pp {pp}"] += 1
                    continue
                dp = num_devices // (tp * pp * cp)
                if dims.get("dp") is not None and dp not in _choices("dp", dims["dp"], []):
                    excluded[f"dp would be {dp} at tp {tp}, pp {pp}, cp {cp}, not one given"] += 1
                    continue
                eps = [1]
                if model.is_moe:
                    eps = [e for e in _powers_of_two(min(model.num_experts, dp * tp * cp))]
                eps = _choices("ep", dims.get("ep"), eps)
                vpps = [1] if pp == 1 else [1, 2, 4]
                per_dim = {
                    "ep": eps,
                    "micro_batch_size": _choices("micro_batch_size", dims.get("micro_batch_size"), [1, 2, 4]),
                    "vpp": _choices("vpp", dims.get("vpp"), vpps),
                    "zero_stage": _choices("zero_stage", dims.get("zero_stage"), [1]),
                    "sequence_parallel": _choices("sequence_parallel", dims.get("sequence_parallel"), [tp > 1]),
                    "pp_schedule": _choices("pp_schedule", dims.get("pp_schedule"), ["1f1b"]),
                    "recompute": _choices("recompute", dims.get("recompute"), ["none", "selective", "full"]),
                }
                blocks.append(({"tp": tp, "pp": pp, "cp": cp, "dp": dp}, per_dim))
    columns = _product_columns(blocks, ("ep",) + other_dims)
    size = len(columns["tp"])
    columns["global_batch_size"] = np.full(size, global_batch_size, dtype=np.int64)
    columns["seq_length"] = np.full(size, seq_length, dtype=np.int64)
    columns = _with_stack_dimensions(columns, stack, model)
    return SearchSpace(columns=columns, size=len(columns["tp"]), excluded=dict(excluded))


def stack_dimensions(columns: Mapping[str, np.ndarray]) -> tuple[str, ...]:
    """The stack fields a space's columns hold (in the table's order): the dimensions beyond SEARCH_DIMENSIONS."""
    from .stack_options import SEARCHABLE

    return tuple(name for name in SEARCHABLE if name in columns and name not in SEARCH_DIMENSIONS)


def _stack_values(name: str, given: Any) -> list:
    """A stack dimension's values, each checked by ExecSpec's rule for the field."""
    from .exec_spec import ExecSpec
    from .stack_options import SEARCHABLE

    values = list(given) if isinstance(given, (list, tuple)) else [given]
    if not values:
        raise SpecError(name, "search", "be a value, a non-empty list, or None (not searched)", given)
    context = SEARCHABLE[name].context
    for value in values:
        # the field's own rules, in a valid spec where the value means something (its option's context)
        problems = ExecSpec.problems(**{"micro_batch_num": 1, **(context(value) if context else {}), name: value})
        if problems:
            raise SpecError(name, "search", problems[0].rule, value)
    return values


def _with_stack_dimensions(columns: dict, stack: Mapping[str, list], model: Any) -> dict:
    """*columns* times each stack dimension's values: every row once with the first value (the field's default
    where the option means nothing for the row), and again with each further value where it means something."""
    from .stack_options import SEARCHABLE, SPEC_DEFAULTS, option_applies

    defaults = dict(SPEC_DEFAULTS)
    for name in [name for name in SEARCHABLE if name in stack]:    # the table's order: grouped_gemm before capacity
        values, option = stack[name], SEARCHABLE[name]
        size = len(columns["tp"])
        view = {**defaults, **columns}
        applies = np.broadcast_to(np.asarray(option_applies(option, view, model), dtype=bool), (size,))
        if size and not applies.any():
            raise SpecError(name, "search", f"be given only where it applies ({option.needs}); no candidate has it",
                            values if len(values) > 1 else values[0])
        parts = []
        for index, value in enumerate(values):
            rows = np.arange(size) if index == 0 else np.flatnonzero(applies)
            part = {key: col[rows] for key, col in columns.items()}
            column = np.empty(len(rows), dtype=object)
            column[:] = [value] * len(rows)
            if index == 0:
                column[~applies] = defaults[name]
            part[name] = column
            parts.append(part)
        columns = {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}
        columns[name] = _typed(columns[name])
    return columns


def _typed(column: np.ndarray) -> np.ndarray:
    """An object column of bools or numbers as its numpy dtype (strings stay objects, as the space's others)."""
    first = column[0] if len(column) else None
    if isinstance(first, bool):
        return column.astype(bool)
    if isinstance(first, int):
        return column.astype(np.int64)
    if isinstance(first, float):
        return column.astype(np.float64)
    return column
