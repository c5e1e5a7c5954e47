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
    (["estimate", "qwen3-30b-a3b", *STRATEGY, "--cuda-graphs", "attn+foo"], "did you mean 'attn+ffn'? Got"),
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
    assert "?. " not in lines[0] and ".. " not in lines[0], lines[0]     # one stop after a rule, none after a question


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


# --------------------------------------------------------------------------- the seeded fuzz (issue 25 item 8)
#
# Good command lines of every subcommand, each broken by seeded mutations (a flag's value replaced by
# a bad one, a required flag dropped, an unknown flag, a bad model, device or file), run in-process:
# the CLI's main with argv, stdout/stderr captured, SystemExit caught, 20 s each. What may come back:
# status 2 with the error as the last line on stderr (bad input), status 1 with a reason (nothing could
# be priced or fits), or status 0 when the mutation happened to be valid -- then every number printed
# is finite. Never a traceback, an exception or a hang.

import contextlib
import io
import random
import re
import signal

FUZZ_SEED = 25
CASE_LIMIT_S = 20

_ESTIMATE_A = "llama3-8b --device h100-sxm --devices 8 --dp 8 --global-batch-size 64 --seq-length 4096"
_ESTIMATE_B = "llama3-8b --device h100-sxm --devices 8 --dp 4 --tp 2 --global-batch-size 64 --seq-length 4096"
_SEARCH_ARGS = ["llama3-8b", "--devices", "8", "--device", "h100-sxm", "--global-batch-size", "64", "--seq-length",
                "4096", "--plan-top", "0", "--balance-top", "0", "--top", "3"]
FUZZ_BASES = [
    ["models"], ["devices"], ["devices", "h100-sxm"], ["show", "llama3-8b"],
    ["estimate", *_ESTIMATE_A.split()],
    ["estimate", *_ESTIMATE_B.split(), "--units", "nd", "--sequence-parallel"],
    ["explain", *_ESTIMATE_A.split(), "--no-rank"],
    ["compare", _ESTIMATE_A, _ESTIMATE_B],
    ["search", *_SEARCH_ARGS, "--no-progress"],
    ["validate", "--builtin", "a100", "--json"],
    ["calibrate", "x.csv", "--model", "llama3-8b", "--device", "h100-sxm", "--seq-length", "4096", "-o", "r.json"],
    ["plot", "memory", *_ESTIMATE_A.split(), "-o", "m.png"],
    ["plot", "timeline", *_ESTIMATE_A.replace("--dp 8", "--dp 2 --pp 4").split(), "-o", "t.png"],
    ["plot", "pareto", *_SEARCH_ARGS, "-o", "p.png"],
]
BAD_VALUES = ("0", "-1", "1.5", "x", "", "1,,2", "nan", "inf", "-inf", "1e300", "1e-320", "99999999999999999999",
              ",", " ", "None", "3", "7", "-0", "0x10", "1e9", "2,3,5")
BAD_MODELS = ("no-such-model", "missing.json", "adir", "bad.yaml", "m.json", "empty.yaml", "", "LLAMA3-8B")
BAD_DEVICES = ("h100", "nope", "", "H100-SXM", "a100")
BAD_FILES = ("missing.json", "adir", "bad.yaml", "m.json", "empty.yaml", "nodir/x.json", "latin1.yaml", "x.csv")
FILE_FLAGS = ("--ratios", "--rates", "--census", "--recompute-plan", "--csv", "--save-plan", "-o")


def _flags(argv: list[str]) -> list[int]:
    return [i for i, word in enumerate(argv) if word.startswith("-") and word not in ("-1", "-inf", "-0")]


