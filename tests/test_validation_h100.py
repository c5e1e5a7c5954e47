"""The H100 runs of validation/h100_runs.yaml, read with their facts file (data/validation/h100_run_facts.yaml)."""
from __future__ import annotations


import pytest

from ndcost.io.validation import BUILTIN_RUNS

from ndcost.io.run_facts import CATALOG_BY_NAME, facts_for, load_run_facts, FACTS_FILES
from ndcost.io.validation import validate_runs

H100_RUNS = BUILTIN_RUNS["h100"]


@pytest.fixture(scope="module")
def report():
    return validate_runs(H100_RUNS)


def test_every_run_is_scored_with_its_software(report):
    assert len(report.rows) == 31
    assert not [row.id for row in report.rows if row.skipped]
    for row in report.rows:
        software = [note for note in row.notes if note.startswith("software ")]
        assert software, row.id
        expected = ("torchtitan" if row.id.startswith("torchtitan") else
                    "nemo" if row.id.startswith("dgxc") else "megatron-te")
        assert expected in software[0]


def test_the_facts_set_what_the_runs_file_leaves_out(report):
    facts = load_run_facts(str(FACTS_FILES["h100_runs.yaml"]))
    assert facts["dgxc_gpt3_175b_bf16_128gpu"].value("vpp") == 6   # the config, not the README header's 12
    rows = {row.id: row for row in report.rows}
    assert any("vpp 6" in note for note in rows["dgxc_gpt3_175b_bf16_128gpu"].notes)
    assert any("current" in note for note in rows["mbridge_25.09_dgxh100_deepseekv3_unstated_1024gpu"].notes)
    assert facts_for("elsewhere/other.yaml", "dgxc_gpt3_175b_bf16_128gpu") is None


def test_mfu_never_exceeds_one_and_errors_stay_bounded(report):
    for row in report.rows:
        assert 0.0 < row.mfu < 1.0
    # today's level (docs/VALIDATION.md): a guard against regressions, not the target
    assert report.mae <= 0.13
    assert report.max_abs_error <= 0.36


def test_catalog_names_are_unambiguous():
    import re

    names = ["LLAMA3_8B", "LLAMA3_70B", "LLAMA3.1_405B", "DeepSeekV3 (dropless)", "Qwen3_30B_a3B (tokendrop)",
             "Qwen3_235B_a22B (tokendrop)", "Llama 3 / 3.1 8B", "Llama 3 / 3.1 70B"]
    for name in names:
        hits = [catalog for pattern, catalog in CATALOG_BY_NAME if re.search(pattern, name.lower())]
        assert len(hits) == 1, (name, hits)


def test_mfu_in_the_sources_convention_is_within_eight_points(report):
    """Where a row publishes its MFU (the dgxc READMEs: full attention, 989/1979 TFLOP/s peaks), the
    estimate's MFU in that convention (the source's FLOPs over the estimated step) is within 8 points."""
    published = [row for row in report.rows if row.published_mfu is not None]
    assert len(published) == 22
    for row in published:
        assert abs(row.estimated_mfu - row.published_mfu) <= 0.08, (row.id, row.estimated_mfu, row.published_mfu)
