"""Memory kernels: compiled == oracle on seeded random cases and planted edges,
shape checks, read-only and untouched inputs, and the Python layer on both backends."""
from __future__ import annotations

import inspect
import math

import numpy as np

from ndcost import _backend
import pytest

import ndcost.tables.memory as memory_module
from ndcost.spec.device import Cluster
from ndcost.spec.exec_spec import ExecSpec, RecomputeRange
from ndcost.tables.layout import build_layout
from ndcost.spec.model import Model

RTOL = 1e-12
N_CASES = 300


def close(a, b) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= RTOL * max(abs(a), abs(b))


# --------------------------------------------------------------------------- random cases


def random_layer_arguments(rng: np.random.Generator) -> dict:
    tp = int(rng.choice([1, 2, 4, 8]))
    heads = int(rng.choice([8, 16, 32, 64, 128]))
    return {
        "seq": float(rng.choice([128, 1024, 4096, 32768])),
        "batch": float(rng.integers(1, 5)),
        "hidden": float(rng.choice([512, 2048, 4096, 7168])),
        "tp": float(tp),
        "sp": float(tp if rng.random() < 0.5 else 1),
        "cp": float(rng.choice([1, 2, 4])),
        "etp": float(rng.choice([1, tp])),
        "attention": int(rng.integers(0, 6)),     # full, MLA, GDN, Mamba-2, none, Mamba-1
        "heads": float(heads),
        "kv_heads": float(rng.choice([1, 2, 8, heads])),
        "head_dim": float(rng.choice([64, 128])),
        "out_gate": int(rng.integers(0, 2)),
        "qk_norm": int(rng.integers(0, 2)),
        "q_lora": float(rng.choice([0, 1536])),
        "kv_lora": float(rng.choice([256, 512])),
        "qk_nope": 128.0,
        "qk_rope": 64.0,
        "v_dim": 128.0,
        "lin_k_heads": 16.0,
        "lin_k_dim": 128.0,
        "lin_v_heads": float(rng.choice([16, 32])),
        "lin_v_dim": 128.0,
        "lin_conv": float(rng.choice([0, 4])),
        "lin_chunk": 64.0,
        "ffn": int(rng.integers(0, 3)),           # dense, MoE, none
        "gated": int(rng.integers(0, 2)),
        "ffn_width": float(rng.choice([512, 2048, 14336])),
        "experts": float(rng.choice([8, 64, 256])),
        "top_k": float(rng.choice([1, 2, 8])),
        "shared_width": float(rng.choice([0, 2048])),
        "token_factor": float(rng.choice([1.0, 1.25, 2.0])),
        "flash": int(rng.integers(0, 2)),
        "compute_bytes": float(rng.choice([1, 2, 4])),
        "softmax_bytes": float(rng.choice([2, 4])),
        "dropout_bytes": float(rng.choice([0, 1])),
        "norm_bytes": float(rng.choice([2, 4])),
        "option": int(rng.integers(0, 3)),
        "keep_mask": int(rng.integers(0, 256)),
        "slice_input": int(rng.integers(0, 2)),
        "linear_bytes": float(rng.choice([1, 2, 4])),  # drawn last: the earlier draws stay as they were
    }


