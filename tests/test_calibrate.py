"""Calibration: fit ratios to measured runs, leave-one-out, apply them (docs/ND_MODEL.md §2.10, §2.11)."""
from __future__ import annotations

import csv
import itertools
import json
import math
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from ndcost import Cluster, ExecSpec, Model, Ratios, estimate
from ndcost.io import calibrate as calibrate_module
from ndcost.io.calibrate import FITS, FLOOR, EstimatedRuns, corrected, estimate_runs, fit_ratios
from ndcost.io.fit_stats import average_ranks, nnls, spearman
from ndcost.io.leave_one_out import leave_one_out
from ndcost.errors import SpecError
from ndcost.io.measured import MEASURED_COLUMNS, MeasuredRow, read_measured
from ndcost.spec.ratios import PART_NAMES, RATIO_KEYS, _reset_missing_warnings

DEVICE = "h100-sxm"
SEQ = 4096
# Every key distinct, so that a ratio taken from the wrong part shows. BUBBLE is
# PP_COMM's (ND fits them as one), and the keys these strategies never price
# (DP_REDUCE, EP_COMM on a dense model) take COMPUTE's, as the fit gives them.
DENSE_TRUE = {"COMPUTE": 2.0e-12, "DP_COMM": 3.0e-12, "DP_REDUCE": 2.0e-12, "MP_COMM": 5.0e-12,
              "EP_COMM": 2.0e-12, "CP_COMM": 7.0e-12, "PP_COMM": 1.1e-11, "BUBBLE": 1.1e-11}
DENSE = ("llama3-8b", [dict(dp=8, mp=1, pp=1, mb=1), dict(dp=4, mp=2, pp=1, mb=2), dict(dp=2, mp=2, pp=2, mb=4),
                       dict(dp=2, mp=2, pp=2, mb=4, vpp=2), dict(dp=2, mp=1, pp=2, mb=4, cp=2),
                       dict(dp=1, mp=2, pp=4, mb=8), dict(dp=2, mp=4, pp=1, mb=4), dict(dp=4, mp=1, pp=2, mb=2),
                       dict(dp=1, mp=1, pp=4, mb=8, cp=2)])
MOE_TRUE = {"COMPUTE": 1.5e-12, "DP_COMM": 4.0e-12, "DP_REDUCE": 1.5e-12, "MP_COMM": 6.0e-12,
            "EP_COMM": 9.0e-12, "CP_COMM": 1.5e-12, "PP_COMM": 1.3e-11, "BUBBLE": 1.3e-11}
MOE = ("qwen3-30b-a3b", [dict(dp=8, mp=1, pp=1, mb=1, ep=8), dict(dp=4, mp=2, pp=1, mb=2, ep=4),
                         dict(dp=8, mp=1, pp=1, mb=2, ep=2), dict(dp=2, mp=2, pp=2, mb=4, ep=2),
                         dict(dp=4, mp=1, pp=2, mb=2, ep=4), dict(dp=8, mp=1, pp=1, mb=1, ep=1),
                         dict(dp=2, mp=4, pp=1, mb=4, ep=2)])


def columns_of(parts, ratios):
    """The measured columns a run would show if *ratios* were the truth (ND's FITS, inverted)."""
    scaled = Ratios(ratios).apply(parts)
    out = {
        "comp": scaled["fw_compute"] + scaled["bw_compute"] + scaled["recompute"],
        "op_wait": scaled["dp_comm"],
        "dp_wait": scaled["dp_reduce"],
        "mp_wait": 0.75 * scaled["tp_comm"],  # ND fits mp_wait + sp_wait together
        "sp_wait": 0.25 * scaled["tp_comm"],
        "ep_wait": scaled["ep_comm"],
        "cp_wait": scaled["cp_comm"],
        "pp_wait": scaled["pp_comm"] + scaled["bubble"],
    }
    # A bubble without a pipeline is a rounding residue (-0.125 ND units): no run measures less than 0.
    return {name: max(0.0, value) for name, value in out.items()}


