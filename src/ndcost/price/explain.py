"""``explain()``: why a strategy cannot run, in words, with the numbers."""
from __future__ import annotations

from typing import Any

from ..spec.exec_spec import ExecSpec
from ..tables.validate import explain as _rule_violations

__all__ = ["explain"]


def explain(model: Any, spec: ExecSpec, cluster: Any) -> list[str]:
    """Every reason *spec* is invalid on (model, cluster), or does not fit its memory; [] when it runs.

    Invalid strategies list each broken rule (not just the first); a valid one
    that does not fit names the stage at its peak and the bytes over the device.
    """
    from .estimate import as_cluster, as_model

    model = as_model(model)
    cluster = as_cluster(cluster, spec)
    reasons = list(_rule_violations(model, spec, cluster))
    if reasons:
        return reasons
    from ..tables.layout import build_layout
    from ..tables.memory import memory_estimate

    memory = memory_estimate(model, spec, cluster, build_layout(model, spec))
    capacity = cluster.device.hbm_bytes
    if memory.peak > capacity:
        stage = max(range(len(memory.stages)), key=lambda i: memory.stages[i].total)
        breakdown = memory.stages[stage]
        parts = ", ".join(f"{name} {getattr(breakdown, name) / 2**30:.2f} GiB"
                          for name in ("params", "grads", "optimizer", "activations", "comm_buffers",
                                       "working_set", "reserve"))
        reasons.append(
            f"stage {stage} needs {memory.peak / 2**30:.2f} GiB but a {cluster.device.name} holds "
            f"{capacity / 2**30:.2f} GiB ({(memory.peak - capacity) / 2**30:.2f} GiB over): {parts}"
        )
    return reasons
