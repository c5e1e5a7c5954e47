"""What an estimate returns: step time, its parts, per-stage times, memory, fit."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from ..kernels.columns import PART_NAMES

__all__ = ["Estimate", "PART_NAMES", "FOLDED_PARTS", "fold_parts", "check_parts_sum"]

#: ND's RealParts view of the parts (docs/ND_MODEL.md §2.10 estimation_in_real_parts).
FOLDED_PARTS = {
    "comp": ("fw_compute", "bw_compute", "recompute"),
    "dp_wait": ("dp_comm", "dp_reduce"),
    "mp_wait": ("tp_comm",),
    "ep_wait": ("ep_comm",),
    "cp_wait": ("cp_comm",),
    "pp_wait": ("bubble", "pp_comm"),
}

#: How far the parts may stray from the total: they are the total taken apart,
#: so only by rounding (the seed's PARTS_REL_TOL).
PARTS_REL_TOL = 1e-9


def fold_parts(parts: Mapping[str, float]) -> dict[str, float]:
    """The folded view: comp, dp_wait, mp_wait, ep_wait, cp_wait, pp_wait."""
    return {name: sum(parts[p] for p in members) for name, members in FOLDED_PARTS.items()}


def check_parts_sum(parts: Mapping[str, float], total: float) -> None:
    """Raise when the parts do not add up to the total (a walk recorded more or less than it timed)."""
    summed = sum(parts.values())
    if abs(summed - total) <= PARTS_REL_TOL * abs(total):   # the common case: isclose below would pass
        return
    if not math.isfinite(total):
        return
    if not math.isclose(summed, total, rel_tol=PARTS_REL_TOL, abs_tol=PARTS_REL_TOL * max(1.0, abs(total))):
        raise ArithmeticError(
            f"the parts sum to {summed!r} where the step time is {total!r} "
            f"({100 * (summed - total) / total if total else 0.0:+.3g}%): a part was recorded twice or not at all"
        )


@dataclass(frozen=True)
class Estimate:
    """One strategy, priced.

    Attributes:
        units: ``"seconds"``; ``"nd"`` for ND's score; ``"nd_ms"`` for ND's
            score turned into milliseconds by a ratios file.
        step_time: One training step (an optimizer step over the global batch).
        parts: The step taken apart (PART_NAMES); they sum to ``step_time``.
        stage_times: Each pipeline stage's time for one micro-batch.
        memory: The memory estimate, or None: a ``MemoryEstimate`` with the allocated peak, reserved peak,
            fixed costs, usable HBM and headroom (``.peak_allocated``, ``.peak_reserved``, ``.fixed_bytes``,
            ``.usable_bytes``, ``.headroom``, bytes; docs/MEMORY.md), ``.stages`` (each stage's parts) and
            ``.peak`` (the fullest stage's total with ND's reserve: ND's own figure).
        fits: Whether the strategy fits the device: headroom >= 0 (the reserved peak within the usable HBM).
        mfu: Model FLOPs utilisation (a fraction); None where not defined (ND's units: a score, not a time).
        hfu: Hardware FLOPs utilisation (recompute counted); None where not defined.
        tokens_per_second: Global batch tokens per second of step; None in ND's units.
    """

    units: str
    step_time: float
    parts: Mapping[str, float]
    stage_times: tuple[float, ...]
    memory: Any = None
    fits: bool = True
    mfu: float | None = None
    hfu: float | None = None
    tokens_per_second: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", MappingProxyType(dict(self.parts)))
        object.__setattr__(self, "details", MappingProxyType(dict(self.details)))

    def ops(self, kind: int | None = None) -> tuple:
        """Where a layer's time goes (seconds mode): one layer of each kind (or of kind *kind*), op by op,
        as :func:`ndcost.price.layer_ops.layer_ops` prices it -- each op's FLOPs, bytes, kernels, seconds,
        host seconds and bound, forward and backward, adding up to the layer's priced time."""
        inputs = self.details.get("inputs")
        if inputs is None:
            from ..errors import SpecError

            raise SpecError("units", "Estimate.ops", "be 'seconds' (the per-op table prices seconds mode)", self.units)
        from .layer_ops import layer_ops

        model, spec, cluster, rates = inputs
        return layer_ops(model, spec, cluster, rates=rates, kind=kind)

    @property
    def folded(self) -> dict[str, float]:
        """ND's folded view of the parts (comp, dp_wait, mp_wait, ep_wait, cp_wait, pp_wait)."""
        return fold_parts(self.parts)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        out = {
            "units": self.units,
            "step_time": self.step_time,
            "parts": dict(self.parts),
            "stage_times": list(self.stage_times),
            "fits": self.fits,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "tokens_per_second": self.tokens_per_second,
        }
        if self.memory is not None:
            out["memory"] = self.memory.to_dict() if hasattr(self.memory, "to_dict") else self.memory
        return out
