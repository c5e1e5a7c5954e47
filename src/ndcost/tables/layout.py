"""Where every layer runs: stages × chunks × layer slots, and how it recomputes.

ND's partition generator (docs/ND_MODEL.md §1.6) places ``lay`` layers — the body,
plus the MTP layers when they count in the offset, plus embedding and output
when those do — ``per = lay // (pp·vpp)`` to a chunk, adjusted by a 1-D or 2-D
offset, stage by stage and chunk by chunk, never more than remain. Layers are
then numbered in *model order*, chunk by chunk across the stages (for
zero_bubble_v and dualpipev the second chunk runs the stages backwards: DualPipeV's V), and
recompute ranges, which speak of model order, give each layer its option.

The kernels do not see layers: they see, per (stage, chunk), how many layers
of each kind run each *option slot* (none, full, or a selective switch
setting). A :class:`Layout` holds those counts; it depends only on the model
and the layout fields of the spec, so it is built once per distinct
(pp, vpp, offset, schedule, recompute) and shared by every candidate with the
same layout.

Two placements, one per unit (``build_layout(..., nd=)``): ``units="nd"`` prices ND's own
(:mod:`ndcost.tables.layout_nd`, the generator as upstream writes it); everything else -- seconds
mode, the memory a launch holds, the emitted launch layout -- the placement the layers run in, which
differs from ND's where ND's is not where a layer runs (docs/ND_DIFFERENCES.md):

* With no offset and ``lay`` not a multiple of pp·vpp, ND's generator drops the
  remainder (its search adds a default offset that spreads it, §1.6 "Offsets in
  the search"). ndcost spreads the remainder itself, one layer a cell, to the
  cells nearest the middle of the pipeline first: the first stage holds the
  embedding and the most micro-batches in flight, the last the output layer.
* The output layer goes where the last layer in model order runs: for the V schedules
  stage 0 of DualPipeV's V, not the last stage; past an empty cell, the model's
  true last layer, not the cell before the gap.

A vision-language model's vision tower shares the pipeline (docs/ND_MODEL.md §1.4:
its submodule is front-loaded by an offset that puts every vision layer on the
first stage; §1.6 ``combine_partition_multimodal`` joins the submodules' chunk
lists). Its blocks run where the text embedding runs, before it: the image
features enter the text there. They are not in the text model's order, so
offsets, partitions and recompute ranges speak of the text layers only; a
vision block recomputes as the spec's whole-model mode says (``recompute="full"``
or ``"selective"`` with the spec's switches), and runs plain otherwise.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .cache import per_object
from ..kernels.columns import OPTION_FULL, OPTION_NONE, OPTION_SELECTIVE
from ..errors import SpecError
from ..spec.exec_spec import ExecSpec
from ..spec.exec_spec_rules import V_SCHEDULES
from ..spec.recompute_spec import ALL_KEPT
from .layout_nd import EMBEDDING, OUTPUT, nd_placement, per_stage_count, range_options
from .joint_rules import _layout_rules, offset_chunk_counts, offset_layer_count, pipeline_depth_error

__all__ = ["Layout", "build_layout", "layout_if_valid", "LAYOUT_FIELDS"]

#: The ExecSpec fields a layout depends on (and nothing else).
LAYOUT_FIELDS = (
    "pp", "vpp", "pp_schedule", "offset", "pp_partition", "mtp_in_offset", "emb_out_in_offset",
    "recompute", "full_recompute", "selective_recompute", "selective_rule", "selective_switches",
    "selective_comm_recompute", "flash_attention", "sequence_parallel", "tp",
)

_EMBEDDING = -1
_OUTPUT = -2
_VISION = -3
_ENDS = (EMBEDDING, OUTPUT)


@dataclass(frozen=True, eq=False)
class Layout:
    """The placement of one (model, spec layout).

    Attributes:
        counts: float64 (pp, vpp, K, O): layers of kind k running option slot o
            on (stage, chunk); MTP layers included as layers of their kind.
        slot_option: int64 (O,): 0 none, 1 full, 2 selective, per slot.
        slot_mask: int64 (O,): the keep mask of each slot (0xFF none, 0 full).
        emb_stage, emb_chunk, out_stage, out_chunk: where the embedding and the
            output layer run.
        mtp_stage_counts: int64 (pp,): MTP layers per stage.
        positions: per layer in model order, ``(stage, chunk, kind, slot)``.
        stages: per (stage, chunk), the layers in run order as model indices;
            -1 is the embedding, -2 the output layer, -3 a vision-tower block.
    """

    counts: np.ndarray
    slot_option: np.ndarray
    slot_mask: np.ndarray
    emb_stage: int
    emb_chunk: int
    out_stage: int
    out_chunk: int
    mtp_stage_counts: np.ndarray
    positions: tuple
    stages: tuple

    @property
    def pp(self) -> int:
        return self.counts.shape[0]

    @property
    def vpp(self) -> int:
        return self.counts.shape[1]

    @property
    def mtp_layers_on_out_stage(self) -> int:
        return int(self.mtp_stage_counts[self.out_stage])

    def stage_counts(self) -> np.ndarray:
        """(pp, K·O) float64: chunks summed, kind-major (ND's per-stage walk)."""
        p, _, k, o = self.counts.shape
        return np.ascontiguousarray(self.counts.sum(axis=1).reshape(p, k * o))

    def layers_per_stage(self) -> np.ndarray:
        """Transformer layers (body + MTP) on each stage."""
        return self.counts.sum(axis=(1, 2, 3))


_LAYOUT_VALUES = operator.itemgetter(*LAYOUT_FIELDS)
_SWITCHES_AT = LAYOUT_FIELDS.index("selective_switches")


def _layout_key(spec: ExecSpec) -> tuple:
    key = _LAYOUT_VALUES(spec.__dict__)
    switches = key[_SWITCHES_AT]
    if switches is not None:
        # selective_switches is a read-only proxy, which does not hash: key it by its items.
        key = key[:_SWITCHES_AT] + (tuple(switches.items()),) + key[_SWITCHES_AT + 1:]
    return key


#: Layouts kept per model (a search meets few distinct layouts; a bound keeps a long run's memory flat).
_LAYOUTS_PER_MODEL = 4096


def build_layout(model: Any, spec: ExecSpec, nd: bool = False) -> Layout:
    """The :class:`Layout` of *spec* on *model*, cached per model object, distinct layout key and *nd*.

    *nd*: ND's own placement (:mod:`ndcost.tables.layout_nd`, what ``units="nd"`` prices), else
    where the layers run (seconds mode, the memory a launch holds, the emitted placement).

    Raises:
        SpecError: For a pipeline deeper than the model (validate's rule 4), before any work:
            a layout's grid and loops grow with pp*vpp.
    """
    depth = pipeline_depth_error(model, spec.pp, spec.vpp)
    if depth is not None:
        raise depth
    key = (_layout_key(spec), nd)
    cache = per_object(model)
    layouts = cache.get("layouts")
    if layouts is None:
        layouts = cache["layouts"] = {}
    layout = layouts.get(key)
    if layout is None:
        if len(layouts) >= _LAYOUTS_PER_MODEL:
            layouts.clear()
        layout = layouts[key] = _build(model, spec, nd)
    return layout


def _spread_remainder(per: int, remainder: int, pp: int, vpp: int) -> list[list[int]]:
    """Counts[chunk][stage] with *remainder* extra layers, middle stages first."""
    order = sorted(range(pp), key=lambda s: (abs(s - (pp - 1) / 2), s))
    counts = [[per] * pp for _ in range(vpp)]
    cells = [(v, s) for v in range(vpp) for s in order]
    for v, s in cells[:remainder]:
        counts[v][s] += 1
    return counts


def placed_counts(model: Any, spec: ExecSpec) -> list[list[int]]:
    """Layers each chunk of each stage takes as the offset counts them, counts[chunk][stage]
    (ND's ``lay`` placed: body, + MTP if mtp_in_offset, + 2 if emb_out_in_offset)."""
    return _chunk_counts(model, spec, offset_layer_count(model, spec))


def _chunk_counts(model: Any, spec: ExecSpec, lay: int, nd: bool = False) -> list[list[int]]:
    """Layers per chunk per stage, counts[chunk][stage], as ND's generator assigns them; without an
    offset ND (*nd*) places ``per`` layers a cell and drops the remainder, ndcost spreads it."""
    pp, vpp = spec.pp, spec.vpp
    if spec.pp_partition is not None:
        # Layers per stage, split evenly over the chunks, the last taking the rest.
        raw = [[part // vpp + (part % vpp if v == vpp - 1 else 0) for part in spec.pp_partition]
               for v in range(vpp)]
    elif spec.offset is not None:
        raw = [list(row) for row in offset_chunk_counts(model, spec)]
    else:
        per, remainder = divmod(lay, pp * vpp)
        raw = _spread_remainder(per, 0 if nd else remainder, pp, vpp)
    # ND assigns stage by stage, then chunk by chunk, never more than remain.
    remaining = lay
    counts = [[0] * pp for _ in range(vpp)]
    for s in range(pp):
        for v in range(vpp):
            take = max(0, min(remaining, raw[v][s]))
            counts[v][s] = take
            remaining -= take
    if remaining and not (nd and spec.offset is None and spec.pp_partition is None):
        raise SpecError("offset", "ExecSpec", f"place all {lay} layers", spec.offset or spec.pp_partition)
    return counts


def _model_order(counts: list[list[int]], spec: ExecSpec) -> list[tuple[int, int]]:
    """(stage, chunk) of each placed layer in model order (ND layer_order.get_model_order)."""
    pp, vpp = spec.pp, spec.vpp
    order = []
    for v in range(vpp):
        stages = range(pp)
        if spec.schedule in V_SCHEDULES and v % 2 == 1:
            stages = range(pp - 1, -1, -1)  # DualPipeV: the second chunk runs back up the V
        for s in stages:
            order.extend((s, v) for _ in range(counts[v][s]))
    return order


def _per_stage_options(spec: ExecSpec, placed: list[tuple[int, int]], statement: Any, option: int) -> list[int]:
    """Options from ND's per-stage full_rec / sel_rec (docs/ND_MODEL.md §1.6 "Recompute per chunk")."""
    pp, vpp = spec.pp, spec.vpp
    if statement is True:
        return [option] * len(placed)
    per_chunk = [[per_stage_count(statement, s, v, vpp) for s in range(pp)] for v in range(vpp)]
    seen: dict[tuple[int, int], int] = {}
    options = []
    for s, v in placed:
        index = seen.get((s, v), 0)
        seen[(s, v)] = index + 1
        options.append(option if index < per_chunk[v][s] else OPTION_NONE)
    return options


def _layer_options(spec: ExecSpec, n_layers: int, placed_layers: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(option, keep mask) of each body/MTP layer in model order."""
    stated = spec.recompute_option
    if stated == "ranges":
        return range_options(spec, n_layers)
    if stated in ("full", "selective", "per_stage") and (
        spec.full_recompute not in (None, False) or spec.selective_recompute not in (None, False)
    ):
        if spec.full_recompute not in (None, False):
            opts = _per_stage_options(spec, placed_layers, spec.full_recompute, OPTION_FULL)
        else:
            opts = _per_stage_options(spec, placed_layers, spec.selective_recompute, OPTION_SELECTIVE)
        masks = {OPTION_NONE: ALL_KEPT, OPTION_FULL: 0, OPTION_SELECTIVE: spec.keep_mask}
        return [(o, masks[o]) for o in opts]
    if stated == "full":
        return [(OPTION_FULL, 0)] * n_layers
    if stated == "selective":
        return [(OPTION_SELECTIVE, spec.keep_mask)] * n_layers
    return [(OPTION_NONE, ALL_KEPT)] * n_layers


def _vision_option(spec: ExecSpec) -> tuple[int, int]:
    """(option, keep mask) of a vision-tower block: the spec's whole-model recompute mode."""
    if spec.recompute_option == "full":
        return OPTION_FULL, 0
    if spec.recompute_option == "selective":
        return OPTION_SELECTIVE, spec.keep_mask
    return OPTION_NONE, ALL_KEPT


def _model_placement(model: Any, spec: ExecSpec, counts: list[list[int]], lay: int) -> tuple:
    """Where the layers run (seconds mode's placement): ``(embedding cell, output cell, layers, run)``
    as :func:`ndcost.tables.layout_nd.nd_placement` returns them. The output layer runs after the
    model's last layer (for zero_bubble_v on stage 0, where DualPipeV's V ends) and the MTP layers,
    when the offset does not count them, run after it, in its chunk."""
    n_layers = model.num_hidden_layers + model.num_nextn_predict_layers
    placed = _model_order(counts, spec)  # one (stage, chunk) per placed slot, model order
    # What each placed slot holds, in model order: the embedding and output
    # take the first and last slot when they count in the offset.
    slots: list[int] = list(range(len(placed)))
    if spec.emb_out_in_offset:
        slots = [_EMBEDDING] + list(range(len(placed) - 2)) + [_OUTPUT]
    layer_at = [where for where, what in zip(placed, slots) if what >= 0]  # (stage, chunk) of model layer i
    if not spec.mtp_in_offset:
        # MTP layers run after the last layer, in its chunk (ND duplicates the last layer n_mtp times).
        last = layer_at[-1] if layer_at else placed[-1]
        layer_at.extend([last] * model.num_nextn_predict_layers)
    if len(layer_at) != n_layers:
        raise SpecError("offset", "ExecSpec", f"place the model's {n_layers} layers", len(layer_at))
    emb, out = (placed[0], placed[-1]) if spec.emb_out_in_offset else (layer_at[0], layer_at[-1])
    layers = list(zip(layer_at, _layer_options(spec, n_layers, layer_at)))
    run: dict[tuple[int, int], list] = {(s, v): [] for s in range(spec.pp) for v in range(spec.vpp)}
    run[emb].append(_ENDS[0])
    for i, (where, _) in enumerate(layers):
        run[where].append(i)
    run[out].append(_ENDS[1])
    return emb, out, layers, run


def _build(model: Any, spec: ExecSpec, nd: bool) -> Layout:
    pp, vpp = spec.pp, spec.vpp
    n_body = model.num_hidden_layers
    lay = offset_layer_count(model, spec)
    counts = _chunk_counts(model, spec, lay, nd)
    if nd:
        emb, out, layers, run = nd_placement(spec, counts, n_body + model.num_nextn_predict_layers,
                                             model.num_nextn_predict_layers)
    else:
        emb, out, layers, run = _model_placement(model, spec, counts, lay)

    vision_option = _vision_option(spec)
    vision_kinds = model.vision_kinds_in_order
    slot_set = {option for _, option in layers} | {(OPTION_NONE, ALL_KEPT)}
    if vision_kinds:
        slot_set.add(vision_option)
    slot_keys = sorted(slot_set, key=lambda om: (om[0], -om[1]))
    slot_index = {key: i for i, key in enumerate(slot_keys)}
    n_kinds = len(model.kinds)
    grid = np.zeros((pp, vpp, n_kinds, len(slot_keys)), dtype=np.float64)
    kinds_in_order = model.layer_kinds_in_order
    positions = []
    for k in vision_kinds:   # the tower runs first, where the embedding is
        grid[emb[0], emb[1], k, slot_index[vision_option]] += 1.0
    mtp_stage = np.zeros(pp, dtype=np.int64)
    for i, ((s, v), option) in enumerate(layers):
        # a layer past the model's own (none in seconds mode) keeps the last kind, as ND's does
        k = kinds_in_order[min(i, len(kinds_in_order) - 1)]
        o = slot_index[option]
        grid[s, v, k, o] += 1.0
        positions.append((s, v, k, o))
        if i >= n_body:
            mtp_stage[s] += 1
    ends = {_ENDS[0]: _EMBEDDING, _ENDS[1]: _OUTPUT}
    stages = tuple(tuple(tuple(([_VISION] * len(vision_kinds) if (s, v) == emb else [])
                               + [ends.get(entry, entry) for entry in run[(s, v)]]) for v in range(vpp))
                   for s in range(pp))
    grid.setflags(write=False)
    slot_option = np.array([key[0] for key in slot_keys], dtype=np.int64)
    slot_mask = np.array([key[1] for key in slot_keys], dtype=np.int64)
    for arr in (slot_option, slot_mask, mtp_stage):
        arr.setflags(write=False)
    return Layout(
        counts=grid,
        slot_option=slot_option,
        slot_mask=slot_mask,
        emb_stage=emb[0],
        emb_chunk=emb[1],
        out_stage=out[0],
        out_chunk=out[1],
        mtp_stage_counts=mtp_stage,
        positions=tuple(positions),
        stages=stages,
    )


def layout_if_valid(model: Any, spec: ExecSpec, nd: bool = False) -> Layout | None:
    """The spec's layout, or None when the layout rules refuse it (a batch row's reason "layout").

    A pipeline deeper than the model (rule 4) is refused before anything is built -- a layout's
    work grows with pp*vpp -- then validate's rule 7 (offsets, partitions, per-layer ranges).
    """
    if pipeline_depth_error(model, spec.pp, spec.vpp) is not None or any(True for _ in _layout_rules(model, spec)):
        return None
    try:
        return build_layout(model, spec, nd)
    except SpecError:
        return None