def synthetic(name, strategies, ratios, *, idle=0.0):
    """Measured rows made from known ratios: each strategy's parts times its ratio."""
    model = Model.from_catalog(name)
    rows = []
    for line, fields in enumerate(strategies, start=2):
        spec = ExecSpec.from_strategy(seq_length=SEQ, **fields)
        result = estimate(model, spec, Cluster(DEVICE, spec.num_devices), units="nd", with_memory=False)
        parts = columns_of(result.parts, ratios)
        rows.append(MeasuredRow(spec, sum(parts.values()) + idle, parts, source=f"synthetic.csv, line {line}"))
    return model, rows


@pytest.fixture(scope="module")
def dense():
    return synthetic(*DENSE, DENSE_TRUE)


@pytest.fixture(scope="module")
def moe():
    return synthetic(*MOE, MOE_TRUE)


@pytest.fixture(autouse=True)
def fresh_warning_registry():
    _reset_missing_warnings()
    yield
    _reset_missing_warnings()


def write_csv(path, rows):
    """*rows* as ND's measured CSV (degrees by ND's names, times in ms, floats exact)."""
    header = ["time", "dp", "mp", "pp", "vpp", "cp", "ep", "mb", "mbs", *MEASURED_COLUMNS]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for row in rows:
            s = row.spec
            writer.writerow([repr(row.time), s.dp, s.tp, s.pp, s.vpp, s.cp, s.ep, s.resolved_micro_batch_num,
                             s.micro_batch_size, *(repr(row.parts[c]) for c in MEASURED_COLUMNS)])
    return path


def assert_recovered(ratios, truth, rel=1e-9):
    assert set(ratios.values) == set(RATIO_KEYS)
    for key in RATIO_KEYS:
        assert ratios.values[key] == pytest.approx(truth[key], rel=rel), key


# --------------------------------------------------------------------------- the fit recovers known ratios

@pytest.mark.parametrize("method", ["nd", "nnls"])
@pytest.mark.parametrize("case", ["dense", "moe"])
def test_fit_recovers_known_ratios(request, case, method):
    model, rows = request.getfixturevalue(case)
    truth = DENSE_TRUE if case == "dense" else MOE_TRUE
    fit = fit_ratios(rows, model, DEVICE, "nd", method)
    assert_recovered(fit.ratios, truth)
    assert fit.floored == ()
    unpriced = {"dense": {"DP_REDUCE", "EP_COMM"}, "moe": {"DP_REDUCE", "CP_COMM"}}[case]
    assert fit.fallbacks == {key: "COMPUTE" for key in unpriced}
    assert fit.ratios.values["BUBBLE"] == fit.ratios.values["PP_COMM"]


@pytest.mark.parametrize("method", ["nd", "nnls"])
def test_leave_one_out_is_exact_on_synthetic_rows(dense, method):
    model, rows = dense
    loo = leave_one_out(rows, model, DEVICE, "nd", method)
    assert len(loo.rows) == len(rows)
    for result, row in zip(loo.rows, rows):
        assert result.row is row and result.note == ""
        assert result.left_out == pytest.approx(result.measured, rel=1e-9)
        assert result.fitted == pytest.approx(result.measured, rel=1e-9)
        assert result.measured == pytest.approx(row.busy if method == "nd" else row.time, rel=1e-15)
        assert abs(result.error_after) < 1e-9
    assert loo.mape_after < 1e-9 and loo.mae_after < 1e-9 * max(r.measured for r in loo.rows)
    assert loo.spearman_after == pytest.approx(1.0) and loo.spearman_fitted == pytest.approx(1.0)
    # Before: the raw score times the one least-squares factor, which these distinct ratios leave off.
    raw = np.array([r.raw for r in loo.rows])
    measured = np.array([r.measured for r in loo.rows])
    assert loo.scale == pytest.approx(float(raw @ measured / (raw @ raw)), rel=1e-12)
    assert [r.before for r in loo.rows] == pytest.approx(list(loo.scale * raw), rel=1e-12)
    assert loo.mape_before > 0.05
    assert loo.spearman_before == pytest.approx(spearman(raw, [r.step for r in loo.rows]))
    assert loo.target == ("busy" if method == "nd" else "time") and loo.unit == "ms"
    text = "\n".join(loo.report())
    assert "Mean absolute error: before" in text and "Spearman rank correlation" in text
    summary = loo.to_dict()
    assert json.loads(json.dumps(summary))["method"] == method
    assert summary["rows"][0]["source"] == "synthetic.csv, line 2"


