"""What ``estimate_many`` returns: one numpy column per output, one row per candidate."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..kernels.columns import PART_NAMES
from ..tables.reasons import FIRST_INVALID, REASON_TABLE, explain_reason

__all__ = ["BatchEstimate"]


@dataclass(frozen=True, eq=False)
class BatchEstimate:
    """N candidates, priced. Every array is read-only and has one row per candidate.

    Attributes:
        units: ``"nd"`` (ND's score) or ``"nd_ms"`` (with a ratios file); ``"seconds"``
            once seconds batches exist.
        step_time: float64 (N,): one training step; NaN for an invalid candidate.
        parts: PART_NAMES -> float64 (N,): the step taken apart (they sum to step_time).
        peak_memory: float64 (N,): bytes of the fullest pipeline stage's total, ND's reserve in
            (``MemoryEstimate.peak`` row by row; docs/MEMORY.md); NaN: not priced, or ``with_memory=False``.
        fits: bool (N,): device_memory <= the device's HBM (True for every priced row
            when memory was not asked for; False for an invalid row).
        reason: int64 (N,): 0 priced and fits; ``ndcost.REASONS[code]`` says it in words.
        mfu, tokens_per_second: float64 (N,): NaN where not defined (ND units).
        stage_times: float64 (N, max pp) each stage's time per micro-batch, NaN past
            the candidate's pp; None unless asked for.
        stage_memory: float64 (N, max pp, 8) each stage's memory (memory.MEMORY_PARTS,
            then the total), NaN past the candidate's pp; None unless asked for.
    """

    units: str
    step_time: np.ndarray
    parts: Mapping[str, np.ndarray]
    peak_memory: np.ndarray
    fits: np.ndarray
    reason: np.ndarray
    mfu: np.ndarray
    tokens_per_second: np.ndarray
    stage_times: Any = None
    stage_memory: Any = None
    #: float64 (N,): what the device holds at the peak -- in seconds units the allocator's reserve and
    #: the process's fixed costs with the tensors (MemoryEstimate.device_peak); else peak_memory.
    device_memory: Any = None

    def __len__(self) -> int:
        return int(self.step_time.shape[0])

    @property
    def ok(self) -> np.ndarray:
        """bool (N,): priced and fits (reason 0)."""
        return self.reason == 0

    @property
    def valid(self) -> np.ndarray:
        """bool (N,): a valid candidate (priced, whether or not it fits)."""
        return self.reason < FIRST_INVALID

    def reason_names(self) -> np.ndarray:
        """The reason of each row by name (an object array)."""
        names = np.array([reason.name for reason in REASON_TABLE], dtype=object)
        return names[self.reason]

    def explain(self, row: int) -> str:
        """Why row *row* has the outcome it has, in words."""
        return explain_reason(self.reason[row])

    def best(self, count: int = 1) -> np.ndarray:
        """The rows of the *count* shortest step times among those that fit (fastest first)."""
        candidates = np.flatnonzero(self.ok)
        order = np.argsort(self.step_time[candidates], kind="stable")
        return candidates[order[:count]]

    def row(self, row: int) -> dict[str, Any]:
        """Row *row* as plain Python values (JSON-ready)."""
        out = {
            "units": self.units,
            "step_time": float(self.step_time[row]),
            "parts": {name: float(self.parts[name][row]) for name in PART_NAMES},
            "peak_memory": float(self.peak_memory[row]),
            "fits": bool(self.fits[row]),
            "reason": int(self.reason[row]),
            "reason_text": self.explain(row),
            "mfu": float(self.mfu[row]),
            "tokens_per_second": float(self.tokens_per_second[row]),
        }
        if self.stage_times is not None:
            out["stage_times"] = [float(x) for x in self.stage_times[row] if x == x]
        return out