# Edges the random draw may miss: invalid sizes and codes (NaN), p = 1, cp > 1, full recompute.
LAYER_EDGES = [
    {"seq": 0.0}, {"batch": -1.0}, {"hidden": 0.0}, {"tp": 0.0}, {"sp": 0.5}, {"cp": 0.0}, {"etp": 0.0},
    {"attention": 6}, {"attention": -1}, {"ffn": 3}, {"option": 3}, {"option": -1}, {"keep_mask": 256},
    {"keep_mask": -1}, {"compute_bytes": -1.0}, {"linear_bytes": -1.0}, {"linear_bytes": float("nan")}, {"heads": 0.0}, {"ffn_width": 0.0},
    {"attention": 0, "kv_heads": 0.0}, {"attention": 1, "kv_lora": 0.0}, {"attention": 2, "lin_chunk": 0.0},
    {"ffn": 1, "experts": 0.0}, {"ffn": 1, "top_k": 0.0}, {"ffn": 1, "token_factor": 0.0},
    {"option": 1, "slice_input": 1, "sp": 1.0, "tp": 8.0}, {"option": 1, "cp": 8.0},
    {"option": 2, "keep_mask": 0}, {"option": 0, "keep_mask": 0}, {"cp": 16.0, "seq": 131072.0},
    {"attention": 0, "kv_heads": 2.0, "tp": 8.0},
]


def test_layer_activation_parity(ckernels, pykernels):
    rng = np.random.default_rng(20240607)
    cases = [random_layer_arguments(rng) for _ in range(N_CASES)]
    base = random_layer_arguments(np.random.default_rng(1))
    cases += [{**base, **edge} for edge in LAYER_EDGES]
    n_finite = 0
    for case in cases:
        c = ckernels.layer_activation_bytes(**case)
        py = pykernels.layer_activation_bytes(**case)
        assert close(c, py), case
        n_finite += math.isfinite(py)
    assert n_finite >= N_CASES  # the random cases are all valid


def test_layer_activation_edges(kernels):
    base = random_layer_arguments(np.random.default_rng(1))
    for edge in LAYER_EDGES[:25]:
        assert math.isnan(kernels.layer_activation_bytes(**{**base, **edge})), edge
    # Full recompute keeps the input: s·b·h·bytes/(sp·cp), over tp too when sliced.
    full = {**base, "option": 1, "seq": 4096.0, "batch": 2.0, "hidden": 1024.0, "cp": 2.0, "tp": 4.0,
            "sp": 1.0, "compute_bytes": 2.0, "slice_input": 0}
    assert kernels.layer_activation_bytes(**full) == 4096 * 2 * 1024 * 2 / 2
    assert kernels.layer_activation_bytes(**{**full, "slice_input": 1}) == 4096 * 2 * 1024 * 2 / (2 * 4)
    # Recomputing anything never keeps more; option none ignores the mask.
    plain = kernels.layer_activation_bytes(**{**base, "option": 0, "keep_mask": 0})
    assert plain == kernels.layer_activation_bytes(**{**base, "option": 0, "keep_mask": 255})
    for mask in range(0, 256, 17):
        assert kernels.layer_activation_bytes(**{**base, "option": 2, "keep_mask": mask}) <= plain


def test_switches_add_up(kernels):
    """A selective setting saves the sum of what each switch saves alone (recompute_profile's premise)."""
    rng = np.random.default_rng(7)
    for _ in range(40):
        case = random_layer_arguments(rng)
        case["option"] = 2
        plain = kernels.layer_activation_bytes(**{**case, "keep_mask": 255})
        mask = int(rng.integers(0, 256))
        saved_alone = sum(plain - kernels.layer_activation_bytes(**{**case, "keep_mask": 255 & ~(1 << bit)})
                          for bit in range(8) if not mask & (1 << bit))
        together = plain - kernels.layer_activation_bytes(**{**case, "keep_mask": mask})
        assert together == pytest.approx(saved_alone, rel=1e-9, abs=1e-6)


def test_inflight_parity(ckernels, pykernels):
    rng = np.random.default_rng(11)
    for _ in range(N_CASES):
        p = int(rng.integers(0, 9))
        vp = int(rng.integers(0, 5))
        args = (int(rng.integers(-1, 5)), p, int(rng.integers(0, 17)), vp,
                int(rng.integers(-1, p + 1)), int(rng.integers(-1, vp + 1)), int(rng.integers(0, 5)))
        assert close(ckernels.inflight_micro_batches(*args), pykernels.inflight_micro_batches(*args)), args


