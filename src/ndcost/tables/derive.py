"""ND's derived values of a (model, spec): sharding factors, comm flags, byte widths.

ND writes a strategy onto its cost-model config and then runs ``derive()``
to fill in what follows from it (docs/ND_MODEL.md §1.4, "derive(ccfg, strict)",
steps 1-10). :func:`derive` computes the same values from a
:class:`~ndcost.spec.model.Model` and an :class:`~ndcost.spec.exec_spec.ExecSpec`, as a
frozen :class:`Derived`, under ND's names so the ND-mode formulas (§2, §3)
read them as written. A few physical counterparts (the real gradient bytes,
Megatron's expert data-parallel size, the ZeRO group) sit beside ND's where
ND's value is a modelling shortcut.

ExecSpec -> ND config, as the seed ``apply_exec.CONFIG_FIELDS`` maps it:
dp -> d, tp -> t, pp -> p, cp, ep, etp, zero_stage >= 1 -> has_op,
zero_stage >= 2 -> has_grad_shard, zero_stage == 3 -> grad_shard_as_params,
optimizer_shard -> os_max_shard.

:func:`derive` assumes :func:`ndcost.tables.joint_rules.validate` passed; it refuses
only what it cannot compute (ND's ``strict`` mode: no expert data-parallel rank).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .cache import cached
from .formulas import (
    COMM_DP_OVERLAP, COMM_TP_OVERLAP, SCALAR, ModelConstants, derived_columns_scalar, derived_extra_columns_scalar,
)
from ..errors import SpecError
from ..spec.exec_spec import ExecSpec

__all__ = ["Derived", "derive", "derived_values", "model_constants", "COMM_DP_OVERLAP", "COMM_TP_OVERLAP"]

# COMM_DP_OVERLAP (0.9) and COMM_TP_OVERLAP (0.5) live with the formulas (ndcost.tables.formulas).


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


def _refuse_expert_degrees(spec: ExecSpec) -> None:
    """Raise derive's strict refusal (docs/ND_MODEL.md §1.4 derive step 2): no expert data-parallel rank."""
    d, t, cp, ep = spec.dp, spec.tp, spec.cp, spec.ep
    if spec.etp is not None:
        raise SpecError("ep*etp", "ExecSpec", f"be at most dp*tp*cp (= {d * t * cp})", ep * spec.etp)
    raise SpecError("ep", "ExecSpec", f"be at most dp*tp (= {d * t}) (or state etp)", ep)


def model_constants(model: Any) -> ModelConstants:
    """The model's constants the formulas read, built once per model object."""
    return cached(model, "model_constants", lambda: ModelConstants(model))


def derived_values(model: Any, spec: ExecSpec) -> dict[str, Any]:
    """The derived values the kernels read (``ndcost.tables.formulas.derived_columns``), as a dict."""
    values = derived_columns_scalar(SCALAR, spec.__dict__, model_constants(model))
    if values["d_exp"] < 1:
        _refuse_expert_degrees(spec)
    return values


def derive(model: Any, spec: ExecSpec, cluster: Any = None) -> Derived:
    """ND's derived values of *spec* on *model* (docs/ND_MODEL.md §1.4 derive steps 1-5, 8, 10).

    The formulas are ``ndcost.tables.formulas.derived_columns``, which ``estimate_many``
    runs on numpy columns: one table of formulas for one candidate and for a batch
    (here its scalar twin, generated from the same source by tools/gen_formulas.py).

    Args:
        model: A :class:`~ndcost.spec.model.Model`.
        spec: The strategy.
        cluster: Accepted for a uniform signature; no derived value depends on it.

    Raises:
        SpecError: When the expert degrees leave no expert data-parallel rank.
    """
    if not isinstance(spec, ExecSpec):
        raise SpecError("spec", "derive", "be an ExecSpec", spec)
    values = derived_values(model, spec)
    values.update(derived_extra_columns_scalar(SCALAR, spec.__dict__, model_constants(model), values))
    return Derived(keep_mask=spec.keep_mask, **values)  # step 7's setting
