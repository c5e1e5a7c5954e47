"""What a valid :class:`~ndcost.spec.rates.Rates` is: each field's rule, checked when one is made (``Rates.__post_init__``),
with the canonical forms it is then held in (floats, a read-only mapping of sources). One bad field is a
:class:`~ndcost.errors.SpecError` naming it, the rule and the value."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

from ..errors import SpecError, is_finite_number
from ..limits import MAX_LATENCY
from .fp8_recipes import FP8_RECIPES
from .moe_kernels import EXPERT_BIASES, GLU_CLAMPS, GROUPED_GEMMS, MOE_PERMUTES
from .rope_scaling import ROPE_SCALES

__all__ = ["ATTENTION_KERNELS", "ELEMENTWISE", "check_rates"]

_OWNER = "Rates"

#: Attention kernels a software stack runs (Rates.attention_kernel).
ATTENTION_KERNELS: tuple[str, ...] = ("best", "fa2")
#: Elementwise execution (Rates.elementwise).
ELEMENTWISE: tuple[str, ...] = ("fused", "eager")


def check_rates(rates: Any) -> None:
    """Check every field of *rates* (a frozen Rates being made) and set the canonical forms in place.

    Raises:
        SpecError: The first field that breaks its rule.
    """
    fetch = rates.zero3_fetch_bandwidth
    if not is_finite_number(fetch) or fetch < 0.0:
        raise SpecError("zero3_fetch_bandwidth", _OWNER, "be a finite number of bytes/s >= 0 (0: off)", fetch)
    object.__setattr__(rates, "zero3_fetch_bandwidth", float(fetch))
    for name, choices in (("attention_kernel", ATTENTION_KERNELS), ("fp8_recipe", tuple(FP8_RECIPES)),
                          ("elementwise", ELEMENTWISE), ("grouped_gemm_impl", GROUPED_GEMMS),
                          ("moe_permute", MOE_PERMUTES), ("expert_bias", EXPERT_BIASES),
                          ("glu_clamp", GLU_CLAMPS), ("rope_scale", ROPE_SCALES)):
        if getattr(rates, name) not in choices:
            raise SpecError(name, _OWNER, f"be one of {', '.join(map(repr, choices))}", getattr(rates, name))
    width = rates.grad_reduce_bytes
    if isinstance(width, bool) or width not in (0, 1, 2, 4):
        raise SpecError("grad_reduce_bytes", _OWNER, "be 0 (the held width), 1, 2 or 4 bytes", width)
    tail = rates.gemm_wave_tail
    if not is_finite_number(tail) or not 0.0 <= tail <= 1.0:
        raise SpecError("gemm_wave_tail", _OWNER, "be a number of waves in [0, 1]", tail)
    object.__setattr__(rates, "gemm_wave_tail", float(tail))
    for name, top in (("grouped_gemm_tile_overhead", 1e6), ("grouped_gemm_exposed", 1.0),
                      ("launch_overhead", 1.0), ("graph_kernel_overhead", 1.0), ("scatter_add_rate", 1e18),
                      ("clock_sigma", 0.1), ("deepep_call_overhead", 1.0), ("deepep_token_overhead", 1e-3),
                      ("collective_overlap_slowdown", 1.0)):
        value = getattr(rates, name)
        if not is_finite_number(value) or not 0.0 <= value <= top:
            raise SpecError(name, _OWNER, f"be a finite number in [0, {top:g}]", value)
        object.__setattr__(rates, name, float(value))
    for name in ("zero3_recompute_gather", "zero3_grad_all_reduce", "grad_accumulation_fusion",
                 "attention_copies", "moe_router_fusion", "moe_aux_loss"):
        if not isinstance(getattr(rates, name), bool):
            raise SpecError(name, _OWNER, "be True or False", getattr(rates, name))
    for name in ("matmul_efficiency", "attention_efficiency", "hbm_efficiency",
                 "intra_node_efficiency", "inter_node_efficiency", "fp8_matmul_efficiency",
                 "fa2_attention_efficiency", "all_to_all_efficiency", "deepep_nvlink_efficiency",
                 "deepep_intranode_efficiency", "busy_clock_share"):
        value = getattr(rates, name)
        if value is None and name in ("fp8_matmul_efficiency", "fa2_attention_efficiency",
                                      "all_to_all_efficiency"):
            continue
        if not is_finite_number(value) or not 0.0 < value <= 1.0:
            raise SpecError(name, _OWNER, "be a number in (0, 1]", value)
        object.__setattr__(rates, name, float(value))
    lengths = rates.attention_reference_tokens
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, (tuple, list)) or not all(
            is_finite_number(x) and x >= 2.0 for x in lengths):
        raise SpecError("attention_reference_tokens", _OWNER, "be a sequence of causal lengths >= 2 tokens (empty: "
                        "the attention rate holds at every length)", lengths)
    object.__setattr__(rates, "attention_reference_tokens", tuple(float(x) for x in lengths))
    for name in ("attention_head64_share", "fa2_attention_head64_share"):
        head64 = getattr(rates, name)
        if head64 is None and name == "fa2_attention_head64_share":
            continue
        if not is_finite_number(head64) or not 0.5 < head64 <= 1.0:
            raise SpecError(name, _OWNER, "be a number in (0.5, 1] (the share of the head-dim-128 rate reached at "
                            "head dim 64; 1: not applied)", head64)
        object.__setattr__(rates, name, float(head64))
    if isinstance(rates.sm_count, bool) or not isinstance(rates.sm_count, int) or rates.sm_count < 1:
        raise SpecError("sm_count", _OWNER, "be an integer >= 1", rates.sm_count)
    if isinstance(rates.tp_overlap_splits, bool) or not isinstance(rates.tp_overlap_splits, int) or not \
            1 <= rates.tp_overlap_splits <= 64:
        raise SpecError("tp_overlap_splits", _OWNER, "be an integer in [1, 64]", rates.tp_overlap_splits)
    if not is_finite_number(rates.tp_overlap_sms) or not 0.0 <= rates.tp_overlap_sms <= rates.sm_count / 2:
        raise SpecError("tp_overlap_sms", _OWNER, f"be a number of SMs in [0, {rates.sm_count / 2}]",
                        rates.tp_overlap_sms)
    object.__setattr__(rates, "tp_overlap_sms", float(rates.tp_overlap_sms))
    overhead = rates.kernel_overhead
    if not is_finite_number(overhead) or not 0.0 <= overhead <= MAX_LATENCY:
        raise SpecError("kernel_overhead", _OWNER, f"be a number of seconds in [0, {MAX_LATENCY:g}] (real: "
                        "5-20 us a kernel)", overhead)
    object.__setattr__(rates, "kernel_overhead", float(overhead))
    if not isinstance(rates.sources, Mapping):
        raise SpecError("sources", _OWNER, "be a mapping of figure names to source texts", rates.sources)
    object.__setattr__(rates, "sources", MappingProxyType(dict(rates.sources)))
