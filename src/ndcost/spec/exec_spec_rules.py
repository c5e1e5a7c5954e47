"""The rules an :class:`~ndcost.spec.exec_spec.ExecSpec`'s own fields obey, and the checks that enforce them.

The rules come in groups (scalars, pipeline, batch, layout, recompute, sharding), each a function of
a spec, run in :data:`CHECKS`' order: ``ExecSpec(...)`` stops at the first broken rule,
``ExecSpec.problems`` runs every group. A check that accepts a value in another form (a list, an int
offset, an int capacity factor, a dict of switches) stores its canonical form on the spec.

Every spec is checked when it is built, and a search builds one per candidate, so the scalar group
has a fast test (:func:`scalars_hold`): when every scalar is of its exact type and within its bounds,
as nearly every spec's are, the ordered check (which names the first broken rule) has nothing to
find and is skipped. Both read the same tables below.
"""
from __future__ import annotations

import dataclasses
import math
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import (
    SpecError, above_limit, check_bool, check_choice, check_positive_int, check_positive_number, is_finite_number,
)
from ..limits import (
    MAX_BATCH, MAX_BYTE_WIDTH, MAX_CAPACITY_FACTOR, MAX_DEVICES, MAX_LAYERS, MAX_OPTIMIZER_STATES, MAX_SEQ_LENGTH,
    MAX_SMS,
)
from .recompute_spec import RECOMPUTE_OPTIONS, SELECTIVE_RULES, RecomputeRange, canonical_switches
from .graph_scopes import CUDA_GRAPHS, canonical_graphs, graphs_as_named

__all__ = [
    "PP_SCHEDULES", "V_SCHEDULES", "EP_OVERLAPS", "DUALPIPE_SCHEDULES", "CP_ALGOS", "MOE_DISPATCHERS", "CUDA_GRAPHS",
    "CHOICE_SPELLINGS",
    "DEEPEP_RANKS", "PRECISIONS", "ZERO_STAGES", "DEGREE_LIMITS", "BYTE_LIMITS", "BOOL_FIELDS",
    "MOE_INT_RULES", "CHECKS", "scalars_hold", "is_int", "states_per_stage",
]

OWNER = "ExecSpec"

#: Pipeline schedules (docs/ND_MODEL.md §1.7 / §3.6): ND's ``1f1b`` (interleaved
#: when vpp > 1), ``zero_bubble_v`` (ND's DualPipeV: its V and its bubble, ND's rules), ``gpipe``,
#: ``seq1f1b`` (ND's ``seqpipe``/``seqsmartvpp``), and DeepSeek's own two (deepseek-ai/DualPipe):
#: ``dualpipe`` (bidirectional: device i runs stage i for half the micro-batches and stage pp-1-i
#: for the other half, two copies of the parameters) and ``dualpipev`` (its cut-in-half V: two
#: chunks a device, one copy), with that repository's requirements.
PP_SCHEDULES: tuple[str, ...] = ("1f1b", "interleaved", "zero_bubble_v", "gpipe", "seq1f1b", "dualpipe", "dualpipev")
#: The V schedules: a stage's second chunk runs the stages backwards (the layout's V).
V_SCHEDULES: tuple[str, ...] = ("zero_bubble_v", "dualpipev")
#: How the expert all-to-all overlaps compute (ExecSpec.ep_overlap): none; Megatron-Core's EP A2A
#: overlap of the 1F1B schedule (--overlap-moe-expert-parallel-comm); DualPipe's F&B chunks.
EP_OVERLAPS: tuple[str, ...] = ("none", "1f1b", "dualpipe")
#: Context-parallel algorithms: ring attention (ND's ``colossalai_cp``; Transformer Engine's P2P ring),
#: Ulysses, and ``ring-allgather``: PyTorch's ``context_parallel`` ring with ``rotate_method
#: "allgather"`` as torchtitan (9dec370) calls it -- the same sequence split, traffic and compute as
#: ``ring``, but a layer's backward holds every CP rank's K/V at once (as torchtitan's Llama passes
#: them: repeated per query head) and fp32 gradient accumulators (``ndcost.kernels.batch``).
CP_ALGOS: tuple[str, ...] = ("ring", "ulysses", "ring-allgather")
#: MoE token dispatchers: Megatron-Core's NCCL all-to-all ("alltoall"), DeepSeek's DeepEP (Megatron's
#: flex dispatcher with moe_enable_deepep), which keeps its own NVLink and RDMA buffers
#: (ndcost.tables.memory_overheads.deepep_buffer_bytes), or NVIDIA's HybridEP ("hybridep": the flex dispatcher's
#: hybridep backend, DeepEP's hybrid-ep branch), whose NVLink buffer holds every token of the group
#: (ndcost.spec.hybridep_rates). Seconds mode prices each dispatch and combine (ndcost.kernels.seconds_comm).
MOE_DISPATCHERS: tuple[str, ...] = ("alltoall", "deepep", "hybridep")
#: The schedules DualPipe's overlapped chunks run in (ep_overlap 'dualpipe'): ND's zero_bubble_v is DualPipeV.
DUALPIPE_SCHEDULES: tuple[str, ...] = ("dualpipe", "dualpipev", "zero_bubble_v")
#: The expert-parallel group sizes DeepEP has dispatch and combine configs for (deep_ep/buffers/legacy.py
#: Buffer.get_dispatch_config / get_combine_config; any other size is refused by an assertion).
DEEPEP_RANKS: frozenset[int] = frozenset((2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160))
#: Compute precisions.
PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8")
#: 0 DDP; 1 optimizer states sharded; 2 + gradients; 3 + parameters (FSDP).
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)

