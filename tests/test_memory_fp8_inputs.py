"""Under fp8 Transformer Engine's linear layers save the fp8-quantized copy of their input for the weight
gradient, not the 16-bit input (TE@d0067d0d module/linear.py:598-621, layernorm_linear.py:477-487 and
:526-536, grouped_linear.py:538-548; the sources in full: ndcost/kernels/memory.py above _ffn_bytes).
Hand-derived figures for one layer, both backends; torchao's Float8Linear (fp8_weight_cache False) saves
the high-precision input and prices as bf16 (through the estimate: test_memory_formulas.py
test_the_estimate_prices_te_fp8_inputs_and_torchao_bf16).
"""
from __future__ import annotations

import pytest

REL = 1e-12

# Llama 3 70B: h 8192, 64 heads of 128, 8 kv heads, SwiGLU width 28672; s 8192, b 1, TP 4 with SP, flash.
S, H, HEADS, KV, D, F, TP = 8192, 8192, 64, 8, 128, 28672, 4


def llama70b_layer(kernels, linear_bytes):
    return kernels.layer_activation_bytes(
        seq=S, batch=1, hidden=H, tp=TP, sp=TP, cp=1, etp=TP, attention=0, heads=HEADS, kv_heads=KV,
        head_dim=D, out_gate=0, qk_norm=0, q_lora=0, kv_lora=0, qk_nope=0, qk_rope=0, v_dim=0,
        lin_k_heads=0, lin_k_dim=0, lin_v_heads=0, lin_v_dim=0, lin_conv=0, lin_chunk=64,
        ffn=0, gated=1, ffn_width=F, experts=0, top_k=0, shared_width=0, token_factor=1, flash=1,
        compute_bytes=2, softmax_bytes=4, dropout_bytes=0, norm_bytes=2, linear_bytes=linear_bytes,
        option=0, keep_mask=0xFF, slice_input=0)


def test_one_llama70b_layer_bf16_and_fp8_by_hand(kernels):
    """Bytes per token at TP 4 with SP (h/tp = 2048, width/tp = 7168, 16 query and 2 kv heads a rank):
    bf16: two norm inputs 2·2048·2 = 8192; QKV input 2048·2 = 4096; Q, K, V (2048 + 2·256)·2 = 5120;
    core output (projection input) 2048·2 = 4096; logsumexp 16·4 = 64; fc1 input 2048·2 = 4096; gate and
    up outputs 2·7168·2 = 28672; activation output (fc2 input) 7168·2 = 14336: 68,672 bytes a token,
    562,561,024 for 8192 tokens. fp8: the QKV, fc1 and fc2 inputs at 1 byte (2048 + 2048 + 7168 = 11,264
    bytes less): 57,408 a token, 470,286,336."""
    assert llama70b_layer(kernels, 2) == pytest.approx(68_672 * S, rel=REL) == 562_561_024
    assert llama70b_layer(kernels, 1) == pytest.approx(57_408 * S, rel=REL) == 470_286_336


def test_one_moe_layer_fp8_by_hand(kernels):
    """Qwen3-30B-A3B-like MoE FFN (h 2048, 128 experts of 768, top 8, a shared expert of 1024, no TP), 8192
    tokens: under fp8 each routed row's permuted input (h) and activation output (768) drop to 1 byte,
    8192·8·(2048 + 768) bytes less; the shared expert's activation output too (1024 a token), while its fc1
    saves a quantized copy of the router's input beside the router's bf16 one (2048 a token more)."""
    tokens, h, width, shared, k = 8192.0, 2048.0, 768.0, 1024.0, 8.0
    args = dict(seq=tokens, batch=1.0, hidden=h, tp=1.0, sp=1.0, cp=1.0, etp=1.0, attention=4, heads=0.0,
                kv_heads=0.0, head_dim=0.0, out_gate=0, qk_norm=0, q_lora=0.0, kv_lora=0.0, qk_nope=0.0,
                qk_rope=0.0, v_dim=0.0, lin_k_heads=0.0, lin_k_dim=0.0, lin_v_heads=0.0, lin_v_dim=0.0,
                lin_conv=0.0, lin_chunk=0.0, ffn=1, gated=1, ffn_width=width, experts=128.0, top_k=k,
                shared_width=shared, token_factor=1.0, flash=1, compute_bytes=2.0, softmax_bytes=4.0,
                dropout_bytes=0.0, norm_bytes=2.0, linear_bytes=2.0, option=0, keep_mask=0xFF, slice_input=0)
    bf16 = kernels.layer_activation_bytes(**args)
    fp8 = kernels.layer_activation_bytes(**{**args, "linear_bytes": 1.0})
    assert bf16 - fp8 == pytest.approx(tokens * k * (h + width) + tokens * shared - tokens * h, rel=REL)


def test_mla_fp8_by_hand(kernels):
    """DeepSeek-V3 MLA (q_lora 1536, kv_lora 512), no TP, 4096 tokens: the two down-projections each save an
    fp8 copy of the norm output (2 · 1 byte, as the one bf16 copy), the up-projections' normed latents drop
    to 1 byte: 4096·(1536 + 512) bytes less."""
    tokens = 4096.0
    args = dict(seq=tokens, batch=1.0, hidden=7168.0, tp=1.0, sp=1.0, cp=1.0, etp=1.0, attention=1, heads=128.0,
                kv_heads=128.0, head_dim=128.0, out_gate=0, qk_norm=0, q_lora=1536.0, kv_lora=512.0, qk_nope=128.0,
                qk_rope=64.0, v_dim=128.0, lin_k_heads=0.0, lin_k_dim=0.0, lin_v_heads=0.0, lin_v_dim=0.0,
                lin_conv=0.0, lin_chunk=0.0, ffn=2, gated=1, ffn_width=0.0, experts=0.0, top_k=0.0,
                shared_width=0.0, token_factor=1.0, flash=1, compute_bytes=2.0, softmax_bytes=4.0,
                dropout_bytes=0.0, norm_bytes=2.0, linear_bytes=2.0, option=0, keep_mask=0xFF, slice_input=0)
    bf16 = kernels.layer_activation_bytes(**args)
    fp8 = kernels.layer_activation_bytes(**{**args, "linear_bytes": 1.0})
    assert bf16 - fp8 == pytest.approx(tokens * (1536.0 + 512.0), rel=REL)
