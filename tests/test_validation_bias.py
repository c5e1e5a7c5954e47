"""Validation that shows its bias (issue 25 item 6): the signed mean beside the absolute error, per family
and overall; every skipped shipped row named; ``ndcost devices`` states per part whether validation rows
exist and their error; the README says where ndcost has not been checked; the measured-error table a tie
is judged against is the validation's own result (regenerated and compared)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ndcost.cli.main import main
from ndcost.files import read_mapping
from ndcost.io.measured_error import (ERROR_TABLE, PRICED_AS, error_rows, measured_error, model_error, summarise,
                                     validated_devices, validated_models)
from ndcost.spec.model import Model
from ndcost.spec.model_catalog import catalog_model_of
from ndcost.io.validation import BUILTIN_RUNS, validate_runs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reports():
    return {name: validate_runs(path) for name, path in BUILTIN_RUNS.items()}


def test_the_signed_mean_is_shown_beside_the_mae(reports):
    report = reports["h100"]
    errors = [row.error for row in report.scored]
    assert report.signed_mean == pytest.approx(sum(errors) / len(errors), rel=1e-12)
    assert report.signed_mean < 0 < report.mae       # ndcost is optimistic on these runs, and says so
    table = report.table()
    assert "| family | rows | MAE | signed mean |" in table
    for family, signed in report.family_signed_mean().items():
        assert f"| {family} | " in table and f"{100 * signed:+.1f}%" in table
    assert f"**{100 * report.signed_mean:+.1f}%**" in table


def test_a_skipped_shipped_row_is_named_in_the_summary(reports, capsys):
    report = reports["a100"]
    assert set(report.skipped) == {"opt175b_992gpu"}
    summary = report.table().split("| family | rows |")[1]
    assert "skipped (not in the MAE): opt175b_992gpu:" in summary
    assert main(["validate", "--builtin", "a100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "opt175b_992gpu" in out["skipped"] and out["signed_mean"] == pytest.approx(report.signed_mean)


def test_the_measured_error_table_is_the_validations_result(reports):
    """tools/gen_measured_error.py wrote it from these very reports: regenerate when a row moves."""
    shipped = read_mapping(ERROR_TABLE, "the measured-error table")
    fresh = error_rows(reports)
    assert [(r["id"], r["file"], r.get("model", ""), r["device"], r["software"]) for r in shipped["rows"]] == \
        [(r.id, r.file, r.model, r.device, r.software) for r in fresh], "run python tools/gen_measured_error.py"
    for row, new in zip(shipped["rows"], fresh):
        assert row["error"] == pytest.approx(new.error, abs=1e-6), f"{row['id']}: run python tools/gen_measured_error.py"
    skipped = {run_id for report in reports.values() for run_id in report.skipped}
    assert set(shipped["skipped"]) == skipped


def test_a_models_own_error_is_the_error_of_its_runs(reports):
    """``ndcost estimate`` prints the error of the model's own runs beside the device's: gpt-oss-120b's are its five
    rows of the MoE file, over four parts, and every one of them optimistic."""
    rows = [row for report in reports.values() for row in report.scored if row.model == "gpt-oss-120b"]
    assert len(rows) == 5 and all(row.error < 0 for row in rows)
    error = model_error("gpt-oss-120b")
    expected = summarise([row.error for row in rows], "")
    assert (error.rows, error.mae, error.signed_mean) == (5, pytest.approx(expected.mae, abs=1e-6),
                                                          pytest.approx(expected.signed_mean, abs=1e-6))
    assert error.signed_mean == pytest.approx(-error.mae) and "gpt-oss-120b (b200, gb200-nvl72" in error.scope
    assert model_error(Model.from_catalog("gpt-oss-120b")) == error            # a Model reads as its name
    assert model_error("mixtral-8x7b") is None                                 # two rows: too few to stand for it
    assert model_error("qwen2.5-vl-7b") is None                                # never validated
    named = {row.id: row.model for report in reports.values() for row in report.scored}
    assert named["narayanan21_t1_1p7b"] is None and named["narayanan21_t1_145p6b"] is None   # not catalog models
    assert named["dgxc_gpt3_175b_fp8_512gpu"] == named["narayanan21_t2_ptdp_175b_384gpu"] == "gpt3-175b"


def test_a_run_is_a_catalog_models_when_only_its_name_and_padded_vocabulary_differ():
    """GPT-3 175B's runs describe the model themselves, their vocabulary padded (Megatron-LM's
    --make-vocab-size-divisible-by): they are the catalog's gpt3-175b; a model that differs in anything else is not."""
    llama = Model.from_catalog("llama3-70b")
    assert catalog_model_of(llama) == "llama3-70b"
    assert catalog_model_of(dataclasses.replace(llama, name="my-70b", vocab_size=llama.vocab_size + 64)) == "llama3-70b"
    assert catalog_model_of(dataclasses.replace(llama, name="my-70b", num_hidden_layers=79)) is None
    assert catalog_model_of(dataclasses.replace(llama, name="my-70b", hidden_size=8192 + 128)) is None