#: Each degree's bound (ndcost.limits): a device count, but pp and vpp, whose stages and chunks
#: each hold a layer.
DEGREE_LIMITS = MappingProxyType({"dp": MAX_DEVICES, "tp": MAX_DEVICES, "pp": MAX_LAYERS, "vpp": MAX_LAYERS,
                                  "cp": MAX_DEVICES, "ep": MAX_DEVICES})
BOOL_FIELDS: tuple[str, ...] = (
    "sequence_parallel",
    "mtp_in_offset",
    "emb_out_in_offset",
    "selective_comm_recompute",
    "recompute_slice_activation",
    "overlapped_grad_reduce",
    "overlapped_param_gather",
    "deferred_grad_accumulation",
    "shard_spans_cp",
    "flash_attention",
    "grouped_gemm",
    "vocab_emb_dp",
    "tp_overlap",
    "fp8_weight_cache",
    "moe_dispatch_fp8",
    "autocast",
    "grads_set_to_none",
    "moe_weighted_activation",
    "fp8_activation_storage",
    "fp8_transpose_cache",
    "zero3_parameter_fetch",
)
# Byte widths and their minimum: a main (master) parameter copy and a dropout
# mask may be absent (ND's DEFAULT_RUN has main_param_bytes 0 and
# dropout_bytes 0, docs/ND_MODEL.md §1.4 derive step 10); the rest are real widths.
_BYTE_MINIMUMS = (
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
                                for name, _ in _BYTE_MINIMUMS})

# The integer scalars as (field, minimum, maximum), in the order the scalar group checks them.
_DEGREE_RULES = tuple((name, 1, limit) for name, limit in DEGREE_LIMITS.items())
_SIZE_RULES = (("micro_batch_size", 1, MAX_BATCH), ("seq_length", 1, MAX_SEQ_LENGTH),
               ("seq_split", 1, MAX_SEQ_LENGTH), ("pp_runs", 1, MAX_BATCH))
_BYTE_RULES = tuple((name, minimum, BYTE_LIMITS[name]) for name, minimum in _BYTE_MINIMUMS)
#: The MoE integer settings as (field, minimum, maximum), checked with the MoE settings (a batch row's
#: bad_moe_setting, after bad_bytes and bad_choice; ndcost.price.candidate_rules reads the same).
MOE_INT_RULES = (("moe_dispatcher_sms", 1, MAX_SMS), ("moe_node_limit", 0, MAX_DEVICES),
                  ("moe_device_limit", 0, MAX_DEVICES))
_INT_RULES = _DEGREE_RULES + _SIZE_RULES + _BYTE_RULES + MOE_INT_RULES
#: A named choice's other spellings -> its name, for a field whose choices have more than one (a CUDA-graph set
#: in any order): what a command-line word or a batch's column is read through before its choices are checked.
CHOICE_SPELLINGS: Mapping[str, Any] = MappingProxyType({"cuda_graphs": graphs_as_named})
# The string scalars and their choices.
_CHOICE_RULES = (("cp_algo", CP_ALGOS), ("precision", PRECISIONS), ("selective_rule", SELECTIVE_RULES),
                 ("moe_dispatcher", MOE_DISPATCHERS), ("ep_overlap", EP_OVERLAPS), ("cuda_graphs", CUDA_GRAPHS))


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def states_per_stage(value: Any) -> bool:
    """Whether a full_recompute/selective_recompute value states any recompute."""
    return value is not None and value is not False


