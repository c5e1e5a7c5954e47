"""Why a candidate of a batch has no price, as an int code per row.

``estimate_many`` never raises for one bad candidate: each row gets a reason
code, 0 when it is priced and fits. :data:`REASONS` turns a code into words
(``REASONS[code]``, as :func:`explain_reason`); :data:`REASON_TABLE` gives each
code its name and the parameters it concerns (the ``SpecError.parameter`` that
``ExecSpec`` or ``validate`` would raise for it). For the numbers behind one row, ``ndcost.explain(model,
cands[i], cluster)`` raises nothing and lists every broken rule in words.

The order of the codes is the order the rules are checked in (ExecSpec's own
checks, then ``validate``'s rules 1-8, then ``derive``), so a row that breaks
several rules reports the one a single ``ExecSpec(...)`` + ``validate()`` would
raise first.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, NamedTuple

from ..kernels.columns import KERNEL_REASONS

__all__ = ["Reason", "REASONS", "REASON_TABLE", "REASON_CODES", "FIRST_INVALID", "explain_reason"]


class Reason(NamedTuple):
    """One reason code: its name, the parameters it concerns, and what it means."""

    code: int
    name: str
    parameters: tuple[str, ...]
    text: str


_DEGREES = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp")
_FLAGS = ("sequence_parallel", "mtp_in_offset", "emb_out_in_offset", "selective_comm_recompute",
          "recompute_slice_activation", "overlapped_grad_reduce", "overlapped_param_gather",
          "deferred_grad_accumulation", "shard_spans_cp",
          "flash_attention", "grouped_gemm", "vocab_emb_dp", "tp_overlap", "fp8_weight_cache", "tie_embeddings",
          "reshard_params", "moe_dispatch_fp8", "autocast", "grads_set_to_none",
          "moe_weighted_activation", "fp8_activation_storage", "fp8_transpose_cache",
          "zero3_parameter_fetch")
_BYTES = ("param_bytes", "compute_bytes", "softmax_bytes", "grad_bytes", "optimizer_state_bytes",
          "optimizer_states", "main_param_bytes", "norm_bytes", "dropout_bytes", "logit_bytes")

_TABLE = (
    # Written by the kernels (KERNEL_REASONS).
    ("ok", (), "priced, and fits in memory"),
    ("undefined", (), "no finite price (a degenerate size or degree)"),
    ("no_fit", (), "does not fit in memory"),
    # ExecSpec's own checks.
    ("bad_degree", _DEGREES,
     "a parallel degree (dp, tp, pp, vpp, cp, ep, etp) is not an integer >= 1, or is above its bound (docs/LIMITS.md)"),
    ("bad_flag", _FLAGS, "an on/off field is not True or False"),
    ("bad_size", ("micro_batch_size", "seq_length", "seq_split", "pp_runs"),
     "micro_batch_size, seq_length, seq_split or pp_runs is not an integer >= 1, or is above its bound "
     "(docs/LIMITS.md)"),
    ("bad_bytes", _BYTES, "a byte width is not an integer of at least its minimum and at most its bound"),
    ("bad_choice", ("pp_schedule", "cp_algo", "precision", "selective_rule", "moe_dispatcher", "ep_overlap",
                    "cuda_graphs"),
     "a named choice (pp_schedule, cp_algo, precision, selective_rule, moe_dispatcher, ep_overlap, cuda_graphs) is "
     "not one ndcost knows"),
    ("bad_moe_setting", ("capacity_factor", "moe_imbalance", "moe_dispatch", "moe_dispatch_count", "moe_dispatcher",
                         "ep", "moe_dispatcher_sms", "moe_node_limit", "moe_device_limit"),
     "capacity_factor or moe_imbalance is not a finite number in [1, its bound], moe_dispatch or "
     "moe_dispatch_count not a finite number >= 0, moe_dispatcher_sms not an integer in [1, its bound], "
     "moe_node_limit or moe_device_limit not an integer in [0, its bound], or moe_dispatcher 'deepep' on an ep "
     "group DeepEP has no config for"),
    ("vpp_without_pp", ("vpp",), "vpp > 1 with pp = 1 (virtual stages without a pipeline)"),
    ("schedule_vpp", ("vpp",),
     "vpp does not suit the schedule (interleaved needs vpp > 1, zero_bubble_v and dualpipev 2, gpipe and "
     "dualpipe 1)"),
    ("bad_seq_split", ("seq_split",), "seq_split is not 1 outside seq1f1b, or does not divide seq_length"),
    ("bad_batch", ("micro_batch_num", "global_batch_size"),
     "neither micro_batch_num nor global_batch_size is stated, or one is not an integer >= 1, or the global "
     "batch is above its bound (docs/LIMITS.md)"),
    ("batch_not_divisible", ("global_batch_size",), "global_batch_size is not a multiple of micro_batch_size*dp"),
    ("batch_mismatch", ("global_batch_size",), "global_batch_size is not micro_batch_size*dp*micro_batch_num"),
    ("bad_layout_field", ("offset", "pp_partition"), "offset or pp_partition does not have the pipeline's shape"),
    ("bad_recompute", ("recompute", "full_recompute", "selective_recompute", "selective_switches"),
     "the recompute statement (ranges, per-stage counts, switches) is malformed"),
    ("bad_zero_stage", ("zero_stage",), "zero_stage is not 0, 1, 2 or 3"),
    ("bad_optimizer_shard", ("optimizer_shard",), "optimizer_shard is not an integer >= 1 dividing dp"),
    ("bad_reshard", ("reshard_params",), "reshard_params is True without zero_stage 3"),
    # validate's rules, in its order.
    ("devices", ("dp*tp*pp*cp",), "dp*tp*pp*cp is not the cluster's device count"),
    ("whole_nodes", ("num_devices",),
     "on a bare device, dp*tp*pp*cp is neither within one node nor a whole number of nodes"),
    ("tp_heads", ("tp",), "tp does not divide the attention heads"),
    ("tp_kv_heads", ("tp",), "tp does not divide the key/value heads"),
    ("tp_linear_heads", ("tp",), "tp does not divide the linear-attention (gated DeltaNet) heads"),
    ("tp_mamba_heads", ("tp",), "tp does not divide the Mamba heads or B/C groups (Mamba-2) or d_inner (Mamba-1)"),
    ("ep_dense", ("ep",), "ep > 1 on a dense model"),
    ("ep_experts", ("ep",), "ep does not divide the routed experts"),
    ("ep_grid", ("ep", "ep*etp"),
     "the expert grid does not fit: ep (x etp) does not divide dp (or dp*tp when ep > dp, or dp*cp*tp with etp)"),
    ("expert_width", ("tp", "etp"), "the experts' TP degree does not divide moe_intermediate_size"),
    ("pp_layers", ("pp",), "pp exceeds the layers (MTP layers included)"),
    ("vpp_layers", ("vpp",), "vpp*pp exceeds the layers (MTP layers included)"),
    ("micro_batches_lt_pp", ("micro_batch_num",), "fewer micro-batches than pipeline stages (1F1B family)"),
    ("micro_batches_not_multiple", ("micro_batch_num",),
     "micro-batches not a multiple of pp (interleaved schedule)"),
    ("seq_sp", ("seq_length",), "seq_length not divisible by tp*cp with sequence parallelism"),
    ("seq_ring", ("seq_length",), "seq_length not divisible by 2*cp (ring context parallelism)"),
    ("ulysses_heads", ("tp*cp",), "tp*cp does not divide the key/value heads (Ulysses context parallelism)"),
    ("seq_ulysses", ("seq_length",), "seq_length not divisible by cp (Ulysses context parallelism)"),
    ("cp_mamba", ("cp",), "cp > 1 on a model with Mamba-2 mixers (their context parallelism is not priced)"),
    ("layout", ("offset", "pp_partition", "recompute"),
     "the offset, pp_partition or recompute ranges do not fit the model's layers"),
    ("tp_cross_node", ("tp",), "tp exceeds the devices of one node (allow_cross_node_tp=False)"),
    ("no_fp8", ("precision",), "fp8 on a device without an fp8 peak"),
    ("expert_dp", ("ep", "ep*etp"), "the expert degrees leave no expert data-parallel rank"),
    # A vision tower's rules (validate rule 6, after the text sequence's); appended to keep codes stable.
    ("tp_vision_heads", ("tp",), "tp does not divide the vision tower's heads"),
    ("vision_tokens", ("vision.tokens",),
     "the vision tower's tokens do not split over tp*cp (SP), 2*cp (ring) or cp (Ulysses)"),
    ("vision_ulysses_heads", ("tp*cp",), "tp*cp does not divide the vision tower's heads (Ulysses)"),
    ("vision_seq1f1b", ("pp_schedule",), "seq1f1b with a vision tower (Seq1F1B splits the text sequence only)"),
    # ExecSpec's bound on dp*tp*pp*cp (checked after the degrees); appended to keep codes stable.
    ("too_many_devices", ("dp*tp*pp*cp",), "dp*tp*pp*cp is above ndcost's bound on devices (docs/LIMITS.md)"),
    # The expert all-to-all and DeepSeek's schedules (ExecSpec's pipeline, batch and MoE checks, then
    # validate rule 3); appended to keep codes stable.
    ("dualpipe_pp", ("pp",), "pp is odd with pp_schedule 'dualpipe' (DualPipe pairs rank i with rank pp-1-i)"),
    ("dualpipe_micro_batches", ("micro_batch_num", "global_batch_size"),
     "fewer than 2*pp micro-batches with pp_schedule 'dualpipe' or 'dualpipev', or an odd number with "
     "'dualpipe' (deepseek-ai/DualPipe's requirements)"),
    ("dispatch_fp8_precision", ("moe_dispatch_fp8",), "moe_dispatch_fp8 without precision 'fp8'"),
    ("ep_overlap_rule", ("ep_overlap",),
     "ep_overlap does not suit the strategy: any overlap needs ep > 1; '1f1b' (Megatron-Core's) the 1f1b or "
     "interleaved schedule, vpp > 1 when pp > 1 and no full recompute; 'dualpipe' a DualPipe schedule "
     "(dualpipe, dualpipev, zero_bubble_v)"),
    ("moe_option_dense", ("moe_dispatcher", "ep_overlap", "moe_device_limit"),
     "a MoE dispatcher ('deepep'), an expert all-to-all overlap or a device limit named for a dense model"),
    ("ep_overlap_mtp", ("ep_overlap",),
     "ep_overlap '1f1b' with more than one MTP layer (Megatron-Core's EP overlap supports at most one)"),
    # DeepSeek-V3's activation storage (ExecSpec's MoE checks); appended to keep codes stable.
    ("fp8_storage_precision", ("fp8_activation_storage",), "fp8_activation_storage without precision 'fp8'"),
    ("fp8_transpose_cache", ("fp8_transpose_cache",),
     "fp8_transpose_cache off without precision 'fp8' and fp8_weight_cache"),
    ("zero3_parameter_fetch", ("zero3_parameter_fetch",), "zero3_parameter_fetch without zero_stage 3"),
    # Schedule runs a step (ExecSpec's pipeline and batch checks); appended to keep codes stable.
    ("pp_runs", ("pp_runs",), "pp_runs > 1 with pp = 1, or pp_runs does not divide the micro-batch count"),
    # Device-limited routing (ExecSpec's expert rules); appended to keep codes stable.
    ("device_limit_experts", ("moe_device_limit",),
     "moe_device_limit leaves fewer experts on its ranks than a token picks (moe_device_limit x num_experts/ep "
     "< num_experts_per_tok)"),
)

#: Every reason (code, name, parameters, words), indexed by its code.
REASON_TABLE: tuple[Reason, ...] = tuple(Reason(code, name, parameters, text)
                                         for code, (name, parameters, text) in enumerate(_TABLE))
#: Each code's words: ``REASONS[code]``.
REASONS: tuple[str, ...] = tuple(reason.text for reason in REASON_TABLE)
#: Reason name -> code.
REASON_CODES: Mapping[str, int] = MappingProxyType({reason.name: reason.code for reason in REASON_TABLE})
#: Codes from here on mark invalid candidates (the kernels skip them).
FIRST_INVALID = len(KERNEL_REASONS)

if tuple(reason.name for reason in REASON_TABLE[:FIRST_INVALID]) != KERNEL_REASONS:  # pragma: no cover
    raise ImportError("the first reasons must be the kernels' (ndcost.kernels.columns.KERNEL_REASONS)")


def explain_reason(code: int) -> str:
    """The words of a reason code (``REASONS[code]``); raises ValueError for an unknown code."""
    try:
        index = int(code)
    except (TypeError, ValueError):
        raise ValueError(f"a reason code is an integer in [0, {len(REASONS)}), got {code!r}") from None
    if not 0 <= index < len(REASONS):
        raise ValueError(f"a reason code is an integer in [0, {len(REASONS)}), got {code!r}")
    return REASONS[index]