def test_idle_goes_to_the_nnls_ratios_not_to_nds(dense):
    model, base = dense
    rows = [MeasuredRow(r.spec, r.time + 100.0, r.parts, source=r.source) for r in base]
    assert_recovered(fit_ratios(rows, model, DEVICE, method="nd").ratios, DENSE_TRUE)
    loo = leave_one_out(rows, model, DEVICE, method="nnls")
    assert loo.target == "time"
    assert all(abs(r.error_after) > 0 for r in loo.rows)  # a constant idle is no part of the estimate


# --------------------------------------------------------------------------- applying the ratios

def test_fitted_ratios_applied_by_estimate_in_nd_units(dense, tmp_path):
    model, rows = dense
    fit = fit_ratios(rows, model, DEVICE)
    path = tmp_path / "ratios.json"
    fit.ratios.save(path)
    for row in rows:
        cluster = Cluster(DEVICE, row.spec.num_devices)
        for ratios in (fit.ratios, path, dict(fit.ratios.values)):
            result = estimate(model, row.spec, cluster, units="nd", ratios=ratios, with_memory=False)
            assert result.units == "nd_ms"
            assert result.step_time == pytest.approx(row.busy, rel=1e-9)
        raw = estimate(model, row.spec, cluster, units="nd", with_memory=False)
        assert corrected(raw.parts, fit.ratios) == pytest.approx(result.step_time, rel=1e-12)
        assert result.parts["bubble"] == pytest.approx(raw.parts["bubble"] * DENSE_TRUE["BUBBLE"], rel=1e-9, abs=1e-9)


def test_save_and_load_keep_every_ratio_and_fitted_on(dense, tmp_path):
    model, rows = dense
    fit = fit_ratios(rows, model, DEVICE, method="nnls")
    path = tmp_path / "ratios.json"
    fit.ratios.save(path)
    doc = json.loads(path.read_text())
    assert list(doc)[:len(RATIO_KEYS)] == list(RATIO_KEYS)
    fitted_on = doc["_fitted_on"]
    assert fitted_on["csv"] == "synthetic.csv"
    assert fitted_on["units"] == "nd" and fitted_on["method"] == "nnls"
    assert fitted_on["fallbacks"] == {"DP_REDUCE": "COMPUTE", "EP_COMM": "COMPUTE"}
    assert fitted_on["strategies"][2] == {"dp": 2, "mp": 2, "pp": 2, "vpp": 1, "cp": 1, "ep": 1, "mb": 4, "mbs": 1,
                                          "op": 2, "sp": True, "zero_stage": 1, "recompute": "none"}
    loaded = Ratios.load(path)
    assert dict(loaded.values) == dict(fit.ratios.values)
    assert loaded.fitted_on["strategies"][0]["dp"] == 8
    assert fit_ratios(rows, model, DEVICE, csv="runs.csv").ratios.fitted_on["csv"] == "runs.csv"


