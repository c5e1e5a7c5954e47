"""``estimate_many()``: N candidates priced by compiled calls per chunk, on every core.

The data flow, per chunk of rows, every step compiled and without the GIL (validation once per batch):

1. ``kernels.<unit>_formula_rows``: the joint (model, spec, cluster) rules over the chunk's storage
   columns (ExecSpec's own rules were applied when the :class:`~ndcost.price.candidates.Candidates`
   was built), a reason code per row (ndcost.tables.reasons); then ND's derived values and the
   candidate matrices (ND: ``CAND_FIELDS`` or seconds: ``SECONDS_CAND_FIELDS``, and memory:
   ``MEMORY_CAND_FIELDS``; fields x candidates) by the formulas ``derive()`` itself runs
   (``ndcost.tables.formulas``, compiled by ``tools/gen_formula_rows.py``: the kernel is generated from
   them, so a new formula reaches the batches by regenerating it);
2. the pricing kernels (``nd_estimate_batch`` or ``seconds_estimate_batch``, and ``memory_batch``) over
   the chunk, each candidate reading its layout from a pool built once per distinct layout. An invalid
   row is skipped (NaN and its reason), a priced one that does not fit gets the reason "no_fit";
   nothing raises per candidate.

Chunks keep the temporaries in cache: the candidate matrices of a chunk are a few MB however many
candidates there are.

Threads (``threads=``; ``None``: as many as the batch's size pays for, up to the cores: see
:mod:`ndcost.price.threads`): the chunks are shared out to threads, each chunk priced start to end by
one of them and writing only its own rows of the outputs, so the result is the one thread's bit for bit.
What does not depend on a chunk's rows is built once per batch, before the chunks (the layouts, the
formulas' constants: :class:`~ndcost.tables.formula_rows.FormulaRows`; seconds mode's cluster, tables
and rates: :class:`~ndcost.price.seconds_batch.SecondsPricer`); what a chunk does under the GIL is a
fixed number of calls, whatever its rows (seconds mode adds a few numpy operations on the chunk: the
fixed costs that decide its fit).
"""
from __future__ import annotations

import weakref
from .software_arg import apply_software_many
from typing import Any

import numpy as np

from .. import _backend
from ..kernels.columns import PART_NAMES
from ..tables.formula_rows import FormulaRows
from ..tables.formulas import CHOICES, ClusterConstants
from ..tables.layout_pool import LayoutPool, layout_piece, pack_layouts
from ..tables.cache import per_object
from .batch_result import BatchEstimate
from .candidates import Candidates
from ..tables.derive import model_constants
from ..spec.device import Cluster, Device
from ..errors import SpecError
from .estimate import as_model, nd_options
from ..spec.exec_spec import ExecSpec
from ..tables.layout import layout_if_valid
from ..tables.memory import MEMORY_PARTS, memory_kind_table, memory_model_vector
from ..tables.nd_tables import MOE_DISPATCH, cluster_constants, nd_kind_table, nd_model_vector, refuse_nd_units
from ..spec.rates_io import as_rates
from ..spec.ratios import Ratios
from ..tables.memory_overheads import (
    ALLOCATOR_RESERVE_FACTOR, FIXED_BYTES, deepep_column, dispatch_tokens, hybridep_column,
)
from ..tables.reasons import REASON_CODES, REASONS
from ..tables.seconds import _DEFAULT_OVERLAP, FP8_DISPATCH_BYTES
from .seconds_batch import STEP_RATE_FIELDS, SecondsPricer, seconds_layouts
from .threads import MAX_CHUNK, available_cores, plan, resolve_threads, run_chunks

__all__ = ["estimate_many", "REASONS", "UNITS", "DEFAULT_CHUNK", "available_cores", "resolve_threads",
           "run_chunks"]

UNITS = ("seconds", "nd")
#: Rows per kernel call on one thread (``chunk_size=None`` picks per batch: ndcost.price.threads.plan).
DEFAULT_CHUNK = MAX_CHUNK
NO_FIT = REASON_CODES["no_fit"]
_OWNER = "estimate_many"
_DEEPEP, _HYBRIDEP = (CHOICES["moe_dispatcher"].index(name) for name in ("deepep", "hybridep"))
_MFU, _TOKENS_PER_SECOND = STEP_RATE_FIELDS.index("mfu"), STEP_RATE_FIELDS.index("tokens_per_second")
#: A (0, 0) matrix: an output the formula rows are not asked for.
_NOT_ASKED = np.empty((0, 0))


