"""A gated expert that clamps its two halves before its activation (gpt-oss's swiglu_limit), clamped as each stack
clamps them (``Rates.glu_clamp``).

Megatron-Core 26.04's weighted_bias_quick_geglu_impl chunks the gate-up output, clamps each half and concatenates
them again before its jit-fused activation (and copies the linear offset's scalar to the device); eager PyTorch
(OpenAI's reference swiglu, torchtitan without compile) clamps the halves as two kernels; a compiled activation
(NeMo AutoModel's quick_geglu_deepep) clamps inside its kernel. Bytes and kernels by hand on a MoE block priced
alone, on both backends; the recompute of the activation re-runs the clamps; the model, the stacks, the options and
the validation rows that state them.
"""
from __future__ import annotations

import pytest

import ndcost
from ndcost.kernels.columns import LAYER_OP, LAYER_OP_FIELD, RATE
from ndcost.spec.moe_kernels import GLU_CLAMPS
from ndcost.spec.rates import Rates
from ndcost.tables.seconds import rates_vector, seconds_candidate_vector
from moe_block_cases import price_moe_block

F = LAYER_OP_FIELD
#: gpt-oss-120b's expert block on one of 8 expert-parallel ranks of B200s: 4 x 4096 tokens, top-4, 16 local experts.
TOKENS, LOCAL, HIDDEN, WIDTH, EXPERTS, TOPK = 16384, 16, 2880, 2880, 128, 4
ROWS = TOKENS * TOPK
GATE_UP = ROWS * 2 * WIDTH            # the clamped tensor's elements: both halves of every row
BC, MASK = 2.0, 1.0                   # bf16 activations, a bool mask


def _block(kernels, mode: str, clamp: float = 1.0, elementwise: str = "fused"):
    rates = Rates.for_software("b200", "megatron-te").replace(glu_clamp=mode, elementwise=elementwise)
    rate = rates_vector(ndcost.Cluster("b200", 8), rates, "bf16")
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=4, global_batch_size=32)
    cand = seconds_candidate_vector(ndcost.Model.from_catalog("gpt-oss-120b"), spec)
    return price_moe_block(kernels, cand, rate, tokens=TOKENS, rows=ROWS, local=LOCAL, hidden=HIDDEN, width=WIDTH,
                           n_ff=3, experts=EXPERTS, topk=TOPK, glu_clamp=clamp), rate


def _by_hand(mode: str, eager: bool) -> tuple[float, float, float, float]:
    """(forward bytes, kernels, backward bytes, kernels) the clamps add, read off PyTorch's and Megatron's code."""
    if mode == "fused" or (mode == "separate" and not eager):
        return 0.0, 0.0, 0.0, 0.0
    half = GATE_UP / 2
    forward = 2 * (BC + BC) * half                          # clamp(gate), clamp(linear): read, write
    # clamp_backward: gate le (read, write mask), where (mask, grad, write); linear ge, le, logical_and_, where
    backward = ((BC + MASK) + (MASK + 2 * BC)) * half + (2 * (BC + MASK) + 3 * MASK + (MASK + 2 * BC)) * half
    backward += 2 * BC * GATE_UP                            # the chunk's gradient: torch.cat of the two halves
    k_f, k_b = 2.0, 2.0 + 4.0 + 2.0 + 1.0                   # the two scalar_tensor zeros, the cat
    if mode == "concatenated":
        forward += 2 * BC * GATE_UP                         # torch.cat of the clamped halves
        k_f += 2.0                                          # the cat, torch.tensor(linear_offset, device=...)
    return forward, k_f, backward, k_b


@pytest.mark.parametrize("elementwise", ["fused", "eager"])
@pytest.mark.parametrize("mode", GLU_CLAMPS)
def test_bytes_and_kernels_by_hand(kernels, mode, elementwise):
    clamped, rate = _block(kernels, mode, elementwise=elementwise)
    plain, _ = _block(kernels, mode, clamp=0.0, elementwise=elementwise)
    forward, k_f, backward, k_b = _by_hand(mode, elementwise == "eager")
    act, base = clamped[LAYER_OP["expert_act"]], plain[LAYER_OP["expert_act"]]
    assert act[F["bytes_f"]] - base[F["bytes_f"]] == pytest.approx(forward, rel=1e-12, abs=1e-3)
    assert act[F["bytes_b"]] - base[F["bytes_b"]] == pytest.approx(backward, rel=1e-12, abs=1e-3)
    assert act[F["kernels_f"]] - base[F["kernels_f"]] == k_f
    assert act[F["kernels_b"]] - base[F["kernels_b"]] == k_b
    hbm = rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]
    kernel_s = rate[RATE["kernel_s"]]
    extra_f = forward / hbm + k_f * kernel_s if k_f else 0.0
    extra_b = backward / hbm + k_b * kernel_s if k_b else 0.0
    assert act[F["time_f"]] - base[F["time_f"]] == pytest.approx(extra_f, rel=1e-9, abs=1e-15)
    assert act[F["time_b"]] - base[F["time_b"]] == pytest.approx(extra_b, rel=1e-9, abs=1e-15)
    for op in ("experts", "permute", "unpermute", "router"):
        assert clamped[LAYER_OP[op]] == pytest.approx(plain[LAYER_OP[op]], rel=1e-12)


