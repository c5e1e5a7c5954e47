"""DeepSeek's DualPipe and DualPipeV against their README's bubble formulas, DualPipe's device pairing and
memory, and the expert all-to-all's overlap modes by hand; both backends.

deepseek-ai/DualPipe@3da1bbea53606543d7f5f232338fc58096db30e3 README.md, "Pipeline Bubbles and Memory
Usage Comparison": 1F1B (PP-1)(F+B); DualPipe (PP/2-1)(F&B+B-3W), parameters 2x, activations PP+1;
DualPipeV the same bubble at PP stages on PP/2 devices. F, B, W, F&B are one chunk's forward, full
backward, weight-gradient part and overlapped forward-and-backward pair.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import PART, SCHEDULES, SECONDS_LAYER_FIELDS, SECONDS_STAGE
from ndcost import _backend
from ndcost.tables.memory import SCHEDULE_CODES
from ndcost.tables.seconds import Overlap, seconds_arrays, seconds_estimate
from test_seconds_kernels import _cand, _combine, _stages

S = SECONDS_STAGE


# ----------------------------------------------------------------------------- bubbles

def test_dualpipev_bubble_is_the_readme_formula_at_pp_chunks(kernels):
    """p = 4 devices, PP = 8 chunks of half a stage. A device's micro-batch: F = 2, input grads 2, recompute
    1, W = 1 (a chunk: halves). F&B = M = 6 (the pair's compute; no comm left), full B = 4:
    (PP/2 - 1)(F&B + B - 3W) = 3 x (3 + 2 - 1.5) = 10.5."""
    stage = _stages([dict(fw=2.0, bw=2.0, rc=1.0, bw_w=1.0)] * 4)
    for name in ("dualpipev", "zero_bubble_v"):
        step, parts, _ = _combine(kernels, stage, _cand(m=16, p=4, vp=2, schedule=SCHEDULES.index(name)))
        assert parts[PART["bubble"]] == pytest.approx(3 * (3.0 + 2.0 - 1.5))
        assert step == pytest.approx(16 * 6.0 + 10.5)
        assert parts.sum() == pytest.approx(step, rel=1e-12)


def test_dualpipe_bubble_is_the_readme_formula_on_paired_devices(kernels):
    """PP = 4 ranks: device i runs stage i and stage 3-i, half its micro-batches each, so its micro-batch
    is their mean. Stages (F, input B, W): (1, 1, 1), (2, 2, 1), (2, 2, 1), (3, 4, 2): devices 0 and 3
    (2, 2.5, 1.5), 6 a micro-batch; devices 1 and 2 (2, 2, 1), 5. Straggler device 3 (last on a tie):
    F&B = 6, B = 4, W = 1.5; bubble (PP/2 - 1)(F&B + B - 3W) = 1 x (6 + 4 - 4.5) = 5.5."""
    stage = _stages([dict(fw=1.0, bw=1.0, bw_w=1.0), dict(fw=2.0, bw=2.0, bw_w=1.0),
                     dict(fw=2.0, bw=2.0, bw_w=1.0), dict(fw=3.0, bw=4.0, bw_w=2.0)])
    step, parts, times = _combine(kernels, stage, _cand(m=8, p=4, schedule=SCHEDULES.index("dualpipe")))
    assert parts[PART["bubble"]] == pytest.approx(5.5)
    assert step == pytest.approx(8 * 6.0 + 5.5)
    assert parts[PART["fw_compute"]] == pytest.approx(8 * 2.0)
    assert list(times) == pytest.approx([48.0, 40.0, 40.0, 48.0])
    assert parts.sum() == pytest.approx(step, rel=1e-12)
    # unpaired, 1F1B would run the 9-second stage: (m - 1)·9 + the sum of the stages
    one_f_one_b, _, _ = _combine(kernels, stage, _cand(m=8, p=4))
    assert one_f_one_b == pytest.approx(7 * 9.0 + 3.0 + 5.0 + 5.0 + 9.0)


def test_dualpipe_bubble_beats_1f1b_on_equal_stages(kernels):
    """The README's comparison: on equal stages F = 1, B = 2 (W = 1), 1F1B's (PP-1)(F+B) = 21 at PP 8,
    DualPipe's (PP/2-1)(F&B+B-3W) = 3 x (3 + 2 - 3) = 6, DualPipeV's on 8 devices (16 chunks) 7 x 1 = 7."""
    stage = _stages([dict(fw=1.0, bw=1.0, bw_w=1.0)] * 8)
    bubble = {}
    for name, vp in (("1f1b", 1), ("dualpipe", 1), ("dualpipev", 2)):
        _, parts, _ = _combine(kernels, stage, _cand(m=32, p=8, vp=vp, schedule=SCHEDULES.index(name)))
        bubble[name] = parts[PART["bubble"]]
    assert bubble == pytest.approx({"1f1b": 21.0, "dualpipe": 6.0, "dualpipev": 7.0})


# ----------------------------------------------------------------------------- memory

def test_dualpipe_and_dualpipev_in_flight_counts(kernels):
    """dualpipe.py / dualpipev.py step(): DualPipe's rank holds its two stages at their 1F1B counts
    (stage i: p - i, stage p-1-i: i + 1: p + 1 in all); DualPipeV's chunk 0 2p - r, chunk 1 r + 1."""
    def counts(name, p, vp):
        return [[kernels.inflight_micro_batches(SCHEDULE_CODES[name], p, 64, vp, s, c, 1) for c in range(vp)]
                for s in range(p)]
    assert counts("dualpipe", 4, 1) == [[4.0], [3.0], [2.0], [1.0]]
    assert counts("dualpipev", 4, 2) == [[8.0, 1.0], [7.0, 2.0], [6.0, 3.0], [5.0, 4.0]]
    assert math.isnan(kernels.inflight_micro_batches(SCHEDULE_CODES["dualpipe"], 4, 64, 2, 0, 0, 1))
    assert math.isnan(kernels.inflight_micro_batches(SCHEDULE_CODES["dualpipev"], 4, 64, 1, 0, 0, 1))


def test_dualpipe_devices_hold_both_their_stages(kernels):
    """Rows (params, grads, optimizer, activations, comm, working set, reserve, total) of stages 0 and 1 of
    a 2-stage pipeline -> both devices: params and grads and activations added, the optimizer halved and
    added (its shards over both copies' ranks), the larger comm and working set, one reserve."""
    out = np.array([[10.0, 20.0, 4.0, 30.0, 1.0, 5.0, 2.0, 72.0],
                    [12.0, 22.0, 6.0, 8.0, 3.0, 4.0, 2.0, 57.0]])
    kernels.pair_dualpipe_rows(out)
    want = [22.0, 42.0, 5.0, 38.0, 3.0, 5.0, 2.0, 22.0 + 42.0 + 5.0 + 38.0 + 3.0 + 5.0 + 2.0]
    assert out.tolist() == [want, want]
    with pytest.raises(ValueError, match="out"):
        kernels.pair_dualpipe_rows(np.zeros((2, 3)))


def test_dualpipe_memory_of_deepseek_v3_is_its_paired_stages(backend_name):
    """DeepSeek-V3 on PP 16: DualPipe's device 0 holds stage 0 (the embedding) and stage 15 (the head and
    the MTP module) -- the parameters of both; 1F1B's stage 0 only its own."""
    model = ndcost.Model.from_catalog("deepseek-v3")
    cluster = ndcost.Cluster("h800", 2048)
    fields = dict(dp=128, pp=16, ep=64, global_batch_size=15360, seq_length=4096, recompute="full")
    with _backend.use(backend_name):
        dual = ndcost.estimate(model, ndcost.ExecSpec(pp_schedule="dualpipe", **fields), cluster).memory
        plain = ndcost.estimate(model, ndcost.ExecSpec(**fields), cluster).memory
    stages = plain.stages
    assert dual.stages[0].params == pytest.approx(stages[0].params + stages[15].params, rel=1e-12)
    assert dual.stages[0].grads == pytest.approx(stages[0].grads + stages[15].grads, rel=1e-12)
    assert dual.stages[0].optimizer == pytest.approx(0.5 * (stages[0].optimizer + stages[15].optimizer), rel=1e-12)
    assert dual.stages[15].total == dual.stages[0].total


# ----------------------------------------------------------------------------- overlap by hand

def _deepseek(**fields):
    model = ndcost.Model.from_catalog("deepseek-v3")
    spec = ndcost.ExecSpec(dp=16, pp=4, ep=16, global_batch_size=256, seq_length=4096, moe_dispatcher="deepep",
                           **fields)
    return model, spec, ndcost.Cluster("h800", 64)


def _moe_layer(model, spec, cluster, kernels):
    a = seconds_arrays(model, spec, cluster)
    out = np.zeros((len(model.kinds), len(SECONDS_LAYER_FIELDS)))
    kernels.seconds_layer_times(a["kinds"], a["skinds"], a["model"], a["smodel"], a["cand"], a["rate"], out)
    return dict(zip(SECONDS_LAYER_FIELDS, out[1]))


def _pair_by_hand(layer, static=False):
    held = 20.0 / 132.0                   # DeepEP's 20 SMs of the H800's 132

    def left(comm, window):
        if static:                        # DualPipe: the window's compute on the other 112 SMs throughout
            return max(comm - window, window * held / (1.0 - held)) if comm else 0.0
        return min(comm, max(comm - window, held * comm))

    dispatch, combine = layer["ep_d"], layer["ep_f"] - layer["ep_d"]
    mlp = layer["fw"] + layer["bw"] + layer["bw_w"] - layer["att_f"] - layer["att_b"]
    return left(dispatch, layer["att_f"]) + left(dispatch + combine, mlp) + left(combine, layer["att_b"])


def test_a_layers_overlapped_pair_by_hand(kernels, backend_name):
    """An F&B pair of one MoE layer, Megatron-Core's three phases (combined_1f1b), which DualPipe pairs alike:
    comm combine-backward | dispatch fwd + dispatch-backward | combine fwd
    comp attention fwd    | MLP bwd + dW + MLP fwd           | attention bwd
    DualPipe splits the SMs for the whole pair (DeepSeek-V3 §3.2.1: DeepEP's 20 SMs of the H800's 132, the
    compute on the other 112 throughout), so each phase leaves max(comm - window, window x 20/112)."""
    model, spec, cluster = _deepseek(pp_schedule="dualpipe", ep_overlap="dualpipe")
    layer = _moe_layer(model, spec, cluster, kernels)
    pair = _pair_by_hand(layer, static=True)
    assert 0.0 < pair < layer["ep_f"] + layer["ep_b"]
    window = layer["fw"] + layer["bw"] + layer["bw_w"]
    assert pair >= window * 20.0 / 112.0 * (1.0 - 1e-12)       # never less than the compute's slowdown
    # DualPipe pairs every micro-batch: the stage's ep part is its MoE layers x the pair
    with _backend.use(backend_name):
        result = seconds_estimate(model, spec, cluster)
    stage = result["stage_sums"]
    counts = _moe_counts(model, spec)
    for i in range(4):
        assert stage[i, S["ep"]] == pytest.approx(counts[i] * pair, rel=1e-12)


def _moe_counts(model, spec):
    from ndcost.tables.layout import build_layout

    counts = build_layout(model, spec).stage_counts()
    n_slots = counts.shape[1] // len(model.kinds)
    return [sum(counts[st, k * n_slots + o] for k in range(len(model.kinds)) if model.kinds[k].ffn == "moe"
                for o in range(n_slots)) for st in range(counts.shape[0])]


def test_dualpipes_fixed_split_against_deepseeks_profile(backend_name):
    """deepseek-ai/profile-data@449602428a1b train.json, an overlapped DualPipe F&B chunk pair of 4 DeepSeek-V3 MoE
    layers at EP 64 on H800: every DeepGEMM kernel on the compute stream is launched on 112 CTAs (grids
    (112,1,1), (1,112,1), (2,56,1): the 132 SMs less DeepEP's 20), and they take 63.17 ms, 15.79 ms a layer;
    its fp8 quantize, dequantize and transpose kernels 15.1 ms, 3.78 a layer. ndcost's GEMMs of such a layer
    (attention projections, routed and shared experts, F&B, with their casts under DeepSeek's recipe) on the whole
    GPU, times 132/112, land within 15% of the two together (GEMMs alone, at the blockwise recipe's casts: 15.8
    ms, within 5%). ndcost prices a job's compute-bound kernels at its slowest GPU's clock (ndcost.spec.straggler,
    2048 GPUs: z(2048)·sigma below a busy node's mean); the profile is one GPU's, taken at the busy node's mean."""
    from ndcost.spec.straggler import expected_largest_normal
    from ndcost.files import read_mapping
    from ndcost.io.validation import BUILTIN_RUNS, build_row

    doc = read_mapping(BUILTIN_RUNS["moe"], "a runs file")
    row = next(r for r in doc["runs"] if r["id"] == "deepseek_v3_pretrain_h800_2048gpu")
    built = build_row(row, doc.get("hardware") or {}, BUILTIN_RUNS["moe"])
    assert (built.spec.pp_schedule, built.spec.ep_overlap, built.spec.moe_dispatcher_sms) == ("dualpipe", "dualpipe", 20)
    with _backend.use(backend_name):
        e = ndcost.estimate(built.model, built.spec, built.cluster, rates=built.rates)
    moe = next(layer for layer in e.ops() if layer.name == "moe")
    typical = 1.0 - expected_largest_normal(2048) * built.rates.clock_sigma    # the slowest GPU's time, a typical one's
    assert built.cluster.num_devices == 2048 and 0.95 < typical < 0.97
    gemms = typical * sum(row.seconds for row in moe.rows if row.op in ("attn_proj", "experts", "shared_experts"))
    assert gemms * 132.0 / 112.0 == pytest.approx(15.79e-3 + 3.78e-3, rel=0.15)
    # its attention kernels (FlashAttention forward, backward and their pre/post-processing): 21.96 ms, 5.49 a layer
    attention = typical * sum(row.seconds for row in moe.rows if row.op == "attn_core")
    assert attention * 132.0 / 112.0 == pytest.approx(5.49e-3, rel=0.15)


def test_megatron_overlap_pairs_all_but_the_warm_up(kernels, backend_name):
    """Megatron-Core's EP overlap on an interleaved pipeline (schedules.py get_pp_rank_microbatches): stage
    r runs (p - r - 1)·2 + (v - 1)·p + 1 of its m·v chunks alone; the rest pair. pp 4, vpp 2, m 16: stage 0
    pairs 32 - 11 = 21 of 32, stage 3 32 - 5 = 27; none: every all-to-all exposed."""
    model, spec, cluster = _deepseek(vpp=2, ep_overlap="1f1b")
    layer = _moe_layer(model, spec, cluster, kernels)
    pair = _pair_by_hand(layer)
    alone = layer["ep_f"] + layer["ep_b"]
    with _backend.use(backend_name):
        overlapped = seconds_estimate(model, spec, cluster)["stage_sums"]
        exposed = seconds_estimate(model, spec.replace(ep_overlap="none"), cluster)["stage_sums"]
    counts = _moe_counts(model, spec)
    for st, share in ((0, 21 / 32), (1, 23 / 32), (2, 25 / 32), (3, 27 / 32)):
        want = counts[st] * (share * pair + (1 - share) * alone)
        assert overlapped[st, S["ep"]] == pytest.approx(want, rel=1e-12)
        assert exposed[st, S["ep"]] == pytest.approx(counts[st] * alone, rel=1e-12)


def test_an_overlap_share_of_zero_hides_nothing(backend_name):
    model, spec, cluster = _deepseek(pp_schedule="dualpipe", ep_overlap="dualpipe")
    with _backend.use(backend_name):
        none = seconds_estimate(model, spec.replace(ep_overlap="none"), cluster)
        unhidden = seconds_estimate(model, spec, cluster, overlap=Overlap(ep=0.0))
        hidden = seconds_estimate(model, spec, cluster)
    assert unhidden["parts"]["ep_comm"] == pytest.approx(none["parts"]["ep_comm"], rel=1e-12)
    # hidden, but for the compute DualPipe's fixed SM split slows meanwhile (20 of 132 SMs held for the pair)
    assert hidden["parts"]["ep_comm"] < none["parts"]["ep_comm"] * 0.6
