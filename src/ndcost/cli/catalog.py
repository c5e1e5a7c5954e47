"""``ndcost models``, ``ndcost devices`` and ``ndcost show``: what the catalogs hold, as tables or JSON."""
from __future__ import annotations

import argparse
import json
from typing import Any, Sequence

from .args import add_model_arguments, model_from_args

__all__ = ["add_catalog_commands"]


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


#: The two columns a catalog table gives a name's shipped validation rows, and the note under it.
_CHECKED_HEADER = ("validation rows", "step-time MAE (signed)")
_CHECKED_NOTE = ("validation rows: the shipped runs (ndcost validate --builtin) measured on the {what}; a {what} "
                 "'not checked' has none, and its estimates have not been compared with a measurement")


def _checked_cells(error: Any) -> tuple:
    """A table's validation cells for one name: its rows and their error, or 'not checked'."""
    return (error.rows, f"{100 * error.mae:.1f}% ({100 * error.signed_mean:+.1f}%)") if error else (0, "not checked")


def _checked_json(error: Any) -> dict | None:
    """A JSON entry's validation figures (None: not checked)."""
    return None if not error else {"rows": error.rows, "mae": error.mae, "signed_mean": error.signed_mean}


def _cmd_models(args: argparse.Namespace) -> int:
    from ..io.measured_error import validated_models
    from ..spec.model import Model
    from ..spec.model_catalog import models

    checked = validated_models()
    rows = []
    for name in models():
        model = Model.from_catalog(name)
        count = model.parameter_count()
        rows.append((name, model.family, model.num_hidden_layers, model.hidden_size, _human(count.total),
                     _human(count.active), *_checked_cells(checked.get(name))))
    fields = ("name", "family", "layers", "hidden", "total", "active")
    if args.json:
        print(json.dumps([{**dict(zip(fields, r)), "validation": _checked_json(checked.get(r[0]))} for r in rows],
                         indent=2))
    else:
        _print_table(rows, ("model", "family", "layers", "hidden", "params", "active", *_CHECKED_HEADER))
        print(_CHECKED_NOTE.format(what="model") + " (on any part: ndcost devices for the parts)")
    return 0


def _cmd_devices(args: argparse.Namespace) -> int:
    from ..spec.device import Device, devices

    if args.name is not None or args.sources:
        # The detail view: every figure of a part with the source it was read from.
        names = [args.name] if args.name is not None else devices()
        cards = [Device.from_catalog(name).describe() for name in names]
        if args.json:
            print(json.dumps(cards[0] if args.name is not None else cards, indent=2))
        else:
            print("\n\n".join(_device_card(card) for card in cards))
        return 0
    from ..io.measured_error import validated_devices

    checked = validated_devices()
    rows = []
    for name in devices():
        d = Device.from_catalog(name)
        error = checked.get(name)
        rows.append((name, f"{d.peak('bf16') / 1e12:.1f}", f"{d.memory_bytes / 2**30:.1f}", f"{d.hbm_bandwidth / 1e12:.2f}",
                     d.devices_per_node, f"{d.intra_node_bandwidth / 1e9:.0f}", f"{d.inter_node_bandwidth / 1e9:.1f}",
                     *_checked_cells(error)))
    header = ("device", "bf16 TFLOP/s", "HBM GiB", "HBM TB/s", "per node", "intra GB/s", "inter GB/s", *_CHECKED_HEADER)
    if args.json:
        print(json.dumps([{**dict(zip(header[:7], r)), "validation": _checked_json(checked.get(r[0])),
                           "sources": dict(Device.from_catalog(r[0]).sources)} for r in rows], indent=2))
    else:
        _print_table(rows, header)
        print("HBM GiB: what the part's driver exposes (hbm_visible_bytes), what estimates fit in; the datasheet's "
              "GB: ndcost devices NAME")
        print(_CHECKED_NOTE.format(what="part"))
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


def _runs(names: Sequence[str]) -> str:
    """A layer order as runs: ``dense x3, moe x58``."""
    out: list[list] = []
    for name in names:
        if out and out[-1][0] == name:
            out[-1][1] += 1
        else:
            out.append([name, 1])
    return ", ".join(f"{name} x{count}" for name, count in out)


def _short_card(card: dict) -> list[str]:
    """What a planner reads first: the dimensions that are set, the layer kinds and their order, the
    parameter counts (``ndcost show MODEL --all`` prints every field)."""
    dims = {key: value for key, value in card["dims"].items() if value not in (0, False, None)}
    lines = [f"{card['name']} ({card['family']})",
             "dims: " + ", ".join(f"{key}={value}" for key, value in dims.items())]
    lines.append("layers: " + _runs(card["layer_order"]))
    for kind in card["kinds"]:
        mtp = f" (+{kind['mtp_layers']} MTP)" if kind.get("mtp_layers") else ""
        lines.append(f"  kind {kind['name']}: attention {kind['attention']}, ffn {kind['ffn']}, {kind['module']}, "
                     f"{kind['layers']} layers{mtp}")
    if card.get("vision"):
        lines.append(f"vision tower: {card['vision'].get('depth', '?')} blocks")
    if card.get("census"):
        lines.append(f"census: {len(card['census'])} kinds")
    parameters = card["parameters"]
    lines.append(f"parameters: {_human(parameters['total'])} total, {_human(parameters['active'])} active "
                 f"({_human(parameters['active_without_input_embedding'])} without the input embedding)")
    lines.append("(ndcost show MODEL --all: every field, and how the counts are made)")
    return lines


def _cmd_show(args: argparse.Namespace) -> int:
    model = model_from_args(args)
    card = model.describe()
    if args.json:
        print(json.dumps(card, indent=2, default=str))
        return 0
    if not args.all:
        print("\n".join(_short_card(card)))
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


def add_catalog_commands(sub: Any) -> None:
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
    p.add_argument("--all", action="store_true", help="every field of the model (default: the short card)")
    p.add_argument("--json", action="store_true", help="print JSON: every field (default: text)")
    p.set_defaults(func=_cmd_show)
