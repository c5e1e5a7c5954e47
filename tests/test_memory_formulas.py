"""The memory model against published formulas, with the arithmetic shown.

* Korthikanti et al. 2022 (arXiv 2205.05198), Table 2: activation bytes of one
  GPT layer (MHA, 2-matmul GELU MLP, LayerNorm, 1-byte dropout masks, no flash,
  16 bits) -- six rows, several dimensions, rel 1e-12.
* Korthikanti §4.2.3: the 1F1B first stage holds p micro-batches of L/p layers.
* Megatron-LM ``theoretical_memory_usage.compute_weight_and_optimizer_memory``:
  weight + optimizer bytes of the most loaded stage, 18 bytes per parameter
  without the distributed optimizer, 6 + 12/dp with it.
* docs/ND_MODEL.md §3.6: micro-batches in flight per schedule, hand values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from ndcost.spec.device import Cluster
from ndcost.spec.exec_spec import ExecSpec
from ndcost.tables.memory import MEMORY_PARTS, SCHEDULE_CODES, MemoryEstimate, StageMemory, memory_estimate
from ndcost.spec.model import Model

REL = 1e-12
SELECTIVE_MEGATRON = 0xF0  # recompute attBMM, headCast, dropout, softmax (the attention core)
NONE, FULL, SELECTIVE = 0, 1, 2


def gpt_layer(kernels, s, b, h, a, t, sp, option=NONE, keep_mask=0xFF, cp=1):
    """layer_activation_bytes of Korthikanti's GPT layer: MHA (a heads of h/a),
    GELU MLP of width 4h, LayerNorm, 1-byte dropout masks, no flash, 16-bit
    activations and softmax."""
    return kernels.layer_activation_bytes(
        seq=s, batch=b, hidden=h, tp=t, sp=sp, cp=cp, etp=t,
        attention=0, heads=a, kv_heads=a, head_dim=h / a, out_gate=0, qk_norm=0,
        q_lora=0, kv_lora=0, qk_nope=0, qk_rope=0, v_dim=0,
        lin_k_heads=0, lin_k_dim=0, lin_v_heads=0, lin_v_dim=0, lin_conv=0, lin_chunk=64,
        ffn=0, gated=0, ffn_width=4 * h, experts=0, top_k=0, shared_width=0, token_factor=1,
        flash=0, compute_bytes=2, softmax_bytes=2, dropout_bytes=1, norm_bytes=2, linear_bytes=2,
        option=option, keep_mask=keep_mask, slice_input=0,
    )


# (s, b, h, a, t): GPT-3 175B and MT-NLG 530B of Korthikanti Table 3, and two small ones.
DIMS = [
    (2048, 1, 12288, 96, 8),
    (2048, 1, 20480, 128, 8),
    (1024, 4, 4096, 32, 4),
    (512, 2, 1024, 16, 2),
    (4096, 1, 8192, 64, 1),
]


@pytest.mark.parametrize("s,b,h,a,t", DIMS)
class TestKorthikantiTable2:
    """Korthikanti Table 2, one row per test, per layer in bytes."""

    def test_no_parallelism(self, kernels, s, b, h, a, t):
        # sbh(34 + 5as/h): attention 11sbh + 5as²b, MLP 19sbh, LayerNorms 4sbh.
        expected = s * b * h * (34 + 5 * a * s / h)
        assert gpt_layer(kernels, s, b, h, a, 1, 1) == pytest.approx(expected, rel=REL)

    def test_tensor_parallel(self, kernels, s, b, h, a, t):
        # sbh(10 + 24/t + 5as/(ht)): unsplit 2 (QKV input) + 1 (attn dropout mask)
        # + 2 (MLP input) + 1 (MLP dropout mask) + 4 (LayerNorms) = 10;
        # split 6 (Q, K, V) + 2 (proj input) + 8 (GELU input) + 8 (fc2 input) = 24.
        expected = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
        assert gpt_layer(kernels, s, b, h, a, t, 1) == pytest.approx(expected, rel=REL)

    def test_tensor_plus_sequence_parallel(self, kernels, s, b, h, a, t):
        # sbh/t (34 + 5as/h): SP splits the 10 unsplit sbh over t too.
        expected = s * b * h / t * (34 + 5 * a * s / h)
        assert gpt_layer(kernels, s, b, h, a, t, t) == pytest.approx(expected, rel=REL)

    def test_tensor_parallel_selective(self, kernels, s, b, h, a, t):
        # sbh(10 + 24/t): the 5as²b/t of the attention core is recomputed.
        expected = s * b * h * (10 + 24 / t)
        got = gpt_layer(kernels, s, b, h, a, t, 1, SELECTIVE, SELECTIVE_MEGATRON)
        assert got == pytest.approx(expected, rel=REL)

    def test_tensor_sequence_parallel_selective(self, kernels, s, b, h, a, t):
        expected = 34 * s * b * h / t
        got = gpt_layer(kernels, s, b, h, a, t, t, SELECTIVE, SELECTIVE_MEGATRON)
        assert got == pytest.approx(expected, rel=REL)

    def test_full_recompute(self, kernels, s, b, h, a, t):
        # 2sbh: the layer input alone, whatever t (Table 2 does not split it).
        expected = 2 * s * b * h
        assert gpt_layer(kernels, s, b, h, a, t, 1, FULL, 0) == pytest.approx(expected, rel=REL)


def test_table2_breakdown_by_switch(kernels):
    """Korthikanti §4.1's per-block terms, read off by recomputing one op class at a time."""
    s, b, h, a = 1024, 2, 2048, 16
    plain = gpt_layer(kernels, s, b, h, a, 1, 1)
    without = lambda bit: gpt_layer(kernels, s, b, h, a, 1, 1, SELECTIVE, 0xFF & ~(1 << bit))  # noqa: E731
    assert plain - without(4) == pytest.approx(4 * s * b * h, rel=REL)  # normOp: two LayerNorm inputs, 2sbh each
    assert plain - without(6) == pytest.approx(8 * s * b * h, rel=REL)  # ffAct: the GELU output (fc2 input), 8sbh
    assert plain - without(3) == pytest.approx(2 * a * s * s * b, rel=REL)  # softmax output 2as²b
    assert plain - without(2) == pytest.approx(a * s * s * b, rel=REL)  # attention dropout mask as²b
    assert plain - without(1) == pytest.approx(2 * a * s * s * b, rel=REL)  # dropout output (P·V input) 2as²b
    assert plain - without(0) == 0.0  # attBMM: Q, K stay (QKV outputs); no flash logsumexp
    assert plain - without(5) == 0.0  # gather: Megatron stores the SP shard and re-gathers (§4.2.2)