def test_inflight_is_at_least_one(kernels):
    for schedule, vps in ((0, (1, 2, 3, 4)), (1, (1,)), (2, (2,)), (3, (1, 2, 3))):
        for p in (1, 2, 3, 8):
            for m in (1, 2, 5, 16):
                for vp in vps:
                    for stage in range(p):
                        for chunk in range(vp):
                            value = kernels.inflight_micro_batches(schedule, p, m, vp, stage, chunk, 2)
                            assert value >= 1 and value == int(value)


def random_stage_inputs(rng: np.random.Generator, p: int, vp: int, k: int, o: int) -> dict:
    counts = rng.integers(0, 6, size=(p, vp, k * o)).astype(np.float64)
    counts[rng.random(counts.shape) < 0.4] = 0.0
    act = rng.uniform(0, 1e9, size=(k, o))
    work = rng.uniform(0, 1e8, size=(k, o))
    # NaN where no layer runs must not leak into the sums.
    unused = counts.sum(axis=(0, 1)).reshape(k, o) == 0
    act[unused] = np.nan
    work[unused] = np.nan
    return {
        "static_per_layer": rng.uniform(0, 1e9, size=(k, 3)),
        "act_per_layer": act,
        "work_per_layer": work,
        "counts": counts,
        "inflight": rng.integers(1, 9, size=(p, vp)).astype(np.float64),
        "stage_static": rng.uniform(0, 1e9, size=(p, 3)),
        "extra_act": rng.uniform(0, 1e8, size=(p, vp)),
        "comm_buffers": rng.uniform(0, 1e8, size=p),
        "reserve": float(rng.choice([0.0, 2.0**30])),
    }


def run_stage_memory(kernels, inputs: dict, overlapped_chunks: int = 0) -> np.ndarray:
    p = inputs["counts"].shape[0]
    out = np.full((p, 8), -1.0)
    kernels.stage_memory(**inputs, out=out, overlapped_chunks=overlapped_chunks)
    return out


def test_stage_memory_parity(ckernels, pykernels):
    rng = np.random.default_rng(3)
    planted = [(1, 1, 1, 1), (1, 4, 2, 3), (8, 1, 3, 1), (4, 2, 1, 4), (2, 3, 2, 2)]
    shapes = planted + [tuple(int(x) for x in (rng.integers(1, 7), rng.integers(1, 4), rng.integers(1, 4),
                                                 rng.integers(1, 5))) for _ in range(60)]
    for p, vp, k, o in shapes:
        inputs = random_stage_inputs(rng, p, vp, k, o)
        for overlapped in (0, 1):
            np.testing.assert_allclose(run_stage_memory(ckernels, inputs, overlapped),
                                       run_stage_memory(pykernels, inputs, overlapped), rtol=RTOL, atol=0,
                                       equal_nan=True)


def test_stage_memory_sums(kernels):
    rng = np.random.default_rng(5)
    inputs = random_stage_inputs(rng, 3, 2, 2, 2)
    inputs["counts"][:] = 0.0
    inputs["counts"][1, 0, 0] = 2.0  # stage 1, chunk 0: two layers of kind 0, slot 0
    inputs["counts"][1, 1, 3] = 1.0  # stage 1, chunk 1: one layer of kind 1, slot 1
    inputs["act_per_layer"] = np.array([[10.0, 20.0], [30.0, 40.0]])
    inputs["work_per_layer"] = np.array([[7.0, 0.0], [0.0, 3.0]])
    out = run_stage_memory(kernels, inputs)
    st, inflight, extra = inputs["static_per_layer"], inputs["inflight"], inputs["extra_act"]
    assert out[1, 0] == pytest.approx(inputs["stage_static"][1, 0] + 2 * st[0, 0] + st[1, 0], rel=RTOL)
    expected_act = inflight[1, 0] * (extra[1, 0] + 2 * 10.0) + inflight[1, 1] * (extra[1, 1] + 40.0)
    assert out[1, 3] == pytest.approx(expected_act, rel=RTOL)
    assert out[1, 5] == 3.0  # the last chunk with layers runs kind 1, slot 1
    assert out[0, 5] == 0.0 and out[0, 3] == pytest.approx(inflight[0] @ extra[0], rel=RTOL)
    for row in out:
        assert row[7] == row[0] + row[1] + row[2] + row[3] + row[4] + row[5] + row[6]
    # A NaN working set where a layer runs is NaN, not overwritten by a later slot.
    inputs["work_per_layer"] = np.array([[7.0, 0.0], [np.nan, np.nan]])
    inputs["counts"][1, 1, 0] = 1.0
    out = run_stage_memory(kernels, inputs)
    assert math.isnan(out[1, 5]) and math.isnan(out[1, 7])