@pytest.mark.parametrize(("doc", "parameter", "rule", "value"), [
    ({"DP_COMM": 1.0}, "COMPUTE",
     "be stated: it turns ND's units into milliseconds, and every missing ratio falls back on it", None),
    ({"COMPUTE": 1.0, "IDLE": 2.0}, "IDLE",
     f"be a ratio key ({', '.join(RATIO_KEYS)}) or metadata starting with '_'", 2.0),
    ({"COMPUTE": 1.0, "MP_COMM": 0}, "MP_COMM", "be a finite number > 0", 0),
    ({"COMPUTE": -2.0}, "COMPUTE", "be a finite number > 0", -2.0),
])
def test_a_bad_ratios_file_is_refused(dense, tmp_path, doc, parameter, rule, value):
    model, rows = dense
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    pattern = "^" + re.escape(f"The {parameter!r} parameter of {path.resolve()} must {rule}. Got {value!r} instead.")
    with pytest.raises(SpecError, match=pattern):
        Ratios.load(path)
    spec = rows[0].spec
    with pytest.raises(SpecError, match=pattern):
        estimate(model, spec, Cluster(DEVICE, spec.num_devices), units="nd", ratios=path, with_memory=False)


def test_missing_ratios_fall_back_as_nd_and_are_named_once(dense):
    model, rows = dense
    stated = {"COMPUTE": 2.0, "DP_COMM": 3.0, "PP_COMM": 5.0}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [estimate(model, row.spec, Cluster(DEVICE, row.spec.num_devices), units="nd",
                            ratios=Ratios(stated), with_memory=False) for row in rows[:4]]
    named = sorted(str(w.message) for w in caught if issubclass(w.category, RuntimeWarning))
    assert named == sorted([
        "the ratios file states no DP_REDUCE ratio: that part takes DP_COMM's",
        "the ratios file states no MP_COMM ratio: that part takes COMPUTE's",
        "the ratios file states no EP_COMM ratio: that part takes COMPUTE's",
        "the ratios file states no CP_COMM ratio: that part takes COMPUTE's",
        "the ratios file states no BUBBLE ratio: that part takes PP_COMM's",
    ])
    raw = estimate(model, rows[2].spec, Cluster(DEVICE, 8), units="nd", with_memory=False).parts
    applied = results[2].parts
    assert applied["tp_comm"] == raw["tp_comm"] * 2.0  # MP_COMM -> COMPUTE
    assert applied["bubble"] == raw["bubble"] * 5.0  # BUBBLE -> PP_COMM
    assert applied["dp_comm"] == raw["dp_comm"] * 3.0


# --------------------------------------------------------------------------- fit rules and refusals

def table(grouped, measured=None, time=None, units="nd"):
    """EstimatedRuns by hand: *grouped* is (n, len(FITS)); each key's load goes to its first part."""
    grouped = np.asarray(grouped, dtype=float)
    n = grouped.shape[0]
    parts = np.zeros((n, len(PART_NAMES)))
    for g, (_, names, _) in enumerate(FITS):
        parts[:, PART_NAMES.index(names[0])] = grouped[:, g]
    measured = np.zeros_like(grouped) if measured is None else np.asarray(measured, dtype=float)
    busy = measured.sum(axis=1)
    time = busy if time is None else np.asarray(time, dtype=float)
    spec = ExecSpec(dp=8, micro_batch_num=1)
    rows = tuple(MeasuredRow(spec, max(float(t), 1.0)) for t in time)
    return EstimatedRuns(rows, units, parts, parts.sum(axis=1), measured, time, busy)


def test_no_compute_priced_is_refused():
    runs = table([[0, 1, 0, 0, 0, 0, 0], [0, 2, 0, 0, 0, 0, 0]], measured=[[1, 1, 0, 0, 0, 0, 0]] * 2)
    for method in ("nd", "nnls"):
        with pytest.raises(SpecError) as info:
            fit_ratios(runs, None, None, "nd", method)
        assert info.value.parameter == "COMPUTE" and info.value.owner == "fit_ratios"
        assert "be priced over the rows" in info.value.rule


