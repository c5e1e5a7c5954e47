"""Memory per pipeline stage, in bytes: ndcost's memory model for both units.

Physical, Megatron-like accounting -- what a rank of a Megatron-LM / PyTorch
run holds at its peak, as warm-up ends -- built from:

* static bytes per layer of each kind (:func:`static_layer_bytes`): params,
  gradients and optimizer states with ZeRO 0-3 sharding, from the model's
  real parameter counts (``Model.kind_parameters``);
* one layer's activations for one micro-batch per option slot
  (kernel ``layer_activation_bytes``, Korthikanti et al. 2022 Table 2 for a
  GPT layer), times the micro-batches in flight of its (stage, chunk)
  (kernel ``inflight_micro_batches``, ND_REFERENCE §3.6);
* the embedding, output head and MTP extras on their stages;
* communication buffers, the backward working set that ends warm-up, and the
  cluster's reserve (ND's 1 GiB safety buffer, ND_REFERENCE §3.7).

The kernel ``stage_memory`` adds them up per stage; :func:`memory_estimate`
is the entry point (``estimate()`` and ``explain()`` call it).

Not implemented from ND_REFERENCE §3: the FSDP backward-end peak of deferred
gradient reduction as a separate candidate (§3.7; its gradients are priced
unsharded at every moment instead, which dominates it), DualPipeV's max(fwd_first + bwd_last, fwd_last +
bwd_first) working set (§3.7; the 1F1B rule is used), swap_optimizer and
``vpp_less_memory`` (§3.2), and the CP insight / validators (§3.8, §3.9).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from . import _backend
from ._columns import OPTION_FULL, OPTION_NONE, OPTION_SELECTIVE
from .derive import Derived, derive
from .errors import SpecError
from .exec_spec import ExecSpec
from .recompute_spec import ALL_KEPT

__all__ = [
    "MEMORY_PARTS",
    "SCHEDULE_CODES",
    "ATTENTION_CODES",
    "FFN_CODES",
    "GDN_CHUNK",
    "StageMemory",
    "MemoryEstimate",
    "static_layer_bytes",
    "layer_activation_arguments",
    "memory_estimate",
]

#: The parts of a stage's memory, in the kernel's column order (the total follows them).
MEMORY_PARTS: tuple[str, ...] = (
    "params", "grads", "optimizer", "activations", "comm_buffers", "working_set", "reserve",
)

#: Kernel codes of the pipeline schedules (``ExecSpec.schedule``), ND_REFERENCE §3.6:
#: 1F1B and interleaved share a rule (vp decides), GPipe holds every micro-batch,
#: zero_bubble_v is DualPipeV's V, seq1f1b counts sequence chunks.
SCHEDULE_CODES: Mapping[str, int] = MappingProxyType({
    "1f1b": 0, "interleaved": 0, "gpipe": 1, "zero_bubble_v": 2, "seq1f1b": 3,
})
#: Kernel codes of ``LayerKind.attention``.
ATTENTION_CODES: Mapping[str, int] = MappingProxyType({"full": 0, "mla": 1, "linear": 2})
#: Kernel codes of ``LayerKind.ffn``.
FFN_CODES: Mapping[str, int] = MappingProxyType({"dense": 0, "moe": 1})
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


@dataclass(frozen=True)
class MemoryEstimate:
    """Memory of every pipeline stage.

    Attributes:
        stages: One :class:`StageMemory` per stage.
        capacity_bytes: The device's HBM (what :meth:`fits` compares with by default).
    """

    stages: tuple[StageMemory, ...]
    capacity_bytes: float = math.inf

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))

    @property
    def peak(self) -> float:
        """The largest stage total in bytes (NaN when a stage is undefined)."""
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
        """Whether every stage fits: peak <= capacity (the device's HBM by default;
        the reserve is already a part of each total)."""
        capacity = self.capacity_bytes if capacity_bytes is None else capacity_bytes
        return bool(self.peak <= capacity)

    def to_dict(self) -> dict[str, Any]:
        return {
            "peak": self.peak,
            "peak_stage": self.peak_stage,
            "capacity_bytes": self.capacity_bytes,
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
    whole too (what ND's backward-end peak adds, ND_REFERENCE §3.7).
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
    if routed:
        per_rank += _sharded(routed / (spec.ep * derived.t_exp), expert_div, widths)
    return per_rank


def _stage_static(model: Any, spec: ExecSpec, derived: Derived, emb_stage: int, out_stage: int,
                  mtp_layers: int) -> np.ndarray:
    """(p, 3) static bytes outside the transformer layers.

    Embedding (word + learned positions) on the first stage; the output head
    and the final norm on the last; with tied embeddings and pp > 1 the last
    stage keeps its own copy of the word embedding for the head (Megatron's
    embedding group, synchronised by an all-reduce). MTP modules' extras (eh_proj,
    norms) go with the output; Megatron-Core also builds the embedding on the MTP
    stage (``pre_process or mtp_process``), so an untied model with MTP keeps a
    word-embedding copy there too. All split over tp (vocab-parallel).
    """
    p = spec.pp
    out = np.zeros((p, 3), dtype=np.float64)
    widths = _widths(spec, derived)
    dense_div, _ = _shard_divisors(spec, derived)
    tp = spec.tp
    word_embedding = model.vocab_size * model.hidden_size
    out[emb_stage] += _sharded(model.embedding_parameters() / tp, dense_div, widths)
    split_ends = emb_stage != out_stage
    # The LM head is a vocab x hidden table in every supported family (no bias);
    # tied, it is the embedding itself unless the ends sit on different stages.
    tied_here = derived.tie_embeddings and not split_ends
    head = (0 if tied_here else word_embedding) + model.final_norm_parameters()
    if mtp_layers > 0 and model.num_nextn_predict_layers > 0:
        per_module = model.mtp_extra_parameters() / model.num_nextn_predict_layers
        head += mtp_layers * per_module
        if split_ends and not derived.tie_embeddings:
            head += word_embedding  # Megatron-Core: the MTP stage builds the embedding too
    out[out_stage] += _sharded(head / tp, dense_div, widths)
    return out


# --------------------------------------------------------------------------- activations


def layer_activation_arguments(model: Any, spec: ExecSpec, kind_index: int,
                               derived: Derived | None = None) -> dict[str, Any]:
    """The ``layer_activation_bytes`` arguments of one layer kind, all but
    ``option`` and ``keep_mask``."""
    derived = derive(model, spec) if derived is None else derived
    kind = model.kinds[kind_index]
    is_moe = kind.ffn == "moe"
    seq = spec.seq_length / spec.seq_split if spec.schedule == "seq1f1b" else float(spec.seq_length)
    return {
        "seq": seq,
        "batch": float(spec.micro_batch_size),
        "hidden": float(model.hidden_size),
        "tp": float(spec.tp),
        "sp": float(derived.sp),
        "cp": float(spec.cp),
        "etp": float(derived.t_exp),
        "attention": ATTENTION_CODES[kind.attention],
        "heads": float(model.num_attention_heads),
        "kv_heads": float(model.num_key_value_heads),
        "head_dim": float(model.head_dim),
        "out_gate": int(model.attn_output_gate),
        "qk_norm": int(model.qk_norm),
        "q_lora": float(model.q_lora_rank),
        "kv_lora": float(model.kv_lora_rank),
        "qk_nope": float(model.qk_nope_head_dim),
        "qk_rope": float(model.qk_rope_head_dim),
        "v_dim": float(model.v_head_dim),
        "lin_k_heads": float(model.linear_num_key_heads),
        "lin_k_dim": float(model.linear_key_head_dim),
        "lin_v_heads": float(model.linear_num_value_heads),
        "lin_v_dim": float(model.linear_value_head_dim),
        "lin_conv": float(model.linear_conv_kernel_dim),
        "lin_chunk": float(GDN_CHUNK),
        "ffn": FFN_CODES[kind.ffn],
        "gated": int(model.gated_ffn),
        "ffn_width": float(model.moe_intermediate_size if is_moe else model.intermediate_size),
        "experts": float(model.num_experts if is_moe else 0),
        "top_k": float(model.num_experts_per_tok if is_moe else 0),
        "shared_width": float(model.shared_expert_intermediate_size if is_moe else 0),
        # Capacity mode pads every expert to capacity_factor × its fair share;
        # dropless (grouped GEMM) is priced balanced.
        "token_factor": 1.0 if spec.grouped_gemm else float(spec.capacity_factor),
        "flash": int(spec.flash_attention),
        "compute_bytes": float(spec.compute_bytes),
        "softmax_bytes": float(spec.softmax_bytes),
        "dropout_bytes": float(spec.dropout_bytes),
        "norm_bytes": float(spec.norm_bytes),
        "slice_input": int(spec.recompute_slice_activation),
    }


def _extra_activations(model: Any, spec: ExecSpec, derived: Derived, seq: float) -> tuple[float, float, float]:
    """Per micro-batch: (embedding, output, one MTP module) activation bytes.

    Embedding: the token ids (int64) and the embedding-dropout mask (Korthikanti
    §4.3 "sbhp/t"). Output: the final norm input, the output-projection input
    and the fp32 logits (Korthikanti §4.3 "4sbh/t·(1 + v/h)" at 16 bits).
    MTP module: its two input norms (enorm, hnorm), the eh_proj input (2h),
    its head norm, the head input and its fp32 logits (DeepSeek-V3 report §2.2).
    """
    tokens = seq * spec.micro_batch_size / spec.cp
    h, sp, tp = model.hidden_size, derived.sp, spec.tp
    c, n = spec.compute_bytes, spec.norm_bytes
    embedding = tokens * TOKEN_ID_BYTES + tokens * h * spec.dropout_bytes / sp
    output = tokens * h * n / sp + tokens * h * c / sp + tokens * model.vocab_size * LOGIT_BYTES / tp
    mtp = tokens * (2 * h * n + 2 * h * c + h * n + h * c) / sp + tokens * model.vocab_size * LOGIT_BYTES / tp
    return embedding, output, mtp


# --------------------------------------------------------------------------- comm buffers


def _kind_comm_buffers(model: Any, spec: ExecSpec, derived: Derived, kind_index: int,
                       arguments: Mapping[str, Any]) -> tuple[float, float]:
    """(max(dp, tp, cp), ep) buffer bytes of one layer of the kind (ND_REFERENCE
    §3.2 comm_expr = max(dp, tp, cp) + ep): transient, so held once per stage.

    * tp: with SP, the all-gathered layer input (s·b·h/cp), Megatron's
      gather buffer; without SP the all-reduce runs in place.
    * cp: ring attention double-buffers the K/V chunk it receives while
      computing on the current one (ND §3.5: ×2); Ulysses' all-to-all holds
      q, k, v in and out.
    * dp: with sharded gradients (ZeRO-2/3), one layer's unsharded gradient
      bucket to reduce-scatter from; else the reduce runs in the grad buffer.
    * ep: dispatch and combine all-to-all buffers of the routed tokens.
    """
    kind = model.kinds[kind_index]
    tokens = arguments["seq"] * spec.micro_batch_size / spec.cp
    c = spec.compute_bytes
    tp_buffer = tokens * model.hidden_size * c if derived.sp > 1 else 0.0
    cp_buffer = 0.0
    if spec.cp > 1 and kind.attention != "linear":
        heads_local = model.num_attention_heads / spec.tp
        if kind.attention == "mla":
            k_width = heads_local * (model.qk_nope_head_dim + model.qk_rope_head_dim)
            v_width = heads_local * model.v_head_dim
            q_width = k_width
        else:
            kv_local = max(model.num_key_value_heads / spec.tp, 1.0)
            k_width = v_width = kv_local * model.head_dim
            q_width = heads_local * model.head_dim
        if spec.cp_algo == "ring":
            cp_buffer = 2.0 * tokens * (k_width + v_width) * c
        else:
            cp_buffer = 2.0 * tokens * (q_width + k_width + v_width) * c
    dp_buffer = 0.0
    if _shards_grads(spec, derived):
        non_expert, routed, shared = model.kind_parameters(kind_index)
        params = (non_expert + shared) / spec.tp + routed / (spec.ep * derived.t_exp)
        dp_buffer = params * derived.bytes_grad
    ep_buffer = 0.0
    if kind.ffn == "moe" and spec.ep > 1:
        routed_tokens = tokens * arguments["top_k"] * arguments["token_factor"] * derived.t_exp / spec.tp
        ep_buffer = 2.0 * routed_tokens * model.hidden_size * c
    return max(dp_buffer, tp_buffer, cp_buffer), ep_buffer


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


def memory_estimate(model: Any, spec: ExecSpec, cluster: Any, layout: Any) -> MemoryEstimate:
    """Memory of every pipeline stage of *spec* on *model*, placed by *layout*.

    Args:
        model: A :class:`~ndcost.model.Model`.
        spec: The strategy.
        cluster: A :class:`~ndcost.device.Cluster` (its reserve and HBM).
        layout: An object with ``counts`` (pp, vpp, K, O) float64 -- layers of
            kind k running option slot o on (stage, chunk), MTP layers included;
            ``slot_option`` (O,) 0 none / 1 full / 2 selective; ``slot_mask``
            (O,) keep masks; ``emb_stage``, ``out_stage`` and
            ``mtp_layers_on_out_stage`` ints; optionally ``emb_chunk`` (default
            0) and ``out_chunk`` (default vpp − 1).

    Raises:
        SpecError: When the layout does not match the spec and the model.
    """
    derived = derive(model, spec, cluster)
    p, vp = spec.pp, spec.vpp
    n_kinds = len(model.kinds)
    counts4, slot_option, slot_mask = _layout_arrays(layout, p, vp, n_kinds)
    n_slots = slot_option.shape[0]
    emb_stage, out_stage = int(layout.emb_stage), int(layout.out_stage)
    emb_chunk = int(getattr(layout, "emb_chunk", 0))
    out_chunk = int(getattr(layout, "out_chunk", vp - 1))
    mtp_layers = int(layout.mtp_layers_on_out_stage)
    for name, value, bound in (("emb_stage", emb_stage, p), ("out_stage", out_stage, p),
                               ("emb_chunk", emb_chunk, vp), ("out_chunk", out_chunk, vp)):
        if not 0 <= value < bound:
            raise SpecError(f"layout.{name}", _OWNER, f"be in [0, {bound - 1}]", value)

    # Per kind: static bytes, activations and working set per slot, comm buffers.
    static = np.empty((n_kinds, 3), dtype=np.float64)
    act = np.empty((n_kinds, n_slots), dtype=np.float64)
    work = np.zeros((n_kinds, n_slots), dtype=np.float64)
    comm_main = np.empty(n_kinds, dtype=np.float64)
    comm_ep = np.empty(n_kinds, dtype=np.float64)
    fsdp_gathers = spec.zero_stage == 3 and derived.reshards
    seq = spec.seq_length / spec.seq_split if spec.schedule == "seq1f1b" else float(spec.seq_length)
    for k in range(n_kinds):
        static[k] = static_layer_bytes(model, spec, k, derived)
        arguments = layer_activation_arguments(model, spec, k, derived)
        plain = _backend.kernels.layer_activation_bytes(**arguments, option=OPTION_NONE, keep_mask=ALL_KEPT)
        gathered = 0.0
        if fsdp_gathers:
            # ND_REFERENCE §3.7 FSDP extras: a backward holds two layers' gathered
            # parameters, its own and the prefetched next one's.
            non_expert, routed, shared = model.kind_parameters(k)
            gathered = 2.0 * ((non_expert + shared) / spec.tp
                              + routed / (spec.ep * derived.t_exp)) * spec.param_bytes
        for o in range(n_slots):
            option, mask = int(slot_option[o]), int(slot_mask[o])
            act[k, o] = _backend.kernels.layer_activation_bytes(**arguments, option=option, keep_mask=mask)
            if option == OPTION_FULL:
                # ND_REFERENCE §3.7 FULL_REC: the backward re-materialises the plain layer.
                work[k, o] = plain
            elif option == OPTION_SELECTIVE:
                # The recomputed ops come back for the layer's backward, at one micro-batch.
                work[k, o] = max(plain - act[k, o], 0.0)
            work[k, o] += gathered
        comm_main[k], comm_ep[k] = _kind_comm_buffers(model, spec, derived, k, arguments)

    # Micro-batches in flight per (stage, chunk), ND_REFERENCE §3.6.
    schedule = SCHEDULE_CODES[spec.schedule]
    m = derived.micro_batch_num
    inflight = np.empty((p, vp), dtype=np.float64)
    for stage in range(p):
        for chunk in range(vp):
            inflight[stage, chunk] = _backend.kernels.inflight_micro_batches(schedule, p, m, vp, stage, chunk, spec.seq_split)

    # Outside the layers: embedding, output head, MTP extras.
    stage_static = _stage_static(model, spec, derived, emb_stage, out_stage, mtp_layers)
    emb_act, out_act, mtp_act = _extra_activations(model, spec, derived, seq)
    extra_act = np.zeros((p, vp), dtype=np.float64)
    extra_act[emb_stage, emb_chunk] += emb_act
    extra_act[out_stage, out_chunk] += out_act + mtp_layers * mtp_act

    # Comm buffers: once per stage, over the kinds it runs.
    present = counts4.sum(axis=(1, 3)) > 0  # (p, K)
    comm = np.where(present, comm_main, 0.0).max(axis=1) + np.where(present, comm_ep, 0.0).max(axis=1)

    counts = np.ascontiguousarray(counts4.reshape(p, vp, n_kinds * n_slots))
    out = np.empty((p, len(MEMORY_PARTS) + 1), dtype=np.float64)
    _backend.kernels.stage_memory(static, act, work, counts, inflight, stage_static, extra_act, comm,
                         float(cluster.memory_reserve_bytes), out)
    return MemoryEstimate(
        stages=tuple(StageMemory(*row) for row in out.tolist()),
        capacity_bytes=float(cluster.device.hbm_bytes),
    )