def test_context_parallel_splits_every_term(kernels):
    # CP splits the sequence: tokens s/cp, scores (s/cp) x s.
    s, b, h, a, t, cp = 2048, 1, 4096, 32, 4, 4
    expected = s * b * h / (t * cp) * (34 + 5 * a * s / h)
    assert gpt_layer(kernels, s, b, h, a, t, t, cp=cp) == pytest.approx(expected, rel=REL)


def test_flash_keeps_only_the_logsumexp(kernels):
    # With flash attention the 5as²b score terms vanish; the core keeps an fp32 logsumexp per
    # row and head: a·s·b·4/t bytes, dropped when attBMM is recomputed.
    s, b, h, a, t = 4096, 1, 4096, 32, 4

    def layer(option, mask):
        return kernels.layer_activation_bytes(
            seq=s, batch=b, hidden=h, tp=t, sp=t, cp=1, etp=t, attention=0, heads=a, kv_heads=a,
            head_dim=h / a, out_gate=0, qk_norm=0, q_lora=0, kv_lora=0, qk_nope=0, qk_rope=0, v_dim=0,
            lin_k_heads=0, lin_k_dim=0, lin_v_heads=0, lin_v_dim=0, lin_conv=0, lin_chunk=64,
            ffn=0, gated=0, ffn_width=4 * h, experts=0, top_k=0, shared_width=0, token_factor=1, flash=1,
            compute_bytes=2, softmax_bytes=2, dropout_bytes=1, norm_bytes=2, linear_bytes=2, option=option,
            keep_mask=mask, slice_input=0)

    lse = a * s * b * 4 / t
    assert layer(NONE, 0xFF) == pytest.approx(34 * s * b * h / t + lse, rel=REL)
    assert layer(SELECTIVE, SELECTIVE_MEGATRON) == pytest.approx(34 * s * b * h / t, rel=REL)


