"""CONTRIBUTING.md's "Add a device", followed outside the package: a device file and its rates file in a
temporary directory, loaded with `Device.from_file` and `load_rates`, priced in both units.

The part is the catalog's H100 SXM written out under another name (a lab's own label for the same
silicon), so the price it must get is known: the catalog part's, figure for figure. A second part with
twice the HBM bandwidth and peak shows that the file's figures, not the catalog's, are priced; the rates
file shows the same for rates. Bad files are one SpecError each, naming the file and the figure.
"""
from __future__ import annotations

import json
import math
from importlib import resources

import pytest

import ndcost
from ndcost import Cluster, Device, ExecSpec, SpecError, _backend
from ndcost.spec.rates import DEFAULT_RATES, Rates

MODEL = ndcost.Model.from_catalog("llama3-8b")
SPEC = ExecSpec(dp=2, tp=2, pp=2, global_batch_size=64, seq_length=4096)


def catalog_document(name: str) -> dict:
    """A catalog device's JSON document (what data/devices/<name>.json holds)."""
    text = resources.files("ndcost").joinpath("data", "devices", f"{name}.json").read_text(encoding="utf-8")
    return json.loads(text)


def write_device(folder, document: dict, file_name: str = "lab-gpu.json"):
    path = folder / file_name
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    return path


@pytest.fixture
def lab_h100(tmp_path):
    """The H100 SXM's catalog figures as a device file named 'lab-h100', with its rates file."""
    document = catalog_document("h100-sxm")
    document["name"] = "lab-h100"
    device_path = write_device(tmp_path, document)
    rates_path = tmp_path / "lab-h100-rates.json"
    ndcost.save_rates(DEFAULT_RATES["h100-sxm"], rates_path, device="lab-h100")
    return device_path, rates_path


def test_a_device_file_prices_as_the_catalog_part_it_copies(lab_h100, backend_name):
    device_path, rates_path = lab_h100
    device = Device.from_file(device_path)
    assert device.name == "lab-h100"
    catalog = Device.from_catalog("h100-sxm")
    assert dict(device.peak_flops) == dict(catalog.peak_flops) and device.hbm_bytes == catalog.hbm_bytes
    assert device.sources["hbm_bytes"] == catalog.sources["hbm_bytes"]  # each figure keeps its source

    with _backend.use(backend_name):
        for units in ("seconds", "nd"):
            rates = {"rates": str(rates_path)} if units == "seconds" else {}
            mine = ndcost.estimate(MODEL, SPEC, Cluster(device, 8), units=units, **rates)
            reference = ndcost.estimate(MODEL, SPEC, Cluster("h100-sxm", 8), units=units)
            assert mine.step_time == reference.step_time and mine.step_time > 0
            assert mine.memory.peak == reference.memory.peak


def test_the_file_figures_and_the_rates_file_are_what_is_priced(tmp_path, lab_h100):
    device_path, rates_path = lab_h100
    base = ndcost.estimate(MODEL, SPEC, Cluster(Device.from_file(device_path), 8), rates=str(rates_path))

    faster = catalog_document("h100-sxm")
    faster["name"] = "lab-h100-2x"
    faster["hbm_bandwidth"]["value"] *= 2
    for figure in faster["peak_flops"].values():
        figure["value"] *= 2
    fast_device = Device.from_file(write_device(tmp_path, faster, "lab-h100-2x.json"))
    fast_rates = tmp_path / "fast-rates.json"
    ndcost.save_rates(DEFAULT_RATES["h100-sxm"], fast_rates, device="lab-h100-2x")
    fast = ndcost.estimate(MODEL, SPEC, Cluster(fast_device, 8), rates=str(fast_rates))
    assert fast.step_time < base.step_time
    assert math.isclose(fast.parts["fw_compute"], base.parts["fw_compute"] / 2, rel_tol=0.05)

    # The rates file is read: a GEMM share halved makes the step slower.
    slow_rates = tmp_path / "slow-rates.json"
    h100 = DEFAULT_RATES["h100-sxm"]
    ndcost.save_rates(h100.replace(matmul_efficiency=h100.matmul_efficiency / 2), slow_rates, device="lab-h100")
    slow = ndcost.estimate(MODEL, SPEC, Cluster(Device.from_file(device_path), 8), rates=str(slow_rates))
    assert slow.step_time > base.step_time


def test_without_a_rates_file_the_generic_rates_say_they_are_an_assumption(lab_h100):
    device = Device.from_file(lab_h100[0])
    rates = Rates.for_device(device)
    assert all(text.startswith("assumption for an uncatalogued part") for text in rates.sources.values())


def test_a_rates_file_written_for_another_part_is_refused(lab_h100):
    device_path, rates_path = lab_h100
    cluster = Cluster(Device.from_file(device_path), 8)
    other = rates_path.with_name("other.json")
    ndcost.save_rates(DEFAULT_RATES["h100-sxm"], other, device="h100-sxm")
    with pytest.raises(SpecError, match=r"'device' parameter .* must be the device priced \(lab-h100\)"):
        ndcost.estimate(MODEL, SPEC, cluster, rates=str(other))


def _broken(document: dict, change) -> dict:
    change(document)
    return document


BAD_FILES = [
    ("not JSON", lambda folder: folder.joinpath("x.json").write_text("{", encoding="utf-8"), r"'content'.*valid JSON"),
    ("a list", lambda folder: folder.joinpath("x.json").write_text("[]", encoding="utf-8"), r"'content'.*JSON object"),
    ("an unknown key", lambda folder: write_device(folder, _broken(_lab(), lambda d: d.update(tdp={"value": 700})),
                                                   "x.json"), r"'tdp'.*catalog keys"),
    ("a figure without its source", lambda folder: write_device(
        folder, _broken(_lab(), lambda d: d["hbm_bytes"].pop("source")), "x.json"), r"'hbm_bytes'.*\"source\""),
    ("a figure out of bounds", lambda folder: write_device(
        folder, _broken(_lab(), lambda d: d["hbm_bandwidth"].update(value=-1.0)), "x.json"), r"'hbm_bandwidth'"),
    ("a catalog name", lambda folder: write_device(
        folder, _broken(_lab(), lambda d: d.update(name="H100")), "x.json"), r"'name'.*not be a catalog device"),
    ("no name", lambda folder: write_device(folder, _broken(_lab(), lambda d: d.pop("name")), "x.json"),
     r"'name'.*be a string"),
]


def _lab() -> dict:
    document = catalog_document("h100-sxm")
    document["name"] = "lab-gpu"
    return document


@pytest.mark.parametrize("label, write, message", BAD_FILES, ids=[case[0] for case in BAD_FILES])
def test_a_bad_device_file_is_one_spec_error_naming_the_file(tmp_path, label, write, message):
    write(tmp_path)
    path = tmp_path / "x.json"
    with pytest.raises(SpecError, match=message) as caught:
        Device.from_file(path)
    assert caught.value.owner == str(path), label


def test_a_missing_device_file_or_a_directory_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="existing file"):
        Device.from_file(tmp_path / "missing.json")
    with pytest.raises(SpecError, match="not a directory"):
        Device.from_file(tmp_path)