def _as_candidates(candidates: Any) -> Candidates:
    if isinstance(candidates, Candidates):
        return candidates
    if isinstance(candidates, ExecSpec):
        return Candidates.from_specs([candidates])
    if isinstance(candidates, (list, tuple)):
        return Candidates.from_specs(candidates)
    raise SpecError("candidates", _OWNER, "be a Candidates or a list of ExecSpec", type(candidates).__name__)


def _cluster_of(cluster: Any) -> tuple[ClusterConstants, float]:
    """(the constants the formulas and rules read, the memory reserve in bytes)."""
    if isinstance(cluster, Cluster):
        return cluster_constants(cluster), float(cluster.memory_reserve_bytes)
    if isinstance(cluster, (str, Device)):
        # A bare device: each candidate sized to its own devices (no device-count rule).
        sized = Cluster(cluster, num_devices=1)
        return ClusterConstants(None, sized.device), float(sized.memory_reserve_bytes)
    raise SpecError("cluster", _OWNER, "be a Cluster, a Device or a device name", cluster)


def _layout_pool(model: Any, cands: Candidates, nd: bool) -> tuple[LayoutPool, np.ndarray, np.ndarray]:
    """(the pool of the candidates' layouts on *model*, each layout's row in it (-1: none),
    each layout's rule-7 violation), cached per (model, candidates, placement: ND's for ND units)."""
    cached = cands._cache.get(("pool", id(model), nd))
    if cached is not None and cached[0]() is model:
        return cached[1]
    pieces_of = per_object(model).setdefault(("batch_layout_pieces", nd), {})
    pieces, rows, bad = [], [], []
    for index, fields in enumerate(cands.layouts):
        key = tuple(fields.values())
        entry = pieces_of.get(key)
        if entry is None:
            layout = layout_if_valid(model, cands.layout_spec(index), nd)
            entry = pieces_of[key] = (layout is None, None if layout is None else layout_piece(layout))
        broken, piece = entry
        bad.append(broken)
        if piece is None:
            rows.append(-1)
        else:
            rows.append(len(pieces))
            pieces.append(piece)
    result = (pack_layouts(pieces), np.asarray(rows, dtype=np.int64), np.asarray(bad, dtype=bool))
    cands._cache[("pool", id(model), nd)] = (weakref.ref(model), result)
    return result


