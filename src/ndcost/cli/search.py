"""``ndcost search``: the best strategies for a model on N devices, and how to launch them."""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import sys
from typing import Any

from ..kernels.columns import PART_NAMES
from ..tables.memory import MEMORY_FIGURES
from .help import SEARCH_EXAMPLES, add_pricing_arguments, examples_epilog
from .reproduce import emit_report, estimate_command, write_plan
from ..files import output_path, write_output
from .args import offset_text
from ..errors import SpecError

__all__ = ["add_search_command", "parse_dimension"]

_INT_DIMS = ("tp", "pp", "cp", "dp", "ep", "micro_batch_size", "vpp", "zero_stage")
_STR_DIMS = ("pp_schedule", "recompute")


def parse_dimension(name: str, text: str | None, kind: type = int) -> Any:
    """A CLI dimension: absent (searched), one value (fixed) or a comma-separated list."""
    if text is None:
        return None
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise SpecError(name, "ndcost search", "be a value or a comma-separated list, no item empty", text)
    try:
        values = [kind(item) for item in items]
    except ValueError:
        raise SpecError(name, "ndcost search", f"be {kind.__name__} values separated by commas", text) from None
    return values[0] if len(values) == 1 else values


def _searched(args: argparse.Namespace) -> list:
    """The stack options the search was given a list of: its table's extra columns."""
    from .stack_args import stack_dest
    from ..spec.stack_options import STACK_OPTIONS

    return [option for option in STACK_OPTIONS if option.owner == "spec" and option.kind != "list"
            and "," in str(getattr(args, stack_dest(option), None) or "")]


def _print_result(result: Any, model: Any, cluster: Any, software: str | None = None, stated: list = ()) -> None:
    print(f"{model.name} on {cluster.num_devices} x {cluster.device.name}: "
          f"{result.space_size} candidates priced, {result.fitting} fit")
    for title, counts in (("rejected:", result.rejected), ("not in the space (the values given):", result.excluded)):
        if counts:
            print(title)
            for reason, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
                print(f"  {count:>8}  {reason}")
    if not result.results:
        return
    from .search_table import table_lines
    from ..io.measured_error import measured_error, model_error

    print("\n".join(table_lines(result, measured_error(cluster, software), [option.field for option in stated])))
    own = model_error(model)
    if own is not None:
        print(f"measured error of this model's runs: {own.describe()}")
    print(f"Pareto front (step time vs reserved peak): {len(result.pareto)} strategies")


def _write_csv(path: str, result: Any, extra: list) -> None:
    """The ranked strategies as CSV, built in memory and written at once (files.write_output: a failure
    to write is one line, and a reader never sees half a file)."""
    import io

    handle = io.StringIO(newline="")
    writer = csv.writer(handle)
    from ..spec.stack_options import option_text

    writer.writerow(["rank", "dp", "tp", "pp", "vpp", "cp", "ep", "micro_batch_size", "micro_batch_num",
                     "recompute", *(option.name for option in extra), "offset", "step_time", *MEMORY_FIGURES.values(), "mfu", "tokens_per_second",
                     # the parts of the step, prefixed: "recompute" above is the mode, part_recompute its time
                     *(f"part_{name}" for name in PART_NAMES)] if result.results else ["rank"])
    for rank, ranked in enumerate(result.results, 1):
        s, e = ranked.spec, ranked.estimate
        writer.writerow([rank, s.dp, s.tp, s.pp, s.vpp, s.cp, s.ep, s.micro_batch_size,
                         s.resolved_micro_batch_num, "per_layer" if ranked.per_layer_recompute else s.recompute_option,
                         *(option_text(option, getattr(s, option.field)) for option in extra),
                         offset_text(s.offset) if s.offset is not None else "",
                         e.step_time, *(getattr(e.memory, name) for name in MEMORY_FIGURES.values()), e.mfu,
                         e.tokens_per_second, *(e.parts[name] for name in PART_NAMES)])
    write_output(path, "the search's CSV", handle.getvalue())


def _cmd_search(args: argparse.Namespace) -> int:
    if args.csv:
        output_path(args.csv, "the search's CSV")      # refused before the search, not after it
    if args.save_plan:
        output_path(args.save_plan, "a recompute plan")
    model, cluster, result, rates = run_search(args)
    if args.csv:
        _write_csv(args.csv, result, _searched(args))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        _print_result(result, model, cluster, args.software, _searched(args))
    if result.results:
        best = result.results[0]
        if args.save_plan:
            write_plan(args.save_plan, best.spec)
        if not args.json:
            print("\n# price #1 again:")
            print(estimate_command(args, best.spec, args.save_plan))
            if args.emit:
                print()
                print("\n".join(emit_report(args.emit, model, cluster, best, units=args.units, ratios=args.ratios,
                                             rates=rates, software=args.software,
                                             memory_limit=None if args.memory_limit_gib is None
                                             else args.memory_limit_gib * 2**30)))
    if not result.results:
        # status 1: the search ran but nothing fits (2 is bad input)
        print(f"ndcost: no strategy fits; most were rejected because: {result.main_rejection()}", file=sys.stderr)
        return 1
    return 0


