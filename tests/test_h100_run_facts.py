"""The sourced configuration facts of the H100 validation runs (data/validation/h100_run_facts.yaml)
and the published peak-memory rows (data/validation/h100_memory_facts.yaml).

Every run of the shared ``h100_runs.yaml`` must have an entry, every stated fact a source, and every
fact without a value a note saying where it was looked for: the files are only useful to the
estimator if nothing in them is an unsourced guess.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ndcost.io.validation import BUILTIN_RUNS
import yaml
from facts_checks import fact_problems, overlapping_merges

DATA = Path(__file__).resolve().parents[1] / "src" / "ndcost" / "data" / "validation"
FACTS = DATA / "h100_run_facts.yaml"
MEMORY = DATA / "h100_memory_facts.yaml"
# The packaged copy of the shared runs file (ndcost.io.validation.BUILTIN_RUNS).
SHARED_RUNS = BUILTIN_RUNS["h100"]

KINDS = {"reserved", "active", "allocated", "unknown"}


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def facts() -> dict:
    return _load(FACTS)


@pytest.fixture(scope="module")
def shared_runs() -> list[dict]:
    return _load(SHARED_RUNS)["runs"]


def test_every_shared_run_has_an_entry(facts, shared_runs):
    ids = [run["id"] for run in shared_runs]
    assert len(ids) == 31
    assert sorted(facts["runs"]) == sorted(ids)


def test_every_fact_is_sourced_or_explained(facts):
    problems = []
    for run_id, row in facts["runs"].items():
        problems += fact_problems(run_id, "framework", row["framework"])
        assert str(row["figures_from"]).strip(), run_id
        for section in ("facts", "measurement"):
            assert row[section], f"{run_id} has no {section}"
            for name, fact in row[section].items():
                problems += fact_problems(f"{run_id}.{section}", name, fact)
    assert not problems, "\n".join(problems)


def test_family_merges_resolve_per_row(facts):
    """Family blocks are merged into rows with YAML merge keys; a row's own keys must win."""
    runs = facts["runs"]
    for run_id, row in runs.items():
        precision = str(row["facts"]["precision"]["value"] or "")
        if run_id.startswith("dgxc_"):
            assert precision.startswith("fp8") == ("_fp8_" in run_id), run_id
            assert (row["facts"]["fp8_recipe"]["value"] == "n/a (bf16)") == ("_bf16_" in run_id), run_id
    assert runs["torchtitan_t1_8b_8gpu_eager"]["facts"]["torch_compile"]["value"] is False
    assert "torch.compile" in runs["torchtitan_t1_8b_8gpu_compile"]["facts"]["torch_compile"]["value"]
    assert runs["torchtitan_t1_8b_8gpu_compile"]["facts"]["float8"]["value"] is False
    assert "Float8Linear" in runs["torchtitan_t1_8b_8gpu_f8"]["facts"]["float8"]["value"]


@pytest.mark.parametrize("path", [FACTS, MEMORY], ids=["run_facts", "memory_facts"])
def test_merge_lists_never_overlap(path):
    """PyYAML releases disagree on which mapping of a merge list wins a shared key (6.0.3 and 6.0.4
    resolve it in opposite orders), so merge lists must only combine disjoint mappings."""
    assert not overlapping_merges(path.read_text(encoding="utf-8"))


def test_layout_facts_agree_with_the_runs_file(facts, shared_runs):
    """tp/pp/cp read from the configs match the runs file; the one known disagreement (GPT-3 175B's
    virtual pipeline size) is listed under corrections_to_runs_file."""
    corrected = {(c["id"], c["field"]) for c in facts["corrections_to_runs_file"]}
    assert ("dgxc_gpt3_175b_*", "strategy.vpp") in corrected
    for run in shared_runs:
        row = facts["runs"][run["id"]]["facts"]
        for key in ("tp", "pp", "cp", "vpp"):
            if key in row and key in run["strategy"]:
                if key == "vpp" and run["id"].startswith("dgxc_gpt3_175b_"):
                    assert (run["strategy"][key], row[key]["value"]) == (12, 6)
                    continue
                assert row[key]["value"] == run["strategy"][key], (run["id"], key)


def test_memory_rows_state_their_figure_kind_and_source():
    memory = _load(MEMORY)
    rows = memory["rows"]
    assert len(rows) >= 3
    assert len({row["id"] for row in rows}) == len(rows)
    problems = []
    for row in rows:
        figure = row["figure"]
        if not figure["value_gib"] > 0:
            problems.append(f"{row['id']}: figure {figure['value_gib']}")
        if figure["kind"] not in KINDS:
            problems.append(f"{row['id']}: kind {figure['kind']!r}")
        if figure["kind"] == "unknown" or figure.get("basis") == "inferred":
            if not str(figure.get("note") or "").strip():
                problems.append(f"{row['id']}: {figure['kind']} figure without a note")
        problems += fact_problems(row["id"], "figure", {"value": figure["value_gib"], **figure})
        for name, fact in row["strategy"].items():
            if isinstance(fact, dict):
                problems += fact_problems(f"{row['id']}.strategy", name, fact)
        assert row["model"]["name"] and row["hardware"]["gpu"], row["id"]
    assert not problems, "\n".join(problems)


def test_memory_rows_match_the_torchtitan_runs(shared_runs):
    """The three torchtitan rows of h100_runs.yaml carry the same peak memory as their memory rows."""
    by_run = {row["h100_run_id"]: row for row in _load(MEMORY)["rows"] if "h100_run_id" in row}
    with_memory = {run["id"]: run["measured"]["memory_gib"] for run in shared_runs
                   if "memory_gib" in run["measured"]}
    assert set(with_memory) == set(by_run)
    for run_id, gib in with_memory.items():
        assert by_run[run_id]["figure"]["value_gib"] == pytest.approx(gib, abs=1e-9), run_id
