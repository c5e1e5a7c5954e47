"""``ndcost estimate`` and ``ndcost explain``: one strategy, from the command line."""
from __future__ import annotations

import argparse
import json
from typing import Any

from .cli_help import ESTIMATE_EXAMPLES, STRATEGY_HELP, add_pricing_arguments, examples_epilog
from .rates_io import rates_argument
from .errors import SpecError

__all__ = ["add_estimate_commands", "spec_from_args", "offset_text", "parse_layer_grid"]

_INT_FIELDS = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp", "micro_batch_size", "micro_batch_num",
               "global_batch_size", "seq_length", "zero_stage", "seq_split")


def _add_strategy_arguments(p: argparse.ArgumentParser) -> None:
    from .cli import add_model_arguments

    add_model_arguments(p)
    p.add_argument("--device", required=True, help="catalog device (see `ndcost devices`; required)")
    p.add_argument("--devices", type=int, help="number of devices (default: dp*tp*pp*cp)")
    for name in _INT_FIELDS:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, metavar="N", help=STRATEGY_HELP[name])
    p.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=None,
                   help=STRATEGY_HELP["sequence_parallel"])
    for name, choices in (("recompute", ("none", "full", "selective")),
                          ("selective_rule", ("megatron", "mindformers", "hyperparallel")),
                          ("pp_schedule", ("1f1b", "interleaved", "zero_bubble_v", "gpipe", "seq1f1b")),
                          ("cp_algo", ("ring", "ulysses")), ("precision", ("bf16", "fp16", "fp8"))):
        p.add_argument("--" + name.replace("_", "-"), dest=name, choices=choices, help=STRATEGY_HELP[name])
    for name in ("capacity_factor", "moe_imbalance"):
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=float, metavar="X", help=STRATEGY_HELP[name])
    p.add_argument("--grouped-gemm", action=argparse.BooleanOptionalAction, default=None,
                   help=STRATEGY_HELP["grouped_gemm"])
    p.add_argument("--offset", metavar="N,N,...[|N,...]",
                   help="layers added per stage (per chunk: rows separated by |), as `ndcost search` prints it "
                        "(default: the even split)")
    p.add_argument("--pp-partition", metavar="N,N,...",
                   help="layers per stage, instead of an offset (default: the even split)")
    p.add_argument("--recompute-plan", metavar="FILE|JSON",
                   help="a per-layer recompute plan: ranges of layers {first, count, option, switches}, as "
                        "`ndcost search --save-plan` writes them (or that JSON inline, as search prints it; "
                        "default: --recompute for every layer)")


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


def spec_from_args(args: argparse.Namespace):
    """The ExecSpec the strategy flags state (unstated fields keep ExecSpec's defaults)."""
    from .exec_spec import ExecSpec

    return ExecSpec(**spec_fields_from_args(args))


