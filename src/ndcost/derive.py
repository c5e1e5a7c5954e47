"""ND's derived values of a (model, spec): sharding factors, comm flags, byte widths.

ND writes a strategy onto its cost-model config and then runs ``derive()``
to fill in what follows from it (ND_REFERENCE §1.4, "derive(ccfg, strict)",
steps 1-10). :func:`derive` computes the same values from a
:class:`~ndcost.model.Model` and an :class:`~ndcost.exec_spec.ExecSpec`, as a
frozen :class:`Derived`, under ND's names so the ND-mode formulas (§2, §3)
read them as written. A few physical counterparts (the real gradient bytes,
Megatron's expert data-parallel size, the ZeRO group) sit beside ND's where
ND's value is a modelling shortcut.

ExecSpec -> ND config, as the seed ``apply_exec.CONFIG_FIELDS`` maps it:
dp -> d, tp -> t, pp -> p, cp, ep, etp, zero_stage >= 1 -> has_op,
zero_stage >= 2 -> has_grad_shard, zero_stage == 3 -> grad_shard_as_params,
optimizer_shard -> os_max_shard.

:func:`derive` assumes :func:`ndcost.validate.validate` passed; it refuses
only what it cannot compute (ND's ``strict`` mode: no expert data-parallel rank).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .errors import SpecError
from .exec_spec import ExecSpec

__all__ = ["Derived", "derive", "COMM_DP_OVERLAP", "COMM_TP_OVERLAP"]

#: Share of DP traffic hidden behind compute (ND_REFERENCE §1.3 comm flags,
#: §2.6 post-processing step 3: "validated on MindFormers").
COMM_DP_OVERLAP = 0.9
#: Share of TP traffic hidden behind compute (same sources).
COMM_TP_OVERLAP = 0.5


@dataclass(frozen=True)
class Derived:
    """ND's derived values of one (model, spec), each named as ND's config field."""

    sp: int
    """Sequence-parallel factor: tp with sequence parallelism, else 1 (§1.4 derive step 1)."""
    t_exp: int
    """Experts' TP degree (§1.4 derive step 2): etp when stated; else tp, or 1
    when ep > dp (t*ep > d*t: EP borrows the TP ranks)."""
    d_exp: int
    """ND's expert data-parallel degree (§1.4 derive step 2): dp*tp*cp // t_exp // ep
    when etp is stated; else dp // ep if dp >= ep, else dp*tp // ep. The first
    form counts cp, the second does not (ND's shard_p_os_exp multiplies cp on top)."""
    expert_data_parallel: int
    """Physical: ranks holding a replica of one expert shard, dp*cp*tp // (ep*t_exp)
    (Megatron parallel_state: world // (etp*ep*pp)); not an ND field."""
    has_op: bool
    """Optimizer sharding on: zero_stage >= 1 (seed CONFIG_FIELDS optimizer_parallel -> has_op)."""
    has_grad_shard: bool
    """Gradients sharded: zero_stage >= 2 (seed CONFIG_FIELDS grad_shard -> has_grad_shard)."""
    grad_shard_as_params: bool
    """Gradients shard as the parameters do (FSDP): zero_stage == 3 (§1.4 derive step 3)."""
    os_ranks: int
    """DP ranks the optimizer shards over: optimizer_shard (default dp) with has_op, else 1
    (§1.4 derive step 3, ``ranks``)."""
    shard_p_os_non_exp_partial: int
    """os_ranks*t*cp: the divisor of non-expert params and optimizer states (§1.4 step 3, §3.3)."""
    shard_p_os_non_exp: int
    """(dp if has_op else 1)*cp*t (§1.4 derive step 3)."""
    shard_p_os_exp_partial: int
    """gcd(num_experts, os_ranks*t_exp): the divisor of shared-expert params (§1.4 step 3, §3.3)."""
    shard_p_os_exp: int
    """(d_exp if has_op else 1)*cp*t_exp: the divisor of routed-expert params (§1.4 step 3, §3.3)."""
    shard_grad_non_exp: int
    """Gradient divisors (§1.4 derive step 3): as the params' (non_exp_partial) at ZeRO-3,
    shard_p_os_non_exp at ZeRO-2, t otherwise."""
    shard_grad_exp: int
    """shard_p_os_exp at ZeRO-2/3, t_exp otherwise (§1.4 derive step 3)."""
    shard_grad_exp_partial: int
    """shard_p_os_exp_partial at ZeRO-2/3, t_exp otherwise (§1.4 derive step 3)."""
    comm_d_non_exp: int
    """DP comm mode (§1.4 step 4, §2.6): 0 when dp == 1 or no optimizer sharding,
    2 for optimizer sharding alone (ZeRO-1), 3 when gradients are sharded (ZeRO-2/3)."""
    comm_d_exp: int
    """The same for expert params, with d_exp for dp (§2.6)."""
    comm_t: int
    """1 when tp > 1 (§1.4 derive step 4)."""
    comm_ep: int
    """1 when ep > 1 or the model has more than one routed expert (§2.6 "comm_ep = (ep > 1 or n_exp > 1)")."""
    comm_cp: int
    """1 when cp > 1 (§1.4 derive step 4)."""
    comm_dp_overlap: float
    """0.9 (§1.3 comm flags; §2.6 post-processing step 3)."""
    comm_tp_overlap: float
    """0.5 (§1.3 comm flags; §2.6 post-processing step 3)."""
    shard_embed: int
    """(dp if has_op else 1) * (1 if vocab_emb_dp and pp == 1 else tp) (§1.4 derive step 5;
    ND's emb_dp_sharded, which ExecSpec does not state, is taken as has_op)."""
    shard_recompute_input: int
    """tp with recompute_slice_activation, else 1 (§1.4 derive step 10; ND's
    shard_activations, not an ExecSpec field, is False)."""
    shard_output_activ: int
    """1: ND's tp only with shard_activations, which ExecSpec does not state (§1.4 derive step 10)."""
    s_fa: float
    """seq_length / num_attention_heads with flash attention, else seq_length (§1.4 derive step 8)."""
    grad_accumulation: bool
    """More than one micro-batch per step (§1.4 derive step 10's grad_accumulation)."""
    nd_bytes_grad: int
    """ND's gradient bytes: grad_bytes when pp > 1 or grad_accumulation, else 0 (§1.4 derive step 10)."""
    bytes_grad: int
    """Physical gradient bytes per parameter: grad_bytes, always (a step computes every gradient)."""
    bytes_optim: int
    """optimizer_states*optimizer_state_bytes + main_param_bytes (§1.3 Bytes, B)."""
    bytes_optim_table: int
    """2*optimizer_state_bytes + main_param_bytes: the embedding/output tables' (§1.3 Bytes, B)."""
    zero_shard_ranks: int
    """Physical: ranks one ZeRO shard group spans for non-expert state: os_ranks, times cp when
    shard_spans_cp (Megatron's distributed optimizer shards over DP x CP); 1 at ZeRO-0."""
    keep_mask: int
    """The selective setting as a keep mask: explicit switches, else the rule's (§1.4 derive step 7)."""
    micro_batch_num: int
    """Micro-batches per step, resolved (ND's m; §1.3 set_strategy gbs = b*d*m)."""
    global_batch_size: int
    """Samples per step, resolved (ND's gbs)."""
    tie_embeddings: bool
    """Embedding and output share weights: the spec's, else the model's tie_word_embeddings."""
    reshards: bool
    """FSDP reshards parameters after forward (§1.4 derive step 10 "reshards ... follow")."""
    defers_grads: bool
    """Gradient reduction deferred to the last micro-batch (§1.4 derive step 10, §3.7)."""
    overlaps_grad_reduce: bool
    """Gradient reduction overlapped with backward (§3.7 FSDP extras)."""


def _expert_degrees(spec: ExecSpec) -> tuple[int, int]:
    """(t_exp, d_exp) by ND_REFERENCE §1.4 derive step 2, strict."""
    d, t, cp, ep = spec.dp, spec.tp, spec.cp, spec.ep
    if spec.etp is not None:
        # A stated expert TP degree is used as is (ND's etp > 1 branch;
        # etp = 1 is Megatron's "experts not tensor-parallel").
        t_exp = spec.etp
        d_exp = d * t * cp // t_exp // ep
        if d_exp < 1:
            raise SpecError("ep*etp", "ExecSpec", f"be at most dp*tp*cp (= {d * t * cp})", ep * t_exp)
        return t_exp, d_exp
    t_exp = t
    d_exp = d // ep if d >= ep else d * t // ep
    if t_exp * ep > d * t:
        # EP larger than DP borrows the TP ranks: the experts then run unsplit.
        t_exp = 1
    if d_exp < 1:
        raise SpecError("ep", "ExecSpec", f"be at most dp*tp (= {d * t}) (or state etp)", ep)
    return t_exp, d_exp


def _comm_mode(degree: int, has_op: bool, has_grad_shard: bool) -> int:
    """ND's comm_d_* flag (ND_REFERENCE §2.6): 0 none, 2 ZeRO-1, 3 gradient sharding."""
    if degree == 1 or not has_op:
        return 0
    return 3 if has_grad_shard else 2


def derive(model: Any, spec: ExecSpec, cluster: Any = None) -> Derived:
    """ND's derived values of *spec* on *model* (ND_REFERENCE §1.4 derive steps 1-5, 8, 10).

    Args:
        model: A :class:`~ndcost.model.Model`.
        spec: The strategy.
        cluster: Accepted for a uniform signature; no derived value depends on it.

    Raises:
        SpecError: When the expert degrees leave no expert data-parallel rank.
    """
    if not isinstance(spec, ExecSpec):
        raise SpecError("spec", "derive", "be an ExecSpec", spec)
    d, t, p, cp, ep = spec.dp, spec.tp, spec.pp, spec.cp, spec.ep
    n_exp = model.num_experts

    # Step 2: expert degrees.
    t_exp, d_exp = _expert_degrees(spec)

    # Step 3: optimizer sharding. Megatron's distributed optimizer shards
    # over the DP x CP group; shard_spans_cp=False keeps the shards within DP
    # and drops ND's cp factor (ND always has it).
    has_op = spec.zero_stage >= 1
    has_grad_shard = spec.zero_stage >= 2
    grad_shard_as_params = spec.zero_stage == 3
    os_ranks = (spec.optimizer_shard or d) if has_op else 1
    cp_shard = cp if spec.shard_spans_cp else 1
    shard_p_os_non_exp_partial = os_ranks * t * cp_shard
    shard_p_os_non_exp = (d if has_op else 1) * cp_shard * t
    shard_p_os_exp_partial = math.gcd(n_exp, os_ranks * t_exp)
    shard_p_os_exp = (d_exp if has_op else 1) * cp_shard * t_exp
    if grad_shard_as_params:
        grad_shards = (shard_p_os_non_exp_partial, shard_p_os_exp, shard_p_os_exp_partial)
    elif has_grad_shard:
        grad_shards = (shard_p_os_non_exp, shard_p_os_exp, shard_p_os_exp_partial)
    else:
        grad_shards = (t, t_exp, t_exp)

    # Step 10's grad_accumulation, needed by the byte widths below.
    micro_batch_num = spec.resolved_micro_batch_num
    grad_accumulation = micro_batch_num > 1

    return Derived(
        sp=spec.sp,  # step 1
        t_exp=t_exp,
        d_exp=d_exp,
        expert_data_parallel=max(1, d * cp * t // (ep * t_exp)),
        has_op=has_op,
        has_grad_shard=has_grad_shard,
        grad_shard_as_params=grad_shard_as_params,
        os_ranks=os_ranks,
        shard_p_os_non_exp_partial=shard_p_os_non_exp_partial,
        shard_p_os_non_exp=shard_p_os_non_exp,
        shard_p_os_exp_partial=shard_p_os_exp_partial,
        shard_p_os_exp=shard_p_os_exp,
        shard_grad_non_exp=grad_shards[0],
        shard_grad_exp=grad_shards[1],
        shard_grad_exp_partial=grad_shards[2],
        # Step 4: comm flags.
        comm_d_non_exp=_comm_mode(d, has_op, has_grad_shard),
        comm_d_exp=_comm_mode(d_exp, has_op, has_grad_shard),
        comm_t=int(t > 1),
        comm_ep=int(ep > 1 or n_exp > 1),
        comm_cp=int(cp > 1),
        comm_dp_overlap=COMM_DP_OVERLAP,
        comm_tp_overlap=COMM_TP_OVERLAP,
        # Step 5: the embedding's shards.
        shard_embed=(d if has_op else 1) * (1 if spec.vocab_emb_dp and p == 1 else t),
        # Step 10: activation shards and byte widths.
        shard_recompute_input=t if spec.recompute_slice_activation else 1,
        shard_output_activ=1,
        # Step 8: the score rows flash attention keeps per head.
        s_fa=spec.seq_length / model.num_attention_heads if spec.flash_attention else float(spec.seq_length),
        grad_accumulation=grad_accumulation,
        nd_bytes_grad=spec.grad_bytes if (p > 1 or grad_accumulation) else 0,
        bytes_grad=spec.grad_bytes,
        bytes_optim=spec.optimizer_states * spec.optimizer_state_bytes + spec.main_param_bytes,
        bytes_optim_table=2 * spec.optimizer_state_bytes + spec.main_param_bytes,
        zero_shard_ranks=os_ranks * cp_shard if has_op else 1,
        keep_mask=spec.keep_mask,  # step 7's setting
        micro_batch_num=micro_batch_num,
        global_batch_size=spec.resolved_global_batch_size,
        tie_embeddings=model.tie_word_embeddings if spec.tie_embeddings is None else spec.tie_embeddings,
        reshards=spec.resolved_reshard_params,
        defers_grads=spec.deferred_grad_accumulation,
        overlaps_grad_reduce=spec.overlapped_grad_reduce,
    )
