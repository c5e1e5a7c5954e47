"""`ndcost estimate`, `ndcost explain` and `ndcost validate`, end to end in a subprocess."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ndcost.io.validation import BUILTIN_RUNS

RUNS = BUILTIN_RUNS["a100"]
STRATEGY = ["llama3-70b", "--device", "h100-sxm", "--dp", "16", "--tp", "8", "--pp", "8",
            "--global-batch-size", "1024", "--seq-length", "8192", "--sequence-parallel", "--recompute", "selective"]


def run(*args, check=True):
    return subprocess.run([sys.executable, "-m", "ndcost.cli.main", *args], capture_output=True, text=True, check=check)


@pytest.mark.parametrize("units", ["seconds", "nd"])
def test_estimate_json_round_trips(units):
    out = json.loads(run("estimate", *STRATEGY, "--units", units, "--json").stdout)
    assert out["units"] == units
    assert sum(out["parts"].values()) == pytest.approx(out["step_time"], rel=1e-9)
    assert len(out["memory"]["stages"]) == 8
    assert out["fits"] is True


def test_estimate_table_names_parts_and_memory():
    text = run("estimate", *STRATEGY).stdout
    assert "step time:" in text and "tp_comm" in text and "memory: reserved peak" in text and "headroom" in text


def test_estimate_states_the_measured_error_of_the_device_and_of_the_model():
    gpt_oss = ["gpt-oss-120b", "--devices", "64", "--device", "gb200-nvl72", "--ep", "64", "--micro-batch-size", "4",
               "--global-batch-size", "1280", "--seq-length", "4096"]
    lines = run("estimate", *gpt_oss).stdout.splitlines()
    device = next(line for line in lines if line.startswith("measured error: "))
    assert "validation rows on gb200-nvl72 with megatron-te (as megatron-bridge's runs are priced)" in device
    model = lines[lines.index(device) + 1]
    assert model.startswith("  of this model: ") and "the 5 validation rows of gpt-oss-120b" in model
    out = json.loads(run("estimate", *gpt_oss, "--json").stdout)["measured_error"]
    assert out["model"]["rows"] == 5 and out["model"]["signed_mean"] < 0 and out["device"]["rows"] >= 3
    unchecked = run("estimate", *STRATEGY[:1], "--device", "ascend-910c", *STRATEGY[3:]).stdout
    assert "measured error: " in unchecked and "ascend-910c has no rows of its own" in unchecked
    assert "of this model" in unchecked                                           # llama3-70b: 13 rows on H100
    qwen_vl = run("estimate", "qwen2.5-vl-7b", "--device", "h100-sxm", "--dp", "8", "--global-batch-size", "64",
                  "--seq-length", "4096").stdout
    assert "measured error: " in qwen_vl and "of this model" not in qwen_vl      # a model never validated: no line


def test_explain_an_invalid_strategy_lists_every_rule():
    proc = run("explain", "llama3-70b", "--device", "h100-sxm", "--dp", "2", "--tp", "3", "--pp", "1",
               "--global-batch-size", "8", "--seq-length", "4096", check=False)
    assert proc.returncode == 1
    assert "'tp'" in proc.stdout and "num_attention_heads" in proc.stdout


def test_explain_a_strategy_that_does_not_fit_gives_the_numbers():
    proc = run("explain", "llama3-70b", "--device", "a100-40g", "--dp", "8", "--tp", "1", "--pp", "1",
               "--global-batch-size", "8", "--seq-length", "4096", check=False)
    assert proc.returncode == 1
    assert "GiB" in proc.stdout and "stage 0's reserved peak" in proc.stdout and "usable HBM" in proc.stdout


def test_explain_a_good_strategy():
    assert "valid, and it fits" in run("explain", *STRATEGY).stdout


def test_validate_reports_every_row():
    out = json.loads(run("validate", str(RUNS), "--json").stdout)
    assert len(out["rows"]) >= 20
    assert out["mae"] == pytest.approx(sum(abs(r["error"]) for r in out["rows"] if r["error"] is not None)
                                       / sum(1 for r in out["rows"] if r["error"] is not None))


def test_devices_without_dp_leave_dp_to_the_devices():
    """--devices with no --dp: dp is what tp*pp*cp leave (as a launcher derives it); a count they do not divide
    is refused by name, in one line, exit 2."""
    words = ["estimate", "llama3-70b", "--device", "h100-sxm", "--tp", "8", "--pp", "8", "--global-batch-size", "1024",
             "--seq-length", "8192", "--sequence-parallel", "--recompute", "selective", "--json"]
    derived = json.loads(run(*words, "--devices", "1024").stdout)
    stated = json.loads(run(*words, "--devices", "1024", "--dp", "16").stdout)
    assert derived["step_time"] == stated["step_time"]
    bad = run(*words, "--devices", "1000", check=False)
    assert bad.returncode == 2 and "tp*pp*cp = 64" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
