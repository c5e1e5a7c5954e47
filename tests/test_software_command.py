"""``ndcost software [NAME]``, docs/STACKS.md, the stack every estimate prints, and NVIDIA's 70B recipe priced
by ``--software nemo`` alone (issue 24)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ndcost.cli.main import main
from ndcost.cli.software import preset_document, stacks_markdown
from ndcost.spec.software_fields import PRESET_FIELDS
from ndcost.spec.software_rates import SOFTWARE_PRESETS

ROOT = Path(__file__).resolve().parents[1]


def test_the_list_names_every_preset_and_one_preset_prints_every_row_with_its_source(capsys):
    assert main(["software"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in SOFTWARE_PRESETS)
    assert main(["software", "nemo", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [row["field"] for row in document["fields"]] == [row.field for row in PRESET_FIELDS["nemo"]]
    assert {row["field"] for row in document["rates"]} == set(SOFTWARE_PRESETS["nemo"][0])
    assert all(row["source"] for row in document["fields"] + document["rates"])
    assert main(["software", "torchtitan-eager"]) == 0
    text = capsys.readouterr().out
    assert "selective_rule = 'torchtitan-op'" in text and "source: pytorch/torchtitan" in text


def test_an_unknown_preset_is_one_line_and_exit_2(capsys):
    assert main(["software", "nemmo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean 'nemo'" in err


def test_docs_stacks_is_the_tables_as_they_are():
    """docs/STACKS.md is generated (tools/gen_stacks_doc.py): a preset changed without it fails here."""
    assert (ROOT / "docs" / "STACKS.md").read_text(encoding="utf-8") == stacks_markdown() + "\n"
    for name in SOFTWARE_PRESETS:
        assert f"## {name}" in stacks_markdown() and preset_document(name)["title"]


@pytest.mark.parametrize("software, printed", [(None, "megatron-bridge"), ("nemo", "nemo"), ("none", "none stated")])
def test_every_estimate_prints_the_stack_it_priced(capsys, software, printed):
    argv = ["estimate", "llama3-8b", "--device", "h100-sxm", "--dp", "8", "--global-batch-size", "32"]
    argv += ["--software", software] if software else []
    assert main(argv) == 0
    stack = [line for line in capsys.readouterr().out.splitlines() if line.startswith("stack: ")]
    assert len(stack) == 1 and printed in stack[0] and ("the default" in stack[0]) == (software is None)
    assert main(argv + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["software"] == (None if software == "none" else printed)


def test_with_no_stack_named_the_command_line_prices_nvidias_recipes_and_none_prices_as_stated(capsys):
    """The default stack is Megatron-Core as NVIDIA's recipes run it (docs/STACKS.md): a dense TP layout gets
    its TP comm overlap; ``--software none`` is the strategy exactly as stated, as Python's default is."""
    import ndcost

    argv = ["estimate", "llama3-8b", "--device", "h100-sxm", "--dp", "2", "--tp", "4", "--global-batch-size", "32",
            "--json"]
    steps = {}
    for software in (None, "megatron-bridge", "none"):
        assert main(argv + (["--software", software] if software else [])) == 0
        steps[software] = json.loads(capsys.readouterr().out)["step_time"]
    assert steps[None] == steps["megatron-bridge"] != steps["none"]
    model, cluster = ndcost.Model.from_catalog("llama3-8b"), ndcost.Cluster("h100-sxm", 8)
    spec = ndcost.ExecSpec(dp=2, tp=4, global_batch_size=32)
    assert steps["none"] == ndcost.estimate(model, spec, cluster).step_time
    assert steps[None] == ndcost.estimate(model, spec, cluster, software="megatron-bridge").step_time
    # ND's units know no stack: the drop-in prices as HyperParallel's estimator does
    assert main(argv[:-1] + ["--units", "nd", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["software"] is None


def test_nvidias_70b_recipe_with_software_nemo_alone_is_the_validated_figure(capsys):
    """dgxc_llama31_70b_bf16_64gpu (NeMo 24.09, TP 4 PP 4 CP 2 VPP 5 on 64 H100): its strategy's degrees and batch
    with ``--software nemo`` and no other stack flag price what ``validate --builtin h100`` prices for the row
    (its facts file states the stack field by field) within 1%."""
    from ndcost.io.validation import BUILTIN_RUNS, validate_runs

    report = validate_runs(BUILTIN_RUNS["h100"])
    row = next(r for r in report.rows if r.id == "dgxc_llama31_70b_bf16_64gpu")
    assert main(["estimate", "llama3.1-70b", "--device", "h100-sxm", "--devices", "64", "--tp", "4", "--pp", "4",
                 "--cp", "2", "--vpp", "5", "--dp", "2", "--micro-batch-size", "1", "--global-batch-size", "128",
                 "--seq-length", "8192", "--software", "nemo", "--json"]) == 0
    step = json.loads(capsys.readouterr().out)["step_time"]
    assert step == pytest.approx(row.estimate_s, rel=0.01)


def test_a_runs_file_row_that_names_no_stack_ran_on_the_default_one(tmp_path):
    """A row of the user's own runs file with no ``software`` is priced on the default stack, as the command line
    prices it; ``software: none`` prices it as stated."""
    import yaml

    from ndcost.io.validation import validate_runs
    from ndcost.spec.software_rates import DEFAULT_SOFTWARE

    doc = yaml.safe_load((ROOT / "docs" / "examples" / "h100_runs_in_row.yaml").read_text(encoding="utf-8"))
    row = next(r for r in doc["runs"] if r["id"] == "dgxc_llama31_70b_bf16_64gpu")
    row["strategy"] = {k: v for k, v in row["strategy"].items() if k not in ("software", "tp_comm_overlap",
                                                                            "overlap_grad_reduce")}
    steps = {}
    for software in (None, DEFAULT_SOFTWARE, "none"):
        strategy = dict(row["strategy"], **({"software": software} if software else {}))
        path = tmp_path / f"{software}.yaml"
        path.write_text(yaml.safe_dump({**doc, "runs": [dict(row, strategy=strategy)]}))
        (result,) = validate_runs(path).rows
        steps[software] = result.estimate_s
    assert steps[None] == steps[DEFAULT_SOFTWARE] != steps["none"]
