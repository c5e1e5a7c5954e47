"""Where a layer's time goes: one layer of a kind in seconds mode, op by op (``Estimate.ops()``,
``ndcost estimate --ops``).

Each op of ``ndcost.kernels.columns.LAYER_OP_NAMES`` has, per micro-batch on one device, forward and backward
(weight gradients included): the FLOPs it runs, the HBM bytes it moves, its kernels (and how many of them replay
from a CUDA graph, by the scopes ``ExecSpec.cuda_graphs`` holds: ``ndcost.spec.graph_scopes``), the seconds seconds
mode prices it at, the host's seconds to launch or replay its kernels, and what bounds it -- "compute" (its FLOPs at
the GEMM rate, or the attention rate for the core, outlast its bytes at the HBM rate), "memory", "launch" (its kernels'
launches outlast its device time) or "communication". The rows of a pass add up to the layer's priced time
(``seconds_layer_times``: fw, bw + bw_w); the "launch" row holds what the host adds where the pass is
launch-bound; the communication rows are raw, before the step's overlap hides part of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _backend
from ..errors import SpecError
from ..kernels.columns import LAYER_OP_FIELD, LAYER_OP_FIELDS, LAYER_OP_NAMES, RATE, SECONDS_LAYER, SECONDS_LAYER_FIELDS
from ..tables.seconds import seconds_arrays
from ..tables.joint_rules import validate

__all__ = ["OpRow", "LayerOps", "layer_ops", "PASSES", "BOUNDS"]

PASSES = ("forward", "backward")
BOUNDS = ("compute", "memory", "launch", "communication")
_F = LAYER_OP_FIELD
_COMM = ("tp_comm", "cp_comm", "ep_comm")


@dataclass(frozen=True)
class OpRow:
    """One op of a layer in one pass, per micro-batch and device (seconds, FLOPs, bytes)."""

    op: str
    pass_: str
    flops: float
    bytes: float
    kernels: float
    seconds: float
    host_seconds: float
    bound: str
    #: of ``kernels``, those replayed from a CUDA graph (the rest are launched from the host)
    graphed_kernels: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "pass": self.pass_, "flops": self.flops, "bytes": self.bytes, "kernels": self.kernels,
                "graphed_kernels": self.graphed_kernels, "seconds": self.seconds, "host_seconds": self.host_seconds,
                "bound": self.bound}


@dataclass(frozen=True)
class LayerOps:
    """The ops of one layer of a kind (its index and name in ``model.kinds``); ``forward`` / ``backward`` are
    the layer's priced pass times, which the rows before the communication ones add up to."""

    kind: int
    name: str
    rows: tuple[OpRow, ...]
    forward: float
    backward: float

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "forward": self.forward, "backward": self.backward,
                "rows": [row.to_dict() for row in self.rows]}

    def table(self) -> str:
        """The rows as a text table (ms, GFLOP, MB)."""
        lines = [f"layer kind {self.kind} ({self.name}): forward {self.forward * 1e3:.3f} ms, backward "
                 f"{self.backward * 1e3:.3f} ms per micro-batch",
                 f"  {'op':<15}{'pass':<9}{'GFLOP':>10}{'MB':>10}{'kernels':>9}{'graphed':>9}{'ms':>10}{'host ms':>9}"
                 "  bound"]
        for row in self.rows:
            lines.append(f"  {row.op:<15}{row.pass_:<9}{row.flops / 1e9:10.2f}{row.bytes / 1e6:10.1f}"
                         f"{row.kernels:9.0f}{row.graphed_kernels:9.0f}{row.seconds * 1e3:10.3f}"
                         f"{row.host_seconds * 1e3:9.3f}  {row.bound}")
        return "\n".join(lines)


def _bound(name: str, flops: float, moved: float, seconds: float, host: float, count: float,
           rate: np.ndarray) -> str:
    if name in _COMM:
        return "communication"
    if name == "launch" or host > seconds:
        return "launch"
    memory = moved / (rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]])
    if name == "attn_core":
        # a flash kernel is priced by its FLOPs alone, at a rate its head dim and a sliding window's fixed work a
        # query slow (ndcost.kernels.window_attention): compute-bound whenever that time passes its bytes'
        return "compute" if seconds - count * rate[RATE["kernel_s"]] >= memory else "memory"
    return "compute" if flops / (rate[RATE["mm_eff"]] * rate[RATE["peak_mm"]]) >= memory else "memory"


def layer_ops(model: Any, spec: Any, cluster: Any, *, rates: Any = None, kind: int | None = None) -> tuple[LayerOps, ...]:
    """The ops of one layer of each kind of *model* (or of kind *kind* alone) as *spec* runs it on *cluster*,
    per micro-batch and device, in seconds mode with *rates* (default: the device's).

    Rows with nothing priced in a pass are left out.

    Raises:
        SpecError: For an invalid (model, spec, cluster) or a kind index out of range.
    """
    validate(model, spec, cluster)
    n_kinds = len(model.kinds)
    if kind is not None and (isinstance(kind, bool) or not isinstance(kind, int) or not 0 <= kind < n_kinds):
        raise SpecError("kind", "layer_ops", f"be a layer kind index in [0, {n_kinds})", kind)
    a = seconds_arrays(model, spec, cluster, rates=rates)
    kernels = _backend.kernels
    args = [a[name] for name in ("kinds", "skinds", "model", "smodel", "cand", "rate")]
    times = np.empty((n_kinds, len(SECONDS_LAYER_FIELDS)), dtype=np.float64)
    kernels.seconds_layer_times(*args, times)
    tables = []
    for k in range(n_kinds) if kind is None else (kind,):
        out = np.empty((len(LAYER_OP_NAMES), len(LAYER_OP_FIELDS)), dtype=np.float64)
        kernels.seconds_layer_ops(*args, k, out)
        rows = []
        for i, name in enumerate(LAYER_OP_NAMES):
            for pass_, suffix in zip(PASSES, ("_f", "_b")):
                seconds, host = out[i, _F["time" + suffix]], out[i, _F["host" + suffix]]
                flops, moved, count = out[i, _F["flops" + suffix]], out[i, _F["bytes" + suffix]], \
                    out[i, _F["kernels" + suffix]]
                if seconds == 0.0 and count == 0.0:
                    continue
                rows.append(OpRow(name, pass_, float(flops), float(moved), float(count), float(seconds),
                                  float(host), _bound(name, flops, moved, seconds, host, count, a["rate"]),
                                  float(out[i, _F["graphed" + suffix]])))
        row = times[k]
        tables.append(LayerOps(k, model.kinds[k].name, tuple(rows), float(row[SECONDS_LAYER["fw"]]),
                               float(row[SECONDS_LAYER["bw"]] + row[SECONDS_LAYER["bw_w"]])))
    return tuple(tables)