def test_a_key_below_a_billionth_of_the_whole_takes_computes_ratio():
    grouped = [[1e12, 1e2, 0, 0, 0, 0, 0], [2e12, 2e2, 0, 0, 0, 0, 5e12]]
    measured = [[2.0, 50.0, 0, 0, 0, 0, 0], [4.0, 70.0, 0, 0, 0, 0, 10.0]]
    fit = fit_ratios(table(grouped, measured), None, None)
    values = fit.ratios.values
    assert values["COMPUTE"] == pytest.approx(2e-12)
    assert values["DP_COMM"] == values["COMPUTE"]  # 300 of 8e12: under 1e-9, not fitted
    assert values["PP_COMM"] == values["BUBBLE"] == pytest.approx(2e-12)
    assert set(fit.fallbacks) == {"DP_COMM", "DP_REDUCE", "MP_COMM", "EP_COMM", "CP_COMM"}


def test_a_key_measured_at_zero_is_floored_not_refused(tmp_path):
    grouped = [[1e12, 1e11, 0, 0, 0, 0, 0], [2e12, 3e11, 0, 0, 0, 0, 0]]
    measured = [[2.0, 0.0, 0, 0, 0, 0, 0], [4.0, 0.0, 0, 0, 0, 0, 0]]
    fit = fit_ratios(table(grouped, measured), None, None)
    assert fit.floored == ("DP_COMM",)
    assert fit.ratios.values["DP_COMM"] == FLOOR * fit.ratios.values["COMPUTE"]
    fit.ratios.save(tmp_path / "r.json")
    assert Ratios.load(tmp_path / "r.json").fitted_on["floored"] == ("DP_COMM",)


def test_nnls_fit_refuses_a_zero_compute():
    runs = table([[1, 1, 0, 0, 0, 0, 0], [1, 2, 0, 0, 0, 0, 0]], time=[1.0, 2.0])
    with pytest.raises(SpecError, match=re.escape("come out > 0 from the 'nnls' fit")):
        fit_ratios(runs, None, None, method="nnls")


def test_nnls_fit_keeps_ratios_non_negative():
    # The step falls as TP's load grows: least squares wants a negative MP_COMM; NNLS floors it.
    runs = table([[1, 0, 0, 1, 0, 0, 0], [1, 0, 0, 2, 0, 0, 0], [2, 0, 0, 1, 0, 0, 0]], time=[3.0, 1.0, 5.0])
    fit = fit_ratios(runs, None, None, method="nnls")
    assert fit.floored == ("MP_COMM",)
    assert all(value > 0 for value in fit.ratios.values.values())


def test_seconds_units_fit_a_dimensionless_correction(dense, monkeypatch):
    """Unit-agnostic: a seconds estimate (stood in for by ND's parts x 1e-15) gets measured s / estimated s."""
    model, rows = dense

    def fake_seconds(model, spec, cluster, *, units, **options):
        result = estimate(model, spec, cluster, units="nd", **options)
        parts = {name: value * 1e-15 for name, value in result.parts.items()}
        return type(result)(units="seconds", step_time=result.step_time * 1e-15, parts=parts,
                            stage_times=result.stage_times)

    monkeypatch.setattr(calibrate_module, "estimate", fake_seconds)
    fit = fit_ratios(rows, model, DEVICE, "seconds", "nd")
    # measured ms / 1000 over (ND units x 1e-15): the nd ratio x 1e15 / 1e3.
    assert_recovered(fit.ratios, {key: value * 1e12 for key, value in DENSE_TRUE.items()})
    assert fit.ratios.fitted_on["units"] == "seconds"
    loo = leave_one_out(rows, model, DEVICE, "seconds", "nnls")
    assert loo.unit == "s" and loo.rows[0].measured == pytest.approx(rows[0].time / 1e3)
    assert loo.mape_after < 1e-9


