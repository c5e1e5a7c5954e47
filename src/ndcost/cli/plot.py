"""``ndcost plot``: the Pareto front and parts of a search, memory per stage and the pipeline timeline of one strategy."""
from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_plot_command"]


def _cmd_search_plot(args: argparse.Namespace) -> int:
    from .search import run_search
    from ..files import output_path
    from ..io.plot import plot_pareto, plot_parts

    output_path(args.output, "a plot")
    _, _, result, _ = run_search(args)
    if args.kind == "pareto":
        print(plot_pareto(result, args.output))
    else:
        print(plot_parts(result.results, args.output))
    return 0


def _cmd_strategy_plot(args: argparse.Namespace) -> int:
    from .args import strategy_from_args
    from ..price.estimate import estimate
    from ..files import output_path
    from ..io.plot import plot_memory, plot_timeline

    output_path(args.output, "a plot")
    strategy = strategy_from_args(args, "plot")
    model, spec, cluster = strategy.model, strategy.spec, strategy.cluster
    result = estimate(model, spec, cluster, units=args.units, ratios=args.ratios, rates=strategy.rates)
    if args.kind == "memory":
        print(plot_memory(result, args.output, cluster.device.memory_bytes))
    else:
        print(plot_timeline(result, spec, args.output))
    return 0


def add_plot_command(sub: Any) -> None:
    from .args import add_strategy_arguments
    from .help import add_pricing_arguments
    from .search import add_search_arguments

    plot = sub.add_parser("plot", help="draw a search or a strategy (PNG or SVG; needs matplotlib)")
    kinds = plot.add_subparsers(dest="kind", required=True)
    for kind, what in (("pareto", "step time against peak memory of a search"),
                       ("parts", "stacked parts of a search's top strategies")):
        p = kinds.add_parser(kind, help=what)
        add_search_arguments(p)
        p.add_argument("-o", "--output", required=True, help="a .png or .svg path to write (required)")
        p.set_defaults(func=_cmd_search_plot)
    for kind, what in (("memory", "memory per pipeline stage of one strategy"),
                       ("timeline", "which micro-batch runs where, when, for one strategy")):
        p = kinds.add_parser(kind, help=what)
        add_strategy_arguments(p, "plot")
        add_pricing_arguments(p)
        p.add_argument("-o", "--output", required=True, help="a .png or .svg path to write (required)")
        p.set_defaults(func=_cmd_strategy_plot)