def _store(spec: Any, name: str, value: Any) -> None:
    """Put a field's canonical form on the (frozen) spec being checked."""
    object.__setattr__(spec, name, value)


# ----------------------------------------------------------------------------- scalars


def scalars_hold(values: dict[str, Any]) -> bool:
    """Whether every scalar of a spec's field *values* is of its exact type (int, bool, float, a
    choice) and within its bounds: then :func:`check_scalars` finds nothing and changes nothing.
    False means "check them in order", not "broken" (an int subclass, an int capacity factor pass)."""
    for name, minimum, maximum in _INT_RULES:
        value = values[name]
        if type(value) is not int or not minimum <= value <= maximum:
            return False
    for name in BOOL_FIELDS:
        if type(values[name]) is not bool:
            return False
    for name, choices in _CHOICE_RULES:
        if values[name] not in choices:
            return False
    etp, tie, dispatch = values["etp"], values["tie_embeddings"], values["moe_dispatch"]
    dispatches = values["moe_dispatch_count"]
    factor, imbalance = values["capacity_factor"], values["moe_imbalance"]
    # NaN fails every comparison and inf is past every bound, so these ranges hold only finite floats.
    return ((etp is None or (type(etp) is int and 1 <= etp <= MAX_DEVICES))
            and values["dp"] * values["tp"] * values["pp"] * values["cp"] <= MAX_DEVICES
            and (tie is None or type(tie) is bool)
            and type(factor) is float and 1.0 <= factor <= MAX_CAPACITY_FACTOR
            and type(imbalance) is float and 1.0 <= imbalance <= MAX_CAPACITY_FACTOR
            and (dispatch is None or (type(dispatch) is float and 0.0 <= dispatch < math.inf))
            and type(dispatches) is float and 0.0 <= dispatches < math.inf
            and (values["moe_dispatcher"] != "deepep" or values["ep"] == 1 or values["ep"] in DEEPEP_RANKS))


def check_scalars(spec: Any) -> None:
    for name, minimum, maximum in _DEGREE_RULES:
        check_positive_int(getattr(spec, name), name, OWNER, minimum=minimum, maximum=maximum)
    if spec.etp is not None:
        check_positive_int(spec.etp, "etp", OWNER, maximum=MAX_DEVICES)
    if spec.num_devices > MAX_DEVICES:
        # Each degree is bounded, but four of them multiply past any cluster (and past int64).
        raise SpecError("dp*tp*pp*cp", OWNER, above_limit(MAX_DEVICES), spec.num_devices)
    for name in BOOL_FIELDS:
        check_bool(getattr(spec, name), name, OWNER)
    for name, minimum, maximum in _SIZE_RULES + _BYTE_RULES:
        check_positive_int(getattr(spec, name), name, OWNER, minimum=minimum, maximum=maximum)
    _store(spec, "cuda_graphs", canonical_graphs(spec.cuda_graphs, OWNER))
    for name, choices in _CHOICE_RULES:
        check_choice(getattr(spec, name), name, OWNER, choices)
    if spec.tie_embeddings is not None:
        check_bool(spec.tie_embeddings, "tie_embeddings", OWNER)
    # MindFormers refuses a capacity factor below 1 (docs/ND_MODEL.md §1.4,
    # moe_config.capacity_factor (>= 1)): fewer slots than tokens routed.
    factor = spec.capacity_factor
    if not is_finite_number(factor) or factor < 1:
        raise SpecError("capacity_factor", OWNER, "be a finite number >= 1", factor)
    if factor > MAX_CAPACITY_FACTOR:
        raise SpecError("capacity_factor", OWNER, above_limit(MAX_CAPACITY_FACTOR), factor)
    _store(spec, "capacity_factor", float(factor))
    imbalance = spec.moe_imbalance
    if isinstance(imbalance, bool) or not is_finite_number(imbalance) or not 1.0 <= imbalance <= MAX_CAPACITY_FACTOR:
        raise SpecError("moe_imbalance", OWNER, f"be a finite number in [1, {MAX_CAPACITY_FACTOR:g}]", imbalance)
    _store(spec, "moe_imbalance", float(imbalance))
    if spec.moe_dispatch is not None:
        # 0 prices no dispatch at all (docs/ND_MODEL.md §2.3: "0 = none").
        dispatch = check_positive_number(spec.moe_dispatch, "moe_dispatch", OWNER, allow_zero=True)
        _store(spec, "moe_dispatch", dispatch)
    # ND's n_dispatch, a count (docs/ND_MODEL.md §2.3): 0 charges no dispatch, as ND's unset count.
    _store(spec, "moe_dispatch_count",
           check_positive_number(spec.moe_dispatch_count, "moe_dispatch_count", OWNER, allow_zero=True))
    for name, minimum, maximum in MOE_INT_RULES:
        check_positive_int(getattr(spec, name), name, OWNER, minimum=minimum, maximum=maximum)
    if spec.moe_dispatcher == "deepep" and spec.ep != 1 and spec.ep not in DEEPEP_RANKS:
        raise SpecError("ep", OWNER, "be 1 or a group size DeepEP has a config for "
                        f"({', '.join(map(str, sorted(DEEPEP_RANKS)))}) with moe_dispatcher='deepep'", spec.ep)