def _mutations(rng: random.Random, base: list[str]) -> list[str]:
    argv = list(base)
    flags = _flags(argv)
    kind = rng.choice(("value", "value", "drop", "unknown", "model", "device", "file", "twice"))
    if kind == "value" and flags:
        i = rng.choice(flags)
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            argv[i + 1] = rng.choice(BAD_VALUES)
        else:
            argv.insert(i + 1, rng.choice(BAD_VALUES))
    elif kind == "drop" and flags:
        i = rng.choice(flags)
        del argv[i:i + (2 if i + 1 < len(argv) and not argv[i + 1].startswith("--") else 1)]
    elif kind == "model" and len(argv) > 1 and argv[0] in ("show", "estimate", "explain", "search", "plot"):
        argv[2 if argv[0] == "plot" else 1] = rng.choice(BAD_MODELS)
    elif kind == "device" and "--device" in argv:
        argv[argv.index("--device") + 1] = rng.choice(BAD_DEVICES)
    elif kind == "file":
        flag = rng.choice(FILE_FLAGS)
        if flag in argv:
            argv[argv.index(flag) + 1] = rng.choice(BAD_FILES)
        else:
            argv += [flag, rng.choice(BAD_FILES)]
    elif kind == "twice" and flags:
        i = rng.choice(flags)
        argv += [argv[i], rng.choice(BAD_VALUES)]
    else:
        argv.append(rng.choice(("--bogus", "--tp", "-x", "--json=1", "--units", "extra")))
    if argv[0] == "compare" and rng.random() < 0.5:      # the quoted lines are broken too
        j = rng.choice((1, 2))
        words = argv[j].split()
        words[rng.randrange(len(words))] = rng.choice(BAD_VALUES + BAD_MODELS)
        argv[j] = " ".join(words)
    return argv


def fuzz_cases(count: int = 320) -> list[list[str]]:
    rng = random.Random(FUZZ_SEED)
    cases, seen = [], set()
    while len(cases) < count:
        argv = _mutations(rng, rng.choice(FUZZ_BASES))
        key = "\0".join(argv)
        if key not in seen:
            seen.add(key)
            cases.append(argv)
    return cases


