"""A recompute plan as a launcher can state it: exactly where it can, and priced where it cannot.

ndcost prices recompute per layer (``ExecSpec.recompute`` as ranges of layers, each none, full or
selective with its own switches: what ``plan_recompute`` and ``search --plan-top`` produce). A
launcher states less:

* Megatron-LM (megatron/training/arguments.py; TransformerConfig.recompute_*):
  ``--recompute-granularity full`` with ``--recompute-method uniform|block --recompute-num-layers N``
  (block: the first N layers of every pipeline stage -- of every virtual chunk with interleaving --
  recompute, the rest do not), or ``--recompute-granularity selective --recompute-modules ...`` on
  every layer: ``core_attn`` (the attention core: scores, softmax, dropout, the BMMs -- ndcost's
  attBMM, headCast, softmax, dropout switches), ``layernorm`` (normOp), ``mla_up_proj`` (attUp),
  ``moe_act`` (the experts' activation: ffAct of a MoE layer). One granularity for the whole model.
* torchtitan ([activation_checkpoint], torchtitan/config/job_config.py ActivationCheckpoint):
  ``mode = "none" | "full" | "selective"``; selective takes ``selective_ac_option = "op"`` (its
  per-op policy) or an integer k (every k-th block fully recomputed).

:func:`launcher_recompute` returns the flags for a spec and, when they do not state the plan
exactly, the ExecSpec they do state (priced by the caller beside the plan) and why.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..spec.exec_spec import ExecSpec, RecomputeRange
from ..spec.recompute_spec import ALL_KEPT, SWITCHES, switches_from_mask

__all__ = ["RecomputeEmit", "launcher_recompute", "layer_plan"]

_OPTION_NAMES = {0: "none", 1: "full", 2: "selective"}
_BIT = {name: 1 << index for index, name in enumerate(SWITCHES)}
#: Megatron's selective modules -> the ndcost switches each recomputes (a MoE model's ffAct is moe_act's).
_MEGATRON_MODULES = (
    ("core_attn", ("attBMM", "headCast", "dropout", "softmax")),
    ("layernorm", ("normOp",)),
    ("mla_up_proj", ("attUp",)),
    ("moe_act", ("ffAct",)),
)


@dataclass(frozen=True)
class RecomputeEmit:
    """A launcher's recompute settings for a spec.

    Attributes:
        lines: Flags (Megatron) or TOML lines (torchtitan).
        exact: Whether they state the spec's plan exactly.
        meaning: When not exact, the ExecSpec the lines do state (to price beside the plan).
        note: When not exact, how they differ from the plan.
    """

    lines: tuple[str, ...]
    exact: bool
    meaning: ExecSpec | None = None
    note: str = ""


def layer_plan(model: Any, spec: ExecSpec) -> list[list[tuple[int, int, int]]]:
    """Per (stage, chunk) in run order: (model layer index, option 0/1/2, keep mask) of each layer."""
    from ..tables.layout import build_layout

    layout = build_layout(model, spec)
    by_index = {}
    for index, (stage, chunk, _kind, slot) in enumerate(layout.positions):
        by_index[index] = (int(layout.slot_option[slot]), int(layout.slot_mask[slot]), stage, chunk)
    chunks: dict[tuple[int, int], list] = {}
    for index in sorted(by_index):
        option, mask, stage, chunk = by_index[index]
        chunks.setdefault((stage, chunk), []).append((index, option, mask))
    return [chunks[key] for key in sorted(chunks)]


def _ranges(layers: list[tuple[int, str, int | None]]) -> tuple[RecomputeRange, ...]:
    """Model-order (index, option, mask) runs merged into RecomputeRanges (none runs left out)."""
    out: list[RecomputeRange] = []
    for index, option, mask in sorted(layers):
        if option == "none":
            continue
        switches = None if option == "full" else switches_from_mask(mask)
        last = out[-1] if out else None
        if (last is not None and last.first + last.count == index and last.option == option
                and (dict(last.switches) if last.switches is not None else None) == switches):
            out[-1] = RecomputeRange(last.first, last.count + 1, option, last.switches)
        else:
            out.append(RecomputeRange(index, 1, option, switches))
    return tuple(out)


def _with_recompute(spec: ExecSpec, layers: list[tuple[int, str, int | None]]) -> ExecSpec:
    ranges = _ranges(layers)
    return dataclasses.replace(spec, recompute=ranges if ranges else "none", full_recompute=None,
                               selective_recompute=None)


def _modules_of(mask: int, moe: bool) -> tuple[list[str], list[str]]:
    """Megatron modules covering the switches *mask* recomputes, and the recomputed switches none covers."""
    recomputed = {name for name in SWITCHES if not mask & _BIT[name]}
    modules, covered = [], set()
    for module, switches in _MEGATRON_MODULES:
        if module == "moe_act" and not moe:
            continue
        if set(switches) <= recomputed:
            modules.append(module)
            covered |= set(switches)
    return modules, sorted(recomputed - covered)


def _mask_of(modules: list[str]) -> int:
    mask = ALL_KEPT
    for module, switches in _MEGATRON_MODULES:
        if module in modules:
            for name in switches:
                mask &= ~_BIT[name]
    return mask


def megatron_recompute(model: Any, spec: ExecSpec) -> RecomputeEmit:
    plan = layer_plan(model, spec)
    flat = [layer for chunk in plan for layer in chunk]
    options = {option for _, option, _ in flat}
    moe = bool(getattr(model, "is_moe", False))
    if options <= {0}:
        return RecomputeEmit((), True)
    if options == {1}:
        return RecomputeEmit(("--recompute-granularity full", "--recompute-method uniform",
                              "--recompute-num-layers 1"), True)
    full_first = [sum(1 for _ in _leading(chunk, 1)) for chunk in plan]
    full_count = [sum(1 for _, option, _ in chunk if option == 1) for chunk in plan]
    if 1 in options and options <= {0, 1}:
        n = max(full_count)
        block = all(sum(1 for _, o, _ in chunk if o == 1) == min(n, len(chunk)) == full_first[i]
                    for i, chunk in enumerate(plan))
        lines = ("--recompute-granularity full", "--recompute-method block", f"--recompute-num-layers {n}")
        if block:
            return RecomputeEmit(lines, True)
        meaning = _block_meaning(spec, plan, n)
        return RecomputeEmit(lines, False, meaning,
                             f"Megatron recomputes the first {n} layers of every stage (block); the plan's full "
                             f"layers are not the first of each stage alike")
    masks = {mask for _, option, mask in flat if option == 2}
    if options == {2} and len(masks) == 1:
        mask = masks.pop()
        modules, uncovered = _modules_of(mask, moe)
        lines = ("--recompute-granularity selective", "--recompute-modules " + " ".join(modules or ["core_attn"]))
        if not uncovered and modules:
            return RecomputeEmit(lines, True)
        meaning = dataclasses.replace(spec, recompute="selective", full_recompute=None, selective_recompute=None,
                                      selective_switches=switches_from_mask(_mask_of(modules or ["core_attn"])))
        return RecomputeEmit(lines, False, meaning,
                             f"no Megatron module recomputes only {', '.join(uncovered) or 'this set'}")
    # A mix Megatron cannot state (full and selective, or selective switch sets that differ): the
    # plan's full layers as block recompute, its selective layers left to the union's modules.
    union = ALL_KEPT
    for mask in masks:
        union &= mask
    n = max(full_count) if 1 in options else 0
    if n:
        lines = ("--recompute-granularity full", "--recompute-method block", f"--recompute-num-layers {n}")
        meaning = _block_meaning(spec, plan, n)
        why = (f"Megatron states one granularity: the plan's full layers as block recompute of the first {n} "
               f"of every stage, its selective layers not recomputed")
    else:
        modules, uncovered = _modules_of(union, moe)
        modules = modules or ["core_attn"]
        lines = ("--recompute-granularity selective", "--recompute-modules " + " ".join(modules))
        meaning = dataclasses.replace(spec, recompute="selective", full_recompute=None, selective_recompute=None,
                                      selective_switches=switches_from_mask(_mask_of(modules)))
        why = ("Megatron recomputes the same modules in every layer: the union of the plan's selective switches "
               "on all layers" + (f" ({', '.join(uncovered)} has no module)" if uncovered else ""))
    return RecomputeEmit(lines, False, meaning, why)


def _leading(chunk, option: int):
    for layer in chunk:
        if layer[1] != option:
            return
        yield layer


def _block_meaning(spec: ExecSpec, plan, n: int) -> ExecSpec:
    layers = []
    for chunk in plan:
        for position, (index, _option, _mask) in enumerate(chunk):
            layers.append((index, "full" if position < n else "none", None))
    return _with_recompute(spec, layers)


def torchtitan_recompute(model: Any, spec: ExecSpec) -> RecomputeEmit:
    plan = layer_plan(model, spec)
    flat = sorted(layer for chunk in plan for layer in chunk)
    options = {option for _, option, _ in flat}
    if options <= {0}:
        return RecomputeEmit(('mode = "none"',), True)
    if options == {1}:
        return RecomputeEmit(('mode = "full"',), True)
    full = [index for index, option, _ in flat if option == 1]
    if options <= {0, 1}:
        # every k-th block (torchtitan checkpoints blocks whose layer id % k == 0)
        k = max(1, round(len(flat) / len(full)))
        lines = ('mode = "selective"', f'selective_ac_option = "{k}"')
        stated = [(index, "full" if index % k == 0 else "none", None) for index, _, _ in flat]
        exact = [index for index, option, _ in stated if option == "full"] == full
        if exact:
            return RecomputeEmit(lines, True)
        return RecomputeEmit(lines, False, _with_recompute(spec, stated),
                             f"torchtitan recomputes every {k}-th block fully; the plan's full layers are others")
    if options == {2} and _is_torchtitan_op(model, {mask for _, _, mask in flat}):
        return RecomputeEmit(('mode = "selective"', 'selective_ac_option = "op"'), True)
    meaning = dataclasses.replace(spec, recompute="selective", full_recompute=None, selective_recompute=None,
                                  selective_switches=None)
    return RecomputeEmit(('mode = "selective"', 'selective_ac_option = "op"'), False, meaning,
                         "torchtitan's per-op policy (it saves every other matmul output and the attention) is not "
                         "the planned switch set per layer; priced as ndcost's default selective recompute")


def _is_torchtitan_op(model: Any, masks: set) -> bool:
    """Whether every selective layer runs torchtitan's per-op policy as ndcost prices it: HyperParallel's
    switches on the census of what the policy recomputes (ndcost.spec.torchtitan_sac)."""
    from ..kernels.columns import HYPER_POLICY_MASK
    from ..spec.torchtitan_sac import torchtitan_op_census

    if masks != {HYPER_POLICY_MASK} or not getattr(model, "census", ()):
        return False
    try:
        return tuple(model.census) == tuple(torchtitan_op_census(model))
    except ValueError:
        return False


def launcher_recompute(launcher: str, model: Any, spec: ExecSpec) -> RecomputeEmit:
    """The recompute settings of *launcher* ("megatron", "nemo" -- Megatron-Core's fields -- or "torchtitan")
    for *spec*."""
    return (torchtitan_recompute if launcher == "torchtitan" else megatron_recompute)(model, spec)
