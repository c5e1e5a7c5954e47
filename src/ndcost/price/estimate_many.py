"""``estimate_many()``: N candidates priced by one compiled call per chunk.

The data flow, per chunk of rows (numpy, vectorised; validation once per batch):

1. the joint (model, spec, cluster) rules over the chunk's columns (ExecSpec's
   own rules were applied when the :class:`~ndcost.price.candidates.Candidates` was
   built), a reason code per row (ndcost.tables.reasons);
2. ND's derived values and the two candidate matrices (ND: ``CAND_FIELDS``,
   memory: ``MEMORY_CAND_FIELDS``; fields x candidates, so that numpy writes
   each field contiguously) by the formulas ``derive()`` itself runs
   (``ndcost.tables.formulas``);
3. the kernels ``nd_estimate_batch`` and ``memory_batch`` over the chunk, the GIL
   released, each candidate reading its layout from a pool built once per
   distinct layout. An invalid row is skipped (NaN and its reason), a priced one
   that does not fit gets the reason "no_fit"; nothing raises per candidate.

Chunks keep the temporaries in cache: the candidate matrices of a chunk are
a few MB however many candidates there are.

Threads (``threads=``, all cores by default): the chunks are shared out to a
thread pool, each chunk writing only its own rows of the outputs, so the result
is the one thread's bit for bit. Steps 1-2 (with seconds mode's kernel inputs)
hold the GIL and run one chunk at a time (a lock); step 3 runs on every thread at
once. What does not depend on a chunk's rows is built once per batch, before the
chunks (seconds mode's cluster, tables and rates:
:class:`~ndcost.price.seconds_batch.SecondsPricer`).
"""
from __future__ import annotations

import contextlib
import numbers
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

from .. import _backend
from ..kernels.columns import CAND_FIELDS, MEMORY_CAND_FIELDS, PART_NAMES
from ..tables.formulas import (
    ARRAY, CHOICES, ClusterConstants, derived_columns, joint_reason, memory_candidate_columns, nd_candidate_columns,
)
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
from ..tables.memory_overheads import ALLOCATOR_RESERVE_FACTOR, deepep_column, fixed_bytes
from ..tables.reasons import REASON_CODES, REASONS

NO_FIT = REASON_CODES["no_fit"]
from .seconds_batch import STEP_RATE_FIELDS, SecondsPricer, seconds_layouts

__all__ = ["estimate_many", "REASONS", "UNITS", "DEFAULT_CHUNK", "available_cores", "resolve_threads",
           "run_chunks"]

UNITS = ("seconds", "nd")
#: Rows per kernel call: large enough that Python's per-chunk work is noise, small
#: enough that the chunk's temporaries stay in cache. Tuned for threads too (1M candidates,
#: two cores, deepseek-v3 ND, min of four interleaved runs): 16384 no better than 8192
#: (2.15x vs 2.02x one thread, within the noise), 32768 worse (1.81x).
DEFAULT_CHUNK = 8192
_OWNER = "estimate_many"
_LAYOUT_CODE = REASON_CODES["layout"]
_DEEPEP = CHOICES["moe_dispatcher"].index("deepep")
_MFU, _TOKENS_PER_SECOND = STEP_RATE_FIELDS.index("mfu"), STEP_RATE_FIELDS.index("tokens_per_second")


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity (a container's or taskset's limit)
    where the OS states one, else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):     # no affinity call on macOS and Windows
        return max(1, os.cpu_count() or 1)


def resolve_threads(threads: Any, owner: str = _OWNER) -> int:
    """The worker count *threads* asks for: None -> :func:`available_cores`, else an integer >= 1."""
    if threads is None:
        return available_cores()
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1:
        raise SpecError("threads", owner, "be an integer >= 1, or None (all cores)", threads)
    return int(threads)


