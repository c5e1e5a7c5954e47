"""plan_recompute: per-layer recompute chosen per stage within a memory budget."""
from __future__ import annotations

import pytest

import ndcost
from ndcost.recompute_plan import kind_profile, plan_recompute

GiB = 2**30


@pytest.fixture(scope="module")
def case():
    model = ndcost.Model.from_catalog("llama3-70b")
    spec = ndcost.ExecSpec(dp=2, tp=8, pp=4, global_batch_size=64, seq_length=8192, sequence_parallel=True,
                           recompute="full")
    return model, spec, ndcost.Cluster("h100-sxm", num_devices=64)


def test_a_budget_that_fits_the_plain_layers_recomputes_nothing(case):
    model, spec, cluster = case
    plain = ndcost.estimate(model, spec.replace(recompute="none"), cluster, units="nd")
    plan = plan_recompute(model, spec, cluster, memory_limit=plain.memory.peak + 2 * GiB)
    assert plan.ranges == ()
    assert plan.feasible
    # against the spec's full recompute, every stage saves the re-run it no longer does
    assert all(saved > 0 for saved in plan.stage_savings)


@pytest.mark.parametrize("limit_gib", [30, 33, 38, 44])
def test_a_plan_never_exceeds_its_budget(case, limit_gib):
    model, spec, cluster = case
    plan = plan_recompute(model, spec, cluster, memory_limit=limit_gib * GiB)
    assert plan.feasible
    assert max(plan.stage_memory) <= limit_gib * GiB
    # and what the plan states is what the estimate then prices
    planned = ndcost.estimate(model, plan.spec, cluster, units="nd")
    assert planned.memory.peak == pytest.approx(max(plan.stage_memory), rel=1e-12)


def test_tighter_budgets_recompute_more_and_run_slower(case):
    model, spec, cluster = case
    times = []
    for limit in (44, 38, 33, 30):
        plan = plan_recompute(model, spec, cluster, memory_limit=limit * GiB)
        times.append(ndcost.estimate(model, plan.spec, cluster, units="nd").step_time)
    assert times == sorted(times)


def test_an_impossible_budget_is_reported_infeasible(case):
    model, spec, cluster = case
    plan = plan_recompute(model, spec, cluster, memory_limit=8 * GiB)
    assert not plan.feasible


def test_profile_full_keeps_only_the_input(case):
    model, spec, cluster = case
    profile = kind_profile(model, spec, cluster, 0)
    assert profile.full.memory_per_micro_batch < min(c.memory_per_micro_batch for c in profile.alone.values())
    assert profile.full.backward_time > profile.plain.backward_time
