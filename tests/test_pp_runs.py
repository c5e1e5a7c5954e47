"""A step's micro-batches run as several whole pipeline schedules (``ExecSpec.pp_runs``): gradient accumulation
over torch.distributed.pipelining runs, as NeMo AutoModel's and torchtitan's loops call ``schedule.step()`` once
per local batch, each run filling and draining the pipeline.

By hand on the combine kernel (both backends), through estimate / estimate_many (a bad row gets its reason, the
rest are priced), the rules (SpecError naming the field, exit 2 on the command line) and the validation row that
states it (NeMo AutoModel's Kimi K2: GA 2 over PP 8).
"""
from __future__ import annotations

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import PART, PART_NAMES, SECONDS_CAND, SECONDS_CAND_FIELDS
from ndcost.kernels.columns import SECONDS_STAGE, SECONDS_STAGE_FIELDS
from ndcost.tables.reasons import REASON_CODES

MODEL = "llama3-8b"


def _combine(kernels, per_stage: list[float], m: int, runs: int, schedule: int = 0, vp: int = 1):
    """seconds_combine over stages whose micro-batch takes *per_stage* seconds of forward compute each."""
    stage = np.zeros((len(per_stage), len(SECONDS_STAGE_FIELDS)))
    for i, seconds in enumerate(per_stage):
        stage[i, SECONDS_STAGE["fw"]] = seconds
        stage[i, SECONDS_STAGE["layers"]] = 1.0
    cand = np.zeros(len(SECONDS_CAND_FIELDS))
    cand[SECONDS_CAND["m"]], cand[SECONDS_CAND["pp_runs"]] = m, runs
    cand[SECONDS_CAND["schedule"]], cand[SECONDS_CAND["vp"]] = schedule, vp
    cand[SECONDS_CAND["seq_split"]] = 1
    parts, times = np.zeros(len(PART_NAMES)), np.zeros(len(per_stage))
    return kernels.seconds_combine(stage, cand, parts, times), parts


def test_each_run_fills_and_drains_by_hand(kernels):
    """1F1B over stages of 1, 2, 1, 1 s: m·M + r·(S - M) -- 8 micro-batches, one run 8·2 + 3 = 19 s, two runs of
    four 8·2 + 2·3 = 22 s; the bubble part is the term beyond m·M."""
    one, parts_one = _combine(kernels, [1.0, 2.0, 1.0, 1.0], 8, 1)
    two, parts_two = _combine(kernels, [1.0, 2.0, 1.0, 1.0], 8, 2)
    assert one == pytest.approx(19.0, rel=1e-12) and two == pytest.approx(22.0, rel=1e-12)
    assert parts_two[PART["bubble"]] == pytest.approx(2 * parts_one[PART["bubble"]], rel=1e-12)
    assert parts_two[PART["fw_compute"]] == parts_one[PART["fw_compute"]]


def test_a_non_positive_run_count_is_nan(kernels):
    step, parts = _combine(kernels, [1.0, 1.0], 4, 0)
    assert np.isnan(step) and np.isnan(parts).all()


def test_the_estimate_doubles_the_bubble_and_nothing_else(kernels):
    model, cluster = ndcost.Model.from_catalog(MODEL), ndcost.Cluster("h100-sxm", 8)
    base = ndcost.estimate(model, ndcost.ExecSpec(dp=2, pp=4, global_batch_size=16), cluster, units="seconds")
    runs = ndcost.estimate(model, ndcost.ExecSpec(dp=2, pp=4, global_batch_size=16, pp_runs=2), cluster,
                           units="seconds")
    assert runs.parts["bubble"] == pytest.approx(2 * base.parts["bubble"], rel=1e-12)
    assert runs.step_time == pytest.approx(base.step_time + base.parts["bubble"], rel=1e-12)
    for name in ("fw_compute", "bw_compute", "pp_comm", "dp_reduce"):
        assert runs.parts[name] == pytest.approx(base.parts[name], rel=1e-12)
    assert runs.memory == base.memory             # each run holds what one schedule holds