# --------------------------------------------------------------------------- stages


@dataclass(frozen=True)
class StandInLayout:
    """The attributes memory_estimate reads from ndcost.tables.layout.Layout."""

    counts: np.ndarray
    slot_option: np.ndarray
    slot_mask: np.ndarray
    emb_stage: int
    out_stage: int
    mtp_layers_on_out_stage: int = 0


def even_layout(p: int, layers: int, n_kinds: int = 1, kind: int = 0, option: int = NONE, mask: int = 0xFF):
    counts = np.zeros((p, 1, n_kinds, 1))
    counts[:, 0, kind, 0] = layers / p
    return StandInLayout(counts, np.array([option], dtype=np.int64), np.array([mask], dtype=np.int64), 0, p - 1)


def test_one_f_one_b_first_stage_kernel(kernels):
    """Korthikanti §4.2.3: the first stage holds p micro-batches of L/p layers, so its
    activations are those of L layers: (s·b·h·L/t)·(34 + 5as/h) with TP+SP."""
    s, b, h, a, t, p, L, m = 2048, 1, 12288, 96, 8, 8, 96, 64
    per_layer = gpt_layer(kernels, s, b, h, a, t, t)
    counts = np.full((p, 1, 1), L / p)
    inflight = np.array([[kernels.inflight_micro_batches(0, p, m, 1, i, 0, 1)] for i in range(p)])
    assert inflight[0, 0] == p and inflight[-1, 0] == 1
    out = np.empty((p, 8))
    kernels.stage_memory(np.zeros((1, 3)), np.array([[per_layer]]), np.zeros((1, 1)), counts, inflight,
                         np.zeros((p, 3)), np.zeros((p, 1)), np.zeros(p), 0.0, out)
    expected = (s * b * h * L / t) * (34 + 5 * a * s / h)
    assert out[0, 3] == pytest.approx(expected, rel=REL)
    assert out[0, 7] == pytest.approx(expected, rel=REL)


def gpt_model(h, a, L, v):
    return Model(name="gpt-korthikanti", hidden_size=h, num_hidden_layers=L, num_attention_heads=a,
                 vocab_size=v, intermediate_size=4 * h, gated_ffn=False, norm="layernorm", family="gpt2")


def test_one_f_one_b_first_stage_python_layer():
    """The same through memory_estimate, with Korthikanti's embedding-dropout term
    s·b·h·p/t (§4.3) and the int64 token ids 8·s·b·p the embedding keeps."""
    s, b, h, a, t, p, L, m, v = 2048, 1, 4096, 32, 8, 4, 32, 16, 51200
    model = gpt_model(h, a, L, v)
    spec = ExecSpec(tp=t, pp=p, micro_batch_size=b, micro_batch_num=m, seq_length=s, sequence_parallel=True,
                    flash_attention=False, softmax_bytes=2, dropout_bytes=1, norm_bytes=2, compute_bytes=2)
    estimate = memory_estimate(model, spec, Cluster("h100", t * p), even_layout(p, L))
    layers = (s * b * h * L / t) * (34 + 5 * a * s / h)
    embedding = p * (s * b * h / t + 8 * s * b)
    assert estimate.stages[0].activations == pytest.approx(layers + embedding, rel=REL)
    # The last stage: one micro-batch of L/p layers plus the output: final LayerNorm input
    # and output-projection input (2 + 2)·sbh/t and fp32 logits 4·s·b·v/t (Korthikanti §4.3).
    last = (s * b * h * (L / p) / t) * (34 + 5 * a * s / h) + 4 * s * b * h / t + 4 * s * b * v / t
    assert estimate.stages[-1].activations == pytest.approx(last, rel=REL)


