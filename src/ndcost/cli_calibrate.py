"""``ndcost calibrate``: fit ratios to measured runs, write them, report leave-one-out.

    ndcost calibrate runs.csv --model llama3-8b --device h100-sxm --devices 8 \\
        --seq-length 4096 [--global-batch-size 64] [--units nd|seconds] [--method nd|nnls] -o ratios.json

The CSV is ND's measured format (:mod:`ndcost.measured`). The ratios file is
ND's (``run_nd -c`` and ``ndcost estimate --ratios`` read it); then, for each
run, the error of the raw estimate (scaled by one least-squares factor) and
of the estimate calibrated by ratios fitted on the other runs, their means,
and the rank correlations with the measured step before and after.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_calibrate_command"]


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from .calibrate import leave_one_out
    from .cli import load_model_argument
    from .device import Cluster
    from .errors import SpecError
    from .measured import read_measured

    model = load_model_argument(args.model)
    fields: dict[str, Any] = {}
    if args.recompute is not None:
        fields["recompute"] = args.recompute
    runs = read_measured(args.measured, seq_length=args.seq_length, global_batch_size=args.global_batch_size,
                         time_unit=args.time_unit, require_parts=args.method == "nd", **fields)
    if args.devices is not None:
        cluster: Any = Cluster(args.device, num_devices=args.devices)
        for row in runs:
            if row.spec.num_devices != args.devices:
                raise SpecError("devices", row.source or "ndcost calibrate",
                                f"equal the run's dp*tp*pp*cp ({row.spec.num_devices})", args.devices)
    else:
        cluster = args.device  # each run on exactly its strategy's devices
    result = leave_one_out(runs, model, cluster, args.units, args.method)
    result.fit.ratios.save(args.output)
    if args.json:
        out = result.to_dict()
        out.update(model=model.name, csv=runs.path, output=args.output, ignored_columns=list(runs.ignored))
        print(json.dumps(out, indent=2))
        return 0
    print(f"{model.name} on {args.device}: {len(runs)} measured runs from {runs.path}")
    if runs.ignored:
        print(f"columns skipped: {', '.join(runs.ignored)}")
    for line in result.report():
        print(line)
    print(f"ratios written to {args.output}")
    return 0


def add_calibrate_command(sub: Any) -> None:
    """Register ``ndcost calibrate`` on the CLI's subparsers."""
    p = sub.add_parser("calibrate", help="fit ratios to measured runs (ND's CSV) and check them by leave-one-out")
    p.add_argument("measured", metavar="MEASURED.csv",
                   help="ND's measured CSV: time, the degrees (dp, tp/mp, pp, ...), comp and the *_wait columns")
    p.add_argument("--model", required=True, help="catalog name, config.json path or YAML model file")
    p.add_argument("--device", required=True, help="catalog device (see `ndcost devices`)")
    p.add_argument("--devices", type=int,
                   help="number of devices every run used (default: each run's dp*tp*pp*cp)")
    p.add_argument("--seq-length", dest="seq_length", type=int, required=True, help="the runs' sequence length")
    p.add_argument("--global-batch-size", dest="global_batch_size", type=int,
                   help="the runs' global batch (gives mb where the CSV has no mb column)")
    p.add_argument("--recompute", choices=("none", "full", "selective"),
                   help="the runs' recompute where the CSV has no recompute column (default none)")
    p.add_argument("--units", choices=("nd", "seconds"), default="nd",
                   help="the estimate the ratios calibrate (nd: ms per ND unit, ND's files; seconds: a correction)")
    p.add_argument("--method", choices=("nd", "nnls"), default="nd",
                   help="nd: ND's fit, each part to its measured columns; nnls: least squares on the step time")
    p.add_argument("--time-unit", dest="time_unit", choices=("ms", "s"), default="ms",
                   help="the unit of the CSV's times (ND writes ms)")
    p.add_argument("-o", "--output", required=True, help="the ratios JSON file to write")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_cmd_calibrate)
