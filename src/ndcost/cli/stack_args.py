"""The stack and cluster flags of the commands, built from their tables, and read back.

:data:`ndcost.spec.stack_options.STACK_OPTIONS` and :data:`ndcost.spec.cluster_options.CLUSTER_OPTIONS`
hold every flag's name, kind and help; this module only turns them into argparse arguments and a
parsed namespace back into what they state. A bool option is ``--name [on|off]`` (bare: on) and
``--no-name``; in ``search`` any ExecSpec option takes a comma-separated list (a search dimension).
"""
from __future__ import annotations

import argparse
from typing import Any

from ..errors import SpecError
from ..spec.cluster_options import CLUSTER_OPTIONS, cluster_keywords, merge_cluster_options, read_cluster_file
from ..spec.stack_options import STACK_OPTIONS, StackOption, parse_option, parse_option_list

__all__ = ["add_stack_arguments", "stated_options", "add_cluster_arguments", "cluster_options_from_args",
           "device_from_args", "stack_dest"]


def stack_dest(option: StackOption) -> str:
    """The namespace attribute of an option's flag."""
    return "stack_" + option.name


def add_stack_arguments(p: argparse.ArgumentParser, command: str) -> None:
    """Every stack option *command* takes, from the table (in its order)."""
    group = p.add_argument_group("training stack (each overrides what --software's stack sets)")
    for option in STACK_OPTIONS:
        if command not in option.commands or (command == "explain" and option.owner == "rates"):
            continue
        listed = command == "search" and option.owner == "spec" and option.kind != "list"
        help_text = option.help + ("; a comma-separated list searches them" if listed else "")
        dest = stack_dest(option)
        if option.kind == "bool":
            group.add_argument(option.flag, dest=dest, nargs="?", const="on",
                               metavar="on,off" if listed else "on|off", help=help_text)
            group.add_argument("--no-" + option.flag[2:], dest=dest, action="store_const", const="off",
                               help=f"the same as {option.flag} off (default: not stated)")
        else:
            metavar = ("NAME[,NAME...]" if option.kind == "list" else ",".join(map(str, option.choices))
                       if option.choices else ("X[,X...]" if listed else "X"))
            group.add_argument(option.flag, dest=dest, metavar=metavar, help=help_text)


def stated_options(args: argparse.Namespace, command: str) -> dict[StackOption, Any]:
    """Option -> the field value (a list of them for a searched dimension) each stated flag gives."""
    stated: dict[StackOption, Any] = {}
    for option in STACK_OPTIONS:
        raw = getattr(args, stack_dest(option), None)
        if raw is None:
            continue
        if command == "search" and option.owner == "spec" and option.kind != "list":
            values = parse_option_list(option, raw)
            stated[option] = values[0] if len(values) == 1 else values
        else:
            if command == "search" and option.owner == "rates" and "," in str(raw):
                raise SpecError(option.flag, "ndcost search", "be one value (a rates figure holds for the whole "
                                "search)", raw)
            stated[option] = parse_option(option, raw)
    if getattr(args, "units", "seconds") == "nd":
        for option in stated:
            if option.seconds_only:
                raise SpecError(option.flag, "ndcost", "be given in seconds units only (ND's units do not price "
                                "it)", getattr(args, stack_dest(option)))
    return stated


def add_cluster_arguments(p: argparse.ArgumentParser, *, files_only: bool = False) -> None:
    """``--cluster FILE`` and (unless *files_only*) the cluster figures as flags."""
    group = p.add_argument_group("cluster (each overrides the device's figure)")
    group.add_argument("--cluster", metavar="FILE",
                       help="a YAML cluster file: device, devices_per_node, scale_up_gb_s, scale_out_gb_s, "
                            "devices_per_host, nics_per_host, nic_gbps, hbm_gb, hbm_tb_s, peak_tflops, ... "
                            "(default: none)")
    if files_only:
        return
    for option in CLUSTER_OPTIONS:
        if option.cli:
            group.add_argument(option.flag, dest="cluster_" + option.name,
                               type=int if option.kind == "int" else float, metavar="N" if option.kind == "int" else "X",
                               help=option.help)


def cluster_options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The cluster options the flags and ``--cluster`` state together (device included when either names
    one); a figure both state must agree."""
    flags = {option.name: getattr(args, "cluster_" + option.name) for option in CLUSTER_OPTIONS
             if getattr(args, "cluster_" + option.name, None) is not None}
    if getattr(args, "units", "seconds") == "nd":
        for option in CLUSTER_OPTIONS:
            if option.seconds_only and option.name in flags:
                raise SpecError(option.flag, "ndcost", "be given in seconds units only (ND's units price no link "
                                "or HBM rate)", flags[option.name])
    if getattr(args, "device", None) is not None:
        from ..spec.device import Device

        flags["device"] = Device.from_catalog(args.device).name if _known(args.device) else args.device
    path = getattr(args, "cluster", None)
    file = None
    if path is not None:
        file = read_cluster_file(path)
        cluster_keywords(file, path)      # the file's own figures checked, named as the file names them
    merged = merge_cluster_options(flags, file, path or "")
    cluster_keywords(merged)          # with the flags: every figure's rule checked before anything is priced
    return merged


def device_from_args(options: dict[str, Any]) -> str:
    """The device the command prices: --device, or the one the cluster file names."""
    device = options.get("device")
    if device is None:
        raise SpecError("--device", "ndcost", "be given, or a --cluster file that names the device", None)
    return device


def _known(name: str) -> bool:
    from ..spec.device import Device

    try:
        Device.from_catalog(name)
    except SpecError:
        return False
    return True