def test_a_batch_prices_good_rows_as_estimate_and_gives_the_bad_one_its_reason():
    model, cluster = ndcost.Model.from_catalog(MODEL), ndcost.Cluster("h100-sxm", 8)
    cands = ndcost.Candidates.from_arrays(dp=[2, 2, 1, 2], pp=[4, 4, 8, 4], global_batch_size=[16] * 4,
                                          pp_runs=[1, 2, 2, 3])
    batch = ndcost.estimate_many(model, cands, cluster, units="seconds")
    assert batch.reason.tolist()[3] == REASON_CODES["pp_runs"] and np.isnan(batch.step_time[3])
    for row, (dp, pp, runs) in enumerate([(2, 4, 1), (2, 4, 2), (1, 8, 2)]):
        single = ndcost.estimate(model, ndcost.ExecSpec(dp=dp, pp=pp, global_batch_size=16, pp_runs=runs), cluster,
                                 units="seconds")
        assert batch.step_time[row] == pytest.approx(single.step_time, rel=1e-12)


def test_a_run_keeps_the_schedules_rules():
    """Each run is a schedule: interleaved needs a run's micro-batches to be a multiple of pp, DualPipeV 2·pp."""
    model, cluster = ndcost.Model.from_catalog(MODEL), ndcost.Cluster("h100-sxm", 8)
    ok = ndcost.ExecSpec(dp=2, pp=4, vpp=2, global_batch_size=16, pp_runs=2)
    assert ndcost.estimate(model, ok, cluster, units="seconds").step_time > 0
    with pytest.raises(ndcost.SpecError, match="micro"):
        ndcost.estimate(model, ndcost.ExecSpec(dp=2, pp=4, vpp=2, global_batch_size=16, pp_runs=4), cluster,
                        units="seconds")
    with pytest.raises(ndcost.SpecError, match="2\\*pp"):
        ndcost.ExecSpec(dp=1, pp=4, vpp=2, pp_schedule="dualpipev", global_batch_size=16, pp_runs=4)


@pytest.mark.parametrize("fields, words", [
    (dict(dp=8, global_batch_size=16, pp_runs=2), "pp is 1"),
    (dict(dp=2, pp=4, global_batch_size=16, pp_runs=3), "divide the micro-batch count"),
    (dict(dp=2, pp=4, global_batch_size=16, pp_runs=0), "pp_runs"),
    (dict(dp=2, pp=4, global_batch_size=16, pp_runs=1.5), "pp_runs"),
])
def test_a_bad_run_count_is_a_spec_error_naming_it(fields, words):
    with pytest.raises(ndcost.SpecError, match="pp_runs") as caught:
        ndcost.ExecSpec(**fields)
    assert words in str(caught.value)


def test_the_command_line_states_it_and_refuses_a_bad_one(capsys):
    from ndcost.cli.main import main

    args = ["estimate", MODEL, "--devices", "8", "--device", "h100-sxm", "--dp", "2", "--pp", "4",
            "--global-batch-size", "16", "--units", "seconds"]
    assert main(args + ["--pp-runs", "2"]) == 0
    capsys.readouterr()
    assert main(args + ["--pp-runs", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pp_runs" in err and "Traceback" not in err


def test_the_validation_rows_read_it():
    from ndcost.files import read_mapping
    from ndcost.io.validation import BUILTIN_RUNS, build_row

    doc = read_mapping(BUILTIN_RUNS["moe"], "a runs file")
    runs = {row["id"]: build_row(row, doc.get("hardware") or {}, BUILTIN_RUNS["moe"]).spec.pp_runs
            for row in doc["runs"] if row["id"].startswith("automodel")}
    assert runs["automodel_h100_kimik2_bf16_256gpu"] == 2          # GBS 512 over 32 x LBS 8: GA 2
    assert runs["automodel_h100_deepseekv3_bf16_256gpu"] == 1      # 512 over 64 x 8: GA 1


def test_the_launchers_state_it_or_say_they_cannot():
    """torchtitan runs one schedule a local batch: pp_runs of them a step is a local batch of m / pp_runs
    micro-batches (its gradient accumulation: global / (local x dp) = pp_runs); Megatron-Core has one schedule."""
    from ndcost.io.emit import megatron_flags, torchtitan_toml

    model = ndcost.Model.from_catalog("llama3-70b")
    spec = ndcost.ExecSpec(dp=2, tp=8, pp=4, global_batch_size=64, pp_runs=2)
    lines = torchtitan_toml(model, spec).splitlines()
    assert "local_batch_size = 16" in lines and "global_batch_size = 64" in lines
    flags = megatron_flags(model, spec).splitlines()
    assert any("pp_runs 2" in line and line.startswith("# not stated") for line in flags)
