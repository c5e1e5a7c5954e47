"""The built-in model catalog: ``src/ndcost/data/models/<name>.json``.

Each file holds the model's published Transformers config.json fields
verbatim (``config``), where they come from (``source``) and the authors'
parameter counts (``published``); the facts are those of
``catalog_facts/models.yaml``. A catalog model is built with
:meth:`Model.from_hf_config`, exactly as a user's config.json would be.
"""
from __future__ import annotations

import copy
import json
from functools import lru_cache
from importlib import resources
from typing import Any

from ..errors import SpecError
from .model import Model, register_catalog_loader

__all__ = ["models", "load_model", "catalog_entry"]

_OWNER = "the model catalog"


def _models_dir():
    return resources.files("ndcost").joinpath("data", "models")


@lru_cache(maxsize=1)
def _names() -> tuple[str, ...]:
    suffix = ".json"
    return tuple(sorted(e.name[: -len(suffix)] for e in _models_dir().iterdir() if e.name.endswith(suffix)))


def models() -> list[str]:
    """Names of the catalog models, sorted."""
    return list(_names())


@lru_cache(maxsize=None)
def _read_entry(name: str) -> dict[str, Any]:
    known = _names()
    if name not in known:
        from ..suggest import did_you_mean

        raise SpecError("name", _OWNER, f"be one of {', '.join(map(repr, known))}{did_you_mean(name, known)}", name)
    text = _models_dir().joinpath(f"{name}.json").read_text(encoding="utf-8")
    return json.loads(text)


def catalog_entry(name: str) -> dict[str, Any]:
    """The catalog file of ``name`` as a dict (a copy: ``source``, ``config``, ``published``)."""
    if not isinstance(name, str):
        raise SpecError("name", _OWNER, f"be one of {', '.join(map(repr, _names()))}", name)
    return copy.deepcopy(_read_entry(name))


def load_model(name: str) -> Model:
    """The catalog model ``name`` (models are frozen, so one instance is shared)."""
    if not isinstance(name, str):
        raise SpecError("name", _OWNER, f"be one of {', '.join(map(repr, _names()))}", name)
    return _load(name)


@lru_cache(maxsize=None)
def _load(name: str) -> Model:
    entry = _read_entry(name)
    return Model.from_hf_config(entry["config"], name=name)


register_catalog_loader(load_model)
