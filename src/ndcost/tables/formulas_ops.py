"""The vocabulary the formulas of :mod:`ndcost.tables.formulas` are written in: the two *ops*
objects, the storage codes of a batch's columns, and the constants read off a model and a
cluster.

:data:`SCALAR` runs the formulas on Python scalars, :data:`ARRAY` on numpy columns. The
methods of :class:`_ScalarOps` are also the rewrite rules of ``tools/gen_formulas.py``: it
inlines each one-expression method (and each ``staticmethod(f)`` alias) into the formulas'
scalar twins, checked in as :mod:`ndcost.tables.formulas_scalar`. The methods of :class:`_RowOps`
are the rewrite rules of ``tools/gen_formula_rows.py`` alike: one row of a batch's storage codes,
written into the compiled twins (``cysrc/ndcost/kernels/formula_rows.pxi``) and their oracle
(``ndcost.kernels.formula_rows``). The constants classes state their attributes' types: the
compiled twins read them as C values of those types.
"""
from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..kernels.codes import MEMORY_CP, MEMORY_SCHEDULE_OF, MEMORY_SCHEDULES, SCHEDULES
from ..spec.exec_spec import CP_ALGOS, CUDA_GRAPHS, EP_OVERLAPS, MOE_DISPATCHERS, PP_SCHEDULES, PRECISIONS
from ..spec.recompute_spec import SELECTIVE_RULES

__all__ = [
    "SCALAR", "ARRAY", "NONE_INT", "COMM_DP_OVERLAP", "COMM_TP_OVERLAP", "CHOICES", "MEMORY_SCHEDULE_BY_PP_SCHEDULE",
    "ModelConstants", "ClusterConstants",
]

#: Share of DP traffic hidden behind compute (docs/ND_MODEL.md §1.3 comm flags,
#: §2.6 post-processing step 3: "validated on MindFormers").
COMM_DP_OVERLAP = 0.9
#: Share of TP traffic hidden behind compute (same sources).
COMM_TP_OVERLAP = 0.5

#: The storage code of an unstated optional int (etp, micro_batch_num, global_batch_size, optimizer_shard).
NONE_INT = np.iinfo(np.int64).min

#: Choice fields and their choices; a column stores the index (an unknown value: an index >= len).
CHOICES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "pp_schedule": PP_SCHEDULES,
    "cp_algo": CP_ALGOS,
    "precision": PRECISIONS,
    "selective_rule": SELECTIVE_RULES,
    "moe_dispatcher": MOE_DISPATCHERS,
    "ep_overlap": EP_OVERLAPS,
    "cuda_graphs": CUDA_GRAPHS,
})
_CODES = {field: {name: i for i, name in enumerate(names)} for field, names in CHOICES.items()}

#: memory.SCHEDULE_CODES by ExecSpec.pp_schedule (1f1b and interleaved share a rule).
MEMORY_SCHEDULE_BY_PP_SCHEDULE: Mapping[str, int] = MappingProxyType({
    name: MEMORY_SCHEDULES.index(MEMORY_SCHEDULE_OF[name]) for name in PP_SCHEDULES})
_MEMORY_SCHEDULE = dict(MEMORY_SCHEDULE_BY_PP_SCHEDULE)   # a plain dict reads faster than the proxy
_MEMORY_SCHEDULE_TABLE = np.array([MEMORY_SCHEDULE_BY_PP_SCHEDULE[name] for name in PP_SCHEDULES], dtype=np.float64)
_MEMORY_SCHEDULE_ROW = tuple(_MEMORY_SCHEDULE_TABLE.tolist())
#: The seconds kernels' SCHEDULES code of each pp_schedule (the schedule that runs, but for 1f1b with
#: vpp > 1, which runs interleaved: ExecSpec.schedule; the formula says so).
_SCHEDULE = {name: float(SCHEDULES.index(name)) for name in PP_SCHEDULES}
_SCHEDULE_TABLE = np.array([_SCHEDULE[name] for name in PP_SCHEDULES], dtype=np.float64)
_SCHEDULE_ROW = tuple(_SCHEDULE_TABLE.tolist())
INTERLEAVED_SCHEDULE = float(SCHEDULES.index("interleaved"))
#: The memory model's cp_ring code of each cp_algo (ndcost.kernels.codes.MEMORY_CP).
MEMORY_CP_ULYSSES, MEMORY_CP_RING, MEMORY_CP_ALLGATHER = (
    float(MEMORY_CP.index(name)) for name in ("ulysses", "ring", "ring-allgather"))