def test_stage_total_is_the_sum_of_its_parts():
    model = Model.from_catalog("llama3-70b")
    spec = ExecSpec(dp=2, tp=8, pp=4, micro_batch_num=8, seq_length=8192, sequence_parallel=True,
                    recompute="selective")
    estimate = memory_estimate(model, spec, Cluster("h100", 64), even_layout(4, 80, option=SELECTIVE, mask=0xF0))
    assert len(estimate.stages) == 4
    for stage in estimate.stages:
        parts = stage.parts()
        assert tuple(parts) == MEMORY_PARTS
        summed = 0.0
        for name in MEMORY_PARTS:
            summed += parts[name]
        assert stage.total == summed
        assert stage.reserve == 2**30
    assert estimate.peak == max(stage.total for stage in estimate.stages)
    assert estimate.stages[estimate.peak_stage].total == estimate.peak
    assert estimate.fits() is (estimate.peak <= Cluster("h100", 64).device.memory_bytes)
    assert estimate.fits(estimate.peak) and not estimate.fits(estimate.peak - 1)


def test_memory_estimate_helpers():
    stages = (StageMemory(1, 2, 3, 4, 5, 6, 7, 28), StageMemory(1, 1, 1, 1, 1, 1, 1, 7))
    estimate = MemoryEstimate(stages, capacity_bytes=20)
    assert estimate.peak == 28 and estimate.peak_stage == 0 and not estimate.fits() and estimate.fits(28)
    assert estimate.to_dict()["stages"][1]["total"] == 7
    undefined = MemoryEstimate((StageMemory(*[math.nan] * 8),))
    assert math.isnan(undefined.peak) and undefined.peak_stage == -1 and not undefined.fits(1e30)


# --------------------------------------------------------------------------- Megatron weights


def megatron_weight_and_optimizer_bytes(model: Model, *, tp: int, pp: int, dp: int, distributed: bool) -> float:
    """Megatron-LM theoretical_memory_usage.compute_weight_and_optimizer_memory,
    restated: parameters of the most loaded shard (first stage) times bytes per parameter.

    per layer: 2h·(ffn·3/2 + 1) + 2h²·(1 + g/a)·(a·d/h) for SwiGLU and RMSNorm
      (a MoE layer: 2h·(moe_ffn·E·3/2 + 1) + attention; no router term);
    block = L·layer + h (final norm); embedding = h·V;
    most loaded = (block/pp + embedding)/tp, + embedding/tp untied at pp = 1;
    bytes per parameter: 18, or 6 + 12/dp with the distributed optimizer.
    """
    h, a, g, d = model.hidden_size, model.num_attention_heads, model.num_key_value_heads, model.head_dim
    attention = 2 * h * h * ((1 + g / a) * (a * d / h))
    if model.is_moe:
        layer = 2 * h * (model.moe_intermediate_size * model.num_experts * 3 / 2 + 1) + attention
    else:
        layer = 2 * h * (model.intermediate_size * 3 / 2 + 1) + attention
    block = model.num_hidden_layers * layer + h
    embedding = h * model.vocab_size
    most_loaded = (block / pp + embedding) / tp
    if not model.tie_word_embeddings and pp == 1:
        most_loaded += embedding / tp
    bytes_per_param = 6 + 12 / dp if distributed else 18
    return most_loaded * bytes_per_param


def static_bytes(stage: StageMemory) -> float:
    return stage.params + stage.grads + stage.optimizer


@pytest.mark.parametrize("name", ["llama3-70b", "mixtral-8x7b"])
@pytest.mark.parametrize("pp", [1, 4])
@pytest.mark.parametrize("distributed", [False, True])
def test_megatron_weight_and_optimizer_memory(name, pp, distributed):
    """ZeRO-1 is Megatron's distributed optimizer (6 + 12/dp bytes per parameter: bf16
    param 2 + fp32 grad 4 whole, fp32 main 4 + Adam 2 × 4 sharded); ZeRO-0 is 18.

    Two deliberate differences, added back here so the match is exact:
    * Megatron's formula spreads the final norm (h parameters) over every stage
      (block/pp); ndcost puts it on the last stage, so stage 0 has h/(pp·tp) fewer
      parameters when pp > 1.
    * Megatron's MoE count has no router; the real one (Model.kind_parameters) has
      E·h per MoE layer (Mixtral: 8 × 4096), which ndcost keeps.
    """
    model = Model.from_catalog(name)
    tp, dp = 8, 4
    spec = ExecSpec(dp=dp, tp=tp, pp=pp, micro_batch_num=8, seq_length=4096, zero_stage=1 if distributed else 0)
    layout = even_layout(pp, model.num_hidden_layers)
    estimate = memory_estimate(model, spec, Cluster("h100", dp * tp * pp), layout)

    bytes_per_param = 6 + 12 / dp if distributed else 18
    expected = megatron_weight_and_optimizer_bytes(model, tp=tp, pp=pp, dp=dp, distributed=distributed)
    h = model.hidden_size
    if pp > 1:
        expected -= h / (pp * tp) * bytes_per_param  # final norm: on the last stage, not spread
    if model.is_moe:
        router = model.num_experts * h
        expected += model.num_hidden_layers / pp * router / tp * bytes_per_param
    assert static_bytes(estimate.stages[0]) == pytest.approx(expected, rel=REL)