def add_search_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of a search (shared with `ndcost plot pareto|parts`)."""
    from .args import add_model_arguments
    from .stack_args import add_cluster_arguments, add_stack_arguments

    add_model_arguments(p)
    p.add_argument("--devices", type=int, required=True, help="number of devices (required)")
    p.add_argument("--device", help="catalog device (see `ndcost devices`; required unless --cluster names one)")
    p.add_argument("--global-batch-size", type=int, required=True, metavar="N", help="sequences per step (required)")
    p.add_argument("--seq-length", type=int, required=True, metavar="N", help="tokens per sequence (required)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="strategies to list (default 10)")
    add_pricing_arguments(p)
    p.add_argument("--memory-limit-gib", type=float,
                   help="GiB a device may use, at least 1 (default: its HBM); exit status 1 when nothing fits")
    p.add_argument("--allow-cross-node-tp", action="store_true",
                   help="let tp span nodes (default: tp within a node)")
    p.add_argument("--plan-top", type=int, default=3, metavar="N",
                   help="offer a per-layer recompute plan to the best N (default 3)")
    p.add_argument("--balance-top", type=int, default=3, metavar="N",
                   help="offer the best N a rebalanced pipeline (layers moved off the slowest stages; 0: none; "
                        "default 3)")
    for name in _INT_DIMS + _STR_DIMS:
        p.add_argument("--" + name.replace("_", "-"), dest=name, metavar="V[,V...]",
                       help=f"fix {name}, or give a list to search (default: searched)")
    p.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=None,
                   help="fix sequence parallelism on or off (default: searched)")
    add_stack_arguments(p, "search")
    add_cluster_arguments(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr (default: shown)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="threads pricing the candidates, at least 1 (default: as many as the space's size pays "
                        "for, up to the cores this process may use; NDCOST_THREADS caps it)")


def run_search(args: argparse.Namespace):
    """(model, cluster, SearchResult, rates) of parsed search arguments."""
    from .args import model_from_args, rates_from_args, check_software, cluster_where
    from .stack_args import cluster_options_from_args, device_from_args, stated_options
    from ..spec.cluster_options import make_cluster
    from ..price.search import print_progress, search
    from ..spec.stack_options import with_torchtitan_op

    limit = args.memory_limit_gib
    if limit is not None and not (limit == limit and 1.0 <= limit < float("inf")):
        raise SpecError("--memory-limit-gib", "ndcost search", "be a finite number of GiB >= 1", limit)
    if args.threads is not None and args.threads < 1:
        raise SpecError("--threads", "ndcost search", "be an integer >= 1 (omit it: as many as pay off)", args.threads)
    check_software(args)
    options = cluster_options_from_args(args)
    model = model_from_args(args)
    cluster = make_cluster(device_from_args(options), args.devices, options, cluster_where(args))
    dims: dict[str, Any] = {}
    for name in _INT_DIMS:
        value = parse_dimension(name, getattr(args, name), int)
        if value is not None:
            dims[name] = value
    for name in _STR_DIMS:
        value = parse_dimension(name, getattr(args, name), str)
        if value is not None:
            dims[name] = value
    if args.sequence_parallel is not None:
        dims["sequence_parallel"] = args.sequence_parallel
    stated = stated_options(args, "search")
    figures = {option.field: value for option, value in stated.items() if option.owner == "rates"}
    dims.update({option.field: value for option, value in stated.items() if option.owner == "spec"})
    model, dims = with_torchtitan_op(model, dims)
    _check_rates_options(stated, dims, model)
    rates = rates_from_args(args, cluster, stated, figures)
    show_progress = not getattr(args, "json", False) and not args.no_progress and sys.stderr.isatty()
    result = search(
        model, cluster, global_batch_size=args.global_batch_size, seq_length=args.seq_length, top=args.top,
        units=args.units, ratios=args.ratios, rates=rates,
        memory_limit=None if args.memory_limit_gib is None else args.memory_limit_gib * 2**30,
        allow_cross_node_tp=args.allow_cross_node_tp, per_layer_recompute=args.plan_top, balance=args.balance_top,
        progress=print_progress if show_progress else None, threads=args.threads, software=args.software, **dims,
    )
    return model, cluster, result, rates


def _check_rates_options(stated: dict, dims: dict, model: Any) -> None:
    """A rates option must mean something to some candidate (an fp8 recipe needs fp8 among the precisions)."""
    import numpy as np

    from ..spec.stack_options import option_applies, option_text
    from ..spec.exec_spec import ExecSpec

    defaults = {f.name: f.default for f in dataclasses.fields(ExecSpec)}
    view = {name: np.asarray(dims[name] if isinstance(dims.get(name), list) else [dims.get(name, default)],
                             dtype=object) for name, default in defaults.items()}
    for option, value in stated.items():
        if option.owner == "rates" and not np.any(option_applies(option, view, model)):
            raise SpecError(option.flag, "ndcost search", f"be given only with {option.needs}",
                            option_text(option, value))


def add_search_command(sub: Any) -> None:
    p = sub.add_parser("search", help="the best strategies for a model on N devices",
                       epilog=examples_epilog(SEARCH_EXAMPLES), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_search_arguments(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON (default: a table)")
    p.add_argument("--csv", metavar="FILE", help="write the top strategies as CSV (default: none)")
    p.add_argument("--emit", choices=("megatron", "nemo", "torchtitan"),
                   help="print the launch settings of the best (and, when they cannot state its recompute plan, "
                        "what they approximate and their own price; default: none)")
    p.add_argument("--save-plan", metavar="FILE",
                   help="write the best strategy's per-layer recompute plan as JSON (for estimate --recompute-plan; "
                        "default: none)")
    p.set_defaults(func=_cmd_search)
