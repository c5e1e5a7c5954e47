"""The catalog commands, end to end in a subprocess."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run(*args, check=True):
    return subprocess.run([sys.executable, "-m", "ndcost.cli", *args], capture_output=True, text=True, check=check)


def test_models_lists_the_catalog():
    out = run("models").stdout
    for name in ("llama3-70b", "deepseek-v3", "qwen3-next-80b-a3b", "gpt3-175b"):
        assert name in out


def test_devices_json():
    rows = json.loads(run("devices", "--json").stdout)
    assert {row["device"] for row in rows} >= {"a100-80g", "h100-sxm", "ascend-910b"}


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
