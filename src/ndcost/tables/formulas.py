"""One table of formulas for one candidate and for a million: derived values, kernel
vectors and the joint validity rules, written once.

Every function here takes an *ops* object first and a mapping *c* of ExecSpec
field values:

* :data:`SCALAR`: *c* is an :class:`~ndcost.spec.exec_spec.ExecSpec`'s ``__dict__``
  (Python ints, bools, strings, ``None`` for an unstated optional field). This
  is what :func:`ndcost.tables.derive.derive`, ``estimate()`` and ``memory_estimate()``
  run, one candidate at a time, at Python-scalar speed.
* :data:`ARRAY`: *c* holds the numpy columns of a :class:`~ndcost.price.candidates.Candidates`
  (int64, bool, and the storage codes of ``ndcost.price.candidates``: ``NONE_INT`` for an
  unstated optional int, -1/0/1 for an optional bool, NaN for an unstated
  ``moe_dispatch``, choice fields as their index in the choices tuple). This is
  what ``estimate_many()`` runs, vectorised.

The same expressions, in the same order of operations, run in both modes, so a
batch row and the single-candidate path cannot drift: int64 and Python-int
arithmetic agree for these magnitudes, and numpy's float64 operations are
Python's. Both branches of ``ops.where`` are evaluated on columns, so every
division below has a divisor that is valid whenever the row is (and invalid rows
are computed under ``np.errstate(all="ignore")`` and never priced).

One candidate at a time runs the *scalar twins* (``derived_columns_scalar`` ...): these
functions with each ``ops`` call written out as the plain Python of :class:`SCALAR`'s
method (``where(a, b, c)`` -> ``b if a else c``, ``ops.stated(x)`` -> ``x is not None``),
so a call costs no per-operation function calls. ``tools/gen_formulas.py`` writes them
into ``ndcost.tables.formulas_scalar`` (checked in, do not edit; tests/test_formulas.py fails
when it is stale). Call them with ``ops=SCALAR``, like the functions here. ``estimate()``'s one
candidate runs *fused twins* (``joint_nd_memory_candidate_scalar`` ...,
``ndcost.tables.formulas_fused``, generated alike): the joint rules, the derived values and
the candidate vectors in one function, no dict between them.

The formulas' sources are cited where the values are defined: :class:`ndcost.tables.derive.Derived`
(docs/ND_MODEL.md §1.4), ``ndcost.tables.nd_tables`` (the ND candidate vector), ``ndcost.tables.memory``
(the memory model), ``ndcost.tables.joint_rules`` (the joint rules, whose order fixes which
reason a row with several broken rules reports).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from .formulas_ops import (
    ARRAY, CHOICES, COMM_DP_OVERLAP, COMM_TP_OVERLAP, INTERLEAVED_SCHEDULE, MEMORY_CP_ALLGATHER, MEMORY_CP_RING,
    MEMORY_CP_ULYSSES, MEMORY_SCHEDULE_BY_PP_SCHEDULE, NONE_INT,
    SCALAR, ClusterConstants, ModelConstants,
)
from .formulas_fused import joint_derived_memory_candidate_scalar, joint_nd_memory_candidate_scalar
from .formulas_scalar import (
    derived_columns_scalar, derived_extra_columns_scalar, joint_reason_scalar, memory_candidate_columns_scalar,
    fixed_bytes_columns_scalar, nd_candidate_columns_scalar, seconds_candidate_columns_scalar,
)

if TYPE_CHECKING:
    from .seconds import Overlap

__all__ = [
    "SCALAR", "ARRAY", "NONE_INT", "COMM_DP_OVERLAP", "COMM_TP_OVERLAP", "CHOICES", "MEMORY_SCHEDULE_BY_PP_SCHEDULE",
    "derived_columns", "derived_extra_columns", "derived_extra_columns_scalar", "nd_candidate_columns", "memory_candidate_columns", "joint_reason",
    "seconds_candidate_columns", "seconds_candidate_columns_scalar", "fixed_bytes_columns",
    "fixed_bytes_columns_scalar",
    "derived_columns_scalar", "nd_candidate_columns_scalar", "memory_candidate_columns_scalar",
    "joint_reason_scalar", "joint_nd_memory_candidate_scalar", "joint_derived_memory_candidate_scalar",
    "ModelConstants", "ClusterConstants",
]


# --------------------------------------------------------------------------- derived values


def derived_columns(ops: Any, c: Mapping[str, Any], mc: ModelConstants) -> dict[str, Any]:
    """ND's derived values the kernels' candidate vectors read, by :class:`ndcost.tables.derive.Derived` field name.

    docs/ND_MODEL.md §1.4 derive steps 1-5, 10; each value is documented on ``Derived``.
    ``d_exp < 1`` (no expert data-parallel rank) is left to the caller to refuse.
    :func:`derived_extra_columns` adds the rest of ``Derived`` (but ``keep_mask``).
    """
    where = ops.where
    dp, tp, pp, cp, ep = c["dp"], c["tp"], c["pp"], c["cp"], c["ep"]
    n_exp = mc.num_experts
    # Step 2: expert degrees. A stated etp is used as is; else experts follow tp,
    # or run unsplit when EP borrows the TP ranks (tp*ep > dp*tp).
    etp_stated = ops.stated(c["etp"])
    etp = ops.opt_int(c["etp"], 1)
    t_exp = where(etp_stated, etp, where(tp * ep > dp * tp, 1, tp))
    d_exp = where(etp_stated, dp * tp * cp // etp // ep, where(dp >= ep, dp // ep, dp * tp // ep))
    # Step 3: optimizer and gradient sharding.
    zero = c["zero_stage"]
    has_op = zero >= 1
    has_grad_shard = zero >= 2
    os_ranks = where(has_op, ops.opt_int(c["optimizer_shard"], dp), 1)
    cp_shard = where(c["shard_spans_cp"], cp, 1)
    expert_ranks = dp * cp * tp // (ep * t_exp)
    # Step 10's micro-batches (gbs = b*d*m, §1.3 set_strategy). A stated value is read as is (on
    # columns ``where`` drops the unstated rows' sentinel); the other branch must not see None.
    micro_batch_num = where(ops.stated(c["micro_batch_num"]), c["micro_batch_num"],
                            ops.opt_int(c["global_batch_size"], 0) // (c["micro_batch_size"] * dp))
    return {
        "sp": where(c["sequence_parallel"], tp, 1),                                 # step 1
        "t_exp": t_exp,
        "d_exp": d_exp,
        "expert_data_parallel": ops.maximum(1, expert_ranks),
        "has_op": has_op,
        "has_grad_shard": has_grad_shard,
        "grad_shard_as_params": zero == 3,
        "os_ranks": os_ranks,
        "shard_p_os_non_exp_partial": os_ranks * tp * cp_shard,
        "shard_p_os_exp_partial": ops.gcd(n_exp, os_ranks * t_exp),
        "shard_p_os_exp": where(has_op, d_exp, 1) * cp_shard * t_exp,
        # Step 4: comm flags (0 none, 2 ZeRO-1, 3 gradient sharding; §2.6).
        "comm_d_non_exp": where((dp == 1) | ops.not_(has_op), 0, where(has_grad_shard, 3, 2)),
        "comm_d_exp": where((d_exp == 1) | ops.not_(has_op), 0, where(has_grad_shard, 3, 2)),
        "comm_t": ops.int_(tp > 1),
        "comm_ep": ops.int_((ep > 1) | (n_exp > 1)),
        "comm_cp": ops.int_(cp > 1),
        "comm_dp_overlap": COMM_DP_OVERLAP,
        "comm_tp_overlap": COMM_TP_OVERLAP,
        # Step 5: the embedding's shards.
        "shard_embed": where(has_op, dp, 1) * where(c["vocab_emb_dp"] & (pp == 1), 1, tp),
        # Step 10: byte widths (ND's gradient bytes only with pp > 1 or grad_accumulation).
        "nd_bytes_grad": where((pp > 1) | (micro_batch_num > 1), c["grad_bytes"], 0),
        "bytes_grad": c["grad_bytes"],
        "bytes_optim": c["optimizer_states"] * c["optimizer_state_bytes"] + c["main_param_bytes"],
        "zero_shard_ranks": where(has_op, os_ranks * cp_shard, 1),
        "micro_batch_num": micro_batch_num,
        "tie_embeddings": ops.opt_bool(c["tie_embeddings"], mc.tie),
        "reshards": ops.opt_bool(c["reshard_params"], zero == 3),
        "defers_grads": c["deferred_grad_accumulation"],
    }


def derived_extra_columns(ops: Any, c: Mapping[str, Any], mc: ModelConstants, d: Mapping[str, Any]) -> dict[str, Any]:
    """The rest of :class:`ndcost.tables.derive.Derived` (no kernel reads these), from *d* = :func:`derived_columns`."""
    where = ops.where
    tp = c["tp"]
    has_grad_shard = d["has_grad_shard"]
    cp_shard = where(c["shard_spans_cp"], c["cp"], 1)
    shard_p_os_non_exp = where(d["has_op"], c["dp"], 1) * cp_shard * tp                   # step 3
    seq = c["seq_length"]
    mbs_dp = c["micro_batch_size"] * c["dp"]
    return {
        "shard_p_os_non_exp": shard_p_os_non_exp,
        "shard_grad_non_exp": where(d["grad_shard_as_params"], d["shard_p_os_non_exp_partial"],
                                    where(has_grad_shard, shard_p_os_non_exp, tp)),
        "shard_grad_exp": where(has_grad_shard, d["shard_p_os_exp"], d["t_exp"]),
        "shard_grad_exp_partial": where(has_grad_shard, d["shard_p_os_exp_partial"], d["t_exp"]),
        "shard_recompute_input": where(c["recompute_slice_activation"], tp, 1),           # step 10
        "shard_output_activ": 1,
        "s_fa": where(c["flash_attention"], seq / mc.heads, ops.float_(seq)),             # step 8
        "grad_accumulation": d["micro_batch_num"] > 1,
        "bytes_optim_table": 2 * c["optimizer_state_bytes"] + c["main_param_bytes"],
        "global_batch_size": where(ops.stated(c["global_batch_size"]), c["global_batch_size"],
                                   mbs_dp * d["micro_batch_num"]),
        "overlaps_grad_reduce": c["overlapped_grad_reduce"],
    }


# --------------------------------------------------------------------------- kernel vectors


def nd_candidate_columns(ops: Any, c: Mapping[str, Any], d: Mapping[str, Any],
                         cc: ClusterConstants, moe_dispatch_default: float) -> tuple:
    """The ND candidate vector (``ndcost.kernels.columns.CAND_FIELDS`` order) of *c* with derived values *d*."""
    where = ops.where
    return (
        c["micro_batch_size"], c["seq_length"], c["tp"], d["sp"], c["cp"],        # b, s, t, sp, cp
        c["ep"], d["t_exp"], c["dp"], d["d_exp"], c["pp"],                         # ep, t_exp, d, d_exp, p
        c["vpp"], d["micro_batch_num"],                                            # vp, m
        c["param_bytes"], c["compute_bytes"], d["nd_bytes_grad"],                  # bytes_p, bytes_c, bytes_grad
        # ND's dispatch entry times the layer's count n_dispatch (docs/ND_MODEL.md §2.3; 0: none, ND's unset count)
        c["capacity_factor"], ops.opt_float(c["moe_dispatch"], moe_dispatch_default) * c["moe_dispatch_count"],
        d["comm_d_non_exp"], d["comm_d_exp"], d["comm_t"], d["comm_ep"], d["comm_cp"],
        where(ops.is_choice(c, "cp_algo", "ulysses"), 0.0, 1.0),                   # cp_ring
        d["shard_p_os_non_exp_partial"], d["shard_p_os_exp"], d["shard_p_os_exp_partial"],
        d["shard_embed"], 1.0,                                                     # gather_embed: 1 (ND's default)
        where(d["grad_shard_as_params"], 1.0, 0.0),                                # fsdp
        where(d["reshards"], 1.0, 0.0),                                            # reshard
        where(d["tie_embeddings"], 1.0, 0.0),                                      # tie_emb
        cc.dpn, cc.is_a3,                                                          # dpn, is_a3
        d["comm_dp_overlap"], d["comm_tp_overlap"],                                # dp_overlap, tp_overlap
        0.0,                                                                       # ep_local_tokens: balanced
    )


def memory_candidate_columns(ops: Any, c: Mapping[str, Any], d: Mapping[str, Any]) -> tuple:
    """The memory candidate vector (``ndcost.kernels.columns.MEMORY_CAND_FIELDS`` order): what
    ``ndcost.tables.memory`` reads off the spec, its ZeRO divisors and byte widths (ZeRO,
    Rajbhandari et al. 2020 §5; Megatron's expert data-parallel group).

    Entries are ints or floats: the caller packs them into float64, which converts an
    int exactly as ``float()`` would (so no entry pays for a conversion here)."""
    where = ops.where
    seq_length = c["seq_length"]
    seq = where(ops.is_choice(c, "pp_schedule", "seq1f1b"), seq_length / c["seq_split"], seq_length)
    zero = c["zero_stage"]
    has_op = d["has_op"]
    # Non-expert state shards over the ZeRO group; a routed expert over its expert
    # data-parallel group, narrowed like it when the optimizer shards part of dp or not cp.
    non_expert = d["zero_shard_ranks"]
    ranks = d["expert_data_parallel"] * d["os_ranks"] / c["dp"]
    ranks = where(c["shard_spans_cp"], ranks, ranks / c["cp"])
    expert = where(has_op, ops.maximum(1.0, ranks), 1.0)
    shards_params = (zero == 3) & d["reshards"]          # ZeRO-3 resharding after forward
    shards_grads = (zero >= 2) & ops.not_(d["defers_grads"])  # reduced as the backward goes
    return (
        seq, c["micro_batch_size"], c["tp"], d["sp"], c["cp"],
        d["t_exp"], c["ep"],
        c["pp"], c["vpp"], d["micro_batch_num"], c["seq_split"],
        ops.memory_schedule(c),
        where(c["grouped_gemm"], c["moe_imbalance"], c["capacity_factor"]),    # token_factor
        where(c["flash_attention"], 1.0, 0.0), where(c["recompute_slice_activation"], 1.0, 0.0),
        c["compute_bytes"], c["softmax_bytes"], c["dropout_bytes"],
        c["norm_bytes"],
        # bytes_linear: under fp8 Transformer Engine's modules (fp8_weight_cache: TE, not torchao's
        # Float8Linear) save the fp8 copy of a linear's input (kernels/memory.py, above _ffn_bytes)
        where(ops.is_choice(c, "precision", "fp8") & c["fp8_weight_cache"], 1.0, c["compute_bytes"]),
        c["param_bytes"], d["bytes_grad"], d["bytes_optim"],
        where(shards_params, non_expert, 1.0), where(shards_grads, non_expert, 1.0),
        where(zero >= 1, non_expert, 1.0),
        where(shards_params, expert, 1.0), where(shards_grads, expert, 1.0), where(zero >= 1, expert, 1.0),
        where(shards_params, 1.0, 0.0),                                         # fsdp_gathers
        where(shards_grads, 1.0, 0.0),
        # cp_ring: Ulysses, the P2P ring or PyTorch's all-gather ring (ndcost.kernels.codes.MEMORY_CP)
        where(ops.is_choice(c, "cp_algo", "ulysses"), MEMORY_CP_ULYSSES,
              where(ops.is_choice(c, "cp_algo", "ring-allgather"), MEMORY_CP_ALLGATHER, MEMORY_CP_RING)),
        where(d["tie_embeddings"], 1.0, 0.0),
        c["logit_bytes"],
        # fp8 weight cache bytes per weight parameter (ExecSpec.fp8_weight_cache): the fp8 copy unless the
        # weights are fp8 already, and the transpose unless made for each backward (fp8_transpose_cache)
        where(ops.is_choice(c, "precision", "fp8") & c["fp8_weight_cache"],
              where(c["param_bytes"] == 1, 0.0, 1.0) + where(c["fp8_transpose_cache"], 1.0, 0.0), 0.0),
        where(c["autocast"], 1.0, 0.0),                                          # autocast
        where(c["grads_set_to_none"], 1.0, 0.0),                                 # grads_none
        where(c["moe_weighted_activation"], 1.0, 0.0),                           # moe_weighted_act
        where(c["fp8_activation_storage"], 1.0, 0.0),                            # fp8_act_store
        where(c["zero3_parameter_fetch"], 1.0, 0.0),                             # z3_param_fetch
    )


def seconds_candidate_columns(ops: Any, c: Mapping[str, Any], d: Mapping[str, Any], overlap: "Overlap",
                              fp8_dispatch_bytes: float) -> tuple:
    """The seconds candidate vector (``_columns.SECONDS_CAND_FIELDS`` order) of *c* with derived values *d*:
    what ``ndcost.tables.seconds``'s kernels read off the spec (each field documented there).

    *overlap* is an :class:`~ndcost.tables.seconds.Overlap`: a share it leaves ``None`` takes the spec's
    own switch (``Overlap.shares``). *fp8_dispatch_bytes*: bytes an element of an fp8 expert dispatch
    moves (``ndcost.tables.seconds.FP8_DISPATCH_BYTES``, with its source)."""
    where = ops.where
    compute_bytes = c["compute_bytes"]
    schedule_1f1b = ops.is_choice(c, "pp_schedule", "1f1b")
    return (
        c["micro_batch_size"], c["seq_length"], c["tp"], d["sp"], c["cp"],                  # b, s, t, sp, cp
        c["ep"], d["t_exp"], c["dp"], d["expert_data_parallel"],                             # ep, t_exp, d, edp
        c["pp"], c["vpp"], d["micro_batch_num"], c["seq_split"],                             # p, vp, m, seq_split
        compute_bytes, where(ops.is_choice(c, "precision", "fp8"), 1, compute_bytes),        # bytes_c, bytes_mm
        c["param_bytes"], d["bytes_grad"],
        # bytes_opt: Adam reads and writes each state and the master copy, reads the gradient
        # twice (clipping's norm, then the update), writes the 16-bit parameter
        2.0 * c["optimizer_states"] * c["optimizer_state_bytes"] + 2.0 * c["main_param_bytes"]
        + 2.0 * c["grad_bytes"] + c["param_bytes"],
        c["dropout_bytes"],
        c["flash_attention"], c["grouped_gemm"], c["capacity_factor"],                        # flash, dropless, cap_fact
        ops.not_(ops.is_choice(c, "cp_algo", "ulysses")), c["moe_imbalance"],               # cp_ring, moe_imb
        c["zero_stage"], d["zero_shard_ranks"], d["defers_grads"], d["reshards"], d["tie_embeddings"],
        # schedule: ExecSpec.schedule's SCHEDULES code (1f1b with vpp > 1 runs interleaved)
        where(schedule_1f1b & (c["vpp"] > 1), INTERLEAVED_SCHEDULE, ops.schedule_code(c)),
        # Overlap.shares: a share left None takes the spec's switch
        where(c["overlapped_grad_reduce"], 1.0, 0.0) if overlap.dp_reduce is None else overlap.dp_reduce,
        where(c["overlapped_param_gather"], 1.0, 0.0) if overlap.dp_gather is None else overlap.dp_gather,
        overlap.fsdp_prefetch,
        where(c["tp_overlap"], 1.0, 0.0) if overlap.tp is None else overlap.tp,
        overlap.cp,
        where(ops.is_choice(c, "ep_overlap", "none"), 0.0, 1.0) if overlap.ep is None else overlap.ep,
        # the expert all-to-all: its overlap mode and dispatcher as their codes (ndcost.kernels.codes' EP_OVERLAPS
        # and DISPATCHERS are ExecSpec's choices)
        ops.choice_code(c, "ep_overlap"), ops.choice_code(c, "moe_dispatcher"), c["moe_dispatcher_sms"],
        c["moe_node_limit"],
        where(c["moe_dispatch_fp8"], fp8_dispatch_bytes, compute_bytes),                  # disp_b
        ops.choice_code(c, "cuda_graphs"),                                                   # graphs
        where(c["autocast"], 1.0, 0.0),                                                      # autocast
        c["pp_runs"],                                                                        # pp_runs
        c["moe_device_limit"],                                                               # ep_devs
    )


def fixed_bytes_columns(ops: Any, c: Mapping[str, Any], base_bytes: float, ring_bytes: float, pair_bytes: float,
                        all_to_all_bytes: float) -> tuple:
    """(bytes a rank holds outside its tensors, DeepEP's buffers aside,): *base_bytes* (the CUDA context and
    the cuBLAS workspaces), then NCCL's buffers for each communicator the strategy uses -- a ring for tp,
    for the data-parallel group (dp·cp, the gradients' and ZeRO's), for cp and for the world (the loss and
    gradient-norm reductions), a pair for the pipeline's send/recv, an all-to-all for ep.
    :func:`ndcost.tables.memory_overheads.fixed_bytes` calls it with its figures, each with its source."""
    where = ops.where
    dp, tp, pp, cp, ep = c["dp"], c["tp"], c["pp"], c["cp"], c["ep"]
    rings = (where(tp > 1, 1.0, 0.0) + where(dp * cp > 1, 1.0, 0.0) + where(cp > 1, 1.0, 0.0)
             + where(dp * tp * pp * cp > 1, 1.0, 0.0))
    return (base_bytes + (rings * ring_bytes + where(pp > 1, 1.0, 0.0) * pair_bytes
                          + where(ep > 1, 1.0, 0.0) * all_to_all_bytes),)


# --------------------------------------------------------------------------- joint rules


def joint_reason(ops: Any, c: Mapping[str, Any], mc: ModelConstants, cc: ClusterConstants | None,
                 layout_bad: Any, allow_cross_node_tp: bool, codes: Mapping[str, int]) -> Any:
    """The first joint (model, spec, cluster) rule a candidate breaks, as a reason code (0: none).

    The rules and their order are ndcost.tables.joint_rules's (its module docstring, rules 1-8),
    then derive's refusal of a missing expert data-parallel rank. *layout_bad* is
    rule 7 (offsets, partitions, ranges against the model), decided per layout by
    ``validate``'s own code. *c* must hold valid ExecSpec values (ExecSpec's own rules
    passed); in array mode the caller ignores rows that did not.
    """
    where = ops.where
    dp, tp, pp, vpp, cp, ep = c["dp"], c["tp"], c["pp"], c["vpp"], c["cp"], c["ep"]
    s = c["seq_length"]
    rules = []
    # 1. The strategy fills the cluster exactly; on a bare device, its own devices must make
    #    a Cluster (within one node, or whole nodes).
    if cc is not None and cc.num_devices is not None:
        rules.append(("devices", dp * tp * pp * cp != cc.num_devices))
    elif cc is not None:
        devices = dp * tp * pp * cp
        rules.append(("whole_nodes", (devices > cc.devices_per_node) & (devices % cc.devices_per_node != 0)))
    # 2. tp divides the heads (kv heads unless MLA; linear-attention heads).
    rules.append(("tp_heads", mc.heads % tp != 0))
    if not mc.is_mla:
        rules.append(("tp_kv_heads", mc.kv_heads % tp != 0))
    if mc.has_linear:
        rules.append(("tp_linear_heads", (mc.linear_k_heads % tp != 0) | (mc.linear_v_heads % tp != 0)))
    if mc.has_mamba:
        broken = mc.mamba_splits[0] % tp != 0
        for width in mc.mamba_splits[1:]:
            broken = broken | (width % tp != 0)
        rules.append(("tp_mamba_heads", broken))
    # 3. Experts (ND §3.9 C1-C2; Megatron's expert grid).
    if not mc.is_moe:
        rules.append(("ep_dense", ep != 1))
        rules.append(("moe_option_dense", ops.not_(ops.is_choice(c, "moe_dispatcher", "alltoall"))
                      | ops.not_(ops.is_choice(c, "ep_overlap", "none")) | (c["moe_device_limit"] > 0)))
    else:
        rules.append(("ep_overlap_mtp", ops.is_choice(c, "ep_overlap", "1f1b") & (mc.mtp_layers > 1)))
        rules.append(("ep_experts", mc.num_experts % ep != 0))
        etp_stated = ops.stated(c["etp"])
        etp = ops.opt_int(c["etp"], 1)
        grid = where(etp_stated, (dp * cp * tp) % (ep * etp) != 0,
                     where(ep <= dp, dp % ep != 0, (dp * tp) % ep != 0))
        rules.append(("ep_grid", grid))
        t_exp = where(etp_stated, etp, where(ep <= dp, tp, 1))
        rules.append(("expert_width", mc.moe_width % t_exp != 0))
        # device-limited routing: a token's top-k among the experts of at most moe_device_limit ranks
        device_limit = c["moe_device_limit"]
        rules.append(("device_limit_experts", (device_limit > 0) & (device_limit * (mc.num_experts // ep) < mc.topk)))
    # 4. Pipeline depth and micro-batches.
    layers = mc.layers_with_mtp
    rules.append(("pp_layers", pp > layers))
    rules.append(("vpp_layers", (pp <= layers) & (vpp > 1) & (vpp * pp > layers)))
    mbs, mbn_stated = c["micro_batch_size"], ops.stated(c["micro_batch_num"])
    micro_batches = where(mbn_stated, c["micro_batch_num"],
                          ops.opt_int(c["global_batch_size"], 0) // (mbs * dp))
    schedule_1f1b = ops.is_choice(c, "pp_schedule", "1f1b")
    interleaved = ops.is_choice(c, "pp_schedule", "interleaved") | (schedule_1f1b & (vpp > 1))
    family = (schedule_1f1b | interleaved | ops.is_choice(c, "pp_schedule", "seq1f1b")
              | ops.is_choice(c, "pp_schedule", "zero_bubble_v") | ops.is_choice(c, "pp_schedule", "dualpipe")
              | ops.is_choice(c, "pp_schedule", "dualpipev"))
    micro_batches = micro_batches // ops.maximum(c["pp_runs"], 1)   # a schedule run's (pp_runs divides them)
    too_few = (pp > 1) & family & (micro_batches < pp)
    rules.append(("micro_batches_lt_pp", too_few))
    rules.append(("micro_batches_not_multiple",
                  (pp > 1) & ops.not_(too_few) & interleaved & (micro_batches % pp != 0)))
    # 6. Sequence: SP splits over tp*cp; ring CP needs 2*cp chunks; Ulysses whole KV heads.
    sequence_parallel = c["sequence_parallel"]
    rules.append(("seq_sp", sequence_parallel & (tp > 1) & (s % (tp * cp) != 0)))
    ring = ops.not_(ops.is_choice(c, "cp_algo", "ulysses"))
    rules.append(("seq_ring", (cp > 1) & ring & (s % (2 * cp) != 0)))
    ulysses = (cp > 1) & ops.not_(ring)
    rules.append(("ulysses_heads", ulysses & (mc.kv_heads % (tp * cp) != 0)))
    rules.append(("seq_ulysses", ulysses & (s % cp != 0)))
    if mc.has_mamba:
        rules.append(("cp_mamba", cp > 1))
    # 6b. A vision tower shares the strategy (validate._vision_rules).
    if mc.has_vision:
        v_tokens, v_heads = mc.vision_tokens, mc.vision_heads
        rules.append(("tp_vision_heads", v_heads % tp != 0))
        rules.append(("vision_tokens", (sequence_parallel & (tp > 1) & (v_tokens % (tp * cp) != 0))
                      | ((cp > 1) & ring & (v_tokens % (2 * cp) != 0))
                      | (ulysses & (v_tokens % cp != 0))))
        rules.append(("vision_ulysses_heads", ulysses & (v_heads % (tp * cp) != 0)))
        rules.append(("vision_seq1f1b", ops.is_choice(c, "pp_schedule", "seq1f1b")))
    # 7. Layout against the model (per layout).
    rules.append(("layout", layout_bad))
    # 8. The cluster's own limits.
    if cc is not None:
        if not allow_cross_node_tp:
            rules.append(("tp_cross_node", tp > cc.devices_per_node))
        if not cc.has_fp8:
            rules.append(("no_fp8", ops.is_choice(c, "precision", "fp8")))
    # derive: a stated etp (or ep) that leaves no expert data-parallel rank.
    if mc.is_moe:
        etp_stated = ops.stated(c["etp"])
        etp = ops.opt_int(c["etp"], 1)
        d_exp = where(etp_stated, dp * tp * cp // etp // ep, where(dp >= ep, dp // ep, dp * tp // ep))
        rules.append(("expert_dp", d_exp < 1))
    return ops.first_reason(rules, codes)
