"""The Rates a command prices with: the device's, a training stack's, a rates file's and the stated figures.

Each source fills what it states: the device's datasheet shares (``Rates.for_device``), then the
``--software`` stack's figures (``Rates.for_software``), then the stack options stated one by one
(``--fp8-recipe current``: :mod:`ndcost.spec.stack_options`). A ``--rates`` file (``ndcost calibrate --fit
rates``) holds every figure; those whose source is not the device's default are what it *states* (a
fitted efficiency, a preset it was saved from). Where a file states a figure that the stack or an
option states otherwise, the two contradict each other: refused, naming both, never one silently
winning.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from ..errors import SpecError
from .rates import SOFTWARE_PRESETS, Rates

__all__ = ["stack_rates", "stated_figures", "with_preset"]


def stated_figures(rates: Rates, device: Any) -> dict[str, Any]:
    """The figures of a rates file that it states: those whose source is not the device default's."""
    default = Rates.for_device(device)
    return {name: getattr(rates, name) for name, source in rates.sources.items()
            if hasattr(default, name) and source != default.sources.get(name)}


def with_preset(base: Rates, device: Any, software: str, *, owner: str, parameter: str = "software",
                against: str = "the rates given", states: Mapping[str, Any] | None = None,
                stated_wins: bool = False) -> Rates:
    """*base* with the training stack *software*'s figures (each with its source) in every figure *base* does not
    state (*states*: what it states, default :func:`stated_figures`).

    A figure *base* states otherwise than the stack is refused, naming both (a rates file beside ``--software``:
    two files of figures that disagree), or with *stated_wins* kept (Python's ``rates=`` beside ``software=``, and
    a CLI flag beside its preset: what the caller states overrides the stack's default, as a stated ExecSpec
    field does).
    """
    states = stated_figures(base, device) if states is None else states
    preset, cited = SOFTWARE_PRESETS[software]
    changes = {}
    for name, value in preset.items():
        if name in states and states[name] != value:
            if stated_wins:
                continue
            raise SpecError(parameter, owner, f"agree with {against}, which states {name} "
                            f"{states[name]!r} where {software} sets {value!r}", software)
        changes[name] = value
    return base.replace(sources={**base.sources, **{name: cited[name] for name in changes}}, **changes)


def stack_rates(device: Any, *, software: str | None = None, rates_file: str | os.PathLike | None = None,
                figures: Mapping[str, Any] | None = None, flags: Mapping[str, str] | None = None,
                owner: str = "ndcost") -> Rates | None:
    """The Rates of *device* under *software*, a rates file and the stated *figures* (figure -> value,
    *flags* naming the flag that stated each); None when nothing is stated (the device's defaults).

    Raises:
        SpecError: A rates file that states a figure otherwise than *software* or a stated figure does.
    """
    from .rates_io import load_rates

    figures = dict(figures or {})
    flags = dict(flags or {})
    if software is None and rates_file is None and not figures:
        return None
    if software is not None and software not in SOFTWARE_PRESETS:
        from ..suggest import did_you_mean

        rule = f"be one of {', '.join(SOFTWARE_PRESETS)}{did_you_mean(software, SOFTWARE_PRESETS)}"
        raise SpecError("--software", owner, rule, software)
    base = Rates.for_device(device) if rates_file is None else load_rates(rates_file, device=device)
    sources = dict(base.sources)
    changes: dict[str, Any] = {}
    states = stated_figures(base, device) if rates_file is not None else {}
    if software is not None:
        base = with_preset(base, device, software, owner=owner, parameter="--software",
                           against="the --rates file", states=states)
        sources = dict(base.sources)
    for name, value in figures.items():
        if name in states and states[name] != value:
            flag = flags.get(name, name)
            raise SpecError(flag, owner, f"agree with the --rates file, which states {name} {states[name]!r}", value)
        changes[name] = value
        sources[name] = f"{flags.get(name, name)} as stated"
    return base.replace(sources=sources, **changes)
