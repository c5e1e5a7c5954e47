"""What a process holds beyond its tensors (issue 15): the allocator's reserve and the fixed costs, by
hand; fits and the search keep to what the device really gives; ND units keep ND's memory rule."""
from __future__ import annotations

import numpy as np
import pytest

import ndcost
from ndcost.tables.memory_overheads import (
    ALLOCATOR_RESERVE_FACTOR, CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES, NCCL_ALL_TO_ALL_BYTES, NCCL_PAIR_COMM_BYTES,
    NCCL_RING_COMM_BYTES, fixed_bytes, tensor_budget,
)


def test_the_sourced_figures():
    # Megatron-Bridge cards: 73.893/68.547, 72.356/65.223, 45.637/44.252 GiB reserved/allocated
    assert ALLOCATOR_RESERVE_FACTOR == pytest.approx((1.07800 + 1.10937 + 1.03130) / 3, rel=1e-4)
    assert CUDA_CONTEXT_BYTES == 400 * 2**20 and CUBLAS_WORKSPACE_BYTES == 64 * 2**20


@pytest.mark.parametrize("degrees, rings, pairs, a2a", [
    ((8, 1, 1, 1, 1), 2, 0, 0),          # FSDP on one node: the data-parallel group and the world
    ((1, 8, 1, 1, 1), 2, 0, 0),          # tp and the world
    ((2, 4, 4, 2, 1), 4, 1, 0),          # tp, dp·cp, cp, world; pipeline pairs
    ((8, 1, 2, 1, 8), 2, 1, 1),          # + an expert all-to-all group
    ((1, 1, 1, 1, 1), 0, 0, 0),          # one device: no NCCL at all
])
def test_fixed_costs_by_hand(degrees, rings, pairs, a2a):
    expected = (CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES + rings * NCCL_RING_COMM_BYTES
                + pairs * NCCL_PAIR_COMM_BYTES + a2a * (NCCL_RING_COMM_BYTES + NCCL_ALL_TO_ALL_BYTES))
    assert float(fixed_bytes(*degrees)) == pytest.approx(expected, rel=1e-15)


def test_estimate_states_allocated_reserved_and_fits_on_what_the_device_holds():
    model = ndcost.Model.from_catalog("llama3-8b")
    cluster = ndcost.Cluster("h100-sxm", 8)
    spec = ndcost.ExecSpec(dp=8, global_batch_size=64, seq_length=4096, recompute="full")
    e = ndcost.estimate(model, spec, cluster)
    memory = e.memory
    assert memory.peak_allocated == pytest.approx(memory.peak - 2**30, rel=1e-15)   # ND's reserve out
    assert memory.peak_reserved == pytest.approx(memory.peak_allocated * ALLOCATOR_RESERVE_FACTOR, rel=1e-15)
    assert memory.device_peak == pytest.approx(memory.peak_reserved + float(fixed_bytes(8, 1, 1, 1, 1)), rel=1e-15)
    assert e.fits == (memory.device_peak <= cluster.device.memory_bytes)
    assert memory.usable_bytes == pytest.approx(cluster.device.memory_bytes - memory.fixed_bytes, rel=1e-15)
    assert memory.headroom == pytest.approx(memory.usable_bytes - memory.peak_reserved, rel=1e-15)
    # ND units: ND's own rule (the stage total with its reserve against the HBM), in the same words: no
    # allocator slack, ND's reserve standing for the fixed costs
    nd = ndcost.estimate(model, spec, cluster, units="nd")
    assert nd.memory.fixed_bytes == 2**30 and nd.memory.device_peak == nd.memory.peak
    assert nd.memory.peak_reserved == nd.memory.peak_allocated == nd.memory.peak - 2**30
    assert nd.fits == (nd.memory.headroom >= 0) == (nd.memory.peak <= cluster.device.memory_bytes)


