"""A batch's formulas as one kernel call per chunk: the inputs of ``kernels.formula_rows``.

The compiled twins of :mod:`ndcost.tables.formulas` (``cysrc/ndcost/kernels/formula_rows.pxi``, generated
by ``tools/gen_formula_rows.py``) run a chunk's joint rules, derived values and candidate vectors row by
row without the GIL. What they read that no chunk changes -- the storage columns, the model's, cluster's
and overlap's constants, the reason code of each joint rule -- is packed here once per batch, in the order
the generated kernel states (``ndcost.kernels.formula_rows``: ``FORMULA_ROW_FIELDS``, ``FORMULA_ROW_CONSTANTS``,
``FORMULA_ROW_RULES``), so a formula added to ``formulas.py`` reaches the batches with no edit here.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from .. import _backend
from ..kernels.formula_rows import FORMULA_ROW_CONSTANTS, FORMULA_ROW_FIELDS, FORMULA_ROW_OUTPUTS, FORMULA_ROW_RULES

__all__ = ["FormulaRows"]

#: An output not asked for.
_NOT_ASKED = np.empty((0, 0))


class FormulaRows:
    """One batch's inputs of the row kernel that no chunk changes; :meth:`run` prices no candidate, it
    writes a chunk's reasons, table rows and asked-for candidate matrices. Nothing here is written after
    construction: the threads of a batch share one.

    Args:
        storage: Each Candidates field's storage column (``Candidates.storage``).
        codes: Reason code by joint rule name (``ndcost.tables.reasons.REASON_CODES``).
        **values: The formulas' constants objects (``mc``, ``cc``, ``overlap``) and other parameters
            (``allow_cross_node_tp``, ``moe_dispatch_default``), by the formulas' parameter names.
    """

    __slots__ = ("columns", "constants", "codes", "outputs")

    def __init__(self, storage: Mapping[str, np.ndarray], codes: Mapping[str, int], **values: Any) -> None:
        scalars: list[float] = []
        tuples: list[float] = []
        for owner, attribute, kind in FORMULA_ROW_CONSTANTS:
            value = values[attribute] if owner is None else getattr(values[owner], attribute)
            if kind.startswith("t"):
                tuples += [float(len(value)), *(float(item) for item in value)]
            elif value is None:
                if not kind.endswith("?"):
                    raise ValueError(f"{owner}.{attribute} is None, which its formula does not allow")
                scalars.append(math.nan)
            else:
                scalars.append(float(value))
        self.constants = np.array(scalars + tuples, dtype=np.float64)
        self.columns = tuple(storage[field] for field in FORMULA_ROW_FIELDS)
        self.codes = np.array([codes[rule] for rule in FORMULA_ROW_RULES], dtype=np.int64)
        self.outputs = dict(FORMULA_ROW_OUTPUTS)

    def run(self, start: int, stop: int, spec_reason: np.ndarray, layout_index: np.ndarray, layout_bad: np.ndarray,
            layout_row: np.ndarray, out_reason: np.ndarray, out_layout: np.ndarray, **matrices: np.ndarray) -> None:
        """Rows start..stop: their reason codes (the rows' own, else the first joint rule broken, 0: priced),
        their layout's table row (*layout_row*, -1 when not priced) and each candidate matrix given by
        output name (``nd``, ``seconds``, ``memory``: (rows, stop - start), any strides); the others are
        not computed."""
        _backend.kernels.formula_rows(self.columns, start, stop, self.constants, self.codes, spec_reason, layout_index,
                                      layout_bad, layout_row, out_reason, out_layout,
                                      *(matrices.get(name, _NOT_ASKED) for name in self.outputs))
