"""``ndcost calibrate``: fit ratios (or rates) to measured runs, write them, report leave-one-out.

    ndcost calibrate runs.csv --model llama3-8b --device h100-sxm --devices 8 \\
        --seq-length 4096 [--global-batch-size 64] [--units nd|seconds] [--method nd|nnls] -o ratios.json
    ndcost calibrate --fit rates runs.yaml --device h100-sxm [--figures a,b,...] -o rates.json

The CSV is ND's measured format (:mod:`ndcost.io.measured`). The ratios file is
ND's (``run_nd -c`` and ``ndcost estimate --ratios`` read it); then, for each
run, the error of the raw estimate (scaled by one least-squares factor) and
of the estimate calibrated by ratios fitted on the other runs, their means,
and the rank correlations with the measured step before and after.

``--fit rates`` fits seconds mode's rates instead (:func:`ndcost.fit_rates`) to a runs file
(:mod:`ndcost.io.fit_runs`: CSV or YAML, or a validation file): it prints the figures fitted and
held, each run's error with the defaults, in sample and left out, and writes the rates JSON only
when the fit predicts left-out runs better than the defaults; a refused fit exits with status 1.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_calibrate_command"]


def _cmd_fit_rates(args: argparse.Namespace) -> int:
    import sys

    from ..errors import SpecError
    from ..io.fit_rates import fit_rates
    from ..io.fit_runs import read_runs

    for flag, value in (("--model", args.model), ("--devices", args.devices), ("--seq-length", args.seq_length),
                        ("--global-batch-size", args.global_batch_size), ("--recompute", args.recompute)):
        if value is not None:
            raise SpecError(flag, "ndcost calibrate --fit rates", "be left out: the runs file states each run", value)
    figures = None if args.figures is None else tuple(n.strip() for n in args.figures.split(",") if n.strip())
    runs = read_runs(args.measured, device=args.device)
    result = fit_rates(runs, device=args.device, fit=figures)
    if result.accepted:
        result.save(args.output)
    if args.json:
        print(json.dumps({**result.to_dict(), "output": args.output if result.accepted else None,
                          "skipped": dict(runs.skipped)}, indent=2))
    else:
        for label, why in runs.skipped:
            print(f"skipped {label}: {why}")
        for line in result.report():
            print(line)
        if result.accepted:
            print(f"rates written to {args.output}")
    if not result.accepted:
        print(f"ndcost: fit refused, {args.output} not written: {result.reason}", file=sys.stderr)
        return 1
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from ..files import output_path

    output_path(args.output, "the fitted ratios or rates")     # refused before the fit, not after it
    if args.fit == "rates":
        return _cmd_fit_rates(args)
    from ..io.leave_one_out import leave_one_out
    from ..spec.device import Cluster
    from ..errors import SpecError
    from ..io.measured import read_measured
    from ..spec.model_source import model_from_text

    for flag, value in (("--model", args.model), ("--device", args.device), ("--seq-length", args.seq_length)):
        if value is None:
            raise SpecError(flag, "ndcost calibrate", "be given to fit ratios", None)
    if args.figures is not None:
        raise SpecError("--figures", "ndcost calibrate", "be given with --fit rates only", args.figures)
    model = model_from_text(args.model)
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
    if result.worse_after:
        import sys

        print(f"ndcost: warning: {args.output} written, but its ratios predict left-out runs worse "
              f"({result.mae_after:.4g} {result.unit}) than one scale factor ({result.mae_before:.4g} {result.unit})",
              file=sys.stderr)
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
    p = sub.add_parser("calibrate", help="fit ratios (ND's CSV) or, with --fit rates, seconds mode's rates to "
                                         "measured runs, and check them by leave-one-out")
    p.add_argument("measured", metavar="MEASURED",
                   help="ratios: ND's measured CSV (time, the degrees dp, tp/mp, pp, ..., comp and the *_wait "
                        "columns); rates: a runs file (CSV/YAML: step_time and ExecSpec fields per run, see "
                        "ndcost.io.fit_runs) or a validation YAML")
    p.add_argument("--fit", choices=("ratios", "rates"), default="ratios",
                   help="ratios (default): ND's per-part ratios; rates: seconds mode's rates (GEMM, attention, "
                        "HBM, kernel overhead, link efficiencies) by bounded least squares, refused unless "
                        "their leave-one-out error beats the defaults' (exit 1)")
    p.add_argument("--figures", metavar="NAME[,NAME...]",
                   help="--fit rates: the Rates figures to fit (default: the six physical rates)")
    p.add_argument("--model", help="ratios: catalog name, config.json path or YAML model file (required; "
                                   "no default)")
    p.add_argument("--device", help="catalog device (see `ndcost devices`); required for ratios and for a "
                                    "runs file that does not state it (no default)")
    p.add_argument("--devices", type=int,
                   help="number of devices every run used (default: each run's dp*tp*pp*cp)")
    p.add_argument("--seq-length", dest="seq_length", type=int, metavar="N",
                   help="ratios: the runs' sequence length, tokens (required; no default)")
    p.add_argument("--global-batch-size", dest="global_batch_size", type=int, metavar="N",
                   help="the runs' global batch, sequences (gives mb where the CSV has no mb column; default: "
                        "the CSV's)")
    p.add_argument("--recompute", choices=("none", "full", "selective"),
                   help="the runs' recompute where the CSV has no recompute column (default none)")
    p.add_argument("--units", choices=("nd", "seconds"), default="nd",
                   help="the estimate the ratios calibrate (nd, the default: ms per ND unit, ND's files; "
                        "seconds: a correction)")
    p.add_argument("--method", choices=("nd", "nnls"), default="nd",
                   help="nd (default): ND's fit, each part to its measured columns; nnls: least squares on the "
                        "step time")
    p.add_argument("--time-unit", dest="time_unit", choices=("ms", "s"), default="ms",
                   help="the unit of the CSV's times (default ms, as ND writes them)")
    p.add_argument("-o", "--output", required=True, help="the ratios (or rates) JSON file to write (required)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (default: text)")
    p.set_defaults(func=_cmd_calibrate)
