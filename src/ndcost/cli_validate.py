"""``ndcost validate FILE``: estimate each published run and show the error."""
from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_validate_command"]


def _cmd_validate(args: argparse.Namespace) -> int:
    from .rates_io import load_rates
    from .validation import validate_runs

    report = validate_runs(args.file, rates=None if args.rates is None else load_rates(args.rates))
    if args.json:
        print(json.dumps({
            "mae": report.mae, "max_abs_error": report.max_abs_error, "family_mae": report.family_mae(),
            "rows": [{"id": r.id, "family": r.family, "estimate_s": r.estimate_s, "measured_s": r.measured_s,
                      "error": r.error, "skipped": r.skipped, "notes": list(r.notes)} for r in report.rows],
        }, indent=2))
    else:
        print(report.table())
    return 0


def add_validate_command(sub: Any) -> None:
    p = sub.add_parser("validate", help="estimate published runs (a YAML like shared/validation/public_runs.yaml)")
    p.add_argument("file", help="the runs YAML")
    p.add_argument("--rates", metavar="FILE",
                   help="rates JSON (`ndcost calibrate --fit rates`) for every row, in place of each row's "
                        "software defaults")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_validate)
