"""Seconds-mode kernels: a hand-worked layer, collectives, the pipeline combine, parity, checks.

Every numeric test runs on both backends (the ``kernels`` fixture); the parity test compares
the compiled module with the oracle on ~300 seeded candidates and the edge cases.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import (
    PART, PART_NAMES, RATE, SCHEDULES, SECONDS_CAND, SECONDS_LAYER, SECONDS_MODEL, SECONDS_LAYER_FIELDS, SECONDS_STAGE,
    SECONDS_STAGE_FIELDS,
)
from ndcost.tables.seconds import Overlap, seconds_arrays
from ndcost.tables.joint_rules import validate
from seconds_runs import run_seconds, with_rate

L = SECONDS_LAYER
S = SECONDS_STAGE

# ----------------------------------------------------------------------------- the hand-worked layer
# One GPT-3 175B layer (h = 12288, 96 heads of 128, GELU MLP 4h, LayerNorm) on an A100 80GB at
# tp = 8, no SP, b = 1, s = 2048, fp16 activations, no flash attention, 1-byte dropout masks,
# fp32 gradients; default rates: peak 312e12 x MAMF 271.2/312 at the clock the A100 holds at its power limit
# (1305 of 1410 MHz), HBM 2.039e12 x 0.8, 3 us per kernel, 108 SMs x 256 x 128 outputs per wave with a quarter of
# a wave idle on average (the A100's measured gemm_wave_tail), NVLink 300e9 x 0.8 per direction, 5 us per step.
PEAK_EFF = 271.2e12 * 1305.0 / 1410.0  # 312e12 x (271.2 / 312) x 1305 / 1410
HBM = 2.039e12 * 0.8                   # achievable HBM bytes/s
KERNEL = 3e-6
WAVE = 108 * 256 * 128
WAVE_TAIL = 0.25
NVLINK = 300e9 * 0.8
H, A, D, FFN, SEQ, TP = 12288, 96, 128, 49152, 2048, 8


def _gemm(m, n, k, batch=1.0, out_bytes=2.0):
    """The documented GEMM price, restated: max(FLOPs/(eff·peak)·(1 + tail/waves), bytes/HBM) + 3 us."""
    flops = 2.0 * m * n * k * batch
    waves = batch * m * n / WAVE
    moved = batch * (2.0 * (m * k + k * n) + out_bytes * m * n)
    return max(flops / PEAK_EFF * (1.0 + WAVE_TAIL / waves), moved / HBM) + KERNEL


def _model_175b():
    return ndcost.Model(name="gpt3-175b-hand", hidden_size=H, num_hidden_layers=96, num_attention_heads=A,
                        vocab_size=51200, intermediate_size=FFN, gated_ffn=False, norm="layernorm",
                        attention_bias=True, mlp_bias=True, learned_position_embeddings=SEQ,
                        tie_word_embeddings=True, family="gpt2")


def _gpt3_layer_arrays():
    model = _model_175b()
    spec = ndcost.ExecSpec(dp=1, tp=TP, pp=1, micro_batch_size=1, global_batch_size=1, seq_length=SEQ,
                           recompute="full", zero_stage=0, flash_attention=False, precision="fp16",
                           compute_bytes=2, grad_bytes=4, dropout_bytes=1, overlapped_grad_reduce=False)
    cluster = ndcost.Cluster("a100-80g", TP)
    validate(model, spec, cluster)
    return seconds_arrays(model, spec, cluster)


def test_hand_worked_gpt3_layer_at_tp8(kernels):
    a = _gpt3_layer_arrays()
    out = np.empty((1, len(SECONDS_LAYER_FIELDS)))
    kernels.seconds_layer_times(a["kinds"], a["skinds"], a["model"], a["smodel"], a["cand"], a["rate"], out)
    row = out[0]
    tokens = 1.0 * SEQ                  # b·s/cp tokens on this rank
    x = tokens * H                      # one hidden activation (not split: no SP)

    # Forward GEMMs (m = tokens): QKV h -> 3h/8 (4608 outputs, 2.67 waves), proj h/8 -> h
    # (7.11 waves), FC1 h -> 4h/8 (3.56 waves), FC2 4h/8 -> h.
    qkv = _gemm(tokens, 3 * H / TP, H)
    proj = _gemm(tokens, H, H / TP)
    fc1 = _gemm(tokens, FFN / TP, H)
    fc2 = _gemm(tokens, H, FFN / TP)
    # Attention core, 96/8 = 12 heads: QK^T [2048 x 128]·[128 x 2048] and AV [2048 x 2048]·[2048 x 128],
    # both memory-bound (12 x 2048² fp16 scores written / read).
    core = _gemm(SEQ, SEQ, D, batch=12) + _gemm(SEQ, D, SEQ, batch=12)
    # Elementwise, forward bytes: 2 LayerNorms read + write 2 bytes of x each; GELU reads and writes
    # the 4h/8 activation; fused softmax reads and writes the 12 x 2048² scores; attention dropout
    # reads, writes and keeps a 1-byte mask (5 bytes); the context permute reads and writes x/8;
    # two bias-dropout-add kernels read output and residual, write, keep a mask (7 bytes of x).
    scores = 12.0 * SEQ * SEQ
    norm = 2 * 2 * 2 * x
    act = 2 * 2 * tokens * FFN / TP
    softmax = 2 * 2 * scores
    dropout = 5 * scores
    permute = 2 * 2 * x / TP
    other = 2 * 7 * x
    elementwise = (norm + act + softmax + dropout + permute + other) / HBM + 8 * KERNEL   # 8 kernels
    assert row[L["gemm_f"]] == pytest.approx(qkv + proj + fc1 + fc2, rel=1e-12)
    assert row[L["core_f"]] == pytest.approx(core, rel=1e-12)
    assert row[L["fw"]] == pytest.approx(qkv + proj + fc1 + fc2 + core + elementwise, rel=1e-12)
    # ~4.7 ms: 3.85 ms of GEMMs at ~86% of MAMF after wave quantization, 0.15 ms of attention core
    assert 4.5e-3 < row[L["fw"]] < 4.9e-3

    # Backward: input-gradient GEMMs of the forward's FLOPs; weight gradients accumulate into
    # fp32 main_grad (read + write 4 bytes); four attention BMMs; pointwise backward 1.5x the bytes.
    dgrad = (_gemm(tokens, H, 3 * H / TP) + _gemm(tokens, H / TP, H)
             + _gemm(tokens, H, FFN / TP) + _gemm(tokens, FFN / TP, H))
    wgrad = (_gemm(H, 3 * H / TP, tokens, out_bytes=8.0) + _gemm(H / TP, H, tokens, out_bytes=8.0)
             + _gemm(H, FFN / TP, tokens, out_bytes=8.0) + _gemm(FFN / TP, H, tokens, out_bytes=8.0))
    core_b = (_gemm(SEQ, D, SEQ, 12) + _gemm(SEQ, D, SEQ, 12) + _gemm(SEQ, SEQ, D, 12) + _gemm(SEQ, D, SEQ, 12))
    ew_back = 1.5 * (norm + act + softmax + dropout + permute + other) / HBM + 8 * KERNEL
    assert row[L["bw_w"]] == pytest.approx(wgrad, rel=1e-12)
    assert row[L["bw"]] == pytest.approx(dgrad + core_b + ew_back, rel=1e-12)

    # TP without SP: 2 all-reduces of the 2048 x 12288 x 2 B activation per pass, in one node:
    # 2·(8-1)/8 x 50.3 MB / 240 GB/s + 2·(8-1) x 5 us = 0.437 ms each.
    full = 2.0 * x
    all_reduce = 2 * 7 / 8 * full / NVLINK + 14 * 5e-6
    assert row[L["tp_f"]] == pytest.approx(2 * all_reduce, rel=1e-12)
    assert row[L["tp_b"]] == pytest.approx(2 * all_reduce, rel=1e-12)
    assert row[L["sw_gather"]] == 0.0                       # no SP: nothing to re-gather

    # Selective switches: the forward of each class alone.
    assert row[L["sw_attBMM"]] == pytest.approx(core + permute / HBM + KERNEL, rel=1e-12)
    assert row[L["sw_softmax"]] == pytest.approx(softmax / HBM + KERNEL, rel=1e-12)
    assert row[L["sw_dropout"]] == pytest.approx(dropout / HBM + KERNEL, rel=1e-12)
    assert row[L["sw_normOp"]] == pytest.approx(norm / HBM + 2 * KERNEL, rel=1e-12)
    assert row[L["sw_ffAct"]] == pytest.approx(act / HBM + KERNEL, rel=1e-12)
    assert row[L["sw_headCast"]] == 0.0 and row[L["sw_attUp"]] == 0.0

    # Model FLOPs of the forward: Narayanan et al. 2021 Eq. 2's 24·b·s·h²·(1 + s/6h) per layer counts the
    # whole s x s matrix; a causal model needs half of it (s/12h), and this unfused kernel runs the
    # other half too (HFU's flops_core_extra).
    assert row[L["flops_f"]] == pytest.approx(24.0 * SEQ * H * H * (1.0 + SEQ / (12.0 * H)), rel=1e-12)
    assert row[L["flops_core_extra"]] == pytest.approx(24.0 * SEQ * H * H * SEQ / (12.0 * H), rel=1e-12)
    # Parameters on this device: the layer's real count (12h² weights + 13h biases and norms) / 8.
    assert row[L["p_dense"]] == pytest.approx((12 * H * H + 13 * H) / TP)
    assert row[L["p_dense"]] == pytest.approx(sum(_model_175b().kind_parameters(0)) / TP)


# ----------------------------------------------------------------------------- collectives

def _rate(**changes):
    cluster = ndcost.Cluster("a100-80g", 64)
    from ndcost.spec.rates import Rates
    from ndcost.tables.seconds import rates_vector
    vec = rates_vector(cluster, Rates.for_device("a100-80g"), "bf16")
    for name, value in changes.items():
        vec[RATE[name]] = value
    return vec


def test_collectives_in_a_node_and_across_nodes(kernels):
    rate = _rate()
    moved = 1e9
    nvlink, ib = 300e9 * 0.8, 25e9 * 0.9
    # in one node (8 x stride 1): ring all-reduce 2(n-1)/n·B/bw + 2(n-1)·alpha
    assert kernels.seconds_collective(0, moved, 8.0, 1.0, rate) == pytest.approx(2 * 7 / 8 * moved / nvlink + 14 * 5e-6)
    assert kernels.seconds_collective(1, moved, 4.0, 2.0, rate) == pytest.approx(3 / 4 * moved / nvlink + 3 * 5e-6)
    # 32 ranks at stride 1: 8 per node, 4 nodes: reduce-scatter in the node, scale-out on B/8, all-gather
    inner = 7 / 8 * moved / nvlink + 7 * 5e-6
    outer = 3 / 4 * (moved / 8) / ib + 3 * 1e-5
    assert kernels.seconds_collective(0, moved, 32.0, 1.0, rate) == pytest.approx(2 * (inner + outer))
    assert kernels.seconds_collective(1, moved, 32.0, 1.0, rate) == pytest.approx(inner + outer)
    # stride 8 (one rank per node): a pure scale-out ring
    assert kernels.seconds_collective(1, moved, 16.0, 8.0, rate) == pytest.approx(15 / 16 * moved / ib + 15 * 1e-5)
    # all-to-all over 16 ranks, 8 per node: NVLink and NIC shares run at once, the slower counts
    a2a = max(7 / 16 * moved / nvlink + 7 * 5e-6, 8 / 16 * moved / ib + 8 * 1e-5)
    assert kernels.seconds_collective(2, moved, 16.0, 1.0, rate) == pytest.approx(a2a)
    # send/recv: one hop
    assert kernels.seconds_collective(3, moved, 2.0, 64.0, rate) == pytest.approx(moved / ib + 1e-5)
    assert kernels.seconds_collective(3, moved, 2.0, 1.0, rate) == pytest.approx(moved / nvlink + 5e-6)
    # nothing to do, and a bad stride
    assert kernels.seconds_collective(0, moved, 1.0, 1.0, rate) == 0.0
    assert kernels.seconds_collective(0, 0.0, 8.0, 1.0, rate) == 0.0
    assert math.isnan(kernels.seconds_collective(0, moved, 8.0, 0.0, rate))


# ----------------------------------------------------------------------------- the combine

def _cand(**values):
    cand = np.zeros(len(SECONDS_CAND))
    defaults = dict(b=1, s=1024, t=1, sp=1, cp=1, ep=1, t_exp=1, d=1, edp=1, p=4, vp=1, m=8, seq_split=1,
                    bytes_c=2, bytes_mm=2, bytes_p=2, bytes_grad=4, bytes_opt=34, dropout_bytes=0,
                    schedule=0, pp_runs=1)
    defaults.update(values)
    for name, value in defaults.items():
        cand[SECONDS_CAND[name]] = value
    return cand


def _stages(per_stage):
    stage = np.zeros((len(per_stage), len(SECONDS_STAGE_FIELDS)))
    for i, fields in enumerate(per_stage):
        for name, value in fields.items():
            stage[i, S[name]] = value
    return stage


def _combine(kernels, stage, cand):
    parts = np.empty(len(PART_NAMES))
    times = np.empty(stage.shape[0])
    step = kernels.seconds_combine(stage, cand, parts, times)
    return step, parts, times


def test_one_f_one_b_is_m_minus_one_stragglers_plus_every_stage(kernels):
    stage = _stages([dict(fw=1.0, bw=2.0, layers=4), dict(fw=1.5, bw=3.0, layers=4),
                     dict(fw=1.0, bw=2.0, layers=4), dict(fw=1.0, bw=2.5, layers=4)])
    cand = _cand(m=8, p=4)
    step, parts, times = _combine(kernels, stage, cand)
    assert step == pytest.approx(7 * 4.5 + (3.0 + 4.5 + 3.0 + 3.5))          # (m-1)·M + S
    assert parts.sum() == pytest.approx(step, rel=1e-12)
    assert parts[PART["fw_compute"]] == pytest.approx(8 * 1.5)                  # the straggler x m
    assert parts[PART["bubble"]] == pytest.approx(3.0 + 3.0 + 3.5)
    assert times[1] == pytest.approx(8 * 4.5)
    gpipe, _, _ = _combine(kernels, stage, _cand(m=8, p=4, schedule=SCHEDULES.index("gpipe")))
    assert gpipe == step


def test_interleaving_and_sequence_chunks_shrink_the_bubble(kernels):
    stage = _stages([dict(fw=1.0, bw=2.0)] * 4)
    plain, _, _ = _combine(kernels, stage, _cand(m=8, p=4))
    inter, parts, _ = _combine(kernels, stage, _cand(m=8, p=4, vp=3, schedule=SCHEDULES.index("interleaved")))
    seq, _, _ = _combine(kernels, stage, _cand(m=8, p=4, vp=1, seq_split=4, schedule=SCHEDULES.index("seq1f1b")))
    assert plain == pytest.approx(8 * 3 + 3 * 3)                                # bubble (p-1)·t
    assert inter == pytest.approx(8 * 3 + 3 * 3 / 3)                            # (p-1)·t/v
    assert seq == pytest.approx(8 * 3 + 3 * 3 / 4)                              # (p-1)·t/n
    assert parts[PART["bubble"]] == pytest.approx(3.0)


def test_zero_bubble_v_uses_dualpipe_bubble(kernels):
    # F = 1, full backward B = 2 (input grads 1 + recompute 0.5 + weight grads 0.5), W = 0.5, F&B = 3
    # per device and micro-batch: DualPipeV's (PP/2 - 1)(F&B + B - 3W) at PP = 2p chunks of half a
    # stage = (p - 1)·(3 + 2 - 1.5)/2
    stage = _stages([dict(fw=1.0, bw=1.0, rc=0.5, bw_w=0.5)] * 4)
    step, parts, _ = _combine(kernels, stage, _cand(m=8, p=4, vp=2, schedule=SCHEDULES.index("zero_bubble_v")))
    assert step == pytest.approx(8 * 3.0 + 3 * (3.0 + 2.0 - 1.5) / 2)
    assert parts[PART["bubble"]] == pytest.approx(3 * 3.5 / 2)


def test_data_parallel_tail_starts_when_each_stage_ends_its_backward(kernels):
    # stage 0 ends last; stage 1 ends one backward (2.0) earlier, so its 2.5 s reduction shows 0.5.
    stage = _stages([dict(fw=1.0, bw=2.0, dp_reduce=1.0, opt=0.25, layers=2),
                     dict(fw=1.0, bw=2.0, dp_reduce=2.5, opt=0.25, layers=2)])
    step, parts, times = _combine(kernels, stage, _cand(m=4, p=2, ov_dp=0.0))
    pipeline = 3 * 3.0 + 6.0
    assert step == pytest.approx(pipeline + 1.25)                               # stage 0's 1.0 + 0.25
    assert parts[PART["dp_reduce"]] == pytest.approx(1.0)
    assert parts.sum() == pytest.approx(step, rel=1e-12)
    assert times[1] == pytest.approx(4 * 3.0 + 2.75)
    # overlapped with the last backward (2.0 s window), the first layer's bucket (1/2) stays exposed
    step_ov, parts_ov, _ = _combine(kernels, stage, _cand(m=4, p=2, ov_dp=1.0))
    assert parts_ov[PART["dp_reduce"]] == pytest.approx(0.5)
    assert step_ov == pytest.approx(pipeline + 0.5 + 0.25)


def test_combine_nan_for_a_nan_stage_or_no_micro_batch(kernels):
    stage = _stages([dict(fw=1.0, bw=2.0), dict(fw=math.nan)])
    step, parts, times = _combine(kernels, stage, _cand(m=4, p=2))
    assert math.isnan(step) and np.isnan(parts).all() and np.isnan(times).all()
    step, _, _ = _combine(kernels, _stages([dict(fw=1.0)]), _cand(m=0, p=1))
    assert math.isnan(step)


# ----------------------------------------------------------------------------- parity

_MODELS = ("llama3-8b", "llama3-70b", "deepseek-v3", "qwen3-next-80b-a3b", "mixtral-8x7b", "qwen3-30b-a3b")


def _random_spec(rng, model):
    """A valid random strategy for *model* on a cluster, or None."""
    heads = model.num_attention_heads
    tp = int(rng.choice([t for t in (1, 2, 4, 8) if heads % t == 0 and model.num_key_value_heads % t == 0] or [1]))
    pp = int(rng.choice([1, 2, 4]))
    cp = int(rng.choice([1, 1, 2]))
    dp = int(rng.choice([1, 2, 4, 8]))
    ep = 1
    if model.is_moe:
        ep = int(rng.choice([e for e in (1, 2, 4, 8) if model.num_experts % e == 0 and e <= dp * tp]))
    schedule = str(rng.choice(["1f1b", "1f1b", "gpipe", "seq1f1b", "zero_bubble_v"]))
    vpp = 2 if schedule == "zero_bubble_v" or (schedule == "1f1b" and rng.random() < 0.3) else 1
    if pp == 1:
        vpp, schedule = 1, "1f1b"
    seq = int(rng.choice([2048, 4096]))
    return dict(
        dp=dp, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, micro_batch_size=int(rng.choice([1, 2])),
        micro_batch_num=int(rng.choice([1, 4, 16])), seq_length=seq, sequence_parallel=bool(rng.random() < 0.5),
        recompute=str(rng.choice(["none", "full", "selective"])), zero_stage=int(rng.choice([0, 1, 2, 3])),
        pp_schedule=schedule, seq_split=2 if schedule == "seq1f1b" else 1,
        flash_attention=bool(rng.random() < 0.7), grouped_gemm=bool(rng.random() < 0.5),
        capacity_factor=float(rng.choice([1.0, 1.25])),
        moe_imbalance=float(rng.choice([1.0, 1.2])), cp_algo=str(rng.choice(["ring", "ulysses"])),
        tp_overlap=bool(rng.random() < 0.3), overlapped_grad_reduce=bool(rng.random() < 0.5),
        deferred_grad_accumulation=bool(rng.random() < 0.3), precision=str(rng.choice(["bf16", "fp8"])),
    )


def _candidate_arrays():
    """~40 real strategies (catalog models, H100 with fp8) plus perturbed copies: ~300 in all."""
    rng = np.random.default_rng(20240611)
    base = []
    models = [ndcost.Model.from_catalog(name) for name in _MODELS]
    while len(base) < 40:
        model = models[len(base) % len(models)]
        fields = _random_spec(rng, model)
        try:
            spec = ndcost.ExecSpec(**fields)
            cluster = ndcost.Cluster("h100-sxm", spec.num_devices)
            validate(model, spec, cluster)
        except ndcost.SpecError:
            continue
        base.append(seconds_arrays(model, spec, cluster, overlap=Overlap(cp=float(rng.random()))))
    arrays = list(base)
    moe_rng = np.random.default_rng(20260823)
    rope_rng = np.random.default_rng(20261206)
    sync_rng = np.random.default_rng(20261207)
    for i in range(260):
        a = dict(base[i % len(base)])
        cand = a["cand"].copy()
        rate = a["rate"].copy()
        cand[SECONDS_CAND["b"]] = float(rng.integers(1, 5))
        cand[SECONDS_CAND["m"]] = float(rng.integers(1, 64))
        for name in ("ov_dp", "ov_dp_gather", "ov_fsdp", "ov_tp", "ov_cp", "ov_ep"):
            cand[SECONDS_CAND[name]] = float(rng.random())
        for name in ("intra_bw", "inter_bw", "hbm_bw", "peak_mm"):
            rate[RATE[name]] *= float(rng.uniform(0.3, 3.0))
        rate[RATE["kernel_s"]] = float(rng.choice([0.0, 3e-6, 2e-5]))
        # the training-software figures (Rates.for_software): off, or a 2021 generation's
        rate[RATE["z3_fetch_bw"]] = float(rng.choice([0.0, 24.3e9, 2e11]))
        for name in ("z3_rc_gather", "z3_grad_ar", "grad_acc_pass"):
            rate[RATE[name]] = float(rng.random() < 0.5)
        # the expert all-to-all (a draw of its own, so that the cases above stay as they were): overlap
        # mode, dispatcher, its SMs, node-limited routing, fp8 dispatch; DualPipe's schedule
        cand[SECONDS_CAND["ep_mode"]] = float(moe_rng.integers(0, 3))
        cand[SECONDS_CAND["ep_disp"]] = float(moe_rng.integers(0, 3))     # NCCL, DeepEP, HybridEP
        cand[SECONDS_CAND["ep_sms"]] = float(moe_rng.choice([1.0, 20.0, 24.0, 132.0]))
        cand[SECONDS_CAND["ep_nodes"]] = float(moe_rng.choice([0.0, 1.0, 2.0, 4.0]))
        cand[SECONDS_CAND["ep_devs"]] = float(rope_rng.choice([0.0, 1.0, 2.0, 3.0]))   # device-limited routing
        cand[SECONDS_CAND["disp_b"]] = float(moe_rng.choice([2.0, 1.0 + 4.0 / 128.0]))
        if moe_rng.random() < 0.25:
            cand[SECONDS_CAND["schedule"]] = float(SCHEDULES.index(str(moe_rng.choice(["dualpipe", "dualpipev"]))))
        rate[RATE["dep_nvl_eff"]] = float(moe_rng.uniform(0.3, 1.0))
        # FSDP2's gradient sync: every micro-batch or deferred, resharded after forward or kept, the reduction's
        # own width (a draw of its own, as above)
        cand[SECONDS_CAND["defer_grads"]] = float(sync_rng.random() < 0.5)
        cand[SECONDS_CAND["reshard"]] = float(sync_rng.random() < 0.5)
        rate[RATE["grad_reduce_bytes"]] = float(sync_rng.choice([0.0, 2.0, 4.0]))
        rate[RATE["dpn"]] = float(moe_rng.choice([2.0, 4.0, 8.0]))
        # a RoPE attention factor (YaRN's) and how the stack applies it (a draw of its own, as above)
        smodel = a["smodel"].copy()
        smodel[SECONDS_MODEL["rope_scaled"]] = float(rope_rng.random() < 0.5)
        rate[RATE["rope_scale"]] = float(rope_rng.integers(0, 2))
        rate[RATE["a2a_eff"]] = float(rope_rng.uniform(0.3, 1.0))      # an all-to-all's own share of the link
        rate[RATE["dep_intra_eff"]] = float(rope_rng.uniform(0.3, 1.0))       # DeepEP inside a node: its share,
        rate[RATE["dep_call_s"]] = float(rope_rng.choice([0.0, 32.9e-6, 2e-4]))  # a call's and a token's costs
        rate[RATE["dep_tok_s"]] = float(rope_rng.choice([0.0, 11.94e-9, 5e-8]))
        a["cand"], a["rate"], a["smodel"] = cand, rate, smodel
        arrays.append(a)
    return arrays


_ARRAYS = None


def _arrays():
    global _ARRAYS
    if _ARRAYS is None:
        _ARRAYS = _candidate_arrays()
    return _ARRAYS


@pytest.mark.cython
def test_compiled_matches_oracle_on_seeded_candidates(ckernels, pykernels):
    arrays = _arrays()
    assert len(arrays) == 300
    finite = 0
    for a in arrays:
        for got, want in zip(run_seconds(ckernels, a), run_seconds(pykernels, a)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0.0, equal_nan=True)
        finite += math.isfinite(run_seconds(pykernels, a)[-1][0])
    assert finite == 300


@pytest.mark.cython
def test_compiled_matches_oracle_on_edges(ckernels, pykernels):
    a = dict(_arrays()[0])
    edges = []
    for name in ("t", "m", "bytes_c", "seq_split"):                       # a degree below 1 -> NaN
        cand = a["cand"].copy()
        cand[SECONDS_CAND[name]] = 0.0
        edges.append(dict(a, cand=cand))
    cand = a["cand"].copy()
    cand[SECONDS_CAND["b"]] = math.nan
    edges.append(dict(a, cand=cand))
    rate = a["rate"].copy()
    rate[RATE["hbm_bw"]] = 0.0                                              # a rate that is not positive
    edges.append(dict(a, rate=rate))
    rate = a["rate"].copy()
    rate[RATE["intra_lat"]] = rate[RATE["inter_lat"]] = rate[RATE["kernel_s"]] = 0.0   # no latencies
    edges.append(dict(a, rate=rate))
    counts = np.zeros_like(a["counts"])                                     # a layout with no layers
    edges.append(dict(a, counts=counts))
    for e in edges:
        for got, want in zip(run_seconds(ckernels, e), run_seconds(pykernels, e)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0.0, equal_nan=True)
    assert math.isnan(run_seconds(ckernels, edges[0])[-1][0])
    empty = np.zeros((0, len(SECONDS_STAGE_FIELDS)))
    for k in (ckernels, pykernels):
        assert math.isnan(k.seconds_combine(empty, a["cand"], np.empty(len(PART_NAMES)), np.empty(0)))


# ----------------------------------------------------------------------------- bad lengths

def test_lengths_are_checked_before_the_kernel(kernels):
    a = _arrays()[0]
    n = a["counts"].shape[0]
    out = np.empty((n, len(SECONDS_STAGE_FIELDS)))
    args = [a["kinds"], a["skinds"], a["model"], a["smodel"], a["cand"], a["rate"], a["counts"],
            a["slot_option"], a["slot_mask"], a["extras"], out]
    with pytest.raises(ValueError, match="cand"):
        kernels.seconds_stage_sums(*args[:4], a["cand"][:-1], *args[5:])
    with pytest.raises(ValueError, match="rate"):
        kernels.seconds_stage_sums(*args[:5], a["rate"][:-1], *args[6:])
    with pytest.raises(ValueError, match="out"):
        kernels.seconds_stage_sums(*args[:10], np.empty((n, 3)))
    with pytest.raises(ValueError, match="extras"):
        kernels.seconds_stage_sums(*args[:9], np.zeros((n + 1, 3)), out)
    with pytest.raises(ValueError, match="parts"):
        kernels.seconds_combine(out, a["cand"], np.empty(3), np.empty(n))
    with pytest.raises(ValueError, match="stage_times"):
        kernels.seconds_combine(out, a["cand"], np.empty(len(PART_NAMES)), np.empty(n + 1))
    with pytest.raises(ValueError, match="rate"):
        kernels.seconds_collective(0, 1.0, 2.0, 1.0, a["rate"][:3])


# ----------------------------------------------------------------------------- software generations

def _zero3_arrays(recompute="full", zero_stage=3):
    model = _model_175b()
    spec = ndcost.ExecSpec(dp=64, tp=1, pp=1, micro_batch_size=1, global_batch_size=64, seq_length=2048,
                           recompute=recompute, zero_stage=zero_stage, flash_attention=False, precision="fp16")
    return seconds_arrays(model, spec, ndcost.Cluster("a100-80g", 64), overlap=Overlap(fsdp_prefetch=0.0))


def test_unfused_gradient_accumulation_adds_one_pass_over_the_parameters(kernels):
    """Megatron-LM 2021: main_grad.add_(grad) per micro-batch = read the 16-bit gradient and the main
    gradient, write the main gradient, over the layer's local parameters at the achievable HBM rate."""
    a = _zero3_arrays(zero_stage=0)
    fused = run_seconds(kernels, a)[0]
    unfused = run_seconds(kernels, with_rate(a, grad_acc_pass=1.0))[0]
    rate, cand = a["rate"], a["cand"]
    params = fused[0, SECONDS_LAYER["p_dense"]]
    moved = params * (cand[SECONDS_CAND["bytes_c"]] + 2.0 * cand[SECONDS_CAND["bytes_grad"]])
    expected = moved / (rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]) + rate[RATE["kernel_s"]]
    assert unfused[0, SECONDS_LAYER["bw_w"]] - fused[0, SECONDS_LAYER["bw_w"]] == pytest.approx(expected, rel=1e-12)
    for name in ("fw", "bw", "tp_f", "p_dense"):
        assert unfused[0, SECONDS_LAYER[name]] == fused[0, SECONDS_LAYER[name]]