def test_seconds_units_end_to_end():
    """Rows made from seconds-mode parts and dimensionless ratios: the seconds fit recovers them."""
    model = Model.from_catalog(DENSE[0])
    specs = [ExecSpec.from_strategy(seq_length=SEQ, **fields) for fields in DENSE[1]]
    priced = [estimate(model, spec, Cluster(DEVICE, spec.num_devices), units="seconds", with_memory=False)
              for spec in specs]
    truth = {"COMPUTE": 1.25, "DP_COMM": 0.5, "DP_REDUCE": 0.75, "MP_COMM": 1.5, "EP_COMM": 2.5, "CP_COMM": 0.8,
             "PP_COMM": 1.1, "BUBBLE": 1.1}
    rows = []
    for spec, result in zip(specs, priced):
        parts = {name: value * 1e3 for name, value in columns_of(result.parts, truth).items()}  # s -> ms
        rows.append(MeasuredRow(spec, sum(parts.values()), parts))
    fit = fit_ratios(rows, model, DEVICE, "seconds", "nd")
    for key in RATIO_KEYS:
        expected = truth["COMPUTE"] if key in fit.fallbacks else truth[key]
        assert fit.ratios.values[key] == pytest.approx(expected, rel=1e-9), key
    for row, result in zip(rows, priced):
        calibrated = estimate(model, row.spec, Cluster(DEVICE, row.spec.num_devices), units="seconds",
                              ratios=fit.ratios, with_memory=False)
        assert calibrated.units == "seconds"
        # Exact but for the parts too small to fit (each under 1e-9 of the whole), which took COMPUTE's ratio.
        assert calibrated.step_time == pytest.approx(row.busy / 1e3, rel=1e-6)


def test_bad_arguments_and_rows(dense):
    model, rows = dense
    with pytest.raises(SpecError, match=re.escape("The 'units' parameter of fit_ratios must be one of")):
        fit_ratios(rows, model, DEVICE, "ms")
    with pytest.raises(SpecError, match=re.escape("The 'method' parameter of fit_ratios must be one of 'nd', 'nnls'")):
        fit_ratios(rows, model, DEVICE, method="ols")
    with pytest.raises(SpecError, match="hold at least one measured run"):
        fit_ratios([], model, DEVICE)
    with pytest.raises(SpecError, match="hold only MeasuredRow entries"):
        estimate_runs([{"time": 1.0}], model, DEVICE)
    with pytest.raises(SpecError, match="be left out: the fit estimates uncalibrated parts"):
        estimate_runs(rows, model, DEVICE, ratios={"COMPUTE": 1.0})
    with pytest.raises(SpecError) as info:
        fit_ratios(rows, model, Cluster(DEVICE, 16))
    assert info.value.owner.startswith("synthetic.csv, line 2 (") and "num_devices (16)" in info.value.rule


def test_one_row_has_nothing_to_leave_out(dense):
    model, rows = dense
    loo = leave_one_out(rows[:1], model, DEVICE)
    assert loo.rows[0].left_out is None and loo.rows[0].note == "no other run to fit on"
    assert math.isnan(loo.mape_after) and loo.spearman_after is None and loo.spearman_before is None
    assert "n/a" in "\n".join(loo.report())


# --------------------------------------------------------------------------- NNLS and Spearman

def brute_force_nnls(a, b):
    """The best residual over every support whose unconstrained solution is >= 0 (and that x)."""
    best, best_x = float(np.linalg.norm(b)), np.zeros(a.shape[1])
    for k in range(1, a.shape[1] + 1):
        for support in itertools.combinations(range(a.shape[1]), k):
            z = np.linalg.lstsq(a[:, support], b, rcond=None)[0]
            if np.all(z >= 0):
                x = np.zeros(a.shape[1])
                x[list(support)] = z
                residual = float(np.linalg.norm(a @ x - b))
                if residual < best:
                    best, best_x = residual, x
    return best_x, best