@pytest.mark.parametrize("backend", ["cython", "python"])
def test_the_batch_fits_as_estimate_does(backend):
    model = ndcost.Model.from_catalog("llama3-8b")
    cluster = ndcost.Cluster("h100-sxm", 8)
    cands = ndcost.Candidates.from_arrays(dp=[8, 8, 8, 4], tp=[1, 1, 1, 2], micro_batch_size=[1, 2, 4, 1],
                                          global_batch_size=64, seq_length=8192,
                                          recompute=["none", "none", "selective", "full"])
    with ndcost._backend.use(backend):
        batch = ndcost.estimate_many(model, cands, cluster)
        for i in range(len(cands)):
            spec = cands.spec(i)
            single = ndcost.estimate(model, spec, cluster)
            assert bool(batch.fits[i]) == single.fits
            assert batch.device_memory[i] == pytest.approx(single.memory.device_peak, rel=1e-12)
    assert not batch.fits.all() and batch.fits.any()         # the grid straddles the limit


def test_a_budget_for_the_tensors_keeps_the_device_within_its_limit():
    spec = ndcost.ExecSpec(dp=2, tp=4, global_batch_size=64, seq_length=4096)
    limit = 60 * 2**30
    budget = tensor_budget(limit, spec, 2**30)
    assert ((budget - 2**30) * ALLOCATOR_RESERVE_FACTOR + float(fixed_bytes(2, 4, 1, 1, 1))
            == pytest.approx(limit, rel=1e-15))


def test_the_readme_search_keeps_its_best_within_the_device(capsys):
    from ndcost import Cluster, Model, search

    cluster = Cluster("h800", 1024)
    result = search(Model.from_catalog("deepseek-v3"), cluster, global_batch_size=4096, seq_length=4096)
    assert result.results
    for ranked in result.results:
        assert ranked.estimate.memory.device_peak <= cluster.device.memory_bytes
        assert ranked.estimate.fits
    assert np.all(np.asarray([r.estimate.memory.device_peak for r in result.results]) <= cluster.device.memory_bytes)


