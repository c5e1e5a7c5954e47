"""``software=``: the training stack a Python call prices its strategy as -- the stack's strategy fields and
its rates together, as ``--software`` does on the command line.

Every pricing function (``estimate``, ``estimate_many``, ``search``, ``explain``, ``plan_recompute``,
``balance_pipeline``, ``layer_times``, ``compare``) takes ``software=`` and calls :func:`apply_software` (or,
for a batch, :func:`apply_software_many`). A field of the ExecSpec left at ExecSpec's default is one the caller
did not state: the stack's value replaces it (``ndcost.spec.software_fields``); a field stated otherwise
stays. The stack's Rates figures join the ``rates=`` given, where those state none of them otherwise (a
figure both state, *rates*' wins: ``ndcost.spec.stack_rates.with_preset``).

An ExecSpec cannot tell a field set to its default from one left alone, so a default kept against the stack
(``tp_overlap=False`` under a recipe that overlaps) is stated by name:
``ndcost.spec.software_fields.stack_strategy(software, model, {..., "tp_overlap": False})`` -- as the command
line's ``--tp-comm-overlap off`` does.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..spec.exec_spec import ExecSpec
from ..spec.rates import Rates
from ..spec.rates_io import as_rates
from ..spec.software_fields import check_software, stack_columns, stack_strategy
from ..spec.stack_rates import with_preset

__all__ = ["stated_fields", "apply_software", "apply_software_many", "software_rates"]

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ExecSpec)}


def stated_fields(spec: ExecSpec) -> dict[str, Any]:
    """The fields *spec* states: those whose value is not ExecSpec's default."""
    state = spec._plain_fields()
    return {name: value for name, value in state.items() if not _same(value, _DEFAULTS[name])}


def _same(value: Any, default: Any) -> bool:
    return type(value) is type(default) and value == default


def _rows_stating(candidates: Any, name: str, column: np.ndarray) -> np.ndarray:
    """bool (N,): the rows of *candidates* whose field *name* (its decoded *column*) is not ExecSpec's default,
    compared value by value as :func:`stated_fields` compares one spec's -- once per distinct stored value
    (a batch holds few), not once per row."""
    _, first, inverse = np.unique(candidates.storage(name), return_index=True, return_inverse=True)
    distinct = np.asarray(column, dtype=object)[first].tolist()
    default = _DEFAULTS[name]
    return ~np.fromiter((_same(value, default) for value in distinct), bool, len(distinct))[inverse.ravel()]


def software_rates(software: str, cluster: Any, rates: Any, owner: str) -> Rates:
    """*rates* (None: the device's; a Rates, a preset name or a rates file) with *software*'s figures where it
    states none (a figure *rates* states wins, as a stated ExecSpec field does)."""
    base = as_rates(rates, device=cluster, owner=owner)
    against = "the rates given" if rates is not None else "the device's rates"
    return with_preset(base if base is not None else Rates.for_device(cluster), cluster, software, owner=owner,
                       parameter="software", against=against, stated_wins=True)


def apply_software(software: str | None, model: Any, spec: ExecSpec, cluster: Any, rates: Any, *, owner: str,
                   units: str = "seconds") -> tuple[Any, ExecSpec, Any]:
    """(model, spec, rates) as the training stack *software* runs the strategy (unchanged for None); ND's
    units take the stack's strategy fields only (they price no rates)."""
    if software is None:
        return model, spec, rates
    check_software(software, owner)
    model, spec = stack_strategy(software, model, stated_fields(spec))
    if units == "nd":
        return model, spec, rates
    return model, spec, software_rates(software, cluster, rates, owner)


def apply_software_many(software: str | None, model: Any, candidates: Any, cluster: Any, rates: Any, *,
                        owner: str, units: str = "seconds") -> tuple[Any, Any, Any]:
    """(model, candidates, rates) of a batch under *software*: a list of ExecSpec spec by spec (as
    :func:`apply_software`), a Candidates row by row -- a row states the fields it sets apart from ExecSpec's
    defaults, so that it is priced as ``estimate`` prices its spec, whatever its neighbours state."""
    from .candidates import Candidates

    if software is None:
        return model, candidates, rates
    check_software(software, owner)
    if isinstance(candidates, ExecSpec):
        candidates = [candidates]
    if isinstance(candidates, (list, tuple)):
        specs = []
        for spec in candidates:
            model, spec = stack_strategy(software, model, stated_fields(spec)) if isinstance(spec, ExecSpec) \
                else (model, spec)
            specs.append(spec)
        out: Any = specs
    elif isinstance(candidates, Candidates):
        columns = {name: candidates.column(name) for name in candidates.fields}
        # each row states the fields it sets apart from ExecSpec's defaults, as estimate() reads one spec
        stated = {name: _rows_stating(candidates, name, column) for name, column in columns.items()}
        model, columns = stack_columns(software, model, columns, stated=stated)
        out = Candidates.from_arrays(**columns).keeping_reasons(candidates.reason)
    else:
        out = candidates                   # estimate_many refuses it, naming what it takes
    if units == "nd":
        return model, out, rates
    return model, out, software_rates(software, cluster, rates, owner)
