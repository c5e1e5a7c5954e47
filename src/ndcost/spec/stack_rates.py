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

__all__ = ["stack_rates", "stated_figures"]


def stated_figures(rates: Rates, device: Any) -> dict[str, Any]:
    """The figures of a rates file that it states: those whose source is not the device default's."""
    default = Rates.for_device(device)
    return {name: getattr(rates, name) for name, source in rates.sources.items()
            if hasattr(default, name) and source != default.sources.get(name)}


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
        preset, cited = SOFTWARE_PRESETS[software]
        for name, value in preset.items():
            if name in states and states[name] != value:
                raise SpecError("--software", owner, f"agree with the --rates file, which states {name} "
                                f"{states[name]!r} where {software} sets {value!r}", software)
            changes[name] = value
            sources[name] = cited[name]
    for name, value in figures.items():
        if name in states and states[name] != value:
            flag = flags.get(name, name)
            raise SpecError(flag, owner, f"agree with the --rates file, which states {name} {states[name]!r}", value)
        changes[name] = value
        sources[name] = f"{flags.get(name, name)} as stated"
    return base.replace(sources=sources, **changes)