def estimate_many(model: Any, candidates: Any, cluster: Any, *, units: str = "seconds", ratios: Any = None,
                  ratio_type: str = "DYNAMIC", rec_type: str = "WITH", p2p: bool = False,
                  with_memory: bool = True, stage_times: bool = False, stage_memory: bool = False,
                  allow_cross_node_tp: bool = True, chunk_size: int | None = None,
                  rates: Any = None, threads: int | None = None, software: str | None = None) -> BatchEstimate:
    """Price N candidates at once; an invalid or infeasible one is a value, never an exception.

    Args:
        model: A :class:`~ndcost.spec.model.Model` or a catalog name.
        candidates: A :class:`~ndcost.price.candidates.Candidates`, or a list of ExecSpec.
        cluster: A :class:`~ndcost.spec.device.Cluster` (every candidate must fill it: the
            device-count rule), or a device (name): each candidate on its own devices.
        units: ``"seconds"`` (default, as ``estimate()``) or ``"nd"`` (ND's score; with
            *ratios*, milliseconds).
        ratios, ratio_type, rec_type, p2p: as :func:`ndcost.estimate`.
        with_memory: Also price memory per stage, the peak and whether it fits.
        stage_times, stage_memory: Also return each stage's time / memory breakdown.
        allow_cross_node_tp: False gives tp above a node's devices a reason (validate's option).
        chunk_size: Rows per kernel call; None (default) picks it per batch and thread count
            (:func:`ndcost.price.threads.plan`).
        rates: Seconds mode's rates, as :func:`ndcost.estimate`'s.
        threads: Threads the chunks are split over (every chunk is priced without the GIL): None
            (default) as many as pay off for the batch's size, one per 4,096 candidates up to all the
            cores the process may use (:func:`available_cores`; ``NDCOST_THREADS`` sets that limit;
            one thread on the pure-Python backend, which holds the GIL); an integer that many, at most
            one per chunk; 1 the calling thread only. The results are the same bit for bit whatever
            the count.
        software: A training stack, a ``SOFTWARE_PRESETS`` name (``ndcost software`` lists them): its strategy fields fill those the candidates leave at
            ExecSpec's defaults (a list spec by spec, a Candidates column by column) and its rates fill
            those *rates* does not state, as :func:`ndcost.estimate`'s.

    Raises:
        SpecError: For bad arguments (never for a bad candidate: see ``BatchEstimate.reason``).
    """
    if units not in UNITS:
        raise SpecError("units", _OWNER, f"be one of {', '.join(map(repr, UNITS))}", units)
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise SpecError("chunk_size", _OWNER, "be an integer >= 1, or None (picked per batch)", chunk_size)
    resolve_threads(threads)
    if units == "nd" and rates is not None:
        raise SpecError("rates", _OWNER, "be given in seconds units only (ND's units price no rates)", rates)
    model = as_model(model)
    if units == "nd":
        refuse_nd_units(model, _OWNER)
    if software is not None:
        model, candidates, rates = apply_software_many(software, model, candidates, cluster, rates, owner=_OWNER,
                                                       units=units)
    cands = _as_candidates(candidates)
    cc, reserve = _cluster_of(cluster)
    rate_set = as_rates(rates, device=cluster, owner=_OWNER)
    options = nd_options(ratio_type, rec_type, bool(p2p))
    ratio_set = Ratios.coerce(ratios)
    ratio_vector = (np.zeros(0, dtype=np.float64) if ratio_set is None
                    else np.ascontiguousarray(ratio_set.vector(), dtype=np.float64))
    kinds, model_vector = nd_kind_table(model), nd_model_vector(model)
    memory_kinds, memory_model = memory_kind_table(model), memory_model_vector(model)
    n = len(cands)
    # The pure-Python kernels hold the GIL: threads would only contend for it (measured 1.3-1.8x slower
    # on two cores), so None is one thread there; a count given is still honoured.
    workers, chunk = plan(n, threads, chunk_size, parallel=_backend.kernels.__name__.endswith("_c"))
    # Seconds mode: the cluster, tables and rates built once here, not per chunk.
    seconds = (SecondsPricer(model, cluster, seconds_layouts(model, cands), rates=rate_set)
               if units == "seconds" else None)
    if seconds is None:
        pool, layout_row, layout_bad = _layout_pool(model, cands, True)       # ND's placement
    else:                                                                   # where layers run
        pool, layout_row, layout_bad = seconds.layouts.pool, seconds.layouts.row[:-1], seconds.layouts.bad[:-1]
    storage = {name: cands.storage(name) for name in cands.fields}
    formulas = FormulaRows(storage, REASON_CODES, mc=model_constants(model), cc=cc, overlap=_DEFAULT_OVERLAP,
                           allow_cross_node_tp=bool(allow_cross_node_tp), moe_dispatch_default=MOE_DISPATCH,
                           fp8_dispatch_bytes=FP8_DISPATCH_BYTES, **FIXED_BYTES)
    unit = "nd" if seconds is None else "seconds"
    unit_rows, memory_rows = formulas.outputs[unit], formulas.outputs["memory"]
    layout_bad = np.ascontiguousarray(layout_bad).view(np.uint8)
    layout_row = np.ascontiguousarray(layout_row, dtype=np.int64)
    spec_reason, layout_index = cands.reason, cands.layout_index

    # The outputs: allocated here (no pages touched), each row written once by the chunk that owns it.
    step = np.empty(n, dtype=np.float64)
    parts = np.empty((len(PART_NAMES), n), dtype=np.float64)
    reason = np.empty(n, dtype=np.int64)
    peak = np.empty(n, dtype=np.float64)
    device = np.empty(n, dtype=np.float64) if seconds is not None else peak   # what the device holds (seconds)
    fits = np.empty(n, dtype=bool)
    max_pp = pool.max_pp
    times = np.empty((n, max_pp)) if stage_times else None
    stages = np.empty((n, max_pp, len(MEMORY_PARTS) + 1)) if (stage_memory and with_memory) else None
    no_times = np.empty((0, 0))
    no_stages = np.empty((0, 0, len(MEMORY_PARTS) + 1))
    # The seconds kernel writes every row of every step rate (NaN when not priced): MFU and tokens/s are two.
    step_rates = np.empty((len(STEP_RATE_FIELDS), n)) if seconds is not None else None
    fit_inputs = _FitInputs(model, storage) if seconds is not None and with_memory else None
    kernels = _backend.kernels

    def price(start: int) -> None:
        """Rows start..stop: every array it writes is its own slice (a thread each)."""
        stop = min(n, start + chunk)
        rows = reason[start:stop]
        table_row = np.empty(stop - start, dtype=np.int64)
        # A candidate per column, each candidate's fields contiguous in memory (the transpose of a
        # (rows, fields) array): the formula rows write them, the kernels gather them, a row at a time
        # (field-major, each row's writes would go to as many streams as fields: measured 2.5x slower).
        cand = np.empty((stop - start, unit_rows)).T
        mcand = np.empty((stop - start, memory_rows)).T if with_memory else _NOT_ASKED
        fixed = np.empty((1, stop - start)) if fit_inputs is not None else _NOT_ASKED
        formulas.run(start, stop, spec_reason, layout_index, layout_bad, layout_row, rows, table_row,
                     **{unit: cand, "memory": mcand, "fixed": fixed})
        if seconds is not None:
            seconds.run((cand, *seconds.rate_rows(storage, start, stop), table_row), rows, step[start:stop],
                        parts[:, start:stop], step_rates[:, start:stop], None if times is None else times[start:stop])
        else:
            kernels.nd_estimate_batch(kinds, model_vector, cand, table_row, pool.layouts, pool.pool,
                                      pool.slot_pool, options, ratio_vector, rows, step[start:stop],
                                      parts[:, start:stop], times[start:stop] if times is not None else no_times)
        if with_memory:
            kernels.memory_batch(memory_kinds, memory_model, mcand, table_row, pool.layouts, pool.pool,
                                 pool.slot_pool, reserve, cc.capacity, rows, peak[start:stop],
                                 fits[start:stop].view(np.uint8),
                                 stages[start:stop] if stages is not None else no_stages)
            if fit_inputs is not None:
                fit_inputs.fit(start, stop, rows, fixed[0], peak[start:stop], device[start:stop], fits[start:stop],
                               reserve, cc.capacity)
        else:
            peak[start:stop] = np.nan
            device[start:stop] = np.nan
            np.equal(rows, 0, out=fits[start:stop])
        if seconds is not None and ratio_set is not None:
            # As estimate(): in seconds a ratio corrects its part's seconds.
            chunk_parts = parts[:, start:stop]
            chunk_parts *= ratio_vector[:, None]
            chunk_parts.sum(axis=0, out=step[start:stop])

    run_chunks(price, n, chunk, workers)
    not_defined = np.broadcast_to(np.float64(np.nan), (n,))
    for array in (step, parts, reason, peak, device, fits) + tuple(a for a in (times, stages) if a is not None):
        array.setflags(write=False)
    result_parts = {name: parts[i] for i, name in enumerate(PART_NAMES)}
    return BatchEstimate(
        units="seconds" if seconds is not None else ("nd" if ratio_set is None else "nd_ms"),
        step_time=step, parts=result_parts, peak_memory=peak, fits=fits, reason=reason, device_memory=device,
        mfu=not_defined if step_rates is None else step_rates[_MFU],
        tokens_per_second=not_defined if step_rates is None else step_rates[_TOKENS_PER_SECOND],
        stage_times=times,
        stage_memory=stages,
    )


