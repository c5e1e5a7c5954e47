"""Caches that live as long as the object they describe (a Model, a Cluster).

``functools.lru_cache`` keyed by a Model hashes and compares its ~40 fields on
every lookup (microseconds); a search asks per candidate. :func:`per_object`
keys by identity instead and forgets the entry when the object dies, so tables
built for a model (its kind tables, its layouts) cost a dict lookup.
"""
from __future__ import annotations

import weakref
from typing import Any

__all__ = ["per_object", "cached"]

_CACHES: dict[int, tuple[Any, dict]] = {}


def _forget(key: int) -> None:
    _CACHES.pop(key, None)


def per_object(obj: Any) -> dict:
    """A dict private to *obj* (by identity), dropped when *obj* is garbage-collected.

    Objects that cannot be weakly referenced get a fresh dict each call (no caching).
    """
    key = id(obj)
    entry = _CACHES.get(key)
    if entry is not None and entry[0]() is obj:
        return entry[1]
    try:
        ref = weakref.ref(obj, lambda _ref, key=key: _forget(key))
    except TypeError:
        return {}
    cache: dict = {}
    _CACHES[key] = (ref, cache)
    return cache


def cached(obj: Any, key: str, build: Any) -> Any:
    """``per_object(obj)[key]``, built by ``build()`` the first time it is asked for."""
    cache = per_object(obj)
    value = cache.get(key)
    if value is None:
        value = cache[key] = build()
    return value
