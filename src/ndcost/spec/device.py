"""The accelerator (`Device`) and the machine of many of them (`Cluster`).

A `Device` holds the figures the seconds mode prices with: dense peak FLOP/s
per dtype, HBM capacity and bandwidth, devices per node, and the per-device,
per-direction bandwidth and per-message latency of the scale-up link (NVLink,
HCCS, Unified Bus) and of the scale-out NIC. The catalog in
``data/devices/<name>.json`` holds real parts; each figure there carries the
source it was read from (``Device.sources``). Units are SI throughout: bytes,
bytes/s, FLOP/s, seconds (GB = 1e9, GiB = 2**30, as ARCHITECTURE.md "Units").

A `Cluster` is a device times a device count, with keyword overrides of any
device figure and the memory reserve that the memory model keeps back.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import operator
import os
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import SpecError, check_positive_int, check_positive_number
from ..limits import MAX_DEVICES, MAX_HBM_BYTES, MAX_LATENCY, MAX_RATE, MIN_RATE

__all__ = ["Device", "Cluster", "devices", "DEVICE_ALIASES", "ND_MEMORY_RESERVE_BYTES"]

# ND adds a flat 1 GiB "safety buffer" to every stage's dynamic memory
# (docs/ND_MODEL.md §3.7 and §8.6); a Cluster holds the same back by default.
ND_MEMORY_RESERVE_BYTES = 2**30

# Short names people type for a part, and ND's names for the Ascend parts
# (ND's device_map keys, docs/ND_MODEL.md §2.12). Matched case-insensitively.
DEVICE_ALIASES: Mapping[str, str] = MappingProxyType({
    "a100": "a100-80g",
    "h100": "h100-sxm",
    # NVIDIA's own runs name the GPU of an NVL72 rack "GB200" / "GB300" (MLPerf system descriptions).
    "gb200": "gb200-nvl72",
    "gb300": "gb300-nvl72",
    "a2": "ascend-910b",
    "a3": "ascend-910c",
})

# dtype spellings other tools use for the same formats; ND itself writes
# "bfloat16" (its fp_bytes("bfloat16"), docs/ND_MODEL.md §1.3).
_DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}

# The Device fields a catalog file states, each as {"value", "source"[, "note"]};
# "part" names the datasheet entry and becomes sources["name"].
_SCALAR_FIGURES = (
    "hbm_bytes",
    "hbm_bandwidth",
    "devices_per_node",
    "intra_node_bandwidth",
    "inter_node_bandwidth",
    "intra_node_latency",
    "inter_node_latency",
)
_OPTIONAL_FIGURES = ("nd_name", "nd_devices_per_node", "hbm_visible_bytes")
#: The dtypes a peak may be stated for: what the catalog's parts state and the precisions ndcost prices.
PEAK_DTYPES = ("bf16", "fp16", "fp8", "fp4", "tf32")
_CATALOG_KEYS = frozenset(("name", "part", "peak_flops") + _SCALAR_FIGURES + _OPTIONAL_FIGURES)
_FIGURE_KEYS = frozenset(("value", "source", "note"))
# The unit of each figure as the Device holds it (Device.describe).
_UNITS = {
    "hbm_bytes": "bytes",
    "hbm_bandwidth": "bytes/s",
    "devices_per_node": "devices",
    "intra_node_bandwidth": "bytes/s per direction",
    "inter_node_bandwidth": "bytes/s per direction",
    "intra_node_latency": "s",
    "inter_node_latency": "s",
    "nd_name": "",
    "nd_devices_per_node": "devices",
    "hbm_visible_bytes": "bytes",
}


def _read_only(mapping: Mapping) -> Mapping:
    """A read-only copy, so that neither the caller's dict nor ours can change the other."""
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Device:
    """One accelerator, as the cost model sees it.

    Attributes:
        name: Catalog name (``"h100-sxm"``) or any label for a hand-built part.
        peak_flops: Dense tensor peak in FLOP/s per dtype (``"bf16"``, ``"fp16"``,
            optionally ``"fp8"``, ``"tf32"``, ...); read-only, keys lower-case.
        hbm_bytes: HBM capacity in bytes, as the datasheet states it (its "GB" x 1e9).
        hbm_bandwidth: HBM bandwidth in bytes/s.
        devices_per_node: Devices that share the scale-up link: a "node" is the scale-up domain
            (8 on an HGX board; 72 on a GB200/GB300 NVL72 rack, whose 4-GPU trays share one
            NVLink Switch fabric), and every collective within it runs at the scale-up rate.
        intra_node_bandwidth: Scale-up bytes/s per device per direction
            (datasheets quote bidirectional totals; the catalog halves them).
        inter_node_bandwidth: Scale-out NIC bytes/s per device per direction.
        intra_node_latency: Seconds per message/step inside a node (0 turns it off).
        inter_node_latency: Seconds per message/step across nodes (0 turns it off).
        nd_name: ND's name for the part (``"A2"``, ``"A3"``) where ND knows it.
        nd_devices_per_node: ND's ``level_bound_number[0]`` (A2 8, A3 16); None
            means ``devices_per_node``. See `nd_node_size`.
        hbm_visible_bytes: The device memory the driver exposes to a process, bytes, where a source
            states it (CUDA's total, as PyTorch's out-of-memory message prints it, else nvidia-smi's);
            None means ``hbm_bytes``. A datasheet's "80 GB" is an 80 GiB part less what the driver
            keeps: CUDA gives an H100 SXM 79.11 GiB (84.9e9 bytes), not 80e9. What a strategy must
            fit in is `memory_bytes`.
        sources: Figure name (``"hbm_bytes"``, ``"peak_flops.bf16"``, ...) -> the
            text of its source; read-only.
    """

    name: str
    peak_flops: Mapping[str, float]
    hbm_bytes: float
    hbm_bandwidth: float
    devices_per_node: int
    intra_node_bandwidth: float
    inter_node_bandwidth: float
    # Defaults are assumptions of the order of NCCL's own tuning model
    # (NVIDIA/nccl src/graph/tuning.cc, commit 01afd20a: per-step ring latency
    # 0.47-3.4 us over NVLink, 2.7-9.6 us over the network, plus a 3.6-10 us
    # base per collective); ND's TIME path uses 1e-5 / 2e-5 s (docs/ND_MODEL.md §2.6).
    intra_node_latency: float = 5e-6
    inter_node_latency: float = 1e-5
    nd_name: str | None = None
    nd_devices_per_node: int | None = None
    hbm_visible_bytes: float | None = None
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        owner = "Device"
        if not isinstance(self.name, str) or not self.name.strip():
            raise SpecError("name", owner, "be a non-empty string", self.name)
        if not isinstance(self.peak_flops, Mapping) or not self.peak_flops:
            raise SpecError("peak_flops", owner, "be a non-empty mapping of dtype to FLOP/s", self.peak_flops)
        peaks: dict[str, float] = {}
        for dtype, flops in self.peak_flops.items():
            if not isinstance(dtype, str) or not dtype.strip():
                raise SpecError("peak_flops", owner, "have dtype names (non-empty strings) as keys", dtype)
            if dtype.strip().lower() not in PEAK_DTYPES:
                from ..suggest import did_you_mean

                raise SpecError(f"peak_flops.{dtype}", owner, f"name a dtype ndcost prices ({', '.join(PEAK_DTYPES)})"
                                f"{did_you_mean(dtype.strip().lower(), PEAK_DTYPES)}", flops)
            peaks[dtype.strip().lower()] = check_positive_number(flops, f"peak_flops.{dtype}", owner,
                                                                 minimum=MIN_RATE, maximum=MAX_RATE)
        if "bf16" not in peaks:     # seconds mode prices every 16-bit GEMM but fp16's at the bf16 peak
            raise SpecError("peak_flops.bf16", owner, "be stated (the peak bf16 work is priced at)", dict(peaks))
        object.__setattr__(self, "peak_flops", MappingProxyType(peaks))
        object.__setattr__(self, "hbm_bytes", check_positive_number(self.hbm_bytes, "hbm_bytes", owner,
                                                                    maximum=MAX_HBM_BYTES))
        if self.hbm_visible_bytes is not None:
            object.__setattr__(self, "hbm_visible_bytes", check_positive_number(
                self.hbm_visible_bytes, "hbm_visible_bytes", owner, maximum=MAX_HBM_BYTES))
        for name in ("hbm_bandwidth", "intra_node_bandwidth", "inter_node_bandwidth"):
            rate = check_positive_number(getattr(self, name), name, owner, minimum=MIN_RATE, maximum=MAX_RATE)
            object.__setattr__(self, name, rate)
        for name in ("intra_node_latency", "inter_node_latency"):
            latency = check_positive_number(getattr(self, name), name, owner, allow_zero=True, maximum=MAX_LATENCY)
            object.__setattr__(self, name, latency)
        check_positive_int(self.devices_per_node, "devices_per_node", owner, maximum=MAX_DEVICES)
        if self.nd_name is not None and (not isinstance(self.nd_name, str) or not self.nd_name.strip()):
            raise SpecError("nd_name", owner, "be None or a non-empty string", self.nd_name)
        if self.nd_devices_per_node is not None:
            check_positive_int(self.nd_devices_per_node, "nd_devices_per_node", owner, maximum=MAX_DEVICES)
        if not isinstance(self.sources, Mapping) or not all(
            isinstance(key, str) and isinstance(text, str) for key, text in self.sources.items()
        ):
            raise SpecError("sources", owner, "be a mapping of figure names to source texts", self.sources)
        object.__setattr__(self, "sources", _read_only(self.sources))

    def __hash__(self) -> int:
        # The mappings are read-only proxies (unhashable), so hash their items:
        # a Device can then key caches, as a frozen spec should.
        return hash((
            self.name,
            tuple(sorted(self.peak_flops.items())),
            self.hbm_bytes,
            self.hbm_bandwidth,
            self.devices_per_node,
            self.intra_node_bandwidth,
            self.inter_node_bandwidth,
            self.intra_node_latency,
            self.inter_node_latency,
            self.nd_name,
            self.nd_devices_per_node,
            self.hbm_visible_bytes,
        ))

    def __reduce__(self):
        # Proxies cannot be pickled or deep-copied; rebuild from plain dicts.
        state = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        state["peak_flops"] = dict(self.peak_flops)
        state["sources"] = dict(self.sources)
        return (_rebuild_device, (state,))

    @property
    def memory_bytes(self) -> float:
        """The memory a process on the device allocates from, bytes: `hbm_visible_bytes` where the catalog
        states it, else `hbm_bytes`. Memory estimates' ``capacity_bytes``; fixed costs come off it."""
        return self.hbm_bytes if self.hbm_visible_bytes is None else self.hbm_visible_bytes

    @property
    def nd_node_size(self) -> int:
        """Devices per node as ND counts them (``level_bound_number[0]``, docs/ND_MODEL.md §2.6)."""
        return self.devices_per_node if self.nd_devices_per_node is None else self.nd_devices_per_node

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for *dtype* (``"bf16"``, ``"fp16"``, ``"fp8"``, ``"tf32"``; also
        ``"bfloat16"``/``"float16"``), case-insensitive.

        Raises:
            SpecError: When the part states no peak for *dtype* (e.g. fp8 on an A100).
        """
        key = dtype.strip().lower() if isinstance(dtype, str) else dtype
        key = _DTYPE_ALIASES.get(key, key)
        flops = self.peak_flops.get(key) if isinstance(key, str) else None
        if flops is None:
            known = ", ".join(repr(d) for d in self.peak_flops)
            rule = f"be one of {known} (the dtypes it has a peak for)"
            raise SpecError("dtype", f"Device {self.name!r}", rule, dtype)
        return flops

    def describe(self) -> dict[str, dict[str, Any]]:
        """Every figure of the part with its unit and the source it was read from.

        ``{figure: {"value", "unit", "source"}}``, figures named as in `sources` (``"name"``,
        ``"peak_flops.bf16"``, ``"hbm_bytes"``, ...), values in SI units as the fields hold them;
        ``nd_name`` and ``nd_devices_per_node`` only where set. A figure with no recorded source
        (a hand-built Device) says ``"not stated"``.
        """
        figures: list[tuple[str, Any, str]] = [("name", self.name, "")]
        figures += [(f"peak_flops.{dtype}", flops, "FLOP/s") for dtype, flops in self.peak_flops.items()]
        figures += [(name, getattr(self, name), _UNITS[name]) for name in _SCALAR_FIGURES]
        figures += [(name, getattr(self, name), _UNITS[name]) for name in _OPTIONAL_FIGURES
                    if getattr(self, name) is not None]
        return {name: {"value": value, "unit": unit, "source": self.sources.get(name, "not stated")}
                for name, value, unit in figures}

    @classmethod
    def from_catalog(cls, name: str) -> "Device":
        """The catalog part *name* (or an alias: a100, h100, gb200, gb300, A2, A3), case-insensitive.

        Raises:
            SpecError: When *name* is neither a catalog name nor an alias.
        """
        return _catalog_device(_resolve_name(name, "name", "Device.from_catalog"))

    @classmethod
    def from_file(cls, path: "str | os.PathLike[str]") -> "Device":
        """A part described by a device file outside the package, in the catalog's format.

        The file is what ``data/devices/<name>.json`` holds: ``name``, ``part``, ``peak_flops``
        (one figure per dtype) and every scalar figure, each as ``{"value", "source"[, "note"]}``
        (CONTRIBUTING.md, "Add a device"). Its ``name`` labels the part and need not match the
        file's name; a name the catalog already uses is refused, so that a Cluster never prices
        a file's figures under a catalog part's name (and its default rates). Price it with
        ``Cluster(Device.from_file(path), n)``; its seconds-mode rates come from a rates file
        (``estimate(..., rates="rates.json")``, ``ndcost.save_rates``), else
        ``Rates.for_device`` gives the generic rates, each marked an assumption.

        Raises:
            SpecError: A missing or unreadable file, invalid JSON, an unknown key, a figure
                without its source, a catalog name, or a figure Device refuses.
        """
        from ..files import read_text

        where = os.fspath(path)
        device = _parse_device(read_text(path, "a device JSON file"), where)
        if _resolve_known(device.name) is not None:
            rule = "not be a catalog device or alias (name the part anew; Cluster keywords override a catalog part)"
            raise SpecError("name", where, rule, device.name)
        return device


def _rebuild_device(state: dict) -> Device:
    return Device(**state)


def devices() -> list[str]:
    """The catalog's device names, sorted."""
    return list(_catalog_names())


