"""Activation recompute: ND's eight switches, their bit mask, the named
selective rules, and :class:`RecomputeRange` (a run of layers that recompute
one way).

ND prices selective recompute per op class with a switch that is 1 when the
op's activation is kept and 0 when the op is recomputed
(docs/ND_MODEL.md §1.4, "MindFormers selective-recompute switches"; seed
``recompute/profile.py`` ``SWITCHES``). ndcost carries a setting as an int
``keep_mask`` whose bit *i* is set when ``SWITCHES[i]`` is kept, so that the
kernels can walk all 256 settings as the integers 0..255 and ``0xFF`` keeps
everything.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import SpecError, check_choice, check_positive_int

__all__ = [
    "SWITCHES",
    "OPTIONAL_SWITCHES",
    "ALL_KEPT",
    "SELECTIVE_RULES",
    "RECOMPUTE_OPTIONS",
    "MEGATRON_RECOMPUTE_MODULES",
    "canonical_switches",
    "mask_from_switches",
    "switches_from_mask",
    "selective_switches",
    "selective_keep_mask",
    "RecomputeRange",
    "plan_document",
]

#: ND's recompute switches, in the seed's order (seed ``recompute/profile.py``
#: ``SWITCHES``); bit i of a keep mask belongs to ``SWITCHES[i]``.
SWITCHES: tuple[str, ...] = ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct", "attUp")
#: Switches that act only on some layer kinds: ``attUp`` (the MLA
#: up-projections) changes nothing on a non-MLA layer (docs/ND_MODEL.md §4.4,
#: seed ``OPTIONAL``).
OPTIONAL_SWITCHES: tuple[str, ...] = ("attUp",)
#: The mask that keeps every op's activation (no op recomputed).
ALL_KEPT: int = (1 << len(SWITCHES)) - 1
#: Named rules that turn ``recompute="selective"`` into switches.
SELECTIVE_RULES: tuple[str, ...] = ("megatron", "mindformers", "hyperparallel")
#: What a layer (or a range of layers) does about its activations.
RECOMPUTE_OPTIONS: tuple[str, ...] = ("none", "full", "selective")

#: Megatron-Core ``recompute_modules`` -> the ND switches each one recomputes (0 = recompute).
#: Megatron-LM megatron/core/transformer/transformer_config.py ``recompute_modules`` (core_v0.14+):
#: "core_attn" the attention core (QK^T, softmax, dropout, the attention-over-values input: ND's
#: attBMM, headCast, dropout, softmax, as the "megatron" selective rule), "layernorm" the input and
#: pre-MLP norms (normOp), "moe_act" / "mlp_act" the expert / MLP activation function (ffAct),
#: "mla_up_proj" the MLA up-projections (attUp). "mlp" and "moe" recompute the whole MLP or MoE
#: block, which no switch states: they map to ffAct, the part of them a switch can recompute, and
#: the row notes the shortfall.
MEGATRON_RECOMPUTE_MODULES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "core_attn": ("attBMM", "headCast", "dropout", "softmax"),
    "layernorm": ("normOp",),
    "moe_act": ("ffAct",),
    "mlp_act": ("ffAct",),
    "mla_up_proj": ("attUp",),
    "mlp": ("ffAct",),
    "moe": ("ffAct",),
})

_BIT = {name: 1 << index for index, name in enumerate(SWITCHES)}


def _switch_value(value: Any, name: str, parameter: str, owner: str) -> int:
    """A switch state as 0 or 1 (bools accepted: True keeps)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and value in (0, 1):
        return value
    raise SpecError(f"{parameter}.{name}", owner, "be 1 (keep) or 0 (recompute)", value)