def test_megatron_bytes_per_parameter_figures():
    # Megatron's figures follow from ExecSpec's default widths.
    spec = ExecSpec(micro_batch_num=1)
    optimizer = spec.optimizer_states * spec.optimizer_state_bytes + spec.main_param_bytes
    whole = spec.param_bytes + spec.grad_bytes + optimizer
    assert whole == 18
    assert spec.param_bytes + spec.grad_bytes == 6


def test_llama_pp1_weight_bytes_by_hand():
    """llama3-70b, tp 8, pp 1, dp 4, distributed optimizer, arithmetic in full:
    layer = 3·8192·28672 (MLP) + 2·8192·8192 + 2·8192·1024 (q, o, k, v) + 2·8192 (norms)
          = 704,643,072 + 134,217,728 + 16,777,216 + 16,384 = 855,654,400;
    total = 80·layer + 2·128256·8192 (embedding, head) + 8192 = 70,553,706,496;
    bytes = total / 8 · (6 + 12/4) = 79,372,919,808."""
    model = Model.from_catalog("llama3-70b")
    assert sum(model.kind_parameters(0)) == 855_654_400
    spec = ExecSpec(dp=4, tp=8, pp=1, micro_batch_num=8, seq_length=4096, zero_stage=1)
    estimate = memory_estimate(model, spec, Cluster("h100", 32), even_layout(1, 80))
    assert static_bytes(estimate.stages[0]) == pytest.approx(79_372_919_808, rel=REL)


def test_tied_embeddings_keep_a_copy_on_both_ends():
    model = Model.from_catalog("llama3-70b")
    cluster = Cluster("h100", 32)
    tied = ExecSpec(tp=8, pp=4, micro_batch_num=8, seq_length=4096, tie_embeddings=True)
    untied = tied.replace(tie_embeddings=False)
    layout = even_layout(4, 80)
    a = memory_estimate(model, tied, cluster, layout).stages
    b = memory_estimate(model, untied, cluster, layout).stages
    assert a[0].params == b[0].params and a[-1].params == b[-1].params  # pp > 1: a copy on each end
    one_stage = even_layout(1, 80)
    a1 = memory_estimate(model, tied.replace(pp=1), Cluster("h100", 8), one_stage).stages[0]
    b1 = memory_estimate(model, untied.replace(pp=1), Cluster("h100", 8), one_stage).stages[0]
    assert b1.params - a1.params == pytest.approx(model.vocab_size * model.hidden_size / 8 * 2, rel=REL)


# --------------------------------------------------------------------------- in flight


def inflight(kernels, schedule, p, m, vp, seq_split=1):
    code = SCHEDULE_CODES[schedule]
    return [[kernels.inflight_micro_batches(code, p, m, vp, stage, chunk, seq_split) for chunk in range(vp)]
            for stage in range(p)]


def test_schedule_codes():
    assert dict(SCHEDULE_CODES) == {"1f1b": 0, "interleaved": 0, "gpipe": 1, "zero_bubble_v": 2, "seq1f1b": 3,
                                    "dualpipev": 4, "dualpipe": 5}


def test_inflight_1f1b(kernels):
    # base − stage, base = min(p, m), at least 1.
    assert inflight(kernels, "1f1b", 4, 8, 1) == [[4], [3], [2], [1]]
    assert inflight(kernels, "1f1b", 4, 2, 1) == [[2], [1], [1], [1]]
    assert inflight(kernels, "1f1b", 1, 8, 1) == [[1]]