def test_overlapped_chunks_hold_both_working_sets(kernels):
    """DualPipeV runs one chunk's forward beside the other's backward: each chunk's largest
    working set counts (7 from chunk 0's kind 0, 3 from chunk 1's kind 1), not the last chunk's alone."""
    inputs = random_stage_inputs(np.random.default_rng(5), 3, 2, 2, 2)
    inputs["counts"][:] = 0.0
    inputs["counts"][1, 0, 0] = 2.0
    inputs["counts"][1, 1, 3] = 1.0
    inputs["counts"][2, 1, 3] = 1.0   # stage 2 has chunk 1 only
    inputs["act_per_layer"] = np.array([[10.0, 20.0], [30.0, 40.0]])
    inputs["work_per_layer"] = np.array([[7.0, 0.0], [0.0, 3.0]])
    single, dual = run_stage_memory(kernels, inputs), run_stage_memory(kernels, inputs, 1)
    assert single[1, 5] == 3.0 and dual[1, 5] == 10.0
    assert dual[2, 5] == single[2, 5] == 3.0
    assert dual[1, 7] - single[1, 7] == 7.0
    np.testing.assert_array_equal(np.delete(dual, [5, 7], axis=1), np.delete(single, [5, 7], axis=1))


def test_stage_memory_shape_checks(kernels):
    good = random_stage_inputs(np.random.default_rng(9), 2, 2, 2, 3)
    bad = {
        "static_per_layer": np.zeros((2, 4)),
        "act_per_layer": np.zeros((3, 3)),
        "work_per_layer": np.zeros((2, 2)),
        "counts": np.zeros((2, 2, 5)),
        "inflight": np.zeros((2, 3)),
        "stage_static": np.zeros((1, 3)),
        "extra_act": np.zeros((2, 1)),
        "comm_buffers": np.zeros(3),
    }
    for name, value in bad.items():
        with pytest.raises(ValueError, match=name):
            kernels.stage_memory(**{**good, name: value}, out=np.empty((2, 8)))
    with pytest.raises(ValueError, match="out"):
        kernels.stage_memory(**good, out=np.empty((2, 7)))


def test_stage_memory_reads_only(kernels):
    inputs = random_stage_inputs(np.random.default_rng(13), 3, 2, 2, 2)
    copies = {name: np.copy(value) for name, value in inputs.items()}
    for value in inputs.values():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)  # const memoryviews accept read-only arrays
    run_stage_memory(kernels, inputs)
    for name, value in inputs.items():
        np.testing.assert_array_equal(value, copies[name])


def test_signatures_are_the_documented_ones(pykernels):
    params = list(inspect.signature(pykernels.stage_memory).parameters)
    assert params == ["static_per_layer", "act_per_layer", "work_per_layer", "counts", "inflight", "stage_static",
                      "extra_act", "comm_buffers", "reserve", "out", "overlapped_chunks"]
    assert list(inspect.signature(pykernels.inflight_micro_batches).parameters) == [
        "schedule", "p", "m", "vp", "stage", "chunk", "seq_split"]