def test_a_megatron_recipe_preset_reads_the_runs_priced_as_megatron_te():
    """The Megatron-Bridge and Megatron-LM recipes' runs are priced as megatron-te with their stated settings: the
    default stack of the command line (megatron-bridge) reads their error, not the whole device's."""
    te = measured_error("gb200-nvl72", "megatron-te")
    for preset in PRICED_AS:
        error = measured_error("gb200-nvl72", preset)
        assert (error.rows, error.mae, error.signed_mean) == (te.rows, te.mae, te.signed_mean)
        assert f"with megatron-te (as {preset}'s runs are priced)" in error.scope
        assert error.rows < measured_error("gb200-nvl72").rows                 # narrower than the device's rows
    assert measured_error("h100-sxm", "nemo").scope == "the 22 validation rows on h100-sxm with nemo"
    # a stack that is no name (an API caller's junk) reads the device's rows, never an unhashable-key error
    assert measured_error("h100-sxm", []) == measured_error("h100-sxm") and model_error({}) is None


def test_devices_states_where_validation_rows_exist(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    checked = validated_devices()
    assert "validation rows" in out and "not checked" in out
    for line in out.splitlines()[2:]:
        name = line.split()[0] if line.strip() else ""
        if name in checked:
            assert f"{100 * checked[name].mae:.1f}%" in line
        elif name and not line.startswith(("validation", "HBM GiB")):   # the footnotes
            assert line.rstrip().endswith("not checked"), line
    assert main(["devices", "--json"]) == 0
    parts = json.loads(capsys.readouterr().out)
    assert all(("validation" in part) for part in parts)
    assert any(part["validation"] is None for part in parts)


def test_models_states_which_were_validated(capsys):
    """``ndcost models`` gives each catalog model its validation rows and their error, as ``ndcost devices`` does
    for the parts: gpt-oss-120b's five optimistic rows, a model never validated 'not checked'."""
    assert main(["models"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:] if line.strip()}
    checked = validated_models()
    error = checked["gpt-oss-120b"]
    assert f" {error.rows} " in lines["gpt-oss-120b"] and error.signed_mean < 0
    assert f"{100 * error.mae:.1f}% ({100 * error.signed_mean:+.1f}%)" in lines["gpt-oss-120b"]
    assert lines["qwen2.5-vl-7b"].rstrip().endswith("not checked") and "qwen2.5-vl-7b" not in checked
    assert main(["models", "--json"]) == 0
    entries = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert entries["gpt-oss-120b"]["validation"]["rows"] == error.rows and entries["qwen2.5-vl-7b"]["validation"] is None


def test_the_readme_says_where_ndcost_has_not_been_checked(capsys):
    from ndcost.spec.device import devices

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    accuracy = readme.split("## Accuracy")[1].split("\n## ")[0]
    assert "signed mean" in accuracy and "**Not checked**" in accuracy
    unchecked = [name for name in devices() if name not in validated_devices()]
    words = {"h200": "H200", "ascend-910b": "Ascend 910B", "ascend-910c": "910C"}
    for name in unchecked:
        assert words.get(name, name) in accuracy.split("**Not checked**")[1].split("\n\n")[0], name