@contextlib.contextmanager
def _time_limit(seconds: int):
    def expired(signum, frame):
        raise TimeoutError(f"over {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _time_limit(CASE_LIMIT_S):
        try:
            status = main(argv)
        except SystemExit as exc:        # argparse's own refusals (usage, then the error)
            status = exc.code if isinstance(exc.code, int) else 2
    return status, out.getvalue(), err.getvalue()


_NOT_FINITE = re.compile(r"(?<![\w.])(nan|inf|NaN|Infinity|-inf)(?![\w])")


@pytest.fixture
def fuzz_files(files):
    (files / "x.csv").write_text("a,b\n1,2\n")
    return files


@pytest.mark.cython      # the CLI's refusals do not depend on the backend: the compiled leg runs them (fast)
def test_three_hundred_bad_command_lines(fuzz_files):
    cases = fuzz_cases()
    assert len(cases) >= 300 and len({argv[0] for argv in cases}) >= 9
    statuses = {}
    for argv in cases:
        status, out, err = run_in_process(argv)
        statuses[status] = statuses.get(status, 0) + 1
        shown = f"{argv!r}\n--- stdout\n{out[-2000:]}\n--- stderr\n{err[-2000:]}"
        assert "Traceback" not in out + err, shown
        assert status in (0, 1, 2), shown
        if status == 2:
            assert err.strip().splitlines()[-1].split(": ", 1)[0].endswith("error") or "error:" in err, shown
        elif status == 1:
            assert (out + err).strip(), shown
        else:
            assert not _NOT_FINITE.search(out), shown
    assert statuses.get(2, 0) >= 200, statuses      # most mutations are refused as bad input


@pytest.mark.parametrize("argv", [
    ["estimate", "llama3-8b", "--device", "h100-sxm", "--dp", "x"],
    ["search", *_SEARCH_ARGS, "--tp", "1,,2"],
    ["compare", _ESTIMATE_A],
    ["calibrate", "x.csv", "--model", "llama3-8b", "--device", "h100-sxm", "--seq-length", "4096", "-o", "adir"],
    ["validate", "bad.yaml"],
], ids=["estimate", "search", "compare", "calibrate", "validate"])
def test_bad_command_lines_in_a_subprocess(fuzz_files, argv):
    """The real process: status 2 and one error line, no traceback (the in-process fuzz's path, end to end)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "ndcost.cli.main", *argv], capture_output=True, text=True,
                            cwd=fuzz_files, timeout=CASE_LIMIT_S * 3)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "error" in result.stderr.strip().splitlines()[-1]


# --------------------------------------------------------------------------- the fuzz's last cases (issue 25)


def test_an_unwritable_output_is_one_line(fuzz_files, capsys):
    """calibrate -o into a place the system refuses printed a traceback (the temporary file's OSError); and
    an output naming a device was replaced by a regular file. Linux's /proc and /dev/full stand for both."""
    import os

    targets = [t for t in ("/proc/ndcost-plan.json", "/dev/full") if os.path.isdir(os.path.dirname(t))]
    for target in targets:
        assert main([*SEARCH, "--top", "1", "--save-plan", target]) == 2
        err = capsys.readouterr().err
        assert err.startswith("ndcost: error:") and "writable" in err and len(err.strip().splitlines()) == 1
    if os.path.exists("/dev/full"):
        assert not os.path.isfile("/dev/full")   # a device is written into, never replaced


def test_ratios_that_scale_a_step_out_of_physics_are_refused(fuzz_files, capsys):
    import json

    for value in (1e300, 1e-320, 1e20):
        (fuzz_files / "r.json").write_text(json.dumps({key: value for key in
                                                       ("COMPUTE", "MP_COMM", "DP_COMM", "PP_COMM", "EP_COMM")}))
        assert main(["estimate", "llama3-8b", *STRATEGY, "--ratios", "r.json"]) == 2
        err = capsys.readouterr().err
        assert "physical step time" in err
    (fuzz_files / "r.json").write_text(json.dumps({"COMPUTE": 1e-300}))
    assert main(["estimate", "llama3-8b", *STRATEGY, "--ratios", "r.json", "--units", "nd"]) == 2
    assert "physical" in capsys.readouterr().err


def test_validate_with_every_row_skipped_exits_1_without_nan(fuzz_files, capsys):
    (fuzz_files / "skip.yaml").write_text("runs:\n  - id: a_1gpu\n    model: {layers: 2}\n    strategy: {gpus: 1}\n")
    assert main(["validate", "skip.yaml"]) == 1
    captured = capsys.readouterr()
    assert "nan" not in captured.out.lower() and "no row could be priced" in captured.out + captured.err
    assert main(["validate", "skip.yaml", "--json"]) == 1
    assert "NaN" not in capsys.readouterr().out


def test_an_empty_list_item_and_deepep_on_a_dense_model(capsys):
    assert main([*SEARCH, "--tp", "1,,2"]) == 2
    assert "no item empty" in capsys.readouterr().err
    assert main([*SEARCH, "--precision", "bf16,,fp8"]) == 2      # a stack choice's list alike
    assert "no item empty" in capsys.readouterr().err
    # a dispatcher a dense model has no use for is refused, on the command line and in Python
    assert main(["estimate", "llama3-8b", *STRATEGY, "--moe-dispatcher", "deepep"]) == 2
    assert "--moe-dispatcher" in capsys.readouterr().err
    import ndcost

    with pytest.raises(ndcost.SpecError, match="moe_dispatcher"):
        ndcost.estimate("llama3-8b", ndcost.ExecSpec(dp=8, global_batch_size=64, seq_length=4096,
                                                     moe_dispatcher="deepep"), "h100-sxm")


def test_nd_units_warn_of_the_layers_they_leave_unplaced(capsys):
    argv = ["estimate", "llama3-8b", "--device", "h100-sxm", "--dp", "2", "--pp", "3", "--global-batch-size", "32",
            "--seq-length", "4096", "--units", "nd"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "the 2 left over are not priced" in err
    assert main([*argv[:-2], "--units", "nd", "--offset=1,0,1"]) == 0
    assert "left over" not in capsys.readouterr().err


def test_the_memory_table_keeps_its_columns_apart_for_a_huge_model(tmp_path, capsys):
    """A model with 100 TB of weights on one device: every cell of the stage table stays a column."""
    (tmp_path / "huge.yaml").write_text("hidden_size: 262144\nnum_hidden_layers: 96\nnum_attention_heads: 512\n"
                                        "intermediate_size: 1048576\nvocab_size: 128000\nname: huge\n")
    assert main(["estimate", str(tmp_path / "huge.yaml"), "--device", "h100-sxm", "--dp", "1",
                 "--global-batch-size", "1", "--seq-length", "4096"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.strip().startswith("stage "))
    header = lines[head].replace("(GiB)", "").replace("allocated peak", "allocated_peak") \
        .replace("reserved peak", "reserved_peak").split()
    row = lines[head + 1].split()
    assert len(row) == len(header) and all(float(cell) >= 0 for cell in row[1:])
