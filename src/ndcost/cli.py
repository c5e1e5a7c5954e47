"""The ``ndcost`` command line: catalog listings, model cards and single estimates.

Every subcommand prints a readable table by default and JSON with ``--json``.
Bad input is a :class:`~ndcost.errors.SpecError`, printed as one line on
stderr with exit status 2 (never a traceback).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from .errors import SpecError
from .files import read_mapping

__all__ = ["main", "load_model_argument", "add_model_arguments", "model_from_args"]


def load_model_argument(text: str):
    """MODEL as a catalog name, a path to a Transformers config.json (or its folder), or a YAML/JSON model file."""
    from .model import Model
    from .model_catalog import models

    path = Path(text)
    if path.is_dir() and (path / "config.json").exists():
        return Model.from_hf_config(path / "config.json")
    if path.is_file():
        if path.suffix in (".yaml", ".yml"):
            return Model.from_dict(read_mapping(path, "a YAML file of Model fields"))
        if path.suffix == ".json":
            data = read_mapping(path, "a config.json or a JSON file of Model fields")
            if "model_type" in data or "architectures" in data:
                return Model.from_hf_config(data, name=path.stem)
            return Model.from_dict(data)
    if text in models():
        return Model.from_catalog(text)
    from .suggest import did_you_mean

    raise SpecError("MODEL", "ndcost", "be a catalog name (see `ndcost models`), a config.json path "
                    f"or a YAML model file{did_you_mean(text, models())}", text)


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """MODEL and what refines it: a HyperParallel census, a VLM's vision tokens."""
    p.add_argument("model", help="catalog name, config.json path or YAML model file")
    p.add_argument("--census", metavar="FILE",
                   help="a HyperParallel census JSON of the model's layer kinds (ndcost.census; default: none)")
    p.add_argument("--vision-tokens", type=int, metavar="N",
                   help="patches per sample the vision tower runs (VLMs; default the tower's)")


def model_from_args(args: argparse.Namespace):
    """The Model that MODEL, --census and --vision-tokens state."""
    model = load_model_argument(args.model)
    if getattr(args, "vision_tokens", None) is not None:
        if model.vision is None:
            raise SpecError("--vision-tokens", "ndcost", "be given only for a model with a vision tower",
                            f"{args.vision_tokens} for {model.name}")
        model = model.with_vision_tokens(args.vision_tokens)
    if getattr(args, "census", None) is not None:
        model = model.with_census(args.census)
    return model


def _print_table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> None:
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for n, row in enumerate(cells):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _human(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:.0f}"


def _cmd_models(args: argparse.Namespace) -> int:
    from .model import Model
    from .model_catalog import models

    rows = []
    for name in models():
        model = Model.from_catalog(name)
        count = model.parameter_count()
        rows.append((name, model.family, model.num_hidden_layers, model.hidden_size, _human(count.total), _human(count.active)))
    if args.json:
        print(json.dumps([dict(zip(("name", "family", "layers", "hidden", "total", "active"), r)) for r in rows], indent=2))
    else:
        _print_table(rows, ("model", "family", "layers", "hidden", "params", "active"))
    return 0


def _cmd_devices(args: argparse.Namespace) -> int:
    from .device import Device, devices

    if args.name is not None or args.sources:
        # The detail view: every figure of a part with the source it was read from.
        names = [args.name] if args.name is not None else devices()
        cards = [Device.from_catalog(name).describe() for name in names]
        if args.json:
            print(json.dumps(cards[0] if args.name is not None else cards, indent=2))
        else:
            print("\n\n".join(_device_card(card) for card in cards))
        return 0
    rows = []
    for name in devices():
        d = Device.from_catalog(name)
        rows.append((name, f"{d.peak('bf16') / 1e12:.1f}", f"{d.hbm_bytes / 2**30:.0f}", f"{d.hbm_bandwidth / 1e12:.2f}",
                     d.devices_per_node, f"{d.intra_node_bandwidth / 1e9:.0f}", f"{d.inter_node_bandwidth / 1e9:.1f}"))
    header = ("device", "bf16 TFLOP/s", "HBM GiB", "HBM TB/s", "per node", "intra GB/s", "inter GB/s")
    if args.json:
        print(json.dumps([{**dict(zip(header, r)), "sources": dict(Device.from_catalog(r[0]).sources)} for r in rows],
                         indent=2))
    else:
        _print_table(rows, header)
    return 0


# How the detail view shows a figure held in SI units: (scale, unit).
_FIGURE_DISPLAY = {"FLOP/s": (1e12, "TFLOP/s"), "bytes": (1e9, "GB"), "bytes/s": (1e12, "TB/s"),
                   "bytes/s per direction": (1e9, "GB/s per direction"), "s": (1e-6, "us")}


def _device_card(card: dict) -> str:
    """One part's figures, each with its source (split at its ' || ' parts), wrapped for a terminal."""
    import textwrap

    def source(text: str) -> list[str]:
        return [line for part in text.split(" || ") for line in textwrap.wrap(
            part, 100, initial_indent="      ", subsequent_indent="        ", break_on_hyphens=False)]

    lines = [card["name"]["value"]] + source(card["name"]["source"])
    for figure, entry in card.items():
        if figure == "name":
            continue
        value, unit = entry["value"], entry["unit"]
        scale, shown = _FIGURE_DISPLAY.get(unit, (1, unit))
        text = f"{value / scale:g} {shown}" if isinstance(value, (int, float)) else str(value)
        if unit == "bytes":
            text += f" ({value / 2**30:.1f} GiB)"
        lines.append(f"  {figure} = {text.rstrip()}")
        lines += source(entry["source"])
    return "\n".join(lines)


def _cmd_show(args: argparse.Namespace) -> int:
    model = model_from_args(args)
    card = model.describe()
    if args.json:
        print(json.dumps(card, indent=2, default=str))
        return 0
    for key, value in card.items():
        if isinstance(value, dict):
            print(f"{key}:")
            for sub, inner in value.items():
                print(f"  {sub}: {inner}")
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], dict):
            print(f"{key}:")
            for item in value:
                print("  - " + ", ".join(f"{k}={v}" for k, v in item.items()))
        else:
            print(f"{key}: {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="ndcost", description="Price distributed LLM training strategies.")
    parser.add_argument("--version", action="version", version=f"ndcost {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("models", help="list the model catalog")
    p.add_argument("--json", action="store_true", help="print JSON (default: a table)")
    p.set_defaults(func=_cmd_models)
    p = sub.add_parser("devices", help="list the device catalog; NAME or --sources: every figure with its source")
    p.add_argument("name", nargs="?", metavar="NAME", help="one part (or alias): every figure with its source")
    p.add_argument("--sources", action="store_true", help="every figure of every part with its source (default: the summary table)")
    p.add_argument("--json", action="store_true", help="JSON; the list carries each part's sources (default: a table)")
    p.set_defaults(func=_cmd_devices)
    p = sub.add_parser("show", help="dims, layer kinds and parameter counts of a model")
    add_model_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON (default: text)")
    p.set_defaults(func=_cmd_show)
    from .cli_estimate import add_estimate_commands

    add_estimate_commands(sub)
    from .cli_validate import add_validate_command

    add_validate_command(sub)
    from .cli_calibrate import add_calibrate_command

    add_calibrate_command(sub)
    from .cli_plot import add_plot_command
    from .cli_search import add_search_command

    add_search_command(sub)
    add_plot_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SpecError as exc:
        print(f"ndcost: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`ndcost search ... | head`): stop quietly, as Unix tools do,
        # and keep Python from complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
