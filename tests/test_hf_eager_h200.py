"""Plain PyTorch + Hugging Face Transformers (``--software hf-eager``) against real training steps on one H200.

tests/data/h200/train.json (../shared/measurements/h200/measure_h200.py's ``train()``): Llama 3.2 1B (4096 x 4),
Llama 3.2 3B (4096 x 2) and Llama 3 8B's first 8 layers (8192 x 1) from ``transformers.LlamaForCausalLM``, fp32
parameters under ``torch.autocast(bfloat16)``, SDPA, the model's own loss, fused AdamW,
``zero_grad(set_to_none=True)``, with and without one checkpoint per decoder layer. With the stack stated as
``hf-eager`` each step's time and its peak allocated memory are within 10%; the stack's own physics
(``ExecSpec.autocast``, ``ExecSpec.grads_set_to_none``) is checked by hand below, on both backends.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ndcost
from ndcost import _backend
from ndcost.errors import SpecError
from ndcost.kernels.columns import RATE, SECONDS_LAYER
from ndcost.spec.rates import Rates
from ndcost.spec.software_fields import software_fields
from ndcost.tables.seconds import seconds_arrays

STEPS = json.loads((Path(__file__).parent / "data" / "h200" / "train.json").read_text())["train"]
GIB = 2.0 ** 30
L = SECONDS_LAYER


def _model(row):
    c = row["config"]
    model = ndcost.Model(name=row["model"], hidden_size=c["hidden_size"], num_hidden_layers=c["num_hidden_layers"],
                         num_attention_heads=c["num_attention_heads"], num_key_value_heads=c["num_key_value_heads"],
                         intermediate_size=c["intermediate_size"], vocab_size=c["vocab_size"],
                         tie_word_embeddings=c["tie_word_embeddings"])
    assert model.parameter_count().total == row["params"]
    return model


def _priced(row, software="hf-eager", **fields):
    spec = ndcost.ExecSpec(micro_batch_size=row["micro_batch"], global_batch_size=row["micro_batch"],
                           seq_length=row["seq"], recompute="full" if row["full_ac"] else "none", **fields)
    return ndcost.estimate(_model(row), spec, ndcost.Cluster("h200", 1), software=software)


@pytest.mark.parametrize("row", STEPS, ids=[f"{r['model']}-{'ac' if r['full_ac'] else 'plain'}" for r in STEPS])
def test_each_step_within_ten_percent(backend_name, row):
    """Step time and peak allocated memory within 10% of the measured step (train.json), on each backend."""
    with _backend.use(backend_name):
        result = _priced(row)
    assert result.step_time == pytest.approx(row["step_s_median_after_2"], rel=0.10)
    assert result.memory.peak_allocated / GIB == pytest.approx(row["peak_allocated_gib"], rel=0.10)


def test_torchtitan_eager_is_not_this_stack():
    """The closest other preset prices these steps 5-18% fast and its memory -15% to +18% (torchtitan's fields
    on one GPU, DDP): what hf-eager adds is the stack's own."""
    time_errors, memory_errors = [], []
    for row in STEPS:
        result = _priced(row, "torchtitan-eager", zero_stage=0)
        time_errors.append(result.step_time / row["step_s_median_after_2"] - 1.0)
        memory_errors.append(result.memory.peak_allocated / GIB / row["peak_allocated_gib"] - 1.0)
    assert max(abs(e) for e in time_errors) > 0.15 and max(abs(e) for e in memory_errors) > 0.15
    assert all(e < 0.0 for e in time_errors)


def _parity_cases():
    llama = _model(STEPS[0])
    moe = ndcost.Model.from_catalog("qwen3-30b-a3b")
    hf = dict(software_fields("hf-eager"))
    return [
        (llama, ndcost.ExecSpec(micro_batch_size=4, global_batch_size=4, seq_length=4096, **hf), 1),
        (llama, ndcost.ExecSpec(micro_batch_size=4, global_batch_size=4, seq_length=4096, recompute="full", **hf), 1),
        (llama, ndcost.ExecSpec(dp=2, tp=2, pp=2, global_batch_size=16, seq_length=4096, recompute="selective",
                                **{**hf, "sequence_parallel": True}), 8),
        (moe, ndcost.ExecSpec(dp=4, ep=4, pp=2, global_batch_size=32, seq_length=4096, **hf), 8),
    ]


