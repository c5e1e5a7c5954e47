"""A training stack's ExecSpec fields (ndcost.spec.software_fields) and --software on the command line."""
from __future__ import annotations

import json

import pytest

import ndcost
from ndcost.cli.main import main
from ndcost.spec.rates import SOFTWARE_PRESETS
from ndcost.spec.software_fields import software_fields, with_software


def test_torchtitan_fixes_fsdp2_its_loss_torchaos_casts_and_its_ring():
    plain = software_fields("torchtitan-compile")
    assert plain == dict(zero_stage=3, param_bytes=4, main_param_bytes=0, grad_bytes=4, optimizer_state_bytes=4,
                         optimizer_states=2, logit_bytes=12, fp8_weight_cache=False, sequence_parallel=False,
                         moe_weighted_activation=False)
    three_d = software_fields("torchtitan-eager", tp=8, pp=8, cp=2)
    assert three_d["logit_bytes"] == 16 and three_d["sequence_parallel"] and three_d["cp_algo"] == "ring-allgather"
    # under PP, FSDP2 keeps the stage's bf16 parameters beside their fp32 shards and accumulates fp32 grads
    assert (three_d["param_bytes"], three_d["main_param_bytes"], three_d["reshard_params"],
            three_d["deferred_grad_accumulation"]) == (2, 4, False, True)


@pytest.mark.parametrize("name", ["megatron-te", "megatron-2021", "deepspeed-2021"])
def test_megatron_stacks_keep_execspecs_defaults(name):
    assert name in SOFTWARE_PRESETS and software_fields(name, tp=8, pp=4, cp=2) == {}
    assert with_software(name, dict(dp=2, tp=4, global_batch_size=8)) == ndcost.ExecSpec(dp=2, tp=4, global_batch_size=8)


@pytest.mark.parametrize("name", ["nemo", "megatron-bridge"])
def test_nvidias_recipes_overlap_tp_in_dense_models_and_gather_fp8_parameters(name):
    # NeMo's llama31_70b recipe / Megatron-Bridge's llama3_70b: TP comm overlap, param-gather overlap, SP
    dense = software_fields(name, tp=4, pp=4, cp=2, zero_stage=1, precision="fp8")
    assert dense == dict(tp_overlap=True, overlapped_param_gather=True, sequence_parallel=True, param_bytes=1)
    # their MoE recipes leave TP overlap off; TP 1 has nothing to overlap or shard; bf16 keeps bf16 parameters
    assert "tp_overlap" not in software_fields(name, tp=4, moe=True, zero_stage=1)
    assert software_fields(name, tp=1, zero_stage=1) == dict(overlapped_param_gather=True)
    # a field the caller states stays the caller's
    spec = with_software(name, dict(dp=2, tp=4, global_batch_size=8, tp_overlap=False))
    assert spec.tp_overlap is False and spec.sequence_parallel is True


def test_plain_megatron_lm_runs_its_argument_defaults():
    assert software_fields("megatron-lm", tp=8) == dict(zero_stage=0, overlapped_grad_reduce=False)
    from ndcost.spec.rates import Rates

    rates = Rates.for_software("h100-sxm", "megatron-lm")
    assert (rates.moe_permute, rates.moe_router_fusion, rates.fp8_recipe) == ("unfused", False, "delayed")


def test_stated_fields_win_and_unknown_stacks_are_refused():
    spec = with_software("torchtitan-compile", dict(dp=8, global_batch_size=16, zero_stage=1, logit_bytes=4))
    assert (spec.zero_stage, spec.logit_bytes, spec.fp8_weight_cache, spec.param_bytes) == (1, 4, False, 4)
    with pytest.raises(ndcost.SpecError, match="did you mean 'torchtitan-compile'"):
        software_fields("torchtitan-compiled")


def test_the_command_line_prices_the_stacks_memory(capsys):
    flags = ["estimate", "llama3-8b", "--device", "h100-sxm", "--dp", "8", "--micro-batch-size", "2",
             "--global-batch-size", "16", "--seq-length", "8192", "--recompute", "full", "--json"]
    peaks = {}
    for software in ("megatron-te", "torchtitan-compile"):
        assert main([*flags, "--software", software]) == 0
        peaks[software] = json.loads(capsys.readouterr().out)["memory"]["peak"]
    # FSDP2 shards parameters, gradients and optimizer states over the 8 ranks: less than ZeRO-1's
    assert peaks["torchtitan-compile"] < peaks["megatron-te"]
    assert main([*flags, "--software", "torchtitan-compiled"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean 'torchtitan-compile'" in err


def test_a_search_for_a_stack_prices_every_candidate_with_its_fields():
    from ndcost.price.search import search
    from ndcost.spec.search_space import SEARCH_DIMENSIONS

    model, cluster = ndcost.Model.from_catalog("llama3-70b"), ndcost.Cluster("h100-sxm", 64)
    result = search(model, cluster, global_batch_size=128, seq_length=8192, software="torchtitan-compile", top=5,
                    per_layer_recompute=0, balance=0)
    assert result.results
    for ranked in result.results:
        spec = ranked.spec
        stack = software_fields("torchtitan-compile", spec.tp, spec.pp, spec.cp, per_op=False)
        assert all(getattr(spec, name) == value for name, value in stack.items()), (spec, stack)
        # its per-op selective recompute: HyperParallel's rule on the census the result's model carries
        assert spec.recompute != "selective" or spec.selective_rule == "hyperparallel"
        assert result.model.census and not model.census
        again = ndcost.estimate(result.model, spec, cluster, rates="torchtitan-compile")
        assert ranked.estimate.step_time == again.step_time     # the stack's rates too
    # a dimension the stack fixes stays the caller's when given
    given = search(model, cluster, global_batch_size=128, seq_length=8192, software="torchtitan-compile", top=1,
                   per_layer_recompute=0, balance=0, zero_stage=1)
    assert {int(z) for z in given.columns["zero_stage"]} == {1}
    assert set(SEARCH_DIMENSIONS) <= set(result.columns)
    with pytest.raises(ndcost.SpecError, match="software"):
        search(model, cluster, global_batch_size=128, seq_length=8192, software="titan")


def test_the_searchs_restated_command_prices_its_best_again(capsys):
    import shlex

    assert main(["search", "llama3-70b", "--device", "h100-sxm", "--devices", "64", "--global-batch-size", "128",
                 "--seq-length", "8192", "--software", "torchtitan-compile", "--top", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    command = out[-1]
    assert command.startswith("ndcost estimate") and "--software torchtitan-compile" in command
    best = next(line for line in out if line.strip().startswith("1 "))
    assert main(shlex.split(command)[1:]) == 0
    again = capsys.readouterr().out
    step = float(again.splitlines()[1].split()[2])              # "step time: X ms"
    assert f"{step:.1f} ms" in best
