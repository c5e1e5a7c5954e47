"""The ``ndcost`` command line: builds the parser from the command modules and runs one command.

Each command group lives in its own module of ``ndcost.cli`` (catalog: models, devices, show;
estimate: estimate, explain; compare; reproduce; validate; calibrate; search; plot), with the arguments they
share in ``ndcost.cli.args``. Every subcommand prints a readable table by default and JSON with ``--json``.
Bad input is a :class:`~ndcost.errors.SpecError`, printed as one line on
stderr with exit status 2 (never a traceback).
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Sequence

from .._version import __version__
from .calibrate import add_calibrate_command
from .compare import add_compare_command
from .catalog import add_catalog_commands
from .estimate import add_estimate_commands
from .plot import add_plot_command
from .search import add_search_command
from .software import add_software_command, apply_default_stack
from .validate import add_validate_command
from ..errors import SpecError

__all__ = ["main", "build_parser", "OneLineParser"]

#: The commands in the order `ndcost --help` lists them.
_COMMANDS = (add_catalog_commands, add_estimate_commands, add_compare_command, add_validate_command,
             add_calibrate_command, add_search_command, add_plot_command, add_software_command)


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser with its refusals on one line, as ndcost's own are: ``--tp 2.5`` or an unknown flag
    is ``ndcost estimate: error: ... (ndcost estimate --help lists them)`` and exit status 2, not the whole usage
    (71 lines for ``estimate``) before it. The subcommands' parsers are of this class too (argparse builds
    them as their parent's)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the arguments)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="ndcost", description="Price distributed LLM training strategies.")
    parser.add_argument("--version", action="version", version=f"ndcost {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add_command in _COMMANDS:
        add_command(sub)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"ndcost: warning: {message}", file=sys.stderr if file is None else file)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    apply_default_stack(args)
    try:
        with warnings.catch_warnings():     # a warning is one line on stderr, as an error is (restored after)
            warnings.showwarning = _one_line_warning
            return int(args.func(args) or 0)
    except SpecError as exc:
        print(f"ndcost: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`ndcost search ... | head`): stop quietly, as Unix tools do,
        # and keep Python from complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        # a file the command reads or writes that the system refuses (every named file is checked by
        # ndcost.files first: this is the last net, one line and status 2 rather than a traceback)
        print(f"ndcost: error: {exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