@functools.lru_cache(maxsize=None)
def _catalog_names() -> tuple[str, ...]:
    folder = resources.files("ndcost").joinpath("data", "devices")
    suffix = ".json"
    return tuple(sorted(entry.name[: -len(suffix)] for entry in folder.iterdir() if entry.name.endswith(suffix)))


def _resolve_known(name: Any) -> str | None:
    """The catalog name *name* spells (itself or an alias, any case), or None."""
    if isinstance(name, str):
        key = name.strip().lower()
        key = DEVICE_ALIASES.get(key, key)
        if key in _catalog_names():
            return key
    return None


def _resolve_name(name: Any, parameter: str, owner: str) -> str:
    key = _resolve_known(name)
    if key is not None:
        return key
    names = _catalog_names()
    from ..suggest import did_you_mean

    aliases = ", ".join(f"{alias} -> {target}" for alias, target in DEVICE_ALIASES.items())
    rule = f"be a catalog device ({', '.join(names)}) or an alias ({aliases}){did_you_mean(name, names)}"
    raise SpecError(parameter, owner, rule, name)


@functools.lru_cache(maxsize=None)
def _catalog_device(name: str) -> Device:
    # Parsed once per process: a Device is immutable, so every caller can share it.
    text = resources.files("ndcost").joinpath("data", "devices", f"{name}.json").read_text(encoding="utf-8")
    return _parse_device(text, f"data/devices/{name}.json", name)