def test_nnls_matches_brute_force_on_small_problems():
    rng = np.random.default_rng(20240611)
    for _ in range(300):
        m, n = int(rng.integers(1, 8)), int(rng.integers(1, 6))
        a = rng.normal(size=(m, n)) * rng.choice([1e-6, 1.0, 1e6])
        b = rng.normal(size=m) * rng.choice([1e-3, 1.0, 1e3])
        x, residual = nnls(a, b)
        expected_x, expected = brute_force_nnls(a, b)
        assert np.all(x >= 0)
        assert residual == pytest.approx(float(np.linalg.norm(a @ x - b)), rel=1e-12, abs=1e-300)
        assert residual <= expected * (1 + 1e-9) + 1e-12 * np.linalg.norm(b)
        if m >= n and np.linalg.matrix_rank(a) == n:  # a unique optimum
            assert x == pytest.approx(expected_x, rel=1e-7, abs=1e-9 * max(1.0, np.abs(expected_x).max()))


def test_nnls_exact_and_degenerate_cases():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    x, residual = nnls(a, a @ [2.0, 3.0])
    assert x == pytest.approx([2.0, 3.0]) and residual < 1e-12
    x, residual = nnls(a, [-1.0, -1.0, -2.0])  # every gradient negative: x = 0
    assert list(x) == [0.0, 0.0] and residual == pytest.approx(math.sqrt(6.0))
    x, _ = nnls(np.zeros((3, 2)), [1.0, 2.0, 3.0])
    assert list(x) == [0.0, 0.0]
    x, _ = nnls(a, np.zeros(3))
    assert list(x) == [0.0, 0.0]
    x, _ = nnls(np.hstack([a, a[:, :1]]), a @ [2.0, 3.0])  # a repeated column: any split, same fit
    assert x[0] + x[2] == pytest.approx(2.0) and x[1] == pytest.approx(3.0)
    with pytest.raises(ValueError, match="nnls: a must be"):
        nnls(np.ones((3, 2)), np.ones(2))
    with pytest.raises(ValueError, match="finite"):
        nnls([[1.0, math.nan]], [1.0])


def test_average_ranks_and_spearman():
    assert list(average_ranks([3, 1, 3, 2])) == [3.5, 1.0, 3.5, 2.0]
    assert list(average_ranks([5, 5, 5])) == [2.0, 2.0, 2.0]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # Ties: ranks (1, 2.5, 2.5, 4) against (1, 3, 2, 4): 4.5 / sqrt(4.5 * 5).
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert spearman([1, 2], [2, 1]) is None
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    with pytest.raises(ValueError):
        spearman([1, 2, 3], [1, 2])


# --------------------------------------------------------------------------- the CLI, end to end

def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "ndcost.cli.main", *args], capture_output=True, text=True)


