"""Distinct layouts, packed once for the batch kernels (``ndcost.kernels.columns.LAYOUT_FIELDS``).

A candidate's layout (:class:`ndcost.tables.layout.Layout`) depends only on the model
and the layout fields of its spec, so a batch builds each distinct layout once
and the kernels read it through a table row: ``pool`` (float64) holds every
layout's chunk-summed counts (pp, K*O) for ND's walk, its per-chunk counts
(pp, vpp, K*O) for the memory model and its stage x kind presence (pp, K);
``slot_pool`` (int64) its slot options then its slot keep masks.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..kernels.columns import LAYOUT, LAYOUT_FIELDS

__all__ = ["LayoutPiece", "LayoutPool", "layout_piece", "pack_layouts"]


class LayoutPiece:
    """One layout's kernel arrays (flat, float64 / int64) and placement."""

    __slots__ = ("pp", "vpp", "n_slots", "stage_counts", "chunk_counts", "present", "slots",
                 "emb_stage", "out_stage", "emb_chunk", "out_chunk", "mtp_out")

    def __init__(self, counts: np.ndarray, slot_option: np.ndarray, slot_mask: np.ndarray, emb_stage: int,
                 out_stage: int, emb_chunk: int, out_chunk: int, mtp_out: int) -> None:
        p, vp, k, o = counts.shape
        self.pp, self.vpp, self.n_slots = p, vp, o
        # ND's walk: chunks summed, kind-major (Layout.stage_counts).
        self.stage_counts = np.ascontiguousarray(counts.sum(axis=1).reshape(p * k * o), dtype=np.float64)
        self.chunk_counts = np.ascontiguousarray(counts.reshape(p * vp * k * o), dtype=np.float64)
        self.present = (counts.sum(axis=(1, 3)) > 0).astype(np.float64).reshape(p * k)
        self.slots = np.concatenate([np.asarray(slot_option, dtype=np.int64), np.asarray(slot_mask, dtype=np.int64)])
        self.emb_stage, self.out_stage = int(emb_stage), int(out_stage)
        self.emb_chunk, self.out_chunk, self.mtp_out = int(emb_chunk), int(out_chunk), int(mtp_out)


def layout_piece(layout: Any) -> LayoutPiece:
    """The piece of a layout object (``counts`` (pp, vpp, K, O), ``slot_option``, ``slot_mask``,
    ``emb_stage``, ``out_stage``, ``mtp_layers_on_out_stage``; optionally ``emb_chunk``
    (default 0) and ``out_chunk`` (default vpp - 1), as ``memory_estimate`` reads them)."""
    counts = np.asarray(layout.counts, dtype=np.float64)
    vp = counts.shape[1]
    return LayoutPiece(counts, layout.slot_option, layout.slot_mask, layout.emb_stage, layout.out_stage,
                       getattr(layout, "emb_chunk", 0), getattr(layout, "out_chunk", vp - 1),
                       getattr(layout, "mtp_layers_on_out_stage", 0))


class LayoutPool:
    """Pieces packed: ``layouts`` (L, LAYOUT_FIELDS) int64, ``pool`` float64, ``slot_pool``
    int64, and ``max_pp`` (the largest pp, for per-stage outputs)."""

    __slots__ = ("layouts", "pool", "slot_pool", "max_pp")

    def __init__(self, layouts: np.ndarray, pool: np.ndarray, slot_pool: np.ndarray, max_pp: int) -> None:
        self.layouts, self.pool, self.slot_pool, self.max_pp = layouts, pool, slot_pool, max_pp
        for array in (layouts, pool, slot_pool):
            array.setflags(write=False)


def pack_layouts(pieces: Sequence[LayoutPiece]) -> LayoutPool:
    """The pool of *pieces*, in order (row i of ``layouts`` is ``pieces[i]``)."""
    table = np.zeros((len(pieces), len(LAYOUT_FIELDS)), dtype=np.int64)
    floats: list[np.ndarray] = []
    ints: list[np.ndarray] = []
    at = slot_at = 0
    for i, piece in enumerate(pieces):
        row = table[i]
        row[LAYOUT["pp"]], row[LAYOUT["vpp"]], row[LAYOUT["n_slots"]] = piece.pp, piece.vpp, piece.n_slots
        for name, array in (("counts_at", piece.stage_counts), ("mcounts_at", piece.chunk_counts),
                            ("present_at", piece.present)):
            row[LAYOUT[name]] = at
            floats.append(array)
            at += array.shape[0]
        row[LAYOUT["slots_at"]] = slot_at
        ints.append(piece.slots)
        slot_at += piece.slots.shape[0]
        row[LAYOUT["emb_stage"]], row[LAYOUT["out_stage"]] = piece.emb_stage, piece.out_stage
        row[LAYOUT["emb_chunk"]], row[LAYOUT["out_chunk"]] = piece.emb_chunk, piece.out_chunk
        row[LAYOUT["mtp_out"]] = piece.mtp_out
    pool = np.concatenate(floats) if floats else np.zeros(0, dtype=np.float64)
    slot_pool = np.concatenate(ints) if ints else np.zeros(0, dtype=np.int64)
    max_pp = max((piece.pp for piece in pieces), default=1)
    return LayoutPool(table, pool, slot_pool, max_pp)