def _parse_device(text: str, path: str, name: str | None = None) -> Device:
    """The Device a catalog-format document states; *path* names it in errors, *name* (a catalog
    file's) is the name the document must carry."""
    from ..files import parse_json

    doc = parse_json(text, "a device's catalog JSON", "content", owner=path)
    if not isinstance(doc, dict):
        raise SpecError("content", path, "be a JSON object", type(doc).__name__)
    unknown = sorted(set(doc) - _CATALOG_KEYS)
    if unknown:
        raise SpecError(unknown[0], path, f"be one of the catalog keys ({', '.join(sorted(_CATALOG_KEYS))})",
                        doc[unknown[0]])
    if name is not None and doc.get("name") != name:
        raise SpecError("name", path, f"equal the file's name ({name!r})", doc.get("name"))
    if not isinstance(doc.get("name"), str):
        raise SpecError("name", path, "be a string naming the part", doc.get("name"))
    sources: dict[str, str] = {}
    part = _figure(doc, "part", path, sources)
    sources["name"] = f"{part}: {sources.pop('part')}"
    peaks_doc = doc.get("peak_flops")
    if not isinstance(peaks_doc, dict) or not peaks_doc:
        raise SpecError("peak_flops", path, "be a non-empty object of dtype figures", peaks_doc)
    peaks = {dtype: _figure(peaks_doc, dtype, path, sources, prefix="peak_flops.") for dtype in peaks_doc}
    figures = {key: _figure(doc, key, path, sources) for key in _SCALAR_FIGURES}
    for key in _OPTIONAL_FIGURES:
        figures[key] = None if doc.get(key) is None else _figure(doc, key, path, sources)
    try:
        return Device(name=doc["name"], peak_flops=peaks, sources=sources, **figures)
    except SpecError as exc:  # a figure out of its bounds: name the file that states it
        raise SpecError(exc.parameter, path, exc.rule, exc.value) from None


