"""The ExecSpec fields a training-stack preset fixes, as rows: field, value, when it applies, and its source.

A stack fixes some strategy fields outright (torchtitan shards with FSDP2: ZeRO-3) and some only for
certain strategies (NVIDIA's recipes overlap TP communication when tp > 1, in dense models). Each
:class:`PresetField` is one such choice; :func:`preset_values` reads a preset's rows against a
strategy (:class:`StrategyView`: the fields its caller stated, ExecSpec's defaults elsewhere) and gives
the fields the stack sets there -- never one the caller stated. ``ndcost software NAME`` and
docs/STACKS.md print the same rows, so what is priced and what is documented are one table.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

__all__ = ["PresetField", "StrategyView", "preset_values"]


def _exec_defaults() -> dict[str, Any]:
    from .exec_spec import ExecSpec

    return {f.name: f.default for f in dataclasses.fields(ExecSpec)}


class StrategyView:
    """A strategy as a preset's rows read it: each ExecSpec field as stated, else ExecSpec's default;
    :meth:`states` says which the caller stated (*named*: those names, when a batch states more fields than
    the values a preset reads); ``moe`` whether the model routes to experts; ``per_op`` whether the model can be
    priced with torchtitan's per-op recompute (a dense text model with no census of its own:
    ``ndcost.spec.torchtitan_sac``)."""

    __slots__ = ("_stated", "_named", "moe", "per_op")
    _DEFAULTS: dict[str, Any] = {}

    def __init__(self, stated: Mapping[str, Any], moe: bool = False, named: Any = None, per_op: bool = True) -> None:
        self._stated = stated
        self._named = stated if named is None else named
        self.moe = bool(moe)
        self.per_op = bool(per_op)

    def __getattr__(self, name: str) -> Any:
        if not StrategyView._DEFAULTS:
            StrategyView._DEFAULTS.update(_exec_defaults())
        try:
            return self._stated[name] if name in self._stated else StrategyView._DEFAULTS[name]
        except KeyError:
            raise AttributeError(name) from None

    def states(self, name: str) -> bool:
        return name in self._named


@dataclass(frozen=True)
class PresetField:
    """One ExecSpec field a preset fixes.

    Attributes:
        field: The ExecSpec field.
        value: Its value, or a callable of the :class:`StrategyView` giving it (None: not set there).
        when: The strategies it applies to, in words ("" for every strategy); printed.
        source: Where the stack's choice is written (framework file@commit:line, or a document).
        applies: view -> whether the row applies (default: always).
        shown: The value in words where *value* is a callable.
    """

    field: str
    value: Any
    when: str
    source: str
    applies: Callable[[StrategyView], bool] | None = None
    shown: str = ""

    def value_text(self) -> str:
        return self.shown or repr(self.value)


def preset_values(rows: Iterable[PresetField], view: StrategyView) -> dict[str, Any]:
    """The fields *rows* set for *view*'s strategy: the first row of each field that applies, none the
    caller stated."""
    out: dict[str, Any] = {}
    for row in rows:
        if row.field in out or view.states(row.field) or (row.applies is not None and not row.applies(view)):
            continue
        value = row.value(view) if callable(row.value) else row.value
        if value is not None:
            out[row.field] = value
    return out
