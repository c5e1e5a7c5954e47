"""``ndcost estimate`` and ``ndcost explain``: one strategy, from the command line."""
from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import SpecError

from .args import add_strategy_arguments, offset_text, strategy_from_args
from .help import ESTIMATE_EXAMPLES, add_pricing_arguments, add_software_argument, examples_epilog

__all__ = ["add_estimate_commands"]

def _fmt(value: float, units: str) -> str:
    if units == "seconds":
        return f"{value * 1e3:.3f} ms"
    if units == "nd_ms":
        return f"{value:.3f} ms"
    return f"{value:.6e}"


def _cmd_estimate(args: argparse.Namespace) -> int:
    from ..price.estimate import estimate

    strategy = strategy_from_args(args, "estimate")
    model, spec, cluster, rates = strategy.model, strategy.spec, strategy.cluster, strategy.rates
    moved = None
    if args.balance:
        from ..price.pipeline_balance import balance_pipeline

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
    from ..price.explain import explain

    try:
        strategy = strategy_from_args(args, "explain")
    except SpecError as exc:
        if exc.owner != "ExecSpec":
            raise
        reasons = _broken_rules(args) or [str(exc)]     # the spec cannot be built: every rule group it breaks
    else:
        reasons = explain(strategy.model, strategy.spec, strategy.cluster)
    if args.json:
        print(json.dumps({"valid": not reasons, "reasons": reasons}, indent=2))
    elif not reasons:
        print("valid, and it fits")
    else:
        for reason in reasons:
            print(f"- {reason}")
    return 0 if not reasons else 1


def _broken_rules(args: argparse.Namespace) -> list[str]:
    """Every rule group the stated fields break, and whether they fill --devices."""
    from .args import spec_fields_from_args
    from .stack_args import stated_options
    from ..spec.exec_spec import ExecSpec
    from ..spec.stack_options import stack_fields

    fields = {**spec_fields_from_args(args), **stack_fields(stated_options(args, "explain"))[0]}
    if args.software is not None:
        from ..spec.software_fields import software_fields

        fields = {**software_fields(args.software, *(fields.get(n, 1) for n in ("tp", "pp", "cp"))), **fields}
    fields = {name: value for name, value in fields.items() if name != "selective_rule" or value != "torchtitan-op"}
    reasons = [str(problem) for problem in ExecSpec.problems(**fields)]
    degrees = [fields.get(name, 1) for name in ("dp", "tp", "pp", "cp")]
    if args.devices is not None and all(isinstance(d, int) for d in degrees):
        devices = degrees[0] * degrees[1] * degrees[2] * degrees[3]
        if devices != args.devices:
            reasons.append(f"The 'dp*tp*pp*cp' parameter of ExecSpec on --devices {args.devices} must equal "
                           f"the devices ({args.devices}). Got {devices} instead.")
    return reasons


def add_estimate_commands(sub: Any) -> None:
    p = sub.add_parser("estimate", help="price one strategy", epilog=examples_epilog(ESTIMATE_EXAMPLES),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_strategy_arguments(p, "estimate")
    add_pricing_arguments(p)
    p.add_argument("--balance", action="store_true",
                   help="first move layers off the slowest stages while the step gets faster (balance_pipeline; "
                        "default: the stated layout)")
    p.add_argument("--json", action="store_true", help="print JSON (default: text)")
    p.set_defaults(func=_cmd_estimate)
    p = sub.add_parser("explain", help="why a strategy is invalid or does not fit")
    add_strategy_arguments(p, "explain")
    add_software_argument(p)
    p.add_argument("--json", action="store_true", help="print JSON (default: text)")
    p.set_defaults(func=_cmd_explain)
