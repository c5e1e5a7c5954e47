"""The search table tells its rows apart (issue 25 item 4): every field the search varied or the printed
rows differ in has a column, a rebalanced layout is marked with its offset, per-layer plans are numbered;
no two printed rows read the same. ``ndcost show`` is short unless ``--all``."""
from __future__ import annotations

import re

import pytest

from ndcost.cli.main import main

SEARCHES = [
    ["deepseek-v3", "--devices", "1024", "--device", "h800", "--global-batch-size", "4096", "--seq-length", "4096"],
    ["llama3-8b", "--devices", "16", "--device", "h100-sxm", "--global-batch-size", "64", "--seq-length", "4096",
     "--zero-stage", "1,3", "--pp-schedule", "1f1b,gpipe", "--top", "20"],
    ["llama3-70b", "--devices", "64", "--device", "h100-sxm", "--global-batch-size", "128", "--seq-length", "8192",
     "--top", "15", "--units", "nd"],
    ["qwen3-30b-a3b", "--devices", "32", "--device", "h100-sxm", "--global-batch-size", "256", "--seq-length", "4096",
     "--top", "12", "--recompute", "none,full,selective"],
]


_PRINTED: dict = {}


def table(capsys, argv) -> tuple[list[str], list[str], str]:
    """(header words, the rows' strategy cells as printed -- between the rank and its step time --, the text);
    each search run once per session."""
    key = tuple(argv)
    if key not in _PRINTED:
        assert main(["search", *argv, "--no-progress"]) == 0
        _PRINTED[key] = capsys.readouterr().out
    text = _PRINTED[key]
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.lstrip().startswith("# "))
    end = lines[head].index(" layout") + len(" layout")       # the strategy's columns end with its layout
    rows = [line[5:end] for line in lines[head + 2:] if re.match(r"^ *\d+[ ~] ", line)]
    return lines[head][:end].split(), rows, text


@pytest.mark.parametrize("argv", SEARCHES, ids=[a[0] for a in SEARCHES])
def test_every_pair_of_rows_differs_in_a_printed_column(capsys, argv):
    _, rows, _ = table(capsys, argv)
    assert len(rows) >= 2
    assert len(set(rows)) == len(rows), "\n".join(rows)


def test_searched_dimensions_have_their_columns(capsys):
    header, rows, text = table(capsys, SEARCHES[1])
    assert "zero" in header and "schedule" in header
    zero = header.index("zero") - 1       # the header's first word is the rank's '#'
    assert {row.split()[zero] for row in rows} == {"1", "3"}


def test_a_rebalanced_layout_is_marked_with_its_offset(capsys):
    _, rows, text = table(capsys, SEARCHES[0])
    marked = [re.search(r"rebalanced (\d+)", row) for row in rows]
    numbers = {match.group(1) for match in marked if match}
    assert numbers and any(row.rstrip().endswith("even") for row in rows)
    for number in numbers:
        assert re.search(rf"^layout rebalanced {number}: --offset=", text, re.M)


def test_show_is_short_unless_all(capsys):
    assert main(["show", "deepseek-v3"]) == 0
    short = capsys.readouterr().out
    assert main(["show", "deepseek-v3", "--all"]) == 0
    full = capsys.readouterr().out
    assert len(short.splitlines()) <= 25 < len(full.splitlines())
    assert "parameters" in short and "--all" in short


def test_search_marks_ranks_tied_with_1(capsys):
    """Ranks whose gap to #1 is inside the measured error are marked ``~``, #1 is not, and a footnote says
    what the mark means (issue 25 item 3)."""
    _, _, text = table(capsys, SEARCHES[0])
    ranks = [line for line in text.splitlines() if re.match(r"^ *\d+[ ~] .*%", line)]
    assert ranks[0].startswith("  1 ")
    assert any(line[3] == "~" for line in ranks[1:]) and "~ tied with #1" in text


def test_search_states_the_measured_error_of_the_models_own_runs(capsys):
    """A catalog model that three or more shipped runs trained gets their error under the table (Qwen3-30B-A3B: its
    Megatron-Core and Automodel runs; llama3-8b: its torchtitan runs; DeepSeek-V3)."""
    from ndcost.io.measured_error import model_error

    for argv in (SEARCHES[3], SEARCHES[1], SEARCHES[0]):
        own = model_error(argv[0])
        assert own is not None and own.rows >= 3
        assert f"\nmeasured error of this model's runs: {own.describe()}\n" in table(capsys, argv)[2]
