"""A memory estimate in words: the one vocabulary (``MEMORY_FIGURES``) every output prints.

``ndcost estimate``, ``ndcost explain``, ``ndcost compare`` and the emit report name a memory figure
only as these lines do -- allocated peak, reserved peak, fixed costs, usable HBM, headroom -- so a
planner reads one figure under one name wherever it appears (docs/MEMORY.md).
"""
from __future__ import annotations

from typing import Any

from .memory import MEMORY_PARTS

__all__ = ["GIB", "gib", "memory_line", "stage_table", "over_line", "STAGE_COLUMNS"]

GIB = float(2**30)

#: The columns of the per-stage table: the tensors' parts, then each stage's allocated and reserved peak.
STAGE_COLUMNS = tuple(name for name in MEMORY_PARTS if name != "reserve") + ("allocated peak", "reserved peak")


def gib(value: float) -> str:
    """Bytes as GiB with two decimals."""
    return f"{value / GIB:.2f} GiB"


def _fixed_words(memory: Any) -> str:
    # ND's units hold no process overheads: its flat safety reserve stands for them (MemoryEstimate)
    if memory.slack == 1.0:
        return "ND's safety reserve"
    return "CUDA context, workspaces, NCCL"


def memory_line(memory: Any, fits: bool) -> str:
    """Two lines: the reserved and allocated peaks against the usable HBM, the headroom and the verdict;
    then what the usable HBM is (the HBM less the fixed costs)."""
    verdict = "fits" if fits else "DOES NOT FIT"
    return (f"memory: reserved peak {gib(memory.peak_reserved)} (allocated peak {gib(memory.peak_allocated)}) "
            f"of usable HBM {gib(memory.usable_bytes)}: headroom {gib(memory.headroom)} -> {verdict}\n"
            f"  usable HBM = {memory.capacity_bytes / GIB:.2f} GiB HBM less {gib(memory.fixed_bytes)} fixed costs "
            f"({_fixed_words(memory)})")


def _stage_row(memory: Any, stage: Any) -> list[float]:
    allocated = stage.total - stage.reserve
    reserved = allocated * memory.slack
    return [getattr(stage, name) for name in STAGE_COLUMNS[:-2]] + [allocated, reserved]


def stage_table(memory: Any) -> list[str]:
    """Each stage's parts and its allocated and reserved peak, in GiB; every column as wide as its
    widest cell (a 100-TB stage does not run into its neighbour)."""
    rows = [[f"{value / GIB:.2f}" for value in _stage_row(memory, stage)] for stage in memory.stages]
    widths = [max([len(name)] + [len(row[i]) for row in rows]) for i, name in enumerate(STAGE_COLUMNS)]
    lines = ["  stage  " + "  ".join(name.rjust(width) for name, width in zip(STAGE_COLUMNS, widths)) + "   (GiB)"]
    for i, row in enumerate(rows):
        lines.append(f"  {i:>5}  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths)))
    return lines


def over_line(memory: Any, device_name: str) -> str:
    """Why a valid strategy does not fit: the fullest stage's reserved peak against the usable HBM,
    and what it holds."""
    stage = memory.peak_stage
    breakdown = memory.stages[stage]
    parts = ", ".join(f"{name} {gib(getattr(breakdown, name))}" for name in STAGE_COLUMNS[:-2])
    return (f"stage {stage}'s reserved peak {gib(memory.peak_reserved)} exceeds the usable HBM "
            f"{gib(memory.usable_bytes)} of a {device_name} ({memory.capacity_bytes / GIB:.1f} GiB HBM less "
            f"{gib(memory.fixed_bytes)} fixed costs): headroom {gib(memory.headroom)}; it holds {parts}")
