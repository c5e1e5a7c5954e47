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
                         optimizer_states=2, logit_bytes=12, fp8_weight_cache=False, sequence_parallel=False)
    three_d = software_fields("torchtitan-eager", tp=8, pp=8, cp=2)
    assert three_d["logit_bytes"] == 16 and three_d["sequence_parallel"] and three_d["cp_algo"] == "ring-allgather"
    # under PP, FSDP2 keeps the stage's bf16 parameters beside their fp32 shards and accumulates fp32 grads
    assert (three_d["param_bytes"], three_d["main_param_bytes"], three_d["reshard_params"],
            three_d["deferred_grad_accumulation"]) == (2, 4, False, True)


@pytest.mark.parametrize("name", ["megatron-te", "nemo", "megatron-2021", "deepspeed-2021"])
def test_megatron_stacks_keep_execspecs_defaults(name):
    assert name in SOFTWARE_PRESETS and software_fields(name, tp=8, pp=4, cp=2) == {}
    assert with_software(name, dict(dp=2, tp=4, global_batch_size=8)) == ndcost.ExecSpec(dp=2, tp=4, global_batch_size=8)


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
