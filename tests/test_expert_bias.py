"""The routed experts' biases (gpt-oss), added as each stack adds them (``Rates.expert_bias``).

Megatron-Core's TEGroupedMLP keeps the gate-up bias in Transformer Engine's GEMM epilogue and adds the down
projection's expert by expert after its GEMM, times the rows' fp32 routing probabilities (``_apply_bias``:
torch.split, t + b * p, torch.cat, .to(dtype)); NeMo AutoModel's DeepEP experts add both that way (the gate-up
one without probabilities); torchtitan gathers each bias into the rows (repeat_interleave) and adds it. Bytes and
kernels by hand on a MoE block priced alone, on both backends; the per-expert kernels run in the host's loops
after the token counts reach it; the stack options and the validation rows that state them.
"""
from __future__ import annotations

import pytest

import ndcost
from ndcost.kernels.columns import LAYER_OP, LAYER_OP_FIELD, RATE
from ndcost.spec.moe_kernels import EXPERT_BIASES
from ndcost.spec.rates import Rates
from ndcost.tables.seconds import rates_vector, seconds_candidate_vector
from moe_block_cases import price_moe_block

F = LAYER_OP_FIELD
#: gpt-oss-120b's expert block on one of 8 expert-parallel ranks of B200s: 4 x 4096 tokens, top-4, 16 local experts.
TOKENS, LOCAL, HIDDEN, WIDTH, EXPERTS, TOPK = 16384, 16, 2880, 2880, 128, 4
ROWS = TOKENS * TOPK
BC, PROB = 2.0, 4.0                   # bf16 activations, fp32 probabilities


def _block(kernels, mode: str, expert_bias: float = 1.0):
    rates = Rates.for_software("b200", "megatron-te").replace(expert_bias=mode)
    rate = rates_vector(ndcost.Cluster("b200", 8), rates, "bf16")
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=4, global_batch_size=32)
    cand = seconds_candidate_vector(ndcost.Model.from_catalog("gpt-oss-120b"), spec)
    return price_moe_block(kernels, cand, rate, tokens=TOKENS, rows=ROWS, local=LOCAL, hidden=HIDDEN, width=WIDTH,
                           n_ff=3, experts=EXPERTS, topk=TOPK, expert_bias=expert_bias), rate


def _by_hand(mode: str) -> tuple[float, float, float, float, float, float]:
    """(forward bytes, kernels, backward bytes, kernels, per-expert kernels forward, backward), read off the code."""
    down, up = ROWS * HIDDEN, ROWS * 2 * WIDTH
    if mode == "epilogue":
        return 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    if mode == "gathered":
        # repeat_interleave (write), add (read 2, write 1), both GEMMs; backward the per-expert sums (read)
        return 4 * BC * (up + down), 6.0, BC * (up + down), 4.0, 0.0, 0.0
    # b * p (write fp32), t + bp (read bf16 + fp32, write fp32), cat (read + write fp32), .to (read fp32, write bf16)
    forward = (PROB + (BC + PROB + PROB) + 2 * PROB + (PROB + BC)) * down
    # the cast's gradient up, each expert's down, the bias's and the probabilities' products and sums, the cat
    backward = ((BC + PROB) + (PROB + BC) + 3 * PROB + 3 * PROB + 2 * BC) * down
    k_f, k_b, loop_f, loop_b = 2 * LOCAL + 2, 5 * LOCAL + 2, 2 * LOCAL, 5 * LOCAL
    if mode == "split":
        # the gate-up's too, without probabilities: an add an expert and a cat; backward each sum and the cat
        forward += 4 * BC * up
        backward += 3 * BC * up
        k_f, k_b, loop_f, loop_b = k_f + LOCAL + 1, k_b + LOCAL + 1, loop_f + LOCAL, loop_b + LOCAL
    return forward, float(k_f), backward, float(k_b), float(loop_f), float(loop_b)


@pytest.mark.parametrize("mode", EXPERT_BIASES)
def test_bytes_and_kernels_by_hand(kernels, mode):
    out, rate = _block(kernels, mode)
    forward, k_f, backward, k_b, _, _ = _by_hand(mode)
    row = out[LAYER_OP["expert_bias"]]
    assert row[F["bytes_f"]] == pytest.approx(forward, rel=1e-12)
    assert row[F["bytes_b"]] == pytest.approx(backward, rel=1e-12)
    assert row[F["kernels_f"]] == k_f and row[F["kernels_b"]] == k_b
    hbm = rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]
    if mode != "epilogue":
        assert row[F["time_f"]] == pytest.approx(forward / hbm + k_f * rate[RATE["kernel_s"]], rel=1e-12)
        assert row[F["time_b"]] == pytest.approx(backward / hbm + k_b * rate[RATE["kernel_s"]], rel=1e-12)
    else:
        assert not row.any()


