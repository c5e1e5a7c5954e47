"""ExecSpec.moe_weighted_activation: Megatron-Core (since core_v0.13) weights each routed token by its router
probability inside the expert activation, so the un-permutation sums without weights and the experts' outputs
are not kept for backward; torchtitan and Transformers weight the outputs and keep them. The difference, by
hand, is the routed tokens times hidden at the compute width, on every MoE layer not fully recomputed."""
from __future__ import annotations

import dataclasses

import pytest

import ndcost
from ndcost import _backend
from ndcost.spec.software_fields import software_fields

GIB = 2.0 ** 30


def _peak(backend_name, model, **fields):
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=2, global_batch_size=16, seq_length=4096, zero_stage=1,
                           **fields)
    with _backend.use(backend_name):
        return ndcost.estimate(model, spec, ndcost.Cluster("h200", 8))


def test_the_experts_outputs_by_hand(backend_name):
    """Qwen3-30B-A3B's first four layers (4 MoE layers), 2 x 4096 tokens a rank, top-8, ep 8 (balanced routing):
    each layer routes 8192 x 8 = 65,536 token copies to this rank's experts; their outputs at 2048 x 2 bytes
    are 268,435,456 bytes a layer, 1,073,741,824 for the four, held once (one micro-batch in flight)."""
    model = dataclasses.replace(ndcost.Model.from_catalog("qwen3-30b-a3b"), num_hidden_layers=4)
    weighted = _peak(backend_name, model)
    kept = _peak(backend_name, model, moe_weighted_activation=False)
    by_hand = 4 * (2 * 4096) * 8 * 2048 * 2
    assert by_hand == 1_073_741_824
    assert kept.memory.stages[0].activations - weighted.memory.stages[0].activations == pytest.approx(by_hand,
                                                                                                         rel=1e-12)
    # the time is not the memory's business: the same step either way
    assert kept.step_time == weighted.step_time


def test_full_recompute_keeps_the_layer_input_alone_either_way(backend_name):
    model = dataclasses.replace(ndcost.Model.from_catalog("qwen3-30b-a3b"), num_hidden_layers=4)
    a = _peak(backend_name, model, recompute="full")
    b = _peak(backend_name, model, recompute="full", moe_weighted_activation=False)
    assert a.memory.stages[0].activations == b.memory.stages[0].activations


def test_the_stacks_that_weight_the_outputs_keep_them():
    for software in ("torchtitan-eager", "torchtitan-compile", "hf-eager"):
        assert software_fields(software, moe=True)["moe_weighted_activation"] is False
    for software in ("megatron-te", "nemo", "megatron-bridge", "megatron-lm"):
        assert "moe_weighted_activation" not in software_fields(software, moe=True)
    assert ndcost.ExecSpec(global_batch_size=1).moe_weighted_activation is True


def test_the_flag_on_a_dense_model_is_refused(capsys):
    from ndcost.cli.main import main

    assert main(["estimate", "llama3-8b", "--device", "h100-sxm", "--dp", "8", "--global-batch-size", "16",
                 "--moe-weighted-activation", "off"]) == 2
    assert "MoE model" in capsys.readouterr().err
