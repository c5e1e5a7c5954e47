"""Extract aiconfigurator's GB200 and GB300 GEMM timings and print the GB300's rate over the GB200's.

    python tools/measure_gemm_part_ratio.py AICONFIGURATOR_CHECKOUT [--write]

reads ``aic-core/src/aiconfigurator_core/systems/data/{gb200,gb300}/gemm/trtllm/1.3.0rc20/gemm_perf.parquet``
of an ai-dynamo/aiconfigurator checkout (095f58a51 for the catalog's figures; reading parquet needs pandas and
pyarrow, which ndcost itself does not), keeps the shapes with every dimension >= 4096 in bf16, per-tensor fp8 and
blockwise fp8 (the shortest latency of a shape timed more than once), prints the median ratio of each
(``ndcost.spec.gemm_part_ratios.latency_ratio``) and, with ``--write``, stores the shapes in
``tests/data/aiconfigurator/gemm_gb200_gb300.json``, which the tests read.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ndcost.spec.gemm_part_ratios import LARGE_GEMM_DIM, latency_ratio

TABLE = "aic-core/src/aiconfigurator_core/systems/data/{part}/gemm/trtllm/1.3.0rc20/gemm_perf.parquet"
DTYPES = {"bf16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block"}
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "aiconfigurator" / "gemm_gb200_gb300.json"


def _rows(checkout: Path, part: str, dtype: str) -> list[list[float]]:
    import pandas as pd   # only this tool reads parquet

    frame = pd.read_parquet(checkout / TABLE.format(part=part))
    frame = frame[(frame.gemm_dtype == dtype) & (frame.m >= LARGE_GEMM_DIM) & (frame.n >= LARGE_GEMM_DIM)
                  & (frame.k >= LARGE_GEMM_DIM)]
    best = frame.groupby(["m", "n", "k"]).latency.min()
    return [[int(m), int(n), int(k), round(float(latency), 6)] for (m, n, k), latency in best.items()]


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    checkout = Path(argv[0])
    doc = {"source": "ai-dynamo/aiconfigurator@095f58a51 " + TABLE.format(part="{gb200,gb300}")
           + ": TRT-LLM GEMM latencies (ms) by (m, n, k), shapes with every dimension >= 4096, the shortest "
           "latency of a shape", "tables": {}}
    for name, dtype in DTYPES.items():
        gb200, gb300 = _rows(checkout, "gb200", dtype), _rows(checkout, "gb300", dtype)
        doc["tables"][name] = {"gb200": gb200, "gb300": gb300}
        print(f"{name:9s} {len(gb200):4d} shapes: GB300 / GB200 = {latency_ratio(gb200, gb300):.3f}")
    if "--write" in argv:
        OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
