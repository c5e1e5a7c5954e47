"""seconds_batch() throughput: seconds mode over a search's batch, both backends side by side.

Run: ``pytest bench/bench_seconds_batch.py --benchmark-only --benchmark-group-by=group``
(``--benchmark-json=bench.json`` keeps the numbers; each benchmark's ``extra_info`` holds its
candidates per second). 10,000 candidates on both backends for four models (dense, MoE, a
sliding-window MoE and a Mamba-2 hybrid stack); 1,000,000 on the compiled backend for llama3-70b.

The batch is what a strategy search prices in seconds mode: every (tp, pp, cp, ep, vpp,
micro-batch size, recompute, ZeRO stage, SP) of a model on 1024 devices at a fixed global batch,
the candidates seconds_batch prices (valid ones) sampled with a fixed seed to the batch size. A
measured call is the whole of ``seconds_batch(model, candidates, cluster)``: the joint rules, the
candidate matrix (numpy) and the kernel, chunk by chunk.

Only a ratio measured in this run is asserted (compiled at least 20x the oracle on the same
10,000 candidates), never an absolute time.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from ndcost import Candidates, Cluster, Model, _backend
from ndcost.tables.reasons import FIRST_INVALID
from ndcost.price.seconds_batch import seconds_batch
from ratio_guard import SECONDS_MIN_RATIO, guard, record

# model -> (device, global batch, sequence, ep choices)
CASES = {
    "llama3-70b": ("h100-sxm", 1024, 8192, (1,)),
    "deepseek-v3": ("h800", 4096, 4096, (8, 16, 32, 64)),
    # the new layer kinds at the usual speed: sliding-window MoE (gpt-oss), a Mamba-2 hybrid stack
    "gpt-oss-120b": ("h100-sxm", 1024, 8192, (8, 16, 32)),
    "nemotron-h-56b": ("h100-sxm", 1536, 8192, (1,)),
}
DEVICES = 1024
#: (backend, model, size) -> rounds; the oracle prices ~5,000 candidates a second, so 10,000 only.
ROUNDS = {("cython", "llama3-70b", 10_000): 20, ("python", "llama3-70b", 10_000): 2,
          ("cython", "deepseek-v3", 10_000): 20, ("python", "deepseek-v3", 10_000): 2,
          ("cython", "gpt-oss-120b", 10_000): 20, ("python", "gpt-oss-120b", 10_000): 2,
          ("cython", "nemotron-h-56b", 10_000): 20, ("python", "nemotron-h-56b", 10_000): 2,
          ("cython", "llama3-70b", 1_000_000): 3}
#: ((model, size), backend) -> median seconds of this run, for the ratio guard.
MEDIANS: dict[tuple, float] = {}


@pytest.fixture(params=["cython", "python"], ids=["cython", "python"])
def api_backend(request):
    """The whole API on one backend (ndcost._backend.use swaps the kernels module)."""
    with _backend.use(request.param):
        yield request.param


def _space(device: str, gbs: int, seq: int, eps: tuple) -> Candidates:
    grid = itertools.product((1, 2, 4, 8), (1, 2, 4, 8, 16), (1, 2, 4), eps, (1, 2, 4), (1, 2, 4),
                             ("none", "selective", "full"), (0, 1, 2, 3), (False, True))
    names = ("tp", "pp", "cp", "ep", "vpp", "micro_batch_size", "recompute", "zero_stage", "sequence_parallel")
    columns: dict[str, list] = {name: [] for name in names + ("dp",)}
    for values in grid:
        tp, pp, cp, _, vpp, mbs, _, _, sp = values
        if DEVICES % (tp * pp * cp):
            continue
        dp = DEVICES // (tp * pp * cp)
        if gbs % (mbs * dp) or (sp and tp == 1) or (vpp > 1 and pp == 1):
            continue
        for name, value in zip(names, values):
            columns[name].append(value)
        columns["dp"].append(dp)
    return Candidates.from_arrays(global_batch_size=gbs, seq_length=seq,
                                  **{name: np.array(values) for name, values in columns.items()})


@functools.lru_cache(maxsize=None)
def batch(name: str, size: int) -> tuple[Model, Cluster, Candidates]:
    device, gbs, seq, eps = CASES[name]
    model, cluster = Model.from_catalog(name), Cluster(device, num_devices=DEVICES)
    space = _space(device, gbs, seq, eps)
    with _backend.use("cython"):
        priced = np.flatnonzero(seconds_batch(model, space, cluster)["reason"] < FIRST_INVALID)
    rows = np.random.default_rng(2026).choice(priced, size=size, replace=size > len(priced))
    return model, cluster, space.take(rows)


@pytest.mark.parametrize("size", (10_000, 1_000_000), ids=("10000", "1000000"))
@pytest.mark.parametrize("name", list(CASES))
def bench_seconds_batch(benchmark, api_backend, name, size):
    """Throughput: a search's batch of valid candidates in seconds mode."""
    rounds = ROUNDS.get((api_backend, name, size))
    if rounds is None:
        pytest.skip("a million candidates: compiled, llama3-70b only")
    model, cluster, cands = batch(name, size)
    benchmark.group = f"seconds_batch, {name}, {size:,} candidates"
    result = benchmark.pedantic(seconds_batch, args=(model, cands, cluster), rounds=rounds, iterations=1,
                                warmup_rounds=1 if size < 10**6 else 0)
    assert (result["reason"] < FIRST_INVALID).all() and np.isfinite(result["step_time"]).all()
    record(benchmark, MEDIANS, (name, size), api_backend, size)
    if size == 10_000:
        guard(MEDIANS, (name, size), f"seconds_batch on {name}", SECONDS_MIN_RATIO)
