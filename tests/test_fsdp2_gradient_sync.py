"""FSDP2 reducing every micro-batch: the weights gathered again each forward, one layer's gather and reduction
exposed per pipeline chunk call, the reduction in its own width (``Rates.grad_reduce_bytes``); both backends.

torch's FSDP2 defaults (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py: reduce_grads and
reshard_after_backward True; _fsdp_state.py _root_post_backward_final_callback: with is_last_backward, also True by
default, the current stream waits for the last reduce-scatter) hold wherever nothing turns them off between
micro-batches: NeMo AutoModel's benchmark runs (its FSDP switches did not exist when the figures were published,
Automodel@89e3a9fd), where the pipeline stage's module is not an FSDPModule and torch.distributed.pipelining's
backward_maybe_with_nosync therefore runs a plain backward.
"""
from __future__ import annotations

import numpy as np
import pytest

import ndcost
from ndcost.io.run_facts import RunFacts, _gradient_reduce_changes
from ndcost.io.validation import BUILTIN_RUNS, build_row
from ndcost.files import read_mapping
from ndcost.kernels.columns import SECONDS_CAND, SECONDS_STAGE
from ndcost.spec.rates import Rates
from ndcost.tables.seconds import Overlap, seconds_arrays
from seconds_runs import stage_sums, with_rate

MOE_RUNS = BUILTIN_RUNS["moe"]
GATHER, REDUCE = SECONDS_STAGE["dp_mb_gather"], SECONDS_STAGE["dp_mb_reduce"]
STEP_GATHER, STEP_REDUCE = SECONDS_STAGE["dp_gather"], SECONDS_STAGE["dp_reduce"]


def _arrays(vpp: int, *, defer: bool, hidden: float, reshard: bool = False, slow: float = 0.0):
    """A ZeRO-3 Llama 3 8B on 32 H100: PP 4 (8 layers a stage), the stated chunks, FSDP over DP 8; the compute
    beside the hidden traffic loses *slow* of its time (the rate's ov_slow; none unless stated)."""
    spec = ndcost.ExecSpec(dp=8, tp=1, pp=4, vpp=vpp, micro_batch_size=1, global_batch_size=64, seq_length=4096,
                           recompute="none", zero_stage=3, deferred_grad_accumulation=defer,
                           reshard_params=reshard, precision="bf16", grad_bytes=2)
    a = seconds_arrays(ndcost.Model.from_catalog("llama3-8b"), spec, ndcost.Cluster("h100-sxm", 32),
                       overlap=Overlap(fsdp_prefetch=hidden))
    return with_rate(a, ov_slow=slow)


def test_reduced_every_micro_batch_gathers_every_micro_batch(kernels):
    """Not deferred: each micro-batch's forward gathers the weights again (nothing hidden: the whole gather, the
    once-a-step gather of the deferred run); deferred: gathered once a step, reduced once a step."""
    every = stage_sums(kernels, _arrays(1, defer=False, hidden=0.0))
    once = stage_sums(kernels, _arrays(1, defer=True, hidden=0.0))
    for st in range(4):
        assert once[st, GATHER] == 0.0 and once[st, REDUCE] == 0.0
        assert once[st, STEP_GATHER] > 0.0 and once[st, STEP_REDUCE] > 0.0
        assert every[st, STEP_GATHER] == 0.0 and every[st, STEP_REDUCE] == 0.0
        assert every[st, GATHER] == pytest.approx(once[st, STEP_GATHER], rel=1e-12)
        assert every[st, REDUCE] == pytest.approx(once[st, STEP_REDUCE], rel=1e-12)


def test_one_layer_exposed_per_chunk_call(kernels):
    """Hidden entirely but for what no call can hide: one layer's gather and one layer's reduction each forward and
    backward call -- v calls a micro-batch under interleaved 1F1B, one under 1F1B (8 layers a stage)."""
    plain = stage_sums(kernels, _arrays(1, defer=False, hidden=1.0))
    whole = stage_sums(kernels, _arrays(1, defer=False, hidden=0.0))
    for vpp in (2, 4):
        chunked = stage_sums(kernels, _arrays(vpp, defer=False, hidden=1.0))
        for st in range(4):
            layers = chunked[st, SECONDS_STAGE["layers"]]
            assert layers == 8.0
            for col in (GATHER, REDUCE):
                assert plain[st, col] == pytest.approx(whole[st, col] / layers, rel=1e-12)
                assert chunked[st, col] == pytest.approx(vpp * whole[st, col] / layers, rel=1e-12)


