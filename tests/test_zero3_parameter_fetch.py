"""ExecSpec.zero3_parameter_fetch: a ZeRO-3 that gathers one parameter at a time (DeepSpeed's of 2021) holds the
layer's largest weight and that weight's gradient gathered, where FSDP holds two layers and a layer's bucket
(issue 25: a shipped run that ran fits -- the 530B ZeRO-3 row on 640 A100s)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import ndcost
from batch_cases import batch_memory_as_estimated
from ndcost import _backend
from ndcost.errors import SpecError
from ndcost.files import read_mapping
from ndcost.io.validation import BUILTIN_RUNS, build_row
from ndcost.kernels.columns import MEMORY_KIND
from ndcost.tables.memory import memory_kind_table


def _largest(model):
    table = memory_kind_table(model)
    return [(row[MEMORY_KIND["p_largest"]], row[MEMORY_KIND["p_largest_expert"]]) for row in table]


def test_the_largest_weight_of_a_layer_by_hand():
    # Llama 3 8B: gate and up fused, 4096 x 2 x 14336 (QKV 4096 x (32 + 2 x 8) x 128 is smaller)
    assert _largest(ndcost.Model.from_catalog("llama3-8b")) == [(4096 * 2 * 14336, 0.0)]
    # DeepSeek-V3's MoE layer: the attention output 128 x 128 -> 7168 beats q_b 1536 x 128 x 192 and the shared
    # expert's 7168 x 2 x 2048; a routed expert's gate and up 7168 x 2 x 2048
    dense, moe = _largest(ndcost.Model.from_catalog("deepseek-v3"))[:2]
    assert moe == (128 * 128 * 7168, 7168 * 2 * 2048)
    assert dense[1] == 0.0 and dense[0] == 7168 * 2 * 18432          # the dense layers' FFN


def test_held_memory_by_hand(backend_name):
    """A ZeRO-3 stage: the working set holds one parameter gathered instead of two layers, the communication
    buffer one parameter's gradient instead of a layer's bucket (llama3-8b, bf16 weights, fp32 gradients)."""
    model = ndcost.Model.from_catalog("llama3-8b")
    cluster = ndcost.Cluster("a100-80g", 16)
    layer = model.kind_parameters(0)[0]
    largest = 4096 * 2 * 14336
    fsdp = ndcost.ExecSpec(dp=16, zero_stage=3, global_batch_size=64, seq_length=2048, recompute="full",
                           flash_attention=False)
    deepspeed = fsdp.replace(zero3_parameter_fetch=True)
    with _backend.use(backend_name):
        a = ndcost.estimate(model, fsdp, cluster).memory.stages[0]
        b = ndcost.estimate(model, deepspeed, cluster).memory.stages[0]
    assert a.working_set - b.working_set == pytest.approx((2 * layer - largest) * fsdp.param_bytes, rel=1e-12)
    assert a.comm_buffers - b.comm_buffers == pytest.approx((layer - largest) * fsdp.grad_bytes, rel=1e-12)
    assert (a.params, a.grads, a.optimizer, a.activations) == (b.params, b.grads, b.optimizer, b.activations)


def test_the_batch_prices_it_as_estimate_does(backend_name):
    model = ndcost.Model.from_catalog("mixtral-8x7b")
    cluster = ndcost.Cluster("a100-80g", 64)
    cands = ndcost.Candidates.from_arrays(dp=16, tp=2, pp=2, ep=8, zero_stage=3, global_batch_size=256,
                                          seq_length=4096, zero3_parameter_fetch=[False, True])
    held = batch_memory_as_estimated(model, cands, cluster, backend_name)
    assert held[1] < held[0]


def test_without_zero_3_it_is_refused():
    with pytest.raises(SpecError, match="zero3_parameter_fetch.*be False unless zero_stage is 3"):
        ndcost.ExecSpec(dp=8, zero_stage=1, global_batch_size=64, zero3_parameter_fetch=True)
    model = ndcost.Model.from_catalog("llama3-8b")
    cands = ndcost.Candidates.from_arrays(dp=8, global_batch_size=64, zero_stage=[3, 1], zero3_parameter_fetch=True)
    batch = ndcost.estimate_many(model, cands, ndcost.Cluster("h100-sxm", 8))
    assert np.isfinite(batch.step_time[0]) and not np.isfinite(batch.step_time[1])
    assert batch.reason_names()[1] == "zero3_parameter_fetch"


def test_the_command_line_states_it(capsys):
    from ndcost.cli.main import main

    words = ["estimate", "llama3-8b", "--device", "a100-80g", "--dp", "16", "--global-batch-size", "64",
             "--seq-length", "2048", "--json"]
    assert main(words + ["--zero-stage", "3", "--zero3-parameter-fetch"]) == 0
    fetched = json.loads(capsys.readouterr().out)
    assert main(words + ["--zero-stage", "3"]) == 0
    layers = json.loads(capsys.readouterr().out)
    assert fetched["memory"]["peak_allocated"] < layers["memory"]["peak_allocated"]
    assert main(words + ["--zero3-parameter-fetch"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zero" in err


def test_the_530b_deepspeed_row_holds_one_parameter_and_fits():
    doc = read_mapping(BUILTIN_RUNS["a100"], "a runs file")
    row = next(r for r in doc["runs"] if r["id"] == "narayanan21_t2_zero3_530b_640gpu")
    built = build_row(row, doc["hardware"], BUILTIN_RUNS["a100"])
    assert built.software == "deepspeed-2021" and built.spec.zero3_parameter_fetch
    e = ndcost.estimate(built.model, built.spec, built.cluster, rates=built.rates)
    assert e.fits
    fsdp = ndcost.estimate(built.model, built.spec.replace(zero3_parameter_fetch=False), built.cluster,
                           rates=built.rates)
    assert not fsdp.fits


def test_deepspeed_2021s_preset_states_it_under_zero_3():
    """The field is the deepspeed-2021 software's (ndcost.spec.software_fields), read where a 2021 DeepSpeed row
    is built and where --software deepspeed-2021 is named; it is not set without ZeRO-3 or when stated."""
    from ndcost.spec.software_fields import software_fields

    assert dict(software_fields("deepspeed-2021", zero_stage=3)) == {"zero3_parameter_fetch": True}
    assert dict(software_fields("deepspeed-2021", zero_stage=1)) == {}
    assert dict(software_fields("deepspeed-2021", zero_stage=3, zero3_parameter_fetch=False)) == {}
    assert dict(software_fields("megatron-2021", zero_stage=3)) == {}
    model = ndcost.Model.from_catalog("llama3-8b")
    spec = ndcost.ExecSpec(dp=16, zero_stage=3, global_batch_size=64, seq_length=2048)
    named = ndcost.estimate(model, spec, "a100-80g", software="deepspeed-2021")
    stated = ndcost.estimate(model, spec.replace(zero3_parameter_fetch=True), "a100-80g", software="deepspeed-2021")
    assert named.memory.peak_allocated == stated.memory.peak_allocated
