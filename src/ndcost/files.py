"""Reading and writing the files a user names: every failure a SpecError naming the file and the problem.

A missing file, a directory, bytes that are not UTF-8, malformed YAML or JSON, a document of the
wrong shape, an output into a missing directory -- each is one line on the command line (exit 2),
never a traceback. Every reader and writer of a user's file goes through here.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .errors import SpecError

__all__ = ["read_text", "read_yaml", "read_json", "read_mapping", "output_path", "write_output"]


def read_text(path: str | os.PathLike, what: str) -> str:
    """The text of *path* (UTF-8); *what* names the file's role in the message ("a runs file")."""
    if not isinstance(path, (str, os.PathLike)):
        raise SpecError("path", "ndcost", f"be a path to {what}", path)
    file = Path(path)
    if file.is_dir():
        raise SpecError(str(path), "ndcost", f"be {what}, not a directory", str(path))
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(path), "ndcost", f"name an existing file ({what})", str(path)) from None
    except UnicodeDecodeError as exc:
        raise SpecError(str(path), "ndcost", f"be UTF-8 text ({what})", f"byte {exc.start}: {exc.reason}") from None
    except OSError as exc:
        raise SpecError(str(path), "ndcost", f"be readable ({what})", exc.strerror or type(exc).__name__) from None


def read_yaml(path: str | os.PathLike, what: str) -> Any:
    """The YAML document of *path*; a syntax error names its line."""
    import yaml

    text = read_text(path, what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(str(path), "ndcost", f"be valid YAML ({what})", f"{where}{problem}") from None


def read_json(path: str | os.PathLike, what: str) -> Any:
    """The JSON document of *path*; a syntax error names its line."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(str(path), "ndcost", f"be valid JSON ({what})",
                        f"line {exc.lineno}, column {exc.colno}: {exc.msg}") from None


def read_mapping(path: str | os.PathLike, what: str) -> dict:
    """A YAML or JSON file (by suffix; YAML otherwise) that must hold a mapping."""
    doc = read_json(path, what) if str(path).endswith(".json") else read_yaml(path, what)
    if not isinstance(doc, dict):
        raise SpecError(str(path), "ndcost", f"hold a mapping ({what})",
                        "an empty file" if doc is None else type(doc).__name__)
    return doc


def output_path(path: str | os.PathLike, what: str) -> Path:
    """*path* checked for writing: not a directory, its directory existing and writable."""
    file = Path(path)
    if file.is_dir():
        raise SpecError(str(path), "ndcost", f"name a file to write ({what}), not a directory", str(path))
    parent = file.parent if str(file.parent) else Path(".")
    if not parent.is_dir():
        raise SpecError(str(path), "ndcost", f"be in an existing directory ({what})", str(parent))
    if not os.access(parent, os.W_OK):
        raise SpecError(str(path), "ndcost", f"be in a writable directory ({what})", str(parent))
    return file


def write_output(path: str | os.PathLike, what: str, text: str) -> Path:
    """Write *text* to *path* (checked by :func:`output_path`): through a temporary file renamed over
    it, so a reader never sees half a file -- or, where *path* exists and is not a regular file (a
    device, a pipe, ``/dev/stdout``), into it directly, never replacing it. Every failure (no space,
    no permission, a read-only file system) is one SpecError naming the path."""
    import tempfile

    target = output_path(path, what)
    try:
        if target.exists() and not target.is_file():
            with open(target, "w", encoding="utf-8") as stream:
                stream.write(text)
            return target
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                             dir=target.parent if str(target.parent) else ".")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(text)
            os.replace(temporary, target)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise
    except OSError as exc:
        raise SpecError(str(path), "ndcost", f"be writable ({what}): {exc.strerror or exc}", str(path)) from None
    return target
