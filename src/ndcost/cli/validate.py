"""``ndcost validate FILE`` / ``--builtin``: estimate each published run and show the error."""
from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_validate_command"]


def _cmd_validate(args: argparse.Namespace) -> int:
    from ..errors import SpecError
    from ..spec.rates_io import load_rates
    from ..io.validation import BUILTIN_RUNS, validate_runs

    if args.memory:
        from ..io.validation_memory import MEMORY_FACTS, validate_memory

        if args.builtin is not None:
            raise SpecError("--memory", "ndcost validate", "take a memory facts FILE or none (the shipped one)",
                            args.builtin)
        if args.cluster is not None:
            raise SpecError("--cluster", "ndcost validate", "be given without --memory (its rows name their "
                            "hardware)", args.cluster)
        memory_report = validate_memory(args.file or MEMORY_FACTS)
        if args.json:
            print(json.dumps({"mae": _finite(memory_report.mae), "max_abs_error": _finite(memory_report.max_abs_error),
                              "signed_mean": _finite(memory_report.signed_mean),
                              "rows": [{"id": r.id, "figure": f"peak_{r.kind}", "estimate_gib": r.estimate_gib,
                                        "peak_allocated_gib": r.allocated_gib, "measured_gib": r.measured_gib,
                                        "error": r.error, "skipped": r.skipped, "notes": list(r.notes)}
                                       for r in memory_report.rows]}, indent=2))
        else:
            print(memory_report.table())
        return _status(len(memory_report.scored))
    if (args.file is None) == (args.builtin is None):
        raise SpecError("FILE", "ndcost validate", "be given, or --builtin, but not both",
                        args.file if args.file is not None else None)
    names = ()
    if args.builtin is not None:
        names = tuple(BUILTIN_RUNS) if args.builtin == "all" else (args.builtin,)
    paths = [BUILTIN_RUNS[name] for name in names] or [args.file]
    rates = None if args.rates is None else load_rates(args.rates)
    cluster = None
    if args.cluster is not None:
        from ..spec.cluster_options import read_cluster_file

        cluster = read_cluster_file(args.cluster)
    reports = [(str(path), validate_runs(path, rates=rates, cluster=cluster)) for path in paths]
    if cluster is not None and not any("the --cluster file" in note for _, report in reports for row in report.rows
                                       for note in row.notes):
        raise SpecError("--cluster", "ndcost validate", "be given only for rows that name no hardware (every row "
                        "names its own)", args.cluster)
    if args.json:
        out = [{
            "file": path, "mae": _finite(report.mae), "max_abs_error": _finite(report.max_abs_error),
            "signed_mean": _finite(report.signed_mean), "family_mae": report.family_mae(),
            "family_signed_mean": report.family_signed_mean(), "skipped": report.skipped,
            "rows": [{"id": r.id, "family": r.family, "estimate_s": r.estimate_s, "measured_s": r.measured_s,
                      "error": r.error, "mfu": r.mfu, "skipped": r.skipped, "notes": list(r.notes)}
                     for r in report.rows],
        } for path, report in reports]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2))
    else:
        for number, (path, report) in enumerate(reports):
            if len(reports) > 1:
                print(("\n" if number else "") + f"## {path}\n")
            print(report.table())
    return _status(sum(len(report.scored) for _, report in reports))


def _finite(value: float) -> float | None:
    """A figure for JSON: None where no row was scored (JSON has no NaN)."""
    return value if value == value else None


def _status(scored: int) -> int:
    """Exit status 1 when no row could be priced (nothing to score), with the reason on stderr."""
    if scored:
        return 0
    import sys

    print("ndcost: no row could be priced: every row was skipped (the table says why)", file=sys.stderr)
    return 1


def add_validate_command(sub: Any) -> None:
    from ..io.validation import BUILTIN_RUNS

    p = sub.add_parser("validate", help="estimate published runs and show the error per row",
                       description="Estimate each run of a runs YAML and compare with its measured step time. A "
                                   "row states its model (a catalog name, alias or config.json path, or GPT "
                                   "dims), its strategy with its stack (software, precision, fp8_recipe, "
                                   "tp_comm_overlap, ... as the estimate flags name them) and its hardware (a "
                                   "cluster block): docs/examples/h100_runs_in_row.yaml; rows shaped like "
                                   "validation/public_runs.yaml that state no software are read as 2021 runs.")
    p.add_argument("file", nargs="?", help="the runs YAML (or give --builtin)")
    p.add_argument("--builtin", nargs="?", const="all", choices=(*BUILTIN_RUNS, "all"),
                   help="the published runs shipped with ndcost: a100 (25 Megatron-LM/DeepSpeed runs), h100 (31 "
                        "NVIDIA and torchtitan runs), moe (34 MoE runs: Megatron-Bridge, Megatron-LM's MoE recipes, "
                        "DeepSeek-V3 on H800, NeMo Mixtral, NeMo AutoModel), or all (the default when no name is "
                        "given)")
    p.add_argument("--rates", metavar="FILE",
                   help="rates JSON (`ndcost calibrate --fit rates`) for every row, in place of each row's "
                        "software defaults")
    p.add_argument("--memory", action="store_true",
                   help="score peak memory instead: published peaks (allocated or reserved, as each source "
                        "reports) against the matching estimate; FILE defaults to the shipped "
                        "data/validation/h100_memory_facts.yaml")
    p.add_argument("--cluster", metavar="FILE",
                   help="a YAML cluster file (as estimate --cluster takes) for the rows that name no hardware "
                        "(default: none)")
    p.add_argument("--json", action="store_true", help="print JSON (default: a table)")
    p.set_defaults(func=_cmd_validate)
