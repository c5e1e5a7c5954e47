"""estimate()'s one path for one candidate (ndcost.price.estimate_one, kernels nd_estimate_one / seconds_estimate_one).

Seconds mode through the one-candidate kernels equals the physics model's own walk
(``seconds_estimate``) and the memory model (``memory_estimate`` with its overheads) value for
value; both backends agree; the kernels check their shapes; a spec's prepared vector is reused
only on the model and cluster it was validated on.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import ndcost
from ndcost import Cluster, ExecSpec, Model, SpecError, estimate
from ndcost.kernels.columns import PART_NAMES, SECONDS_STAGE_FIELDS
from ndcost.kernels.one import ND_ONE_COUNT, ONE_FIELDS
from ndcost.price.estimate_one import _prepared, nd_options
from ndcost.tables.layout_nd import nd_search_offset
from ndcost.tables.layout import build_layout
from ndcost.tables.memory import memory_estimate
from ndcost.tables.memory_overheads import fixed_bytes
from ndcost.spec.rates import Rates
from ndcost.tables.seconds import seconds_estimate

from strategies import REALISTIC, on_both_backends, realistic

RTOL = 1e-12


def close(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= RTOL * max(abs(a), abs(b))


def _reference(model, spec, cluster, rates=None) -> dict:
    """Seconds mode as the physics model prices it (seconds_estimate + memory_estimate + overheads)."""
    priced = seconds_estimate(model, spec, cluster, rates=rates)
    memory = memory_estimate(model, spec, cluster, build_layout(model, spec))
    memory.with_overheads(float(fixed_bytes(spec.dp, spec.tp, spec.pp, spec.cp, spec.ep)),
                          float(cluster.memory_reserve_bytes))
    return {**priced, "memory": memory, "fits": memory.fits(cluster.device.memory_bytes)}


def _assert_same(got, want: dict) -> None:
    assert got.units == "seconds"
    assert close(got.step_time, want["step_time"])
    for name in PART_NAMES:
        assert close(got.parts[name], want["parts"][name]), name
    assert len(got.stage_times) == len(want["stage_times"])
    assert all(close(a, b) for a, b in zip(got.stage_times, want["stage_times"]))
    for name in ("mfu", "hfu", "tokens_per_second"):
        assert close(getattr(got, name), want[name]), name
    assert close(got.details["model_flops"], want["model_flops"])
    np.testing.assert_allclose(got.details["stage_sums"], want["stage_sums"], rtol=RTOL, atol=0)
    assert close(got.memory.peak, want["memory"].peak)
    assert close(got.memory.device_peak, want["memory"].device_peak)
    assert [s.total for s in got.memory.stages] == pytest.approx([s.total for s in want["memory"].stages], rel=RTOL)
    assert got.fits == want["fits"]


@pytest.mark.parametrize("name", sorted(REALISTIC))
def test_seconds_equals_the_physics_model_on_every_realistic_model(name):
    model, spec, cluster = realistic(name)
    _assert_same(ndcost.estimate(model, spec, cluster), _reference(model, spec, cluster))


def test_seconds_with_stated_rates_and_ratios():
    model, spec, cluster = realistic("llama3-70b")
    rates = Rates.for_software("h100-sxm", "torchtitan-eager")
    _assert_same(ndcost.estimate(model, spec, cluster, rates=rates), _reference(model, spec, cluster, rates))
    ratios = {"COMPUTE": 1.1, "DP_COMM": 1.0, "DP_REDUCE": 1.0, "MP_COMM": 0.9, "EP_COMM": 1.0, "CP_COMM": 1.0,
              "PP_COMM": 1.0, "BUBBLE": 1.2}
    scaled = ndcost.estimate(model, spec, cluster, ratios=ratios)
    plain = ndcost.estimate(model, spec, cluster)
    assert scaled.parts["fw_compute"] == pytest.approx(plain.parts["fw_compute"] * 1.1, rel=RTOL)
    assert scaled.step_time == pytest.approx(sum(scaled.parts.values()), rel=RTOL)


@pytest.mark.parametrize("name", ["llama3-70b", "deepseek-v3", "qwen2.5-vl-7b", "mixtral-8x7b"])
@pytest.mark.parametrize("units", ["seconds", "nd"])
def test_both_backends_agree(ckernels, name, units):
    model, spec, cluster = realistic(name)
    for with_memory in (True, False):
        results = on_both_backends(lambda: ndcost.estimate(model, spec, cluster, units=units, with_memory=with_memory))
        c, py = results["cython"], results["python"]
        assert close(c.step_time, py.step_time)
        assert all(close(c.parts[p], py.parts[p]) or abs(c.parts[p] - py.parts[p]) <= RTOL * c.step_time
                   for p in PART_NAMES)
        assert all(close(a, b) for a, b in zip(c.stage_times, py.stage_times))
        if units == "seconds":
            np.testing.assert_allclose(c.details["stage_sums"], py.details["stage_sums"], rtol=RTOL, atol=0)
            assert close(c.mfu, py.mfu) and close(c.tokens_per_second, py.tokens_per_second)
        if with_memory:
            assert close(c.memory.peak, py.memory.peak) and c.fits == py.fits
            np.testing.assert_allclose([s.total for s in c.memory.stages], [s.total for s in py.memory.stages],
                                       rtol=RTOL)
        else:
            assert c.memory is None and py.memory is None


_TABLE_ARGS = ("kinds", "skinds", "model", "smodel", "mkinds", "mmodel", "layout", "pool", "slot_pool", "extras")


def _one_args(units: str) -> dict:
    """Good arguments of one_tables and the one-candidate kernel of *units* (llama3-70b's realistic
    spec, with memory), in one dict."""
    model, spec, cluster = realistic("llama3-70b")
    prep = _prepared(model, spec, cluster, units == "seconds", True)
    t, pool, p = prep.tables, prep.packed.pool, spec.pp
    skinds, smodel = t.seconds(model)
    common = dict(kinds=t.kinds, skinds=skinds, model=t.vector, smodel=smodel, mkinds=t.memory_kinds,
                  mmodel=t.memory_vector, layout=prep.packed.row, pool=pool.pool, slot_pool=pool.slot_pool,
                  extras=prep.packed.extras, cand=prep.column, reserve=prep.cc.reserve,
                  out_stage_times=np.empty(p), out_stages=np.empty((p, 8)))
    if units == "seconds":
        return dict(common, rate=prep.rate, out=np.empty(len(ONE_FIELDS)),
                    out_stage_sums=np.empty((p, len(SECONDS_STAGE_FIELDS))))
    return dict(common, options=nd_options("DYNAMIC", "WITH", False), ratios=np.zeros(0), out=np.empty(ND_ONE_COUNT))


def _call_one(kernels, units: str, args: dict) -> None:
    """one_tables of *args*' tables, then the kernel on them and the rest of *args*."""
    tables = kernels.one_tables(**{name: args[name] for name in _TABLE_ARGS})
    getattr(kernels, f"{units}_estimate_one")(tables, **{k: v for k, v in args.items() if k not in _TABLE_ARGS})