def _clip_take(table: tuple, code: int) -> Any:
    """``table[code]`` with *code* clipped into the table: numpy's ``take(mode="clip")`` of one value
    (a choice code past the choices is a bad row, priced by nobody)."""
    return table[min(max(code, 0), len(table) - 1)]


class _ScalarOps:
    """Python scalars: ``where`` picks a branch, optional fields are ``None``."""

    gcd = staticmethod(math.gcd)
    float_ = staticmethod(float)

    @staticmethod
    def maximum(a, b):
        # max(a, b) exactly (the first unless the second is greater), without the builtin's call.
        return b if b > a else a

    @staticmethod
    def int_(flag):
        # A bool as 0/1: the formulas convert only flags.
        return 1 if flag else 0

    @staticmethod
    def where(condition, a, b):
        return a if condition else b

    @staticmethod
    def not_(x):
        return not x

    @staticmethod
    def stated(x):
        return x is not None

    @staticmethod
    def opt_int(x, default):
        return default if x is None else x

    @staticmethod
    def opt_bool(x, default):
        return default if x is None else x

    @staticmethod
    def opt_float(x, default):
        return default if x is None else x

    @staticmethod
    def is_choice(c, field, name):
        return c[field] == name

    @staticmethod
    def memory_schedule(c):
        return _MEMORY_SCHEDULE[c["pp_schedule"]]

    @staticmethod
    def schedule_code(c):
        return _SCHEDULE[c["pp_schedule"]]

    @staticmethod
    def choice_code(c, field):
        # A choice's index in CHOICES[field] (what a batch stores), for a kernel that reads the code.
        return _CODES[field][c[field]]

    @staticmethod
    def first_reason(rules, codes):
        # Not inlined: the generator turns each ``rules.append((name, broken))`` into
        # ``if broken: return codes[name]`` and this call into ``return 0``.
        for name, broken in rules:
            if broken:
                return codes[name]
        return 0


def _int_column(x):
    return np.asarray(x).astype(np.int64)


class _ArrayOps:
    """numpy columns: ``where`` is ``np.where``, optional fields carry storage codes."""

    maximum = staticmethod(np.maximum)
    gcd = staticmethod(np.gcd)
    where = staticmethod(np.where)
    not_ = staticmethod(np.logical_not)
    int_ = staticmethod(_int_column)

    @staticmethod
    def float_(x):
        # Values end in float64 matrices, whose assignment converts ints exactly: no copy here.
        return x

    @staticmethod
    def stated(x):
        return x != NONE_INT

    @staticmethod
    def opt_int(x, default):
        return np.where(x == NONE_INT, default, x)

    @staticmethod
    def opt_bool(x, default):
        return np.where(x < 0, default, x > 0)

    @staticmethod
    def opt_float(x, default):
        return np.where(np.isnan(x), default, x)

    @staticmethod
    def is_choice(c, field, name):
        return c[field] == _CODES[field][name]

    @staticmethod
    def memory_schedule(c):
        return _MEMORY_SCHEDULE_TABLE.take(c["pp_schedule"], mode="clip")

    @staticmethod
    def schedule_code(c):
        return _SCHEDULE_TABLE.take(c["pp_schedule"], mode="clip")

    @staticmethod
    def choice_code(c, field):
        return c[field]

    @staticmethod
    def first_reason(rules, codes):
        # The first broken rule wins: the last rule's code is laid down first, each earlier one over it.
        reason = np.zeros(np.broadcast_shapes(*(np.shape(broken) for _, broken in rules)), dtype=np.int64)
        for name, broken in reversed(rules):
            reason = np.where(broken, codes[name], reason)
        return reason


