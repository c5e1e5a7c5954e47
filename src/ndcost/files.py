"""Reading and writing the files a user names: every failure a SpecError naming the file and the problem.

A missing file, a directory, bytes that are not UTF-8, malformed YAML or JSON, a document of the
wrong shape, an output into a missing directory -- each is one line on the command line (exit 2),
never a traceback. Every reader and writer of a user's file goes through here.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import SpecError

__all__ = ["MAX_FILE_BYTES", "check_regular_file", "read_text", "read_yaml", "read_json", "parse_json", "read_mapping",
           "output_path", "write_output"]


#: The largest file ndcost reads (64 MiB): a config, a census or a runs file is kilobytes; a path to a device
#: or a log grown without end is refused with its size, not read into memory.
MAX_FILE_BYTES = 64 << 20
#: Why a parsed document is refused: nested past Python's recursion limit, or a number past the digits
#: Python converts (4,300: sys.get_int_max_str_digits) -- neither is a config any tool writes.
_TOO_DEEP = "be nested fewer levels than Python's recursion limit"
_TOO_LONG = "hold numbers of at most 4,300 digits"


def read_text(path: str | os.PathLike, what: str, parameter: str | None = None) -> str:
    """The text of *path* (UTF-8); *what* names the file's role in the message ("a runs file"), *parameter*
    the argument that named it (``--census``; the path itself where none does). A directory, a pipe, a
    device or a file over :data:`MAX_FILE_BYTES` is refused before it is read (:func:`check_regular_file`)."""
    if not isinstance(path, (str, os.PathLike)):
        raise SpecError(parameter or "path", "ndcost", f"be a path to {what}", path)
    name = parameter or str(path)
    file = Path(path)
    if file.is_dir():
        raise SpecError(name, "ndcost", f"be {what}, not a directory", str(path))
    try:
        check_regular_file(file, what, name)
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(name, "ndcost", f"name an existing file ({what})", str(path)) from None
    except UnicodeDecodeError as exc:
        raise SpecError(name, "ndcost", f"be UTF-8 text ({what})", f"byte {exc.start}: {exc.reason}") from None
    except OSError as exc:
        raise SpecError(name, "ndcost", f"be readable ({what})", exc.strerror or type(exc).__name__) from None


def check_regular_file(path: str | os.PathLike, what: str, parameter: str, owner: str = "ndcost") -> os.stat_result:
    """``os.stat(path)`` of a file ndcost may read whole: a regular file (a FIFO would block, /dev/zero never
    end) of at most :data:`MAX_FILE_BYTES`, else a SpecError naming *parameter* of *owner*. A missing or
    unreadable path raises the OSError, for the caller's own message."""
    status = os.stat(path)
    if not stat.S_ISREG(status.st_mode):
        raise SpecError(parameter, owner, f"be a regular file ({what}), not a directory, a pipe or a device",
                        os.fspath(path))
    if status.st_size > MAX_FILE_BYTES:
        raise SpecError(parameter, owner, f"be at most {MAX_FILE_BYTES >> 20} MiB ({what})",
                        f"{status.st_size} bytes")
    return status


def read_yaml(path: str | os.PathLike, what: str, parameter: str | None = None) -> Any:
    """The YAML document of *path*; a syntax error names its line."""
    import yaml

    text = read_text(path, what, parameter)
    name = parameter or str(path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(name, "ndcost", f"be valid YAML ({what})", f"{where}{problem}") from None
    except RecursionError:
        raise SpecError(name, "ndcost", f"{_TOO_DEEP} ({what})", str(path)) from None
    except ValueError as exc:   # an int past sys.get_int_max_str_digits in a YAML scalar
        raise SpecError(name, "ndcost", f"{_TOO_LONG} ({what})", str(exc).split(";")[0]) from None


def read_json(path: str | os.PathLike, what: str, parameter: str | None = None) -> Any:
    """The JSON document of *path*; a syntax error names its line."""
    text = read_text(path, what, parameter)
    return parse_json(text, what, parameter or str(path))


def parse_json(text: str, what: str, parameter: str, owner: str = "ndcost") -> Any:
    """*text* as JSON (a file's or an argument's): malformed, nested past the recursion limit or holding a
    number Python will not convert, a SpecError naming *parameter* of *owner*."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(parameter, owner, f"be valid JSON ({what})",
                        f"line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise SpecError(parameter, owner, f"{_TOO_DEEP} ({what})", f"{len(text)} characters") from None
    except ValueError as exc:   # "Exceeds the limit (4300 digits) for integer string conversion"
        raise SpecError(parameter, owner, f"{_TOO_LONG} ({what})", str(exc).split(";")[0]) from None


def read_mapping(path: str | os.PathLike, what: str, parameter: str | None = None) -> dict:
    """A YAML or JSON file (by suffix; YAML otherwise) that must hold a mapping."""
    json_file = str(path).endswith(".json")
    doc = read_json(path, what, parameter) if json_file else read_yaml(path, what, parameter)
    if not isinstance(doc, dict):
        raise SpecError(parameter or str(path), "ndcost", f"hold a mapping ({what})",
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
