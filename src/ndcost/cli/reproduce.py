"""What ``ndcost search`` prints so that its result can be priced again and launched as priced.

* :func:`estimate_command`: the ``ndcost estimate`` line that prices a ranked strategy again -- every
  field that differs from ExecSpec's defaults as its flag, a per-layer recompute plan as
  ``--recompute-plan`` (a file written by ``--save-plan``, or the plan inline as JSON).
* :func:`write_plan`: the plan file ``--save-plan`` writes (``ndcost.cli.args.read_plan`` reads it back).
* :func:`emit_report`: a launcher's settings for the strategy, and -- when they cannot state its
  recompute plan or its CUDA graphs -- what they approximate and the price of what they do state.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
from typing import Any

from .args import offset_text
from ..errors import SpecError
from ..spec.exec_spec import ExecSpec
from ..spec.stack_options import SEARCHABLE, STACK_OPTIONS, TORCHTITAN_OP, option_text

__all__ = ["estimate_command", "write_plan", "emit_report"]

#: ExecSpec's field defaults (what a command need not state).
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ExecSpec) if f.default is not dataclasses.MISSING}
#: ExecSpec fields a command states with a flag of its own name (ints, then choices).
_FLAG_FIELDS = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp", "micro_batch_size", "global_batch_size", "seq_length",
                "zero_stage", "seq_split", "pp_runs", "pp_schedule")


def write_plan(path: str, spec: ExecSpec) -> None:
    from ..spec.recompute_spec import plan_document
    from ..files import write_output

    write_output(path, "a recompute plan", json.dumps(plan_document(spec), indent=2) + "\n")


def estimate_command(args: Any, spec: ExecSpec, plan_path: str | None = None) -> str:
    """The ``ndcost estimate`` command that prices *spec* (a search's result) again with the search's
    model, device and units flags."""
    words = ["ndcost", "estimate", args.model, "--devices", str(args.devices)]
    if getattr(args, "device", None) is not None:
        words += ["--device", args.device]
    for name in ("census", "vision_tokens", "ratios", "rates", "software", "cluster"):
        value = getattr(args, name, None)
        if value is not None:
            words += ["--" + name.replace("_", "-"), str(value)]
    words += _cluster_flags(args)
    if getattr(args, "units", "seconds") != "seconds":
        words += ["--units", args.units]
    stated = set(_FLAG_FIELDS) | set(SEARCHABLE) | {"sequence_parallel", "offset", "pp_partition", "recompute",
                                                    "full_recompute", "selective_recompute", "micro_batch_num",
                                                    "selective_switches"}
    # --software fills the fields its stack fixes (ndcost.spec.software_fields): those are its defaults here
    implied = {}
    if getattr(args, "software", None) is not None:
        from ..spec.software_fields import software_fields

        # read against the strategy as its flags restate it (a row that depends on the model being MoE reads
        # it as dense: where that is wrong the field differs from the implied value and is restated by its flag)
        reads = {name: getattr(spec, name) for name in ("dp", "precision", "zero_stage", "recompute",
                                                         "global_batch_size", "micro_batch_size")
                 if getattr(spec, name) is not None}
        implied = dict(software_fields(args.software, spec.tp, spec.pp, spec.cp, **reads))
    for name, default in _DEFAULTS.items():
        if name not in stated and getattr(spec, name) != implied.get(name, default):
            raise SpecError(name, "estimate_command", "keep its default to be restated on the command line",
                            getattr(spec, name))
    for name in _FLAG_FIELDS:
        value = getattr(spec, name)
        # the micro-batch is restated under --software too, even at ExecSpec's default: torchtitan's presets
        # split the local batch into pp micro-batches unless one is stated
        software_sets = name == "micro_batch_size" and getattr(args, "software", None) is not None
        if value != _DEFAULTS.get(name) or name in ("dp", "global_batch_size", "seq_length") or software_sets:
            words += ["--" + name.replace("_", "-"), str(value if name != "global_batch_size"
                                                         else spec.resolved_global_batch_size)]
    words += _stack_flags(args, spec, implied)
    if spec.sequence_parallel:
        words.append("--sequence-parallel")
    if spec.offset is not None:
        words.append(f"--offset={offset_text(spec.offset)}")
    if spec.pp_partition is not None:
        words += ["--pp-partition", ",".join(map(str, spec.pp_partition))]
    option = spec.recompute_option
    if option == "ranges":
        if plan_path is not None:
            words += ["--recompute-plan", plan_path]
        else:
            from ..spec.recompute_spec import plan_document

            words += ["--recompute-plan", json.dumps(plan_document(spec), separators=(",", ":"))]
    elif option == "selective" or (option == "full" and spec.selective_switches is None):
        words += ["--recompute", option]   # a selective setting's switches: _stack_flags' --recompute-modules
    elif option != "none":
        raise SpecError("recompute", "estimate_command", "be none, full, selective or ranges to be restated",
                        option)
    return " ".join(shlex.quote(word) for word in words)


def _cluster_flags(args: Any) -> list[str]:
    """The cluster flags the command was given, as they were given."""
    from ..spec.cluster_options import CLUSTER_OPTIONS

    words = []
    for option in CLUSTER_OPTIONS:
        value = getattr(args, "cluster_" + option.name, None)
        if value is not None:
            words += [option.flag, str(value)]
    return words


def _software_sac(args: Any) -> bool:
    """Whether the command's --software runs torchtitan's per-op SAC where it recomputes selectively (its search
    priced a per-layer plan's selective ranges on that census, which the preset implies only for "selective")."""
    if getattr(args, "software", None) is None:
        return False
    from ..spec.software_fields import software_fields

    return software_fields(args.software, 1, 1, 1, recompute="selective").get("selective_rule") == TORCHTITAN_OP


def _stack_flags(args: Any, spec: ExecSpec, implied: dict) -> list[str]:
    """Each stack option whose field *spec* holds otherwise than its stack and ExecSpec leave it (and each rates
    option the command was given), as its flag."""
    from .stack_args import stack_dest

    words = []
    for option in STACK_OPTIONS:
        if option.owner == "rates":
            value = getattr(args, stack_dest(option), None)
            if value is not None:
                words += [option.flag, str(value)]
            continue
        if option.owner != "spec":
            continue
        value = getattr(spec, option.field)
        if value == implied.get(option.field, _DEFAULTS[option.field]):
            continue
        if option.name == "selective_rule" and value == "hyperparallel" and \
                implied.get(option.field) == TORCHTITAN_OP:
            continue                       # the stack's own per-op rule, priced on the census --software takes
        if option.name == "selective_rule" and value == "hyperparallel" and (
                TORCHTITAN_OP in str(getattr(args, stack_dest(option), "")) or _software_sac(args)):
            value = TORCHTITAN_OP          # the search's model carries torchtitan's census: restate the rule
        elif option.values is not None and value not in option.values.values():
            raise SpecError(option.field, "estimate_command", f"be one of the values {option.flag} states", value)
        words += [option.flag, option_text(option, value)]
    return words


def emit_report(launcher: str, model: Any, cluster: Any, ranked: Any, *, units: str, ratios: Any,
                rates: Any, memory_limit: float | None = None, software: str | None = None) -> list[str]:
    """The launcher's settings of *ranked* and, when they cannot state its recompute plan or capture its CUDA
    graphs (``launch_settings.launcher_graphs``), what they do state priced beside it."""
    from ..io.emit import EMITTERS
    from ..io.emit_recompute import launcher_recompute
    from ..io.launch_settings import launcher_graphs
    from ..price.estimate import estimate

    lines = [f"# {launcher} settings of #1:", EMITTERS[launcher](model, ranked.spec, rates=rates, software=software)]
    stated = launcher_recompute(launcher, model, ranked.spec)
    graphs, graphs_why = launcher_graphs(launcher, model, ranked.spec)
    if stated.exact and graphs_why is None:
        return lines
    meaning = (ranked.spec if stated.exact else stated.meaning).replace(cuda_graphs=graphs)
    flags = estimate(model, meaning, cluster, units=units, ratios=ratios, rates=rates)
    plan = ranked.estimate
    limit = cluster.device.memory_bytes if memory_limit is None else memory_limit

    def priced(e: Any) -> str:
        memory = e.memory     # held to the limit in place of the HBM: usable = limit less the fixed costs
        headroom = limit - memory.device_peak
        fits = "fits" if headroom >= 0 else "does NOT fit"
        return (f"{e.step_time:.6g} {'s' if units == 'seconds' else 'ND units'}, reserved peak "
                f"{memory.peak_reserved / 2**30:.1f} GiB, headroom {headroom / 2**30:.1f} GiB of {limit / 2**30:.1f} "
                f"GiB ({fits})")

    if not stated.exact:
        lines.append(f"# NOTE: these {launcher} settings approximate the priced recompute plan: {stated.note}.")
    if graphs_why is not None:
        # why is the settings' own `cuda_graphs` line above (stack_notes): not said twice
        lines.append(f"# NOTE: these {launcher} settings capture CUDA graphs {graphs!r}, not the priced "
                     f"{ranked.spec.cuda_graphs!r} (their cuda_graphs line above says why).")
    lines += [f"#   #1 as priced:       {priced(plan)}",
              f"#   these settings:     {priced(flags)}"]
    return lines


def replace_recompute(spec: ExecSpec, plan: tuple) -> ExecSpec:
    """*spec* with the recompute plan *plan* (ranges)."""
    return dataclasses.replace(spec, recompute=plan, full_recompute=None, selective_recompute=None)
