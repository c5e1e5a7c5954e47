"""plan_recompute: per-layer recompute chosen per stage within a memory budget."""
from __future__ import annotations

import pytest

import ndcost
from ndcost.kernels.columns import OPTION_FULL, OPTION_NONE, SECONDS_STAGE
from ndcost.price.recompute_plan import kind_profile, plan_recompute
from ndcost.tables.seconds import seconds_layer_time

GiB = 2**30
UNITS = ("seconds", "nd")


@pytest.fixture(scope="module")
def case():
    model = ndcost.Model.from_catalog("llama3-70b")
    spec = ndcost.ExecSpec(dp=2, tp=8, pp=4, global_batch_size=64, seq_length=8192, sequence_parallel=True,
                           recompute="full")
    return model, spec, ndcost.Cluster("h100-sxm", num_devices=64)


def test_a_budget_that_fits_the_plain_layers_recomputes_nothing(case):
    model, spec, cluster = case
    # in seconds units the budget is what the device holds (allocator slack and fixed costs in)
    plain = ndcost.estimate(model, spec.replace(recompute="none"), cluster)
    plan = plan_recompute(model, spec, cluster, memory_limit=plain.memory.device_peak + 2 * GiB)
    assert plan.ranges == ()
    assert plan.feasible
    # against the spec's full recompute, every stage saves the re-run it no longer does
    assert all(saved > 0 for saved in plan.stage_savings)


@pytest.mark.parametrize("limit_gib", [30, 33, 38, 44])
@pytest.mark.parametrize("units", UNITS)
def test_a_plan_never_exceeds_its_budget(case, limit_gib, units):
    model, spec, cluster = case
    plan = plan_recompute(model, spec, cluster, memory_limit=limit_gib * GiB, units=units)
    # ND units budget the stage totals; seconds what the device holds: the tensors' share of it
    budget = limit_gib * GiB
    if units == "seconds":
        from ndcost.tables.memory_overheads import tensor_budget

        budget = tensor_budget(budget, spec, cluster.memory_reserve_bytes)
    if not plan.feasible:
        # only where even recomputing every layer in full leaves the peak over the budget
        full = ndcost.estimate(model, spec.replace(recompute="full"), cluster, units="nd")
        assert full.memory.peak > budget
        return
    assert max(plan.stage_memory) <= budget
    # and what the plan states is what the estimate then prices
    planned = ndcost.estimate(model, plan.spec, cluster, units="nd")
    assert planned.memory.peak == pytest.approx(max(plan.stage_memory), rel=1e-12)


@pytest.mark.parametrize("units", UNITS)
def test_tighter_budgets_recompute_more_and_run_slower(case, units):
    """The plan minimises the times of the units it is asked for, so the estimate in those units orders it."""
    model, spec, cluster = case
    times = []
    for limit in (44, 38, 33, 30):
        plan = plan_recompute(model, spec, cluster, memory_limit=limit * GiB, units=units)
        times.append(ndcost.estimate(model, plan.spec, cluster, units=units).step_time)
    assert times == sorted(times)
    assert times[0] < times[-1]


def test_an_impossible_budget_is_reported_infeasible(case):
    model, spec, cluster = case
    plan = plan_recompute(model, spec, cluster, memory_limit=8 * GiB)
    assert not plan.feasible


@pytest.mark.parametrize("units", UNITS)
def test_profile_full_keeps_only_the_input(case, units):
    model, spec, cluster = case
    profile = kind_profile(model, spec, cluster, 0, units=units)
    assert profile.full.memory_per_micro_batch < min(c.memory_per_micro_batch for c in profile.alone.values())
    assert profile.full.backward_time > profile.plain.backward_time


def test_nd_profiles_are_nds_layer_times(case):
    model, spec, cluster = case
    profile = kind_profile(model, spec, cluster, 0, units="nd")
    assert (profile.forward_time, profile.plain.backward_time) == ndcost.layer_times(model, spec, cluster, 0, "none")
    assert profile.full.backward_time == ndcost.layer_times(model, spec, cluster, 0, "full")[1]


@pytest.mark.parametrize("call", [kind_profile, plan_recompute])
def test_unknown_units_are_refused(case, call):
    model, spec, cluster = case
    args = (0,) if call is kind_profile else ()
    with pytest.raises(ndcost.SpecError, match="units.*'ms'"):
        call(model, spec, cluster, *args, units="ms")


# Every field a micro-batch of a layer spends time on in seconds mode (seconds_layer_time's sum).
_MICRO_BATCH_FIELDS = ("fw", "bw", "bw_w", "rc", "tp", "cp", "ep", "dp_mb_gather", "dp_mb_reduce")


def test_seconds_layer_times_add_up_to_what_a_stage_charges():
    """Full recompute adds, per layer, what seconds_layer_time says it adds: on one stage of
    n layers the stage's micro-batch sums grow by n times the layer's (embedding and output
    are priced alike in both specs, so they cancel)."""
    model = ndcost.Model.from_catalog("llama3-8b")
    spec = ndcost.ExecSpec(dp=1, tp=8, pp=1, global_batch_size=8, seq_length=8192, sequence_parallel=True,
                           recompute="none")
    cluster = ndcost.Cluster("h100-sxm", num_devices=8)

    def stage_total(recompute):
        row = ndcost.estimate(model, spec.replace(recompute=recompute), cluster).details["stage_sums"][0]
        return sum(row[SECONDS_STAGE[name]] for name in _MICRO_BATCH_FIELDS)

    fw_none, bw_none = seconds_layer_time(model, spec, cluster, 0, OPTION_NONE, 0xFF)
    fw_full, bw_full = seconds_layer_time(model, spec, cluster, 0, OPTION_FULL, 0)
    assert fw_full == fw_none > 0
    assert bw_full > bw_none > fw_none  # backward is about twice forward, full recompute adds one more
    n_layers = model.kind_counts()[0][0]
    assert stage_total("full") - stage_total("none") == pytest.approx(n_layers * (bw_full - bw_none), rel=1e-12)


def test_seconds_refuses_nd_only_arguments(case):
    model, spec, cluster = case
    with pytest.raises(ndcost.SpecError, match="stage_savings"):
        ndcost.estimate(model, spec, cluster, stage_savings=[0.0] * spec.pp)
    with pytest.raises(ndcost.SpecError, match="stage_focused"):
        ndcost.estimate(model, spec, cluster, stage_focused=0)
