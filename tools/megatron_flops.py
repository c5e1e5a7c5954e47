"""Megatron-LM's own FLOPs count of a training step, to turn a published TFLOP/s per GPU into a step time.

Megatron-LM reports throughput as ``num_floating_point_operations(args, batch_size)`` over the iteration time and
the GPUs (NVIDIA/Megatron-LM@8a2ac1fdc74bb9499de816603e1e3d00369f287b megatron/training/training.py:L497-1168,
``transformer_flops`` from L826, the BSHD path: every sequence full length, causal). This module writes that count for a
catalog model (``ndcost.spec.model.Model``), term by term as the source has it:

* per token, 3 (forward, weight and input gradients) x 2 (multiply-add) x hidden x (the dense layers' FFN
  ``ffn_hidden x (3 if SwiGLU else 2)``, the MoE layers' ``moe_ffn x topk x 3`` and shared experts' ``shared x 3``),
  the attention's token-linear part (GQA: ``h (q + k + v) + q h``, L964-992; MLA: its LoRA projections, L896-962) times
  the layers and MTP layers, the MTP projections ``mtp (3 h + 2 h^2)``, and the logits ``h x padded vocab x
  (1 + mtp)``;
* per sequence, ``s^2`` times the core attention's ``3 x 2 x q_heads x head_dim / 2 x 2`` (GQA) or
  ``3 x 2 x (heads (qk + rope) / 2 + heads v / 2)`` (MLA), over the same layers.

The MTP layers count as MoE layers when the last layer is one (L859-866); the sum is L1114-1166. Megatron pads the vocabulary to a
multiple of ``make_vocab_size_divisible_by x TP``; the caller states the padded size.

``python tools/megatron_flops.py`` prints, for each model of ``CHECKS``, the GFLOP a token this count gives next to
the ratio of Megatron-Bridge's published "Model TFLOP/sec/GPU" to its "Tokens/sec/GPU" for the same model and
sequence length (the 26.04 page, which counts with the same function): tests/test_megatron_flops.py holds them
together.
"""
from __future__ import annotations

from typing import Any

#: (catalog model, sequence length, MTP layers, padded vocabulary, published TFLOP/s/GPU, published tokens/s/GPU):
#: NVIDIA-NeMo/Megatron-Bridge@74695a06d759adcab3d782193127969213e4f005 docs/performance-summary.md, '26.04 NeMo
#: Container', the DGX-GB200 row of each model (L71, L90, L100). DeepSeek-V3 trains one MTP layer there
#: (recipes/deepseek/deepseek_v3.py:L84-85).
CHECKS: tuple[tuple[str, int, int, int, float, float], ...] = (
    ("qwen3-30b-a3b", 4096, 0, 151936, 599.0, 26032.0),
    ("qwen3-235b-a22b", 4096, 0, 151936, 840.0, 5672.0),
    ("deepseek-v3", 4096, 1, 129280, 1090.0, 4193.0),
)


def _moe_layers(model: Any) -> tuple[int, int, bool]:
    """(dense layers, MoE layers, whether the last layer is MoE) of *model*'s body, as the catalog lays it out
    (``Model.kinds`` / ``layer_kinds_in_order``)."""
    body = model.layer_kinds_in_order[: model.num_hidden_layers]
    moe = [model.kinds[index].ffn == "moe" for index in body]
    return len(body) - sum(moe), sum(moe), moe[-1]


def step_flops(model: Any, *, global_batch: int, seq_length: int, padded_vocab: int, mtp_layers: int = 0) -> float:
    """Megatron-LM's ``num_floating_point_operations`` of one step of *global_batch* sequences of *seq_length*."""
    h = model.hidden_size
    dense, moe, last_moe = _moe_layers(model)
    if last_moe:
        moe += mtp_layers
    else:
        dense += mtp_layers
    layers = model.num_hidden_layers + mtp_layers
    fb, fma = 3.0, 2.0
    ffn_factor = 3.0 if model.gated_ffn else 2.0
    heads = model.num_attention_heads
    if model.kv_lora_rank:   # MLA (training.py:L896-962)
        qk, rope, v = model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim
        q_term = (h * heads * (qk + rope) if not model.q_lora_rank
                  else model.q_lora_rank * (h + heads * (qk + rope) + 1))
        attn = fb * fma * (q_term + model.kv_lora_rank * (h + heads * (qk + v) + 1) + h * rope + heads * v * h)
        core = fb * fma * (heads * (qk + rope) / 2.0 + heads * v / 2.0)
    else:                    # MHA / GQA (L964-992)
        query = model.head_dim * heads
        key = value = model.head_dim * model.num_key_value_heads
        attn = fb * fma * (h * (query + key + value) + query * h)
        core = fb * fma * query / 2.0 * 2.0
    tokens = float(global_batch) * seq_length
    per_token = (fb * fma * h * (model.intermediate_size * ffn_factor * dense
                                 + model.moe_intermediate_size * model.num_experts_per_tok * ffn_factor * moe
                                 + model.shared_expert_intermediate_size * ffn_factor * moe)
                 + attn * layers
                 + fb * fma * mtp_layers * (3.0 * h + 2.0 * h * h)
                 + fb * fma * h * padded_vocab * (mtp_layers + 1))
    return tokens * per_token + float(global_batch) * seq_length * seq_length * core * layers


def step_seconds(tflops_per_gpu: float, gpus: int, flops: float) -> float:
    """The step time a published Megatron TFLOP/s per GPU implies: the step's FLOPs over all GPUs' rate."""
    return flops / (tflops_per_gpu * 1e12 * gpus)


def main() -> None:
    from ndcost.spec.model import Model

    for name, seq, mtp, vocab, tflops, tokens in CHECKS:
        per_token = step_flops(Model.from_catalog(name), global_batch=1, seq_length=seq, padded_vocab=vocab,
                               mtp_layers=mtp) / seq
        print(f"{name:16s} Megatron-LM count {per_token / 1e9:8.3f} GFLOP a token; Megatron-Bridge's page "
              f"{tflops * 1e3 / tokens:8.3f} ({tflops} TFLOP/s / {tokens:.0f} tokens/s)")


if __name__ == "__main__":
    main()
