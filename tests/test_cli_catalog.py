"""The catalog commands, end to end in a subprocess."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run(*args, check=True):
    return subprocess.run([sys.executable, "-m", "ndcost.cli.main", *args], capture_output=True, text=True, check=check)


def test_models_lists_the_catalog():
    out = run("models").stdout
    for name in ("llama3-70b", "deepseek-v3", "qwen3-next-80b-a3b", "gpt3-175b"):
        assert name in out


def test_devices_json():
    rows = json.loads(run("devices", "--json").stdout)
    assert {row["device"] for row in rows} >= {"a100-80g", "h100-sxm", "ascend-910b", "gb200-nvl72", "gb300-nvl72"}
    # every row carries the source of every figure it lists
    for row in rows:
        assert {"peak_flops.bf16", "hbm_bytes", "hbm_bandwidth", "devices_per_node", "intra_node_bandwidth",
                "inter_node_bandwidth"} <= set(row["sources"]), row["device"]
        assert all(text.strip() for text in row["sources"].values())
    gb200 = next(row for row in rows if row["device"] == "gb200-nvl72")
    assert gb200["per node"] == 72 and "Tyche (1x NVIDIA GB200 NVL72)" in gb200["sources"]["devices_per_node"]


def test_devices_table_stays_compact():
    lines = run("devices").stdout.splitlines()
    assert lines[0].split() == ["device", "bf16", "TFLOP/s", "HBM", "GiB", "HBM", "TB/s", "per", "node", "intra",
                                "GB/s", "inter", "GB/s", "validation", "rows", "step-time", "MAE", "(signed)"]
    gb300 = next(line for line in lines if line.startswith("gb300-nvl72"))
    assert gb300.split()[:7] == ["gb300-nvl72", "2500.0", "277.5", "8.00", "72", "900", "100.0"]
    assert max(len(line) for line in lines[:-1]) <= 130
    assert "source" not in run("devices").stdout


def test_devices_name_shows_every_figure_with_its_source():
    out = run("devices", "gb300").stdout  # an alias
    lines = out.splitlines()
    assert lines[0] == "gb300-nvl72"
    for figure in ("peak_flops.bf16 = 2500 TFLOP/s", "peak_flops.fp8 = 5000 TFLOP/s", "peak_flops.fp4 = 15000 TFLOP/s",
                   "hbm_bytes = 288 GB (268.2 GiB)", "hbm_bandwidth = 8 TB/s", "devices_per_node = 72 devices",
                   "intra_node_bandwidth = 900 GB/s per direction", "inter_node_bandwidth = 100 GB/s per direction",
                   "intra_node_latency = 5 us", "inter_node_latency = 10 us"):
        at = lines.index(f"  {figure}")
        # the figure's source follows it, indented
        assert lines[at + 1].startswith("      ") and lines[at + 1].strip(), figure
    joined = " ".join(line.strip() for line in lines)  # the sources are wrapped at 100 columns
    assert "Theia (1x NVIDIA GB300 NVL72)" in joined and "ConnectX-8 IB XDR 800 Gb/s" in joined
    assert max(len(line) for line in lines) <= 100


def test_devices_name_json_and_sources_for_all():
    card = json.loads(run("devices", "h800", "--json").stdout)
    assert card["peak_flops.fp8"]["value"] == 1978.86e12 and card["peak_flops.fp8"]["unit"] == "FLOP/s"
    assert "deepseek_v3_report" in card["peak_flops.fp8"]["source"]
    cards = json.loads(run("devices", "--sources", "--json").stdout)
    assert [c["name"]["value"] for c in cards] == [row["device"] for row in json.loads(run("devices", "--json").stdout)]
    assert all(entry["source"] != "not stated" for c in cards for entry in c.values())
    text = run("devices", "--sources").stdout
    assert text.count("  peak_flops.bf16 = ") == len(cards)


def test_devices_unknown_name_is_one_clear_line():
    proc = run("devices", "tpu-v5", check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("ndcost: error: The 'name' parameter of Device.from_catalog must be a catalog device")
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_devices_help_names_the_sources_views():
    out = run("devices", "--help").stdout
    assert "NAME" in out and "--sources" in out and "--json" in out


def test_show_prints_dims_and_parameter_counts():
    card = json.loads(run("show", "deepseek-v3", "--json").stdout)
    assert card["dims"]["hidden_size"] == 7168


def test_unknown_model_is_one_clear_line():
    proc = run("show", "no-such-model", check=False)
    assert proc.returncode == 2
    assert "The 'MODEL' parameter of ndcost must be a catalog name" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("path_kind", ["config", "yaml"])
def test_show_reads_files(tmp_path, path_kind):
    if path_kind == "config":
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
                                    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
                                    "intermediate_size": 512}))
    else:
        path = tmp_path / "m.yaml"
        path.write_text("name: tiny\nhidden_size: 256\nnum_hidden_layers: 2\nnum_attention_heads: 4\n"
                        "vocab_size: 1000\nintermediate_size: 512\n")
    card = json.loads(run("show", str(path), "--json").stdout)
    assert card["dims"]["hidden_size"] == 256
