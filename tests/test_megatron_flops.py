"""tools/megatron_flops.py: Megatron-LM's FLOPs count of a step, by which the Megatron-LM MoE recipes' published
TFLOP/s become the step times of data/validation/moe_runs.yaml."""
from __future__ import annotations

import re

import pytest
import yaml

from ndcost.io.validation import BUILTIN_RUNS
from ndcost.spec.model import Model
from source_tools import tool


@pytest.fixture(scope="module")
def flops():
    return tool("megatron_flops")


def test_the_count_is_megatron_bridges_published_one(flops):
    """Megatron-Bridge's 26.04 page publishes both TFLOP/s and tokens/s per GPU for the same runs (it counts with
    Megatron-LM's function): their ratio is the count a token, to the page's four significant figures."""
    for name, seq, mtp, vocab, tflops, tokens in flops.CHECKS:
        per_token = flops.step_flops(Model.from_catalog(name), global_batch=1, seq_length=seq, padded_vocab=vocab,
                                     mtp_layers=mtp) / seq
        assert per_token == pytest.approx(tflops * 1e12 / tokens, rel=1e-3), name


def test_a_gqa_count_by_hand(flops):
    """Qwen3-30B-A3B (48 MoE layers, h 2048, 32 query heads and 4 KV heads of 128, 8 of 128 experts of width 768,
    SwiGLU, vocabulary 151936), one sequence of 4096 tokens:
    per token 6·2048·(768·8·3)·48 + 6·(2048·(4096 + 512 + 512) + 4096·2048)·48 + 6·2048·151936, and
    4096^2 · 6·4096·48 for the core attention."""
    model = Model.from_catalog("qwen3-30b-a3b")
    per_token = (6 * 2048 * 768 * 8 * 3 * 48 + 6 * (2048 * (4096 + 512 + 512) + 4096 * 2048) * 48
                 + 6 * 2048 * 151936)
    expected = 4096 * per_token + 4096 ** 2 * 6 * 4096 * 48
    got = flops.step_flops(model, global_batch=1, seq_length=4096, padded_vocab=151936)
    assert got == pytest.approx(expected, rel=1e-12)
    assert flops.step_flops(model, global_batch=8, seq_length=4096, padded_vocab=151936) == pytest.approx(8 * got)


def test_mtp_layers_count_as_the_last_layers_kind(flops):
    """DeepSeek-V3's last layer is MoE: an MTP layer adds an MLA attention, an MoE FFN (routed and shared), its
    eh projection and norms, and a second logits GEMM."""
    model = Model.from_catalog("deepseek-v3")
    without = flops.step_flops(model, global_batch=1, seq_length=4096, padded_vocab=129280)
    with_one = flops.step_flops(model, global_batch=1, seq_length=4096, padded_vocab=129280, mtp_layers=1)
    h = 7168
    moe_ffn = 6 * h * (2048 * 8 * 3 + 2048 * 3)
    mla = 6 * (1536 * (h + 128 * 192 + 1) + 512 * (h + 128 * 256 + 1) + h * 64 + 128 * 128 * h)
    core = 4096 * 6 * (128 * 192 / 2 + 128 * 128 / 2)
    extra = 4096 * (moe_ffn + mla + 6 * (3 * h + 2 * h * h) + 6 * h * 129280) + 4096 * core
    assert with_one - without == pytest.approx(extra, rel=1e-12)


def test_a_step_time_from_a_published_rate(flops):
    assert flops.step_seconds(500.0, 16, 8e15) == pytest.approx(1.0)


def test_the_recipe_rows_steps_follow_from_their_published_rate(flops):
    """Every moe_runs.yaml row measured as a Megatron TFLOP/s per GPU (the Megatron-LM MoE recipes) states the step
    that rate implies: Megatron-LM's count of the step (its catalog model, batch, MTP layers and the vocabulary its
    'how' names) over the rate of all its GPUs."""
    rows = [row for row in yaml.safe_load(BUILTIN_RUNS["moe"].read_text(encoding="utf-8"))["runs"]
            if "model_tflops_per_gpu" in row["measured"] and "tokens_per_s_per_gpu" not in row["measured"]]
    assert len(rows) == 13
    for row in rows:
        iteration, strategy, model = row["measured"]["iteration_s"], row["strategy"], row["model"]
        vocab = int(re.search(r"padded vocabulary (\d+)", iteration["how"]).group(1))
        total = flops.step_flops(Model.from_catalog(model["catalog"]), global_batch=strategy["global_batch"],
                                 seq_length=model["seq_len"], padded_vocab=vocab, mtp_layers=model.get("mtp_layers", 0))
        step = flops.step_seconds(row["measured"]["model_tflops_per_gpu"], strategy["gpus"], total)
        assert iteration["derived"] and iteration["value"] == pytest.approx(step, abs=1e-4), row["id"]
        assert vocab == Model.from_catalog(model["catalog"]).vocab_size, row["id"]