@pytest.mark.parametrize("case", range(4))
def test_backends_agree_under_autocast(ckernels, case):
    """Both backends price the autocast stack the same, time and memory, to 1e-12 (dense and MoE, with
    recompute, TP + SP, pipelines)."""
    model, spec, devices = _parity_cases()[case]
    cluster = ndcost.Cluster("h200", devices)
    rates = Rates.for_software("h200", "hf-eager")
    out = {}
    for backend in ("cython", "python"):
        with _backend.use(backend):
            out[backend] = ndcost.estimate(model, spec, cluster, rates=rates)
    assert out["cython"].step_time == pytest.approx(out["python"].step_time, rel=1e-12)
    for part, value in out["python"].parts.items():
        assert out["cython"].parts[part] == pytest.approx(value, rel=1e-12, abs=1e-300)
    for mine, theirs in zip(out["cython"].memory.stages, out["python"].memory.stages):
        assert mine.total == pytest.approx(theirs.total, rel=1e-12)
        assert mine.activations == pytest.approx(theirs.activations, rel=1e-12)
        assert mine.grads == pytest.approx(theirs.grads, rel=1e-12, abs=1e-300)


def _memory(backend_name, row, **fields):
    base = dict(software_fields("hf-eager"))
    base.update(fields)
    spec = ndcost.ExecSpec(micro_batch_size=row["micro_batch"], global_batch_size=row["micro_batch"],
                           seq_length=row["seq"], recompute="full" if row["full_ac"] else "none", **base)
    with _backend.use(backend_name):
        return ndcost.estimate(_model(row), spec, ndcost.Cluster("h200", 1),
                               rates=Rates.for_software("h200", "hf-eager")).memory.stages[0]


@pytest.mark.parametrize("full_ac", (False, True))
def test_what_autocast_keeps_by_hand(backend_name, full_ac):
    """Llama 3.2 1B, 16384 tokens: per layer and token, autocast's fp32 stream keeps the two norms' fp32
    normalised inputs (2 x 4h), two more casts of the q/k/v input and one more of the gate/up input (3 x 2h),
    o_proj's contiguous input copy (2h) and eager SwiGLU's product (2I), and every weight's 16-bit cast
    (2 bytes a layer parameter); the head its norm's normalised input (4h) and its weight's cast (2 V h). A
    checkpointed layer keeps its fp32 input (2 bytes an element more) and none of its casts."""
    row = next(r for r in STEPS if r["model"] == "llama3.2-1b" and r["full_ac"] == full_ac)
    on, off = _memory(backend_name, row), _memory(backend_name, row, autocast=False)
    tokens, h, ffn, layers, vocab = 16384, 2048, 8192, 16, 128256
    layer_params = 2 * h * h + 2 * h * 512 + 3 * h * ffn + 2 * h      # q, o; k, v (8 heads of 64); MLP; norms
    head = tokens * 4 * h + 2 * vocab * h
    if full_ac:
        expected = layers * tokens * h * 2 + head
    else:
        expected = layers * (2 * layer_params + tokens * (2 * 4 * h + 3 * 2 * h + 2 * h + 2 * ffn)) + head
    assert on.activations - off.activations == pytest.approx(expected, rel=1e-12)


def test_gradients_made_by_the_backward(backend_name):
    """zero_grad(set_to_none=True) with one micro-batch: the 4.9 GB of fp32 gradients are never held beside the
    forward's 30 GB of activations (the peak is the backward's start); with gradients kept, they are."""
    row = next(r for r in STEPS if r["model"] == "llama3.2-1b" and r["full_ac"])
    freed, kept = _memory(backend_name, row), _memory(backend_name, row, grads_set_to_none=False)
    assert kept.grads == pytest.approx(4 * row["params"], rel=1e-12)
    assert freed.grads == 0.0 and freed.activations > kept.grads
    assert kept.total - freed.total == pytest.approx(kept.grads, rel=1e-12)


