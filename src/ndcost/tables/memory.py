"""Memory per pipeline stage, in bytes: ndcost's memory model for both units.

Physical, Megatron-like accounting -- what a rank of a Megatron-LM / PyTorch
run holds at its peak, as warm-up ends -- built from:

* static bytes per layer of each kind (:func:`static_layer_bytes`): params,
  gradients and optimizer states with ZeRO 0-3 sharding, from the model's
  real parameter counts (``Model.kind_parameters``);
* one layer's activations for one micro-batch per option slot
  (kernel ``layer_activation_bytes``, Korthikanti et al. 2022 Table 2 for a
  GPT layer), times the micro-batches in flight of its (stage, chunk)
  (kernel ``inflight_micro_batches``, docs/ND_MODEL.md §3.6);
* the embedding, output head and MTP extras on their stages;
* communication buffers, the backward working set that ends warm-up (under
  DualPipeV, zero_bubble_v, one per chunk: a forward and a backward run at once,
  ND's max(fwd_first + bwd_last, fwd_last + bwd_first), §3.7), and the
  cluster's reserve (ND's 1 GiB safety buffer, docs/ND_MODEL.md §3.7).

The kernel ``stage_memory`` adds them up per stage. The kernel ``memory_batch``
prices all of it per candidate, for a batch (``estimate_many``) or a batch of
one (:func:`memory_estimate`, which ``estimate()`` and ``explain()`` call),
from the per-kind :func:`memory_kind_table`, the per-model
:func:`memory_model_vector` and a per-candidate vector derived by the same
formulas for one candidate and for many (``ndcost.tables.formulas``).

Not implemented from docs/ND_MODEL.md §3: the FSDP backward-end peak of deferred
gradient reduction as a separate candidate (§3.7; its gradients are priced
unsharded at every moment instead, which dominates it), swap_optimizer and
``vpp_less_memory`` (§3.2), and the CP insight / validators (§3.8, §3.9).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from .. import _backend
from .cache import per_object
from ..kernels.codes import MEMORY_ATTENTIONS, MEMORY_FFNS
from ..kernels.columns import (
    MEMORY_KIND, MEMORY_KIND_FIELDS, MEMORY_MODEL, MEMORY_MODEL_FIELDS, OPTION_FULL, OPTION_NONE,
    OPTION_SELECTIVE,
)
from .formulas import MEMORY_SCHEDULE_BY_PP_SCHEDULE, SCALAR, memory_candidate_columns_scalar
from .layout_pool import LayoutPiece, LayoutPool, pack_layouts
from .derive import Derived, derive, derived_values
from ..errors import SpecError
from ..spec.exec_spec import ExecSpec
from .kind_shape import kind_shape
from .memory_weights import largest_weights
from .memory_overheads import ALLOCATOR_RESERVE_FACTOR

__all__ = [
    "device_peak_bytes",
    "reserved_peak_bytes",
    "MEMORY_FIGURES",
    "MEMORY_PARTS",
    "SCHEDULE_CODES",
    "ATTENTION_CODES",
    "FFN_CODES",
    "GDN_CHUNK",
    "StageMemory",
    "MemoryEstimate",
    "static_layer_bytes",
    "memory_kind_table",
    "memory_model_vector",
    "memory_candidate_vector",
    "memory_estimate",
]

#: The parts of a stage's memory, in the kernel's column order (the total follows them).
MEMORY_PARTS: tuple[str, ...] = (
    "params", "grads", "optimizer", "activations", "comm_buffers", "working_set", "reserve",
)

#: Kernel codes of the pipeline schedules (``ExecSpec.schedule``), docs/ND_MODEL.md §3.6:
#: 1F1B and interleaved share a rule (vp decides), GPipe holds every micro-batch,
#: zero_bubble_v is ND's DualPipeV V, dualpipev and dualpipe DeepSeek's (their own in-flight counts), seq1f1b
#: counts sequence chunks.
SCHEDULE_CODES: Mapping[str, int] = MEMORY_SCHEDULE_BY_PP_SCHEDULE
#: Kernel codes of ``LayerKind.attention`` (ndcost.kernels.codes.MEMORY_ATTENTIONS).
ATTENTION_CODES: Mapping[str, int] = MappingProxyType({name: i for i, name in enumerate(MEMORY_ATTENTIONS)})
#: Kernel codes of ``LayerKind.ffn`` (ndcost.kernels.codes.MEMORY_FFNS).
FFN_CODES: Mapping[str, int] = MappingProxyType({name: i for i, name in enumerate(MEMORY_FFNS)})
#: Chunk length of the gated-DeltaNet chunkwise kernel (flash-linear-attention's
#: chunk_gated_delta_rule, BT = 64; ND's GDN_CHUNK is the same 64).
GDN_CHUNK = 64
#: Bytes of one token id (int64) kept by the embedding for its backward
#: (Megatron-LM theoretical_memory_usage: "8 * seq_length * micro_batch_size").
TOKEN_ID_BYTES = 8
#: Logits reach the cross-entropy in fp32 (Korthikanti §4.3: "4sbv/t").
LOGIT_BYTES = 4

_OWNER = "memory_estimate"


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class StageMemory:
    """One stage's memory in bytes; ``total`` is the sum of the seven parts."""

    params: float
    grads: float
    optimizer: float
    activations: float
    comm_buffers: float
    working_set: float
    reserve: float
    total: float

    @classmethod
    def from_row(cls, row: Any) -> StageMemory:
        """From one row of the ``stage_memory`` kernel's output (parts, then total)."""
        values = row.tolist() if hasattr(row, "tolist") else row
        return cls(*map(float, values))

    def parts(self) -> dict[str, float]:
        """The seven parts, in :data:`MEMORY_PARTS` order."""
        return {name: getattr(self, name) for name in MEMORY_PARTS}

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def device_peak_bytes(peak: float, reserve: float, fixed: float) -> float:
    """What the device holds at the peak (nvidia-smi), from a stage total that holds ND's *reserve*:
    the allocated peak (the total less the reserve) times the allocator's published slack
    (memory_overheads.ALLOCATOR_RESERVE_FACTOR: peak_reserved), plus the process's *fixed* costs.
    MemoryEstimate.device_peak and estimate()'s fit test are this one formula."""
    return (peak - reserve) * ALLOCATOR_RESERVE_FACTOR + fixed