def canonical_switches(
    switches: Any, parameter: str = "switches", owner: str = "mask_from_switches"
) -> dict[str, int]:
    """Every switch of *switches* as 0/1, missing ones kept (1), in ``SWITCHES`` order.

    The seeds read a switch a setting leaves out as kept (docs/ND_MODEL.md §1.4,
    ``exec_of``: "a missing switch reads as keep"). An unknown name is an
    error, not a silently ignored typo.
    """
    if not isinstance(switches, Mapping):
        raise SpecError(parameter, owner, f"be a mapping of switch names ({', '.join(SWITCHES)}) to 1 or 0", switches)
    for name in switches:
        if name not in _BIT:
            raise SpecError(parameter, owner, f"name only the switches {', '.join(SWITCHES)}", name)
    return {
        name: _switch_value(switches[name], name, parameter, owner) if name in switches else 1
        for name in SWITCHES
    }


def mask_from_switches(switches: Mapping[str, int]) -> int:
    """The keep mask of a switch setting: bit i set when ``SWITCHES[i]`` is kept.

    A switch the mapping leaves out is kept.

    >>> mask_from_switches({"attBMM": 0, "softmax": 0})
    246
    """
    canonical = canonical_switches(switches)
    return sum(_BIT[name] for name, kept in canonical.items() if kept)


def switches_from_mask(mask: int) -> dict[str, int]:
    """The switch setting of a keep mask (0..255), as ``{name: 1 keep / 0 recompute}``."""
    check_positive_int(mask, "mask", "switches_from_mask", minimum=0)
    if mask > ALL_KEPT:
        raise SpecError("mask", "switches_from_mask", f"be an integer in [0, {ALL_KEPT}]", mask)
    return {name: 1 if mask & _BIT[name] else 0 for name in SWITCHES}


def selective_switches(
    rule: str,
    *,
    flash_attention: bool,
    sequence_parallel_degree: int,
    comm_recompute: bool,
) -> dict[str, int]:
    """The switches a named selective rule gives (1 keep, 0 recompute).

    Args:
        rule: ``"megatron"``, ``"mindformers"`` or ``"hyperparallel"``.
        flash_attention: Whether attention runs a fused (flash) kernel.
        sequence_parallel_degree: ND's ``sp``: tp with sequence parallelism, else 1.
        comm_recompute: MindFormers' ``select_comm_recompute``: recompute the
            TP all-gather of a sequence-parallel layer instead of keeping it.
    """
    check_choice(rule, "rule", "selective_switches", SELECTIVE_RULES)
    sp_sharded = sequence_parallel_degree > 1
    # comm_recompute drops the kept all-gather output of a sequence-parallel
    # layer, which is what MindFormers' select_comm_recompute means
    # (docs/ND_MODEL.md §1.4: gather = not (select_comm_recompute and sp > 1)).
    gather_kept = int(not (comm_recompute and sp_sharded))
    if rule == "megatron":
        # Megatron-LM's selective recompute (Korthikanti et al. 2022,
        # "Selective Activation Recomputation"):
        # recompute the attention core (QK^T, softmax, dropout, the
        # attention-over-values input), keep everything else.
        return {"attBMM": 0, "headCast": 0, "dropout": 0, "softmax": 0,
                "normOp": 1, "gather": gather_kept, "ffAct": 1, "attUp": 1}
    if rule == "mindformers":
        # docs/ND_MODEL.md §1.4 "MindFormers selective-recompute switches", with
        # sel = True (the rule is asked for because selective recompute is on).
        fa = flash_attention
        return {
            "attBMM": int(not (not fa and sp_sharded)),
            "headCast": int(not fa),
            "dropout": 1,
            "softmax": int(fa),
            "normOp": int(not sp_sharded),
            "gather": gather_kept,
            "ffAct": int(not sp_sharded),
            "attUp": 1,  # the seeds' MindFormers rule states no attUp: kept
        }
    # docs/ND_MODEL.md §1.4 "HyperParallel selective rule" (HYPER_SELECTIVE_REC_OP);
    # its gather is recomputed already, and attUp (absent there) is kept.
    return {"attBMM": 1, "headCast": 0, "dropout": 0, "softmax": 0,
            "normOp": 0, "gather": 0, "ffAct": 0, "attUp": 1}


