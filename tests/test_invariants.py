"""Results that are physically possible (issue 13 #3): MFU <= HFU <= 1, no negative part, and
Ulysses' all-to-alls on the critical path -- the issue's cases and a realistic grid, both units."""
from __future__ import annotations

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import RATE, SECONDS_LAYER
from ndcost.tables.seconds import seconds_arrays

from strategies import REALISTIC


@pytest.mark.parametrize("seq", (524288, 1048576))
def test_long_context_hfu_stays_below_one(ckernels, seq):
    """The issue's case: HFU 1.025 (1.054 MFU at longer sequences) came from counting the full s x s
    matrix while the causal kernel runs half of it; both now count what a causal model needs."""
    spec = ndcost.ExecSpec(dp=1, tp=8, cp=32, global_batch_size=1, seq_length=seq, sequence_parallel=True,
                           recompute="full")
    for backend in ("cython", "python"):
        with ndcost._backend.use(backend):
            e = ndcost.estimate(ndcost.Model.from_catalog("llama3-8b"), spec, ndcost.Cluster("a100-80g", 256))
        assert 0.0 < e.mfu <= e.hfu <= 1.0, (backend, e.mfu, e.hfu)


@pytest.mark.parametrize("units", ("seconds", "nd"))
@pytest.mark.parametrize("name", sorted(REALISTIC))
def test_realistic_strategies_have_no_negative_part(name, units):
    device, fields = REALISTIC[name]
    model = ndcost.Model.from_catalog(name)
    one_stage = dict(fields, pp=1, vpp=1, dp=fields["dp"] * fields.get("pp", 1), offset=None)
    for spec_fields in (fields, one_stage):
        spec = ndcost.ExecSpec(**spec_fields)
        cluster = ndcost.Cluster(device, spec.dp * spec.tp * spec.pp * spec.cp)
        try:
            e = ndcost.estimate(model, spec, cluster, units=units)
        except ndcost.SpecError:
            continue          # the one-stage variant may break a model rule (e.g. a tower on its stage)
        assert all(value >= 0.0 for value in e.parts.values()), (name, spec.pp, e.parts)
        assert sum(e.parts.values()) == pytest.approx(e.step_time, rel=1e-12)
        if units == "seconds":
            assert e.mfu <= e.hfu <= 1.0


def test_nd_bubble_at_one_stage_is_exactly_zero():
    model = ndcost.Model.from_catalog("llama3-8b")
    for mbs, gbs in ((1, 64), (2, 96), (1, 1000)):
        spec = ndcost.ExecSpec(dp=8, micro_batch_size=mbs, global_batch_size=gbs, seq_length=4096)
        e = ndcost.estimate(model, spec, ndcost.Cluster("h100-sxm", 8), units="nd")
        assert e.parts["bubble"] == 0.0


def test_ulysses_all_to_alls_by_hand(kernels):
    """DeepSpeed-Ulysses (Jacobs et al. 2023 §3): an all-to-all of Q, K, V before the attention and of
    its output after it, forward and backward, never hidden behind the attention."""
    model = ndcost.Model.from_catalog("llama3-8b")
    cluster = ndcost.Cluster("h100-sxm", 16)
    spec = ndcost.ExecSpec(dp=2, tp=2, cp=4, global_batch_size=8, seq_length=65536, sequence_parallel=True,
                           cp_algo="ulysses")
    arrays = seconds_arrays(model, spec, cluster)
    out = np.empty((1, len(SECONDS_LAYER)))
    kernels.seconds_layer_times(*(arrays[k] for k in ("kinds", "skinds", "model", "smodel", "cand", "rate")), out)
    rate = arrays["rate"]
    bw = rate[RATE["intra_bw"]] * rate[RATE["a2a_eff"]]      # an all-to-all's own share (all_to_all_rates)
    assert rate[RATE["a2a_eff"]] == pytest.approx(321.3 / 450.0)
    lat = rate[RATE["intra_lat"]]
    tokens = 65536 / 4
    qkv = tokens * (32 * 128 + 8 * 256) * 2 / 2        # q of 32 heads, k and v of 8, over tp 2, bf16
    o = tokens * 32 * 128 * 2 / 2

    def a2a(moved):                                      # 4 ranks 2 apart, inside one node
        return 3 * lat + 3 / 4 * moved / bw

    assert out[0, SECONDS_LAYER["cp_f"]] == pytest.approx(a2a(qkv) + a2a(o), rel=1e-12)
    assert out[0, SECONDS_LAYER["cp_b"]] == pytest.approx(a2a(qkv) + a2a(o), rel=1e-12)
    ring = ndcost.estimate(model, ndcost.ExecSpec(dp=2, tp=2, cp=4, global_batch_size=8, seq_length=65536,
                                                  sequence_parallel=True), cluster)
    ulysses = ndcost.estimate(model, spec, cluster)
    layers, m = 32, 4
    assert ulysses.parts["cp_comm"] == pytest.approx(layers * m * 2 * (a2a(qkv) + a2a(o)), rel=1e-9)
    assert ring.parts["cp_comm"] < ulysses.parts["cp_comm"]