def test_the_compute_beside_the_hidden_traffic_is_slowed(kernels):
    """Compute that runs beside a collective takes 1 + s times as long (Rates.collective_overlap_slowdown, s = 0.189
    on average, arXiv 2507.03114): of the traffic hidden beyond each call's exposed layer, s / (1 + s) of its time is
    added back; nothing hidden, nothing added."""
    slow = 0.189 / 1.189
    assert Rates.for_device("h100-sxm").collective_overlap_slowdown == 0.189
    for vpp in (1, 4):
        floor = stage_sums(kernels, _arrays(vpp, defer=False, hidden=1.0))
        slowed = stage_sums(kernels, _arrays(vpp, defer=False, hidden=1.0, slow=slow))
        whole = stage_sums(kernels, _arrays(vpp, defer=False, hidden=0.0, slow=slow))
        for st in range(4):
            for col in (GATHER, REDUCE):
                assert whole[st, col] > floor[st, col] > 0.0
                want = floor[st, col] + slow * (whole[st, col] - floor[st, col])
                assert slowed[st, col] == pytest.approx(want, rel=1e-12)


def test_resharded_forward_floors_per_call_too(kernels):
    """reshard_after_forward (ZeRO-3's gather again in the backward): the same per-call floor."""
    plain = stage_sums(kernels, _arrays(1, defer=False, hidden=1.0, reshard=True))
    chunked = stage_sums(kernels, _arrays(4, defer=False, hidden=1.0, reshard=True))
    for st in range(4):
        for col in (GATHER, REDUCE):
            assert chunked[st, col] == pytest.approx(4.0 * plain[st, col], rel=1e-12)


def test_reduction_in_its_own_width(kernels):
    """grad_reduce_bytes 4 over 2-byte gradients moves what 4-byte gradients would; the gather is untouched."""
    a = _arrays(2, defer=False, hidden=0.3)
    base = stage_sums(kernels, a)
    wide = stage_sums(kernels, with_rate(a, grad_reduce_bytes=4.0))
    held4 = dict(a)
    held4["cand"] = a["cand"].copy()
    held4["cand"][SECONDS_CAND["bytes_grad"]] = 4.0
    want = stage_sums(kernels, held4)
    for st in range(4):
        assert wide[st, REDUCE] > base[st, REDUCE]
        assert wide[st, REDUCE] == pytest.approx(want[st, REDUCE], rel=1e-12)
        assert wide[st, GATHER] == base[st, GATHER]
    same = stage_sums(kernels, with_rate(a, grad_reduce_bytes=2.0))
    np.testing.assert_array_equal(same, base)


def test_rates_refuse_a_width_that_is_not_one():
    for bad in (3, -2, True, 8):
        with pytest.raises(ndcost.SpecError, match="grad_reduce_bytes"):
            Rates.for_device("h100-sxm").replace(grad_reduce_bytes=bad)


def test_automodel_rows_state_both():
    """The AutoModel rows: gradients reduced every micro-batch (not deferred, as the torchtitan preset would have
    it under PP) and reduced in fp32 over their bf16 gradients."""
    doc = read_mapping(MOE_RUNS, "x")
    rows = [r for r in doc["runs"] if r["id"].startswith("automodel_")]
    assert len(rows) == 4
    for row in rows:
        built = build_row(row, doc["hardware"], MOE_RUNS)
        assert built.spec.deferred_grad_accumulation is False, row["id"]
        assert built.spec.grad_bytes == 2 and built.rates.grad_reduce_bytes == 4, row["id"]


def test_grad_reduce_dtype_fact_rule():
    facts = lambda text: RunFacts("r", "f", "fw", {"grad_reduce_dtype": {"value": text}})
    assert _gradient_reduce_changes(facts("fp32 (reduce_dtype)")) == {"grad_reduce_bytes": 4}
    assert _gradient_reduce_changes(facts("bf16")) == {"grad_reduce_bytes": 2}
    assert _gradient_reduce_changes(RunFacts("r", "f", "fw", {})) == {}
    with pytest.raises(ndcost.SpecError, match="grad_reduce_dtype"):
        _gradient_reduce_changes(facts("int8 sums"))
