"""A layer op by op (seconds_layer_ops), a MoE block on its own (seconds_moe_block), the host's launches and
CUDA graphs: both backends to 1e-12, the rows adding up to the layer's priced time, and by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import (
    LAYER_OP, LAYER_OP_FIELD, LAYER_OP_FIELDS, LAYER_OP_NAMES, RATE, SECONDS_LAYER, SECONDS_LAYER_FIELDS,
)
from ndcost.spec.graph_scopes import CUDA_GRAPHS
from ndcost.spec.moe_kernels import EXPERT_BIASES, GLU_CLAMPS
from ndcost.spec.rates import Rates
from ndcost.tables.seconds import rates_vector, seconds_arrays, seconds_candidate_vector
from moe_block_cases import block_shape, price_moe_block

F = LAYER_OP_FIELD
_COMPUTE_ROWS = [i for i, name in enumerate(LAYER_OP_NAMES) if not name.endswith("_comm")]
_ARGS = ("kinds", "skinds", "model", "smodel", "cand", "rate")

CASES = [
    ("qwen3-30b-a3b", dict(dp=2, ep=2, micro_batch_size=2, global_batch_size=8, seq_length=4096), "megatron-te"),
    ("qwen3-30b-a3b", dict(dp=1, micro_batch_size=2, global_batch_size=2, seq_length=4096), "torchtitan-eager"),
    ("qwen3-30b-a3b", dict(dp=2, tp=2, ep=4, sequence_parallel=True, global_batch_size=8, precision="fp8",
                           cuda_graphs="moe_router"), "nemo"),
    ("deepseek-v3", dict(dp=8, tp=2, ep=16, pp=4, sequence_parallel=True, global_batch_size=64, seq_split=2,
                         pp_schedule="seq1f1b"), None),
    ("gpt-oss-120b", dict(dp=4, ep=4, cp=2, global_batch_size=16, grouped_gemm=False, capacity_factor=1.25,
                          cuda_graphs="layer"), "torchtitan-compile"),
    ("gpt-oss-120b", dict(dp=4, ep=4, global_batch_size=16, precision="fp8", cuda_graphs="moe_router"), "megatron-te"),
    ("mixtral-8x7b", dict(dp=2, tp=2, ep=2, global_batch_size=8, moe_imbalance=1.3, cuda_graphs="attn"), None),
    ("llama3-8b", dict(dp=2, tp=2, cp=2, global_batch_size=8, sequence_parallel=True), "megatron-2021"),
    ("qwen3-next-80b-a3b", dict(dp=2, tp=2, ep=2, global_batch_size=8), None),
    ("nemotron-h-56b", dict(dp=2, tp=2, global_batch_size=8), None),
    ("gpt3-175b", dict(dp=1, tp=8, pp=1, global_batch_size=1, seq_length=2048, flash_attention=False,
                       dropout_bytes=1), None),
]


def _arrays(name, fields, software, devices=None):
    model = ndcost.Model.from_catalog(name)
    spec = ndcost.ExecSpec(**fields)
    cluster = ndcost.Cluster("h100-sxm", spec.num_devices if devices is None else devices)
    rates = None if software is None else Rates.for_software("h100-sxm", software)
    return model, seconds_arrays(model, spec, cluster, rates=rates)


def _ops(kernels, a, kind):
    out = np.empty((len(LAYER_OP_NAMES), len(LAYER_OP_FIELDS)))
    kernels.seconds_layer_ops(*(a[name] for name in _ARGS), kind, out)
    return out


def _times(kernels, a):
    out = np.empty((a["kinds"].shape[0], len(SECONDS_LAYER_FIELDS)))
    kernels.seconds_layer_times(*(a[name] for name in _ARGS), out)
    return out


@pytest.mark.parametrize("name, fields, software", CASES)
def test_the_ops_add_up_to_the_layer_on_both_backends(name, fields, software, kernels, pykernels):
    model, a = _arrays(name, fields, software)
    times, ref_times = _times(kernels, a), _times(pykernels, a)
    np.testing.assert_allclose(times, ref_times, rtol=1e-12)
    for k in range(len(model.kinds)):
        ops, ref = _ops(kernels, a, k), _ops(pykernels, a, k)
        np.testing.assert_allclose(ops, ref, rtol=1e-12, atol=0.0)
        row = times[k]
        assert ops[_COMPUTE_ROWS, F["time_f"]].sum() == pytest.approx(row[SECONDS_LAYER["fw"]], rel=1e-12)
        assert ops[_COMPUTE_ROWS, F["time_b"]].sum() == pytest.approx(
            row[SECONDS_LAYER["bw"]] + row[SECONDS_LAYER["bw_w"]], rel=1e-12)
        assert ops[LAYER_OP["ep_comm"], F["time_f"]] == row[SECONDS_LAYER["ep_f"]]
        assert ops[LAYER_OP["tp_comm"], F["time_b"]] == row[SECONDS_LAYER["tp_b"]]
        assert np.all(ops >= 0.0)
        # a pass takes at least the host's launches of its kernels
        launch = ops[LAYER_OP["launch"]]
        assert row[SECONDS_LAYER["fw"]] >= launch[F["host_f"]] * (1 - 1e-12)
        assert row[SECONDS_LAYER["bw"]] + row[SECONDS_LAYER["bw_w"]] >= launch[F["host_b"]] * (1 - 1e-12)
        # the FLOPs the layer's ops run on this device: the model's, split over tp and cp (and recomputed
        # scores aside), for a layer with no masked extra
        if row[SECONDS_LAYER["flops_core_extra"]] == 0.0 and not model.kinds[k].module == "vision":
            assert ops[:, F["flops_f"]].sum() >= 0.0


def test_a_kind_out_of_range_or_a_refused_candidate_is_nan(kernels):
    _, a = _arrays("qwen3-30b-a3b", dict(dp=1, global_batch_size=1), None)
    assert np.isnan(_ops(kernels, a, 5)).all()
    assert np.isnan(_ops(kernels, a, -1)).all()
    bad = dict(a)
    bad["cand"] = np.array(a["cand"])
    bad["cand"][0] = 0.0                                  # a micro-batch of 0
    assert np.isnan(_ops(kernels, bad, 0)).all()
    with pytest.raises(ValueError):
        kernels.seconds_layer_ops(*(a[name] for name in _ARGS), 0, np.empty((3, len(LAYER_OP_FIELDS))))


# --------------------------------------------------------------------------- a MoE block on its own


_shape = block_shape


def _block(kernels, shape, cand, rate) -> np.ndarray:
    return price_moe_block(kernels, cand, rate, shape)


def _cand(**fields):
    spec = ndcost.ExecSpec(**{"global_batch_size": fields.get("dp", 1), **fields})
    return seconds_candidate_vector(ndcost.Model.from_catalog("qwen3-30b-a3b"), spec)


def test_moe_blocks_agree_on_both_backends(kernels, pykernels):
    rng = np.random.default_rng(23)
    for _ in range(60):
        software = str(rng.choice(["megatron-te", "nemo", "torchtitan-eager", "torchtitan-compile"]))
        rates = Rates.for_software("h100-sxm", software).replace(
            grouped_gemm_impl=str(rng.choice(["cutlass", "multi_stream"])),
            moe_aux_loss=bool(rng.random() < 0.5), grad_accumulation_fusion=bool(rng.random() < 0.5),
            expert_bias=str(rng.choice(EXPERT_BIASES)), glu_clamp=str(rng.choice(GLU_CLAMPS)),
            elementwise=str(rng.choice(["fused", "eager"])),
            fp8_recipe=str(rng.choice(["delayed", "current", "blockwise"])))
        precision = str(rng.choice(["bf16", "fp8"]))
        cand = _cand(ep=int(rng.choice([1, 2, 8])), dp=8, global_batch_size=8, seq_split=int(rng.choice([1, 2])),
                     pp_schedule="seq1f1b", precision=precision, cuda_graphs=str(rng.choice(CUDA_GRAPHS)),
                     grouped_gemm=bool(rng.random() < 0.7))
        rate = rates_vector(ndcost.Cluster("h100-sxm", 8), rates, precision)
        local = float(rng.integers(1, 65))
        shape = _shape(tokens=float(rng.integers(1, 16385)), rows=local * float(rng.integers(1, 3000)), local=local,
                       hidden=float(rng.choice([2048, 2880, 7168])), width=float(rng.choice([768, 1536, 2048])),
                       n_ff=float(rng.choice([2, 3])), experts=float(rng.choice([8, 128, 256])),
                       topk=float(rng.choice([1, 4, 8])), shared=float(rng.choice([0, 2048])),
                       shared_tokens=float(rng.integers(0, 8192)), grad_acc=float(rng.random() < 0.5),
                       router_bias=float(rng.random() < 0.5), expert_bias=float(rng.random() < 0.5),
                       glu_clamp=float(rng.random() < 0.5))
        out, ref = _block(kernels, shape, cand, rate), _block(pykernels, shape, cand, rate)
        np.testing.assert_allclose(out, ref, rtol=1e-12, atol=0.0)
        assert np.all(out >= 0.0)


def test_a_bad_block_shape_is_nan(kernels):
    rate = rates_vector(ndcost.Cluster("h100-sxm", 1), Rates.for_device("h100-sxm"), "bf16")
    good = dict(tokens=4096, rows=32768, local=16, hidden=2048, width=768, n_ff=3, experts=128, topk=8)
    for name, value in (("rows", 0.0), ("local", -1.0), ("topk", math.nan), ("shared", -5.0)):
        assert np.isnan(_block(kernels, _shape(**{**good, name: value}), _cand(), rate)).all(), name
    with pytest.raises(ValueError):
        kernels.seconds_moe_block(np.zeros(3), _cand(), rate, np.empty((len(LAYER_OP_NAMES), len(LAYER_OP_FIELDS))))


@pytest.mark.parametrize("permute", ["fused", "unfused", "sort"])
def test_permutation_bytes_by_hand(permute, kernels):
    """T = 4096 tokens, top-8 of 128 experts, h = 2048, 16-bit rows, one rank (no sort of received chunks):
    R = 32768 rows. Fused (TE moe_permute): the row map (1 + 4 bytes a logit), each token read once, its 8
    copies and their fp32 probabilities written -- 3 kernels; back, a gather-sum (rows read, tokens written).
    Unfused (Megatron's moe_utils.permute): the map transposed (2 a logit), indices masked out (1 + 8 a logit,
    8 a row), the rows gathered (2 x 2 bytes an element), probabilities transposed and masked (8 a logit, 4 a
    row) -- 5 kernels; back, an index_add into zeros: zero-fill the tokens, read the rows and add them into
    their targets atomically (R x h adds at the device's scatter-add rate). Sort (torchtitan): an argsort of
    the 32768 choices (4 radix passes reading and writing int64 keys and values: 4 x 2 x 16 bytes a choice),
    a histogram and cumsum, the gather -- 7 kernels; back as unfused."""
    T, E, k, h = 4096.0, 128.0, 8.0, 2048.0
    R = T * k
    rates = Rates.for_device("h100-sxm").replace(moe_permute=permute)
    rate = rates_vector(ndcost.Cluster("h100-sxm", 1), rates, "bf16")
    out = _block(kernels, _shape(tokens=T, rows=R, local=128, hidden=h, width=768, n_ff=3, experts=E, topk=k),
                 _cand(), rate)
    row = out[LAYER_OP["permute"]]
    rows_b, tokens_b = 2.0 * R * h, 2.0 * T * h
    forward, kernels_f, backward, kernels_b = {
        "fused": ((1 + 4) * T * E + tokens_b + rows_b + 4 * R, 3, rows_b + tokens_b, 1),
        "unfused": ((2 + 9 + 8) * T * E + (8 + 4) * R + 2 * rows_b, 5, tokens_b + rows_b, 2),
        "sort": (4 * 2 * 16 * R + 2 * rows_b, 7, tokens_b + rows_b, 2),
    }[permute]
    assert row[F["bytes_f"]] == pytest.approx(forward, rel=1e-12)
    assert row[F["bytes_b"]] == pytest.approx(backward, rel=1e-12)
    assert (row[F["kernels_f"]], row[F["kernels_b"]]) == (kernels_f, kernels_b)
    hbm = rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]
    assert row[F["time_f"]] == pytest.approx(forward / hbm + kernels_f * rate[RATE["kernel_s"]], rel=1e-12)
    atomics = 0.0 if permute == "fused" else R * h / rate[RATE["scatter_rate"]]
    assert rate[RATE["scatter_rate"]] == 1e11
    assert row[F["time_b"]] == pytest.approx(backward / hbm + kernels_b * rate[RATE["kernel_s"]] + atomics,
                                             rel=1e-12)


def test_a_launch_bound_layer_by_hand(kernels):
    """A small MoE layer (Qwen3-30B-A3B's shapes, 256 tokens, 16 of its 128 experts a rank): its device work
    is shorter than the host's launches of its kernels (eager PyTorch, 9.58 us each on the H200's host). The
    experts' 2 x 16 GEMMs are launched after the token counts reach the host, the device waiting on each: the
    forward is the device's time plus those 32 launches (the other 20 the host runs ahead, under the device's
    time). Replayed from CUDA graphs (0.84 us a kernel) the same layer is the device's again."""
    model = ndcost.Model.from_catalog("qwen3-30b-a3b")
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=1, global_batch_size=8, seq_length=256)
    cluster = ndcost.Cluster("h100-sxm", 8)
    a = seconds_arrays(model, spec, cluster)
    ops = _ops(kernels, a, 0)
    launch_s = a["rate"][RATE["launch_s"]]
    assert launch_s == 9.58e-6
    kernels_f = ops[_COMPUTE_ROWS, F["kernels_f"]].sum()
    device_f = ops[[i for i in _COMPUTE_ROWS if LAYER_OP_NAMES[i] != "launch"], F["time_f"]].sum()
    loop_f = 2 * 16                                             # a GEMM per local expert, gate-up and down
    assert kernels_f * launch_s > device_f > (kernels_f - loop_f) * launch_s   # launch-bound, the rest hidden
    times = _times(kernels, a)[0]
    assert times[SECONDS_LAYER["fw"]] == pytest.approx(device_f + loop_f * launch_s, rel=1e-12)
    assert ops[LAYER_OP["launch"], F["time_f"]] == pytest.approx(loop_f * launch_s, rel=1e-12)
    graphed = seconds_arrays(model, spec.replace(cuda_graphs="layer"), cluster)
    g_ops = _ops(kernels, graphed, 0)
    assert g_ops[LAYER_OP["launch"], F["time_f"]] == 0.0      # captured with its shapes: no host wait
    assert g_ops[LAYER_OP["launch"], F["host_f"]] == pytest.approx(kernels_f * 0.84e-6, rel=1e-12)
    assert _times(kernels, graphed)[0][SECONDS_LAYER["fw"]] == pytest.approx(device_f, rel=1e-12)
    # capturing only attention and the router leaves the experts' launches on the host
    partial = _ops(kernels, seconds_arrays(model, spec.replace(cuda_graphs="moe_router"), cluster), 0)
    # (the experts, their activation, the un-permutation and the FFN's residual add: one of the two adds)
    expert_kernels = sum(ops[LAYER_OP[name], F["kernels_f"]] for name in ("experts", "expert_act", "unpermute")) + 1
    assert partial[LAYER_OP["launch"], F["host_f"]] == pytest.approx(
        (kernels_f - expert_kernels) * 0.84e-6 + expert_kernels * launch_s, rel=1e-12)


