"""The strategy spec: how a model is split and run (:class:`ExecSpec`).

An :class:`ExecSpec` states every strategy field once, in Megatron-style
names (degrees, micro-batching, pipeline schedule and layout, recompute,
ZeRO/FSDP sharding, byte widths, kernels). It validates its own fields when
built; what depends on the model or the cluster is checked by
:func:`ndcost.validate.validate`, and ND's derived values (sharding factors,
comm flags, ...) come from :func:`ndcost.derive.derive`.

:meth:`ExecSpec.from_strategy` reads ND's keyword strategy
(``dp, mp, pp, mb, mbs, op, sp, ...``), with the semantics of the seed
``nd/common/apply_exec.py`` ``strategy_exec`` (ND_REFERENCE §1.4).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from .errors import (
    SpecError, above_limit, check_bool, check_choice, check_positive_int, check_positive_number, is_finite_number,
)
from .limits import (
    MAX_BATCH, MAX_BYTE_WIDTH, MAX_CAPACITY_FACTOR, MAX_DEVICES, MAX_LAYERS, MAX_OPTIMIZER_STATES, MAX_SEQ_LENGTH,
)
from .recompute_spec import (
    RECOMPUTE_OPTIONS,
    SELECTIVE_RULES,
    RecomputeRange,
    canonical_switches,
    mask_from_switches,
    selective_keep_mask,
    switches_from_mask,
)

__all__ = ["ExecSpec", "RecomputeRange", "PP_SCHEDULES", "CP_ALGOS", "PRECISIONS", "ZERO_STAGES"]

_OWNER = "ExecSpec"

#: Pipeline schedules (ND_REFERENCE §1.7 / §3.6): ND's ``1f1b`` (interleaved
#: when vpp > 1), ``zero_bubble_v`` (DualPipeV), ``gpipe``, and ``seq1f1b``
#: (ND's ``seqpipe``/``seqsmartvpp``).
PP_SCHEDULES: tuple[str, ...] = ("1f1b", "interleaved", "zero_bubble_v", "gpipe", "seq1f1b")
#: Context-parallel algorithms: ring attention (ND's ``colossalai_cp``) and Ulysses.
CP_ALGOS: tuple[str, ...] = ("ring", "ulysses")
#: Compute precisions.
PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8")
#: 0 DDP; 1 optimizer states sharded; 2 + gradients; 3 + parameters (FSDP).
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)

_DEGREES = ("dp", "tp", "pp", "vpp", "cp", "ep")
#: Each degree's bound (ndcost.limits): a device count, but pp and vpp, whose stages and chunks
#: each hold a layer.
DEGREE_LIMITS = MappingProxyType({"dp": MAX_DEVICES, "tp": MAX_DEVICES, "pp": MAX_LAYERS, "vpp": MAX_LAYERS,
                                  "cp": MAX_DEVICES, "ep": MAX_DEVICES})
_BOOL_FIELDS = (
    "sequence_parallel",
    "mtp_in_offset",
    "emb_out_in_offset",
    "selective_comm_recompute",
    "recompute_slice_activation",
    "overlapped_grad_reduce",
    "deferred_grad_accumulation",
    "shard_spans_cp",
    "flash_attention",
    "grouped_gemm",
    "vocab_emb_dp",
    "tp_overlap",
)
# Byte widths and their minimum: a main (master) parameter copy and a dropout
# mask may be absent (ND's DEFAULT_RUN has main_param_bytes 0 and
# dropout_bytes 0, ND_REFERENCE §1.4 derive step 10); the rest are real widths.
_BYTE_FIELDS = (
    ("param_bytes", 1),
    ("compute_bytes", 1),
    ("softmax_bytes", 1),
    ("grad_bytes", 1),
    ("optimizer_state_bytes", 1),
    ("optimizer_states", 0),
    ("main_param_bytes", 0),
    ("norm_bytes", 1),
    ("dropout_bytes", 0),
    ("logit_bytes", 1),
)
#: A byte field's bound (ndcost.limits): a width in bytes, or a count of optimizer states.
BYTE_LIMITS = MappingProxyType({name: MAX_OPTIMIZER_STATES if name == "optimizer_states" else MAX_BYTE_WIDTH
                                for name, _ in _BYTE_FIELDS})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _states_per_stage(value: Any) -> bool:
    """Whether a full_recompute/selective_recompute value states any recompute."""
    return value is not None and value is not False


def _int_grid(value: Any, parameter: str, pp: int, vpp: int, *, minimum: int | None, what: str) -> tuple:
    """A 1-D (one int per stage) or 2-D (vpp rows of pp ints) list as tuples.

    The two shapes are ND's ``is_consistent_pp_config``: "the offset,
    full_rec and sel_rec lists must have length p, or be a vp x p list of
    lists" (ND_REFERENCE §1.3).
    """
    shape_rule = f"be {what}: one int per stage (pp = {pp}) or vpp = {vpp} rows of pp = {pp} ints"
    if not isinstance(value, (list, tuple)) or not value:
        raise SpecError(parameter, _OWNER, shape_rule, value)
    if all(isinstance(row, (list, tuple)) for row in value):
        if len(value) != vpp or any(len(row) != pp for row in value):
            raise SpecError(parameter, _OWNER, shape_rule, value)
        items = [item for row in value for item in row]
        normalised: tuple = tuple(tuple(row) for row in value)
    else:
        if len(value) != pp:
            raise SpecError(parameter, _OWNER, shape_rule, value)
        items = list(value)
        normalised = tuple(value)
    element_rule = "hold only integers" if minimum is None else f"hold only integers >= {minimum}"
    for item in items:
        if not _is_int(item) or (minimum is not None and item < minimum):
            raise SpecError(parameter, _OWNER, element_rule, item)
    return normalised


_RANGE_KEYS = tuple(f.name for f in dataclasses.fields(RecomputeRange))


def _as_range(item: Any) -> Any:
    """A RecomputeRange from a mapping of its fields (a YAML/JSON entry); other items as given."""
    if not isinstance(item, Mapping):
        return item
    for key in item:
        if key not in _RANGE_KEYS:
            raise SpecError("recompute", _OWNER, f"hold ranges with only the keys {', '.join(_RANGE_KEYS)}", key)
    missing = [key for key in ("first", "count", "option") if key not in item]
    if missing:
        raise SpecError("recompute", _OWNER, "hold ranges that state first, count and option",
                        f"{dict(item)} (no {', '.join(missing)})")
    return RecomputeRange(**item)


@dataclass(frozen=True)
class ExecSpec:
    """Every field of a training strategy (the comments beside the fields say what each means).

    Degrees: ``dp * tp * pp * cp`` devices; ``ep`` and ``etp`` fold the
    experts over those (Megatron's expert grid). Batch: state
    ``global_batch_size`` or ``micro_batch_num`` (or both, in agreement);
    the other follows as ``global_batch_size = micro_batch_size * dp *
    micro_batch_num``.

    The spec is immutable: lists are stored as tuples and mappings as
    read-only proxies, copied from the caller's (whose objects are never
    changed). :meth:`replace` returns a new, validated spec.
    """

    # -- degrees (devices = dp*tp*pp*cp; EP folds into dp*cp*tp, Megatron's expert grid)
    dp: int = 1
    tp: int = 1
    pp: int = 1
    vpp: int = 1  # model chunks per stage (ND's vp)
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # expert TP; None: experts follow tp (ND derive step 2)
    sequence_parallel: bool = False  # Megatron SP: ND's sp = tp, else 1
    # -- batch (global_batch_size = micro_batch_size*dp*micro_batch_num, ND's gbs = b*d*m)
    micro_batch_size: int = 1
    micro_batch_num: int | None = None  # None: global_batch_size // (micro_batch_size*dp)
    global_batch_size: int | None = None  # None: micro_batch_size*dp*micro_batch_num
    seq_length: int = 4096
    # -- pipeline (ND_REFERENCE §1.6, §3.6)
    pp_schedule: str = "1f1b"  # "1f1b" with vpp > 1 runs interleaved (see `schedule`)
    seq_split: int = 1  # Seq1F1B sequence chunks (ND's n_s_split)
    offset: tuple | None = None  # layers added per stage (1-D) or per chunk and stage (vpp x pp)
    pp_partition: tuple | None = None  # layers per stage; excludes offset
    mtp_in_offset: bool = True  # the offset counts the MTP layers (ND's is_mtp_in_offset)
    emb_out_in_offset: bool = False  # the offset counts embedding and output as layers
    # -- recompute (switches: 1 keeps an op's activation, 0 recomputes it)
    recompute: str | tuple = "none"  # "none" | "full" | "selective" | RecomputeRange, ...
    full_recompute: bool | tuple | None = None  # ND's full_rec: all, or the first k layers per stage
    selective_recompute: bool | tuple | None = None  # ND's sel_rec, same shapes
    selective_rule: str = "megatron"  # switches of "selective" unless selective_switches states them
    selective_switches: Mapping[str, int] | None = None
    selective_comm_recompute: bool = False  # MindFormers' select_comm_recompute (the SP gather)
    recompute_slice_activation: bool = False  # a fully recomputed layer keeps its input split over tp
    # -- sharding and gradient reduction
    zero_stage: int = 1  # 0 DDP, 1 optimizer states, 2 + gradients, 3 + parameters (FSDP)
    optimizer_shard: int | None = None  # ND's os_max_shard: DP ranks the shards span (None: dp)
    reshard_params: bool | None = None  # FSDP reshard after forward (None: True at ZeRO-3)
    overlapped_grad_reduce: bool = True
    deferred_grad_accumulation: bool = False  # reduce gradients once, after the last micro-batch
    shard_spans_cp: bool = True  # ZeRO shards span dp*cp (Megatron's DP x CP optimizer group)
    # -- byte widths (per element)
    param_bytes: int = 2
    compute_bytes: int = 2
    softmax_bytes: int = 4
    grad_bytes: int = 4
    #: Bytes each logit of the loss holds at its peak: 4, Megatron's fp32 logits of its vocab-parallel
    #: cross entropy (Korthikanti et al. 2022 §4.3); 10 where the loss upcasts a copy and keeps its
    #: fp32 log-softmax beside the 16-bit logits (torchtitan's cross_entropy_loss, pred.float()).
    logit_bytes: int = 4
    optimizer_state_bytes: int = 4
    optimizer_states: int = 2  # Adam's two moments
    main_param_bytes: int = 4  # fp32 master copy of the params (0: none)
    norm_bytes: int = 2
    # Dropout mask bytes; 0: no dropout, as Llama, Qwen and DeepSeek train (their config.json
    # attention_dropout is 0.0). GPT-3-style runs (Korthikanti et al.'s assumptions) set 1.
    dropout_bytes: int = 0
    # -- kernels and model-side choices
    flash_attention: bool = True
    grouped_gemm: bool = True  # dropless MoE; False: capacity mode with capacity_factor
    capacity_factor: float = 1.0
    #: Dropless MoE: the busiest expert's routed tokens over the mean (1: balanced, as NVIDIA's
    #: published runs force it); the straggler's grouped GEMMs and all-to-all carry this load.
    moe_imbalance: float = 1.0
    cp_algo: str = "ring"  # "ring" (ND's colossalai_cp) | "ulysses"
    vocab_emb_dp: bool = False  # ND: the embedding is not split over tp when pp == 1
    tie_embeddings: bool | None = None  # None: the model's tie_word_embeddings
    moe_dispatch: float | None = None  # ND's MOE_DISPATCH (None: 1040; 0 prices no dispatch)
    precision: str = "bf16"
    tp_overlap: bool = False  # seconds mode: TP comm overlapped with compute

    # ------------------------------------------------------------------ validation

    def __post_init__(self) -> None:
        for check in _CHECKS:
            check(self)

    @classmethod
    def problems(cls, **fields: Any) -> list[SpecError]:
        """Every group of rules *fields* break, one SpecError each, where ``ExecSpec(**fields)`` stops at
        the first: the scalars, then (when they hold) the pipeline, the batch, the layout, recompute
        and sharding rules -- each group checked on its own. [] when the spec is valid."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - names)
        if unknown:
            return [SpecError(unknown[0], _OWNER, "be an ExecSpec field", fields[unknown[0]])]
        spec = object.__new__(cls)
        for field_ in dataclasses.fields(cls):
            default = field_.default if field_.default is not dataclasses.MISSING else None
            object.__setattr__(spec, field_.name, fields.get(field_.name, default))
        found: list[SpecError] = []
        for check in _CHECKS:
            try:
                check(spec)
            except SpecError as exc:
                found.append(exc)
                if check is ExecSpec._check_scalars:
                    break       # the other groups read the scalars: undefined past a bad one
        return found

    def _check_scalars(self) -> None:
        for name in _DEGREES:
            check_positive_int(getattr(self, name), name, _OWNER, maximum=DEGREE_LIMITS[name])
        if self.etp is not None:
            check_positive_int(self.etp, "etp", _OWNER, maximum=MAX_DEVICES)
        if self.num_devices > MAX_DEVICES:
            # Each degree is bounded, but four of them multiply past any cluster (and past int64).
            raise SpecError("dp*tp*pp*cp", _OWNER, above_limit(MAX_DEVICES), self.num_devices)
        for name in _BOOL_FIELDS:
            check_bool(getattr(self, name), name, _OWNER)
        check_positive_int(self.micro_batch_size, "micro_batch_size", _OWNER, maximum=MAX_BATCH)
        check_positive_int(self.seq_length, "seq_length", _OWNER, maximum=MAX_SEQ_LENGTH)
        check_positive_int(self.seq_split, "seq_split", _OWNER, maximum=MAX_SEQ_LENGTH)
        for name, minimum in _BYTE_FIELDS:
            check_positive_int(getattr(self, name), name, _OWNER, minimum=minimum, maximum=BYTE_LIMITS[name])
        check_choice(self.cp_algo, "cp_algo", _OWNER, CP_ALGOS)
        check_choice(self.precision, "precision", _OWNER, PRECISIONS)
        check_choice(self.selective_rule, "selective_rule", _OWNER, SELECTIVE_RULES)
        if self.tie_embeddings is not None:
            check_bool(self.tie_embeddings, "tie_embeddings", _OWNER)
        # MindFormers refuses a capacity factor below 1 (ND_REFERENCE §1.4,
        # moe_config.capacity_factor (>= 1)): fewer slots than tokens routed.
        factor = self.capacity_factor
        if not is_finite_number(factor) or factor < 1:
            raise SpecError("capacity_factor", _OWNER, "be a finite number >= 1", factor)
        if factor > MAX_CAPACITY_FACTOR:
            raise SpecError("capacity_factor", _OWNER, above_limit(MAX_CAPACITY_FACTOR), factor)
        object.__setattr__(self, "capacity_factor", float(factor))
        imbalance = self.moe_imbalance
        if isinstance(imbalance, bool) or not is_finite_number(imbalance) or not 1.0 <= imbalance <= MAX_CAPACITY_FACTOR:
            raise SpecError("moe_imbalance", _OWNER, f"be a finite number in [1, {MAX_CAPACITY_FACTOR:g}]", imbalance)
        object.__setattr__(self, "moe_imbalance", float(imbalance))
        if self.moe_dispatch is not None:
            # 0 prices no dispatch at all (ND_REFERENCE §2.3: "0 = none").
            dispatch = check_positive_number(self.moe_dispatch, "moe_dispatch", _OWNER, allow_zero=True)
            object.__setattr__(self, "moe_dispatch", dispatch)

    def _check_pipeline(self) -> None:
        check_choice(self.pp_schedule, "pp_schedule", _OWNER, PP_SCHEDULES)
        if self.vpp > 1 and self.pp == 1:
            raise SpecError("vpp", _OWNER, "be 1 when pp is 1 (vpp without pp)", self.vpp)
        schedule = self.pp_schedule
        if schedule == "interleaved" and self.vpp == 1:
            raise SpecError("vpp", _OWNER, "be > 1 with pp_schedule='interleaved'", self.vpp)
        if schedule == "zero_bubble_v" and self.vpp != 2:
            # DualPipeV runs each stage's two chunks in a V (ND_REFERENCE §3.6:
            # its micro-factor is defined for vp <= 2 and returns 0 above).
            raise SpecError("vpp", _OWNER, "be 2 with pp_schedule='zero_bubble_v' (DualPipeV's two chunks)", self.vpp)
        if schedule == "gpipe" and self.vpp != 1:
            # ND's GPipe factor (p micro-batches in flight, §3.6) has no chunks.
            raise SpecError("vpp", _OWNER, "be 1 with pp_schedule='gpipe'", self.vpp)
        if self.seq_split != 1:
            if schedule != "seq1f1b":
                raise SpecError("seq_split", _OWNER, "be 1 unless pp_schedule is 'seq1f1b'", self.seq_split)
            # Seq1F1B evaluates layers at s / n_s_split (ND_REFERENCE §3.6).
            if self.seq_length % self.seq_split:
                raise SpecError("seq_split", _OWNER, f"divide seq_length ({self.seq_length})", self.seq_split)

    def _check_batch(self) -> None:
        if self.micro_batch_num is not None:
            check_positive_int(self.micro_batch_num, "micro_batch_num", _OWNER, maximum=MAX_BATCH)
        if self.global_batch_size is not None:
            check_positive_int(self.global_batch_size, "global_batch_size", _OWNER, maximum=MAX_BATCH)
        if self.micro_batch_num is None and self.global_batch_size is None:
            raise SpecError("global_batch_size", _OWNER,
                            "be given when micro_batch_num is not (state one of them)", None)
        # ND: gbs = b * d * m (ND_REFERENCE §1.3 set_strategy; §4.1 "the
        # global batch must match").
        per_micro_batch = self.micro_batch_size * self.dp
        if self.global_batch_size is not None:
            if self.global_batch_size % per_micro_batch:
                raise SpecError(
                    "global_batch_size", _OWNER,
                    f"be a multiple of micro_batch_size*dp (= {per_micro_batch})", self.global_batch_size,
                )
            if self.micro_batch_num is not None and self.global_batch_size != per_micro_batch * self.micro_batch_num:
                raise SpecError(
                    "global_batch_size", _OWNER,
                    f"equal micro_batch_size*dp*micro_batch_num (= {per_micro_batch * self.micro_batch_num})",
                    self.global_batch_size,
                )
        elif per_micro_batch * self.micro_batch_num > MAX_BATCH:
            # The global batch this states is bounded as a stated one is.
            raise SpecError("micro_batch_num", _OWNER,
                            f"keep micro_batch_size*dp*micro_batch_num (the global batch) at most {MAX_BATCH} "
                            "(ndcost's upper bound for this size; see docs/LIMITS.md)", self.micro_batch_num)

    def _check_layout(self) -> None:
        if self.offset is not None:
            if _is_int(self.offset):
                # An int offset (the seed's strategy_exec passes one through)
                # shifts every stage alike.
                object.__setattr__(self, "offset", (self.offset,) * self.pp)
            else:
                grid = _int_grid(self.offset, "offset", self.pp, self.vpp, minimum=None, what="an int or ints")
                object.__setattr__(self, "offset", grid)
        if self.pp_partition is not None:
            if self.offset is not None:
                raise SpecError("pp_partition", _OWNER, "be None when offset is given (state one of them)",
                                self.pp_partition)
            value = self.pp_partition
            rule = f"be one layer count per stage (pp = {self.pp} integers >= 0)"
            if not isinstance(value, (list, tuple)) or len(value) != self.pp:
                raise SpecError("pp_partition", _OWNER, rule, value)
            for count in value:
                if not _is_int(count) or count < 0:
                    raise SpecError("pp_partition", _OWNER, rule, value)
            object.__setattr__(self, "pp_partition", tuple(value))

    def _check_recompute(self) -> None:
        recompute = self.recompute
        if isinstance(recompute, str):
            check_choice(recompute, "recompute", _OWNER, RECOMPUTE_OPTIONS)
        elif isinstance(recompute, (list, tuple)):
            ranges = tuple(_as_range(item) for item in recompute)
            previous_end = 0
            for item in ranges:
                if not isinstance(item, RecomputeRange):
                    raise SpecError("recompute", _OWNER, "hold only RecomputeRange entries", item)
                if item.first < previous_end:
                    raise SpecError(
                        "recompute", _OWNER,
                        "hold ranges sorted by first layer and not overlapping "
                        f"(this one must start at >= {previous_end})",
                        item,
                    )
                previous_end = item.end
            # No range at all recomputes nothing (seed apply_exec._ranges).
            object.__setattr__(self, "recompute", ranges if ranges else "none")
        else:
            raise SpecError(
                "recompute", _OWNER,
                "be 'none', 'full', 'selective' or a sequence of RecomputeRange", recompute,
            )
        for name in ("full_recompute", "selective_recompute"):
            value = getattr(self, name)
            if value is None or isinstance(value, bool):
                continue
            grid = _int_grid(value, name, self.pp, self.vpp, minimum=0, what="True/False or layer counts")
            object.__setattr__(self, name, grid)
        if self.recompute != "none" and (
            _states_per_stage(self.full_recompute) or _states_per_stage(self.selective_recompute)
        ):
            raise SpecError(
                "recompute", _OWNER,
                "be 'none' when full_recompute or selective_recompute states the recompute per stage",
                self.recompute,
            )
        if self.selective_switches is not None:
            switches = canonical_switches(self.selective_switches, "selective_switches", _OWNER)
            object.__setattr__(self, "selective_switches", MappingProxyType(switches))

    def _check_sharding(self) -> None:
        if isinstance(self.zero_stage, bool) or self.zero_stage not in ZERO_STAGES:
            raise SpecError("zero_stage", _OWNER, "be one of 0, 1, 2, 3", self.zero_stage)
        if self.optimizer_shard is not None:
            check_positive_int(self.optimizer_shard, "optimizer_shard", _OWNER, maximum=MAX_DEVICES)
            # ND: the OP ranks are "any divisor of DP" (ND_REFERENCE §4.1 loop 7).
            if self.dp % self.optimizer_shard:
                raise SpecError("optimizer_shard", _OWNER, f"divide dp ({self.dp})", self.optimizer_shard)
        if self.reshard_params is not None:
            check_bool(self.reshard_params, "reshard_params", _OWNER)
            # Only FSDP (ZeRO-3) gathers parameters, so only it can reshard them.
            if self.reshard_params and self.zero_stage != 3:
                raise SpecError("reshard_params", _OWNER, "be None or False unless zero_stage is 3", True)

    # ------------------------------------------------------------------ identity

    def __hash__(self) -> int:
        # selective_switches is a read-only proxy, which does not hash.
        return hash(tuple(
            tuple(value.items()) if type(value) is MappingProxyType else value
            for value in map(self.__getattribute__, _FIELD_NAMES)
        ))

    def __reduce__(self):
        # A mappingproxy neither pickles nor deep-copies: rebuild from plain values.
        return (_rebuild, (self._plain_fields(),))

    def _plain_fields(self) -> dict[str, Any]:
        state = {name: getattr(self, name) for name in _FIELD_NAMES}
        if state["selective_switches"] is not None:
            state["selective_switches"] = dict(state["selective_switches"])
        return state

    def replace(self, **changes: Any) -> ExecSpec:
        """A copy with *changes* applied, validated again."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ derived views

    @property
    def sp(self) -> int:
        """ND's sequence-parallel factor: tp with sequence parallelism, else 1
        (ND_REFERENCE §1.3 ``sp``; derive step 1)."""
        return self.tp if self.sequence_parallel else 1

    @property
    def schedule(self) -> str:
        """The pipeline schedule that runs: ``"1f1b"`` with vpp > 1 is
        ``"interleaved"`` (ND's 1f1b with vp > 1, ND_REFERENCE §3.6)."""
        if self.pp_schedule == "1f1b" and self.vpp > 1:
            return "interleaved"
        return self.pp_schedule

    @property
    def num_devices(self) -> int:
        """Devices the strategy occupies: dp*tp*pp*cp (ND's strategy_num_devices,
        ND_REFERENCE §1.3); EP folds into these."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def resolved_micro_batch_num(self) -> int:
        """Micro-batches per step: as stated, else global_batch_size // (micro_batch_size*dp)."""
        if self.micro_batch_num is not None:
            return self.micro_batch_num
        return self.global_batch_size // (self.micro_batch_size * self.dp)

    @property
    def resolved_global_batch_size(self) -> int:
        """Samples per step: as stated, else micro_batch_size*dp*micro_batch_num."""
        if self.global_batch_size is not None:
            return self.global_batch_size
        return self.micro_batch_size * self.dp * self.micro_batch_num

    @property
    def resolved_reshard_params(self) -> bool:
        """Whether FSDP reshards after forward: as stated, else True at zero_stage 3."""
        if self.reshard_params is not None:
            return self.reshard_params
        return self.zero_stage == 3

    @property
    def recompute_option(self) -> str:
        """How the spec states its recompute.

        ``"ranges"`` for a tuple of :class:`RecomputeRange`; for a per-stage
        statement, ``"full"``/``"selective"`` when it is ``True`` (every
        layer) and ``"per_stage"`` for layer counts (full wins over selective,
        as ND's partition generator reads ``full_rec`` first, ND_REFERENCE
        §1.6); else the ``recompute`` string (``"none"``, ``"full"``,
        ``"selective"``).
        """
        if isinstance(self.recompute, tuple):
            return "ranges"
        if _states_per_stage(self.full_recompute):
            return "full" if self.full_recompute is True else "per_stage"
        if _states_per_stage(self.selective_recompute):
            return "selective" if self.selective_recompute is True else "per_stage"
        return self.recompute

    @property
    def selective_setting(self) -> dict[str, int]:
        """The switches (1 keep, 0 recompute) a selective layer runs with:
        ``selective_switches`` if stated, else the ``selective_rule``'s."""
        return switches_from_mask(self.keep_mask)

    @property
    def keep_mask(self) -> int:
        """The selective setting as a keep mask (bit i set: ``SWITCHES[i]`` kept):
        ``selective_switches`` if stated, else the ``selective_rule``'s."""
        if self.selective_switches is not None:
            return mask_from_switches(self.selective_switches)
        return selective_keep_mask(
            self.selective_rule,
            flash_attention=self.flash_attention,
            sequence_parallel_degree=self.sp,
            comm_recompute=self.selective_comm_recompute,
        )

    def range_keep_mask(self, recompute_range: RecomputeRange) -> int:
        """The keep mask a range runs with: its own, or the spec's for a selective
        range that states no switches (ND_REFERENCE §1.4 derive step 7)."""
        own = recompute_range.keep_mask
        return self.keep_mask if own is None else own

    # ------------------------------------------------------------------ ND's keyword strategy

    @classmethod
    def from_strategy(
        cls,
        *,
        dp: int,
        mp: int,
        pp: int,
        mb: int,
        mbs: int = 1,
        op: int | None = None,
        sp: Any = None,
        ep: int = 1,
        etp: int | None = None,
        cp: int = 1,
        vpp: int = 1,
        offset: Any = None,
        full_rec: Any = None,
        sel_rec: Any = None,
        **fields: Any,
    ) -> ExecSpec:
        """The spec ND's keyword strategy (``set_strategy``'s keywords) states.

        Follows the seed ``apply_exec.strategy_exec`` (ND_REFERENCE §1.4):

        * ``mp`` is tp, ``mb`` micro_batch_num, ``mbs`` micro_batch_size, and
          global_batch_size = mbs*dp*mb.
        * ``op`` is the optimizer sharding: optimizer_shard = op, and the
          optimizer is sharded (zero_stage 1) when op > 1, not (zero_stage 0)
          otherwise -- unless *fields* states zero_stage itself.
        * ``sp``: sequence parallelism is ``bool(sp)`` where stated, else the
          run's (a ``sequence_parallel`` in *fields*), else on: the seed
          turns it "on at every TP degree for a run that states none".
        * ``etp`` <= 1 means "experts follow tp" in ND (derive step 2), which
          is ``etp=None`` here.
        * ``offset``, ``full_rec`` and ``sel_rec`` pass through as offset,
          full_recompute and selective_recompute; every other keyword
          (``seq_length``, ...) is an ExecSpec field passed through.
        """
        owner = "ExecSpec.from_strategy"
        stated: dict[str, Any] = {
            "dp": dp, "tp": mp, "pp": pp, "micro_batch_num": mb, "micro_batch_size": mbs,
            "ep": ep, "cp": cp, "vpp": vpp,
            "etp": None if _is_int(etp) and etp <= 1 else etp,
        }
        if offset is not None:
            stated["offset"] = offset
        if full_rec is not None:
            stated["full_recompute"] = full_rec
        if sel_rec is not None:
            stated["selective_recompute"] = sel_rec
        if op is not None:
            if not _is_int(op):
                raise SpecError("op", owner, "be an integer or None", op)
            if op > 1:
                stated["optimizer_shard"] = op
            # op <= 1 means no optimizer sharding (seed: optimizer_parallel = op > 1).
            if "zero_stage" not in fields:
                stated["zero_stage"] = 1 if op > 1 else 0
        for name in stated:
            if name in fields:
                raise SpecError(name, owner, "be stated once, by its ND keyword", fields[name])
        run_sp = fields.pop("sequence_parallel", None)
        stated["sequence_parallel"] = bool(sp) if sp is not None else (run_sp is None or bool(run_sp))
        if all(_is_int(value) for value in (mbs, dp, mb)):
            stated["global_batch_size"] = mbs * dp * mb
        if "global_batch_size" in fields:
            # A stated global batch must agree with mbs*dp*mb: ExecSpec checks it.
            stated["global_batch_size"] = fields.pop("global_batch_size")
        return cls(**stated, **fields)


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(ExecSpec))


def _rebuild(state: dict[str, Any]) -> ExecSpec:
    return ExecSpec(**state)


#: The rule groups of an ExecSpec, in the order __post_init__ runs them (ExecSpec.problems runs each).
_CHECKS = (ExecSpec._check_scalars, ExecSpec._check_pipeline, ExecSpec._check_batch, ExecSpec._check_layout,
           ExecSpec._check_recompute, ExecSpec._check_sharding)
