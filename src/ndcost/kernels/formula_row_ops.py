"""What the generated oracle of the batch formulas (``ndcost.kernels.formula_rows``, written by
``tools/gen_formula_rows.py``) is written in: numpy's int64 and
float64 results one value at a time, and the unpacking of a kernel's inputs -- the twins of the helpers
at the top of ``cysrc/ndcost/kernels/formula_rows.pxi``. Nothing here raises for a value: a zero divisor
gives numpy's 0 (or IEEE's infinity or NaN), a float read as an int that has none gives 0.
"""
from __future__ import annotations

import math

__all__ = ["NAN", "floordiv", "mod", "div", "gcd", "item", "take", "check_out", "unpack", "rows_of"]

NAN = math.nan


def floordiv(a: int, b: int) -> int:
    """numpy's int64 floor_divide: 0 for a zero divisor."""
    return 0 if b == 0 else a // b


def mod(a: int, b: int) -> int:
    """numpy's int64 remainder: the divisor's sign, 0 for a zero divisor."""
    return 0 if b == 0 else a % b


def div(a: float, b: float) -> float:
    """float64 division as IEEE 754 (and numpy) gives it: a zero divisor is an infinity or NaN, not an error."""
    if b == 0.0:
        return NAN if (a == 0.0 or a != a) else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def gcd(a: int, b: int) -> int:
    return math.gcd(a, b)


def item(items: tuple, j: int) -> float:
    """A tuple constant's item j, 0 past its end (the compiled twin reads no further)."""
    return items[j] if 0 <= j < len(items) else 0


def take(table: tuple, code: int) -> float:
    """``table[code]``, the code clipped into the table (numpy's ``take(mode="clip")``)."""
    return table[min(max(code, 0), len(table) - 1)]


def float_int(x: float) -> int:
    """A float as an int64, as the compiled twin reads it: a NaN or an out-of-range value is 0."""
    return int(x) if x == x and -9.2e18 < x < 9.2e18 else 0


def check_out(out, count: int, n: int, name: str) -> None:
    """An output matrix is (count, n), or (0, 0): not asked for."""
    shape = tuple(getattr(out, "shape", (len(out), len(out[0]) if len(out) else 0)))
    if not (shape == (count, n) or shape == (0, 0)):
        raise ValueError(f"{name} must be ({count}, {n}) or (0, 0)")


class Constants:
    """A kernel's constants by slot name (as the compiled twin's struct), with ``codes``."""


def unpack(constants, codes, slots: tuple, n_rules: int) -> Constants:
    """The batch's constants by slot name: the scalars in *slots* order, then each tuple as its length
    and its items (``FORMULA_ROW_CONSTANTS``)."""
    values = [float(v) for v in constants]
    scalars = [slot for slot in slots if not slot[2].startswith("t")]
    if len(values) < len(scalars):
        raise ValueError(f"constants must hold {len(scalars)} values and the tuples, got {len(values)}")
    if len(codes) != n_rules:
        raise ValueError(f"codes must hold {n_rules} reason codes, got {len(codes)}")
    k = Constants()
    for j, (owner, attribute, kind) in enumerate(scalars):
        name = attribute if owner is None else f"{owner}_{attribute}"
        value = values[j]
        if kind.endswith("?"):
            setattr(k, name + "_none", value != value)
        setattr(k, name, value if kind[0] == "f" else (float_int(value) if kind[0] == "i" else value != 0.0))
    at = len(scalars)
    for owner, attribute, kind in slots:
        if not kind.startswith("t"):
            continue
        size = float_int(values[at]) if at < len(values) else -1
        if size < 0 or at + 1 + size > len(values):
            raise ValueError(f"constants must hold {owner}_{attribute} as its length then its items")
        items = values[at + 1:at + 1 + size]
        setattr(k, f"{owner}_{attribute}", tuple(float_int(v) for v in items) if kind == "ti" else tuple(items))
        at += 1 + size
    if at != len(values):
        raise ValueError(f"constants must end after the tuples ({at} values), got {len(values)}")
    k.codes = [int(code) for code in codes]
    return k


def rows_of(columns, start: int, stop: int, reads: tuple) -> list:
    """Each column's rows start..stop as Python values of the type the formulas read (``int``,
    ``bool``, ``float``), as the compiled twin converts them."""
    if len(columns) != len(reads):
        raise ValueError(f"columns must hold {len(reads)} storage columns, got {len(columns)}")
    out = []
    for j, (column, read) in enumerate(zip(columns, reads)):
        if getattr(column, "ndim", 1) != 1 or len(column) < stop:
            raise ValueError(f"columns[{j}] must be 1-D with >= {stop} rows")
        dtype = getattr(column, "dtype", None)
        if dtype is not None and not (dtype.kind in "biu" or (dtype.kind == "f" and dtype.itemsize == 8)):
            raise ValueError(f"columns[{j}] must hold integers, bools or float64, got {dtype}")
        values = column[start:stop].tolist()
        if read == "int":
            values = [int(v) if isinstance(v, int) else float_int(v) for v in values]
        elif read == "bool":
            values = [v != 0 for v in values]
        else:
            values = [float(v) for v in values]
        out.append(values)
    return out