def test_estimate_ops_and_the_command_line(capsys):
    from ndcost.cli.main import main

    model = ndcost.Model.from_catalog("qwen3-30b-a3b")
    spec = ndcost.ExecSpec(dp=8, ep=8, global_batch_size=64, seq_length=4096)
    result = ndcost.estimate(model, spec, ndcost.Cluster("h100-sxm", 8))
    (table,) = result.ops()
    assert table.name == "moe" and table.kind == 0
    compute = [row for row in table.rows if row.bound != "communication"]
    assert sum(r.seconds for r in compute if r.pass_ == "forward") == pytest.approx(table.forward, rel=1e-12)
    assert sum(r.seconds for r in compute if r.pass_ == "backward") == pytest.approx(table.backward, rel=1e-12)
    assert {row.bound for row in table.rows} <= {"compute", "memory", "launch", "communication"}
    assert [r.bound for r in table.rows if r.op == "experts"] == ["compute", "compute"]
    assert [r.bound for r in table.rows if r.op == "ep_comm"] == ["communication", "communication"]
    assert "experts" in table.table() and table.to_dict()["rows"][0]["op"] == "attn_proj"
    with pytest.raises(ndcost.SpecError, match="kind"):
        result.ops(kind=3)
    nd = ndcost.estimate(model, spec, ndcost.Cluster("h100-sxm", 8), units="nd")
    with pytest.raises(ndcost.SpecError, match="seconds"):
        nd.ops()
    argv = ["estimate", "qwen3-30b-a3b", "--devices", "8", "--device", "h100-sxm", "--dp", "8", "--ep", "8",
            "--global-batch-size", "64", "--ops"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "layer kind 0 (moe)" in out and "unpermute" in out and "bound" in out
    assert main([*argv, "--cuda-graphs", "moe_router"]) == 0
    assert main([*argv, "--units", "nd"]) == 2
    assert "ops" in capsys.readouterr().err


def test_a_moe_blocks_activations_by_hand(kernels):
    """An MLP-only MoE block (Qwen3-30B-A3B's FFN: 128 experts of 768, top-8, h 2048), 2 x 4096 tokens on one
    rank: its pre-norm's and router's inputs (2 bytes a hidden element each), the router's 16-bit logits, fp32
    softmax and top-k probabilities, each token's 8 expert indices (int64) and its bool routing map; per
    routed row (8192 x 8) the permuted input, the gate and up outputs, the activation's output and the
    expert's output (2 bytes each), and its source index (int64) and fp32 probability. Recomputing the
    activation (ffAct) drops its output; recomputing the layer keeps its input alone."""
    seq, batch, h, experts, k, width = 4096.0, 2.0, 2048.0, 128.0, 8.0, 768.0
    args = dict(seq=seq, batch=batch, hidden=h, tp=1.0, sp=1.0, cp=1.0, etp=1.0, attention=4, heads=0.0,
                kv_heads=0.0, head_dim=0.0, out_gate=0, qk_norm=0, q_lora=0.0, kv_lora=0.0, qk_nope=0.0,
                qk_rope=0.0, v_dim=0.0, lin_k_heads=0.0, lin_k_dim=0.0, lin_v_heads=0.0, lin_v_dim=0.0,
                lin_conv=0.0, lin_chunk=0.0, ffn=1, gated=1, ffn_width=width, experts=experts, top_k=k,
                shared_width=0.0, token_factor=1.0, flash=1, compute_bytes=2.0, softmax_bytes=4.0,
                dropout_bytes=0.0, norm_bytes=2.0, linear_bytes=2.0, option=0, keep_mask=0xFF, slice_input=0)
    tokens = seq * batch
    rows = tokens * k
    router = tokens * (experts * 2 + (experts + k) * 4 + experts * 1 + k * 8)
    per_row = (h + 2 * width + width + h) * 2 + 8 + 4
    expected = tokens * h * 2 * 2 + router + rows * per_row
    assert kernels.layer_activation_bytes(**args) == pytest.approx(expected, rel=1e-12)
    no_act = kernels.layer_activation_bytes(**{**args, "option": 2, "keep_mask": 0xFF & ~(1 << 6)})
    assert expected - no_act == pytest.approx(rows * width * 2, rel=1e-12)
    assert kernels.layer_activation_bytes(**{**args, "option": 1}) == pytest.approx(tokens * h * 2, rel=1e-12)


def test_the_score_correction_bias_by_hand(kernels):
    """DeepSeek-V3's router (sigmoid scores, a per-expert correction bias before the top-k): unfused, the bias
    added to the fp32 scores (read 4, write 4 bytes a logit) and the chosen unbiased scores gathered back
    (4 + 8 read, 4 written a choice): 2 more forward kernels, nothing more backward (the bias has no gradient).
    The catalog's DeepSeek-V3 routes so; Qwen3's softmax router does not."""
    T, E, k = 4096.0, 256.0, 8.0
    rates = Rates.for_device("h100-sxm").replace(moe_router_fusion=False)
    rate = rates_vector(ndcost.Cluster("h100-sxm", 1), rates, "bf16")
    shape = dict(tokens=T, rows=T * k, local=256, hidden=7168, width=2048, n_ff=3, experts=E, topk=k)
    plain = _block(kernels, _shape(**shape), _cand(), rate)[LAYER_OP["router"]]
    biased = _block(kernels, _shape(**shape, router_bias=1.0), _cand(), rate)[LAYER_OP["router"]]
    assert biased[F["bytes_f"]] - plain[F["bytes_f"]] == pytest.approx(8 * T * E + 16 * T * k, rel=1e-12)
    assert biased[F["kernels_f"]] - plain[F["kernels_f"]] == 2.0
    assert (biased[F["bytes_b"]], biased[F["kernels_b"]]) == (plain[F["bytes_b"]], plain[F["kernels_b"]])
    from ndcost.kernels.columns import SECONDS_MODEL
    from ndcost.tables.seconds import seconds_model_vector

    assert seconds_model_vector(ndcost.Model.from_catalog("deepseek-v3"))[SECONDS_MODEL["router_bias"]] == 1.0
    assert seconds_model_vector(ndcost.Model.from_catalog("qwen3-30b-a3b"))[SECONDS_MODEL["router_bias"]] == 0.0