@pytest.mark.parametrize("mode", EXPERT_BIASES)
def test_the_per_expert_adds_run_in_the_hosts_loops(kernels, mode):
    """What the pass waits on the host for: the GEMM per expert (2 forward, 4 backward a local expert) and the
    per-expert bias adds, each at 9.58 us; the gathered adds are launched ahead, with the rest of the layer."""
    out, rate = _block(kernels, mode)
    *_, loop_f, loop_b = _by_hand(mode)
    launch = rate[RATE["launch_s"]]
    assert out[LAYER_OP["launch"], F["time_f"]] == pytest.approx((2 * LOCAL + loop_f) * launch, rel=1e-12)
    assert out[LAYER_OP["launch"], F["time_b"]] == pytest.approx((4 * LOCAL + loop_b) * launch, rel=1e-12)


def test_experts_without_biases_add_nothing(kernels):
    with_bias, _ = _block(kernels, "split")
    without, _ = _block(kernels, "split", expert_bias=0.0)
    assert not without[LAYER_OP["expert_bias"]].any()
    assert with_bias[LAYER_OP["experts"]] == pytest.approx(without[LAYER_OP["experts"]], rel=1e-12)


def test_the_model_and_the_stacks_state_it():
    """gpt-oss's experts carry biases (its config's GptOssExperts), Qwen3's do not; Megatron-Core's presets add
    the down bias expert by expert, torchtitan's gather them; a batch row prices as estimate() does."""
    oss, qwen = ndcost.Model.from_catalog("gpt-oss-120b"), ndcost.Model.from_catalog("qwen3-30b-a3b")
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=2, global_batch_size=64, seq_length=4096)
    cluster = ndcost.Cluster("h100-sxm", 8)
    assert Rates.for_software("h100-sxm", "megatron-te").expert_bias == "down_split"
    assert Rates.for_software("h100-sxm", "torchtitan-eager").expert_bias == "gathered"
    for software in ("megatron-te", "torchtitan-eager"):
        rates = Rates.for_software("h100-sxm", software)
        (table,) = ndcost.estimate(oss, spec, cluster, rates=rates).ops()[:1]
        assert any(row.op == "expert_bias" and row.seconds > 0.0 for row in table.rows)
        qwen_rows = ndcost.estimate(qwen, spec, cluster, rates=rates).ops()[0].rows
        assert not any(row.op == "expert_bias" for row in qwen_rows)
        for mode in EXPERT_BIASES:
            moded = rates.replace(expert_bias=mode)
            single = ndcost.estimate(oss, spec, cluster, rates=moded)
            batch = ndcost.estimate_many(oss, [spec], cluster, rates=moded)
            assert batch.step_time[0] == pytest.approx(single.step_time, rel=1e-12)


def test_a_bad_mode_is_a_spec_error_and_exit_2(capsys):
    from ndcost.cli.main import main

    with pytest.raises(ndcost.SpecError, match="expert_bias"):
        Rates.for_device("h100-sxm").replace(expert_bias="fused")
    code = main(["estimate", "gpt-oss-120b", "--devices", "8", "--device", "h100-sxm", "--ep", "8",
                 "--global-batch-size", "64", "--expert-bias", "fused"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "expert" in err and "Traceback" not in err
    code = main(["estimate", "llama3-8b", "--devices", "8", "--device", "h100-sxm", "--global-batch-size", "64",
                 "--expert-bias", "split"])
    assert code == 2 and "MoE" in capsys.readouterr().err


def test_the_validation_rows_read_their_stacks():
    from ndcost.files import read_mapping
    from ndcost.io.validation import BUILTIN_RUNS, build_row

    doc = read_mapping(BUILTIN_RUNS["moe"], "a runs file")
    modes = {row["id"]: build_row(row, doc.get("hardware") or {}, BUILTIN_RUNS["moe"]).rates.expert_bias
             for row in doc["runs"] if "gptoss" in row["id"]}
    assert modes["automodel_h100_gptoss120b_bf16_64gpu"] == "split"
    assert {mode for name, mode in modes.items() if name.startswith("mbridge")} == {"down_split"}