# ----------------------------------------------------------------------------- pipeline, batch


def check_pipeline(spec: Any) -> None:
    check_choice(spec.pp_schedule, "pp_schedule", OWNER, PP_SCHEDULES)
    if spec.vpp > 1 and spec.pp == 1:
        raise SpecError("vpp", OWNER, "be 1 when pp is 1 (vpp without pp)", spec.vpp)
    schedule = spec.pp_schedule
    if schedule == "interleaved" and spec.vpp == 1:
        raise SpecError("vpp", OWNER, "be > 1 with pp_schedule='interleaved'", spec.vpp)
    if schedule == "zero_bubble_v" and spec.vpp != 2:
        # DualPipeV runs each stage's two chunks in a V (docs/ND_MODEL.md §3.6:
        # its micro-factor is defined for vp <= 2 and returns 0 above).
        raise SpecError("vpp", OWNER, "be 2 with pp_schedule='zero_bubble_v' (DualPipeV's two chunks)", spec.vpp)
    if schedule == "dualpipe":
        # DualPipe's two chunks are its two directions' stages, not virtual stages; its ranks pair up
        # (rank i with pp-1-i): deepseek-ai/DualPipe dualpipe.py step(): assert num_ranks % 2 == 0
        if spec.vpp != 1:
            raise SpecError("vpp", OWNER, "be 1 with pp_schedule='dualpipe' (its two chunks are its two "
                            "directions' stages)", spec.vpp)
        if spec.pp % 2:
            raise SpecError("pp", OWNER, "be even with pp_schedule='dualpipe' (DualPipe pairs rank i with "
                            "rank pp-1-i)", spec.pp)
    if schedule == "dualpipev" and spec.vpp != 2:
        raise SpecError("vpp", OWNER, "be 2 with pp_schedule='dualpipev' (its V of two chunks)", spec.vpp)
    if schedule == "gpipe" and spec.vpp != 1:
        # ND's GPipe factor (p micro-batches in flight, §3.6) has no chunks.
        raise SpecError("vpp", OWNER, "be 1 with pp_schedule='gpipe'", spec.vpp)
    if spec.pp_runs != 1 and spec.pp == 1:
        raise SpecError("pp_runs", OWNER, "be 1 when pp is 1 (schedule runs without a pipeline)", spec.pp_runs)
    if spec.seq_split != 1:
        if schedule != "seq1f1b":
            raise SpecError("seq_split", OWNER, "be 1 unless pp_schedule is 'seq1f1b'", spec.seq_split)
        # Seq1F1B evaluates layers at s / n_s_split (docs/ND_MODEL.md §3.6).
        if spec.seq_length % spec.seq_split:
            raise SpecError("seq_split", OWNER, f"divide seq_length ({spec.seq_length})", spec.seq_split)