def test_inflight_interleaved_is_the_schedules_own(kernels):
    """Megatron-Core's interleaved 1F1B (schedules.py get_pp_rank_microbatches, get_schedule_table) holds, at its
    first steady forward, its (p - s - 1)·2 + (vp - 1)·p warm-up forwards plus that one, in its table's order:
    groups of p micro-batches, each through chunk 0, then chunk 1. p 4, m 8, vp 2: stage 0 runs 11 forwards --
    group 0's 4 on chunk 0 and 4 on chunk 1, then 3 of group 1's on chunk 0: [7, 4]; stage 1, 9: [5, 4]; stage
    2, 7: [4, 3]; stage 3, 5: [4, 1] (ND's "big memory" variant says [[6, 4], [5, 4], [4, 3], [3, 2]])."""
    assert inflight(kernels, "interleaved", 4, 8, 2) == [[7, 4], [5, 4], [4, 3], [4, 1]]
    # vp 3: the warm-up spans (vp - 1)·p more forwards, the middle chunk holding a whole group.
    assert inflight(kernels, "interleaved", 4, 8, 3) == [[7, 4, 4], [5, 4, 4], [4, 4, 3], [4, 4, 1]]
    # Few micro-batches (m 2 < p 4): every forward runs before the first backward (schedules.py L833-835).
    assert inflight(kernels, "interleaved", 4, 2, 2) == [[2, 2], [2, 2], [2, 2], [2, 2]]
    # Megatron-Bridge's Qwen3-30B-A3B on 16 H100 (pp 2, vp 24, m 64): 49 chunks on stage 0, 47 on stage 1,
    # whose last chunk (the output layer and its logits) holds one micro-batch.
    pp2 = inflight(kernels, "interleaved", 2, 64, 24)
    assert (sum(pp2[0]), sum(pp2[1]), pp2[0][0], pp2[1][-1]) == (49, 47, 3, 1)


def _walk_megatron_table(p, m, vp, stage):
    """Megatron-Core's schedule read literally: get_schedule_table's (micro-batch, chunk) order, its first
    min((p - stage - 1)·2 + (vp - 1)·p + 1, m·vp) forwards counted per chunk (floored at 1, as the kernel is)."""
    table = []
    for start in range(0, m, p):
        end = m if start + p >= m else start + p
        table += [(micro_batch, chunk) for chunk in range(vp) for micro_batch in range(start, end)]
    held = [0] * vp
    for _, chunk in table[:min(2 * (p - stage - 1) + (vp - 1) * p + 1, m * vp)]:
        held[chunk] += 1
    return [max(1, count) for count in held]


def test_inflight_interleaved_walks_the_schedule_table(kernels):
    """The closed form against the table walked step by step, every p <= 6, m < 20, vp 2-4 and stage."""
    for p in range(1, 7):
        for m in range(1, 20):
            for vp in range(2, 5):
                assert inflight(kernels, "interleaved", p, m, vp) == [
                    _walk_megatron_table(p, m, vp, stage) for stage in range(p)], (p, m, vp)


def test_inflight_gpipe_holds_every_micro_batch(kernels):
    # ndcost prices m (GPipe stores all micro-batches' activations); ND's p would say 4.
    assert inflight(kernels, "gpipe", 4, 8, 1) == [[8], [8], [8], [8]]


def test_inflight_zero_bubble_v(kernels):
    # DualPipeV: chunk 0 2·base − 1 − stage, chunk 1 stage (floored at 1).
    assert inflight(kernels, "zero_bubble_v", 4, 8, 2) == [[7, 1], [6, 1], [5, 2], [4, 3]]


def test_inflight_seq1f1b(kernels):
    # In sequence chunks: base − stage + seq_split − 1.
    assert inflight(kernels, "seq1f1b", 4, 8, 1, seq_split=4) == [[7], [6], [5], [4]]
    assert inflight(kernels, "seq1f1b", 4, 8, 1, seq_split=1) == inflight(kernels, "1f1b", 4, 8, 1)


def test_inflight_undefined(kernels):
    f = kernels.inflight_micro_batches
    assert math.isnan(f(0, 0, 8, 1, 0, 0, 1))  # no stage
    assert math.isnan(f(0, 4, 8, 1, 4, 0, 1))  # stage out of range
    assert math.isnan(f(0, 4, 8, 2, 0, 2, 1))  # chunk out of range
    assert math.isnan(f(1, 4, 8, 2, 0, 0, 1))  # GPipe has no chunks
    assert math.isnan(f(2, 4, 8, 3, 0, 0, 1))  # DualPipeV needs vp 2
    assert math.isnan(f(9, 4, 8, 1, 0, 0, 1))  # unknown schedule


