"""One memory vocabulary (issue 25 item 1): allocated peak, reserved peak, fixed costs, usable HBM and
headroom, each labelled wherever an output shows it -- estimate, explain, search (table, JSON, CSV),
compare, the emit report, Python -- and no other name for the same figure (docs/MEMORY.md)."""
from __future__ import annotations

import csv
import json
import re

import pytest

import ndcost
from ndcost.cli.main import main
from ndcost.tables.memory import MEMORY_FIGURES, MemoryEstimate

WORDS = tuple(MEMORY_FIGURES)          # allocated peak, reserved peak, fixed costs, usable HBM, headroom
KEYS = tuple(MEMORY_FIGURES.values())
#: Other names outputs once gave these figures (issue 25: "peak GiB 61.1", "peak 58.23 GiB reserved",
#: a stage table's "total", explain's "needs"), and internal names that must not leak into outputs.
FORBIDDEN = (r"(?<!reserved )(?<!allocated )peak GiB", "device_peak", "device memory", "peak_memory",
             r"(?<!reserved )(?<!allocated )peak memory", "memory: peak ", " needs ", "GiB reserved", "device_memory")
STRATEGY = ["llama3-70b", "--device", "h100-sxm", "--dp", "4", "--tp", "8", "--pp", "2", "--global-batch-size", "64",
            "--seq-length", "8192", "--sequence-parallel", "--recompute", "selective"]
SEARCH = ["search", "llama3-8b", "--devices", "16", "--device", "h100-sxm", "--global-batch-size", "64",
          "--seq-length", "4096", "--no-progress"]


def run(capsys, *argv: str) -> str:
    main(list(argv))
    captured = capsys.readouterr()
    return captured.out + captured.err


def assert_one_vocabulary(text: str) -> None:
    for name in FORBIDDEN:
        assert not re.search(name, text), f"{name!r} in:\n{text}"
    # a GiB figure is always introduced by one of the words
    for line in text.splitlines():
        if re.search(r"\d GiB", line):
            assert any(word in line for word in WORDS + ("HBM",)), line


def test_estimate_names_every_figure(capsys):
    for units in ("seconds", "nd"):
        text = run(capsys, "estimate", *STRATEGY, "--units", units)
        assert_one_vocabulary(text)
        for word in WORDS:
            assert word in text, (units, word)
        assert "total" not in text.split("memory:")[1]     # the stage table's columns are the words too


def test_estimate_json_memory_keys_are_the_vocabulary(capsys):
    out = json.loads(run(capsys, "estimate", *STRATEGY, "--json"))
    memory = out["memory"]
    assert set(memory) == set(KEYS) | {"capacity_bytes", "peak", "peak_stage", "stages"}
    assert memory["headroom"] == pytest.approx(memory["usable_bytes"] - memory["peak_reserved"], rel=1e-12)


def test_explain_names_the_figures_it_compares(capsys):
    text = run(capsys, "explain", "llama3-70b", "--device", "a100-40g", "--dp", "8", "--global-batch-size", "8",
               "--seq-length", "4096")
    assert_one_vocabulary(text)
    assert "reserved peak" in text and "usable HBM" in text and "fixed costs" in text and "headroom" in text
    text = run(capsys, "explain", *STRATEGY, "--no-rank")
    assert_one_vocabulary(text)
    assert "headroom" in text and "reserved peak" in text


def test_search_table_json_and_csv_name_the_reserved_peak(capsys, tmp_path):
    text = run(capsys, *SEARCH, "--csv", str(tmp_path / "s.csv"))
    assert_one_vocabulary(text)
    assert "reserved peak GiB" in text
    out = json.loads(run(capsys, *SEARCH, "--json"))
    for point in out["pareto"]:
        assert {"peak_reserved", "fixed_bytes", "headroom"} <= set(point) and "peak_memory" not in point
    with open(tmp_path / "s.csv", newline="") as handle:
        header = next(csv.reader(handle))
    assert set(KEYS) <= set(header) and "peak_memory" not in header


def test_search_column_is_the_estimates_reserved_peak(capsys):
    """The search's memory column and the estimate of the same strategy print the same figure."""
    result = ndcost.search("llama3-8b", ndcost.Cluster("h100-sxm", 16), global_batch_size=64, seq_length=4096,
                           top=3)
    text = run(capsys, *SEARCH, "--top", "3")
    rows = [line for line in text.splitlines() if re.match(r"^\s+1[ ~]", line)]
    best = result.results[0]
    assert len(rows) == 1 and f" {best.estimate.memory.peak_reserved / 2**30:.1f} " in rows[0]


def test_compare_and_emit_name_the_figures(capsys):
    text = run(capsys, "compare", " ".join(STRATEGY), " ".join(STRATEGY).replace("--pp 2", "--pp 2 --vpp 2"))
    assert_one_vocabulary(text)
    assert "reserved peak" in text and "headroom" in text
    text = run(capsys, *SEARCH, "--top", "1", "--emit", "megatron", "--plan-top", "1")
    assert_one_vocabulary(text)


def test_python_exposes_every_figure_with_its_docstring():
    e = ndcost.estimate("llama3-8b", ndcost.ExecSpec(dp=8, global_batch_size=64, seq_length=4096,
                                                     recompute="full"), "h100-sxm")
    memory = e.memory
    for word, attribute in MEMORY_FIGURES.items():
        doc = getattr(MemoryEstimate, attribute).__doc__
        assert doc and word.lower() in doc.lower(), attribute
        assert isinstance(getattr(memory, attribute), float)
    # e.memory.peak is kept (the public API, README.md "Python") and says what it is
    assert "ND" in MemoryEstimate.peak.__doc__ and "reserve" in MemoryEstimate.peak.__doc__
    assert memory.peak == pytest.approx(memory.peak_allocated + 2**30, rel=1e-12)
    assert memory.headroom == pytest.approx(memory.usable_bytes - memory.peak_reserved, rel=1e-12)
    assert e.fits == (memory.headroom >= 0)


def test_docs_show_one_vocabulary():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if not (root / "docs").is_dir():
        pytest.skip("no docs/ beside the tests (an sdist ships none)")
    page = (root / "docs" / "MEMORY.md").read_text(encoding="utf-8")
    for word, key in MEMORY_FIGURES.items():
        assert f"**{word}**" in page and f"`{key}`" in page
    for doc in ("README.md", "docs/MEMORY.md", "docs/VALIDATION.md"):
        text = (root / doc).read_text(encoding="utf-8")
        for name in ("peak GiB", "device_peak", "device memory"):
            assert name not in text, (doc, name)
