"""The threads a batch is priced on: how many, how many rows a chunk, and the pool that runs them.

``estimate_many`` cuts a batch into chunks of rows and prices each chunk start to end in compiled code
that releases the GIL -- its formulas (``kernels.formula_rows``), then the pricing kernels -- so
chunks run on as many cores as there are threads; what a chunk does under the GIL is a fixed number of
calls, whatever its rows (docs/PERFORMANCE.md measures it). Every chunk writes only its own rows of the
outputs and a row's price depends on that row alone, so the result is the same bit for bit whatever the
thread count or the chunk size.

The default, ``threads=None``: :func:`plan` gives a batch one thread per :data:`ROWS_PER_THREAD` rows, up
to the cores the process may use (:func:`available_cores`), and chunks that give each thread about
:data:`CHUNKS_PER_THREAD` of them (within :data:`MIN_CHUNK`..:data:`MAX_CHUNK` rows). This is a model of
the machine, measured on the 2-core development machine only: a thread costs the pool's hand-over (tens of
microseconds), a row about a microsecond, so a thread pays for itself from a few thousand rows; on a
machine with more cores, or cores of another speed, the same rule is a guess (``bench/scaling.py``
measures it there). The environment variable ``NDCOST_THREADS`` (an integer >= 1) replaces the cores in
that rule (CI pins it). The pure-Python backend's kernels hold the GIL: ``None`` is one thread there.
"""
from __future__ import annotations

import math
import numbers
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ..errors import SpecError

__all__ = ["available_cores", "resolve_threads", "plan", "run_chunks", "ROWS_PER_THREAD", "CHUNKS_PER_THREAD",
           "MIN_CHUNK", "MAX_CHUNK", "ENV"]

#: The environment variable that sets the threads ``threads=None`` may use (CI: a fixed count).
ENV = "NDCOST_THREADS"
#: Rows per chunk at most: a chunk's candidate matrices (a few hundred bytes a row) stay in cache.
#: Measured (1M candidates, two cores, deepseek-v3 ND, min of four interleaved runs): 16384 no better
#: than 8192, 32768 worse.
MAX_CHUNK = 8192
#: Rows per chunk at least: a chunk's calls under the GIL (a few tens of microseconds) stay a small
#: share of its rows' time (about a microsecond each).
MIN_CHUNK = 1024
#: Rows per thread at least when ``threads=None``: below it a second thread's hand-over costs more than
#: it saves (measured on two cores: see docs/PERFORMANCE.md).
ROWS_PER_THREAD = 4096
#: Chunks per thread ``threads=None`` aims at: idle threads take the next chunk, so rows of uneven cost
#: (deep pipelines, invalid rows) even out.
CHUNKS_PER_THREAD = 4


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity (a container's or taskset's limit)
    where the OS states one, else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):     # no affinity call on macOS and Windows
        return max(1, os.cpu_count() or 1)


def _environment(owner: str) -> int | None:
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise SpecError(ENV, owner, "be an integer >= 1 (the threads threads=None may use), or unset", text)
    return value


def resolve_threads(threads: Any, owner: str = "estimate_many") -> int:
    """The most threads *threads* asks for: None -> ``NDCOST_THREADS`` if set, else
    :func:`available_cores`; else an integer >= 1."""
    if threads is None:
        return _environment(owner) or available_cores()
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1:
        raise SpecError("threads", owner, "be an integer >= 1, or None (as many as pay off)", threads)
    return int(threads)


def plan(n: int, threads: Any, chunk_size: int | None, *, parallel: bool = True,
         owner: str = "estimate_many") -> tuple[int, int]:
    """(workers, rows per chunk) for a batch of *n* rows.

    *threads* None picks (see the module docstring): up to :func:`resolve_threads` (one when not
    *parallel*: the kernels hold the GIL), one per :data:`ROWS_PER_THREAD` rows; a count is honoured,
    but never more threads than chunks. *chunk_size* None picks the chunk: :data:`MAX_CHUNK` on one
    thread, else about :data:`CHUNKS_PER_THREAD` chunks a thread, within :data:`MIN_CHUNK`..:data:`MAX_CHUNK`.
    """
    cap = resolve_threads(threads, owner)
    if threads is None:
        cap = min(cap, max(1, n // ROWS_PER_THREAD)) if parallel else 1
    if chunk_size is None:
        chunk = MAX_CHUNK if cap == 1 else min(MAX_CHUNK, max(MIN_CHUNK, -(-n // (cap * CHUNKS_PER_THREAD))))
    else:
        chunk = chunk_size
    return max(1, min(cap, math.ceil(n / chunk))), chunk


class _Pool:
    """One process-wide pool of worker threads, grown to the most workers asked for; a forked child
    starts without it (its threads did not survive the fork)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.executor: ThreadPoolExecutor | None = None
        self.size = 0

    def submit(self, count: int, work: Callable[[], None]) -> list:
        """*count* futures of ``work()``, the pool grown to at least *count* threads first (under the
        lock, so a pool is never replaced between another caller's growth and its submissions)."""
        with self.lock:
            if self.executor is None or self.size < count:
                old = self.executor
                self.executor, self.size = ThreadPoolExecutor(max_workers=count, thread_name_prefix="ndcost"), count
                if old is not None:
                    old.shutdown(wait=False)       # its idle threads exit; tasks it runs finish
            return [self.executor.submit(work) for _ in range(count)]

    def forget(self) -> None:
        self.lock = threading.Lock()
        self.executor, self.size = None, 0


_POOL = _Pool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL.forget)


def run_chunks(price: Callable[[int], None], n: int, chunk_size: int, threads: int) -> None:
    """``price(start)`` for each chunk start of rows 0..n, on up to *threads* threads.

    The calling thread works too; the others come from a pool that outlives the call (its threads
    are started once, not per batch). Each takes the next chunk not yet taken, so chunks of uneven
    cost balance. The chunks are the same whatever the thread count and each writes only its own
    rows, so the results are bit for bit those of one thread. A chunk's exception stops the others
    taking new chunks and is raised here. One chunk, or one thread, runs inline.
    """
    starts = range(0, n, chunk_size)
    workers = min(threads, len(starts))
    if workers <= 1:
        for start in starts:
            price(start)
        return
    queue = iter(starts)
    taking = threading.Lock()
    failed = threading.Event()

    def work() -> None:
        while not failed.is_set():
            with taking:
                start = next(queue, None)
            if start is None:
                return
            try:
                price(start)
            except BaseException:
                failed.set()
                raise

    futures = _POOL.submit(workers - 1, work)
    try:
        work()
    finally:
        errors = [future.exception() for future in futures]     # waits for every worker
    for error in errors:
        if error is not None:
            raise error
