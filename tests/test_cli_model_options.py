"""`--census` and `--vision-tokens`: the CLI prices the model the API would, and refuses misuse."""
from __future__ import annotations

import json

import pytest

import ndcost
from ndcost.cli.software import DEFAULT_SOFTWARE
from ndcost.cli.main import main

VLM = ["qwen2.5-vl-7b", "--device", "h100-sxm", "--dp", "4", "--tp", "2", "--pp", "4",
       "--global-batch-size", "256", "--seq-length", "8192", "--sequence-parallel", "--recompute", "selective"]
CENSUS = {"source": "synthetic census for tests",
          "kinds": {"dense": {"selective_attention_mm": 0.5, "selective_ffn_mm": 0.25}}}


def _json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _api(model, units):
    spec = ndcost.ExecSpec(dp=4, tp=2, pp=4, global_batch_size=256, seq_length=8192, sequence_parallel=True,
                           recompute="selective")
    # the command line prices its default stack in seconds mode (ndcost.cli.software.DEFAULT_SOFTWARE), none in ND's
    software = DEFAULT_SOFTWARE if units == "seconds" else None
    return ndcost.estimate(model, spec, ndcost.Cluster("h100-sxm", num_devices=32), units=units, software=software)


@pytest.mark.parametrize("units", ["seconds", "nd"])
def test_vision_tokens_reach_the_estimate(capsys, units):
    out = _json(capsys, "estimate", *VLM, "--units", units, "--vision-tokens", "16384")
    model = ndcost.Model.from_catalog("qwen2.5-vl-7b")
    assert out["step_time"] == _api(model.with_vision_tokens(16384), units).step_time
    assert out["step_time"] != _api(model, units).step_time   # more patches, more work


def test_census_reaches_the_estimate(capsys, tmp_path):
    path = tmp_path / "census.json"
    path.write_text(json.dumps(CENSUS))
    argv = ["llama3-8b", "--device", "h100-sxm", "--dp", "2", "--tp", "4", "--pp", "1", "--global-batch-size", "16",
            "--seq-length", "4096", "--recompute", "selective", "--selective-rule", "hyperparallel", "--units", "nd"]
    out = _json(capsys, "estimate", *argv, "--census", str(path))
    model = ndcost.Model.from_catalog("llama3-8b")
    spec = ndcost.ExecSpec(dp=2, tp=4, pp=1, global_batch_size=16, seq_length=4096, recompute="selective",
                           selective_rule="hyperparallel")
    cluster = ndcost.Cluster("h100-sxm", num_devices=8)
    assert out["step_time"] == ndcost.estimate(model.with_census(path), spec, cluster, units="nd").step_time
    assert out["step_time"] != ndcost.estimate(model, spec, cluster, units="nd").step_time


def test_show_lists_the_tower_at_its_tokens(capsys):
    card = _json(capsys, "show", "qwen2.5-vl-7b", "--vision-tokens", "8192")
    assert card["vision"]["tokens"] == 8192


@pytest.mark.parametrize("argv, parameter", [
    (["estimate", "llama3-8b", "--device", "h100-sxm", "--vision-tokens", "1024"], "--vision-tokens"),
    (["estimate", *VLM, "--vision-tokens", "0"], "tokens"),
    (["show", "llama3-8b", "--census", "no/such/census.json"], "census"),
])
def test_misuse_is_one_clear_line(capsys, argv, parameter):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ndcost: error: ") and f"'{parameter}' parameter" in err and "Traceback" not in err


def test_a_reader_that_goes_away_stops_the_cli_quietly():
    """`ndcost ... | head`: the pipe closes before ndcost writes; no traceback, status 141 as Unix tools."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "ndcost.cli.main", "show", "qwen2.5-vl-7b"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()   # before the interpreter has even imported ndcost
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert err == ""


# ----------------------------------------------------------------------------- layouts on the command line

TOWER = [*VLM, "--vision-tokens", "16384"]


def test_balance_then_price_the_printed_offset(capsys):
    """`estimate --balance` prints the offset it found; `estimate --offset=...` prices that very strategy."""
    assert main(["estimate", *TOWER, "--balance"]) == 0
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if line.startswith("balanced:"))
    flag = line.split(", ")[-1]
    assert flag.startswith("--offset=")
    balanced = _json(capsys, "estimate", *TOWER, "--balance")
    again = _json(capsys, "estimate", *TOWER, flag)
    assert again["step_time"] == balanced["step_time"]
    assert balanced["balanced"]["moves"] > 0
    even = _json(capsys, "estimate", *TOWER)
    assert balanced["step_time"] < even["step_time"]


@pytest.mark.parametrize("text, value", [("-4,2,1,1", (-4, 2, 1, 1)), ("-1,0|1,0", ((-1, 0), (1, 0))), ("7", (7,))])
def test_layer_grids_read_as_printed(text, value):
    from ndcost.cli.args import offset_text, parse_layer_grid

    assert parse_layer_grid("--offset", text) == value
    assert offset_text(value) == text


def test_pp_partition_flag(capsys):
    out = _json(capsys, "estimate", *VLM, "--pp-partition", "4,8,8,8", "--units", "nd")
    model = ndcost.Model.from_catalog("qwen2.5-vl-7b")
    spec = ndcost.ExecSpec(dp=4, tp=2, pp=4, global_batch_size=256, seq_length=8192, sequence_parallel=True,
                           recompute="selective", pp_partition=(4, 8, 8, 8))
    assert out["step_time"] == ndcost.estimate(model, spec, ndcost.Cluster("h100-sxm", num_devices=32),
                                               units="nd").step_time


@pytest.mark.parametrize("flag", ["--offset=1,x", "--pp-partition=4;8"])
def test_bad_layer_grids_are_one_clear_line(capsys, flag):
    assert main(["estimate", *VLM, flag]) == 2
    assert "must be integers separated by commas" in capsys.readouterr().err