@pytest.mark.parametrize("units", ["seconds", "nd"])
def test_kernels_check_shapes_before_pricing(kernels, units):
    good = _one_args(units)
    _call_one(kernels, units, good)
    assert good["out"][0] > 0 and good["out"][1] > 0
    bad = {
        "cand": lambda a: a["cand"][:-1],
        "out": lambda a: np.empty(a["out"].shape[0] + 1),
        "out_stage_times": lambda a: np.empty(1),
        "out_stages": lambda a: np.empty((1, 8)),
        "layout": lambda a: a["layout"][:-1].copy(),
        "pool": lambda a: a["pool"][:3].copy(),
        "mkinds": lambda a: np.zeros((a["mkinds"].shape[0], a["mkinds"].shape[1] - 1)),
    }
    if units == "seconds":
        bad["out_stage_sums"] = lambda a: np.empty((a["out_stage_sums"].shape[0], 2))
        bad["rate"] = lambda a: a["rate"][:-1].copy()
        bad["extras"] = lambda a: np.zeros(1)
    for name, make in bad.items():
        args = _one_args(units)
        args[name] = make(args)
        with pytest.raises(ValueError):
            _call_one(kernels, units, args)


def test_the_held_tables_follow_the_backend():
    """A layout's one_tables are the current backend's: switching backends between two calls on
    one prepared spec prices the same."""
    from ndcost import _backend

    model, spec, cluster = realistic("llama3-70b")
    first = estimate(model, spec, cluster, units="nd")
    with _backend.use("python"):
        again = estimate(model, spec, cluster, units="nd")
    assert again.step_time == pytest.approx(first.step_time, rel=RTOL)
    assert estimate(model, spec, cluster, units="nd").step_time == first.step_time


def test_a_prepared_spec_is_revalidated_on_another_cluster_or_model():
    model, spec, cluster = realistic("llama3-70b")
    before = copy.deepcopy(spec)
    first = ndcost.estimate(model, spec, cluster)
    assert ndcost.estimate(model, spec, cluster).step_time == first.step_time
    # the same spec on a cluster of another size breaks rule 1, however often it was priced before
    with pytest.raises(SpecError):
        ndcost.estimate(model, spec, Cluster("h100-sxm", num_devices=spec.num_devices * 2))
    # an equal model (another object) prices the same; another model is validated afresh
    assert ndcost.estimate(Model.from_catalog("llama3-70b"), spec, cluster).step_time == first.step_time
    with pytest.raises(SpecError):
        ndcost.estimate(Model.from_catalog("qwen2.5-vl-7b"), spec, cluster)   # 28 heads over tp=8
    assert spec == before and vars(spec) == vars(before)


def test_units_share_nothing_but_validation():
    model, spec, cluster = realistic("deepseek-v3")
    # an offset that places every layer: ND's placement and the one seconds mode runs agree
    spec = spec.replace(offset=nd_search_offset(model.num_layers_with_mtp, spec.pp, spec.vpp))
    nd = ndcost.estimate(model, spec, cluster, units="nd")
    seconds = ndcost.estimate(model, spec, cluster)
    assert nd.units == "nd" and seconds.units == "seconds"
    assert nd.memory.peak == seconds.memory.peak               # one memory model; seconds adds overheads
    assert seconds.memory.device_peak > seconds.memory.peak
    assert nd.details == {} and set(seconds.details) == {"model_flops", "stage_sums", "inputs"}
    bad = ExecSpec(dp=3, tp=8, pp=8, global_batch_size=96, seq_length=4096)
    for units in ("nd", "seconds"):
        with pytest.raises(SpecError):
            ndcost.estimate(model, bad, cluster, units=units)


def test_prepared_specs_are_kept_for_a_bounded_few(monkeypatch):
    from ndcost.price import estimate_one

    model, spec, cluster = realistic("llama3-70b")
    monkeypatch.setattr(estimate_one, "_RECENT", {})
    monkeypatch.setattr(estimate_one, "_RECENT_LIMIT", 4)
    specs = [spec.replace(micro_batch_size=b, global_batch_size=1024 * b) for b in (1, 2, 4, 8, 16, 32)]
    first = [ndcost.estimate(model, s, cluster).step_time for s in specs]
    assert len(estimate_one._RECENT) <= 4
    assert [ndcost.estimate(model, s, cluster).step_time for s in specs] == first
