"""The arguments the ``ndcost`` commands share, and how they turn into a Model, an ExecSpec and a Cluster.

The command modules of ``ndcost.cli`` (estimate, search, plot, calibrate, ...) import these;
``ndcost.cli.main`` only builds the parser from the commands and runs one. The stack and cluster flags
come from their tables (:mod:`ndcost.cli.stack_args`).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Mapping

from .help import STRATEGY_HELP
from .stack_args import (
    add_cluster_arguments, add_stack_arguments, cluster_options_from_args, device_from_args, stated_options,
)
from ..errors import SpecError
from ..spec.exec_spec import PP_SCHEDULES
from ..spec.model_source import model_from_text

__all__ = ["add_model_arguments", "model_from_args", "add_strategy_arguments", "spec_from_args",
           "spec_fields_from_args", "cluster_from_args", "offset_text", "parse_layer_grid", "read_plan",
           "Strategy", "strategy_from_args", "rates_from_args", "check_software", "cluster_where"]

_INT_FIELDS = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp", "micro_batch_size", "micro_batch_num",
               "global_batch_size", "seq_length", "zero_stage", "seq_split", "pp_runs")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """MODEL and what refines it: a HyperParallel census, a VLM's vision tokens."""
    p.add_argument("model", help="catalog name, config.json path or YAML model file")
    p.add_argument("--census", metavar="FILE",
                   help="a HyperParallel census JSON of the model's layer kinds (ndcost.spec.census; default: none)")
    p.add_argument("--vision-tokens", type=int, metavar="N",
                   help="patches per sample the vision tower runs (VLMs; default the tower's)")


def model_from_args(args: argparse.Namespace):
    """The Model that MODEL, --census and --vision-tokens state."""
    model = model_from_text(args.model)
    if getattr(args, "vision_tokens", None) is not None:
        if model.vision is None:
            raise SpecError("--vision-tokens", "ndcost", "be given only for a model with a vision tower",
                            f"{args.vision_tokens} for {model.name}")
        model = model.with_vision_tokens(args.vision_tokens)
    if getattr(args, "census", None) is not None:
        model = model.with_census(args.census)
    return model


def add_strategy_arguments(p: argparse.ArgumentParser, command: str = "estimate") -> None:
    """MODEL, --device, --devices, the ExecSpec fields, the stack options and the cluster as flags
    (estimate, explain, plot memory|timeline)."""
    add_model_arguments(p)
    p.add_argument("--device", help="catalog device (see `ndcost devices`; required unless --cluster names one)")
    p.add_argument("--devices", type=int, help="number of devices (default: dp*tp*pp*cp)")
    for name in _INT_FIELDS:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, metavar="N", help=STRATEGY_HELP[name])
    p.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=None,
                   help=STRATEGY_HELP["sequence_parallel"])
    for name, choices in (("recompute", ("none", "full", "selective")),
                          ("pp_schedule", PP_SCHEDULES)):
        p.add_argument("--" + name.replace("_", "-"), dest=name, choices=choices, help=STRATEGY_HELP[name])
    p.add_argument("--offset", metavar="N,N,...[|N,...]",
                   help="layers added per stage (per chunk: rows separated by |), as `ndcost search` prints it "
                        "(default: the even split)")
    p.add_argument("--pp-partition", metavar="N,N,...",
                   help="layers per stage, instead of an offset (default: the even split)")
    p.add_argument("--recompute-plan", metavar="FILE|JSON",
                   help="a per-layer recompute plan: ranges of layers {first, count, option, switches}, as "
                        "`ndcost search --save-plan` writes them (or that JSON inline, as search prints it; "
                        "default: --recompute for every layer)")
    add_stack_arguments(p, command)
    add_cluster_arguments(p)


def offset_text(offset: Any) -> str:
    """An offset as the CLI reads and prints it: ``-4,2,1,1`` or, per chunk, ``-1,0|1,0``."""
    if offset and isinstance(offset[0], tuple):
        return "|".join(",".join(map(str, row)) for row in offset)
    return ",".join(map(str, offset))


def parse_layer_grid(name: str, text: str) -> tuple:
    """``-4,2,1,1`` -> (-4, 2, 1, 1); ``-1,0|1,0`` -> ((-1, 0), (1, 0)): the inverse of offset_text."""
    try:
        rows = tuple(tuple(int(item) for item in row.split(",")) for row in text.split("|"))
    except ValueError:
        raise SpecError(name, "ndcost", "be integers separated by commas (chunks separated by |)", text) from None
    return rows[0] if len(rows) == 1 else rows


@dataclass(frozen=True)
class Strategy:
    """What a command's flags state: the model, the spec, the cluster and the rates (None: the device's)."""

    model: Any
    spec: Any
    cluster: Any
    rates: Any


def strategy_from_args(args: argparse.Namespace, command: str = "estimate") -> Strategy:
    """The Strategy the flags state: an unstated field takes what ``--software``'s stack fixes for the strategy
    (``ndcost.spec.software_fields``), else ExecSpec's default; a stated stack option overrides the stack and
    must mean something for the strategy; a rates figure must agree with a ``--rates`` file's."""
    from ..spec.software_fields import stack_strategy
    from ..spec.stack_options import check_applies, stack_fields

    software = getattr(args, "software", None)
    check_software(args)
    stated = stated_options(args, command)
    spec_changes, figures, _ = stack_fields(stated)
    model, spec = stack_strategy(software, model_from_args(args), {**spec_fields_from_args(args), **spec_changes},
                                 "ndcost")
    check_applies(stated, spec, model)
    cluster = cluster_from_args(args, spec)
    return Strategy(model, spec, cluster, rates_from_args(args, cluster, stated, figures))