# --------------------------------------------------------------------------- Python layer on both backends


SPECS = [
    ("llama3-70b", dict(dp=2, tp=8, pp=4, vpp=5, micro_batch_num=2, seq_length=8192, sequence_parallel=True,
                        recompute="selective")),  # vp > 1 with few micro-batches
    ("llama3-70b", dict(dp=4, tp=8, pp=1, cp=2, micro_batch_num=4, seq_length=32768, recompute="full",
                        zero_stage=3)),  # p = 1, cp > 1, full recompute, FSDP
    ("deepseek-v3", dict(dp=8, tp=2, pp=8, ep=8, micro_batch_num=16, seq_length=4096, sequence_parallel=True,
                         recompute=(RecomputeRange(0, 20, "full"), RecomputeRange(20, 10, "selective")),
                         zero_stage=2, grouped_gemm=False, capacity_factor=1.25, flash_attention=False)),
    ("qwen3-next-80b-a3b", dict(dp=4, tp=4, pp=4, ep=4, micro_batch_num=8, seq_length=4096, cp=2,
                                cp_algo="ulysses", pp_schedule="gpipe")),
    ("deepseek-v3", dict(dp=2, tp=4, pp=4, ep=8, micro_batch_num=8, seq_length=8192, cp=4,
                         cp_algo="ring-allgather", recompute="selective")),  # MLA under PyTorch's ring
    ("llama3-70b", dict(dp=2, tp=8, pp=4, micro_batch_num=8, seq_length=65536, cp=8, cp_algo="ring-allgather",
                        recompute="full", zero_stage=3)),  # the ring's buffers beside a recomputed layer
    ("mixtral-8x7b", dict(dp=2, tp=2, pp=4, vpp=2, ep=2, micro_batch_num=8, seq_length=4096,
                          pp_schedule="zero_bubble_v")),
    ("mixtral-8x7b", dict(dp=2, tp=2, pp=2, ep=2, micro_batch_num=4, seq_length=4096, precision="fp8",
                          zero_stage=3)),  # TE's fp8 weight copies of dense and routed weights, sharded
    ("qwen3-8b", dict(dp=2, tp=2, pp=2, micro_batch_num=8, seq_length=8192, pp_schedule="seq1f1b", seq_split=4,
                      tie_embeddings=True)),
]


@pytest.mark.parametrize("name,fields", SPECS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(SPECS)])
def test_memory_estimate_parity(ckernels, pykernels, name, fields):
    model = Model.from_catalog(name)
    spec = ExecSpec(**fields)
    cluster = Cluster("h100", spec.num_devices)
    layout = build_layout(model, spec)
    counts_before = np.copy(layout.counts)
    results = {}
    for label, backend in (("c", "cython"), ("py", "python")):
        with _backend.use(backend):
            results[label] = memory_module.memory_estimate(model, spec, cluster, layout)
    np.testing.assert_array_equal(layout.counts, counts_before)
    c, py = results["c"], results["py"]
    assert len(c.stages) == spec.pp
    for stage_c, stage_py in zip(c.stages, py.stages):
        for field in ("params", "grads", "optimizer", "activations", "comm_buffers", "working_set", "reserve",
                      "total"):
            a, b = getattr(stage_c, field), getattr(stage_py, field)
            assert math.isfinite(a) and a >= 0 and close(a, b), (field, a, b)
    assert c.peak_stage == py.peak_stage


def test_memory_estimate_rejects_a_layout_of_another_shape():
    from ndcost.errors import SpecError

    model = Model.from_catalog("llama3-8b")
    spec = ExecSpec(tp=2, pp=2, micro_batch_num=4, seq_length=2048)
    layout = build_layout(model, spec.replace(pp=4))
    with pytest.raises(SpecError, match="layout"):
        memory_module.memory_estimate(model, spec, Cluster("h100", 4), layout)