def reserved_peak_bytes(total: Any, reserve: float, slack: float = ALLOCATOR_RESERVE_FACTOR) -> Any:
    """The reserved peak (MemoryEstimate.peak_reserved) from stage totals that hold ND's *reserve*: the
    allocated peak times the allocator's *slack* (1 in ND's units). Scalars or arrays."""
    return (total - reserve) * slack


#: The memory figures every output names, in words, each with the MemoryEstimate attribute (and JSON
#: / CSV key) that holds it, in bytes. One vocabulary: search, estimate, explain, plots, JSON, CSV and
#: Python name a figure only by these (docs/MEMORY.md). ``peak`` (the stage total the kernels sum,
#: ND's own figure) and ``capacity_bytes`` (the HBM) are the inputs they are derived from.
MEMORY_FIGURES: Mapping[str, str] = MappingProxyType({
    "allocated peak": "peak_allocated",
    "reserved peak": "peak_reserved",
    "fixed costs": "fixed_bytes",
    "usable HBM": "usable_bytes",
    "headroom": "headroom",
})


@dataclass(frozen=True)
class MemoryEstimate:
    """Memory of every pipeline stage, and the figures a planner reads (:data:`MEMORY_FIGURES`).

    In seconds units (``estimate()``'s default) the figures are what a PyTorch job sees:
    the **allocated peak** (``torch.cuda.max_memory_allocated``), the **reserved peak** (what the
    caching allocator holds, ``max_memory_reserved``), the **fixed costs** outside the allocator
    (CUDA context, cuBLAS workspaces, NCCL's and DeepEP's buffers), the **usable HBM** (the HBM less
    the fixed costs) and the **headroom** (usable HBM less the reserved peak; negative: over). A
    strategy fits when the headroom is >= 0.

    In ND's units the same words hold ND's model (docs/ND_MODEL.md §3.7): no allocator slack (reserved
    peak = allocated peak), and ND's flat safety reserve (``Cluster.memory_reserve_bytes``) stands
    for the fixed costs.

    Attributes:
        stages: One :class:`StageMemory` per stage (its ``total`` holds ND's reserve: the allocated
            peak of the stage is ``total - reserve``).
        capacity_bytes: The device's memory as its driver exposes it (``Device.memory_bytes``: what
            :meth:`fits` compares with by default).
    """

    stages: tuple[StageMemory, ...]
    capacity_bytes: float = math.inf

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))

    def __getattr__(self, name: str) -> Any:
        # An estimate made by the memory kernel builds its StageMemory objects when first read.
        rows = self.__dict__.get("_rows")
        if name == "stages" and rows is not None:
            stages = stages_from_rows(rows.tolist())
            object.__setattr__(self, "stages", stages)
            return stages
        raise AttributeError(name)

    @classmethod
    def from_kernel(cls, rows: np.ndarray, peak: float, capacity_bytes: float, fixed: float | None = None,
                    reserve: float = 0.0, slack: float = ALLOCATOR_RESERVE_FACTOR) -> MemoryEstimate:
        """From the memory kernel's (p, 8) stage rows and its peak (stages built on first read); with
        *fixed*, already :meth:`with_overheads` (*fixed*, *reserve*, *slack*)."""
        estimate = object.__new__(cls)
        fields = estimate.__dict__   # item by item: a per-call cost of estimate() (no keyword dict built)
        fields["_rows"] = rows
        fields["_peak"] = peak
        fields["capacity_bytes"] = capacity_bytes
        if fixed is not None:
            fields["_fixed"] = float(fixed)
            fields["_reserve"] = float(reserve)
            fields["_slack"] = slack
        return estimate

    @property
    def peak(self) -> float:
        """The fullest stage's total as the memory kernels sum it, in bytes: the allocated peak plus the
        cluster's reserve (ND's 1 GiB safety buffer, docs/ND_MODEL.md §3.7) -- ND's own memory figure, which
        ND's units hold to the HBM (``BatchEstimate.peak_memory`` is the same figure). Not what a device
        reports: read :attr:`peak_allocated`, :attr:`peak_reserved` and :attr:`headroom`. NaN when a
        stage is undefined."""
        known = self.__dict__.get("_peak")
        if known is not None:
            return known
        totals = [stage.total for stage in self.stages]
        if not totals or any(math.isnan(total) for total in totals):
            return math.nan
        return max(totals)

    @property
    def peak_stage(self) -> int:
        """The stage holding the peak (the first one on a tie; -1 when undefined)."""
        peak = self.peak
        if math.isnan(peak):
            return -1
        return next(i for i, stage in enumerate(self.stages) if stage.total == peak)

    def fits(self, capacity_bytes: float | None = None) -> bool:
        """Whether every stage fits: the reserved peak within the usable HBM (headroom >= 0), i.e. the
        reserved peak plus the fixed costs within *capacity_bytes* (the device's HBM by default)."""
        capacity = self.capacity_bytes if capacity_bytes is None else capacity_bytes
        return bool(self.device_peak <= capacity)

    # ---- what the process holds beyond the tensors (ndcost.tables.memory_overheads)

    def with_overheads(self, fixed: float, reserve: float, slack: float = ALLOCATOR_RESERVE_FACTOR) -> "MemoryEstimate":
        """This estimate with a process's fixed costs (CUDA context, workspaces, NCCL buffers), the
        reserve its totals hold (ND's safety buffer, which the allocator's slack replaces) and the
        allocator's slack (reserved / allocated; 1 in ND's units)."""
        self.__dict__.update(_fixed=float(fixed), _reserve=float(reserve), _slack=float(slack))
        return self

    @property
    def fixed_bytes(self) -> float:
        """**Fixed costs**: bytes the process holds outside the caching allocator -- the CUDA context,
        cuBLAS workspaces, NCCL's buffers per communicator and DeepEP's (``memory_overheads``); in ND's
        units ND's safety reserve. 0 until :meth:`with_overheads`."""
        return self.__dict__.get("_fixed", 0.0)

    @property
    def peak_allocated(self) -> float:
        """**Allocated peak**: the tensors alive at the worst moment of the fullest stage, what
        ``torch.cuda.max_memory_allocated`` reports (the stage total less ND's reserve)."""
        return self.peak - self.__dict__.get("_reserve", 0.0)

    @property
    def peak_reserved(self) -> float:
        """**Reserved peak**: what the caching allocator holds at that moment
        (``torch.cuda.max_memory_reserved``): the allocated peak times the allocator's published slack
        (memory_overheads.ALLOCATOR_RESERVE_FACTOR; 1 in ND's units). What must fit the usable HBM."""
        if "_fixed" not in self.__dict__:
            return self.peak
        return self.peak_allocated * self.slack

    @property
    def slack(self) -> float:
        """The caching allocator's slack, reserved / allocated: memory_overheads.ALLOCATOR_RESERVE_FACTOR in
        seconds units, 1 in ND's (and before :meth:`with_overheads`)."""
        return self.__dict__.get("_slack", 1.0)

    @property
    def device_peak(self) -> float:
        """The reserved peak plus the fixed costs: the HBM less the headroom (what nvidia-smi shows at
        the peak). Outputs print the headroom instead; this is the figure a memory limit is held to."""
        if "_fixed" not in self.__dict__:
            return self.peak
        return self.peak_reserved + self.__dict__["_fixed"]

    @property
    def usable_bytes(self) -> float:
        """**Usable HBM**: the HBM the allocator can use, the device's HBM less the fixed costs; 0 where the fixed
        costs alone exceed the HBM (a small part, a stated ``hbm_bytes``): nothing fits, and the headroom says by
        how much."""
        usable = self.capacity_bytes - self.fixed_bytes
        return usable if usable > 0.0 else 0.0

    @property
    def headroom(self) -> float:
        """**Headroom**: the HBM less the fixed costs and the reserved peak, in bytes; negative when it does not
        fit (by the fixed costs' excess too, where they alone exceed the HBM)."""
        return self.capacity_bytes - self.fixed_bytes - self.peak_reserved

    def figures(self) -> dict[str, float]:
        """The figures by :data:`MEMORY_FIGURES`' attribute names (bytes), with the HBM they are read against."""
        out = {attribute: getattr(self, attribute) for attribute in MEMORY_FIGURES.values()}
        out["capacity_bytes"] = self.capacity_bytes
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the figures (:data:`MEMORY_FIGURES`), the HBM, the peak stage, ``peak``
        (the stage total, ND's figure) and each stage's parts."""
        return {
            **self.figures(),
            "peak": self.peak,
            "peak_stage": self.peak_stage,
            "stages": [stage.to_dict() for stage in self.stages],
        }


# --------------------------------------------------------------------------- static memory


def _expert_zero_ranks(spec: ExecSpec, derived: Derived) -> float:
    """Ranks a routed expert's ZeRO shards span: Megatron's expert data-parallel
    group (world / (etp·ep·pp) = dp·cp·tp / (ep·etp), parallel_state), narrowed
    like the non-expert group when the optimizer shards over part of dp or not over cp."""
    if not derived.has_op:
        return 1.0
    ranks = derived.expert_data_parallel * derived.os_ranks / spec.dp
    if not spec.shard_spans_cp:
        ranks /= spec.cp
    return max(1.0, ranks)


def _shards_grads(spec: ExecSpec, derived: Derived) -> bool:
    """Gradients held sharded: ZeRO-2/3 reducing as the backward goes (not deferred)."""
    return spec.zero_stage >= 2 and not derived.defers_grads


def _shard_divisors(spec: ExecSpec, derived: Derived) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """(params, grads, optimizer) ZeRO divisors for non-expert and routed-expert state.

    ZeRO (Rajbhandari et al. 2020, §5): stage 1 shards the optimizer states,
    2 also the gradients, 3 also the parameters. ZeRO-3 that does not reshard
    after forward holds the gathered parameters through the backward, so its
    parameters are priced whole. Deferred gradient reduction (FSDP ``no_sync``)
    accumulates unsharded gradients over the micro-batches, so they are priced
    whole too (what ND's backward-end peak adds, docs/ND_MODEL.md §3.7).
    """
    non_expert = float(derived.zero_shard_ranks)
    expert = _expert_zero_ranks(spec, derived)
    stage = spec.zero_stage
    shards_params = stage == 3 and derived.reshards
    shards_grads = _shards_grads(spec, derived)

    def divisors(ranks: float) -> tuple[float, float, float]:
        return (ranks if shards_params else 1.0, ranks if shards_grads else 1.0, ranks if stage >= 1 else 1.0)

    return divisors(non_expert), divisors(expert)


def _widths(spec: ExecSpec, derived: Derived) -> tuple[float, float, float]:
    """Bytes per parameter of params, gradients and optimizer state (optimizer
    states · state bytes + the fp32 main copy: Adam 2·4 + 4 = 12, Megatron's 18 − 6)."""
    return float(spec.param_bytes), float(derived.bytes_grad), float(derived.bytes_optim)


def _sharded(count: float, divisors: tuple[float, float, float], widths: tuple[float, float, float]) -> np.ndarray:
    return np.array([count * widths[i] / divisors[i] for i in range(3)], dtype=np.float64)


def static_layer_bytes(model: Any, spec: ExecSpec, kind_index: int, derived: Derived | None = None) -> np.ndarray:
    """(params, grads, optimizer) bytes one rank holds for one layer of ``model.kinds[kind_index]``.

    From the real parameter counts (``Model.kind_parameters``): non-expert and
    shared-expert parameters split over tp (Megatron's TP splits attention and
    MLP weights; its theoretical formula divides norms by tp as well, and so
    does ndcost: < 0.01% of a layer) and ZeRO-sharded over the data-parallel
    ranks (× cp when shards span cp: Megatron's distributed optimizer group is
    DP × CP); routed experts split over ep·etp and ZeRO-sharded over the
    expert data-parallel ranks.
    """
    derived = derive(model, spec) if derived is None else derived
    non_expert, routed, shared = model.kind_parameters(kind_index)
    widths = _widths(spec, derived)
    dense_div, expert_div = _shard_divisors(spec, derived)
    per_rank = _sharded((non_expert + shared) / spec.tp, dense_div, widths)
    # Transformer Engine's fp8 weight copies (ExecSpec.fp8_weight_cache), sharded as the weights are
    cache = ((0.0 if spec.param_bytes == 1 else 1.0) + (1.0 if spec.fp8_transpose_cache else 0.0)
             if spec.precision == "fp8" and spec.fp8_weight_cache else 0.0)
    per_rank[0] += (non_expert + shared) / spec.tp * cache / dense_div[0]
    if routed:
        per_rank += _sharded(routed / (spec.ep * derived.t_exp), expert_div, widths)
        per_rank[0] += routed / (spec.ep * derived.t_exp) * cache / expert_div[0]
    return per_rank


# --------------------------------------------------------------------------- kernel tables


def memory_kind_table(model: Any) -> np.ndarray:
    """(K, MEMORY_KIND_FIELDS) float64, read-only: what the memory kernels read per layer kind
    (the dims :func:`layer_activation_bytes` takes, the real parameter counts). Cached per model."""
    cache = per_object(model)
    table = cache.get("memory_kind_table")
    if table is not None:
        return table
    table = np.zeros((len(model.kinds), len(MEMORY_KIND_FIELDS)), dtype=np.float64)
    for k, kind in enumerate(model.kinds):
        moe = kind.ffn == "moe"
        shape = kind_shape(model, k)
        census = model.kind_census(kind.name)
        values = {
            "attention": ATTENTION_CODES[kind.attention],
            "heads": shape.heads, "kv_heads": shape.kv_heads,
            "head_dim": shape.head_dim, "out_gate": int(shape.out_gate), "qk_norm": int(shape.qk_norm),
            "q_lora": model.q_lora_rank, "kv_lora": model.kv_lora_rank, "qk_nope": model.qk_nope_head_dim,
            "qk_rope": model.qk_rope_head_dim, "v_dim": model.v_head_dim,
            "lin_k_heads": model.linear_num_key_heads, "lin_k_dim": model.linear_key_head_dim,
            "lin_v_heads": model.linear_num_value_heads, "lin_v_dim": model.linear_value_head_dim,
            "lin_conv": model.linear_conv_kernel_dim, "lin_chunk": GDN_CHUNK,
            **_mamba_columns(model, kind),
            "ffn": FFN_CODES[kind.ffn], "gated": int(shape.gated),
            "ffn_width": shape.ffn_width,
            "experts": model.num_experts if moe else 0,
            "top_k": model.num_experts_per_tok if moe else 0,
            "shared_width": model.shared_expert_intermediate_size if moe else 0,
            "hidden": shape.hidden, "seq_tokens": shape.tokens, "att_window": shape.window,
            "extra_norms": model.norms_per_layer(k) - 2 if kind.module == "text" and model.norms_per_layer(k) > 2 else 0,
        }
        values.update(_census_columns(census))
        values["p_nonexp"], values["p_routed"], values["p_shared"] = model.kind_parameters(k)
        values["p_largest"], values["p_largest_expert"] = largest_weights(model, kind, shape, values["p_nonexp"])
        for name, value in values.items():
            table[k, MEMORY_KIND[name]] = value
    table.setflags(write=False)
    cache["memory_kind_table"] = table
    return table


def _mamba_columns(model: Any, kind: Any) -> dict:
    """A Mamba-2 kind's dims in the gated-DeltaNet columns (B/C groups as key heads, the state as key
    dim, heads and head dim as value heads and dim): the kernels read them by the attention code."""
    if kind.attention == "mamba1":
        return {"lin_k_heads": model.mamba_dt_rank, "lin_k_dim": model.mamba_state_size,
                "lin_v_heads": model.mamba_d_inner, "lin_v_dim": 1, "lin_conv": model.mamba_conv_kernel,
                "lin_chunk": 1}
    if kind.attention != "mamba":
        return {}
    return {"lin_k_heads": model.mamba_n_groups, "lin_k_dim": model.mamba_state_size,
            "lin_v_heads": model.mamba_num_heads, "lin_v_dim": model.mamba_head_dim,
            "lin_conv": model.mamba_conv_kernel, "lin_chunk": model.mamba_chunk_size}


def _census_columns(census: Any) -> dict:
    """A kind census's activation columns (bytes per token), -1 where it states none."""
    names = ("census_saved", "census_saved_tp", "census_sel", "census_sel_tp")
    if census is None:
        return dict.fromkeys(names, -1.0)
    values = (census.saved, census.saved_tp, census.selective, census.selective_tp)
    return {name: -1.0 if value is None else value for name, value in zip(names, values)}


def memory_model_vector(model: Any) -> np.ndarray:
    """(MEMORY_MODEL_FIELDS,) float64, read-only: the memory model's constants of *model*. Cached per model."""
    cache = per_object(model)
    vector = cache.get("memory_model_vector")
    if vector is not None:
        return vector
    n_mtp = model.num_nextn_predict_layers
    values = {
        "h": model.hidden_size, "v": model.vocab_size, "p_embedding": model.embedding_parameters(),
        "word_embedding": model.vocab_size * model.hidden_size,
        "p_final_norm": model.final_norm_parameters(),
        # One MTP module's own params (eh_proj, norms); its layer is a layer of its kind.
        "p_mtp_module": model.mtp_extra_parameters() / n_mtp if n_mtp > 0 else 0.0,
        "n_mtp": n_mtp,
        "p_vision_extra": 0 if model.vision is None else model.vision.extra_parameters(),
    }
    tower = model.vision
    if tower is not None:
        values.update(v_patches=tower.tokens, v_hidden=tower.hidden_size, v_merge=tower.spatial_merge_size ** 2,
                      v_patch_in=tower.in_channels * tower.temporal_patch_size * tower.patch_size ** 2)
    vector = np.zeros(len(MEMORY_MODEL_FIELDS), dtype=np.float64)
    for name, value in values.items():
        vector[MEMORY_MODEL[name]] = value
    vector.setflags(write=False)
    cache["memory_model_vector"] = vector
    return vector


def memory_candidate_vector(model: Any, spec: ExecSpec, derived: Any = None) -> np.ndarray:
    """(MEMORY_CAND_FIELDS,) float64: *spec*'s memory candidate (ndcost.tables.formulas, the batch's formulas).

    *derived* (``ndcost.tables.derive.derive(model, spec)``) saves deriving again when the caller has it.
    """
    values = memory_candidate_columns_scalar(SCALAR, spec.__dict__,
                                             derived_values(model, spec) if derived is None else vars(derived))
    return np.array(values, dtype=np.float64)


# --------------------------------------------------------------------------- activations


# --------------------------------------------------------------------------- the estimate


def _layout_arrays(layout: Any, p: int, vp: int, n_kinds: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    counts = np.asarray(layout.counts, dtype=np.float64)
    slot_option = np.asarray(layout.slot_option, dtype=np.int64)
    slot_mask = np.asarray(layout.slot_mask, dtype=np.int64)
    n_slots = slot_option.shape[0] if slot_option.ndim == 1 else -1
    if counts.ndim != 4 or counts.shape[:3] != (p, vp, n_kinds) or counts.shape[3] != n_slots or n_slots < 1:
        rule = f"have counts of shape (pp, vpp, kinds, slots) = ({p}, {vp}, {n_kinds}, {max(n_slots, 0)})"
        raise SpecError("layout", _OWNER, rule, counts.shape)
    if slot_mask.shape != slot_option.shape:
        raise SpecError("layout", _OWNER, "have one slot_mask per slot_option", slot_mask.shape)
    for option in slot_option:
        if option not in (OPTION_NONE, OPTION_FULL, OPTION_SELECTIVE):
            raise SpecError("layout", _OWNER, "have slot options 0 (none), 1 (full) or 2 (selective)", int(option))
    return counts, slot_option, slot_mask


_STAGE_FIELD_NAMES = tuple(f.name for f in fields(StageMemory))


def stages_from_rows(rows: Any) -> tuple[StageMemory, ...]:
    """StageMemory objects from kernel rows (parts, then total), without the dataclass's
    per-field ``object.__setattr__`` (a stage per pipeline stage, per estimate)."""
    stages = []
    names = _STAGE_FIELD_NAMES
    for row in rows:
        stage = object.__new__(StageMemory)
        stage.__dict__.update(zip(names, row))
        stages.append(stage)
    return tuple(stages)


def memory_estimate(model: Any, spec: ExecSpec, cluster: Any, layout: Any) -> MemoryEstimate:
    """Memory of every pipeline stage of *spec* on *model*, placed by *layout*.

    The backend's ``memory_batch`` kernel prices it, as a batch of one: the same
    code ``estimate_many`` runs.

    Args:
        model: A :class:`~ndcost.spec.model.Model`.
        spec: The strategy.
        cluster: A :class:`~ndcost.spec.device.Cluster` (its reserve and HBM).
        layout: An object with ``counts`` (pp, vpp, K, O) float64 -- layers of
            kind k running option slot o on (stage, chunk), MTP layers included;
            ``slot_option`` (O,) 0 none / 1 full / 2 selective; ``slot_mask``
            (O,) keep masks; ``emb_stage``, ``out_stage`` and
            ``mtp_layers_on_out_stage`` ints; optionally ``emb_chunk`` (default
            0) and ``out_chunk`` (default vpp − 1).

    Raises:
        SpecError: When the layout does not match the spec and the model.
    """
    p, vp = spec.pp, spec.vpp
    n_kinds = len(model.kinds)
    counts, slot_option, slot_mask = _layout_arrays(layout, p, vp, n_kinds)
    piece = LayoutPiece(counts, slot_option, slot_mask, int(layout.emb_stage), int(layout.out_stage),
                        int(getattr(layout, "emb_chunk", 0)), int(getattr(layout, "out_chunk", vp - 1)),
                        int(layout.mtp_layers_on_out_stage))
    for name, value, bound in (("emb_stage", piece.emb_stage, p), ("out_stage", piece.out_stage, p),
                               ("emb_chunk", piece.emb_chunk, vp), ("out_chunk", piece.out_chunk, vp)):
        if not 0 <= value < bound:
            raise SpecError(f"layout.{name}", _OWNER, f"be in [0, {bound - 1}]", value)
    if piece.mtp_out < 0:
        raise SpecError("layout.mtp_layers_on_out_stage", _OWNER, "be >= 0", piece.mtp_out)
    pool = pack_layouts([piece])
    return run_memory_batch(model, memory_candidate_vector(model, spec).reshape(-1, 1), pool, cluster)


_ONE_ROW = np.zeros(1, dtype=np.int64)
_ONE_ROW.setflags(write=False)


def run_memory_batch(model: Any, mcand: np.ndarray, pool: LayoutPool, cluster: Any) -> MemoryEstimate:
    """One candidate (a (MEMORY_CAND_FIELDS, 1) column) on the first layout of *pool*, as a MemoryEstimate."""
    p = int(pool.layouts[0, 0])
    reason = np.zeros(1, dtype=np.int64)
    peak = np.empty(1, dtype=np.float64)
    fits = np.empty(1, dtype=np.uint8)
    out = np.empty((1, p, len(MEMORY_PARTS) + 1), dtype=np.float64)
    capacity = float(cluster.device.memory_bytes)
    _backend.kernels.memory_batch(memory_kind_table(model), memory_model_vector(model), mcand, _ONE_ROW,
                                  pool.layouts, pool.pool, pool.slot_pool, float(cluster.memory_reserve_bytes),
                                  capacity, reason, peak, fits, out)
    reserve = float(cluster.memory_reserve_bytes)
    # ND's memory model: no allocator slack, its safety reserve standing for the fixed costs
    return MemoryEstimate.from_kernel(out[0], float(peak[0]), capacity, reserve, reserve, 1.0)
