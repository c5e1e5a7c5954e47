"""What a stack replays from CUDA graphs: a set of a layer's three scopes (``ExecSpec.cuda_graphs``).

Megatron-Core captures per-layer CUDA graphs of the sub-blocks its ``--cuda-graph-modules`` (formerly
``--cuda-graph-scope``, Megatron-Bridge's ``cuda_graph_scope``) lists, any subset of ``attn``, ``mlp`` (dense
layers), ``moe`` (drop-and-pad MoE layers), ``moe_router``, ``moe_preprocess`` (with ``moe_router``), ``mamba`` --
none listed: the whole layer (NVIDIA/Megatron-LM@e5ad0980 megatron/core/transformer/enums.py L61-73
CudaGraphModule; its predecessor CudaGraphScope also held ``full_iteration``, now ``cuda_graph_impl``): a set,
not nested levels: NVIDIA's Qwen3-235B-A22B H100 recipe captures ``moe_router
moe_preprocess`` without ``attn`` (NVIDIA/Megatron-LM@e5ad0980 examples/moe_recipes/qwen3_235b/h100/
bf16_256GPU_TP2PP8EP32.yaml L140-141), its gpt-oss GB300 config ``attn moe_router moe_preprocess``
(NVIDIA-NeMo/Megatron-Bridge@0fbfe7d3 scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py L49-50).

Seconds mode splits a layer's kernels into three scopes (``ndcost.kernels.codes.SCOPES``), each named here: ``attn``
(the token mixer's sub-block -- attention or Mamba: its pre-norm, projections, core, rotary, residual add), ``router``
(a MoE layer's pre-norm, router, shared experts and token preprocessing and permutation: Megatron's ``moe_router`` and
``moe_preprocess``, whose capture holds the shared experts unless ``moe_shared_expert_overlap`` runs them beside the
dispatch, off by default: NVIDIA/Megatron-LM@d98e8a64 megatron/core/transformer/transformer_layer.py
``_get_submodules_under_cudagraphs``), ``ffn`` (the rest of the FFN sub-block: the routed experts, un-permutation, a
dense MLP, its residual add). A set's code -- seconds mode's ``graphs`` column -- is its bit mask, bit i for scope i,
and :data:`CUDA_GRAPHS` names the eight sets at their codes. Two names predate the sets and keep their meaning:
``moe_router`` is attention + router (what Megatron-Core's ``attn moe_router moe_preprocess`` captures), ``layer`` all
three (whole layers; ``torch.compile(mode="reduce-overhead")``). Any other set is written with ``+`` (``attn+ffn``); a
spec may spell a set in any order (``router+attn``) and holds its canonical name.
"""
from __future__ import annotations

from typing import Iterable

from ..errors import SpecError

__all__ = ["CUDA_GRAPHS", "GRAPH_SCOPE_NAMES", "canonical_graphs", "graphs_as_named", "graphs_from_megatron",
           "megatron_graph_scopes"]

#: A layer's scopes in bit order (the order of ndcost.kernels.codes.SCOPES: attn, pre, ffn).
GRAPH_SCOPE_NAMES: tuple[str, ...] = ("attn", "router", "ffn")
#: The eight sets' names, each at its bit mask (the ``graphs`` column's code).
CUDA_GRAPHS: tuple[str, ...] = ("none", "attn", "router", "moe_router", "ffn", "attn+ffn", "router+ffn", "layer")
_BIT = {name: 1 << i for i, name in enumerate(GRAPH_SCOPE_NAMES)}
_RULE = (f"be one of {', '.join(map(repr, CUDA_GRAPHS))}, or a '+'-joined set of "
         f"{', '.join(map(repr, GRAPH_SCOPE_NAMES))}")
#: Megatron-Core's capture modules, as ndcost's scopes (the module docstring's enums.py): "moe" is the whole MoE
#: block, router included; "mamba" a Mamba layer's mixer; "full_iteration" (the former scope) captures the step,
#: whose layers are then whole.
_MEGATRON = {"attn": _BIT["attn"], "mamba": _BIT["attn"], "moe_router": _BIT["router"],
             "moe_preprocess": _BIT["router"], "mlp": _BIT["ffn"], "moe": _BIT["router"] | _BIT["ffn"],
             "full_iteration": 7}


