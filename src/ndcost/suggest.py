"""The nearest valid name for a mistyped one, for error messages (``h100sxm`` -> ``h100-sxm``,
``deepseekv3`` -> ``deepseek-v3``, ``llama3_70b`` -> ``llama3-70b``)."""
from __future__ import annotations

import difflib
import re
from typing import Any, Iterable

__all__ = ["closest_name", "did_you_mean"]


def _norm(text: str) -> str:
    # case and the separators people swap (-, _, ., spaces) carry no meaning in a catalog name
    return re.sub(r"[-_. ]", "", text.lower())


def closest_name(value: Any, names: Iterable[str]) -> str | None:
    """The name *value* most likely meant: equal once case and separators are dropped, else
    difflib's closest (ratio >= 0.75); None when nothing is close or *value* is not a string."""
    if not isinstance(value, str):
        return None
    names = list(names)
    by_norm = {_norm(name): name for name in names}
    key = _norm(value)
    if key in by_norm:
        return by_norm[key]
    close = difflib.get_close_matches(key, list(by_norm), n=1, cutoff=0.75)
    return by_norm[close[0]] if close else None


def did_you_mean(value: Any, names: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest name, or ``""``: a suffix for a SpecError's rule."""
    name = closest_name(value, names)
    return f"; did you mean {name!r}?" if name is not None and name != value else ""
