"""How estimate_many scales with threads: a table anyone can take on their own machine.

Run: ``python bench/scaling.py --candidates 1000000 --out scaling.md`` (add ``--json scaling.json`` to keep
the numbers, ``--phases`` for the per-phase profile and the Amdahl model of docs/PERFORMANCE.md). For each
model, units (ND and seconds) and thread count (1, 2, 4, ... up to the cores, and the default
``threads=None``), estimate_many prices the same batch of valid candidates (bench_estimate_many's: drawn
from a real 1024-device search space with a fixed seed), memory included; each count is timed in every
round, the rounds interleaved, and the best round kept. The oracle (the pure-Python backend, whose
kernels hold the GIL: one thread) is timed on ``--oracle-candidates`` rows beside it.

What the machine was doing is written with the figures: the cores this process may use, the load average
and Linux's CPU pressure (/proc/pressure/cpu: the seconds some task waited for a CPU during the runs).
A figure taken while other jobs ran is the cores they left free; only a quiet machine measures the code.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_estimate_many import CASES, batch, cpu_stall  # noqa: E402
from ndcost import Candidates, _backend  # noqa: E402
from ndcost.price.estimate_many import estimate_many  # noqa: E402
from ndcost.price.threads import MAX_CHUNK, available_cores, plan  # noqa: E402

UNITS = ("nd", "seconds")


def thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... up to *cores*, and *cores* itself."""
    counts, t = [], 1
    while t < cores:
        counts.append(t)
        t *= 2
    return counts + [cores]


