"""The built-in model catalog: ``src/ndcost/data/models/<name>.json``.

Each file holds the model's published Transformers config.json fields
verbatim (``config``), where they come from (``source``) and the authors'
parameter counts (``published``); the facts are those of
``catalog_facts/models.yaml``. A catalog model is built with
:meth:`Model.from_hf_config`, exactly as a user's config.json would be.
"""
from __future__ import annotations

import copy
import dataclasses
import json
from functools import lru_cache
from importlib import resources
from typing import Any

from ..errors import SpecError
from .model import Model, register_catalog_loader

__all__ = ["models", "load_model", "catalog_entry", "catalog_name", "catalog_model_of", "model_aliases"]

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


#: Spellings of a catalog model that its own file does not carry: the Hugging Face repositories' earlier
#: names (each catalog file's config_source cites the config as "meta-llama/Meta-Llama-3.1-70B"), and
#: repositories that publish the same config.json (architecture) under another name.
EXTRA_ALIASES = {
    "meta-llama/Meta-Llama-3.1-8B": "llama3-8b",
    "meta-llama/Meta-Llama-3.1-70B": "llama3-70b",
    "meta-llama/Meta-Llama-3.1-405B": "llama3.1-405b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama3-8b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama3-70b",
    "meta-llama/Llama-3.1-405B-Instruct": "llama3.1-405b",
    "deepseek-ai/DeepSeek-V3-Base": "deepseek-v3",
}


def _key(text: str) -> str:
    """A spelling without case, organisation and separators: "Qwen/Qwen3-235B-A22B" -> "qwen3235ba22b"."""
    return "".join(ch for ch in text.lower().rsplit("/", 1)[-1] if ch.isalnum())


@lru_cache(maxsize=1)
def model_aliases() -> dict[str, str]:
    """Every spelling that names a catalog model -> its name: the name, the model's published name and its
    Hugging Face repository (``source.name``, ``source.hf_repo`` of its file), :data:`EXTRA_ALIASES`, each
    also without case and separators (``llama3.1-70b``, ``Llama-3.1-70B``, ``llama_3_1_70b``). A spelling
    two models share is left out (ambiguous)."""
    spellings: dict[str, set[str]] = {}
    for name in _names():
        source = _read_entry(name).get("source") or {}
        for text in (name, source.get("name"), source.get("hf_repo")):
            if isinstance(text, str) and text:
                spellings.setdefault(text.lower(), set()).add(name)
                spellings.setdefault(_key(text), set()).add(name)
    for text, name in EXTRA_ALIASES.items():
        spellings.setdefault(text.lower(), set()).add(name)
        spellings.setdefault(_key(text), set()).add(name)
    return {text: next(iter(names)) for text, names in spellings.items() if len(names) == 1}


def catalog_name(text: Any) -> str | None:
    """The catalog model *text* names (a name or an alias: :func:`model_aliases`), or None."""
    if not isinstance(text, str):
        return None
    if text in _names():
        return text
    aliases = model_aliases()
    return aliases.get(text.strip().lower()) or aliases.get(_key(text))


#: Fields that do not tell two models apart: the name, and the vocabulary Megatron-LM pads to a multiple of
#: 128 x TP (``--make-vocab-size-divisible-by``; GPT-3's 50257 tokens run as 51200), which leaves the model trained the
#: same.
_NOT_IDENTITY = frozenset({"name", "vocab_size"})


def catalog_model_of(model: Model) -> str | None:
    """The catalog model *model* is: its own name where that is one, else the catalog model whose every field but
    the name and the vocabulary size equals *model*'s (a run that describes GPT-3 175B itself, its vocabulary
    padded), else None."""
    if model.name in _names():
        return model.name
    fields = [f.name for f in dataclasses.fields(model) if f.name not in _NOT_IDENTITY]
    for name in _names():
        known = _load(name)
        if all(getattr(known, f) == getattr(model, f) for f in fields):
            return name
    return None


def catalog_entry(name: str) -> dict[str, Any]:
    """The catalog file of ``name`` as a dict (a copy: ``source``, ``config``, ``published``)."""
    if not isinstance(name, str):
        raise SpecError("name", _OWNER, f"be one of {', '.join(map(repr, _names()))}", name)
    return copy.deepcopy(_read_entry(name))


def load_model(name: str) -> Model:
    """The catalog model ``name`` or an alias of it (models are frozen, so one instance is shared)."""
    if not isinstance(name, str):
        raise SpecError("name", _OWNER, f"be one of {', '.join(map(repr, _names()))}", name)
    return _load(catalog_name(name) or name)


@lru_cache(maxsize=None)
def _load(name: str) -> Model:
    entry = _read_entry(name)
    return Model.from_hf_config(entry["config"], name=name)


register_catalog_loader(load_model)
