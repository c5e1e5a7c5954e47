"""``ndcost estimate`` and ``ndcost explain``: one strategy, from the command line."""
from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import SpecError

from .args import add_strategy_arguments, offset_text, strategy_from_args
from .help import ESTIMATE_EXAMPLES, add_pricing_arguments, add_software_argument, examples_epilog
from .software import stack_line

__all__ = ["add_estimate_commands", "price_from_args"]


def _fmt(value: float, units: str) -> str:
    if units in ("seconds", "nd_ms"):
        ms = value * 1e3 if units == "seconds" else value
        # three decimals; three significant digits below 1 ms (a part of a microsecond is not 0.000) and
        # past 1e12 ms (a step scaled by a toy ratio is not printed digit by digit)
        return f"{ms:.3f} ms" if 1.0 <= abs(ms) < 1e12 or ms == 0.0 else f"{ms:.4g} ms"
    return f"{value:.6e}"


def price_from_args(args: argparse.Namespace) -> tuple:
    """(model, spec, cluster, estimate, layers moved or None) of parsed ``ndcost estimate`` arguments:
    the strategy priced as stated, or first rebalanced with ``--balance``."""
    from ..price.estimate import estimate

    strategy = strategy_from_args(args, "estimate")
    model, spec, cluster, rates = strategy.model, strategy.spec, strategy.cluster, strategy.rates
    if args.balance:
        from ..price.pipeline_balance import balance_pipeline

        balanced = balance_pipeline(model, spec, cluster, units=args.units, ratios=args.ratios, rates=rates)
        return model, balanced.spec, cluster, balanced.estimate, balanced.moves
    return model, spec, cluster, estimate(model, spec, cluster, units=args.units, ratios=args.ratios,
                                          rates=rates), None


def _cmd_estimate(args: argparse.Namespace) -> int:
    model, spec, cluster, result, moved = price_from_args(args)
    if args.ops and result.units != "seconds":
        raise SpecError("--ops", "ndcost estimate", "be asked for in seconds units (the per-op table prices seconds "
                        "mode)", result.units)
    if args.json:
        out = result.to_dict()
        out["model"] = model.name
        out["software"] = getattr(args, "software", None)
        if args.ops:
            out["ops"] = [table.to_dict() for table in result.ops()]
        if moved is not None:
            out["balanced"] = {"moves": moved, "offset": spec.offset}
        device_error, model_error = _measured_errors(model, cluster, args)
        out["measured_error"] = {"device": device_error.to_dict(),
                                 "model": model_error.to_dict() if model_error is not None else None}
        print(json.dumps(out, indent=2))
        return 0
    print(f"{model.name} on {cluster.num_devices} x {cluster.device.name}: "
          f"dp={spec.dp} tp={spec.tp} pp={spec.pp} vpp={spec.vpp} cp={spec.cp} ep={spec.ep} "
          f"mbs={spec.micro_batch_size} m={spec.resolved_micro_batch_num} seq={spec.seq_length}")
    if moved is not None:
        print(f"balanced: {moved} layer(s) moved" + (f", --offset={offset_text(spec.offset)}" if moved else ""))
    print(f"step time: {_fmt(result.step_time, result.units)}")
    if result.mfu is not None:
        print(f"MFU: {100 * result.mfu:.1f}%   tokens/s: {result.tokens_per_second:,.0f}")
    print(stack_line(args))
    device_error, model_error = _measured_errors(model, cluster, args)
    print(f"measured error: {device_error.describe()}")
    if model_error is not None:
        print(f"  of this model: {model_error.describe()}")
    print("parts:")
    total = result.step_time or 1.0
    for name, value in result.parts.items():
        print(f"  {name:<11} {_fmt(value, result.units):>16}  {100 * value / total:6.2f}%")
    if result.memory is not None:
        _print_memory(result, cluster)
    if args.ops:
        for table in result.ops():
            print(table.table())
    return 0


def _measured_errors(model: Any, cluster: Any, args: argparse.Namespace) -> tuple:
    """(device, model) measured error of the shipped validation (``ndcost.io.measured_error``): the rows of the
    device and stack, and those of the catalog model where at least three ran it (None otherwise)."""
    from ..io.measured_error import measured_error, model_error

    return measured_error(cluster, getattr(args, "software", None)), model_error(model)


def _print_memory(result: Any, cluster: Any) -> None:
    """The memory figures in the one vocabulary (ndcost.tables.memory_words), then each stage's parts."""
    from ..tables.memory_words import memory_line, stage_table

    print(memory_line(result.memory, result.fits))
    print("\n".join(stage_table(result.memory)))


