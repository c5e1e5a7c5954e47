"""Property tests of the batch path (hypothesis): for any strategy hypothesis builds,
compiled == oracle on every output, and estimate_many == estimate() row by row."""
from __future__ import annotations

import math

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from batch_cases import legal_tp  # noqa: E402
from ndcost import Cluster, ExecSpec, Model, SpecError, _backend, estimate  # noqa: E402
from ndcost.kernels.columns import PART_NAMES  # noqa: E402
from ndcost.price.candidates import Candidates  # noqa: E402
from ndcost.price.estimate_many import estimate_many  # noqa: E402
from ndcost.tables.reasons import FIRST_INVALID  # noqa: E402

MODELS = {name: Model.from_catalog(name) for name in
          ("llama3-70b", "qwen3-32b", "mixtral-8x7b", "deepseek-v3", "qwen3-next-80b-a3b", "qwen3-30b-a3b")}
RTOL = 1e-12


@st.composite
def strategies(draw):
    """(model, a list of ExecSpec fields): degrees from the model's legal values, anything else free."""
    model = MODELS[draw(st.sampled_from(sorted(MODELS)))]
    rows = []
    for _ in range(draw(st.integers(1, 6))):
        tp = draw(st.sampled_from(legal_tp(model)))
        pp = draw(st.sampled_from([p for p in (1, 2, 3, 4, 8) if p <= model.num_layers_with_mtp]))
        schedule = draw(st.sampled_from(("1f1b", "interleaved", "zero_bubble_v", "gpipe", "seq1f1b"))) if pp > 1 else "1f1b"
        vpp = {"interleaved": draw(st.sampled_from((2, 3))), "zero_bubble_v": 2}.get(schedule, 1)
        dp = draw(st.sampled_from((1, 2, 4, 8, 16)))
        ep = 1
        if model.is_moe:
            ep = draw(st.sampled_from([e for e in (1, 2, 4, 8, 16) if model.num_experts % e == 0
                                       and ((e <= dp and dp % e == 0) or (dp * tp) % e == 0)]))
        mbn = draw(st.integers(1, 4)) * max(pp, 1) + (draw(st.integers(0, 2)) if schedule == "gpipe" else 0)
        mbs = draw(st.sampled_from((1, 2)))
        rows.append(dict(
            dp=dp, tp=tp, pp=pp, vpp=vpp, ep=ep, cp=draw(st.sampled_from((1, 2))),
            cp_algo=draw(st.sampled_from(("ring", "ulysses", "ring-allgather"))), pp_schedule=schedule,
            seq_split=draw(st.sampled_from((1, 2))) if schedule == "seq1f1b" else 1,
            micro_batch_size=mbs, global_batch_size=mbs * dp * mbn,
            seq_length=draw(st.sampled_from((1024, 4096, 8192))),
            sequence_parallel=draw(st.booleans()), recompute=draw(st.sampled_from(("none", "full", "selective"))),
            selective_rule=draw(st.sampled_from(("megatron", "mindformers", "hyperparallel"))),
            zero_stage=draw(st.integers(0, 3)), flash_attention=draw(st.booleans()),
            grouped_gemm=draw(st.booleans()), capacity_factor=draw(st.sampled_from((1.0, 1.5))),
            deferred_grad_accumulation=draw(st.booleans()), tie_embeddings=draw(st.sampled_from((None, True, False))),
            moe_dispatch=draw(st.sampled_from((None, 0.0))),
        ))
    return model, rows


def _columns(rows):
    columns = {}
    for name in rows[0]:
        array = np.empty(len(rows), dtype=object)
        array[:] = [row[name] for row in rows]
        columns[name] = array
    return columns


def _same(a, b) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b or abs(a - b) <= RTOL * max(abs(a), abs(b))


@pytest.mark.cython
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategies())
def test_compiled_equals_oracle(case):
    model, rows = case
    cands = Candidates.from_arrays(**_columns(rows))
    results = {}
    for backend in ("cython", "python"):
        with _backend.use(backend):
            results[backend] = estimate_many(model, cands, "h100-sxm", units="nd", stage_times=True,
                                             stage_memory=True)
    c, py = results["cython"], results["python"]
    np.testing.assert_array_equal(c.reason, py.reason)
    np.testing.assert_array_equal(c.fits, py.fits)
    for a, b in [(c.step_time, py.step_time), (c.peak_memory, py.peak_memory), (c.stage_times, py.stage_times),
                 (c.stage_memory, py.stage_memory)] + [(c.parts[p], py.parts[p]) for p in PART_NAMES]:
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=0, equal_nan=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategies())
def test_batch_equals_estimate(case):
    model, rows = case
    cands = Candidates.from_arrays(**_columns(rows))
    batch = estimate_many(model, cands, "h100-sxm", units="nd")
    for i, row in enumerate(rows):
        try:
            spec = ExecSpec(**row)
            single = estimate(model, spec, Cluster("h100-sxm", num_devices=spec.num_devices), units="nd")
        except SpecError:
            assert batch.reason[i] >= FIRST_INVALID
            continue
        assert batch.reason[i] < FIRST_INVALID
        assert _same(batch.step_time[i], single.step_time)
        assert _same(batch.peak_memory[i], single.memory.peak)
        assert bool(batch.fits[i]) is single.fits
