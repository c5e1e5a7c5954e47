"""The torchtitan memory rows priced by the preset alone (issue 24): each row of ``validate --memory``, stated as a
user states a torchtitan run -- its degrees, batch, sequence, checkpointing mode, schedule and float8 -- with
``software="torchtitan-compile"`` and no facts, prices the peak the validation prices."""
from __future__ import annotations

import pytest

import ndcost
from ndcost.files import read_mapping
from ndcost.io.validation_memory import MEMORY_FACTS, build_memory_run

ROWS = read_mapping(MEMORY_FACTS, "memory facts")["rows"]


@pytest.mark.parametrize("row", ROWS, ids=[row["id"] for row in ROWS])
def test_a_torchtitan_memory_row_is_its_preset_and_its_strategy(row):
    model, spec, cluster, _ = build_memory_run(row)
    plain = ndcost.Model.from_catalog(row["model"]["catalog"])
    # what the user states: no widths, no loss bytes, no micro-batching, no census -- the preset's
    stated = ndcost.ExecSpec(dp=spec.dp, tp=spec.tp, pp=spec.pp, cp=spec.cp, vpp=spec.vpp,
                             global_batch_size=spec.global_batch_size, seq_length=spec.seq_length,
                             recompute=spec.recompute, pp_schedule=spec.pp_schedule, precision=spec.precision)
    by_preset = ndcost.estimate(plain, stated, cluster, software="torchtitan-compile")
    by_facts = ndcost.estimate(model, spec, cluster, rates="torchtitan-compile")
    assert by_preset.memory.peak_allocated == pytest.approx(by_facts.memory.peak_allocated, rel=1e-12)