def selective_keep_mask(
    rule: str,
    *,
    flash_attention: bool,
    sequence_parallel_degree: int,
    comm_recompute: bool,
) -> int:
    """:func:`selective_switches` as a keep mask (cached: a search asks for it per candidate)."""
    return _rule_mask(rule, bool(flash_attention), sequence_parallel_degree > 1, bool(comm_recompute))


@functools.lru_cache(maxsize=None)
def _rule_mask(rule: str, flash_attention: bool, sp_sharded: bool, comm_recompute: bool) -> int:
    # The rules read sp only through sp > 1, so 2 stands for every sharded degree.
    return mask_from_switches(selective_switches(
        rule, flash_attention=flash_attention, sequence_parallel_degree=2 if sp_sharded else 1,
        comm_recompute=comm_recompute,
    ))


@dataclass(frozen=True)
class RecomputeRange:
    """A run of consecutive layers that recompute one way.

    Layers are counted in model order (docs/ND_MODEL.md §1.6: chunk by chunk
    across stages, the second chunk reversed for zero_bubble_v and dualpipev), 0-based,
    over the body layers then the MTP layers. A layer no range covers does
    not recompute (seed ``apply_exec._ranges``).

    Attributes:
        first: The first layer of the range.
        count: How many layers it covers (>= 1).
        option: ``"none"``, ``"full"`` or ``"selective"``.
        switches: Selective ranges only: the range's own switch setting
            (1 keep, 0 recompute; a missing switch is kept), stored complete
            and read-only. ``None`` means the spec's selective setting
            (``ExecSpec.keep_mask``): a range's ops override the rule,
            docs/ND_MODEL.md §1.4 derive step 7.
    """

    first: int
    count: int
    option: str
    switches: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        owner = "RecomputeRange"
        check_positive_int(self.first, "first", owner, minimum=0)
        check_positive_int(self.count, "count", owner)
        check_choice(self.option, "option", owner, RECOMPUTE_OPTIONS)
        if self.switches is not None:
            if self.option != "selective":
                raise SpecError("switches", owner, "be None unless option is 'selective'", self.switches)
            # A private, complete, read-only copy: the caller's dict stays theirs.
            frozen = MappingProxyType(canonical_switches(self.switches, "switches", owner))
            object.__setattr__(self, "switches", frozen)

    @property
    def end(self) -> int:
        """One past the last layer of the range."""
        return self.first + self.count

    @property
    def keep_mask(self) -> int | None:
        """The range's setting as a keep mask: ``ALL_KEPT`` for ``"none"``, 0 for
        ``"full"`` (every activation recomputed: the layer keeps only its input),
        its switches' mask for ``"selective"``, and ``None`` for a selective
        range that follows the spec's setting (see ``ExecSpec.range_keep_mask``).
        """
        if self.option == "none":
            return ALL_KEPT
        if self.option == "full":
            return 0
        return None if self.switches is None else mask_from_switches(self.switches)

    def __hash__(self) -> int:
        # The switches are a read-only proxy, which does not hash: hash its items.
        switches = None if self.switches is None else tuple(self.switches.items())
        return hash((self.first, self.count, self.option, switches))

    def __reduce__(self):
        # A mappingproxy neither pickles nor deep-copies: rebuild from a dict.
        switches = None if self.switches is None else dict(self.switches)
        return (RecomputeRange, (self.first, self.count, self.option, switches))


def plan_document(spec: Any) -> list[dict]:
    """The spec's recompute ranges as JSON-ready mappings (what ``--recompute-plan`` reads): the
    ranges' plain-data form, beside the class that reads them back; [] when the spec has no ranges."""
    if not isinstance(spec.recompute, tuple):
        return []
    return [{"first": r.first, "count": r.count, "option": r.option,
             **({"switches": dict(r.switches)} if r.switches is not None else {})} for r in spec.recompute]
