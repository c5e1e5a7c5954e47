"""Where ND's own partition generator puts every layer: the placement ``units="nd"`` prices.

ND's generator (docs/ND_MODEL.md §1.6; HyperParallel's ``PartitionGenerator``) fills each (stage,
chunk) cell with a list of layer types, stage by stage and chunk by chunk, then places the
embedding, the output layer and the duplicated MTP layers, and only then numbers the layers in
model order. Four of its rules are not where a layer physically runs, and ND units keep all four,
because they move ND's score (docs/ND_DIFFERENCES.md lists each with its effect); seconds mode
places the layers as they run (:mod:`ndcost.tables.layout`):

* Without an offset, a cell takes ``per = lay // (pp*vpp)`` layers and the remainder is never
  placed: ND prices ``pp*vpp*per`` layers (its search avoids this by always stating an offset).
* The output layer, and the MTP layers when the offset does not count them, go to the *last
  non-empty cell* of a scan that walks chunk by chunk, the stages inside each chunk, and stops at
  the first empty cell after a non-empty one. Without an empty cell that is the last stage's last
  chunk -- for zero_bubble_v too, whose last layer in model order runs on stage 0.
* With ``emb_out_in_offset`` the embedding and the output layer take the first slot of the first
  cell and the last slot of that last cell (they replace a layer there).
* A per-stage recompute count marks the first k slots of a cell in the cell's own order; for
  zero_bubble_v's second chunk ND's model order runs that cell backwards, so those are its last
  layers in model order.

Sources: ``hyper_parallel/auto_parallel/sapp_nd/nd/common/generate_partitions.py`` (ttachon/hyper-parallel
@6ae7c2a6: ``generate_partitions_vpp_unimodal``, ``insert_emb_out_partitions_*``,
``first_and_last_non_empty_stage``) and ``nd/common/layer_order.py`` (same commit: ``get_model_order``,
``layer_recompute_types``); the layer kinds by position follow ``perf_estimation/getters.py``
(``get_layer_configs_by_position``: a position past the stack keeps its last kind).
"""
from __future__ import annotations

from typing import Any, Callable

from ..kernels.columns import OPTION_FULL, OPTION_NONE, OPTION_SELECTIVE
from ..spec.exec_spec import ExecSpec
from ..spec.exec_spec_rules import V_SCHEDULES, states_per_stage
from ..spec.recompute_spec import ALL_KEPT

__all__ = ["nd_placement", "nd_search_offset", "first_and_last_cells", "per_stage_count", "range_options",
           "EMBEDDING", "OUTPUT"]

#: A cell's entry for the embedding and the output layer (a layer's entry is its (option, mask)).
EMBEDDING = "embedding"
OUTPUT = "output"
_ENDS = (EMBEDDING, OUTPUT)


def per_stage_count(statement: Any, s: int, v: int, vpp: int) -> int:
    """Layers of cell (s, v) a per-stage recompute count covers (docs/ND_MODEL.md §1.6 "Recompute per
    chunk"): ``statement[v][s]`` for a vpp x pp grid, else stage s's count spread over its chunks,
    the first ``count % vpp`` chunks taking one more."""
    if isinstance(statement[0], tuple):
        return statement[v][s]
    return statement[s] // vpp + (1 if v < statement[s] % vpp else 0)


def _cell_option(spec: ExecSpec) -> Callable[[int, int, int], tuple[int, int]]:
    """(stage, chunk, slot in the cell) -> (option, keep mask), as the generator marks a cell's slots
    before any recompute range is placed (full_rec read before sel_rec, as ND does)."""
    none = (OPTION_NONE, ALL_KEPT)
    for statement, kept in ((spec.full_recompute, (OPTION_FULL, 0)),
                            (spec.selective_recompute, (OPTION_SELECTIVE, spec.keep_mask))):
        if states_per_stage(statement):
            if statement is True:
                return lambda s, v, j: kept
            vpp = spec.vpp
            return lambda s, v, j: kept if j < per_stage_count(statement, s, v, vpp) else none
    whole = {"full": (OPTION_FULL, 0), "selective": (OPTION_SELECTIVE, spec.keep_mask)}.get(spec.recompute_option, none)
    return lambda s, v, j: whole


def range_options(spec: ExecSpec, n_layers: int) -> list[tuple[int, int]]:
    """(option, keep mask) of each of *n_layers* layers in model order from the spec's recompute
    ranges; a layer no range covers runs plain (docs/ND_MODEL.md §1.6, ``layer_recompute_types``)."""
    options = [(OPTION_NONE, ALL_KEPT)] * n_layers
    for rng in spec.recompute:
        kind = {"none": OPTION_NONE, "full": OPTION_FULL, "selective": OPTION_SELECTIVE}[rng.option]
        mask = ALL_KEPT if kind == OPTION_NONE else (0 if kind == OPTION_FULL else spec.range_keep_mask(rng))
        for i in range(rng.first, min(n_layers, rng.first + rng.count)):
            options[i] = (kind, mask)
    return options