def check_batch(spec: Any) -> None:
    micro_batch_num, global_batch_size = spec.micro_batch_num, spec.global_batch_size
    if micro_batch_num is not None:
        check_positive_int(micro_batch_num, "micro_batch_num", OWNER, maximum=MAX_BATCH)
    if global_batch_size is not None:
        check_positive_int(global_batch_size, "global_batch_size", OWNER, maximum=MAX_BATCH)
    elif micro_batch_num is None:
        raise SpecError("global_batch_size", OWNER, "be given when micro_batch_num is not (state one of them)", None)
    # ND: gbs = b * d * m (docs/ND_MODEL.md §1.3 set_strategy; §4.1 "the
    # global batch must match").
    per_micro_batch = spec.micro_batch_size * spec.dp
    if global_batch_size is not None:
        if global_batch_size % per_micro_batch:
            raise SpecError(
                "global_batch_size", OWNER,
                f"be a multiple of micro_batch_size*dp (= {per_micro_batch})", global_batch_size,
            )
        if micro_batch_num is not None and global_batch_size != per_micro_batch * micro_batch_num:
            raise SpecError(
                "global_batch_size", OWNER,
                f"equal micro_batch_size*dp*micro_batch_num (= {per_micro_batch * micro_batch_num})",
                global_batch_size,
            )
    elif per_micro_batch * micro_batch_num > MAX_BATCH:
        # The global batch this states is bounded as a stated one is.
        raise SpecError("micro_batch_num", OWNER,
                        f"keep micro_batch_size*dp*micro_batch_num (the global batch) at most {MAX_BATCH} "
                        "(ndcost's upper bound for this size; see docs/LIMITS.md)", micro_batch_num)
    micro_batches = micro_batch_num if micro_batch_num is not None else global_batch_size // per_micro_batch
    if micro_batches % spec.pp_runs:
        raise SpecError("pp_runs", OWNER, f"divide the micro-batch count ({micro_batches}): each schedule run "
                        "takes the same number", spec.pp_runs)
    if spec.pp_schedule in ("dualpipe", "dualpipev"):
        _check_dualpipe_micro_batches(spec, micro_batches // spec.pp_runs)


def _check_dualpipe_micro_batches(spec: Any, micro_batches: int) -> None:
    """*micro_batches*: a schedule run's (pp_runs divides the step's). deepseek-ai/DualPipe (3da1bbe) step():
    DualPipe asserts ``num_chunks % 2 == 0 and num_chunks >= num_ranks * 2`` (half the micro-batches run each
    direction), DualPipeV ``num_chunks >= num_ranks * 2``."""
    name = "micro_batch_num" if spec.micro_batch_num is not None else "global_batch_size"
    value = getattr(spec, name)
    if micro_batches < 2 * spec.pp:
        raise SpecError(name, OWNER, f"give at least 2*pp (= {2 * spec.pp}) micro-batches with "
                        f"pp_schedule='{spec.pp_schedule}' (it gives {micro_batches})", value)
    if spec.pp_schedule == "dualpipe" and micro_batches % 2:
        raise SpecError(name, OWNER, f"give an even number of micro-batches with pp_schedule='dualpipe' "
                        f"(it gives {micro_batches}: half run each direction)", value)


# ----------------------------------------------------------------------------- layout


def _int_grid(value: Any, parameter: str, pp: int, vpp: int, *, minimum: int | None, what: str) -> tuple:
    """A 1-D (one int per stage) or 2-D (vpp rows of pp ints) list as tuples.

    The two shapes are ND's ``is_consistent_pp_config``: "the offset,
    full_rec and sel_rec lists must have length p, or be a vp x p list of
    lists" (docs/ND_MODEL.md §1.3).
    """
    shape_rule = f"be {what}: one int per stage (pp = {pp}) or vpp = {vpp} rows of pp = {pp} ints"
    if not isinstance(value, (list, tuple)) or not value:
        raise SpecError(parameter, OWNER, shape_rule, value)
    if all(isinstance(row, (list, tuple)) for row in value):
        if len(value) != vpp or any(len(row) != pp for row in value):
            raise SpecError(parameter, OWNER, shape_rule, value)
        items = [item for row in value for item in row]
        normalised: tuple = tuple(tuple(row) for row in value)
    else:
        if len(value) != pp:
            raise SpecError(parameter, OWNER, shape_rule, value)
        items = list(value)
        normalised = tuple(value)
    element_rule = "hold only integers" if minimum is None else f"hold only integers >= {minimum}"
    for item in items:
        if not is_int(item) or (minimum is not None and item < minimum):
            raise SpecError(parameter, OWNER, element_rule, item)
    return normalised


def check_layout(spec: Any) -> None:
    if spec.offset is not None:
        if is_int(spec.offset):
            # An int offset (the seed's strategy_exec passes one through)
            # shifts every stage alike.
            _store(spec, "offset", (spec.offset,) * spec.pp)
        else:
            _store(spec, "offset", _int_grid(spec.offset, "offset", spec.pp, spec.vpp, minimum=None,
                                              what="an int or ints"))
    if spec.pp_partition is not None:
        if spec.offset is not None:
            raise SpecError("pp_partition", OWNER, "be None when offset is given (state one of them)",
                            spec.pp_partition)
        value = spec.pp_partition
        rule = f"be one layer count per stage (pp = {spec.pp} integers >= 0)"
        if not isinstance(value, (list, tuple)) or len(value) != spec.pp:
            raise SpecError("pp_partition", OWNER, rule, value)
        for count in value:
            if not is_int(count) or count < 0:
                raise SpecError("pp_partition", OWNER, rule, value)
        _store(spec, "pp_partition", tuple(value))


# ----------------------------------------------------------------------------- recompute, sharding


_RANGE_KEYS = tuple(f.name for f in dataclasses.fields(RecomputeRange))


def _as_range(item: Any) -> Any:
    """A RecomputeRange from a mapping of its fields (a YAML/JSON entry); other items as given."""
    if not isinstance(item, Mapping):
        return item
    for key in item:
        if key not in _RANGE_KEYS:
            raise SpecError("recompute", OWNER, f"hold ranges with only the keys {', '.join(_RANGE_KEYS)}", key)
    missing = [key for key in ("first", "count", "option") if key not in item]
    if missing:
        raise SpecError("recompute", OWNER, "hold ranges that state first, count and option",
                        f"{dict(item)} (no {', '.join(missing)})")
    return RecomputeRange(**item)


def check_recompute(spec: Any) -> None:
    recompute = spec.recompute
    if isinstance(recompute, str):
        check_choice(recompute, "recompute", OWNER, RECOMPUTE_OPTIONS)
    elif isinstance(recompute, (list, tuple)):
        ranges = tuple(_as_range(item) for item in recompute)
        previous_end = 0
        for item in ranges:
            if not isinstance(item, RecomputeRange):
                raise SpecError("recompute", OWNER, "hold only RecomputeRange entries", item)
            if item.first < previous_end:
                raise SpecError(
                    "recompute", OWNER,
                    "hold ranges sorted by first layer and not overlapping "
                    f"(this one must start at >= {previous_end})",
                    item,
                )
            previous_end = item.end
        # No range at all recomputes nothing (seed apply_exec._ranges).
        _store(spec, "recompute", ranges if ranges else "none")
    else:
        raise SpecError(
            "recompute", OWNER,
            "be 'none', 'full', 'selective' or a sequence of RecomputeRange", recompute,
        )
    per_stage = False
    for name in ("full_recompute", "selective_recompute"):
        value = getattr(spec, name)
        if value is None or value is False:
            continue
        per_stage = True
        if value is not True:
            _store(spec, name, _int_grid(value, name, spec.pp, spec.vpp, minimum=0,
                                         what="True/False or layer counts"))
    if per_stage and spec.recompute != "none":
        raise SpecError(
            "recompute", OWNER,
            "be 'none' when full_recompute or selective_recompute states the recompute per stage",
            spec.recompute,
        )
    if spec.selective_switches is not None:
        switches = canonical_switches(spec.selective_switches, "selective_switches", OWNER)
        _store(spec, "selective_switches", MappingProxyType(switches))


def check_sharding(spec: Any) -> None:
    if isinstance(spec.zero_stage, bool) or spec.zero_stage not in ZERO_STAGES:
        raise SpecError("zero_stage", OWNER, "be one of 0, 1, 2, 3", spec.zero_stage)
    if spec.optimizer_shard is not None:
        check_positive_int(spec.optimizer_shard, "optimizer_shard", OWNER, maximum=MAX_DEVICES)
        # ND: the OP ranks are "any divisor of DP" (docs/ND_MODEL.md §4.1 loop 7).
        if spec.dp % spec.optimizer_shard:
            raise SpecError("optimizer_shard", OWNER, f"divide dp ({spec.dp})", spec.optimizer_shard)
    if spec.reshard_params is not None:
        check_bool(spec.reshard_params, "reshard_params", OWNER)
        # Only FSDP (ZeRO-3) gathers parameters, so only it can reshard them.
        if spec.reshard_params and spec.zero_stage != 3:
            raise SpecError("reshard_params", OWNER, "be None or False unless zero_stage is 3", True)


# ----------------------------------------------------------------------------- MoE communication


def recomputes_fully(spec: Any) -> bool:
    """Whether any layer recomputes fully (Megatron-Core's recompute_granularity 'full')."""
    if spec.recompute == "full" or states_per_stage(spec.full_recompute):
        return True
    return isinstance(spec.recompute, tuple) and any(getattr(item, "option", None) == "full" for item in spec.recompute)


def check_moe(spec: Any) -> None:
    """The expert all-to-all's own rules: what each overlap needs, and fp8 dispatch's precision."""
    if spec.autocast and (spec.param_bytes != 4 or spec.compute_bytes != 2):
        raise SpecError("autocast", OWNER, "be False unless param_bytes is 4 and compute_bytes 2 (autocast runs "
                        f"fp32 parameters in 16-bit kernels; param_bytes is {spec.param_bytes}, compute_bytes "
                        f"{spec.compute_bytes})", spec.autocast)
    if spec.moe_dispatch_fp8 and spec.precision != "fp8":
        raise SpecError("moe_dispatch_fp8", OWNER, "be False unless precision is 'fp8' (the dispatch is "
                        "quantized for the fp8 expert GEMMs)", spec.moe_dispatch_fp8)
    if spec.fp8_activation_storage and spec.precision != "fp8":
        raise SpecError("fp8_activation_storage", OWNER, "be False unless precision is 'fp8' (DeepSeek-V3 stores "
                        "these activations in the formats of its fp8 training)", spec.fp8_activation_storage)
    if not spec.fp8_transpose_cache and not (spec.precision == "fp8" and spec.fp8_weight_cache):
        raise SpecError("fp8_transpose_cache", OWNER, "be True unless precision is 'fp8' and fp8_weight_cache is "
                        "True (only a kept fp8 weight has a transpose to keep or not)", spec.fp8_transpose_cache)
    if spec.zero3_parameter_fetch and spec.zero_stage != 3:
        raise SpecError("zero3_parameter_fetch", OWNER, "be False unless zero_stage is 3 (only ZeRO-3 gathers "
                        f"parameters; zero_stage is {spec.zero_stage})", spec.zero3_parameter_fetch)
    overlap = spec.ep_overlap
    if overlap == "none":
        return
    if spec.ep == 1:
        raise SpecError("ep_overlap", OWNER, "be 'none' when ep is 1 (no expert all-to-all to overlap)", overlap)
    if overlap == "dualpipe":
        if spec.pp_schedule not in DUALPIPE_SCHEDULES:
            raise SpecError("ep_overlap", OWNER, "be 'dualpipe' only with pp_schedule 'dualpipe', 'dualpipev' or "
                            f"'zero_bubble_v' (their overlapped chunks; pp_schedule is '{spec.pp_schedule}')",
                            overlap)
        return
    # Megatron-Core's EP A2A overlap (core v0.14+, transformer_config.py __post_init__): a combined
    # 1F1B schedule; with pp > 1 the interleaved one; no full recompute
    if spec.pp_schedule not in ("1f1b", "interleaved"):
        raise SpecError("ep_overlap", OWNER, "be '1f1b' only with pp_schedule '1f1b' or 'interleaved' "
                        f"(Megatron-Core's combined 1F1B schedule; pp_schedule is '{spec.pp_schedule}')", overlap)
    if spec.pp > 1 and spec.vpp == 1:
        raise SpecError("ep_overlap", OWNER, "be '1f1b' with pp > 1 only when vpp > 1 (Megatron-Core: "
                        "virtual_pipeline_model_parallel_size must be specified when pp > 1)", overlap)
    if recomputes_fully(spec):
        raise SpecError("ep_overlap", OWNER, "be '1f1b' only without full recompute (Megatron-Core: "
                        "disable full recomputation when enabling overlap_moe_expert_parallel_comm)", overlap)


#: The rule groups of an ExecSpec, in the order its construction runs them (ExecSpec.problems runs each).
CHECKS = (check_scalars, check_pipeline, check_batch, check_layout, check_recompute, check_sharding, check_moe)
