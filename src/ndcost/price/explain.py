"""``explain()``: why a strategy cannot run, in words, with the numbers."""
from __future__ import annotations

from typing import Any

from ..spec.exec_spec import ExecSpec
from ..tables.joint_rules import explain as _rule_violations

__all__ = ["explain"]


def explain(model: Any, spec: ExecSpec, cluster: Any, *, units: str = "seconds", rates: Any = None,
            software: str | None = None) -> list[str]:
    """Every reason *spec* is invalid on (model, cluster), or does not fit its memory; [] when it runs.

    Invalid strategies list each broken rule (not just the first); a valid one that does not fit
    names the stage at its peak, its reserved peak against the usable HBM and what it holds -- the
    fit ``estimate()`` decides in *units* (seconds by default: the allocator's slack and the
    process's fixed costs counted). *software*: the training stack the strategy runs on, as
    :func:`ndcost.estimate`'s.
    """
    from .estimate import as_cluster, as_model, estimate
    from ..tables.memory_words import over_line

    from .software_arg import apply_software

    model = as_model(model)
    cluster = as_cluster(cluster, spec)
    model, spec, rates = apply_software(software, model, spec, cluster, rates, owner="explain", units=units)
    reasons = list(_rule_violations(model, spec, cluster))
    if reasons:
        return reasons
    priced = estimate(model, spec, cluster, units=units, rates=rates)
    if not priced.fits:
        reasons.append(over_line(priced.memory, cluster.device.name))
    return reasons
