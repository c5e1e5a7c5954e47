"""A census of a layer kind: what HyperParallel measured of it, for its selective policy.

HyperParallel's selective recompute policy (docs/ND_MODEL.md §1.4, ``HYPER_SELECTIVE_REC_OP``)
keeps the attention core's input and recomputes every other switch -- and, beyond what
any switch prices, some of the projection matmuls. A census of the kind (its "IR phase 5",
``_layer_census``: the Transformers layer run under FakeTensorMode) measures which: the
share of the attention matmuls and of the FFN matmuls the policy recomputes
(``selective_attention_mm``, ``selective_ffn_mm``), and the activation bytes the layer keeps
plain and under the policy. ND prices a selective layer running the policy with those
shares (seed ``selective_shares``, docs/ND_MODEL.md §2.4) and its memory with those bytes (§3,
"Census path": kept = saved/sp + saved_tp/t).

ndcost does not run the census (it would need PyTorch and the model's code); it reads one,
from a mapping or a JSON file::

    {"source": "HyperParallel census of Qwen3-8B, 2026-10-20",
     "kinds": {"dense": {"selective_attention_mm": 0.5, "selective_ffn_mm": 0.333,
                         "saved": 14336, "saved_tp": 57344,
                         "selective": 4096, "selective_tp": 8192}}}

Bytes are per token of one layer: ``saved``/``selective`` split over the sequence-parallel
ranks, ``*_tp`` over the tensor-parallel ranks. A kind runs the policy where its layers run
selective recompute with exactly the policy's switches (``selective_rule="hyperparallel"``,
keep mask ``HYPER_POLICY_MASK``).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from os import PathLike
from typing import Any, Mapping

from ..errors import SpecError, is_finite_number

__all__ = ["KindCensus", "MAX_BYTES_PER_TOKEN", "kind_census_from", "read_census"]

_OWNER = "KindCensus"
_SHARES = ("selective_attention_mm", "selective_ffn_mm")
_BYTES = ("saved", "saved_tp", "selective", "selective_tp")
#: The most bytes a token may save in one layer (1 TiB): real layers save kilobytes to megabytes a token, and a
#: TiB times a million-token micro-batch and a thousand layers still stays a finite memory figure (no inf).
MAX_BYTES_PER_TOKEN = float(1 << 40)


@dataclass(frozen=True)
class KindCensus:
    """The census of one layer kind (see the module docstring for units)."""

    kind: str
    selective_attention_mm: float
    selective_ffn_mm: float
    saved: float | None = None
    saved_tp: float | None = None
    selective: float | None = None
    selective_tp: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise SpecError("kind", _OWNER, "be a layer kind name", self.kind)
        for name in _SHARES:
            value = getattr(self, name)
            if not is_finite_number(value) or not 0.0 <= value <= 1.0:
                raise SpecError(name, _OWNER, "be a share in [0, 1]", value)
            object.__setattr__(self, name, float(value))
        for name in _BYTES:
            value = getattr(self, name)
            if value is None:
                continue
            if not is_finite_number(value) or not 0 <= value <= MAX_BYTES_PER_TOKEN:
                raise SpecError(name, _OWNER, "be bytes per token, a number in [0, 2**40] (or None)", value)
            object.__setattr__(self, name, float(value))
        for plain, split in (("saved", "saved_tp"), ("selective", "selective_tp")):
            if (getattr(self, plain) is None) != (getattr(self, split) is None):
                raise SpecError(split, _OWNER, f"be stated together with {plain}", getattr(self, split))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def kind_census_from(entry: Any, owner: str = "Model") -> KindCensus:
    """*entry* as a :class:`KindCensus`: one already, or a mapping of its fields (``kind`` among them); anything
    else, or a field KindCensus does not have, a SpecError naming ``census``."""
    if isinstance(entry, KindCensus):
        return entry
    if not isinstance(entry, Mapping):
        raise SpecError("census", owner, "hold KindCensus entries or mappings of their fields", entry)
    unknown, missing = _entry_gaps(entry, ("kind",))
    if unknown:
        raise SpecError("census", owner, f"hold census fields only (kind, {', '.join(_SHARES + _BYTES)})",
                        str(unknown[0]))
    if "kind" not in entry or missing:
        raise SpecError("census", owner, f"state kind, {' and '.join(_SHARES)} in every entry", dict(entry))
    return KindCensus(**entry)


def _entry_gaps(entry: Mapping[Any, Any], extra: tuple[str, ...] = ()) -> tuple[list[Any], list[str]]:
    """A census entry's keys KindCensus does not take (besides *extra*), in order, and the shares it lacks: the
    two checks a Model's list entries and a census file's kinds both make, each with its own message."""
    unknown = sorted((key for key in entry if key not in extra + _SHARES + _BYTES), key=str)
    return unknown, [share for share in _SHARES if share not in entry]


def _census_entries(data: Mapping[str, Any], owner: str) -> tuple[KindCensus, ...]:
    kinds = data.get("kinds")
    if not isinstance(kinds, Mapping) or not kinds:
        raise SpecError("kinds", owner, "be a mapping of layer kind names to their census", kinds)
    out = []
    for name, entry in kinds.items():
        if not isinstance(entry, Mapping):
            raise SpecError(str(name), owner, "be a mapping of census fields", entry)
        unknown, missing = _entry_gaps(entry)
        if unknown:
            raise SpecError(str(unknown[0]), owner, f"be a census field ({', '.join(_SHARES + _BYTES)})",
                            entry[unknown[0]])
        if missing:
            raise SpecError(missing[0], owner, f"be present for kind {name!r}", None)
        out.append(KindCensus(kind=str(name), **entry))
    return tuple(out)


def read_census(source: str | PathLike | Mapping[str, Any]) -> tuple[KindCensus, ...]:
    """The kind censuses of a JSON file (or its parsed mapping), one :class:`KindCensus` a kind."""
    if isinstance(source, Mapping):
        return _census_entries(source, "census <dict>")
    if not isinstance(source, (str, PathLike)):
        raise SpecError("census", "read_census", "be a path to a census JSON or a mapping", source)
    path = os.fspath(source)
    owner = f"census {path}"
    from ..files import read_json

    data = read_json(path, "a census JSON", "census")
    if not isinstance(data, Mapping):
        raise SpecError("census", "read_census", "hold a JSON object", path)
    return _census_entries(data, owner)
