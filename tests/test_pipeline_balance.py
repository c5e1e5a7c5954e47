"""balance_pipeline: layers moved off the slowest stages while the step gets faster and fits."""
from __future__ import annotations

import pytest

import ndcost
from ndcost.tables.layout import placed_counts
from ndcost.price.pipeline_balance import balance_pipeline

GiB = 2**30


@pytest.fixture(scope="module")
def vlm():
    """A VLM whose tower (16,384 patches a sample) runs on the first stage: the even split is slow."""
    model = ndcost.Model.from_catalog("qwen2.5-vl-7b").with_vision_tokens(16384)
    spec = ndcost.ExecSpec(dp=4, tp=2, pp=4, global_batch_size=256, seq_length=8192, sequence_parallel=True,
                           recompute="selective")
    return model, spec, ndcost.Cluster("h100-sxm", num_devices=32)


@pytest.mark.parametrize("units", ["seconds", "nd"])
def test_the_tower_stage_gives_layers_away(vlm, units):
    model, spec, cluster = vlm
    even = ndcost.estimate(model, spec, cluster, units=units)
    balanced = balance_pipeline(model, spec, cluster, units=units)
    assert balanced.moves > 0
    assert balanced.estimate.step_time < even.step_time
    # the first stage (tower + embedding) now holds fewer text layers than the even 7
    assert balanced.layers_per_stage[0] < 7 and sum(balanced.layers_per_stage) == model.num_hidden_layers
    assert balanced.spec.offset is not None and balanced.spec.replace(offset=None) == spec
    # what it reports is what the estimate says of the spec it returns
    again = ndcost.estimate(model, balanced.spec, cluster, units=units)
    assert again.step_time == balanced.estimate.step_time
    assert again.memory.peak <= cluster.device.memory_bytes


def test_seconds_balance_is_worth_a_third_of_the_step(vlm):
    model, spec, cluster = vlm
    even = ndcost.estimate(model, spec, cluster)
    balanced = balance_pipeline(model, spec, cluster)
    assert balanced.estimate.step_time < 0.75 * even.step_time


def test_no_move_that_would_not_fit():
    """From a start with few layers on the first stage, layers flow back to it; the first stage
    keeps the most micro-batches in flight (1F1B), so its memory grows. Under a budget equal
    to the start's peak the climb stops short of the unbounded one and stays within it."""
    model = ndcost.Model.from_catalog("llama3-8b")
    cluster = ndcost.Cluster("h100-sxm", num_devices=8)
    spec = ndcost.ExecSpec(dp=2, tp=1, pp=4, global_batch_size=64, seq_length=4096, recompute="none",
                           pp_partition=(4, 10, 9, 9))
    start = ndcost.estimate(model, spec, cluster)
    free = balance_pipeline(model, spec, cluster, memory_limit=1e15)
    assert free.estimate.memory.peak > start.memory.peak          # the unbounded climb needs more
    bounded = balance_pipeline(model, spec, cluster, memory_limit=start.memory.peak)
    assert bounded.estimate.memory.peak <= start.memory.peak
    assert free.estimate.step_time <= bounded.estimate.step_time < start.step_time


def test_move_budget_and_single_stage(vlm):
    model, spec, cluster = vlm
    assert balance_pipeline(model, spec, cluster, max_moves=0).spec is spec
    assert balance_pipeline(model, spec, cluster, max_moves=1).moves == 1
    flat = spec.replace(dp=16, pp=1)
    one = balance_pipeline(model, flat, ndcost.Cluster("h100-sxm", num_devices=32))
    assert one.moves == 0 and one.spec is flat


def test_interleaved_and_partitioned_starts(vlm):
    """vpp > 1 moves layers chunk by chunk; a pp_partition start becomes an offset."""
    model, spec, cluster = vlm
    inter = spec.replace(vpp=2, pp_schedule="interleaved")
    balanced = balance_pipeline(model, inter, cluster)
    assert balanced.moves > 0 and len(balanced.spec.offset) == 2
    counts = placed_counts(model, balanced.spec)
    assert sum(map(sum, counts)) == model.num_hidden_layers and min(map(min, counts)) >= 0
    parted = spec.replace(pp_partition=(7, 7, 7, 7))
    from_partition = balance_pipeline(model, parted, cluster)
    assert from_partition.spec.pp_partition is None
    assert from_partition.estimate.step_time == balance_pipeline(model, spec, cluster).estimate.step_time


@pytest.mark.parametrize("kwargs, parameter", [({"units": "ms"}, "units"), ({"max_moves": -1}, "max_moves"),
                                               ({"max_moves": True}, "max_moves")])
def test_bad_arguments(vlm, kwargs, parameter):
    model, spec, cluster = vlm
    with pytest.raises(ndcost.SpecError, match=f"'{parameter}' parameter"):
        balance_pipeline(model, spec, cluster, **kwargs)


def test_search_offers_the_rebalanced_pipeline(vlm):
    model, spec, cluster = vlm
    result = ndcost.search(model, cluster, global_batch_size=256, seq_length=8192, pp=4, tp=2, top=5)
    best = result.best
    assert best.rebalanced and best.spec.offset is not None
    even = [r for r in result.results if not r.rebalanced]
    assert not even or best.estimate.step_time < even[0].estimate.step_time
    assert best.to_dict()["strategy"]["offset"] == best.spec.offset
    none = ndcost.search(model, cluster, global_batch_size=256, seq_length=8192, pp=4, tp=2, top=5, balance=0)
    assert not any(r.rebalanced for r in none.results)
    with pytest.raises(ndcost.SpecError, match="'balance' parameter"):
        ndcost.search(model, cluster, global_batch_size=256, seq_length=8192, balance=-1)