def _figure(doc: dict, key: str, path: str, sources: dict, prefix: str = "") -> Any:
    """The value of one {"value", "source"[, "note"]} figure; records its source."""
    entry = doc.get(key)
    if not isinstance(entry, dict) or "value" not in entry or not isinstance(entry.get("source"), str):
        raise SpecError(prefix + key, path, 'be an object with "value" and "source"', entry)
    extra = sorted(set(entry) - _FIGURE_KEYS)
    if extra:
        raise SpecError(prefix + key, path, 'have only the keys "value", "source" and "note"', extra)
    # The note says how the value follows from the source (halved, per die, ...): keep it with it.
    note = entry.get("note")
    sources[prefix + key] = entry["source"] if note is None else f"{entry['source']} || note: {note}"
    return entry["value"]


# Device fields a Cluster keyword may replace: every one but the name, which
# identifies the catalog part (build a Device to name a new one).
_OVERRIDABLE = tuple(f.name for f in dataclasses.fields(Device) if f.name != "name")
_CLUSTER_KEYWORDS = _OVERRIDABLE + ("memory_reserve_bytes",)


@dataclass(frozen=True, init=False)
class Cluster:
    """*num_devices* copies of one device.

    ``Cluster("h100-sxm", 1024)``; ``Cluster("a100", 64, inter_node_bandwidth=12.5e9)``.
    Keyword overrides replace any `Device` field but ``name`` (``peak_flops``
    is replaced whole); ``memory_reserve_bytes`` (default 1 GiB, ND's safety
    buffer, docs/ND_MODEL.md §3.7) is the HBM the memory model keeps back.

    Attributes:
        device: The device, overrides applied (its ``sources`` name each override).
        num_devices: Devices in the cluster.
        memory_reserve_bytes: Bytes of HBM per device not given to the model.
    """

    device: Device
    num_devices: int
    memory_reserve_bytes: float

    def __init__(self, device: "str | Device", num_devices: int, **overrides: Any) -> None:
        owner = "Cluster"
        if isinstance(device, str):
            base = _catalog_device(_resolve_name(device, "device", owner))
        elif isinstance(device, Device):
            base = device
        else:
            raise SpecError("device", owner, "be a catalog device name or a Device", device)
        for key in overrides:
            if key == "name":
                rule = "not be overridden (it names the part; build a Device to rename it)"
                raise SpecError("name", owner, rule, overrides[key])
            if key not in _CLUSTER_KEYWORDS:
                rule = f"name Device fields or memory_reserve_bytes ({', '.join(_CLUSTER_KEYWORDS)})"
                raise SpecError("overrides", owner, rule, key)
        reserve = overrides.pop("memory_reserve_bytes", ND_MEMORY_RESERVE_BYTES)
        if "hbm_bytes" in overrides and "hbm_visible_bytes" not in overrides:
            # a stated capacity is the memory to fit in: the catalog part's driver figure no longer holds
            overrides["hbm_visible_bytes"] = None
        if overrides:
            overrides.setdefault("sources", _sources_after(base, overrides))
            # replace() builds a new Device, validated again; the catalog's one is untouched.
            base = dataclasses.replace(base, **overrides)
        if not isinstance(num_devices, (bool, int)) and hasattr(num_devices, "__index__"):
            num_devices = operator.index(num_devices)  # numpy integers from a search loop
        check_positive_int(num_devices, "num_devices", owner, maximum=MAX_DEVICES)
        per_node = base.devices_per_node
        if num_devices > per_node and num_devices % per_node:
            rule = f"be at most devices_per_node ({per_node}) or a multiple of it (whole nodes)"
            raise SpecError("num_devices", owner, rule, num_devices)
        reserve = check_positive_number(reserve, "memory_reserve_bytes", owner, allow_zero=True)
        if reserve >= base.memory_bytes:
            rule = f"be less than the device's HBM ({base.memory_bytes:g} bytes)"
            raise SpecError("memory_reserve_bytes", owner, rule, reserve)
        object.__setattr__(self, "device", base)
        object.__setattr__(self, "num_devices", num_devices)
        object.__setattr__(self, "memory_reserve_bytes", reserve)

    def __reduce__(self):
        return (_rebuild_cluster, (self.device, self.num_devices, self.memory_reserve_bytes))

    @property
    def num_nodes(self) -> int:
        """Nodes the devices occupy (a cluster within one node may fill it partly)."""
        return math.ceil(self.num_devices / self.device.devices_per_node)

    @property
    def usable_memory(self) -> float:
        """HBM bytes per device left for the model: the device's memory minus the reserve."""
        return self.device.memory_bytes - self.memory_reserve_bytes


def _sources_after(base: Device, overrides: Mapping[str, Any]) -> dict[str, str]:
    """*base*'s sources, with each overridden figure's source saying so."""
    override = "Cluster keyword override"
    sources = dict(base.sources)
    for key, value in overrides.items():
        if key == "peak_flops":
            # The table is replaced whole: its old sources go with it.
            for figure in [figure for figure in sources if figure.startswith("peak_flops.")]:
                del sources[figure]
            if isinstance(value, Mapping):
                sources.update({f"peak_flops.{str(dtype).strip().lower()}": override for dtype in value})
        elif value is None:
            sources.pop(key, None)      # an optional figure cleared: no source left to name
        elif key != "sources":
            sources[key] = override
    return sources


def _rebuild_cluster(device: Device, num_devices: int, reserve: float) -> Cluster:
    return Cluster(device, num_devices, memory_reserve_bytes=reserve)
