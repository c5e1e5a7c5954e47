"""Compute beside a running NCCL collective is slowed (``Rates.collective_overlap_slowdown``): the data-parallel tail
hidden under the last backward, the context-parallel ring under the attention core, NCCL's all-to-all beside the other
micro-batch of an overlapped pair; bad values refused by name; both backends.

"Overlapping computation and communication can result in an average computational slowdown of 18.9%, with a maximum
of 40.0% slowdown", against the same compute with nothing beside it (arXiv 2507.03114v1, abstract: GPT and LLaMA
models on 4 A100, H100, MI250 and MI210). Compute that takes 1 + s times as long while a collective of c seconds runs
beside it loses s / (1 + s) of those c seconds: the rate vector's ``ov_slow``.
"""
from __future__ import annotations

import math

import pytest

import ndcost
from ndcost.kernels.columns import PART_NAMES, RATE, SECONDS_LAYER_FIELDS, SECONDS_STAGE
from ndcost.spec.rates import Rates
from ndcost.tables.seconds import seconds_arrays
from seconds_runs import layer_times, run_seconds, stage_sums, with_rate

SLOW = 0.189 / 1.189
P = {name: i for i, name in enumerate(PART_NAMES)}
S = SECONDS_STAGE


@pytest.mark.parametrize("value", [-0.1, 1.5, math.nan, math.inf, True, "0.2"])
def test_a_bad_slowdown_is_refused_by_name(value):
    with pytest.raises(ndcost.SpecError, match="collective_overlap_slowdown"):
        Rates.for_device("h100-sxm").replace(collective_overlap_slowdown=value)


def test_the_default_is_the_published_average_on_every_part():
    for device in ("a100-80g", "h100-sxm", "b200", "gb200-nvl72"):
        rates = Rates.for_device(device)
        assert rates.collective_overlap_slowdown == 0.189
        assert "2507.03114" in rates.sources["collective_overlap_slowdown"]
    a = seconds_arrays(ndcost.Model.from_catalog("llama3-8b"), ndcost.ExecSpec(dp=8, global_batch_size=64),
                       ndcost.Cluster("h100-sxm", 8))
    assert a["rate"][RATE["ov_slow"]] == pytest.approx(SLOW, rel=1e-15)


def test_the_data_parallel_tail_by_hand(kernels):
    """Llama 3 8B on 64 H100, DP 64, ZeRO-1, the gradient reduce-scatter overlapped with the last backward and the
    parameter all-gather with the next forward: each is exposed as before (its hidden share bounded by the window, never
    the last layer's bucket) plus SLOW of what is hidden."""
    model = ndcost.Model.from_catalog("llama3-8b")
    spec = ndcost.ExecSpec(dp=64, global_batch_size=512, seq_length=8192, zero_stage=1, overlapped_grad_reduce=True,
                           overlapped_param_gather=True)
    a = seconds_arrays(model, spec, ndcost.Cluster("h100-sxm", 64))
    free = run_seconds(kernels, with_rate(a, ov_slow=0.0))
    slowed = run_seconds(kernels, a)
    stage = slowed[1][0]
    assert stage[S["ov_slow"]] == pytest.approx(SLOW, rel=1e-15)
    for part, raw in (("dp_reduce", stage[S["dp_reduce"]]), ("dp_comm", stage[S["dp_gather"]])):
        exposed = free[2][P[part]]
        assert 0.0 < exposed < raw
        assert slowed[2][P[part]] == pytest.approx(exposed + SLOW * (raw - exposed), rel=1e-12), part
    assert slowed[4][0] > free[4][0]


def test_the_ring_attention_exchange_by_hand(kernels):
    """Ring attention (CP 4) hides its KV exchange under the attention core; the core beside it is slowed."""
    model = ndcost.Model.from_catalog("llama3-8b")
    spec = ndcost.ExecSpec(dp=2, cp=4, global_batch_size=16, seq_length=131072, recompute="none")
    a = seconds_arrays(model, spec, ndcost.Cluster("h100-sxm", 8))
    layer = dict(zip(SECONDS_LAYER_FIELDS, layer_times(kernels, a)[0]))
    free = stage_sums(kernels, with_rate(a, ov_slow=0.0))[0]
    slowed = stage_sums(kernels, a)[0]
    layers = slowed[S["layers"]]
    hidden = (layer["cp_f"] + layer["cp_b"]) * layers - free[S["cp"]]
    assert hidden > 0.0
    assert slowed[S["cp"]] == pytest.approx(free[S["cp"]] + SLOW * hidden, rel=1e-12)


def test_nccls_all_to_all_beside_the_other_micro_batch_by_hand(kernels):
    """Megatron-Core's overlapped pair with the alltoall dispatcher: each phase leaves max(comm - window, SLOW x comm)
    of its comm (at most the comm), as DeepEP's held SMs leave theirs; without the slowdown, comm - window."""
    model = ndcost.Model.from_catalog("qwen3-30b-a3b")
    spec = ndcost.ExecSpec(dp=16, ep=16, global_batch_size=256, seq_length=4096, moe_dispatcher="alltoall",
                           ep_overlap="1f1b")
    a = seconds_arrays(model, spec, ndcost.Cluster("h100-sxm", 16))
    layer = dict(zip(SECONDS_LAYER_FIELDS, layer_times(kernels, a)[-1]))

    def left(comm, window, held):
        return min(comm, max(comm - window, held * comm))

    dispatch = layer["ep_d"]
    combine = layer["ep_f"] - layer["ep_pre"] - dispatch
    mlp = layer["fw"] - layer["att_f"] + layer["bw"] + layer["bw_w"] - layer["att_b"]
    m = spec.global_batch_size / (spec.dp * spec.micro_batch_size)
    paired, alone = (m - 1.0) / m, (layer["ep_f"] + layer["ep_b"]) / m
    for held, a_ in ((0.0, with_rate(a, ov_slow=0.0)), (SLOW, a)):
        pair = (left(dispatch, layer["att_f"], held) + left(dispatch + combine, mlp, held)
                + left(combine, layer["att_b"], held))
        got = stage_sums(kernels, a_)[0]
        assert got[S["ep"]] == pytest.approx(got[S["layers"]] * (paired * pair + alone), rel=1e-9), held