def test_gradients_beyond_the_activations_still_count(backend_name):
    """Where the gradients outweigh the activations (a short sequence), the peak is the backward's end: the
    gradients beyond the activations stay."""
    row = dict(next(r for r in STEPS if r["model"] == "llama3.2-1b" and r["full_ac"]), seq=128, micro_batch=1)
    freed, kept = _memory(backend_name, row), _memory(backend_name, row, grads_set_to_none=False)
    assert freed.grads == pytest.approx(kept.grads - freed.activations, rel=1e-12)
    assert freed.total == pytest.approx(kept.total - freed.activations, rel=1e-12)


def _layer(kernels, autocast: bool) -> tuple[np.ndarray, np.ndarray]:
    model = ndcost.Model.from_catalog("llama3-8b")
    spec = ndcost.ExecSpec(dp=8, global_batch_size=64, seq_length=4096, param_bytes=4, main_param_bytes=0,
                           autocast=autocast)
    arrays = seconds_arrays(model, spec, ndcost.Cluster("h100-sxm", 8),
                            rates=Rates.for_device("h100-sxm").replace(elementwise="eager"))
    out = np.empty((len(model.kinds), len(L)))
    kernels.seconds_layer_times(*(arrays[name] for name in ("kinds", "skinds", "model", "smodel", "cand", "rate")),
                                out)
    return out[0], arrays["rate"]


def test_autocast_layer_seconds_by_hand(kernels):
    """One Llama 3 8B layer, 4096 tokens, eager: autocast minus 16-bit, by hand (ndcost.kernels.seconds_ops
    AUTOCAST_* constants). Forward: the two norms on fp32 (28 bytes an element, 6 kernels, against 36 and 8),
    RoPE on fp32 cos / sin with the casts for SDPA (6·2 + 24 against 2·2 + 16 a q/k element, 6 kernels a
    tensor against 3), the residual adds on the fp32 stream (10 bytes against 6), five input casts (q, k, v,
    gate, up: 6 bytes each), every weight's cast (6 bytes a parameter, 7 kernels). Backward: RoPE 1.5x, the norms
    as autograd runs their graph (84 bytes in 12 kernels against 1.5 x 36 in 8), the adds 18 bytes in 2 kernels each (against 9 in 1), the casts back and the sums of the q/k/v and
    gate/up gradients (3 x 6 + 2 x 12 and 2 x 6 + 12, in 5 and 3 kernels), the weight gradients' casts."""
    on, rate = _layer(kernels, True)
    off, _ = _layer(kernels, False)
    hbm = rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]
    kernel = rate[RATE["kernel_s"]]
    tokens, h, heads, kv, dh, ffn = 4096.0, 4096.0, 32.0, 8.0, 128.0, 14336.0
    x = tokens * h
    rotated = tokens * (heads + kv) * dh
    params = 2 * h * h + 2 * h * kv * dh + 3 * h * ffn + 2 * h
    norm = 2 * (28 - 36) * x
    rope = (6 * 2 + 24 - (2 * 2 + 16)) * rotated
    forward = norm + rope + 2 * (10 - 6) * x + 5 * 6 * x + 6 * params
    forward_kernels = 2 * (6 - 8) + 2 * (6 - 3) + 5 + 7
    assert on[L["fw"]] - off[L["fw"]] == pytest.approx(forward / hbm + forward_kernels * kernel, rel=1e-9)
    backward = (1.5 * (norm + rope) + 2 * (84 - 42) * x + 2 * (18 - 9) * x + (3 * 6 + 2 * 12 + 2 * 6 + 12) * x
                + 6 * params)
    backward_kernels = 2 * (6 - 8) + 2 * (12 - 6) + 2 * (6 - 3) + 2 + (5 + 3) + 7
    assert (on[L["bw"]] + on[L["bw_w"]]) - (off[L["bw"]] + off[L["bw_w"]]) == pytest.approx(
        backward / hbm + backward_kernels * kernel, rel=1e-9)


def test_autocast_needs_fp32_parameters():
    with pytest.raises(SpecError, match="autocast"):
        ndcost.ExecSpec(global_batch_size=8, autocast=True)
    assert ndcost.ExecSpec(global_batch_size=8, autocast=True, param_bytes=4, main_param_bytes=0).autocast