def test_zero_stages_shard_what_they_say():
    """ZeRO 0-3 over dp = 4 (Rajbhandari et al. 2020 §5): 1 shards the optimizer states, 2 the
    gradients too, 3 the parameters too; deferred reduction keeps the gradients whole."""
    model = Model.from_catalog("llama3-8b")
    cluster = Cluster("h100", 8)
    layout = even_layout(1, 32)
    spec = ExecSpec(dp=4, tp=2, micro_batch_num=4, seq_length=4096)
    by_stage = {zero: memory_estimate(model, spec.replace(zero_stage=zero), cluster, layout).stages[0]
                for zero in range(4)}
    assert by_stage[1].optimizer == pytest.approx(by_stage[0].optimizer / 4, rel=REL)
    assert by_stage[1].grads == by_stage[0].grads
    assert by_stage[2].grads == pytest.approx(by_stage[0].grads / 4, rel=REL)
    assert by_stage[2].params == by_stage[0].params
    assert by_stage[3].params == pytest.approx(by_stage[0].params / 4, rel=REL)
    assert by_stage[3].working_set > 0  # two gathered layers (docs/ND_MODEL.md §3.7 FSDP extras)
    deferred = memory_estimate(model, spec.replace(zero_stage=3, deferred_grad_accumulation=True), cluster, layout)
    assert deferred.stages[0].grads == by_stage[0].grads


@pytest.mark.parametrize("recompute", ["full", "selective"])
def test_dualpipev_holds_a_working_set_per_chunk(recompute):
    """zero_bubble_v overlaps one chunk's forward with the other's backward (docs/ND_MODEL.md §3.7):
    with one layer kind and one recompute mode, twice the interleaved schedule's working set."""
    model = Model.from_catalog("llama3-8b")
    cluster = Cluster("h100-sxm", num_devices=8)
    v = ExecSpec(dp=2, tp=1, pp=4, vpp=2, pp_schedule="zero_bubble_v", global_batch_size=64, seq_length=4096,
                 recompute=recompute)
    from ndcost.tables.layout import build_layout

    interleaved = v.replace(pp_schedule="interleaved")
    dual = memory_estimate(model, v, cluster, build_layout(model, v)).stages
    single = memory_estimate(model, interleaved, cluster, build_layout(model, interleaved)).stages
    for a, b in zip(dual, single):
        assert b.working_set > 0 and a.working_set == 2 * b.working_set


def test_pytorch_allgather_ring_holds_every_ranks_kv_in_the_backward(backend_name):
    """cp_algo "ring-allgather" (PyTorch's context_parallel, rotate_method "allgather", as torchtitan
    calls it), by hand for llama3-8b (32 heads of 128) at tp 2, cp 4, 32k tokens: a rank keeps
    8192 tokens; its K/V rows are 16 heads x 128 = 2048 wide (repeated per query head). The backward
    holds the four ranks' K/V at 16 bits (4 x 4096 x 2 B), fp32 dQ/dK/dV (4 x 6144 B) and the fp32
    dK/dV it sends and receives (2 x 4 x 4096 B) per token: 8192 x 90112 = 738,197,504 B. The P2P ring
    instead keeps its K/V double buffer among the comm buffers (docs/ND_MODEL.md §3.2): 2 x 8192 x
    (2 x 4 kv heads x 128) x 2 B."""
    from ndcost import _backend

    with _backend.use(backend_name):
        _allgather_ring_by_hand()


