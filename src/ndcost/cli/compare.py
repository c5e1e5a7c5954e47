"""``ndcost compare``: two strategies side by side, why one wins, and whether the gap is a tie.

Two ways to name the strategies:

* two ``ndcost estimate`` command lines, quoted (the ``ndcost estimate`` words may be left out):
  ``ndcost compare "llama3-8b --device h100-sxm --dp 8 ..." "llama3-8b --device h100-sxm --dp 4 --tp 2 ..."``;
* two ranks of a search: ``ndcost compare --search "deepseek-v3 --devices 1024 --device h800 ..."
  --ranks 1,2`` (the default ranks).

The comparison is ``ndcost.compare`` (``ndcost.io.compare``): the parts and stages of both, each
part's difference with the fields that drive it, and a tie when the gap is inside ndcost's measured
error for the device and stack.
"""
from __future__ import annotations

import argparse
import json
import shlex
from typing import Any

from ..errors import SpecError

__all__ = ["add_compare_command"]


def _inner_parser(command: str) -> argparse.ArgumentParser:
    """A parser of one ``ndcost estimate`` or ``ndcost search`` command line (errors raised, not exited)."""
    from .estimate import add_estimate_commands
    from .search import add_search_command

    parser = _RaisingParser(prog="ndcost")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_RaisingParser)
    (add_estimate_commands if command == "estimate" else add_search_command)(sub)
    return parser


class _RaisingParser(argparse.ArgumentParser):
    """An argument parser whose errors are a SpecError (one line, status 2) naming the quoted line."""

    def error(self, message: str):  # type: ignore[override]
        raise SpecError("command line", "ndcost compare", "be a valid ndcost estimate/search command line", message)

    def exit(self, status: int = 0, message: str | None = None):  # type: ignore[override]
        # --help inside a quoted line: refuse rather than exit the process from within the command
        raise SpecError("command line", "ndcost compare", "not ask for --help or --version", message or status)


def _words(text: str, command: str) -> list[str]:
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise SpecError("command line", "ndcost compare", "be quoted as a shell would", f"{text!r}: {exc}") from None
    if words[:1] == ["ndcost"]:
        words = words[1:]
    if words[:1] == [command]:
        words = words[1:]
    if not words:
        raise SpecError("command line", "ndcost compare", f"name a model and its {command} flags", text)
    return [command, *words]


def _priced_line(text: str) -> tuple:
    from .estimate import price_from_args

    args = _inner_parser("estimate").parse_args(_words(text, "estimate"))
    model, spec, cluster, result, _ = price_from_args(args)
    return model, cluster, (spec, result), args.software


def _search_ranks(text: str, ranks: str) -> tuple:
    from .search import parse_dimension, run_search

    args = _inner_parser("search").parse_args(_words(text, "search"))
    wanted = parse_dimension("--ranks", ranks, int)
    wanted = wanted if isinstance(wanted, list) else [wanted]
    if len(wanted) != 2 or any(rank < 1 for rank in wanted):
        raise SpecError("--ranks", "ndcost compare", "be two ranks >= 1, as 1,2", ranks)
    args.top = max(args.top, *wanted)
    model, cluster, result, _ = run_search(args)
    if len(result.results) < max(wanted):
        raise SpecError("--ranks", "ndcost compare", f"name ranks the search found (it ranks {len(result.results)})",
                        ranks)
    return model, cluster, [result.results[rank - 1] for rank in wanted], args.software


def _cmd_compare(args: argparse.Namespace) -> int:
    from ..io.compare import compare

    if args.search is not None:
        if args.strategies:
            raise SpecError("--search", "ndcost compare", "be given without two estimate command lines",
                            " | ".join(args.strategies))
        model, cluster, (a, b), software = _search_ranks(args.search, args.ranks)
        labels = tuple(f"#{rank}" for rank in args.ranks.split(","))
    else:
        if len(args.strategies) != 2:
            raise SpecError("strategies", "ndcost compare", "be two quoted ndcost estimate command lines (or give "
                            "--search)", len(args.strategies))
        model, cluster, a, software = _priced_line(args.strategies[0])
        _, _, b, _ = _priced_line(args.strategies[1])
        labels = ("A", "B")
    comparison = compare(a, b, model, cluster, software=software)
    if args.json:
        print(json.dumps({"model": model.name, "device": cluster.device.name, "labels": labels,
                          **comparison.to_dict()}, indent=2, default=str))
        return 0
    print(f"{model.name} on {cluster.num_devices} x {cluster.device.name}: A = {labels[0]}, B = {labels[1]}")
    print("\n".join(comparison.lines()))
    return 0


def add_compare_command(sub: Any) -> None:
    p = sub.add_parser("compare", help="two strategies side by side: why one wins, and whether it is a tie",
                       description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("strategies", nargs="*", metavar="ESTIMATE",
                   help="two ndcost estimate command lines, each quoted (or give --search)")
    p.add_argument("--search", metavar="'SEARCH ARGS'",
                   help="an ndcost search command line, quoted: compare two of its ranks (default: none)")
    p.add_argument("--ranks", default="1,2", metavar="I,J", help="the two ranks of --search to compare (default 1,2)")
    p.add_argument("--json", action="store_true", help="print JSON (default: text)")
    p.set_defaults(func=_cmd_compare)