def _cmd_explain(args: argparse.Namespace) -> int:
    from ..price.explain import explain

    try:
        strategy = strategy_from_args(args, "explain")
    except SpecError as exc:
        if exc.owner != "ExecSpec":
            raise
        reasons = _broken_rules(args) or [str(exc)]     # the spec cannot be built: every rule group it breaks
    else:
        reasons = explain(strategy.model, strategy.spec, strategy.cluster, rates=strategy.rates)
    if reasons:
        if args.json:
            print(json.dumps({"valid": False, "reasons": reasons}, indent=2))
        else:
            for reason in reasons:
                print(f"- {reason}")
        return 1
    # valid and it fits: its headroom, and how far it is from #1 of a search of the same job and why
    from ..price.estimate import estimate

    model, spec, cluster = strategy.model, strategy.spec, strategy.cluster
    priced = estimate(model, spec, cluster, rates=strategy.rates)
    rank = None if args.no_rank else _distance_from_best(model, spec, cluster, priced, args.software)
    if args.json:
        print(json.dumps({"valid": True, "reasons": [], "headroom": priced.memory.headroom,
                          "rank": rank}, indent=2, default=str))
        return 0
    print(f"valid, and it fits: headroom {priced.memory.headroom / 2**30:.2f} GiB "
          f"(reserved peak {priced.memory.peak_reserved / 2**30:.2f} GiB of usable HBM "
          f"{priced.memory.usable_bytes / 2**30:.2f} GiB)")
    if rank is not None:
        print("\n".join(rank["lines"]))
    return 0


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


def _distance_from_best(model: Any, spec: Any, cluster: Any, priced: Any, software: str | None) -> dict:
    """How far *spec* is from #1 of ``ndcost search`` on the same model, devices, batch and sequence, and why
    (``ndcost.compare``), as {"best": .., "gap": .., "tied": .., "lines": [...]}."""
    from ..io.compare import compare
    from ..price.search import search

    command = (f"ndcost search {model.name} --devices {cluster.num_devices} --device {cluster.device.name} "
               f"--global-batch-size {spec.resolved_global_batch_size} --seq-length {spec.seq_length}")
    try:
        result = search(model, cluster, global_batch_size=spec.resolved_global_batch_size,
                        seq_length=spec.seq_length, top=1, software=software)
    except SpecError as exc:
        return {"best": None, "lines": [f"not ranked: {command} refuses the job: {exc}"]}
    if not result.results:
        return {"best": None, "lines": [f"not ranked: nothing in `{command}` fits"]}
    best = result.results[0]
    comparison = compare(best, (spec, priced), model, cluster, software=software)
    if comparison.gap <= 0:
        lines = [f"it is as fast as #1 of `{command}`, or faster: " + comparison.verdict().replace("B - A", "this - #1")]
    else:
        lines = [f"against #1 of `{command}` (A = #1, B = this strategy):", comparison.verdict(),
                 *(f"  - {reason}" for reason in comparison.reasons[:6])]
    return {"best": comparison.to_dict()["a"]["strategy"], "gap": comparison.gap,
            "relative_gap": comparison.relative_gap, "tied": comparison.tied, "lines": lines}


def add_estimate_commands(sub: Any) -> None:
    p = sub.add_parser("estimate", help="price one strategy", epilog=examples_epilog(ESTIMATE_EXAMPLES),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_strategy_arguments(p, "estimate")
    add_pricing_arguments(p)
    p.add_argument("--balance", action="store_true",
                   help="first move layers off the slowest stages while the step gets faster (balance_pipeline; "
                        "default: the stated layout)")
    p.add_argument("--ops", action="store_true",
                   help="also print one layer of each kind op by op: FLOPs, bytes, kernels, time, host time and "
                        "what bounds each op, forward and backward (seconds units; default: off)")
    p.add_argument("--json", action="store_true", help="print JSON (default: text)")
    p.set_defaults(func=_cmd_estimate)
    p = sub.add_parser("explain", help="why a strategy is invalid or does not fit; for one that runs, how far it "
                                       "is from #1 of a search of the same job, and why")
    add_strategy_arguments(p, "explain")
    add_software_argument(p)
    p.add_argument("--no-rank", action="store_true",
                   help="do not search the job for its #1 to compare a valid strategy with (default: compare)")
    p.add_argument("--json", action="store_true", help="print JSON (default: text)")
    p.set_defaults(func=_cmd_explain)