def rates_from_args(args: argparse.Namespace, cluster: Any, stated: dict, figures: dict) -> Any:
    """The Rates that --software, --rates and the stated rates figures give (None: the device's)."""
    from ..spec.stack_rates import stack_rates

    flags = {option.field: option.flag for option in stated if option.owner == "rates"}
    software = getattr(args, "software", None)
    rates_file = getattr(args, "rates", None)
    if getattr(args, "units", "seconds") == "nd":
        # ND's units price no rates: the software's strategy fields apply, its rates are refused by estimate
        return software if software is not None else rates_file
    return stack_rates(cluster, software=software, rates_file=rates_file, figures=figures, flags=flags)


def check_software(args: argparse.Namespace) -> None:
    """--software's name checked (with the nearest one) before anything is built."""
    software = getattr(args, "software", None)
    if software is not None:
        from ..spec.software_fields import software_fields

        try:
            software_fields(software)
        except SpecError as exc:
            raise SpecError("--software", "ndcost", exc.rule, software) from None


def spec_from_args(args: argparse.Namespace):
    """The ExecSpec the strategy flags state (:func:`strategy_from_args`'s)."""
    from ..spec.software_fields import stack_strategy
    from ..spec.stack_options import stack_fields

    check_software(args)
    spec_changes = stack_fields(stated_options(args, "estimate"))[0]
    fields = {**spec_fields_from_args(args), **spec_changes}
    software = getattr(args, "software", None)
    # a per-op rule (stated, or the stack's) is priced on the model's census: the model is read only then
    needs_model = fields.get("selective_rule") is not None or (software is not None and fields.get("recompute"))
    return stack_strategy(software, model_from_args(args) if needs_model else None, fields, "ndcost")[1]


def _dp_of_devices(devices: int, fields: Mapping[str, Any]) -> int:
    """The data-parallel degree --devices leaves once tp, pp and cp are placed (what a launcher derives)."""
    model_parallel = 1
    for name in ("tp", "pp", "cp"):
        degree = fields.get(name, 1)
        if not isinstance(degree, int) or degree < 1:
            return 1                       # the degree itself is refused, by name, when the spec is built
        model_parallel *= degree
    if devices % model_parallel:
        raise SpecError("--devices", "ndcost", f"be a multiple of tp*pp*cp = {model_parallel} when --dp is not "
                        "given (dp is what the devices leave)", devices)
    return devices // model_parallel


def spec_fields_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ExecSpec fields the strategy flags (not the stack options) state."""
    fields: dict[str, Any] = {name: getattr(args, name) for name in _INT_FIELDS if getattr(args, name) is not None}
    devices = getattr(args, "devices", None)
    if "dp" not in fields and isinstance(devices, int) and devices >= 1:
        fields["dp"] = _dp_of_devices(devices, fields)
    for name in ("sequence_parallel", "recompute", "pp_schedule"):
        value = getattr(args, name)
        if value is not None:
            fields[name] = value
    for name, flag in (("offset", "--offset"), ("pp_partition", "--pp-partition")):
        text = getattr(args, name, None)
        if text is not None:
            fields[name] = parse_layer_grid(flag, text)
    if "global_batch_size" not in fields and "micro_batch_num" not in fields:
        fields["micro_batch_num"] = max(1, fields.get("pp", 1))
    plan = getattr(args, "recompute_plan", None)
    if plan is not None:
        if "recompute" in fields:
            raise SpecError("--recompute-plan", "ndcost", "be given without --recompute", plan)
        fields["recompute"] = read_plan(plan)
    return fields


def cluster_from_args(args: argparse.Namespace, spec):
    """The Cluster of --device (or --cluster's device), --devices (default: the devices *spec* uses) and the
    cluster flags and file."""
    from ..spec.cluster_options import make_cluster

    options = cluster_options_from_args(args)
    devices = spec.num_devices if args.devices is None else args.devices
    return make_cluster(device_from_args(options), devices, options, cluster_where(args))


def cluster_where(args: argparse.Namespace) -> str:
    """Where the command's cluster figures were stated (each figure's source says it)."""
    path = getattr(args, "cluster", None)
    return "the command line" if path is None else f"the command line and {path}"


def read_plan(text: str) -> tuple:
    """A recompute plan: a JSON/YAML file of ranges ({first, count, option, switches}), or the JSON inline."""
    from ..files import parse_json, read_json, read_yaml

    stripped = text.strip()
    if stripped.startswith(("[", "{")):
        doc = parse_json(stripped, "a JSON list of ranges or a file of them", "--recompute-plan")
    else:
        doc = (read_json if text.endswith(".json") else read_yaml)(text, "a recompute plan", "--recompute-plan")
    if isinstance(doc, dict):
        doc = doc.get("recompute")
    if not isinstance(doc, list) or not doc:
        raise SpecError("--recompute-plan", "ndcost", "hold a non-empty list of ranges "
                        "({first, count, option, switches})", type(doc).__name__)
    return tuple(doc)
