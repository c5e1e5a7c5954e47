"""The hybrid state-space kinds (ndcost.spec.mamba): a Mamba-2 mixer block, an MLP-only block and an
attention-only block, priced in seconds and memory by hand-derived formulas, on both backends."""
from __future__ import annotations

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import SECONDS_LAYER, SECONDS_LAYER_FIELDS
from ndcost.spec.mamba import mamba_mixer_parameters, ssd_flops_per_token
from ndcost.tables.seconds import seconds_arrays

L = SECONDS_LAYER
H, LAYERS, HEADS, P, N, G, CONV, Q, FF, VOCAB = 256, 4, 8, 32, 16, 2, 4, 64, 512, 1000


def _hybrid() -> ndcost.Model:
    return ndcost.Model(name="tiny-hybrid", hidden_size=H, num_hidden_layers=LAYERS, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=VOCAB, intermediate_size=FF, gated_ffn=False,
                        layer_types=("mamba", "mlp", "attention", "mlp"), mamba_num_heads=HEADS,
                        mamba_head_dim=P, mamba_state_size=N, mamba_n_groups=G, mamba_conv_kernel=CONV,
                        mamba_chunk_size=Q, family="nemotron_h")


def _transformer() -> ndcost.Model:
    """The same attention and MLP as one transformer layer (two sub-blocks)."""
    return ndcost.Model(name="tiny-transformer", hidden_size=H, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=VOCAB, intermediate_size=FF, gated_ffn=False)


SPEC = ndcost.ExecSpec(dp=1, tp=2, pp=1, micro_batch_size=2, micro_batch_num=1, seq_length=1024,
                       sequence_parallel=True)


def _rows(kernels, model) -> dict:
    a = seconds_arrays(model, SPEC, ndcost.Cluster("h100-sxm", SPEC.num_devices))
    out = np.empty((len(model.kinds), len(SECONDS_LAYER_FIELDS)))
    kernels.seconds_layer_times(a["kinds"], a["skinds"], a["model"], a["smodel"], a["cand"], a["rate"], out)
    return {kind.name: out[k] for k, kind in enumerate(model.kinds)}


def test_mamba_mixer_parameters_by_hand():
    d_inner, conv = HEADS * P, HEADS * P + 2 * G * N
    expected = H * (d_inner + conv + HEADS) + conv * CONV + conv + 3 * HEADS + d_inner + d_inner * H
    assert mamba_mixer_parameters(_hybrid()) == expected


def test_ssd_flops_by_hand():
    """Dao & Gu 2024 §6, per token and head: C·Bᵀ on the diagonal block 2·Q·N, times X 2·Q·P, the
    chunk state Bᵀ·X 2·N·P, its output C·h 2·N·P."""
    assert ssd_flops_per_token(P, N, Q) == 2 * Q * N + 2 * Q * P + 2 * N * P + 2 * N * P


def test_each_block_prices_its_one_part(kernels):
    rows = _rows(kernels, _hybrid())
    b, s = 2.0, 1024.0
    d_inner, conv = HEADS * P, HEADS * P + 2 * G * N
    n_in = d_inner + conv + HEADS
    mamba = rows["mamba_none"]
    # in_proj + out_proj, then the scan: model FLOPs of the block's forward
    assert mamba[L["flops_f"]] == pytest.approx(
        2 * b * s * H * (n_in + d_inner) + b * s * HEADS * ssd_flops_per_token(P, N, Q), rel=1e-12)
    assert mamba[L["flops_core"]] == 0.0 and mamba[L["ffn_mm_flops"]] == 0.0
    assert mamba[L["att_mm_flops"]] == pytest.approx(2 * b * s * H * (n_in + d_inner), rel=1e-12)
    assert mamba[L["core_b"]] == pytest.approx(2 * mamba[L["core_f"]], rel=1e-12)
    mlp = rows["none_dense"]
    assert mlp[L["flops_f"]] == pytest.approx(2 * b * s * H * 2 * FF, rel=1e-12)
    assert mlp[L["att_mm_flops"]] == 0.0
    attention = rows["full_none"]
    assert attention[L["ffn_mm_flops"]] == 0.0 and attention[L["flops_core"]] > 0.0
    # one sub-block: one all-gather and one reduce-scatter each way, half a transformer layer's
    layer = next(iter(_rows(kernels, _transformer()).values()))
    for block in (mamba, mlp, attention):
        assert block[L["tp_f"]] == pytest.approx(layer[L["tp_f"]] / 2, rel=1e-12)
    # the attention-only and MLP-only blocks hold the transformer layer's matmuls between them
    assert attention[L["att_mm_flops"]] + mlp[L["ffn_mm_flops"]] == pytest.approx(
        layer[L["att_mm_flops"]] + layer[L["ffn_mm_flops"]], rel=1e-12)