def test_the_concatenation_costs_two_passes_more_than_the_clamps():
    """Megatron-Core's form is the eager clamps plus a torch.cat that reads and writes the whole gate-up tensor:
    forward twice the clamps' bytes, backward the same."""
    sep, cat = _by_hand("separate", True), _by_hand("concatenated", True)
    assert cat[0] == pytest.approx(2 * sep[0]) and cat[2] == sep[2]


def _recompute_part(mode: str, ff_act: int) -> float:
    """The recompute part with every switch kept (1) but ffAct's, recomputed where *ff_act* is 0."""
    model = ndcost.Model.from_catalog("gpt-oss-120b")
    switches = dict.fromkeys(("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "attUp"), 1)
    switches["ffAct"] = ff_act
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=1, global_batch_size=64, seq_length=4096,
                           recompute="selective", selective_switches=switches)
    rates = Rates.for_software("h100-sxm", "megatron-te").replace(glu_clamp=mode)
    return ndcost.estimate(model, spec, ndcost.Cluster("h100-sxm", 8), rates=rates).parts["recompute"]


def test_a_recomputed_activation_re_runs_the_clamps():
    """Megatron's moe_act recompute checkpoints bias_act_func, the clamps and the concatenation included."""
    assert _recompute_part("concatenated", 0) > _recompute_part("fused", 0) > 0.0
    assert _recompute_part("concatenated", 1) == _recompute_part("fused", 1)


def test_the_model_and_the_stacks_state_it():
    """gpt-oss clamps (swiglu_limit 7.0), Qwen3 does not; Megatron-Core concatenates, torchtitan clamps eagerly;
    a batch row prices as estimate() does."""
    oss, qwen = ndcost.Model.from_catalog("gpt-oss-120b"), ndcost.Model.from_catalog("qwen3-30b-a3b")
    assert oss.glu_clamp and not qwen.glu_clamp
    assert Rates.for_software("h100-sxm", "megatron-te").glu_clamp == "concatenated"
    assert Rates.for_software("h100-sxm", "torchtitan-eager").glu_clamp == "separate"
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=2, global_batch_size=64, seq_length=4096)
    cluster = ndcost.Cluster("h100-sxm", 8)
    rates = Rates.for_software("h100-sxm", "megatron-te")
    steps = {}
    for mode in GLU_CLAMPS:
        moded = rates.replace(glu_clamp=mode)
        single = ndcost.estimate(oss, spec, cluster, rates=moded)
        batch = ndcost.estimate_many(oss, [spec], cluster, rates=moded)
        assert batch.step_time[0] == pytest.approx(single.step_time, rel=1e-12)
        steps[mode] = single.step_time
        assert ndcost.estimate(qwen, spec, cluster, rates=moded).step_time == pytest.approx(
            ndcost.estimate(qwen, spec, cluster, rates=rates).step_time, rel=1e-12)
    assert steps["concatenated"] > steps["separate"] == steps["fused"]   # megatron-te compiles nothing eagerly


def test_the_config_states_the_limit():
    hf = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 2, "num_attention_heads": 64,
          "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088, "intermediate_size": 2880,
          "num_local_experts": 128, "num_experts_per_tok": 4}
    assert ndcost.Model.from_catalog("gpt-oss-120b").glu_clamp
    assert ndcost.Model.from_hf_config(hf).glu_clamp                      # GptOssConfig's default 7.0
    assert not ndcost.Model.from_hf_config({**hf, "swiglu_limit": 0}).glu_clamp
    with pytest.raises(ndcost.SpecError, match="swiglu_limit"):
        ndcost.Model.from_hf_config({**hf, "swiglu_limit": "seven"})


def test_a_bad_mode_is_a_spec_error_and_exit_2(capsys):
    from ndcost.cli.main import main

    with pytest.raises(ndcost.SpecError, match="glu_clamp"):
        Rates.for_device("h100-sxm").replace(glu_clamp="eager")
    code = main(["estimate", "gpt-oss-120b", "--devices", "8", "--device", "h100-sxm", "--ep", "8",
                 "--global-batch-size", "64", "--glu-clamp", "eager"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "glu" in err and "Traceback" not in err
    code = main(["estimate", "llama3-8b", "--devices", "8", "--device", "h100-sxm", "--global-batch-size", "64",
                 "--glu-clamp", "separate"])
    assert code == 2 and "MoE" in capsys.readouterr().err


def test_the_validation_rows_read_their_stacks():
    """Megatron-Bridge's gpt-oss rows concatenate; NeMo AutoModel's compiled activation clamps inside its kernel
    (its stack's elementwise ops compiled: the torchtitan preset's eager clamps fused away)."""
    from ndcost.files import read_mapping
    from ndcost.io.validation import BUILTIN_RUNS, build_row

    doc = read_mapping(BUILTIN_RUNS["moe"], "a runs file")
    rows = {row["id"]: build_row(row, doc.get("hardware") or {}, BUILTIN_RUNS["moe"])
            for row in doc["runs"] if "gptoss" in row["id"]}
    assert {row.rates.glu_clamp for name, row in rows.items() if name.startswith("mbridge")} == {"concatenated"}
    auto = rows["automodel_h100_gptoss120b_bf16_64gpu"].rates
    assert auto.elementwise == "fused"
