"""Device and Cluster: the catalog's figures, aliases, overrides and bad input.

Expected figures are the datasheet values of catalog_facts/devices.yaml,
converted to SI: TFLOP/s x 1e12, GB x 1e9 (GiB x 2**30 where Huawei's profile
writes GiB), bidirectional link totals halved, NIC Gb/s / 8 x 1e9.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import pickle
import math
import re
from collections.abc import Mapping
from importlib import resources

import pytest

from ndcost.spec.device import DEVICE_ALIASES, ND_MEMORY_RESERVE_BYTES, Cluster, Device, devices
from ndcost.errors import SpecError

CATALOG = ["a100-40g", "a100-80g", "ascend-910b", "ascend-910c", "b200", "gb200-nvl72", "gb300-nvl72", "h100-sxm",
           "h200", "h800"]

GIB = 2**30

# name: (peak FLOP/s by dtype, HBM bytes, HBM B/s, devices/node, intra B/s/dir, inter B/s/dir, nd_name, nd node)
EXPECTED = {
    "a100-40g": ({"bf16": 312e12, "fp16": 312e12, "tf32": 156e12}, 40e9, 1.555e12, 8, 300e9, 25e9, None, 8),
    "a100-80g": ({"bf16": 312e12, "fp16": 312e12, "tf32": 156e12}, 80e9, 2.039e12, 8, 300e9, 25e9, None, 8),
    "h100-sxm": ({"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp8": 1978.9e12},
                 80e9, 3.35e12, 8, 450e9, 50e9, None, 8),
    "h200": ({"bf16": 989.5e12, "fp16": 989.5e12, "tf32": 494.5e12, "fp8": 1979e12},
             141e9, 4.8e12, 8, 450e9, 50e9, None, 8),
    "h800": ({"bf16": 989.43e12, "fp16": 989.43e12, "fp8": 1978.86e12}, 80e9, 3.35e12, 8, 200e9, 50e9, None, 8),
    "b200": ({"bf16": 2250e12, "fp16": 2250e12, "tf32": 1100e12, "fp8": 4500e12, "fp4": 9000e12},
             180e9, 8e12, 8, 900e9, 50e9, None, 8),
    # The NVL72 racks: per GPU, a node is the 72-GPU NVLink domain (not the 4-GPU tray); dense peaks from
    # NVIDIA's figures (GB200: Blackwell datasheet at 1,200 W; GB300: Blackwell Ultra), HBM as NVIDIA's
    # MLPerf systems state it (186 GB, 288 GB), NVLink 5 1800 GB/s halved, one ConnectX-7 400 Gb/s (GB200)
    # or ConnectX-8 800 Gb/s (GB300) NIC per GPU.
    "gb200-nvl72": ({"bf16": 2500e12, "fp16": 2500e12, "tf32": 1250e12, "fp8": 5000e12, "fp4": 10000e12},
                    186e9, 8e12, 72, 900e9, 50e9, None, 72),
    "gb300-nvl72": ({"bf16": 2500e12, "fp16": 2500e12, "tf32": 1250e12, "fp8": 5000e12, "fp4": 15000e12},
                    288e9, 8e12, 72, 900e9, 100e9, None, 72),
    "ascend-910b": ({"bf16": 353.9e12, "fp16": 376e12}, 64 * GIB, 1.6 * 2**40, 8, 196e9, 25e9, "A2", 8),
    "ascend-910c": ({"bf16": 353.9e12, "fp16": 376e12}, 64 * GIB, 1.6 * 2**40, 16, 196e9, 25e9, "A3", 16),
}

# The source key (catalog_facts/devices.yaml `sources:`) each device's bf16 peak must cite.
BF16_SOURCE_KEY = {
    "a100-40g": "nv_a100_datasheet",
    "a100-80g": "nv_a100_datasheet",
    "h100-sxm": "nv_hopper_whitepaper",
    "h200": "nv_h200_datasheet",
    "h800": "waredb_h800",
    "b200": "nv_blackwell_datasheet",
    "gb200-nvl72": "nv_blackwell_datasheet",
    "gb300-nvl72": "aiconfigurator_systems",
    "ascend-910b": "huawei_msmodeling",
    "ascend-910c": "huawei_msmodeling",
}

FIGURES = ("hbm_bytes", "hbm_bandwidth", "devices_per_node", "intra_node_bandwidth", "inter_node_bandwidth",
           "intra_node_latency", "inter_node_latency")


def snapshot(device):
    """Every field of *device* as plain data (asdict cannot copy the read-only mappings)."""
    return {f.name: dict(getattr(device, f.name)) if isinstance(getattr(device, f.name), Mapping)
            else getattr(device, f.name) for f in dataclasses.fields(device)}


def message(parameter, owner, rule, value):
    """The exact text SpecError gives, so that each test states the whole message."""
    return re.escape(f"The {parameter!r} parameter of {owner} must {rule}. Got {value!r} instead.")


def test_devices_lists_the_catalog_sorted():
    assert devices() == CATALOG
    files = sorted(p.name for p in resources.files("ndcost").joinpath("data", "devices").iterdir()
                   if p.name.endswith(".json"))
    assert files == [f"{name}.json" for name in CATALOG]


@pytest.mark.parametrize("name", CATALOG)
def test_catalog_device_figures_equal_the_datasheet(name):
    peaks, hbm, hbm_bw, per_node, intra, inter, nd_name, nd_node = EXPECTED[name]
    device = Device.from_catalog(name)
    assert device.name == name
    assert dict(device.peak_flops) == peaks
    for dtype, flops in peaks.items():
        assert device.peak(dtype) == flops
    assert device.hbm_bytes == hbm
    assert device.hbm_bandwidth == hbm_bw
    assert device.devices_per_node == per_node
    assert device.intra_node_bandwidth == intra
    assert device.inter_node_bandwidth == inter
    assert device.intra_node_latency == 5e-6
    assert device.inter_node_latency == 1e-5
    assert device.nd_name == nd_name
    assert device.nd_node_size == nd_node


@pytest.mark.parametrize("name", CATALOG)
def test_every_figure_has_a_source(name):
    device = Device.from_catalog(name)
    expected = {"name", *FIGURES, *(f"peak_flops.{dtype}" for dtype in device.peak_flops)}
    if device.nd_name is not None:
        expected |= {"nd_name", "nd_devices_per_node"}
    if device.hbm_visible_bytes is not None:
        expected |= {"hbm_visible_bytes"}
    assert set(device.sources) == expected
    assert all(text.strip() for text in device.sources.values())
    assert BF16_SOURCE_KEY[name] in device.sources["peak_flops.bf16"]


def test_h100_figures_cite_their_datasheets():
    sources = Device.from_catalog("h100-sxm").sources
    assert "nv_hopper_whitepaper" in sources["peak_flops.bf16"]
    assert "nv_h100_datasheet" in sources["hbm_bytes"]
    assert "nv_nvlink_page" in sources["intra_node_bandwidth"]
    assert "nv_dgx_h100" in sources["inter_node_bandwidth"]
    assert sources["name"].startswith("NVIDIA H100 SXM5 80GB")


def test_ascend_910c_is_priced_per_die_with_nd_figures_where_no_datasheet_exists():
    a3 = Device.from_catalog("ascend-910c")
    assert a3.devices_per_node == 16 and a3.nd_devices_per_node == 16 and a3.nd_name == "A3"
    assert a3.sources["inter_node_bandwidth"].startswith(
        "ND hardware map (assumption where no datasheet figure exists)")
    assert "per die" in a3.sources["peak_flops.bf16"]
    a2 = Device.from_catalog("ascend-910b")
    assert (a2.nd_name, a2.nd_devices_per_node, a2.nd_node_size) == ("A2", 8, 8)


def test_catalog_files_have_only_known_keys():
    allowed = {"name", "part", "peak_flops", *FIGURES, "nd_name", "nd_devices_per_node"}
    for name in CATALOG:
        text = resources.files("ndcost").joinpath("data", "devices", f"{name}.json").read_text(encoding="utf-8")
        doc = json.loads(text)
        assert set(doc) - {"hbm_visible_bytes"} == allowed
        assert doc["name"] == name


#: What CUDA (or, where no thread prints CUDA's, nvidia-smi) reports of each NVIDIA part, GiB, and a source it
#: cites; Ascend's 64 GiB is MindSpore's device memory as ND reads it (its profile), left as the datasheet's.
VISIBLE = {"a100-40g": (42298834944 / 2**30, "bottlerocket"), "a100-80g": (79.15, "vllm-project/vllm issue #4408"),
           "h100-sxm": (79.11, "vllm-project/vllm issue #27508"), "h800": (79.11, "H100 SXM's figure"),
           "h200": (143771 / 1024, "sgl-project/sglang issue #3196"), "b200": (178.35, "unslothai/unsloth issue #3411"),
           "gb200-nvl72": (184.31, "vllm-project/vllm issue #43951"), "gb300-nvl72": (284208 / 1024, "284208 MiB")}


@pytest.mark.parametrize("name", CATALOG)
def test_a_part_fits_what_its_driver_exposes(name):
    """A datasheet's "80 GB" is not what a process gets: an H100 SXM exposes 79.11 GiB (85.0e9 bytes, more than
    80e9), an A100 40GB 39.4 GiB (less than 40 GiB). Memory estimates fit in memory_bytes."""
    device = Device.from_catalog(name)
    if name.startswith("ascend"):
        assert device.hbm_visible_bytes is None and device.memory_bytes == device.hbm_bytes
        return
    gib, source = VISIBLE[name]
    assert device.memory_bytes == device.hbm_visible_bytes == pytest.approx(gib * 2**30, abs=2**20)
    assert source in device.sources["hbm_visible_bytes"]
    assert 0.95 < device.memory_bytes / device.hbm_bytes < 1.1      # the same part, counted by its driver
    # a stated capacity replaces the part's: the driver's figure of the catalog part no longer holds
    stated = Cluster(name, 1, hbm_bytes=96e9).device
    assert stated.hbm_visible_bytes is None and stated.memory_bytes == 96e9
    assert "hbm_visible_bytes" not in stated.sources


@pytest.mark.parametrize(
    ("alias", "name"),
    [("a100", "a100-80g"), ("A100", "a100-80g"), ("h100", "h100-sxm"), ("H100", "h100-sxm"),
     ("A2", "ascend-910b"), ("a2", "ascend-910b"), ("A3", "ascend-910c"), (" H100-SXM ", "h100-sxm"),
     ("B200", "b200"), ("GB200", "gb200-nvl72"), ("gb300", "gb300-nvl72")],
)
def test_aliases_and_names_are_case_insensitive(alias, name):
    assert Device.from_catalog(alias) is Device.from_catalog(name)
    assert Cluster(alias, 8).device is Device.from_catalog(name)


def test_alias_table():
    assert dict(DEVICE_ALIASES) == {"a100": "a100-80g", "h100": "h100-sxm", "gb200": "gb200-nvl72",
                                    "gb300": "gb300-nvl72", "a2": "ascend-910b", "a3": "ascend-910c"}


def test_peak_accepts_dtype_spellings():
    h100 = Device.from_catalog("h100")
    assert h100.peak("BF16") == h100.peak("bfloat16") == 989.4e12
    assert h100.peak("float16") == 989.4e12
    assert h100.peak("fp8") == 1978.9e12


def test_device_is_frozen_and_read_only():
    device = Device.from_catalog("h100")
    with pytest.raises(dataclasses.FrozenInstanceError):
        device.hbm_bytes = 1.0
    with pytest.raises(TypeError):
        device.peak_flops["bf16"] = 1.0
    with pytest.raises(TypeError):
        device.sources["hbm_bytes"] = "x"


def test_hand_built_device_defaults_and_inputs_not_mutated():
    peaks = {"BF16": 100e12}
    sources = {"hbm_bytes": "a measurement"}
    device = Device("lab-part", peaks, 16e9, 1e12, 4, 100e9, 12.5e9, sources=sources)
    assert peaks == {"BF16": 100e12} and sources == {"hbm_bytes": "a measurement"}
    peaks["BF16"] = 1.0
    sources["x"] = "y"
    assert dict(device.peak_flops) == {"bf16": 100e12}
    assert dict(device.sources) == {"hbm_bytes": "a measurement"}
    assert (device.intra_node_latency, device.inter_node_latency) == (5e-6, 1e-5)
    assert device.nd_name is None and device.nd_node_size == 4
    assert isinstance(device.hbm_bytes, float)


def test_device_pickles_copies_and_hashes():
    device = Device.from_catalog("ascend-910c")
    assert pickle.loads(pickle.dumps(device)) == device
    assert copy.deepcopy(device) == device
    assert hash(copy.deepcopy(device)) == hash(device)
    cluster = Cluster("h100", 16, intra_node_bandwidth=100e9)
    assert pickle.loads(pickle.dumps(cluster)) == cluster
    assert hash(pickle.loads(pickle.dumps(cluster))) == hash(cluster)


def test_cluster_basics():
    cluster = Cluster("h100-sxm", num_devices=1024)
    assert cluster.device is Device.from_catalog("h100-sxm")
    assert cluster.num_devices == 1024
    assert cluster.num_nodes == 128
    assert cluster.memory_reserve_bytes == ND_MEMORY_RESERVE_BYTES == 2**30
    # what CUDA reports of an H100 SXM (PyTorch's "total capacity of 79.11 GiB"), not the datasheet's 80e9
    assert cluster.device.memory_bytes == cluster.device.hbm_visible_bytes == round(79.11 * 2**30)
    assert cluster.usable_memory == round(79.11 * 2**30) - 2**30
    a3 = Cluster("A3", 64)
    assert a3.num_nodes == 4  # 16 dies a node


def test_numpy_integer_device_count():
    np = pytest.importorskip("numpy")
    cluster = Cluster("h100", np.int64(16))
    assert cluster.num_devices == 16 and type(cluster.num_devices) is int


def test_partial_node_only_within_one_node():
    assert Cluster("h100", 1).num_nodes == 1
    assert Cluster("h100", 3).num_nodes == 1
    assert Cluster("h100", 8).num_nodes == 1
    assert Cluster("h100", 16).num_nodes == 2


def test_overrides_apply_and_leave_the_catalog_alone():
    catalog = Device.from_catalog("a100-80g")
    before = snapshot(catalog)
    cluster = Cluster("a100", 32, intra_node_bandwidth=150e9, hbm_bytes=40e9, devices_per_node=4,
                      memory_reserve_bytes=0)
    device = cluster.device
    assert (device.intra_node_bandwidth, device.hbm_bytes, device.devices_per_node) == (150e9, 40e9, 4)
    assert device.name == "a100-80g"
    assert device.inter_node_bandwidth == catalog.inter_node_bandwidth
    assert cluster.num_nodes == 8
    assert cluster.usable_memory == 40e9
    assert device.sources["intra_node_bandwidth"] == "Cluster keyword override"
    assert device.sources["inter_node_bandwidth"] == catalog.sources["inter_node_bandwidth"]
    assert Device.from_catalog("a100-80g") is catalog
    assert snapshot(catalog) == before


def test_peak_flops_override_replaces_the_table():
    flops = {"bf16": 280e12, "fp8": 560e12}
    cluster = Cluster("a100", 8, peak_flops=flops)
    assert cluster.device.peak("fp8") == 560e12
    assert set(cluster.device.peak_flops) == {"bf16", "fp8"}
    assert cluster.device.sources["peak_flops.fp8"] == "Cluster keyword override"
    assert "peak_flops.tf32" not in cluster.device.sources
    assert flops == {"bf16": 280e12, "fp8": 560e12}


def test_cluster_takes_a_device():
    device = Device("lab-part", {"bf16": 1e14}, 16e9, 1e12, 4, 100e9, 12.5e9)
    assert Cluster(device, 12).device is device
    assert Cluster(device, 12, nd_name="A2").device.nd_name == "A2"


CATALOG_RULE = ("be a catalog device (a100-40g, a100-80g, ascend-910b, ascend-910c, b200, gb200-nvl72, gb300-nvl72, "
                "h100-sxm, h200, h800) or an alias (a100 -> a100-80g, h100 -> h100-sxm, gb200 -> gb200-nvl72, "
                "gb300 -> gb300-nvl72, a2 -> ascend-910b, a3 -> ascend-910c)")
KEYWORDS = ("peak_flops, hbm_bytes, hbm_bandwidth, devices_per_node, intra_node_bandwidth, inter_node_bandwidth, "
            "intra_node_latency, inter_node_latency, nd_name, nd_devices_per_node, hbm_visible_bytes, sources, "
            "memory_reserve_bytes")


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda: Device.from_catalog("v100"), message("name", "Device.from_catalog", CATALOG_RULE, "v100")),
        (lambda: Cluster("tpu-v5", 8), message("device", "Cluster", CATALOG_RULE, "tpu-v5")),
        (lambda: Cluster(3, 8), message("device", "Cluster", "be a catalog device name or a Device", 3)),
        (lambda: Cluster("h100", 8, nvlink_bandwidth=1e9),
         message("overrides", "Cluster", f"name Device fields or memory_reserve_bytes ({KEYWORDS})",
                 "nvlink_bandwidth")),
        (lambda: Cluster("h100", 8, name="h100-custom"),
         message("name", "Cluster", "not be overridden (it names the part; build a Device to rename it)",
                 "h100-custom")),
        (lambda: Cluster("h100", 0), message("num_devices", "Cluster", "be an integer >= 1", 0)),
        (lambda: Cluster("h100", 8.0), message("num_devices", "Cluster", "be an integer >= 1", 8.0)),
        (lambda: Cluster("h100", True), message("num_devices", "Cluster", "be an integer >= 1", True)),
        (lambda: Cluster("h100", 12),
         message("num_devices", "Cluster", "be at most devices_per_node (8) or a multiple of it (whole nodes)", 12)),
        (lambda: Cluster("gb200-nvl72", 128),
         message("num_devices", "Cluster", "be at most devices_per_node (72) or a multiple of it (whole nodes)", 128)),
        (lambda: Cluster("A3", 24),
         message("num_devices", "Cluster", "be at most devices_per_node (16) or a multiple of it (whole nodes)", 24)),
        (lambda: Cluster("h100", 8, memory_reserve_bytes=-1),
         message("memory_reserve_bytes", "Cluster", "be a finite number >= 0", -1)),
        (lambda: Cluster("h100", 8, memory_reserve_bytes=85e9),
         message("memory_reserve_bytes", "Cluster", "be less than the device's HBM (8.49437e+10 bytes)", 85e9)),
        (lambda: Cluster("h100", 8, hbm_bytes=80e9, memory_reserve_bytes=80e9),
         message("memory_reserve_bytes", "Cluster", "be less than the device's HBM (8e+10 bytes)", 80e9)),
        (lambda: Cluster("h100", 8, hbm_visible_bytes=-1.0),
         message("hbm_visible_bytes", "Device", "be a finite number > 0", -1.0)),
        (lambda: Cluster("h100", 8, hbm_bytes=0), message("hbm_bytes", "Device", "be a finite number > 0", 0)),
        (lambda: Cluster("h100", 8, inter_node_bandwidth=-50e9),
         message("inter_node_bandwidth", "Device", "be a finite number > 0", -50e9)),
        (lambda: Cluster("h100", 8, intra_node_latency=float("nan")),
         message("intra_node_latency", "Device", "be a finite number >= 0", float("nan"))),
        (lambda: Cluster("h100", 8, devices_per_node=0),
         message("devices_per_node", "Device", "be an integer >= 1", 0)),
        (lambda: Device("x", {"bf16": -1.0}, 1e9, 1e9, 8, 1e9, 1e9),
         message("peak_flops.bf16", "Device", "be a finite number > 0", -1.0)),
        (lambda: Device("x", {}, 1e9, 1e9, 8, 1e9, 1e9),
         message("peak_flops", "Device", "be a non-empty mapping of dtype to FLOP/s", {})),
        (lambda: Device("", {"bf16": 1e12}, 1e9, 1e9, 8, 1e9, 1e9),
         message("name", "Device", "be a non-empty string", "")),
        (lambda: Device("x", {"bf16": 1e12}, 1e9, 1e9, 8, 1e9, 1e9, nd_devices_per_node=0),
         message("nd_devices_per_node", "Device", "be an integer >= 1", 0)),
        (lambda: Device.from_catalog("a100").peak("fp8"),
         message("dtype", "Device 'a100-80g'", "be one of 'bf16', 'fp16', 'tf32' (the dtypes it has a peak for)",
                 "fp8")),
        (lambda: Device.from_catalog("h800").peak("tf32"),
         message("dtype", "Device 'h800'", "be one of 'bf16', 'fp16', 'fp8' (the dtypes it has a peak for)", "tf32")),
    ],
)
def test_bad_input_messages(build, expected):
    with pytest.raises(SpecError, match=f"^{expected}$"):
        build()


def test_spec_error_is_a_value_error_with_fields():
    with pytest.raises(ValueError) as info:
        Cluster("h100", 12)
    assert (info.value.parameter, info.value.owner, info.value.value) == ("num_devices", "Cluster", 12)


# ----------------------------------------------------------------------------- the NVL72 racks


def test_nvl72_figures_cite_nvidias_own_systems():
    for name, system, nic in (("gb200-nvl72", "Tyche (1x NVIDIA GB200 NVL72)", "4x ConnectX-7 IB NDR 400 Gb/s"),
                              ("gb300-nvl72", "Theia (1x NVIDIA GB300 NVL72)", "4x ConnectX-8 IB XDR 800 Gb/s")):
        sources = Device.from_catalog(name).sources
        # The node is the NVLink domain of NVIDIA's MLPerf system: 18 nodes of 4 GPUs on NVLink Switch.
        assert system in sources["devices_per_node"] and "number_of_nodes 18" in sources["devices_per_node"]
        assert "NVLink domain, not the 4-GPU compute tray" in sources["devices_per_node"]
        assert nic in sources["inter_node_bandwidth"]
        assert "NVLINK Gen5 1800 GB/s" in sources["intra_node_bandwidth"]
        assert "GB200-NVL72_GB200-186GB" in Device.from_catalog("gb200-nvl72").sources["hbm_bytes"]
        assert "GB300-NVL72_GB300-288GB" in Device.from_catalog("gb300-nvl72").sources["hbm_bytes"]


def test_describe_lists_every_figure_with_its_unit_and_source():
    device = Device.from_catalog("gb300")
    card = device.describe()
    assert set(card) == set(device.sources)
    assert card["peak_flops.fp4"] == {"value": 15000e12, "unit": "FLOP/s", "source": device.sources["peak_flops.fp4"]}
    assert card["devices_per_node"]["value"] == 72 and card["devices_per_node"]["unit"] == "devices"
    assert card["inter_node_bandwidth"]["unit"] == "bytes/s per direction"
    assert card["name"]["value"] == "gb300-nvl72"
    assert Device.from_catalog("A3").describe()["nd_name"]["value"] == "A3"
    hand = Device("lab-part", {"bf16": 1e14}, 16e9, 1e12, 4, 100e9, 12.5e9).describe()
    assert hand["hbm_bytes"] == {"value": 16e9, "unit": "bytes", "source": "not stated"}
    assert "nd_name" not in hand


def test_an_ep64_all_to_all_stays_on_nvlink_in_an_nvl72_domain(kernels):
    from ndcost.spec.rates import Rates
    from ndcost.tables.seconds import rates_vector

    moved, a2a = 1e9, 2
    rack = rates_vector(Cluster("gb200-nvl72", 72), Rates.for_device("gb200-nvl72"), "bf16")
    # all 64 ranks inside the 72-GPU domain: the pairwise exchange runs at NVLink's 900 GB/s only, at the share
    # an NCCL all-to-all reaches (B200's 8-GPU alltoall_perf: 583 GB/s, ndcost.spec.all_to_all_rates)
    share = 583.0 / 900.0
    assert kernels.seconds_collective(a2a, moved, 64.0, 1.0, rack) == pytest.approx(
        63 / 64 * moved / (900e9 * share) + 63 * 5e-6)
    # a group of 72 at stride 1 still fits the domain; at stride 2 it spans two racks and takes the NIC
    assert kernels.seconds_collective(a2a, moved, 72.0, 1.0, rack) == pytest.approx(
        71 / 72 * moved / (900e9 * share) + 71 * 5e-6)
    assert kernels.seconds_collective(a2a, moved, 72.0, 2.0, rack) == pytest.approx(
        36 / 72 * moved / (50e9 * 0.9) + 36 * 1e-5)
    # on 8-GPU H100 nodes the same group puts 56 of its 64 peers behind the NIC (50 GB/s x 0.9)
    hgx = rates_vector(Cluster("h100-sxm", 64), Rates.for_device("h100-sxm"), "bf16")
    assert kernels.seconds_collective(a2a, moved, 64.0, 1.0, hgx) == pytest.approx(
        56 / 64 * moved / (50e9 * 0.9) + 56 * 1e-5)


def test_an_expert_parallel_step_on_gb200_crosses_no_nic():
    from ndcost import ExecSpec, Model, estimate

    model = Model.from_catalog("qwen3-30b-a3b")  # 128 experts
    spec = ExecSpec(dp=64, ep=64, global_batch_size=256, seq_length=4096)

    def parts(device, devices, **overrides):
        return estimate(model, spec.replace(dp=devices), Cluster(device, devices, **overrides)).parts

    # 64 GPUs of one NVL72 rack: a NIC 50x slower changes nothing, neither the EP all-to-all nor DP
    assert parts("gb200-nvl72", 64) == parts("gb200-nvl72", 64, inter_node_bandwidth=1e9)
    # 64 H100 are 8 nodes: the same strategy's all-to-all and gradient reduction take the NIC
    fast, slow = parts("h100-sxm", 64), parts("h100-sxm", 64, inter_node_bandwidth=1e9)
    assert slow["ep_comm"] > 10 * fast["ep_comm"] and slow["dp_comm"] > fast["dp_comm"]
    # 128 GPUs placed as two NVLink segments of 64 (the documented override): EP stays on NVLink,
    # the data-parallel reduction across the segments takes the NIC
    fast, slow = parts("gb200", 128, devices_per_node=64), parts("gb200", 128, devices_per_node=64,
                                                                  inter_node_bandwidth=1e9)
    assert slow["ep_comm"] == fast["ep_comm"] > 0.0
    assert slow["dp_comm"] > 10 * fast["dp_comm"]


def test_nvl72_rules_read_the_domain_not_eight():
    from ndcost import ExecSpec, Model
    from ndcost.tables.joint_rules import validate

    model = Model.from_catalog("gpt3-175b")  # 96 heads, no GQA: tp 16 and 24 divide them
    # The search's rule (tp within a node): tp 16 or 24 spans several 4-GPU trays but stays inside the
    # NVLink domain
    strict = dict(allow_cross_node_tp=False)
    validate(model, ExecSpec(dp=4, tp=16, global_batch_size=64, seq_length=2048), Cluster("gb200-nvl72", 64), **strict)
    validate(model, ExecSpec(dp=3, tp=24, pp=2, global_batch_size=48, seq_length=2048), Cluster("gb300", 144), **strict)
    # on 8-GPU nodes the same tp crosses the node
    with pytest.raises(SpecError, match=re.escape("be at most devices_per_node (8) unless allow_cross_node_tp")):
        validate(model, ExecSpec(dp=4, tp=16, global_batch_size=64, seq_length=2048), Cluster("h100-sxm", 64),
                 **strict)
    assert Cluster("gb200-nvl72", 144).num_nodes == 2 and Cluster("gb300", 36).num_nodes == 1


# ----------------------------------------------------------------------------- H800 in fp8


def test_deepseek_v3_prices_on_its_own_2048_h800_in_fp8():
    """DeepSeek-V3's pre-training setup (DeepSeek-V3 report, arXiv 2412.19437, §3.1-3.3 and §4.2): 2,048 H800,
    16-way PP with DualPipe, 64-way EP over 8 nodes, ZeRO-1 DP, no TP, FP8 GEMMs, RMSNorm and MLA
    up-projections recomputed, batch 15,360 sequences of 4K tokens."""
    from ndcost import ExecSpec, Model, estimate

    spec = ExecSpec(dp=128, tp=1, pp=16, vpp=2, ep=64, pp_schedule="zero_bubble_v", zero_stage=1,
                    micro_batch_size=1, global_batch_size=15360, seq_length=4096, precision="fp8",
                    recompute="selective", selective_switches={"normOp": 0, "attUp": 0})
    result = estimate(Model.from_catalog("deepseek-v3"), spec, Cluster("h800", num_devices=2048))
    assert math.isfinite(result.step_time) and result.step_time > 0.0
    assert all(math.isfinite(part) for part in result.parts.values())
    assert result.parts["ep_comm"] > 0.0 and result.parts["tp_comm"] == 0.0
    assert 0.0 < result.mfu <= result.hfu <= 1.0
    # The memory model puts the peak stage over the H800's 80 GB (112.7 GiB when written): priced, not fitting.
    assert math.isfinite(result.memory.peak) and result.memory.peak > 0.0
    # The same run in bf16 is slower: the fp8 peak is the one the GEMMs ran at.
    bf16 = estimate(Model.from_catalog("deepseek-v3"), spec.replace(precision="bf16"), Cluster("h800", 2048))
    assert bf16.parts["fw_compute"] > result.parts["fw_compute"]