def first_and_last_cells(cells: dict, pp: int, vpp: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """ND's ``first_and_last_non_empty_stage``: the first non-empty (stage, chunk), and the last one
    of a walk chunk by chunk (stages inside each chunk) that stops at the first empty cell after a
    non-empty one; (0, 0) and (pp - 1, vpp - 1) when every cell is empty."""
    first = last = None
    for v in range(vpp):
        for s in range(pp):
            if cells[(s, v)]:
                last = (s, v)
                if first is None:
                    first = (s, v)
            elif first is not None:
                return first, last
    return (first or (0, 0)), (last or (pp - 1, vpp - 1))


def _model_order(cells: dict, spec: ExecSpec) -> list[tuple[int, int, int]]:
    """(stage, chunk, slot) of each layer in ND's model order (``get_model_order``): chunk by chunk
    across the stages; for zero_bubble_v everything after the first chunk's layers reversed (the
    first chunk's entries counted with the embedding and the output layer, less one, as ND does)."""
    pp, vpp = spec.pp, spec.vpp
    order = [(s, v, j) for v in range(vpp) for s in range(pp)
             for j, entry in enumerate(cells[(s, v)]) if entry not in _ENDS]
    if spec.schedule in V_SCHEDULES:
        first = sum(len(cells[(s, 0)]) for s in range(pp)) - 1
        order = order[:first] + order[first:][::-1]
    return order


def nd_placement(spec: ExecSpec, counts: list[list[int]], n_layers: int, mtp: int) -> tuple:
    """ND's partition of *counts* (layers per cell, ``counts[chunk][stage]``) for a model of
    *n_layers* layers (MTP included; *mtp* of them MTP layers).

    Returns:
        ``(embedding cell, output cell, layers, run)``: *layers* lists, in model order, each layer's
        ``((stage, chunk), (option, keep mask))``; *run* maps each cell to its entries in the cell's
        order, a layer by its model index, the embedding and output as EMBEDDING / OUTPUT.
    """
    pp, vpp = spec.pp, spec.vpp
    option_at = _cell_option(spec)
    cells = {(s, v): [option_at(s, v, j) for j in range(counts[v][s])] for s in range(pp) for v in range(vpp)}
    first, last = first_and_last_cells(cells, pp, vpp)
    if not spec.mtp_in_offset and mtp and cells[last]:
        # ND duplicates the last cell's last layer once per MTP layer, in that cell
        cells[last].extend([cells[last][-1]] * mtp)
    if spec.emb_out_in_offset:
        cells[first][0] = EMBEDDING
        cells[last][-1] = OUTPUT
    else:
        cells[first].insert(0, EMBEDDING)
        cells[last].append(OUTPUT)
    order = _model_order(cells, spec)
    if isinstance(spec.recompute, tuple):
        # a layer past the ranges' layers runs plain (layer_recompute_types)
        options = range_options(spec, n_layers)
        for i, (s, v, j) in enumerate(order):
            cells[(s, v)][j] = options[i] if i < n_layers else (OPTION_NONE, ALL_KEPT)
    index = {(s, v, j): i for i, (s, v, j) in enumerate(order)}
    layers = [((s, v), cells[(s, v)][j]) for s, v, j in order]
    run = {(s, v): [entry if entry in _ENDS else index[(s, v, j)] for j, entry in enumerate(cells[(s, v)])]
           for s in range(pp) for v in range(vpp)}
    return first, last, layers, run


def nd_search_offset(lay: int, pp: int, vpp: int) -> tuple | None:
    """The offset ND's search gives a candidate that states none, so that no layer is dropped
    (docs/ND_MODEL.md §1.6 "Offsets in the search": ``BalancingAdapter.default_offset`` then
    ``make_valid``, nd/balancing_adapter.py in ttachon/hyper-parallel@c363dbe0): one extra layer
    for each of the ``lay % (pp*vpp)`` left over, in ND's order -- with vpp 1 the first stages; with
    interleaving, cells of the later chunks first. A 1-D tuple for vpp 1, else vpp x pp; None when
    ``lay`` divides evenly (no offset needed).
    """
    cells = pp * vpp
    rest = lay % cells
    if rest == 0:
        return None
    # default_offset: rows built back to front (each new row first, each row's entries reversed)
    rows: list[list[int]] = []
    left = rest
    for v in range(vpp):
        rows.insert(0, [])
        for s in range(pp):
            extra = 1 if left > 0 and v > 0 and s > 0 else 0
            left -= extra
            rows[0].insert(0, extra)
    if rows[0][0] == 1:
        rows[0][0] = 0
        rows[-1][-1] = 1
    # make_valid: the extras made to sum to the remainder, each added to the first smallest entry
    flat = [x for row in rows for x in row]
    for _ in range(rest - sum(flat)):
        flat[flat.index(min(flat))] += 1
    if vpp == 1:
        return tuple(flat)
    return tuple(tuple(flat[v * pp:(v + 1) * pp]) for v in range(vpp))