def test_zero3_fetch_figures(kernels):
    """DeepSpeed 2021 ZeRO-3: the fetch at its measured rate when slower than NCCL's, a recompute
    forward that gathers again, gradients all-reduced; none of it touches a ZeRO-1 strategy."""
    a = _zero3_arrays()
    base = run_seconds(kernels, a)[1][0]
    stage = lambda **v: run_seconds(kernels, with_rate(a, **v))[1][0]
    gather, reduce_ = SECONDS_STAGE["dp_mb_gather"], SECONDS_STAGE["dp_mb_reduce"]
    slow = stage(z3_fetch_bw=1e9)
    # the capped gather is the stage's parameter bytes over the rate: 175B fp16 parameters
    assert slow[gather] > base[gather]
    assert slow[gather] * 1e9 / a["cand"][SECONDS_CAND["bytes_p"]] == pytest.approx(174.6e9, rel=0.01)
    assert stage(z3_fetch_bw=1e15)[gather] == base[gather]        # faster than NCCL: NCCL's rate
    again = stage(z3_rc_gather=1.0)
    # full recompute: one more gather of what it re-runs (rc / fw of the stage: the layers, not the heads)
    share = base[SECONDS_STAGE["rc"]] / base[SECONDS_STAGE["fw"]]
    assert 0.95 < share < 1.0
    assert again[gather] == pytest.approx((1.0 + share) * base[gather], rel=1e-12)
    assert stage(z3_grad_ar=1.0)[reduce_] > base[reduce_]
    z1 = _zero3_arrays(zero_stage=1)
    plain = run_seconds(kernels, z1)
    flagged = run_seconds(kernels, with_rate(z1, z3_fetch_bw=1e9, z3_rc_gather=1.0, z3_grad_ar=1.0))
    for got, want in zip(flagged, plain):
        np.testing.assert_array_equal(got, want)
    no_rc = _zero3_arrays(recompute="none")
    assert run_seconds(kernels, with_rate(no_rc, z3_rc_gather=1.0))[1][0][gather] == run_seconds(kernels, no_rc)[1][0][gather]
