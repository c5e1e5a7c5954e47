"""estimate_many(threads=...): the chunks split over threads price bit for bit as one thread does, on both
backends, in both units, with memory and invalid rows mixed in; bad thread counts are SpecErrors; search and
``ndcost search --threads`` pass the count through."""
from __future__ import annotations

import dataclasses
import os
import threading
import warnings

import numpy as np
import pytest

from batch_cases import columns_of, planted_rows, random_rows
from ndcost import Cluster, Model, SpecError, _backend
from ndcost.price.batch_result import BatchEstimate
from ndcost.price.candidates import Candidates
from ndcost.cli.main import main
from ndcost.price.estimate_many import available_cores, estimate_many, resolve_threads
from ndcost.tables.reasons import FIRST_INVALID
from ndcost.price.search import search

#: Rows per chunk in these tests: small, so that a batch the oracle prices quickly still has many chunks.
CHUNK = 16


def _mixed(model: Model, count: int, seed: int) -> Candidates:
    """Valid rows, the planted edges and rows broken on purpose (a zero degree, tp not dividing the
    heads, a batch that does not divide), interleaved so that most chunks hold some of each."""
    rows = random_rows(model, count, seed=seed) + planted_rows(model)
    broken = [dict(dp=0, tp=1, global_batch_size=8), dict(dp=2, tp=3, global_batch_size=8),
              dict(dp=4, tp=1, micro_batch_size=3, global_batch_size=8)]
    for i, row in enumerate(broken * (len(rows) // 10)):
        rows.insert((7 * i + 3) % len(rows), dict(row))
    return Candidates.from_arrays(**columns_of(rows))


def assert_bit_for_bit(expected: BatchEstimate, got: BatchEstimate) -> None:
    """Every output array holds the same bytes (NaN payloads and signed zeros included)."""
    for field in dataclasses.fields(BatchEstimate):
        a, b = getattr(expected, field.name), getattr(got, field.name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), field.name
        elif isinstance(a, dict):
            assert a.keys() == b.keys(), field.name
            for key in a:
                assert a[key].tobytes() == b[key].tobytes(), (field.name, key)
        else:
            assert a == b, field.name


@pytest.mark.parametrize("units", ["nd", "seconds"])
@pytest.mark.parametrize("name", ["llama3-70b", "deepseek-v3", "qwen3-next-80b-a3b"])
def test_threads_price_bit_for_bit_as_one_thread(backend_name, name, units):
    model = Model.from_catalog(name)
    cands = _mixed(model, 60, seed=41)
    options = dict(units=units, stage_times=True, stage_memory=True, chunk_size=CHUNK)
    with _backend.use(backend_name):
        one = estimate_many(model, cands, "h100-sxm", threads=1, **options)
        assert (one.reason >= FIRST_INVALID).any() and (one.reason == 0).any()
        assert len(cands) > 4 * CHUNK
        for threads in (None, 2, 5):
            assert_bit_for_bit(one, estimate_many(model, cands, "h100-sxm", threads=threads, **options))


@pytest.mark.parametrize("units", ["nd", "seconds"])
def test_threads_with_a_sized_cluster_ratios_and_no_memory(backend_name, units):
    """The device-count rule (a Cluster), ratios (ND's milliseconds; seconds' corrections) and memory off."""
    model = Model.from_catalog("mixtral-8x7b")
    cands = _mixed(model, 50, seed=43)
    cluster = Cluster("h100-sxm", num_devices=64)
    ratios = {name: 1e-12 * (i + 1) for i, name in enumerate(("COMPUTE", "DP_COMM", "DP_REDUCE", "MP_COMM",
                                                                "EP_COMM", "CP_COMM", "PP_COMM", "BUBBLE"))}
    with _backend.use(backend_name):
        for options in (dict(ratios=ratios), dict(with_memory=False)):
            one = estimate_many(model, cands, cluster, units=units, chunk_size=CHUNK, threads=1, **options)
            assert_bit_for_bit(one, estimate_many(model, cands, cluster, units=units, chunk_size=CHUNK,
                                                  threads=3, **options))


@pytest.mark.cython
def test_a_large_batch_prices_the_same_on_all_cores():
    """The default chunk on the compiled backend, a batch of many chunks."""
    model = Model.from_catalog("deepseek-v3")
    cands = _mixed(model, 400, seed=47)
    cands = cands.take(np.arange(40_000) % len(cands))
    with _backend.use("cython"):
        for units in ("nd", "seconds"):
            one = estimate_many(model, cands, "h800", units=units, threads=1)
            assert_bit_for_bit(one, estimate_many(model, cands, "h800", units=units))


class Watched:
    """A kernel module whose functions call *seen(name)* on the calling thread before running."""

    def __init__(self, module, seen) -> None:
        self.__name__, self._module, self._seen = module.__name__, module, seen

    def __getattr__(self, name):
        function = getattr(self._module, name)

        def call(*args, **kwargs):
            self._seen(name)
            return function(*args, **kwargs)
        return call


def test_chunks_run_on_several_threads_at_once(backend_name):
    """threads=2 has two chunks priced at the same time, by the calling thread and a pool worker: each of
    the first two kernel calls waits for the other at a barrier (one thread alone would time out there)."""
    model = Model.from_catalog("llama3-8b")
    cands = _mixed(model, 40, seed=53)
    barrier = threading.Barrier(2, timeout=30)
    callers: set[int] = set()

    def meet(name: str) -> None:
        if name == "nd_estimate_batch" and len(callers) < 2:
            callers.add(threading.get_ident())
            barrier.wait()

    # _backend.use restores the kernels it found on exit (a monkeypatch inside it would put the
    # block's backend back at teardown: every later test would run on it)
    with _backend.use(backend_name) as module:
        _backend.kernels = Watched(module, meet)
        many = estimate_many(model, cands, "h100-sxm", units="nd", chunk_size=CHUNK, threads=2)
        _backend.kernels = module
        one = estimate_many(model, cands, "h100-sxm", units="nd", chunk_size=CHUNK, threads=1)
    assert len(callers) == 2
    assert_bit_for_bit(one, many)


def test_all_cores_is_one_thread_on_the_pure_python_backend():
    """The oracle holds the GIL: threads=None prices on the calling thread there (a count is honoured)."""
    model = Model.from_catalog("llama3-8b")
    cands = _mixed(model, 40, seed=57)
    callers: set[int] = set()
    with _backend.use("python") as module:
        _backend.kernels = Watched(module, lambda name: callers.add(threading.get_ident()))   # use() restores
        estimate_many(model, cands, "h100-sxm", units="nd", chunk_size=CHUNK)
        assert callers == {threading.get_ident()}
        # with a count, the caller and a pool worker both price: each thread's first kernel call waits (10 s at
        # most) for the other to arrive, so that a loaded machine cannot let one thread take every chunk first
        callers.clear()
        both = threading.Event()

        def arrive(name):
            callers.add(threading.get_ident())
            if len(callers) >= 2:
                both.set()
            both.wait(10)

        _backend.kernels = Watched(module, arrive)
        estimate_many(model, cands, "h100-sxm", units="nd", chunk_size=CHUNK, threads=2)
        assert len(callers) == 2 and threading.get_ident() in callers    # the caller and a pool worker priced it


def test_worker_threads_ignore_floating_point_warnings_as_one_thread_does():
    """np.errstate is per thread: the invalid rows' NaN and division warnings stay silent in the workers too."""
    model = Model.from_catalog("llama3-8b")
    cands = _mixed(model, 40, seed=59)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for units in ("nd", "seconds"):
            estimate_many(model, cands, "h100-sxm", units=units, chunk_size=CHUNK, threads=3)


@pytest.mark.parametrize("cluster", ["h100-sxm", Cluster("h100-sxm", num_devices=64)], ids=["device", "cluster"])
def test_seconds_setup_is_built_once_per_batch(backend_name, monkeypatch, cluster):
    """What no chunk's rows change (a bare device's Cluster; the rates of each precision and job size) is built
    once per batch, not once per chunk, on any thread count (one thread: each rate row exactly once; several may
    race to build the same row, at most once each); the prices are those of one thread."""
    from ndcost.price import seconds_batch as seconds_module

    model = Model.from_catalog("mixtral-8x7b")
    cands = _mixed(model, 50, seed=67)
    column = cands.storage
    gpus = np.maximum(column("dp") * column("tp") * column("pp") * column("cp"), 1)   # a zero degree: a bad row
    precisions = len(seconds_module._PRECISIONS)
    keys = {int(q) + precisions * int(g) for q, g in zip(np.minimum(column("precision"), precisions - 1), gpus)}
    built: list[str] = []
    for name in ("_cluster_of", "_rate_row"):
        original = getattr(seconds_module, name)
        monkeypatch.setattr(seconds_module, name,
                            lambda *args, _name=name, _original=original: built.append(_name) or _original(*args))
    with _backend.use(backend_name):
        results = []
        for threads in (1, 3):
            built.clear()
            results.append(estimate_many(model, cands, cluster, units="seconds", chunk_size=CHUNK, threads=threads))
            assert built.count("_cluster_of") == 1, threads
            rows = built.count("_rate_row")
            assert rows == len(keys) if threads == 1 else len(keys) <= rows <= 3 * len(keys), (threads, rows)
    assert len(cands) > 4 * CHUNK
    assert_bit_for_bit(*results)


def test_one_chunk_and_an_empty_batch():
    model = Model.from_catalog("llama3-8b")
    cands = _mixed(model, 10, seed=61)
    assert_bit_for_bit(estimate_many(model, cands, "h100-sxm", units="nd", threads=1),
                       estimate_many(model, cands, "h100-sxm", units="nd", threads=8))
    empty = Candidates.from_arrays(dp=np.zeros(0, dtype=int), global_batch_size=8)
    assert len(estimate_many(model, empty, "h100-sxm", units="nd", threads=4)) == 0


def test_available_cores_is_the_affinity(monkeypatch):
    monkeypatch.delenv("NDCOST_THREADS", raising=False)
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert available_cores() == expected >= 1
    assert resolve_threads(None) == expected and resolve_threads(3) == 3 and resolve_threads(np.int64(2)) == 2


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2", 2.0])
def test_bad_thread_counts_are_spec_errors(threads):
    model = Model.from_catalog("llama3-8b")
    cands = Candidates.from_arrays(dp=2, global_batch_size=8)
    with pytest.raises(SpecError, match="threads") as info:
        estimate_many(model, cands, "h100-sxm", units="nd", threads=threads)
    assert info.value.parameter == "threads"
    with pytest.raises(SpecError, match="threads"):
        search(model, Cluster("h100-sxm", num_devices=8), global_batch_size=64, seq_length=2048, threads=threads)


def test_search_ranks_the_same_on_all_cores():
    model, cluster = Model.from_catalog("llama3-8b"), Cluster("h100-sxm", num_devices=64)
    runs = [search(model, cluster, global_batch_size=256, seq_length=4096, top=5, per_layer_recompute=0, balance=0,
                   threads=threads) for threads in (1, None)]
    one, many = runs
    assert one.step_time.tobytes() == many.step_time.tobytes()
    assert one.peak_memory.tobytes() == many.peak_memory.tobytes()
    assert one.rejected == many.rejected and one.fitting == many.fitting > 0
    assert [r.spec for r in one.results] == [r.spec for r in many.results]


def test_cli_search_threads(capsys):
    command = ["search", "llama3-8b", "--devices", "16", "--device", "h100-sxm", "--global-batch-size", "64",
               "--seq-length", "2048", "--top", "3", "--plan-top", "0", "--balance-top", "0", "--no-progress"]
    assert main(command + ["--threads", "1"]) == 0
    one = capsys.readouterr().out
    assert main(command + ["--threads", "2"]) == 0
    assert capsys.readouterr().out == one
    assert main(command + ["--threads", "0"]) == 2
    assert "--threads" in capsys.readouterr().err


# --------------------------------------------------------------------------- the default and the pool


def test_the_default_sizes_threads_and_chunks_by_the_batch(monkeypatch):
    """threads=None: one thread below ROWS_PER_THREAD rows per thread, then one per ROWS_PER_THREAD up to the
    cores (or NDCOST_THREADS); chunks give each thread about CHUNKS_PER_THREAD, within MIN..MAX_CHUNK; never
    more threads than chunks; a count given is honoured up to the chunks."""
    from ndcost.price import threads as t

    monkeypatch.delenv(t.ENV, raising=False)
    monkeypatch.setattr(t, "available_cores", lambda: 16)
    assert t.plan(1000, None, None) == (1, t.MAX_CHUNK)
    assert t.plan(2 * t.ROWS_PER_THREAD - 1, None, None) == (1, t.MAX_CHUNK)
    workers, chunk = t.plan(3 * t.ROWS_PER_THREAD, None, None)
    assert workers == 3 and chunk == t.MIN_CHUNK
    workers, chunk = t.plan(10**6, None, None)
    assert workers == 16 and chunk == t.MAX_CHUNK
    assert t.plan(10**6, None, None, parallel=False) == (1, t.MAX_CHUNK)
    assert t.plan(100, 8, None)[0] == 1                      # one chunk: one thread
    assert t.plan(100, 8, 10) == (8, 10) and t.plan(100, 3, 10) == (3, 10)
    monkeypatch.setenv(t.ENV, "2")
    assert t.plan(10**6, None, None)[0] == 2 and t.resolve_threads(None) == 2
    assert t.plan(10**6, 5, None)[0] == 5                    # a count given is not capped by the variable
    for bad in ("0", "x", "-3"):
        monkeypatch.setenv(t.ENV, bad)
        with pytest.raises(SpecError, match=t.ENV):
            t.plan(10**6, None, None)


def test_a_chunks_error_is_raised_and_the_pool_serves_the_next_batch():
    from ndcost.price.threads import run_chunks

    seen = []

    def price(start):
        seen.append(start)
        if start == 30:
            raise RuntimeError("chunk 30")

    with pytest.raises(RuntimeError, match="chunk 30"):
        run_chunks(price, 100, 10, 3)
    seen.clear()
    run_chunks(seen.append, 100, 10, 4)
    assert sorted(seen) == list(range(0, 100, 10))


def test_a_search_of_many_batches_ranks_as_one_thread(monkeypatch):
    """Batches small enough that the space is many of them, each priced on three threads: the ranking, the
    arrays and the progress are those of one thread."""
    from ndcost.price import search as search_module

    monkeypatch.setattr(search_module, "BATCH", 97)
    model, cluster = Model.from_catalog("llama3-8b"), Cluster("h100-sxm", num_devices=64)
    progress: dict[int, list] = {1: [], 3: []}
    runs = {threads: search(model, cluster, global_batch_size=256, seq_length=4096, top=5, per_layer_recompute=0,
                            balance=0, threads=threads, zero_stage=[0, 1, 2, 3],
                            progress=lambda done, total, t=threads: progress[t].append((done, total)))
            for threads in (1, 3)}
    one, many = runs[1], runs[3]
    assert one.space_size > 10 * 97
    assert one.step_time.tobytes() == many.step_time.tobytes()
    assert one.peak_memory.tobytes() == many.peak_memory.tobytes()
    assert one.rejected == many.rejected and one.fitting == many.fitting > 0
    assert [r.spec for r in one.results] == [r.spec for r in many.results]
    assert progress[1] == progress[3] and progress[1][-1] == (one.space_size, one.space_size)