def test_cli_calibrate_end_to_end(dense, tmp_path):
    model, rows = dense
    measured = write_csv(tmp_path / "runs.csv", rows)
    out = tmp_path / "ratios.json"
    proc = run_cli("calibrate", str(measured), "--model", "llama3-8b", "--device", DEVICE, "--devices", "8",
                   "--seq-length", str(SEQ), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    ratios = Ratios.load(out)
    assert_recovered(ratios, DENSE_TRUE)
    assert ratios.fitted_on["csv"] == str(measured) and len(ratios.fitted_on["strategies"]) == len(rows)
    text = proc.stdout
    assert re.search(r"Mean absolute error: before [\d.e+]+ ms \([\d.]+%\), after [\d.e+-]+ ms \(0\.00%\)", text)
    assert re.search(r"Spearman rank correlation with the measured step: before [+-][\d.]+, after \+1\.000", text)
    for row in rows:
        assert row.label in text
    assert "not priced over the runs, so COMPUTE's ratio: DP_REDUCE, EP_COMM" in text
    assert f"ratios written to {out}" in text

    # The file it wrote calibrates `ndcost estimate` (row 2: SP on, ND's default in from_strategy).
    spec = rows[2].spec
    assert (spec.dp, spec.tp, spec.pp, spec.resolved_micro_batch_num, spec.sequence_parallel) == (2, 2, 2, 4, True)
    proc = run_cli("estimate", "llama3-8b", "--device", DEVICE, "--units", "nd", "--ratios", str(out), "--json",
                   "--dp", "2", "--tp", "2", "--pp", "2", "--micro-batch-num", "4", "--seq-length", str(SEQ),
                   "--sequence-parallel")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["units"] == "nd_ms" and result["step_time"] == pytest.approx(rows[2].busy, rel=1e-9)


def test_cli_calibrate_json_nnls_and_global_batch(dense, tmp_path):
    model, rows = dense
    measured = write_csv(tmp_path / "runs.csv", rows)
    out = tmp_path / "ratios.json"
    proc = run_cli("calibrate", str(measured), "--model", "llama3-8b", "--device", DEVICE, "--seq-length", str(SEQ),
                   "--method", "nnls", "--json", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["method"] == "nnls" and summary["target"] == "time" and summary["csv"] == str(measured)
    assert summary["mape_after"] < 1e-9 and summary["spearman_after"] == pytest.approx(1.0)
    assert len(summary["rows"]) == len(rows)
    assert Ratios.load(out).fitted_on["method"] == "nnls"


def test_cli_calibrate_errors_are_one_line(dense, tmp_path):
    model, rows = dense
    measured = write_csv(tmp_path / "runs.csv", rows)
    lines = measured.read_text().splitlines()
    lines[3] = ",".join(lines[3].split(",")[:-1] + ["slow"])  # pp_wait, the last column, on line 4
    broken = tmp_path / "broken.csv"
    broken.write_text("\n".join(lines) + "\n")
    proc = run_cli("calibrate", str(broken), "--model", "llama3-8b", "--device", DEVICE, "--seq-length", str(SEQ),
                   "-o", str(tmp_path / "r.json"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"The 'pp_wait' parameter of {broken}, line 4 must be a finite number >= 0. Got 'slow' instead." \
        in proc.stderr
    assert not (tmp_path / "r.json").exists()
    proc = run_cli("calibrate", str(measured), "--model", "llama3-8b", "--device", DEVICE, "--devices", "16",
                   "--seq-length", str(SEQ), "-o", str(tmp_path / "r.json"))
    assert proc.returncode == 2
    assert f"The 'devices' parameter of {measured}, line 2 must equal the run's dp*tp*pp*cp (8). Got 16 instead." \
        in proc.stderr


def test_read_measured_round_trip_feeds_the_same_fit(dense, tmp_path):
    model, rows = dense
    runs = read_measured(write_csv(tmp_path / "runs.csv", rows), seq_length=SEQ)
    assert [r.spec for r in runs] == [r.spec for r in rows]
    assert [dict(r.parts) for r in runs] == [dict(r.parts) for r in rows]
    assert fit_ratios(runs, model, DEVICE).ratios.values == fit_ratios(rows, model, DEVICE).ratios.values


def test_calibrate_warns_when_left_out_runs_get_worse(dense, tmp_path, capsys):
    """Measured columns that split each step at random: one scale factor predicts a left-out run better
    than ratios fitted per part; the file is still written (it is what was asked), with a warning."""
    import dataclasses
    import random

    from ndcost.cli.main import main

    _, rows = dense
    rng = random.Random(5)
    noisy = []
    for row in rows:
        total = sum(row.parts.values())
        weights = {k: (rng.uniform(0.2, 3.0) if v > 0 else 0.0) for k, v in row.parts.items()}
        scale = sum(weights.values())
        noisy.append(dataclasses.replace(row, parts={k: total * weights[k] / scale for k in row.parts}))
    measured = write_csv(tmp_path / "noisy.csv", noisy)
    out = tmp_path / "ratios.json"
    assert main(["calibrate", str(measured), "--model", "llama3-8b", "--device", DEVICE, "--devices", "8",
                 "--seq-length", str(SEQ), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert out.exists()
    assert "WARNING: the fitted ratios predict left-out runs worse" in captured.out
    assert "warning:" in captured.err and str(out) in captured.err
    assert main(["calibrate", str(measured), "--model", "llama3-8b", "--device", DEVICE, "--devices", "8",
                 "--seq-length", str(SEQ), "-o", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["worse_after"] is True