def _allgather_ring_by_hand():
    model = Model.from_catalog("llama3-8b")
    cluster = Cluster("h100-sxm", 8)
    layout = even_layout(1, 32)
    spec = ExecSpec(dp=1, tp=2, cp=4, micro_batch_num=4, seq_length=32768)
    ring = memory_estimate(model, spec, cluster, layout).stages[0]
    gather = memory_estimate(model, spec.replace(cp_algo="ring-allgather"), cluster, layout).stages[0]
    assert gather.working_set == 8192 * (4 * 4096 * 2 + 4 * 6144 + 2 * 4 * 4096) == 738_197_504
    assert ring.working_set == 0.0
    assert ring.comm_buffers == 2 * 8192 * (2 * 4 * 128) * 2
    assert gather.comm_buffers == 0.0            # its buffers are the working set's
    assert gather.activations == ring.activations and gather.params == ring.params
    # A fully recomputed layer's re-materialised activations and the ring's buffers are two moments
    # of the backward: the larger of the two is held.
    full = spec.replace(recompute="full")
    plain = memory_estimate(model, full, cluster, layout).stages[0].working_set
    held = memory_estimate(model, full.replace(cp_algo="ring-allgather"), cluster, layout).stages[0].working_set
    assert held == max(plain, 738_197_504.0)
    # Seconds mode prices the same traffic and compute as the P2P ring.
    from ndcost import estimate
    assert (estimate(model, spec.replace(cp_algo="ring-allgather", global_batch_size=4), cluster).step_time
            == estimate(model, spec.replace(global_batch_size=4), cluster).step_time)


@pytest.mark.parametrize("param_bytes,cached", [(2, 2), (1, 1)])
def test_transformer_engine_keeps_fp8_weight_copies(backend_name, param_bytes, cached):
    """Under fp8, Transformer Engine keeps each weight's fp8 copy and its transpose across the
    micro-batches (module/linear.py get_fp8_workspace, cache "weight"): 2 bytes per weight
    parameter, the transpose alone (1 byte) when the weights are fp8 already. By hand for llama3-8b
    at tp 2: a layer holds 2·4096² (q, o) + 2·4096·1024 (k, v) + 3·4096·14336 (SwiGLU) + 2·4096
    (norms) parameters, half of them per rank, over 32 layers. torchao's casts keep none."""
    from ndcost import _backend

    model = Model.from_catalog("llama3-8b")
    cluster = Cluster("h100-sxm", 8)
    spec = ExecSpec(dp=4, tp=2, micro_batch_num=4, seq_length=4096, param_bytes=param_bytes)
    layer = 2 * 4096 ** 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    with _backend.use(backend_name):
        bf16 = memory_estimate(model, spec, cluster, even_layout(1, 32)).stages[0]
        fp8 = memory_estimate(model, spec.replace(precision="fp8"), cluster, even_layout(1, 32)).stages[0]
        torchao = memory_estimate(model, spec.replace(precision="fp8", fp8_weight_cache=False), cluster,
                                  even_layout(1, 32)).stages[0]
    assert fp8.params - bf16.params == pytest.approx(32 * layer / 2 * cached, rel=1e-12)
    assert torchao.params == bf16.params
    assert (fp8.grads, fp8.optimizer) == (bf16.grads, bf16.optimizer)
    # TE's fp8 linears save their inputs' fp8 copies (test_fp8_linears_save_their_inputs_in_fp8); torchao the bf16
    assert fp8.activations < bf16.activations and torchao.activations == bf16.activations


def test_the_estimate_prices_te_fp8_inputs_and_torchao_bf16(backend_name):
    """Through memory_estimate: Llama 3 70B at TP 4 with SP, one stage, one micro-batch in flight: fp8 on
    Transformer Engine holds 80 layers × 8192 × 11,264 bytes less activation memory than bf16; torchao's
    Float8Linear (fp8_weight_cache False: pytorch/ao float8_linear.py saves input_hp) as much as bf16."""
    from ndcost import _backend

    S = 8192
    model = Model.from_catalog("llama3-70b")
    cluster = Cluster("h100-sxm", 4)
    spec = ExecSpec(dp=1, tp=4, sequence_parallel=True, micro_batch_num=1, seq_length=S)
    with _backend.use(backend_name):
        bf16 = memory_estimate(model, spec, cluster, even_layout(1, 80)).stages[0]
        fp8 = memory_estimate(model, spec.replace(precision="fp8"), cluster, even_layout(1, 80)).stages[0]
        torchao = memory_estimate(model, spec.replace(precision="fp8", fp8_weight_cache=False), cluster,
                                  even_layout(1, 80)).stages[0]
    assert bf16.activations - fp8.activations == pytest.approx(80 * S * 11_264, rel=REL)
    assert torchao.activations == bf16.activations