class _FitInputs:
    """Seconds mode's fit: what a rank holds beyond the tensors the memory kernel prices -- the caching
    allocator's slack and the fixed costs (CUDA, cuBLAS, NCCL: the row kernel's ``fixed`` vector; DeepEP's
    buffers where a row dispatches with it: ndcost.tables.memory_overheads) -- decides it, as for
    ``MemoryEstimate.device_peak``. A few numpy operations on a chunk's rows."""

    __slots__ = ("storage", "model", "deepep", "hybridep")

    def __init__(self, model: Any, storage: dict) -> None:
        self.storage = storage
        self.model = model
        dispatcher = storage["moe_dispatcher"]
        # a dispatcher's buffers only where a row may run it (a column of one other value: none)
        one = dispatcher.strides[0] == 0 and len(dispatcher)
        self.deepep = model.is_moe and not (one and dispatcher[0] != _DEEPEP)
        self.hybridep = model.is_moe and not (one and dispatcher[0] != _HYBRIDEP)

    def fit(self, start: int, stop: int, rows: np.ndarray, fixed: np.ndarray, peak: np.ndarray, held: np.ndarray,
            fits: np.ndarray, reserve: float, capacity: float) -> None:
        storage = self.storage
        if self.deepep:
            on = storage["moe_dispatcher"][start:stop] == _DEEPEP
            fixed = fixed + deepep_column(self.model.hidden_size, storage["ep"][start:stop], on)
        if self.hybridep:
            on = storage["moe_dispatcher"][start:stop] == _HYBRIDEP
            tokens = dispatch_tokens(storage["micro_batch_size"][start:stop], storage["seq_length"][start:stop],
                                     storage["tp"][start:stop], storage["cp"][start:stop],
                                     storage["sequence_parallel"][start:stop])
            fixed = fixed + hybridep_column(self.model, storage["ep"][start:stop], tokens, on)
        np.subtract(peak, reserve, out=held)
        held *= ALLOCATOR_RESERVE_FACTOR
        held += fixed
        priced = (rows == 0) | (rows == NO_FIT)
        rows[...] = np.where(priced, (held > capacity) * NO_FIT, rows)
        np.equal(rows, 0, out=fits)
