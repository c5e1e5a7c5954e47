"""Bad input found by a fuzz of the command line and the API (stop 47), each now one clear refusal.

* A file argument that is a pipe or a device is refused before it is read (a FIFO blocked, /dev/zero never
  ended); a document nested past Python's recursion limit or holding a number of over 4,300 digits is a
  SpecError (it was a RecursionError or ValueError traceback); the message names the argument, not the path.
* argparse's refusals are one line (they printed the whole usage first: 71 lines for ``estimate``).
* ``estimate_many(..., software=...)`` keeps each bad row's reason (the stack's columns were rebuilt decoded,
  which priced a ZeRO stage of 1.5) and prices the rest when a row's degrees are 0 (a ZeroDivisionError).
* A census entry that is not a mapping is a SpecError; census bytes are bounded (1e308 gave inf and NaN memory).
* The usable HBM is never negative: where the fixed costs alone exceed the HBM it is 0 and the headroom says by
  how much.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import ndcost
from ndcost.cli.main import main

STRATEGY = ["--device", "h100-sxm", "--devices", "8", "--dp", "8", "--global-batch-size", "16",
            "--seq-length", "2048"]


@pytest.fixture
def odd_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (tmp_path / "deep.yaml").write_text("[" * 50_000)
    (tmp_path / "long.json").write_text('{"hidden_size": ' + "9" * 5000 + "}")
    return tmp_path


def _one_line(capsys, argv) -> str:
    try:
        status = main(argv)
    except SystemExit as exc:        # argparse's own refusals
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("argv, named", [
    (["estimate", "llama3-8b", *STRATEGY, "--census", "fifo"], "'census'"),
    (["estimate", "llama3-8b", *STRATEGY, "--cluster", "/dev/zero"], "'cluster'"),
    (["estimate", "llama3-8b", *STRATEGY, "--rates", "/dev/zero"], "'rates'"),
    (["estimate", "llama3-8b", *STRATEGY, "--recompute-plan", "/dev/zero"], "'--recompute-plan'"),
    (["estimate", "llama3-8b", *STRATEGY, "--units", "nd", "--ratios", "/dev/urandom"], "regular file (a ratios file)"),
    (["estimate", "llama3-8b", *STRATEGY, "--recompute-plan", "{"], "'--recompute-plan'"),
    (["show", "deep.json"], "recursion limit"),
    (["show", "deep.yaml"], "recursion limit"),
    (["show", "long.json"], "4,300 digits"),
    (["validate", "deep.yaml"], "recursion limit"),
    (["estimate", "llama3-8b", *STRATEGY, "--cluster", "deep.yaml"], "recursion limit"),
    (["estimate", "llama3-8b", *STRATEGY, "--census", "deep.json"], "recursion limit"),
])
def test_odd_files_are_one_line_naming_the_argument(odd_files, capsys, argv, named):
    assert named in _one_line(capsys, argv)


@pytest.mark.parametrize("argv, named", [
    (["estimate", "llama3-8b", "--device", "h100-sxm", "--tp", "2.5"], "argument --tp: invalid int value"),
    (["estimate", "llama3-8b", "--recompute", "bogus"], "argument --recompute: invalid choice"),
    (["estimate", "llama3-8b", "--no-such-flag"], "unrecognized arguments"),
    (["plot", "bogus"], "invalid choice"),
    ([], "required"),
])
def test_argparse_refusals_are_one_line(capsys, argv, named):
    assert named in _one_line(capsys, argv)


def _batch(backend_name, columns, software):
    from ndcost import _backend

    model = ndcost.Model.from_catalog("llama3-8b")
    candidates = ndcost.Candidates.from_arrays(global_batch_size=32, seq_length=2048, **columns)
    with _backend.use(backend_name):
        return candidates, ndcost.estimate_many(model, candidates, ndcost.Cluster("h100-sxm", 8), software=software)


@pytest.mark.parametrize("columns, software", [
    ({"dp": [8, 8], "zero_stage": [1, 1.5]}, "megatron-bridge"),
    ({"dp": [8, 8], "zero_stage": [3, 1.5]}, "torchtitan-eager"),
    ({"dp": [8, 8], "sequence_parallel": [False, "x"]}, "megatron-bridge"),
    ({"dp": [8, 8], "sequence_parallel": [False, "x"]}, "torchtitan-eager"),
    ({"dp": [8, 0]}, "megatron-bridge"),
    ({"dp": [8, 0]}, "torchtitan-eager"),
    ({"dp": [8, 8], "pp": [1, 0]}, "torchtitan-eager"),
])
def test_a_stack_keeps_a_bad_rows_reason_and_prices_the_rest(backend_name, columns, software):
    candidates, result = _batch(backend_name, columns, software)
    assert candidates.reason[0] == 0 and candidates.reason[1] != 0
    assert result.reason.tolist() == candidates.reason.tolist()
    assert np.isfinite(result.step_time[0]) and result.step_time[0] > 0 and np.isnan(result.step_time[1])


@pytest.mark.parametrize("census", [[1], ["dense"], [{"kind": "dense", "foo": 1}], [{"kind": "dense"}]])
def test_a_census_entry_that_is_not_one_is_a_spec_error(census):
    with pytest.raises(ndcost.SpecError, match="'census' parameter of Model"):
        ndcost.Model.from_catalog("llama3-8b").with_census(census)


@pytest.mark.parametrize("field", ["saved", "saved_tp", "selective", "selective_tp"])
def test_census_bytes_are_bounded(field):
    from ndcost.spec.census import KindCensus, MAX_BYTES_PER_TOKEN

    fields = {"saved": 1.0, "saved_tp": 1.0, "selective": 1.0, "selective_tp": 1.0}
    KindCensus("dense", 0.5, 0.5, **{**fields, field: MAX_BYTES_PER_TOKEN})
    with pytest.raises(ndcost.SpecError, match=f"'{field}' parameter of KindCensus"):
        KindCensus("dense", 0.5, 0.5, **{**fields, field: 1e308})


def test_the_usable_hbm_is_never_negative(backend_name):
    from ndcost import _backend

    spec = ndcost.ExecSpec(dp=8, global_batch_size=16, seq_length=2048)
    with _backend.use(backend_name):
        memory = ndcost.estimate(ndcost.Model.from_catalog("llama3-8b"), spec,
                                 ndcost.Cluster("h100-sxm", 8, hbm_bytes=1.5e9)).memory
    assert memory.fixed_bytes > 1.5e9 and memory.usable_bytes == 0.0
    assert memory.headroom == pytest.approx(1.5e9 - memory.fixed_bytes - memory.peak_reserved, rel=1e-12)
    assert memory.headroom < 0


@pytest.mark.parametrize("software", ["torchtitan-eager", "torchtitan-compile", "hf-eager", "megatron-bridge"])
def test_a_stacked_batch_prices_each_row_as_estimate_prices_its_spec(backend_name, software):
    """A row states the fields it sets apart from ExecSpec's defaults, as estimate() reads one spec: a neighbour
    stating zero_stage 0 no longer makes a default row's ZeRO-1 'stated' (it was priced 0.884 s, not 0.810)."""
    from ndcost import _backend

    model, cluster = ndcost.Model.from_catalog("llama3-8b"), ndcost.Cluster("h100-sxm", 8)
    specs = [ndcost.ExecSpec(**{"dp": 8, "global_batch_size": 32, "seq_length": 2048, **fields}) for fields in (
        {}, {"zero_stage": 0}, {"zero_stage": 3}, {"micro_batch_size": 2}, {"tp": 2, "dp": 4},
        {"recompute": "full"}, {"pp": 2, "dp": 4})]
    with _backend.use(backend_name):
        one = [ndcost.estimate(model, spec, cluster, software=software).step_time for spec in specs]
        batch = ndcost.estimate_many(model, ndcost.Candidates.from_specs(specs), cluster, software=software)
    assert batch.step_time.tolist() == pytest.approx(one, rel=1e-12)
