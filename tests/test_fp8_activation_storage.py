"""ExecSpec.fp8_activation_storage: DeepSeek-V3's low-precision activations (its report §3.3.2): the MoE SwiGLU's
cached inputs in fp8 and the attention output (the o-projection's input, which the attention's backward reads
too) in E5M6, each with one fp32 scale per 1x128 tile. What a layer stops keeping, by hand."""
from __future__ import annotations

import dataclasses

import pytest

import ndcost
from ndcost import _backend
from ndcost.errors import SpecError
from ndcost.kernels.activation_storage import E5M6_STORED_BYTES, FP8_STORED_BYTES


def _deepseek_v3_four_layers():
    """DeepSeek-V3's first four layers (three dense, one MoE), no MTP module."""
    model = ndcost.Model.from_catalog("deepseek-v3")
    return dataclasses.replace(model, num_hidden_layers=4, num_nextn_predict_layers=0)


def _priced(backend_name, **fields):
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=1, global_batch_size=8, seq_length=4096, zero_stage=1,
                           precision="fp8", **fields)
    with _backend.use(backend_name):
        return ndcost.estimate(_deepseek_v3_four_layers(), spec, ndcost.Cluster("h800", 8))


def test_the_stored_widths_are_the_reports():
    """fp8 is 1 byte and E5M6 12 bits, each with an fp32 scale per 128 elements (§3.3.1's 1x128 tiles)."""
    assert FP8_STORED_BYTES == 1.0 + 4.0 / 128.0 == 1.03125
    assert E5M6_STORED_BYTES == 1.5 + 4.0 / 128.0 == 1.53125


def test_deepseek_v3_layers_by_hand(backend_name):
    """4096 tokens a rank, tp 1, one micro-batch in flight (pp 1). Every layer's attention output: 128 heads x
    128 v_head_dim = 16,384 elements a token at 2 - 1.53125 bytes saved: 7,680 bytes. The MoE layer's SwiGLU
    inputs: 8 routed copies x 2 x 2,048 (gate and up) plus the shared expert's 2 x 2,048, at 2 - 1.03125 bytes
    saved: 31,744 + 3,968 bytes. Three dense layers and one MoE layer: 3 x 7,680 + 7,680 + 35,712 = 66,432 bytes
    a token, 272,105,472 bytes for the 4096 tokens."""
    plain = _priced(backend_name)
    stored = _priced(backend_name, fp8_activation_storage=True)
    per_token = 3 * 7_680 + 7_680 + 31_744 + 3_968
    assert per_token == 66_432
    by_hand = 4096 * per_token
    assert by_hand == 272_105_472
    saved = plain.memory.stages[0].activations - stored.memory.stages[0].activations
    assert saved == pytest.approx(by_hand, rel=1e-12)
    assert stored.step_time == plain.step_time          # memory only: the quantizing kernels are not priced


def test_full_recompute_keeps_the_layer_input_either_way(backend_name):
    a = _priced(backend_name, recompute="full")
    b = _priced(backend_name, recompute="full", fp8_activation_storage=True)
    assert a.memory.stages[0].activations == b.memory.stages[0].activations


def test_it_needs_fp8():
    with pytest.raises(SpecError) as info:
        ndcost.ExecSpec(global_batch_size=8, fp8_activation_storage=True)
    assert info.value.parameter == "fp8_activation_storage" and "'fp8'" in str(info.value)


def test_the_command_line_states_it(capsys):
    from ndcost.cli.main import main

    args = ["estimate", "deepseek-v3", "--device", "h800", "--devices", "2048", "--pp", "16", "--ep", "64",
            "--global-batch-size", "15360", "--seq-length", "4096"]
    assert main(args + ["--fp8-activation-storage"]) == 2        # bf16: refused, one line
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fp8" in err and "Traceback" not in err
    assert main(args + ["--precision", "fp8", "--fp8-activation-storage"]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err


def test_the_emitted_launch_says_no_launcher_states_it():
    from ndcost.io.emit import megatron_flags

    model = ndcost.Model.from_catalog("deepseek-v3")
    spec = ndcost.ExecSpec(dp=128, pp=16, ep=64, global_batch_size=15360, seq_length=4096, precision="fp8",
                           fp8_activation_storage=True)
    command, *notes = megatron_flags(model, spec).split("\n#")
    assert "fp8_activation_storage" not in command
    assert any("fp8_activation_storage" in note and "§3.3.2" in note for note in notes)


def test_deepseek_v3_as_deepseek_ran_it_reads_it():
    """The H800 row's facts state §3.3.2's storage; it takes 11.2 GiB off each middle stage's activations
    (53.0 -> 41.8 GiB under DualPipe's 17 micro-batches in flight)."""
    from ndcost.files import read_mapping
    from ndcost.io.validation import BUILTIN_RUNS, build_row

    doc = read_mapping(BUILTIN_RUNS["moe"], "a runs file")
    row = next(r for r in doc["runs"] if r["id"] == "deepseek_v3_pretrain_h800_2048gpu")
    built = build_row(row, doc.get("hardware") or {}, BUILTIN_RUNS["moe"])
    assert built.spec.fp8_activation_storage is True
    assert any("E5M6" in note for note in built.notes)
    stored = ndcost.estimate(built.model, built.spec, built.cluster, rates=built.rates)
    plain = ndcost.estimate(built.model, dataclasses.replace(built.spec, fp8_activation_storage=False),
                            built.cluster, rates=built.rates)
    saved = plain.memory.stages[1].activations - stored.memory.stages[1].activations
    assert 10.5 * 2**30 < saved < 12.0 * 2**30
