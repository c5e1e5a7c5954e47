"""Per-call times of this checkout beside another checkout's, measured in one run on one machine.

Usage: ``python tools/per_call_vs_checkout.py OTHER_CHECKOUT [--rounds 5]``

OTHER_CHECKOUT is a source tree with its compiled module built in place (``git worktree add /tmp/old <commit>
&& cd /tmp/old && python setup.py build_ext --inplace``). Each measurement runs in a fresh interpreter per
checkout, the two alternating round by round so that a machine's drift hits both alike; the table gives the
best round of each (microseconds per call) and the ratio. What is timed (llama3-70b on h100-sxm, the README's
strategy, memory on): ``ExecSpec(...)``, ``estimate(units="nd")`` and ``estimate(units="seconds")`` on one
prepared spec, both again on a spec built fresh each call (what a search loop pays), and the ND drop-in ``estimate_performance(cfg)`` with a fresh config object per call over 16 strategies.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

PROBE = r'''
import itertools, json, timeit
import ndcost
from ndcost import Cluster, ExecSpec, Model, estimate
from ndcost.nd import estimate_performance

FIELDS = dict(dp=16, tp=8, pp=8, global_batch_size=1024, seq_length=8192, sequence_parallel=True,
              recompute="selective")
model = Model.from_catalog("llama3-70b")
spec = ExecSpec(**FIELDS)
cluster = Cluster("h100-sxm", num_devices=spec.num_devices)


class Config:
    def __init__(self, t, p):
        self.d, self.t, self.p, self.vp, self.m, self.b, self.s = 64 // (t * p), t, p, 1, 16, 1, 4096
        self.h, self.a, self.n_kv, self.hff, self.n_lay, self.v = 8192, 64, 8, 28672, 80, 128256
        self.bytes_p, self.bytes_compute, self.has_op, self.sp = 2, 2, True, t


cycle = itertools.cycle([(t, p) for t in (1, 2, 4, 8) for p in (1, 2, 4, 8)])
CASES = {
    "ExecSpec(...)": lambda: ExecSpec(**FIELDS),
    "estimate(units='nd')": lambda: estimate(model, spec, cluster, units="nd"),
    "estimate(units='seconds')": lambda: estimate(model, spec, cluster, units="seconds"),
    "fresh spec: ExecSpec + estimate(nd)": lambda: estimate(model, ExecSpec(**FIELDS), cluster, units="nd"),
    "fresh spec: ExecSpec + estimate(seconds)": lambda: estimate(model, ExecSpec(**FIELDS), cluster),
    "nd.estimate_performance(fresh cfg)": lambda: estimate_performance(Config(*next(cycle)), device_type="A2"),
}
out = {}
for name, call in CASES.items():
    call()
    number = 2000
    out[name] = min(timeit.repeat(call, number=number, repeat=3)) / number * 1e6
print(json.dumps(out))
'''


def probe(checkout: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout / "src"))
    env.pop("NDCOST_PURE_PYTHON", None)
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout (compiled in place)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per checkout (default 5)")
    args = parser.parse_args(argv)
    best: dict[str, dict[str, float]] = {"this": {}, "other": {}}
    for _ in range(args.rounds):
        for label, checkout in (("this", HERE), ("other", args.other.resolve())):
            for name, micro in probe(checkout).items():
                best[label][name] = min(micro, best[label].get(name, float("inf")))
    print(f"{'per call (us, best of ' + str(args.rounds) + ' rounds)':40} {'this':>9} {'other':>9} {'this/other':>11}")
    for name, micro in best["this"].items():
        other = best["other"].get(name, float("nan"))
        print(f"{name:40} {micro:9.1f} {other:9.1f} {micro / other:11.2f}")
    for label in ("this", "other"):
        seconds, nd = best[label]["estimate(units='seconds')"], best[label]["estimate(units='nd')"]
        print(f"estimate seconds / nd ({label}): {seconds / nd:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