def _mask(value: object) -> int | None:
    """The bit mask *value* spells, or None where it spells no set."""
    if not isinstance(value, str):
        return None
    if value in CUDA_GRAPHS:
        return CUDA_GRAPHS.index(value)
    mask = 0
    for part in value.split("+"):
        bit = _BIT.get(part.strip())
        if bit is None:
            bit = CUDA_GRAPHS.index(part.strip()) if part.strip() in CUDA_GRAPHS[1:] else None
        if bit is None:
            return None
        mask |= bit
    return mask


def canonical_graphs(value: object, owner: str = "ExecSpec") -> str:
    """The canonical name of the set *value* spells (``"router+attn"`` -> ``"moe_router"``); a ``SpecError``
    naming ``cuda_graphs`` where it spells none."""
    mask = _mask(value)
    if mask is None:
        raise SpecError("cuda_graphs", owner, _RULE, value)
    return CUDA_GRAPHS[mask]


def graphs_as_named(value: object) -> object:
    """*value* by its canonical name where it spells a set (``router+attn`` -> ``moe_router``), else as given, for
    the caller's own refusal of it (a command-line choice, a batch row's reason)."""
    mask = _mask(value)
    return value if mask is None else CUDA_GRAPHS[mask]


def graphs_from_megatron(scopes: Iterable[str]) -> str:
    """The set Megatron-Core's capture list *scopes* captures (empty: whole layers)."""
    mask = 0
    names = [name.strip() for name in scopes if name.strip()]
    for name in names:
        if name not in _MEGATRON:
            raise SpecError("cuda_graphs", "Megatron-Core cuda_graph_scope", f"name scopes of {sorted(_MEGATRON)}",
                            name)
        mask |= _MEGATRON[name]
    return CUDA_GRAPHS[mask if names else 7]


def megatron_graph_scopes(name: str, is_moe: bool, dropless: bool = False,
                          dense_layers: bool = False) -> tuple[list[str] | None, str | None]:
    """Megatron-Core's ``--cuda-graph-modules`` list for the set *name* of a dense or MoE (*is_moe*) model -- an
    empty list for whole layers, None where nothing is captured -- and, where the list captures less than the
    set, why (None where it captures exactly the set). Megatron-Core has no scope for a MoE layer's experts
    without its router (its ``moe`` holds both), and captures a *dropless* MoE's experts in no per-layer graph:
    it refuses ``moe`` ("moe cuda graph is only supported with drop-padding MoE": NVIDIA/Megatron-LM@d98e8a64
    megatron/core/transformer/transformer_config.py ``__post_init__``), and a whole layer is no better ("the
    resulting dynamic shapes make MoE layers uncapturable", megatron/core/transformer/moe/README.md L514), so
    there the experts are left eager -- whole layers too, which become ``attn moe_router moe_preprocess``. (Its
    full-iteration graph can hold them, over HybridEP's rank capacity and paged stash: another launch than these
    flags state.) A dense layer has no router (its FFN pre-norm is in ``ffn``); a MoE model's *dense_layers* (its
    ``--moe-layer-freq`` holds dense ones, as DeepSeek-V3's first three) capture their MLP with ``mlp``, which
    Megatron-Core allows only there (transformer_config.py: "mlp cuda graph is only supported for dense layers")."""
    mask = CUDA_GRAPHS.index(name)
    if not is_moe:
        mask &= ~_BIT["router"]
    if mask == (7 if is_moe else _BIT["attn"] | _BIT["ffn"]) and not (is_moe and dropless):
        return [], None
    scopes = ["attn"] if mask & _BIT["attn"] else []
    why = None
    if is_moe and mask & _BIT["router"] and mask & _BIT["ffn"] and not dropless:
        scopes += ["moe"]
    elif is_moe:
        scopes += ["moe_router", "moe_preprocess"] if mask & _BIT["router"] else []
        if mask & _BIT["ffn"]:
            why = ("captures a MoE layer's experts ('moe', or whole layers) only with drop-and-pad, not in a "
                   "dropless one (its dynamic shapes)"
                   if mask & _BIT["router"] else
                   "has no scope for a MoE layer's experts without its router (its 'moe' holds both)")
    if mask & _BIT["ffn"] and (not is_moe or dense_layers):
        scopes += ["mlp"]
    return scopes or None, why