def test_memory_validation_scores_the_published_peaks(capsys):
    """`ndcost validate --memory`: each torchtitan row against its matching figure (reserved); rows whose
    figure is of unknown kind are listed, not scored. A guard on today's level, not the target."""
    from ndcost.cli.main import main
    from ndcost.io.validation_memory import validate_memory

    report = validate_memory()
    assert len(report.scored) == 18 and len(report.rows) == 20
    assert all(row.skipped for row in report.rows if row.kind == "unknown")
    assert report.mae <= 0.08
    assert main(["validate", "--memory", "--json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["mae"] == pytest.approx(report.mae, rel=1e-12)


def test_the_loss_logits_bytes_are_the_specs():
    model = ndcost.Model.from_catalog("llama3-8b")
    cluster = ndcost.Cluster("h100-sxm", 8)
    base = dict(dp=8, global_batch_size=8, seq_length=8192, recompute="full")
    four = ndcost.estimate(model, ndcost.ExecSpec(**base), cluster).memory
    ten = ndcost.estimate(model, ndcost.ExecSpec(**base, logit_bytes=10), cluster).memory
    # one micro-batch in flight on the only stage: 8192 tokens x 128256 logits x 6 more bytes
    assert ten.peak - four.peak == pytest.approx(8192 * 128256 * 6, rel=1e-12)


def test_torchtitan_loss_bytes_follow_its_loss_path():
    """torchtitan's cross-entropy peak per logit element: 12 bytes without TP (kept log-probs, nll's dense
    gradient, log_softmax_backward's output, all fp32), 16 with TP's loss_parallel (kept log-probs, the
    one-hot zeros, exp and their sum), hand-derived from the code each constant cites."""
    import yaml

    from ndcost.io.validation_memory import (
        MEMORY_FACTS, TORCHTITAN_LOGIT_BYTES, TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES, build_memory_run,
    )

    assert (TORCHTITAN_LOGIT_BYTES, TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES) == (12, 16)
    rows = {row["id"]: row for row in yaml.safe_load(MEMORY_FACTS.read_text())["rows"]}
    _, no_tp, _, _ = build_memory_run(rows["tt2412_t1_8b_8gpu_fsdp"])
    _, with_tp, _, _ = build_memory_run(rows["tt2412_t4_70b_256gpu_fsdp32_tp8"])
    assert (no_tp.tp, no_tp.logit_bytes) == (1, 12)
    assert (with_tp.tp, with_tp.logit_bytes) == (8, 16)


def test_the_memory_plot_stacks_what_the_device_holds():
    """`ndcost plot memory`'s bars: the tensors' parts, the allocator's slack and the fixed costs; the
    peak stage's bar is the HBM less the headroom (seconds mode), a stage's total with ND's reserve (nd units)."""
    from ndcost.io.plot import memory_stack

    model = ndcost.Model.from_catalog("llama3-70b")
    spec = ndcost.ExecSpec(dp=4, tp=8, pp=4, global_batch_size=64, seq_length=4096, sequence_parallel=True,
                           recompute="selective")
    cluster = ndcost.Cluster("h100-sxm", 128)
    memory = ndcost.estimate(model, spec, cluster).memory
    stack = memory_stack(memory)
    names = [name for name, _ in stack]
    assert names[0] == "fixed costs (CUDA context, workspaces, NCCL)"      # at the bottom, under the usable HBM
    assert names[-1] == "allocator slack (reserved peak - allocated peak)"
    heights = [sum(parts[i] for _, parts in stack) for i in range(len(memory.stages))]
    assert max(heights) == pytest.approx(memory.capacity_bytes - memory.headroom, rel=1e-12)
    nd = ndcost.estimate(model, spec, cluster, units="nd").memory
    heights = [sum(parts[i] for _, parts in memory_stack(nd)) for i in range(len(nd.stages))]
    assert heights == pytest.approx([stage.total for stage in nd.stages], rel=1e-12)


def test_deepep_buffers_by_hand(backend_name):
    """DeepEP's NVLink and RDMA buffers as Megatron-Core allocates them (the larger of DeepEP's dispatch and
    combine size hints, 20 SMs = 10 channels, 2-byte tokens), by hand:
    * hidden 2048 on 8 ranks (one node, no RDMA): 10 channels x 8 peers x ((2·1 + 3) ints + 256 received
      tokens x (4096 hidden bytes + 8 SourceMeta + 128 x 8 top-k indices + 128 x 4 weights + 128 x 4
      scales)) = 125,994,560 B, rounded up to 128: 125,994,624.
    * DeepSeek-V3 (hidden 7168) on 64 ranks: NVLink 10 x 8 x ((2·8 + 3) x 4 + 288 x (14336 + 2056)) =
      377,677,760 -> 377,677,824; RDMA 10 x 8 x ((8·2 + 2) x 2 x 4 + 128 x 2 x (14336 + 2056 + 16)) =
      336,047,360; together 713,725,184 B."""
    from ndcost import _backend
    from ndcost.tables.memory_overheads import deepep_buffer_bytes

    assert deepep_buffer_bytes(2048, 8) == 125_994_624
    assert deepep_buffer_bytes(7168, 64) == 377_677_824 + 336_047_360 == 713_725_184
    assert deepep_buffer_bytes(7168, 1) == 0
    model = ndcost.Model.from_catalog("deepseek-v3")
    cluster = ndcost.Cluster("h800", 1024)
    fields = dict(dp=64, pp=16, ep=64, global_batch_size=1024, seq_length=4096, recompute="full")
    with _backend.use(backend_name):
        deepep = ndcost.estimate(model, ndcost.ExecSpec(moe_dispatcher="deepep", **fields), cluster)
        nccl = ndcost.estimate(model, ndcost.ExecSpec(**fields), cluster)
        batch = ndcost.estimate_many(model, ndcost.Candidates.from_arrays(
            moe_dispatcher=np.array(["deepep", "alltoall", "deepep"]), **dict(fields, ep=np.array([64, 64, 12]))),
            cluster)
    assert deepep.memory.fixed_bytes - nccl.memory.fixed_bytes == 713_725_184
    # in time DeepEP sends a token once per node and once per rank, NCCL once per expert
    # (tests/test_seconds_expert_exchange.py)
    assert deepep.step_time < nccl.step_time
    assert list(batch.reason_names()) == ["ok", "ok", "bad_moe_setting"]
    assert batch.device_memory[0] == pytest.approx(deepep.memory.device_peak, rel=1e-12)
    assert batch.device_memory[1] == pytest.approx(nccl.memory.device_peak, rel=1e-12)
    with pytest.raises(ndcost.SpecError, match="DeepEP has a config for"):
        ndcost.ExecSpec(moe_dispatcher="deepep", **dict(fields, ep=12))
