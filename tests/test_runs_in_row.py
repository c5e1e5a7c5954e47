"""``ndcost validate FILE`` for a user's own runs: a row states its model, strategy, stack and hardware in-row,
and the shipped H100 runs so written (docs/examples/h100_runs_in_row.yaml) price as the builtin file does."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ndcost.io.validation import BUILTIN_RUNS, validate_runs

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "h100_runs_in_row.yaml"


def test_the_self_contained_h100_file_reproduces_the_builtin_mean_error():
    """Every row's stack stated in-row, no facts file: the mean error within 0.1 point of
    ``ndcost validate --builtin h100`` (and, row by row, the same estimate)."""
    mine, builtin = validate_runs(EXAMPLE), validate_runs(BUILTIN_RUNS["h100"])
    assert len(mine.scored) == len(builtin.scored) == 31
    assert abs(mine.mae - builtin.mae) <= 0.001
    for ours, theirs in zip(mine.rows, builtin.rows):
        assert ours.id == theirs.id
        assert ours.estimate_s == pytest.approx(theirs.estimate_s, rel=1e-9), ours.id
        assert ours.measured_s == pytest.approx(theirs.measured_s, rel=1e-12), ours.id
    assert "facts" not in yaml.safe_load(EXAMPLE.read_text())


_ROW = {"id": "mine_70b_64gpu", "model": {"catalog": "llama3.1-70b", "seq_len": 8192},
        "strategy": {"gpus": 64, "tp": 4, "pp": 4, "cp": 2, "vpp": 5, "micro_batch": 1, "global_batch": 128,
                     "recompute": "none", "sequence_parallel": True, "software": "nemo", "precision": "fp8",
                     "fp8_recipe": "current", "tp_comm_overlap": True},
        "hardware": "dgx", "measured": {"iteration_s": 11.0}}


def _report(tmp_path, **changes):
    row = {**_ROW, **{k: v for k, v in changes.items() if k != "strategy"}}
    row["strategy"] = {**_ROW["strategy"], **changes.get("strategy", {})}
    row["strategy"] = {k: v for k, v in row["strategy"].items() if v is not None}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"hardware": {"dgx": {"device": "h100-sxm"}}, "runs": [row]}))
    return validate_runs(path).rows[0]


def test_a_row_with_cp_and_a_catalog_alias_is_priced_with_its_stack(tmp_path):
    row = _report(tmp_path)
    assert row.skipped is None and row.estimate_s > 0
    assert any("software nemo, fp8_recipe current" in note for note in row.notes)
    plain = _report(tmp_path, strategy={"tp_comm_overlap": False})
    assert plain.estimate_s > row.estimate_s                      # the overlap is priced, not ignored


@pytest.mark.parametrize("strategy, field", [
    ({"recompute": None}, "recompute"), ({"micro_batch": None}, "micro_batch"), ({"global_batch": None}, "global_batch"),
    ({"gpus": 60}, "gpus"), ({"dp": 3}, "dp"), ({"tp_comm_overlaps": True}, "strategy.tp_comm_overlaps"),
    ({"precision": "bf16"}, "fp8_recipe"), ({"software": "nemmo"}, "software"),
])
def test_a_row_that_lacks_or_contradicts_what_it_needs_is_refused_naming_the_field(tmp_path, strategy, field):
    row = _report(tmp_path, strategy=strategy)
    assert row.skipped is not None and f"'{field}'" in row.skipped, row.skipped


def test_model_rows_refuse_what_they_cannot_mean(tmp_path):
    row = _report(tmp_path, model={"catalog": "llama3.1-70b", "seq_len": 8192, "layers": 79})
    assert "'model.layers'" in row.skipped
    gated = _report(tmp_path, model={"layers": 32, "hidden": 4096, "heads": 32, "ffn_hidden": 14336, "vocab": 128256,
                                     "seq_len": 8192, "act": "SwiGLU"})
    assert "'model.act'" in gated.skipped
    named = _report(tmp_path, model="meta-llama/Llama-3.1-70B", strategy={"seq_len": 8192})
    assert named.skipped is None and named.estimate_s == pytest.approx(_report(tmp_path).estimate_s, rel=1e-12)


def test_rows_in_the_2021_format_take_cp_in_their_degrees(tmp_path):
    row = {"id": "old_1p3b_16gpu", "model": {"layers": 24, "hidden": 2048, "heads": 16, "ffn_hidden": 8192,
                                              "vocab": 51200, "seq_len": 2048},
           "strategy": {"gpus": 16, "tp": 2, "pp": 2, "cp": 2, "dp": 2, "global_batch": 64, "recompute": "full",
                        "precision": "bf16"},
           "hardware": "selene", "measured": {"iteration_s": 1.0}}
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump({"hardware": {"selene": {"gpu": "NVIDIA A100 SXM4 80GB"}}, "runs": [row]}))
    assert validate_runs(path).rows[0].skipped is None