def test_mamba_block_activations_by_hand(kernels):
    """Per token, split over tp: the pre-norm's and in_proj's inputs (SP-split), z/x/B/C/dt, the conv's
    x/B/C, y and the gated norm's output (2 bytes each); full recompute keeps the input alone."""
    seq, batch, tp = 4096.0, 2.0, 2.0
    args = dict(seq=seq, batch=batch, hidden=float(H), tp=tp, sp=tp, cp=1.0, etp=1.0, attention=3, heads=0.0,
                kv_heads=0.0, head_dim=0.0, out_gate=0, qk_norm=0, q_lora=0.0, kv_lora=0.0, qk_nope=0.0,
                qk_rope=0.0, v_dim=0.0, lin_k_heads=float(G), lin_k_dim=float(N), lin_v_heads=float(HEADS),
                lin_v_dim=float(P), lin_conv=float(CONV), lin_chunk=float(Q), ffn=2, gated=0, ffn_width=0.0,
                experts=0.0, top_k=0.0, shared_width=0.0, token_factor=1.0, flash=1, compute_bytes=2.0,
                softmax_bytes=4.0, dropout_bytes=0.0, norm_bytes=2.0, linear_bytes=2.0, option=0, keep_mask=0, slice_input=0)
    tokens = seq * batch
    d_inner, conv = HEADS * P, HEADS * P + 2 * G * N
    expected = tokens * H / tp * 2 * 2 + tokens * 2 * ((d_inner + conv + HEADS) + conv + 2 * d_inner) / tp
    assert kernels.layer_activation_bytes(**args) == pytest.approx(expected, rel=1e-12)
    assert kernels.layer_activation_bytes(**{**args, "option": 1}) == pytest.approx(tokens * H * 2 / tp, rel=1e-12)
    # an MLP-only block: one norm input, the MLP's input and its two-matmul activations
    mlp = kernels.layer_activation_bytes(**{**args, "attention": 4, "ffn": 0, "ffn_width": float(FF)})
    two_part = kernels.layer_activation_bytes(**{**args, "attention": 4, "ffn": 0, "ffn_width": float(FF),
                                                 "norm_bytes": 0.0})
    assert mlp - two_part == pytest.approx(tokens * H / tp * 2, rel=1e-12)    # exactly one norm's input


def test_the_hybrid_model_prices_the_same_on_both_backends(ckernels):
    from strategies import on_both_backends

    model = _hybrid()
    spec = ndcost.ExecSpec(dp=2, tp=2, pp=2, global_batch_size=16, seq_length=2048, sequence_parallel=True)
    cluster = ndcost.Cluster("h100-sxm", spec.num_devices)
    results = on_both_backends(lambda: ndcost.estimate(model, spec, cluster))
    c, py = results["cython"], results["python"]
    assert c.step_time == pytest.approx(py.step_time, rel=1e-12)
    assert c.memory.peak_reserved == pytest.approx(py.memory.peak_reserved, rel=1e-12)
    assert 0.0 < c.mfu <= c.hfu <= 1.0


def test_mamba1_layer_by_hand(kernels):
    """A Jamba-style Mamba-1 layer: in_proj h -> 2·d, x_proj d -> R + 2N, dt_proj R -> d, out_proj d -> h,
    2·b·s FLOPs a weight; the selective scan's 9·b·s·d·N FLOPs run at HBM rate on x, dt, z, y (d over
    tp each) and B, C (N each, whole), backward twice; and the bytes the layer keeps."""
    from ndcost.kernels.columns import RATE

    d, rank = 512, 16
    model = ndcost.Model(name="tiny-jamba", hidden_size=H, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=VOCAB, intermediate_size=FF,
                         layer_types=("mamba1", "full_attention"), mamba_d_inner=d, mamba_dt_rank=rank,
                         mamba_state_size=N, mamba_conv_kernel=CONV, family="jamba")
    a = seconds_arrays(model, SPEC, ndcost.Cluster("h100-sxm", SPEC.num_devices))
    out = np.empty((len(model.kinds), len(SECONDS_LAYER_FIELDS)))
    kernels.seconds_layer_times(a["kinds"], a["skinds"], a["model"], a["smodel"], a["cand"], a["rate"], out)
    row = out[0]
    b, s, t = 2.0, 1024.0, 2.0
    projections = 2 * b * s * (2 * H * d + d * (rank + 2 * N) + rank * d + d * H)
    assert row[L["att_mm_flops"]] == pytest.approx(projections, rel=1e-12)
    scan = 9.0 * b * s * d * N
    ffn = 2 * b * s * H * 3 * FF
    assert row[L["flops_f"]] == pytest.approx(projections + scan + ffn, rel=1e-12)
    rate = a["rate"]
    hbm = rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]
    tokens = b * s
    expected = 2.0 * tokens * (4 * d / t + 2 * N) / hbm + rate[RATE["kernel_s"]]
    assert row[L["core_f"]] == pytest.approx(expected, rel=1e-12)
    assert row[L["core_b"]] == pytest.approx(2 * expected, rel=1e-12)
    # memory: in_proj input (SP-split), x, z, conv x, delta, y (d over tp) and dt, B, C (R + 2N), 2 bytes
    args = dict(seq=s, batch=b, hidden=float(H), tp=t, sp=t, cp=1.0, etp=1.0, attention=5, heads=0.0,
                kv_heads=0.0, head_dim=0.0, out_gate=0, qk_norm=0, q_lora=0.0, kv_lora=0.0, qk_nope=0.0,
                qk_rope=0.0, v_dim=0.0, lin_k_heads=float(rank), lin_k_dim=float(N), lin_v_heads=float(d),
                lin_v_dim=1.0, lin_conv=float(CONV), lin_chunk=1.0, ffn=2, gated=1, ffn_width=0.0,
                experts=0.0, top_k=0.0, shared_width=0.0, token_factor=1.0, flash=1, compute_bytes=2.0,
                softmax_bytes=4.0, dropout_bytes=0.0, norm_bytes=2.0, linear_bytes=2.0, option=0, keep_mask=0, slice_input=0)
    kept = tokens * H / t * 2 * 2 + tokens * 2 * (5 * d / t + rank + 2 * N)
    assert kernels.layer_activation_bytes(**args) == pytest.approx(kept, rel=1e-12)
