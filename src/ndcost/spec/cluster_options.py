"""The user's cluster, stated on the command line or in a file: one table of what a cluster states.

A catalog :class:`~ndcost.spec.device.Device` is a part as its vendor ships it; a cluster built of it
may differ: a GB200 NVL72 job placed in 64-GPU NVLink segments, hosts with 8 x 200 Gb/s NICs instead of
one 400 Gb/s NIC per GPU, a 96 GB H100 variant. :data:`CLUSTER_OPTIONS` names each such figure once:
``--devices-per-node 64`` on the command line, ``devices_per_node: 64`` in a ``--cluster FILE`` (a YAML
mapping that also names the ``device``) and in a runs file's ``hardware`` block. Each turns into a
``Cluster`` keyword (:func:`cluster_keywords`); every figure so set records where it came from in the
device's ``sources``.

A figure stated twice (a flag and the file, or the per-device scale-out rate and the NICs it follows
from) must agree; a device the catalog does not know is refused with the nearest name.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import SpecError

__all__ = ["ClusterOption", "CLUSTER_OPTIONS", "CLUSTER_KEYS", "read_cluster_file", "cluster_keywords",
           "merge_cluster_options", "make_cluster", "cluster_block"]


@dataclass(frozen=True)
class ClusterOption:
    """One figure of a cluster: its name (``--devices-per-node`` / ``devices_per_node:``), kind, help,
    and the scale from the user's unit to ndcost's (SI); ``cli``: also a command-line flag."""

    name: str
    kind: str          # "int" | "number" | "peaks"
    help: str
    scale: float = 1.0
    cli: bool = True
    seconds_only: bool = True       # ND's units price no link or HBM rate (only the node size and capacity)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


CLUSTER_OPTIONS: tuple[ClusterOption, ...] = (
    ClusterOption("devices_per_node", "int",
                  "devices on one scale-up (NVLink) domain, where every collective runs at the scale-up rate: 8 on "
                  "an HGX board, 72 on a GB200/GB300 NVL72 rack, 64 for a job in 64-GPU NVLink segments (default "
                  "the device's)", seconds_only=False),
    ClusterOption("scale_up_gb_s", "number",
                  "scale-up (NVLink) GB/s per device per direction (default the device's)", scale=1e9),
    ClusterOption("scale_out_gb_s", "number",
                  "scale-out (NIC) GB/s per device per direction (default the device's, or what --nics-per-host "
                  "gives)", scale=1e9),
    ClusterOption("devices_per_host", "int",
                  "devices per host (server or compute tray) that share its NICs; with --nics-per-host and "
                  "--nic-gbps (default: none stated)"),
    ClusterOption("nics_per_host", "int",
                  "scale-out NICs per host; with --devices-per-host and --nic-gbps (default: none stated)"),
    ClusterOption("nic_gbps", "number",
                  "each NIC's line rate, Gb/s per direction: scale-out per device = NICs x rate / 8 / devices per "
                  "host (default: none stated)", scale=1e9 / 8.0),
    ClusterOption("hbm_gb", "number",
                  "HBM per device the job can use, GB (1e9 bytes, as datasheets state it): a part variant (the "
                  "96 GB H100) or a cap (default the device's)", scale=1e9, seconds_only=False),
    ClusterOption("hbm_tb_s", "number", "HBM TB/s per device (default the device's)", scale=1e12, cli=False),
    ClusterOption("peak_tflops", "peaks", "dense peak TFLOP/s per dtype, e.g. {bf16: 912.5, fp8: 1825} (default the "
                  "device's)", scale=1e12, cli=False),
    ClusterOption("scale_up_latency_us", "number", "seconds per scale-up message, in microseconds (default the "
                  "device's)", scale=1e-6, cli=False),
    ClusterOption("scale_out_latency_us", "number", "seconds per scale-out message, in microseconds (default the "
                  "device's)", scale=1e-6, cli=False),
)
_BY_NAME = {option.name: option for option in CLUSTER_OPTIONS}
_NIC = ("devices_per_host", "nics_per_host", "nic_gbps")
#: The keys a cluster file or hardware block may hold: the options, the device, and free text.
CLUSTER_KEYS = ("device",) + tuple(_BY_NAME) + ("name", "source", "note")
#: Option -> the Device field it sets directly.
_DEVICE_FIELD = {"devices_per_node": "devices_per_node", "scale_up_gb_s": "intra_node_bandwidth",
                 "scale_out_gb_s": "inter_node_bandwidth", "hbm_gb": "hbm_bytes", "hbm_tb_s": "hbm_bandwidth",
                 "peak_tflops": "peak_flops", "scale_up_latency_us": "intra_node_latency",
                 "scale_out_latency_us": "inter_node_latency"}


def _checked(option: ClusterOption, value: Any, where: str, parameter: str) -> Any:
    if option.kind == "peaks":
        if not isinstance(value, Mapping) or not value:
            raise SpecError(parameter, where, "be a mapping of dtype to TFLOP/s", value)
        return {str(dtype): _checked(ClusterOption(option.name, "number", ""), flops, where, f"{parameter}.{dtype}")
                for dtype, flops in value.items()}
    if option.kind == "int":
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(parameter, where, "be an integer >= 1", value)
        return value
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SpecError(parameter, where, "be a finite number > 0", value)
    return float(value)


def cluster_block(block: Mapping, where: str) -> dict[str, Any]:
    """The options of a cluster block (a ``--cluster`` file, a runs file's hardware entry), checked:
    ``device`` (required) and the options it states."""
    if not isinstance(block, Mapping):
        raise SpecError("cluster", where, "be a mapping of device and cluster figures", type(block).__name__)
    unknown = [key for key in block if key not in CLUSTER_KEYS]
    if unknown:
        from ..suggest import did_you_mean

        raise SpecError(str(unknown[0]), where, f"be one of {', '.join(CLUSTER_KEYS)}"
                        f"{did_you_mean(str(unknown[0]), CLUSTER_KEYS)}", block[unknown[0]])
    device = block.get("device")
    if not isinstance(device, str) or not device.strip():
        raise SpecError("device", where, "name a catalog device (see `ndcost devices`)", device)
    out: dict[str, Any] = {"device": _in_file(device, where)}
    for key, value in block.items():
        if key in _BY_NAME:
            out[key] = _checked(_BY_NAME[key], value, where, key)
    return out


def _in_file(device: str, where: str) -> str:
    """The device name of a file, refused with the file named when the catalog does not know it."""
    from .device import Device

    try:
        return Device.from_catalog(device).name
    except SpecError as exc:
        raise SpecError("device", where, exc.rule, device) from None


def read_cluster_file(path: str | os.PathLike) -> dict[str, Any]:
    """A ``--cluster FILE``: a YAML (or JSON) mapping of ``device`` and cluster figures (:data:`CLUSTER_KEYS`)."""
    from ..files import read_mapping

    return cluster_block(read_mapping(path, "a cluster file (device, devices_per_node, nics_per_host, ...)", "cluster"),
                         os.fspath(path))


def merge_cluster_options(flags: Mapping[str, Any], file: Mapping[str, Any] | None, file_name: str = "",
                          owner: str = "ndcost") -> dict[str, Any]:
    """The options of the flags and of a cluster file together; a figure both state must agree."""
    merged = dict(file or {})
    for name, value in flags.items():
        if name in merged and merged[name] != value:
            flag = "--device" if name == "device" else _BY_NAME[name].flag
            raise SpecError(flag, owner, f"agree with the --cluster file {file_name}, which states {name} "
                            f"{merged[name]!r}", value)
        merged[name] = value
    return merged


def cluster_keywords(options: Mapping[str, Any], where: str = "ndcost") -> dict[str, Any]:
    """The ``Cluster`` keyword overrides the *options* state (SI units), each figure's source saying where."""
    nic = [name for name in _NIC if name in options]
    if nic and len(nic) != len(_NIC):
        missing = next(name for name in _NIC if name not in options)
        raise SpecError(_BY_NAME[missing].flag if where == "ndcost" else missing, where,
                        f"be stated with {', '.join(_BY_NAME[n].flag if where == 'ndcost' else n for n in nic)}",
                        None)
    if nic and "scale_out_gb_s" in options:
        raise SpecError(_BY_NAME["scale_out_gb_s"].flag if where == "ndcost" else "scale_out_gb_s", where,
                        "be given without the NICs it follows from (devices_per_host, nics_per_host, nic_gbps)",
                        options["scale_out_gb_s"])
    keywords: dict[str, Any] = {}
    for name, value in options.items():
        field = _DEVICE_FIELD.get(name)
        if field is None:
            continue
        scale = _BY_NAME[name].scale
        if isinstance(value, Mapping):
            keywords[field] = {dtype: flops * scale for dtype, flops in value.items()}
        else:
            keywords[field] = value * scale if scale != 1.0 else value
    if nic:
        keywords["inter_node_bandwidth"] = (options["nics_per_host"] * options["nic_gbps"] * _BY_NAME["nic_gbps"].scale
                                            / options["devices_per_host"])
    return keywords


def make_cluster(device: Any, num_devices: int, options: Mapping[str, Any], where: str = "ndcost"):
    """A Cluster of *num_devices* x *device* with the *options* applied; each stated figure's source says
    *where* it was stated."""
    from .device import Cluster, Device

    keywords = cluster_keywords(options, where)
    if not keywords:
        return Cluster(device, num_devices)
    base = Device.from_catalog(device) if isinstance(device, str) else device
    sources = dict(getattr(base, "sources", {}))
    for field in keywords:
        for key in list(sources):
            if field == "peak_flops" and key.startswith("peak_flops."):
                del sources[key]
        if field == "peak_flops":
            sources.update({f"peak_flops.{dtype}": f"stated: {where}" for dtype in keywords[field]})
        else:
            sources[field] = f"stated: {where}"
    return Cluster(device, num_devices, sources=sources, **keywords)