def spec_fields_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ExecSpec fields the strategy flags state."""
    fields: dict[str, Any] = {name: getattr(args, name) for name in _INT_FIELDS if getattr(args, name) is not None}
    for name in ("sequence_parallel", "recompute", "selective_rule", "pp_schedule", "cp_algo", "precision",
                 "capacity_factor", "moe_imbalance", "grouped_gemm"):
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
        from .cli_reproduce import read_plan

        if "recompute" in fields:
            raise SpecError("--recompute-plan", "ndcost", "be given without --recompute", plan)
        fields["recompute"] = read_plan(plan)
    return fields


def _cluster(args: argparse.Namespace, spec):
    from .device import Cluster

    return Cluster(args.device, num_devices=spec.num_devices if args.devices is None else args.devices)


def _fmt(value: float, units: str) -> str:
    if units == "seconds":
        return f"{value * 1e3:.3f} ms"
    if units == "nd_ms":
        return f"{value:.3f} ms"
    return f"{value:.6e}"


def _cmd_estimate(args: argparse.Namespace) -> int:
    from .cli import model_from_args
    from .estimate import estimate

    model = model_from_args(args)
    spec = spec_from_args(args)
    cluster = _cluster(args, spec)
    moved = None
    rates = rates_argument(args.rates, args.software)
    if args.balance:
        from .pipeline_balance import balance_pipeline

        balanced = balance_pipeline(model, spec, cluster, units=args.units, ratios=args.ratios, rates=rates)
        spec, result, moved = balanced.spec, balanced.estimate, balanced.moves
    else:
        result = estimate(model, spec, cluster, units=args.units, ratios=args.ratios, rates=rates)
    if args.json:
        out = result.to_dict()
        out["model"] = model.name
        if moved is not None:
            out["balanced"] = {"moves": moved, "offset": spec.offset}
        print(json.dumps(out, indent=2))
        return 0
    print(f"{model.name} on {cluster.num_devices} x {cluster.device.name}: "
          f"dp={spec.dp} tp={spec.tp} pp={spec.pp} vpp={spec.vpp} cp={spec.cp} ep={spec.ep} "
          f"mbs={spec.micro_batch_size} m={spec.resolved_micro_batch_num} seq={spec.seq_length}")
    if moved is not None:
        print(f"balanced: {moved} layer(s) moved" + (f", --offset={offset_text(spec.offset)}" if moved else ""))
    print(f"step time: {_fmt(result.step_time, result.units)}")
    if result.mfu == result.mfu:
        print(f"MFU: {100 * result.mfu:.1f}%   tokens/s: {result.tokens_per_second:,.0f}")
    print("parts:")
    total = result.step_time or 1.0
    for name, value in result.parts.items():
        print(f"  {name:<11} {_fmt(value, result.units):>16}  {100 * value / total:6.2f}%")
    if result.memory is not None:
        _print_memory(result, cluster)
    return 0


def _print_memory(result: Any, cluster: Any) -> None:
    """The peak against what the device can give, then each stage's parts (GiB)."""
    memory, gib = result.memory, 2**30
    verdict = "fits" if result.fits else "DOES NOT FIT"
    if memory.fixed_bytes:
        print(f"memory: peak {memory.peak_reserved / gib:.2f} GiB reserved ({memory.peak_allocated / gib:.2f} "
              f"allocated) of {memory.usable_bytes / gib:.2f} GiB usable ({cluster.device.hbm_bytes / gib:.1f} GiB "
              f"less {memory.fixed_bytes / gib:.2f} fixed: CUDA context, workspaces, NCCL) -> {verdict}")
    else:
        print(f"memory: peak {memory.peak / gib:.2f} GiB of {cluster.device.hbm_bytes / gib:.1f} GiB -> {verdict}")
    parts = ("params", "grads", "optimizer", "activations", "working_set", "comm_buffers", "reserve")
    print("  stage " + "".join(f"{name:>13}" for name in parts) + f"{'total':>10}")
    for i, stage in enumerate(memory.stages):
        print(f"  {i:>5} " + "".join(f"{getattr(stage, name) / gib:13.2f}" for name in parts)
              + f"{stage.total / gib:10.2f}")


def _cmd_explain(args: argparse.Namespace) -> int:
    from .cli import model_from_args
    from .explain import explain

    from .exec_spec import ExecSpec

    model = model_from_args(args)
    fields = spec_fields_from_args(args)
    problems = ExecSpec.problems(**fields)
    if problems:
        # the spec cannot be built: every rule group it breaks, and whether it fills the devices
        reasons = [str(problem) for problem in problems]
        degrees = [fields.get(name, 1) for name in ("dp", "tp", "pp", "cp")]
        if args.devices is not None and all(isinstance(d, int) for d in degrees):
            devices = degrees[0] * degrees[1] * degrees[2] * degrees[3]
            if devices != args.devices:
                reasons.append(f"The 'dp*tp*pp*cp' parameter of ExecSpec on --devices {args.devices} must equal "
                               f"the devices ({args.devices}). Got {devices} instead.")
    else:
        spec = ExecSpec(**fields)
        reasons = explain(model, spec, _cluster(args, spec))
    if args.json:
        print(json.dumps({"valid": not reasons, "reasons": reasons}, indent=2))
    elif not reasons:
        print("valid, and it fits")
    else:
        for reason in reasons:
            print(f"- {reason}")
    return 0 if not reasons else 1


def add_estimate_commands(sub: Any) -> None:
    p = sub.add_parser("estimate", help="price one strategy", epilog=examples_epilog(ESTIMATE_EXAMPLES),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_strategy_arguments(p)
    add_pricing_arguments(p)
    p.add_argument("--balance", action="store_true",
                   help="first move layers off the slowest stages while the step gets faster (balance_pipeline; "
                        "default: the stated layout)")
    p.add_argument("--json", action="store_true", help="print JSON (default: text)")
    p.set_defaults(func=_cmd_estimate)
    p = sub.add_parser("explain", help="why a strategy is invalid or does not fit")
    _add_strategy_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON (default: text)")
    p.set_defaults(func=_cmd_explain)