class _RowOps(_ScalarOps):
    """One row of a batch's storage columns (the codes and sentinels :class:`_ArrayOps` reads) as
    scalars: never called, only read by ``tools/gen_formula_rows.py``, which writes each formula
    with these one-expression methods (and those of :class:`_ScalarOps` it does not override)
    inlined, as C (the compiled twins) and as Python (their oracle). Each gives what
    :class:`_ArrayOps` gives for that row, numpy's corner cases included (``maximum`` passes a NaN
    on as ``np.maximum`` does)."""

    @staticmethod
    def maximum(a, b):
        return a if (a >= b or a != a) else b

    @staticmethod
    def stated(x):
        return x != NONE_INT

    @staticmethod
    def opt_int(x, default):
        return default if x == NONE_INT else x

    @staticmethod
    def opt_bool(x, default):
        return default if x < 0 else x > 0

    @staticmethod
    def opt_float(x, default):
        return default if x != x else x

    @staticmethod
    def is_choice(c, field, name):
        return c[field] == _CODES[field][name]

    @staticmethod
    def memory_schedule(c):
        return _clip_take(_MEMORY_SCHEDULE_ROW, c["pp_schedule"])

    @staticmethod
    def schedule_code(c):
        return _clip_take(_SCHEDULE_ROW, c["pp_schedule"])

    @staticmethod
    def choice_code(c, field):
        return c[field]


SCALAR = _ScalarOps()
ARRAY = _ArrayOps()


class ModelConstants:
    """What the formulas and the rules read off a model, once (attribute reads are not free)."""

    __slots__ = ("num_experts", "topk", "heads", "kv_heads", "tie", "is_moe", "is_mla", "linear_k_heads",
                 "linear_v_heads", "has_linear", "moe_width", "layers_with_mtp", "mtp_layers", "has_vision",
                 "vision_heads", "vision_tokens", "has_mamba", "mamba_splits")
    num_experts: int
    topk: int
    heads: int
    kv_heads: int
    tie: bool
    is_moe: bool
    is_mla: bool
    linear_k_heads: int
    linear_v_heads: int
    has_linear: bool
    moe_width: int | None
    layers_with_mtp: int
    mtp_layers: int
    has_vision: bool
    vision_heads: int
    vision_tokens: int
    has_mamba: bool
    mamba_splits: tuple[int, ...]

    def __init__(self, model: Any) -> None:
        self.num_experts = model.num_experts
        self.topk = model.num_experts_per_tok
        self.heads = model.num_attention_heads
        self.kv_heads = model.num_key_value_heads
        self.tie = bool(model.tie_word_embeddings)
        self.is_moe = model.is_moe
        self.is_mla = model.is_mla
        self.has_linear = model.has_linear_attention
        self.linear_k_heads = model.linear_num_key_heads
        self.linear_v_heads = model.linear_num_value_heads
        self.moe_width = model.moe_intermediate_size
        self.layers_with_mtp = model.num_layers_with_mtp
        self.mtp_layers = model.num_nextn_predict_layers
        self.has_vision = model.vision is not None
        self.vision_heads = model.vision.num_heads if self.has_vision else 0
        self.vision_tokens = model.vision.tokens if self.has_vision else 0
        self.has_mamba = model.has_mamba
        self.mamba_splits = tuple(value for _, value in model.mamba_tp_splits)


class ClusterConstants:
    """What the formulas and the rules read off a cluster; ``None`` for a bare device name
    (every candidate then sized to its own devices: no device-count rule)."""

    __slots__ = ("num_devices", "devices_per_node", "has_fp8", "dpn", "is_a3", "reserve", "capacity")
    num_devices: int | None
    devices_per_node: int
    has_fp8: bool
    dpn: float
    is_a3: float
    reserve: float | None
    capacity: float

    def __init__(self, cluster: Any = None, device: Any = None) -> None:
        if cluster is not None:
            device = cluster.device
        self.num_devices = cluster.num_devices if cluster is not None else None
        self.devices_per_node = device.devices_per_node
        self.has_fp8 = "fp8" in device.peak_flops
        self.dpn = float(device.nd_node_size)
        self.is_a3 = 1.0 if device.nd_name == "A3" else 0.0
        self.reserve = float(cluster.memory_reserve_bytes) if cluster is not None else None
        self.capacity = float(device.memory_bytes)