def run_chunks(price: Callable[[int], None], n: int, chunk_size: int, threads: int) -> None:
    """``price(start)`` for each chunk start of rows 0..n, on up to *threads* threads.

    The chunks are the same whatever the thread count and each writes only its own rows, so
    the results are bit for bit those of one thread. Idle workers take the next chunk (the
    pool's queue), so chunks of uneven cost (deep pipelines, invalid rows) balance. One chunk,
    or one thread, runs inline: no pool for a small batch.
    """
    starts = range(0, n, chunk_size)
    workers = min(threads, len(starts))
    if workers <= 1:
        for start in starts:
            price(start)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ndcost") as pool:
        for _ in pool.map(price, starts):   # re-raises a chunk's exception, if any, here
            pass


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
                  allow_cross_node_tp: bool = True, chunk_size: int = DEFAULT_CHUNK,
                  rates: Any = None, threads: int | None = None) -> BatchEstimate:
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
        chunk_size: Rows per kernel call.
        rates: Seconds mode's rates, as :func:`ndcost.estimate`'s.
        threads: Threads the chunks are split over (the kernels run without the GIL): None
            (default) all the cores the process may use (:func:`available_cores`; one thread on
            the pure-Python backend, which holds the GIL), 1 the calling thread only. The
            results are the same bit for bit whatever the count.

    Raises:
        SpecError: For bad arguments (never for a bad candidate: see ``BatchEstimate.reason``).
    """
    if units not in UNITS:
        raise SpecError("units", _OWNER, f"be one of {', '.join(map(repr, UNITS))}", units)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise SpecError("chunk_size", _OWNER, "be an integer >= 1", chunk_size)
    workers = resolve_threads(threads)
    if threads is None and not _backend.kernels.__name__.endswith("_c"):
        # The pure-Python kernels hold the GIL: threads would only contend for it (measured 1.3-1.8x
        # slower on two cores), so "all cores" is one thread there; a count given is still honoured.
        workers = 1
    if units == "nd" and rates is not None:
        raise SpecError("rates", _OWNER, "be given in seconds units only (ND's units price no rates)", rates)
    model = as_model(model)
    if units == "nd":
        refuse_nd_units(model, _OWNER)
    cands = _as_candidates(candidates)
    cc, reserve = _cluster_of(cluster)
    rate_set = as_rates(rates, device=cluster, owner=_OWNER)
    options = nd_options(ratio_type, rec_type, bool(p2p))
    ratio_set = Ratios.coerce(ratios)
    ratio_vector = (np.zeros(0, dtype=np.float64) if ratio_set is None
                    else np.ascontiguousarray(ratio_set.vector(), dtype=np.float64))
    mc = model_constants(model)
    kinds, model_vector = nd_kind_table(model), nd_model_vector(model)
    memory_kinds, memory_model = memory_kind_table(model), memory_model_vector(model)
    pool, pool_row, layout_bad = _layout_pool(model, cands, units == "nd")

    n = len(cands)
    step = np.empty(n, dtype=np.float64)
    parts = np.empty((len(PART_NAMES), n), dtype=np.float64)
    reason = np.empty(n, dtype=np.int64)
    peak = np.full(n, np.nan)
    device = peak.copy() if units == "seconds" else peak     # what the device holds (seconds mode)
    fits = np.ones(n, dtype=bool)
    max_pp = pool.max_pp
    times = np.empty((n, max_pp)) if stage_times else None
    stages = np.empty((n, max_pp, len(MEMORY_PARTS) + 1)) if (stage_memory and with_memory) else None
    no_times = np.empty((0, 0))
    no_stages = np.empty((0, 0, len(MEMORY_PARTS) + 1))
    # Seconds mode: the cluster, tables and rates built once here, not per chunk.
    seconds = (SecondsPricer(model, cluster, seconds_layouts(model, cands), rates=rate_set)
               if units == "seconds" else None)
    # The seconds kernel writes every row of every step rate (NaN when not priced): MFU and tokens/s are two.
    step_rates = np.empty((len(STEP_RATE_FIELDS), n)) if seconds is not None else None
    kernels = _backend.kernels
    storage = {name: cands.storage(name) for name in cands.fields}
    # A column that is one value broadcast (stride 0) enters the formulas as a numpy scalar:
    # numpy then works on the columns that vary only.
    constant = {name: column[0] for name, column in storage.items()
                if column.ndim == 1 and column.shape[0] and column.strides[0] == 0}
    varying = [name for name in storage if name not in constant]
    spec_reason, layout_index = cands.reason, cands.layout_index
    bad_by_layout = np.append(layout_bad, False)       # index -1 (an invalid row) reads False
    row_by_layout = np.append(pool_row, 0)
    n_cand, n_mcand = len(CAND_FIELDS), len(MEMORY_CAND_FIELDS)
    # The formulas hold the GIL (numpy op by op on a chunk's columns; ~25% of a chunk's time): two
    # threads in them at once only trade the GIL back and forth (measured: the formulas alone on two
    # threads ran no faster than on one). So one thread at a time runs them, under this lock, while
    # the others run the kernels without the GIL (1M candidates, two quiet cores: 1.76x one thread
    # with the lock, 1.68x without, mean of four runs each).
    formulas = threading.Lock() if workers > 1 and n > chunk_size else contextlib.nullcontext()

    def price(start: int) -> None:
        """Rows start..start+chunk_size: every array it writes is its own slice (a thread each)."""
        stop = min(n, start + chunk_size)
        # np.errstate is per thread (a context variable): a worker thread sets its own
        with np.errstate(all="ignore"):
            with formulas:
                c = dict(constant)
                for name in varying:
                    c[name] = storage[name][start:stop]
                li = layout_index[start:stop]
                joint = joint_reason(ARRAY, c, mc, cc, bad_by_layout[li], allow_cross_node_tp, REASON_CODES)
                rows = np.where(spec_reason[start:stop] != 0, spec_reason[start:stop], joint)
                d = derived_columns(ARRAY, c, mc)
                index = row_by_layout[li]
                if seconds is None:
                    cand = np.empty((n_cand, stop - start), dtype=np.float64)     # a candidate per column
                    for j, value in enumerate(nd_candidate_columns(ARRAY, c, d, cc, MOE_DISPATCH)):
                        cand[j] = value
                else:   # the seconds kernel's inputs are numpy work too: under the lock with the rest
                    inputs = seconds.inputs(c, d, rows, li)
                if with_memory:
                    mcand = np.empty((n_mcand, stop - start), dtype=np.float64)
                    for j, value in enumerate(memory_candidate_columns(ARRAY, c, d)):
                        mcand[j] = value
                    if seconds is not None:
                        deepep = 0.0
                        if model.is_moe:
                            deepep = deepep_column(model.hidden_size, c["ep"], c["moe_dispatcher"] == _DEEPEP)
                        fixed = fixed_bytes(c["dp"], c["tp"], c["pp"], c["cp"], c["ep"], deepep)
            if seconds is not None:
                seconds.run(inputs, rows, step[start:stop], parts[:, start:stop], step_rates[:, start:stop],
                            None if times is None else times[start:stop])
            else:
                kernels.nd_estimate_batch(kinds, model_vector, cand, index, pool.layouts, pool.pool,
                                          pool.slot_pool, options, ratio_vector, rows, step[start:stop],
                                          parts[:, start:stop], times[start:stop] if times is not None else no_times)
            if with_memory:
                kernels.memory_batch(memory_kinds, memory_model, mcand, index, pool.layouts, pool.pool,
                                     pool.slot_pool, reserve, cc.capacity, rows, peak[start:stop],
                                     fits[start:stop].view(np.uint8),
                                     stages[start:stop] if stages is not None else no_stages)
                if seconds is not None:
                    # seconds mode: what the device holds, the allocator's slack and the fixed costs
                    # in (MemoryEstimate.device_peak, ndcost.tables.memory_overheads), decides the fit
                    held = device[start:stop]
                    np.subtract(peak[start:stop], reserve, out=held)
                    held *= ALLOCATOR_RESERVE_FACTOR
                    held += fixed
                    priced = (rows == 0) | (rows == NO_FIT)
                    rows = np.where(priced, (held > cc.capacity) * NO_FIT, rows)
                    np.equal(rows, 0, out=fits[start:stop])
            reason[start:stop] = rows

    run_chunks(price, n, chunk_size, workers)
    if not with_memory:
        fits = reason == 0
    if seconds is not None and ratio_set is not None:
        # As estimate(): in seconds a ratio corrects its part's seconds.
        parts *= ratio_vector[:, None]
        step[:] = parts.sum(axis=0)
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
