"""Bad input to the expert all-to-all's options and DeepSeek's schedules: a SpecError naming the field (one
line and exit 2 on the command line), a reason code for a batch row; never a silent fallback."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ndcost
from ndcost import ExecSpec, SpecError
from ndcost.cli.main import main
from ndcost.tables.joint_rules import validate

MOE = dict(dp=16, pp=4, ep=16, seq_length=4096)

#: (fields, the parameter named, what the message says besides "Got <value> instead.").
SPEC_CASES = {
    "dualpipe odd pp": (dict(dp=8, pp=3, pp_schedule="dualpipe", global_batch_size=48), "pp",
                        "be even with pp_schedule='dualpipe' (DualPipe pairs rank i with rank pp-1-i)"),
    "dualpipe vpp": (dict(dp=8, pp=4, vpp=2, pp_schedule="dualpipe", global_batch_size=64), "vpp",
                     "be 1 with pp_schedule='dualpipe' (its two chunks are its two directions' stages)"),
    "dualpipev vpp": (dict(dp=8, pp=4, vpp=1, pp_schedule="dualpipev", global_batch_size=64), "vpp",
                      "be 2 with pp_schedule='dualpipev' (its V of two chunks)"),
    "dualpipe few micro-batches": (
        dict(dp=8, pp=4, pp_schedule="dualpipe", global_batch_size=48), "global_batch_size",
        "give at least 2*pp (= 8) micro-batches with pp_schedule='dualpipe' (it gives 6)"),
    "dualpipe odd micro-batches": (dict(pp=4, pp_schedule="dualpipe", micro_batch_num=9), "micro_batch_num",
                                   "give an even number of micro-batches with pp_schedule='dualpipe'"),
    "dualpipev few micro-batches": (dict(pp=4, vpp=2, pp_schedule="dualpipev", micro_batch_num=7),
                                    "micro_batch_num", "at least 2*pp (= 8) micro-batches with pp_schedule='dualpipev'"),
    "overlap without ep": (dict(dp=8, ep_overlap="1f1b", global_batch_size=64), "ep_overlap",
                           "be 'none' when ep is 1 (no expert all-to-all to overlap)"),
    "megatron overlap without vpp": (dict(**MOE, ep_overlap="1f1b", global_batch_size=256), "ep_overlap",
                                     "virtual_pipeline_model_parallel_size must be specified when pp > 1"),
    "megatron overlap with dualpipe": (
        dict(**MOE, pp_schedule="dualpipe", ep_overlap="1f1b", global_batch_size=256), "ep_overlap",
        "be '1f1b' only with pp_schedule '1f1b' or 'interleaved'"),
    "megatron overlap with full recompute": (
        dict(**MOE, vpp=2, ep_overlap="1f1b", recompute="full", global_batch_size=256), "ep_overlap",
        "disable full recomputation when enabling overlap_moe_expert_parallel_comm"),
    "dualpipe overlap on 1f1b": (dict(**MOE, ep_overlap="dualpipe", global_batch_size=256), "ep_overlap",
                                 "only with pp_schedule 'dualpipe', 'dualpipev' or 'zero_bubble_v'"),
    "fp8 dispatch in bf16": (dict(**MOE, moe_dispatch_fp8=True, global_batch_size=256), "moe_dispatch_fp8",
                             "be False unless precision is 'fp8'"),
    "unknown overlap": (dict(**MOE, ep_overlap="always", global_batch_size=256), "ep_overlap",
                        "be one of 'none', '1f1b', 'dualpipe'"),
    "no SMs": (dict(**MOE, moe_dispatcher_sms=0, global_batch_size=256), "moe_dispatcher_sms", "be an integer >= 1"),
    "negative node limit": (dict(**MOE, moe_node_limit=-1, global_batch_size=256), "moe_node_limit",
                            "be an integer >= 0"),
}


@pytest.mark.parametrize(("fields", "parameter", "rule"), list(SPEC_CASES.values()), ids=list(SPEC_CASES))
def test_spec_refuses_with_the_field_named(fields, parameter, rule):
    with pytest.raises(SpecError) as info:
        ExecSpec(**fields)
    assert info.value.parameter == parameter
    message = str(info.value)
    assert message.startswith(f"The '{parameter}' parameter of ExecSpec must ") and rule in message
    assert message.endswith(f"Got {fields.get(parameter, fields.get('global_batch_size'))!r} instead.")


def test_a_moe_option_named_for_a_dense_model_is_refused():
    dense = ndcost.Model.from_catalog("llama3-8b")
    cluster = ndcost.Cluster("h100-sxm", 8)
    with pytest.raises(SpecError) as info:
        validate(dense, ExecSpec(dp=8, global_batch_size=64, moe_dispatcher="deepep"), cluster)
    assert info.value.parameter == "moe_dispatcher"
    with pytest.raises(SpecError) as info:
        ndcost.estimate(dense, ExecSpec(dp=8, global_batch_size=64, moe_dispatcher="deepep"), cluster)
    assert info.value.parameter == "moe_dispatcher"


def test_megatron_overlap_with_two_mtp_layers_is_refused():
    model = dataclasses.replace(ndcost.Model.from_catalog("deepseek-v3"), num_nextn_predict_layers=2)
    spec = ExecSpec(dp=16, pp=4, vpp=2, ep=16, seq_length=4096, global_batch_size=256, ep_overlap="1f1b")
    with pytest.raises(SpecError) as info:
        validate(model, spec)
    assert info.value.parameter == "ep_overlap" and "at most one MTP layer" in str(info.value)
    validate(model, spec.replace(ep_overlap="none"))


CLI = ["estimate", "--device", "h100-sxm", "--global-batch-size", "64", "--seq-length", "4096"]


@pytest.mark.parametrize(("argv", "words"), [
    (["llama3-8b", "--dp", "8", "--ep-overlap", "1f1b"], "'ep_overlap'"),
    (["llama3-8b", "--dp", "8", "--moe-dispatcher", "deepep"], "'moe_dispatcher'"),
    (["llama3-8b", "--dp", "2", "--pp", "3", "--pp-schedule", "dualpipe"], "'pp'"),
    (["llama3-8b", "--dp", "2", "--pp", "4", "--pp-schedule", "dualpipe", "--micro-batch-size", "8"],
     "at least 2*pp"),
    (["qwen3-30b-a3b", "--dp", "8", "--ep", "8", "--moe-dispatch-fp8"], "'moe_dispatch_fp8'"),
    (["qwen3-30b-a3b", "--dp", "8", "--ep", "8", "--moe-node-limit", "-2"], "'moe_node_limit'"),
])
def test_the_command_line_says_one_line_and_exits_2(capsys, argv, words):
    status = main([CLI[0], argv[0], *CLI[1:], *argv[1:]])
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1 and lines[0].startswith("ndcost: error:"), captured.err
    assert words in lines[0].replace("--", "'").replace("-", "_") or words in lines[0]
    assert "Traceback" not in captured.err


def test_batch_rows_get_reason_codes_as_single_specs_raise():
    """Each row breaks one rule; its reason is the one ExecSpec raises for the same fields."""
    from ndcost.tables.reasons import REASON_TABLE

    rows = [
        (dict(dp=8, pp=2, pp_schedule="dualpipe", global_batch_size=64), "ok"),
        (dict(dp=8, pp=3, pp_schedule="dualpipe", global_batch_size=48), "dualpipe_pp"),
        (dict(dp=8, pp=4, pp_schedule="dualpipe", global_batch_size=48), "dualpipe_micro_batches"),
        (dict(dp=8, pp=4, vpp=2, pp_schedule="dualpipev", global_batch_size=56), "dualpipe_micro_batches"),
        (dict(dp=8, pp=4, pp_schedule="dualpipe", global_batch_size=72), "dualpipe_micro_batches"),   # 9: odd
        (dict(dp=8, pp=4, vpp=2, pp_schedule="dualpipe", global_batch_size=64), "schedule_vpp"),
        (dict(dp=8, pp=2, ep=8, ep_overlap="1f1b", global_batch_size=64), "ep_overlap_rule"),   # needs vpp
        (dict(dp=8, pp=2, vpp=2, ep=8, ep_overlap="1f1b", global_batch_size=64, recompute="full"), "ep_overlap_rule"),
        (dict(dp=8, pp=2, ep=8, ep_overlap="dualpipe", global_batch_size=64), "ep_overlap_rule"),
        (dict(dp=8, pp=2, pp_schedule="dualpipe", ep_overlap="dualpipe", global_batch_size=64), "ep_overlap_rule"),
        (dict(dp=8, pp=2, ep=8, moe_dispatch_fp8=True, global_batch_size=64), "dispatch_fp8_precision"),
        (dict(dp=8, pp=2, ep=8, fp8_activation_storage=True, global_batch_size=64), "fp8_storage_precision"),
        (dict(dp=8, pp=2, ep=8, precision="fp8", fp8_activation_storage=True, global_batch_size=64), "ok"),
        (dict(dp=8, pp=2, vpp=2, ep=8, ep_overlap="1f1b", global_batch_size=64), "ok"),
        (dict(dp=8, pp=2, ep=8, moe_node_limit=-1, global_batch_size=64), "bad_moe_setting"),
        (dict(dp=8, pp=2, ep=8, moe_dispatcher_sms=0, global_batch_size=64), "bad_moe_setting"),
        (dict(dp=8, pp=2, ep=8, ep_overlap="sometimes", global_batch_size=64), "bad_choice"),
    ]
    defaults = {f.name: f.default for f in dataclasses.fields(ExecSpec)}
    names = sorted({name for fields, _ in rows for name in fields})
    columns = {name: [fields.get(name, defaults[name]) for fields, _ in rows] for name in names}
    cands = ndcost.Candidates.from_arrays(seq_length=4096, **columns)
    assert [REASON_TABLE[int(code)].name for code in cands.reason] == [want for _, want in rows]
    for fields, want in rows:
        if want == "ok":
            ExecSpec(seq_length=4096, **fields)
        else:
            with pytest.raises(SpecError) as info:
                ExecSpec(seq_length=4096, **fields)
            assert info.value.parameter in REASON_TABLE[ndcost.tables.reasons.REASON_CODES[want]].parameters


def test_a_dense_batch_row_naming_a_moe_option_gets_its_reason():
    dense = ndcost.Model.from_catalog("llama3-8b")
    cands = ndcost.Candidates.from_arrays(dp=np.array([8, 8, 8]), global_batch_size=64, seq_length=4096,
                                          recompute="full",
                                          moe_dispatcher=np.array(["alltoall", "deepep", "alltoall"], dtype=object))
    result = ndcost.estimate_many(dense, cands, ndcost.Cluster("h100-sxm", 8))
    assert list(result.reason_names()) == ["ok", "moe_option_dense", "ok"]


def test_emit_states_the_overlap_where_a_launcher_can():
    """Megatron-LM states its EP overlap and group-limited routing; what it cannot (DualPipe, fp8 dispatch, the
    group count without a cluster) follows the flags as notes, never inside the command; torchtitan runs torch's
    DualPipeV."""
    from ndcost.io.emit import megatron_flags, torchtitan_toml

    model = ndcost.Model.from_catalog("deepseek-v3")
    megatron = ExecSpec(dp=64, pp=8, vpp=2, ep=64, global_batch_size=1024, seq_length=4096, ep_overlap="1f1b",
                        moe_dispatcher="deepep", moe_node_limit=4, moe_dispatcher_sms=24)
    command, *notes = megatron_flags(model, megatron).split("\n#")
    assert "--overlap-moe-expert-parallel-comm" in command and "--moe-deepep-num-sms 24" in command
    assert "--moe-router-group-topk 4" in command and any("--moe-router-num-groups" in note for note in notes)
    dualpipe = ExecSpec(dp=128, pp=16, ep=64, global_batch_size=15360, seq_length=4096, precision="fp8",
                        pp_schedule="dualpipe", ep_overlap="dualpipe", moe_dispatcher="deepep", moe_dispatch_fp8=True)
    command, *notes = megatron_flags(model, dualpipe).split("\n#")
    assert "dualpipe" not in command and "overlap-moe" not in command
    assert any("dualpipe" in note for note in notes) and any("moe_dispatch_fp8" in note for note in notes)
    toml = torchtitan_toml(model, dualpipe.replace(pp_schedule="dualpipev", vpp=2))
    assert 'pipeline_parallel_schedule = "DualPipeV"' in toml and "ep_overlap 'dualpipe'" in toml


def test_device_limited_routing_is_checked_against_the_model():
    """DeepSeek-V2's device-limited routing (moe_device_limit): refused for a dense model, and where its ranks hold
    fewer experts than a token picks; a negative limit is refused by ExecSpec itself; a batch row gets the same
    reasons."""
    from ndcost.tables.reasons import REASON_TABLE

    with pytest.raises(SpecError) as info:
        ExecSpec(**MOE, moe_device_limit=-1, global_batch_size=256)
    assert info.value.parameter == "moe_device_limit"
    cluster = ndcost.Cluster("h100-sxm", 64)
    with pytest.raises(SpecError) as info:
        validate(ndcost.Model.from_catalog("llama3-8b"), ExecSpec(dp=8, global_batch_size=64, moe_device_limit=2))
    assert info.value.parameter == "moe_device_limit" and "dense model" in str(info.value)
    qwen = ndcost.Model.from_catalog("qwen3-30b-a3b")          # 128 experts, top-8
    spec = ExecSpec(dp=64, ep=64, global_batch_size=512, seq_length=4096, moe_device_limit=3)   # 2 experts a rank
    with pytest.raises(SpecError) as info:
        validate(qwen, spec, cluster)
    assert info.value.parameter == "moe_device_limit" and "num_experts_per_tok (8)" in str(info.value)
    validate(qwen, spec.replace(moe_device_limit=4), cluster)
    cands = ndcost.Candidates.from_arrays(dp=64, ep=64, global_batch_size=512, seq_length=4096,
                                          moe_device_limit=np.array([0, 3, 4, -1]))
    result = ndcost.estimate_many(qwen, cands, cluster)
    assert list(result.reason_names()) == ["ok", "device_limit_experts", "ok", "bad_moe_setting"]
    assert "moe_device_limit" in REASON_TABLE[ndcost.tables.reasons.REASON_CODES["device_limit_experts"]].parameters
    dense = ndcost.estimate_many(ndcost.Model.from_catalog("llama3-8b"), ndcost.Candidates.from_arrays(
        dp=8, global_batch_size=64, seq_length=4096, recompute="full", moe_device_limit=np.array([0, 1])),
        ndcost.Cluster("h100-sxm", 8))
    assert list(dense.reason_names()) == ["ok", "moe_option_dense"]


def test_device_limited_routing_on_the_command_line_and_in_megatron_flags(capsys):
    status = main(["estimate", "llama3-8b", *CLI[1:], "--dp", "8", "--moe-device-limit", "2"])
    err = capsys.readouterr().err
    assert status == 2 and "moe_device_limit" in err.replace("-", "_") and "Traceback" not in err
    from ndcost.io.emit import megatron_flags

    model = ndcost.Model.from_catalog("deepseek-v3")
    spec = ExecSpec(dp=64, pp=8, vpp=2, ep=64, global_batch_size=1024, seq_length=4096, moe_dispatcher="deepep",
                    moe_device_limit=3)
    command = megatron_flags(model, spec).split("\n#")[0]
    assert "--moe-router-num-groups 64" in command and "--moe-router-group-topk 3" in command
    both = megatron_flags(model, spec.replace(moe_node_limit=4))
    assert "--moe-router-group-topk 4" in both.split("\n#")[0] and "moe_device_limit 3" in both
