"""A strategy's pipeline layout as the launchers state it, when the even split is not it.

Megatron-LM and torchtitan split the layers evenly by default. An ``offset`` or a
``pp_partition`` (or a layer count the split does not divide) places them otherwise,
and a launch command that leaves the layout out would run another strategy than the
one priced. Both launchers take an explicit layout, virtual stage by virtual stage:

* Megatron-LM ``--pipeline-model-parallel-layout`` (docs: "Custom Pipeline Model
  Parallel Layout"): one string, virtual stages separated by ``|``, ``E`` the
  embedding, ``t`` a decoder layer, ``m`` an MTP layer, ``L`` the loss (output).
* torchtitan ``[parallelism] module_fqns_per_model_part``: per virtual stage, the
  module names it holds (``tok_embeddings``, ``layers.<i>``, ``norm`` + ``output``).

Virtual stages are numbered as both launchers run them: chunk by chunk, the stages
of a chunk in rank order; for a V schedule (zero_bubble_v, dualpipev) every odd chunk runs the
ranks backwards. A vision tower's blocks are left out (neither string names them:
both launchers place the encoder with the embedding, as ndcost's layout does), and so
are MTP layers in torchtitan's names (its models have none).
"""
from __future__ import annotations

from typing import Any

from ..spec.exec_spec import ExecSpec
from ..spec.exec_spec_rules import V_SCHEDULES
from ..tables.layout import build_layout

__all__ = ["needs_layout", "virtual_stages", "megatron_layout", "torchtitan_fqns"]

_EMBEDDING, _OUTPUT, _VISION = -1, -2, -3


def needs_layout(model: Any, spec: ExecSpec) -> bool:
    """Whether the spec's placement differs from the launchers' even split: the body layers
    split evenly over the virtual stages, the embedding on the first, the MTP layers and the
    loss on the last. Judged on the placement itself, not on which fields are set: an offset
    of zeros is the even split, and MTP layers counted in the offset can move it."""
    virtual = spec.pp * spec.vpp
    if model.num_hidden_layers % virtual:
        return True
    even = ["t" * (model.num_hidden_layers // virtual)] * virtual
    even[0] = "E" + even[0]
    even[-1] += "m" * model.num_nextn_predict_layers + "L"
    return megatron_layout(model, spec) != "|".join(even)


def virtual_stages(model: Any, spec: ExecSpec) -> list[tuple[int, ...]]:
    """Per virtual stage in launch order, its entries in run order (layer index, -1 embedding, -2 output)."""
    layout = build_layout(model, spec)
    order = []
    for chunk in range(layout.vpp):
        ranks = range(layout.pp)
        if spec.schedule in V_SCHEDULES and chunk % 2 == 1:
            ranks = reversed(ranks)
        order += [(stage, chunk) for stage in ranks]
    return [tuple(i for i in layout.stages[stage][chunk] if i != _VISION) for stage, chunk in order]


def megatron_layout(model: Any, spec: ExecSpec) -> str:
    """The ``--pipeline-model-parallel-layout`` string of the spec's placement."""
    body = model.num_hidden_layers

    def letter(index: int) -> str:
        if index == _EMBEDDING:
            return "E"
        if index == _OUTPUT:
            return "L"
        return "m" if index >= body else "t"

    return "|".join("".join(letter(i) for i in stage) for stage in virtual_stages(model, spec))


def torchtitan_fqns(model: Any, spec: ExecSpec) -> list[list[str]]:
    """``module_fqns_per_model_part``: the module names of each virtual stage."""
    body = model.num_hidden_layers
    parts = []
    for stage in virtual_stages(model, spec):
        names: list[str] = []
        for index in stage:
            if index == _EMBEDDING:
                names.append("tok_embeddings")
            elif index == _OUTPUT:
                names += ["norm", "output"]
            elif index < body:
                names.append(f"layers.{index}")
        parts.append(names)
    return parts