def machine() -> dict:
    """What the figures were taken on."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, check=False).stdout.strip()
    except OSError:
        commit = ""
    return {"cpu": model, "cores": available_cores(), "os_cpus": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "commit": commit or "?",
            "load": os.getloadavg() if hasattr(os, "getloadavg") else None}


def _best(call, rounds: int, clock=time.perf_counter) -> float:
    best = math.inf
    for _ in range(rounds):
        start = clock()
        call()
        best = min(best, clock() - start)
    return best


def scaling(name: str, n: int, counts: list[int], rounds: int) -> dict:
    """Candidates per second of each (units, threads), the best of *rounds* interleaved rounds."""
    model, cluster, cands = batch(name, n)
    keys = [(units, t) for units in UNITS for t in counts + [None]]
    best = {key: math.inf for key in keys}
    with _backend.use("cython"):
        estimate_many(model, cands, cluster, units="nd", threads=1)          # warm: tables, layouts, pages
        for _ in range(rounds):
            for units, t in keys:
                start = time.perf_counter()
                result = estimate_many(model, cands, cluster, units=units, threads=t)
                best[(units, t)] = min(best[(units, t)], time.perf_counter() - start)
                assert result.valid.all()
    return {f"{units}/{'default' if t is None else t}": n / seconds for (units, t), seconds in best.items()}


def oracle(name: str, n: int, rounds: int) -> dict:
    model, cluster, cands = batch(name, n)
    with _backend.use("python"):
        return {units: n / _best(lambda: estimate_many(model, cands, cluster, units=units, threads=1), rounds)
                for units in UNITS}


# --------------------------------------------------------------------------- the per-phase profile


def phases(name: str, n: int, rounds: int, repeats: int = 40, calls: int = 64) -> dict:
    """One thread's time split as the Amdahl model reads it (docs/PERFORMANCE.md), per unit:

    * ``chunk_s``: per chunk, whatever its rows -- the Python between the compiled calls and their
      argument checks, under the GIL: the slope of a batch of 1 + *calls* invalid rows cut into chunks of
      one row (the kernels only skip such rows) over the batch of one such row, best of *repeats*;
    * ``setup_s``: per batch, outside the chunks: a batch of one valid row, less one chunk;
    * ``row_s``: per row, the compiled loops that run without the GIL: the valid batch of *n* rows (chunks
      of ``MAX_CHUNK``), less its setup and its chunks, over *n*.

    Each is the CPU time of the calling thread (``threads=1``: all the work runs on it), which a machine
    busy with other jobs disturbs less than the wall clock.
    """
    model, cluster, cands = batch(name, n)
    fields = ("dp", "tp", "pp", "vpp", "cp", "ep", "micro_batch_size", "recompute", "zero_stage",
              "sequence_parallel", "global_batch_size", "seq_length")
    broken = Candidates.from_arrays(**{field: np.zeros(calls + 1, dtype=np.int64) if field == "dp"
                                       else cands.column(field)[:calls + 1] for field in fields})
    out = {}
    with _backend.use("cython"):
        for units in UNITS:
            def run(c, chunk, times):
                return _best(lambda: estimate_many(model, c, cluster, units=units, threads=1, chunk_size=chunk),
                             times, time.thread_time)
            run(cands, None, 1)
            one, many = (run(broken.take(np.arange(k)), 1, repeats) for k in (1, calls + 1))
            chunk_cost = max(0.0, (many - one) / calls)
            setup = max(0.0, run(cands.take(np.arange(1)), None, repeats) - chunk_cost)
            valid = run(cands, MAX_CHUNK, rounds)
            row = max(0.0, (valid - setup - math.ceil(n / MAX_CHUNK) * chunk_cost) / n)
            out[units] = {"setup_s": setup, "chunk_s": chunk_cost, "row_s": row, "one_thread_s": valid, "n": n}
    return out


def amdahl(profile: dict, n: int, threads: int) -> dict:
    """The serial share of one thread's time on *n* rows (setup and every chunk's GIL-held part, in the
    chunks plan() cuts for *threads*) and the speed-up 1 / (s + (1 - s) / threads)."""
    workers, chunk = plan(n, threads, None)
    serial = profile["setup_s"] + math.ceil(n / chunk) * profile["chunk_s"]
    total = serial + n * profile["row_s"]
    share = serial / total
    return {"threads": threads, "chunk": chunk, "serial_share": share,
            "speedup": 1.0 / (share + (1.0 - share) / threads)}


# --------------------------------------------------------------------------- the table


def table(results: dict, oracle_results: dict, info: dict, stall: float | None, wall: float, n: int,
          n_oracle: int, command: str) -> str:
    lines = [f"## estimate_many scaling, {n:,} candidates", "",
             f"Machine: {info['cpu']}, {info['cores']} cores usable ({info['os_cpus']} CPUs), Python {info['python']}, "
             f"numpy {info['numpy']}, ndcost {info['commit']}. Load average before: "
             f"{', '.join(f'{x:.2f}' for x in info['load']) if info['load'] else '?'}; "
             + (f"CPU pressure during the runs: some task waited for a CPU {stall:.0f} s of {wall:.0f} s."
                if stall is not None else "CPU pressure: not available."),
             f"Command: `{command}`; best of the rounds, compiled backend, memory included.", ""]
    for name, figures in results.items():
        one = {units: figures[f"{units}/1"] for units in UNITS}
        lines += [f"### {name}", "", "| threads | ND candidates/s | speed-up | seconds candidates/s | speed-up |",
                  "|---:|---:|---:|---:|---:|"]
        for key in [k.split("/")[1] for k in figures if k.startswith("nd/")]:
            label = f"default ({plan(n, None, None)[0]})" if key == "default" else key
            cells = [f"{figures[f'{u}/{key}'] / 1e6:.2f} M | {figures[f'{u}/{key}'] / one[u]:.2f}x" for u in UNITS]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        if name in oracle_results:
            nd, seconds = (oracle_results[name][u] / 1e3 for u in UNITS)
            lines.append(f"| oracle (pure Python), 1, {n_oracle:,} candidates | {nd:.1f} k | | {seconds:.1f} k | |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=1_000_000)
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--threads", default=None, help="comma-separated counts (default 1, 2, 4, ..., cores)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--oracle-candidates", type=int, default=10_000, help="0: no oracle row")
    parser.add_argument("--phases", action="store_true", help="also the per-phase profile and the Amdahl model")
    parser.add_argument("--predict", type=int, default=16, help="threads the Amdahl model predicts for")
    parser.add_argument("--model-candidates", type=int, default=None,
                        help="the batch size the model predicts for (default --candidates; the profile itself "
                             "runs on at most 65,536)")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    counts = ([int(t) for t in args.threads.split(",")] if args.threads else thread_counts(available_cores()))
    models = [m for m in args.models.split(",") if m]
    info, stall0, start = machine(), cpu_stall(), time.perf_counter()
    results = {name: scaling(name, args.candidates, counts, args.rounds) for name in models}
    oracles = {name: oracle(name, args.oracle_candidates, 1) for name in models} if args.oracle_candidates else {}
    profile = {name: phases(name, min(args.candidates, 65536), max(3, args.rounds)) for name in models} \
        if args.phases else {}
    wall = time.perf_counter() - start
    stall = None if stall0 is None else cpu_stall() - stall0
    command = " ".join(["python bench/scaling.py", *(sys.argv[1:] if argv is None else argv)])
    text = table(results, oracles, info, stall, wall, args.candidates, args.oracle_candidates, command)
    if profile:
        text += "\n" + model_text(profile, args.model_candidates or args.candidates, args.predict)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "cpu_stall_s": stall, "wall_s": wall,
                                         "candidates": args.candidates, "results": results, "oracle": oracles,
                                         "phases": profile,
                                         "model": {name: {unit: amdahl(p, args.model_candidates or args.candidates,
                                                                        args.predict) for unit, p in units.items()}
                                                   for name, units in profile.items()}}, indent=1))
    return 0


def model_text(profile: dict, n: int, threads: int) -> str:
    """The profile, then the serial share s(n) and the predicted speed-up at *threads* threads for batches
    of 10,000 to *n* candidates (the chunks plan() cuts for that many threads)."""
    sizes = sorted({10_000, 100_000, 1_000_000, n})
    lines = ["## Per-phase profile (one thread, CPU time) and the Amdahl model", "",
             "| model | units | setup per batch | GIL-held per chunk | per row (no GIL) | "
             + " | ".join(f"s({size:,}), {threads} threads" for size in sizes) + " |",
             "|---|---|---:|---:|---:|" + "---:|" * len(sizes)]
    for name, units in profile.items():
        for unit, p in units.items():
            cells = [f"{m['serial_share'] * 100:.2f}% -> {m['speedup']:.1f}x"
                     for m in (amdahl(p, size, threads) for size in sizes)]
            lines.append(f"| {name} | {unit} | {p['setup_s'] * 1e3:.2f} ms | {p['chunk_s'] * 1e6:.1f} us | "
                         f"{p['row_s'] * 1e9:.0f} ns | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
