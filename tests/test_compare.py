"""``ndcost compare`` / ``ndcost.compare`` (issue 25 item 3): two strategies side by side, part by part and
stage by stage, the difference in words, a tie when the gap is inside the measured error ndcost ships;
search marks tied ranks; explain on a valid strategy says how far it is from #1 and why."""
from __future__ import annotations

import json

import pytest

import ndcost
from ndcost.cli.main import main
from ndcost.io.measured_error import measured_error

README_SEARCH = "deepseek-v3 --devices 1024 --device h800 --global-batch-size 4096 --seq-length 4096"
LLAMA = "llama3-8b --device h100-sxm --devices 8 --global-batch-size 64 --seq-length 4096"


@pytest.fixture(scope="module")
def readme_search():
    model, cluster = ndcost.Model.from_catalog("deepseek-v3"), ndcost.Cluster("h800", 1024)
    return model, cluster, ndcost.search(model, cluster, global_batch_size=4096, seq_length=4096)


def test_readme_search_ranks_1_and_2_are_compared_and_tied(capsys, readme_search):
    """The acceptance: compare on #1 and #2 of the README's search prints the parts' differences and flags the tie."""
    assert main(["compare", "--search", README_SEARCH, "--ranks", "1,2"]) == 0
    text = capsys.readouterr().out
    assert "TIED" in text and "inside ndcost's measured error" in text
    model, cluster, result = readme_search
    comparison = ndcost.compare(result.results[0], result.results[1], model, cluster)
    assert comparison.tied and abs(comparison.relative_gap) < comparison.error.mae
    for name, (_, _, delta) in comparison.part_differences().items():
        assert name in text
    assert "why:" in text and "differs in:" in text and "stages (" in text


def test_the_parts_explain_the_gap(readme_search):
    """The part differences sum to the gap; each sentence names a part that moved, with its sign."""
    model, cluster, result = readme_search
    c = ndcost.compare(result.results[0], result.results[9], model, cluster)
    deltas = [d for _, _, d in c.part_differences().values()]
    assert sum(deltas) == pytest.approx(c.gap, rel=1e-9)
    assert not c.tied and c.gap > 0
    # the bubble's sentence names what moved it (today #10 runs half the micro-batches of #1: 64 -> 32)
    bubble = next(reason for reason in c.reasons if "bubble" in reason)
    changed = {name for name, *_ in c.differences}
    assert any(f"{name} " in bubble and "->" in bubble for name in changed), (bubble, changed)
    assert any(reason.split(": ")[-1].startswith("+") for reason in c.reasons)
    assert any(reason.split(": ")[-1].startswith("-") for reason in c.reasons)


def test_two_execspecs_by_hand():
    """vpp 2 halves llama3-8b's bubble on pp 4 at 16 micro-batches: the words say so, with its ms."""
    model, cluster = ndcost.Model.from_catalog("llama3-8b"), ndcost.Cluster("h100-sxm", 8)
    a = ndcost.ExecSpec(dp=2, pp=4, global_batch_size=32, seq_length=4096)
    b = ndcost.ExecSpec(dp=2, pp=4, vpp=2, pp_schedule="interleaved", global_batch_size=32, seq_length=4096)
    c = ndcost.compare(a, b, model, cluster)
    bubble = c.part_differences()["bubble"]
    assert bubble[1] < bubble[0]
    words = next(reason for reason in c.reasons if reason.startswith("the pipeline bubble"))
    assert "vpp 1 -> 2" in words and f"-{abs(bubble[2]) * 1e3:.1f} ms" in words
    assert c.differences and {name for name, *_ in c.differences} == {"vpp", "pp_schedule"}
    same = ndcost.compare(a, a, model, cluster)
    assert same.gap == 0 and same.tied and not same.reasons and not same.differences


def test_the_tie_threshold_is_the_shipped_validation_error():
    """Per device: the rows of that device (and stack) in the shipped table; a device without rows says so."""
    h100 = measured_error("h100-sxm")
    assert h100.checked and h100.rows >= 3 and 0 < h100.mae < 0.5
    nemo = measured_error("h100-sxm", "nemo")
    assert nemo.rows < h100.rows and "nemo" in nemo.scope
    unchecked = measured_error("ascend-910c")
    assert not unchecked.checked and "no rows" in unchecked.scope


def test_compare_two_estimate_lines_and_json(capsys):
    a = f"ndcost estimate {LLAMA} --dp 8"
    b = f"{LLAMA} --dp 4 --tp 2 --sequence-parallel"
    assert main(["compare", a, b, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"gap", "tied", "reasons", "parts", "measured_error", "differences"} <= set(out)
    assert out["measured_error"]["rows"] >= 3 and out["parts"]["tp_comm"]["a"] == 0.0


@pytest.mark.parametrize("argv, words", [
    (["compare", "llama3-8b --device h100-sxm --dp 8"], "two quoted"),
    (["compare", "llama3-8b --bogus", "llama3-8b"], "command line"),
    (["compare", "--search", README_SEARCH, "--ranks", "1"], "--ranks"),
    (["compare", "--search", "llama3-8b --devices 8 --device h100-sxm --global-batch-size 64 --seq-length 4096 "
      "--top 2", "--ranks", "1,500"], "--ranks"),
    (["compare", "'unclosed", "x"], "quoted"),
])
def test_bad_compare_is_one_line_and_status_2(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ndcost: error:") and words in err and len(err.strip().splitlines()) == 1


def test_explain_a_valid_strategy_says_how_far_from_1_and_why(capsys):
    argv = ["explain", *LLAMA.split(), "--dp", "2", "--pp", "4"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "valid, and it fits: headroom" in text and "against #1 of `ndcost search llama3-8b" in text
    assert "B - A = " in text and "  - " in text
    assert main([*argv, "--json"]) == 0
    rank = json.loads(capsys.readouterr().out)["rank"]
    assert rank["gap"] > 0 and isinstance(rank["tied"], bool)
