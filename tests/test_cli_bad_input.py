"""Every bad invocation is one line on stderr naming the problem, exit status 2, never a traceback
(issue 13 #4, #5, #7); the search's counts add up; explain lists every broken rule."""
from __future__ import annotations

import csv
import json

import pytest

from ndcost.cli.main import main

STRATEGY = ["--device", "h100-sxm", "--devices", "8", "--dp", "8", "--global-batch-size", "64", "--seq-length", "4096"]
SEARCH = ["search", "llama3-8b", "--devices", "8", "--device", "h100-sxm", "--global-batch-size", "64",
          "--seq-length", "4096", "--no-progress", "--plan-top", "0", "--balance-top", "0"]


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs5.yaml").write_text("runs: 5\n")
    (tmp_path / "bad.yaml").write_text("{bad: [\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    (tmp_path / "m.json").write_text("{bad json")
    (tmp_path / "m.yaml").write_text("hidden_size: [\n")
    (tmp_path / "latin1.yaml").write_bytes(b"runs: [\xe9]\n")
    (tmp_path / "adir").mkdir()
    return tmp_path


BAD = [
    (["validate", "missing.yaml"], "existing file"),
    (["validate", "adir"], "not a directory"),
    (["validate", "bad.yaml"], "valid YAML"),
    (["validate", "empty.yaml"], "an empty file"),
    (["validate", "runs5.yaml"], "list of runs"),
    (["validate", "x.csv"], "hold a mapping"),
    (["validate", "latin1.yaml"], "UTF-8"),
    (["validate"], "--builtin"),
    (["estimate", "m.json", *STRATEGY], "valid JSON"),
    (["estimate", "m.yaml", *STRATEGY], "valid YAML"),
    (["estimate", "missing.json", *STRATEGY], "catalog name"),
    (["show", "m.json"], "valid JSON"),
    (["show", "empty.yaml"], "mapping"),
    (["explain", "m.yaml", *STRATEGY], "valid YAML"),
    (["estimate", "llama3-8b", *STRATEGY, "--ratios", "missing.json"], "missing.json"),
    (["estimate", "llama3-8b", *STRATEGY, "--rates", "missing.json"], "missing.json"),
    (["estimate", "llama3-8b", *STRATEGY, "--census", "missing.json"], "missing.json"),
    (["estimate", "llama3-8b", *STRATEGY, "--software", "nope"], "--software"),
    (["estimate", "llama3-8b", *STRATEGY, "--census", "adir"], "not a directory"),
    (["estimate", "llama3-8b", *STRATEGY, "--recompute-plan", '[{"first": 0}]'], "count, option"),
    (["estimate", "llama3-8b", *STRATEGY, "--recompute-plan", "[1,2"], "--recompute-plan"),
    (["estimate", "llama3-8b", "--device", "h100-sxm", "--devices", "0", "--dp", "8", "--global-batch-size", "64",
      "--seq-length", "4096"], "num_devices"),
    ([*SEARCH, "--csv", "adir"], "not a directory"),
    ([*SEARCH, "--csv", "nodir/x.csv"], "existing directory"),
    ([*SEARCH, "--memory-limit-gib", "nan"], "--memory-limit-gib"),
    ([*SEARCH, "--memory-limit-gib", "-1"], "--memory-limit-gib"),
    ([*SEARCH, "--memory-limit-gib", "0.001"], "--memory-limit-gib"),
    ([*SEARCH, "--pp-schedule", "foo"], "pp_schedule"),
    ([*SEARCH, "--recompute", "maybe"], "recompute"),
    (["calibrate", "x.csv", "--model", "llama3-8b", "--device", "h100-sxm", "--seq-length", "4096", "-o", "adir"],
     "not a directory"),
    (["calibrate", "missing.csv", "--model", "llama3-8b", "--device", "h100-sxm", "--seq-length", "4096", "-o",
      "nodir/r.json"], "existing directory"),
    (["calibrate", "--fit", "rates", "bad.yaml", "--device", "h100-sxm", "-o", "r.json"], "valid YAML"),
    (["plot", "memory", "llama3-8b", *STRATEGY, "-o", "nodir/x.png"], "existing directory"),
    (["plot", "memory", "llama3-8b", *STRATEGY, "-o", "adir"], "not a directory"),
    (["plot", "pareto", "llama3-8b", "--devices", "8", "--device", "h100-sxm", "--global-batch-size", "64",
      "--seq-length", "4096", "-o", "nodir/p.png"], "existing directory"),
]


@pytest.mark.parametrize("argv,words", BAD, ids=[" ".join(argv[:3]) + f" #{i}" for i, (argv, _) in enumerate(BAD)])
def test_bad_invocation_is_one_line_and_status_2(files, capsys, argv, words):
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 2, (status, captured.err)
    assert "Traceback" not in captured.err + captured.out
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ndcost: error:"), captured.err
    assert words in lines[0], lines[0]


def test_a_bad_invocation_in_a_subprocess_prints_no_traceback(files):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "ndcost.cli.main", "validate", "bad.yaml"], capture_output=True,
                            text=True, cwd=files, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("ndcost: error:")


def test_search_counts_add_up_with_a_memory_limit():
    from ndcost import Cluster, Model, search

    result = search(Model.from_catalog("llama3-8b"), Cluster("h100-sxm", 8), global_batch_size=64,
                    seq_length=4096, memory_limit=40 * 2**30, per_layer_recompute=0, balance=0)
    assert result.rejected.get("does not fit in memory", 0) > 0
    assert result.fitting + sum(result.rejected.values()) == result.space_size


def test_when_nothing_fits_the_search_says_why_and_exits_1(capsys):
    assert main([*SEARCH, "--memory-limit-gib", "2"]) == 1
    err = capsys.readouterr().err
    assert "no strategy fits" in err and "does not fit in memory" in err
    assert main([*SEARCH, "--tp", "3"]) == 1
    captured = capsys.readouterr()
    assert "tp 3 does not divide the 8 devices" in captured.out + captured.err


def test_search_csv_names_the_parts_apart_from_the_mode(files, capsys):
    assert main([*SEARCH, "--top", "2", "--csv", "out.csv"]) == 0
    with open(files / "out.csv", newline="") as handle:
        header = next(csv.reader(handle))
    assert len(header) == len(set(header))
    assert "recompute" in header and "part_recompute" in header


def test_explain_lists_every_broken_rule(capsys):
    argv = ["explain", "llama3-8b", "--device", "h100-sxm", "--devices", "7", "--dp", "8", "--tp", "2",
            "--global-batch-size", "63", "--micro-batch-size", "2", "--seq-length", "4096", "--json"]
    assert main(argv) == 1
    reasons = json.loads(capsys.readouterr().out)["reasons"]
    assert any("global_batch_size" in r for r in reasons) and any("dp*tp*pp*cp" in r for r in reasons)
    assert len(reasons) >= 2
