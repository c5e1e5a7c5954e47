"""Ratios: ND's ratios file (docs/ND_MODEL.md §2.11; seed estimate.py _part_ratio, _parsed_ratios)."""
from __future__ import annotations

import copy
import json
import os
import pickle
import re
import warnings

import pytest

from ndcost.spec import ratios as ratios_module
from ndcost.errors import SpecError
from ndcost.spec.ratios import PART_NAMES, PART_RATIO_KEYS, RATIO_KEYS, Ratios, _reset_missing_warnings

FULL = {"COMPUTE": 2.0, "DP_COMM": 3.0, "DP_REDUCE": 5.0, "MP_COMM": 7.0, "EP_COMM": 11.0,
        "CP_COMM": 13.0, "PP_COMM": 17.0, "BUBBLE": 19.0}
FITTED_ON = {"csv": "runs.csv", "strategies": [{"dp": 8, "tp": 2}, {"dp": 4, "tp": 4}]}


@pytest.fixture(autouse=True)
def fresh_warning_registry():
    _reset_missing_warnings()
    yield
    _reset_missing_warnings()


def message(parameter, owner, rule, value):
    return "^" + re.escape(f"The {parameter!r} parameter of {owner} must {rule}. Got {value!r} instead.") + "$"


def write(path, doc):
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def recorded(call):
    """Run *call*; return its result and the RuntimeWarning texts it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_names_and_part_mapping():
    assert RATIO_KEYS == ("COMPUTE", "DP_COMM", "DP_REDUCE", "MP_COMM", "EP_COMM", "CP_COMM", "PP_COMM", "BUBBLE")
    assert PART_NAMES == ("fw_compute", "bw_compute", "recompute", "dp_comm", "dp_reduce", "tp_comm", "ep_comm",
                          "cp_comm", "pp_comm", "bubble")
    assert [PART_RATIO_KEYS[p] for p in PART_NAMES] == ["COMPUTE", "COMPUTE", "COMPUTE", "DP_COMM", "DP_REDUCE",
                                                        "MP_COMM", "EP_COMM", "CP_COMM", "PP_COMM", "BUBBLE"]


def test_stated_ratios_and_vector():
    r = Ratios(FULL)
    (vector, caught) = recorded(r.vector)
    assert vector == (2.0, 2.0, 2.0, 3.0, 5.0, 7.0, 11.0, 13.0, 17.0, 19.0)
    assert caught == []
    assert r.ratio("bubble") == 19.0
    assert r.part_ratio("tp_comm") == 7.0
    assert r.vector() is vector  # computed once


def test_fallback_chains():
    r = Ratios({"COMPUTE": 2.0, "DP_COMM": 3.0, "PP_COMM": 17.0})
    (values, caught) = recorded(lambda: [r.ratio(k) for k in ("DP_REDUCE", "BUBBLE", "MP_COMM", "EP_COMM", "CP_COMM")])
    assert values == [3.0, 17.0, 2.0, 2.0, 2.0]
    assert caught == [
        "the ratios file states no DP_REDUCE ratio: that part takes DP_COMM's",
        "the ratios file states no BUBBLE ratio: that part takes PP_COMM's",
        "the ratios file states no MP_COMM ratio: that part takes COMPUTE's",
        "the ratios file states no EP_COMM ratio: that part takes COMPUTE's",
        "the ratios file states no CP_COMM ratio: that part takes COMPUTE's",
    ]


def test_fallback_through_a_missing_link_reaches_compute():
    r = Ratios({"COMPUTE": 2.0})
    (vector, caught) = recorded(r.vector)
    assert vector == (2.0,) * 10
    assert sorted(caught) == sorted([
        "the ratios file states no DP_COMM ratio: that part takes COMPUTE's",
        "the ratios file states no DP_REDUCE ratio: that part takes DP_COMM's",
        "the ratios file states no MP_COMM ratio: that part takes COMPUTE's",
        "the ratios file states no EP_COMM ratio: that part takes COMPUTE's",
        "the ratios file states no CP_COMM ratio: that part takes COMPUTE's",
        "the ratios file states no PP_COMM ratio: that part takes COMPUTE's",
        "the ratios file states no BUBBLE ratio: that part takes PP_COMM's",
    ])


def test_each_missing_key_warned_once_per_process():
    first = Ratios({"COMPUTE": 2.0, "DP_COMM": 3.0})
    second = Ratios({"COMPUTE": 4.0})
    (_, caught) = recorded(lambda: [first.ratio("DP_REDUCE") for _ in range(3)])
    assert caught == ["the ratios file states no DP_REDUCE ratio: that part takes DP_COMM's"]
    (value, caught) = recorded(lambda: second.ratio("DP_REDUCE"))
    assert value == 4.0
    assert caught == ["the ratios file states no DP_COMM ratio: that part takes COMPUTE's"]
    _reset_missing_warnings()
    (_, caught) = recorded(lambda: first.ratio("DP_REDUCE"))
    assert len(caught) == 1


def test_warning_names_the_file(tmp_path):
    path = write(tmp_path / "r.json", {"COMPUTE": 1.0})
    r = Ratios.load(path)
    with pytest.warns(RuntimeWarning, match=re.escape(f"the ratios file {path.resolve()} states no MP_COMM ratio: "
                                                      "that part takes COMPUTE's")):
        r.part_ratio("tp_comm")


def test_apply_scales_parts_and_keeps_zeros():
    r = Ratios(FULL)
    parts = {"fw_compute": 1.0, "bw_compute": 2.0, "tp_comm": 0.0, "bubble": 0.5}
    assert r.apply(parts) == {"fw_compute": 2.0, "bw_compute": 4.0, "tp_comm": 0.0, "bubble": 9.5}
    assert parts == {"fw_compute": 1.0, "bw_compute": 2.0, "tp_comm": 0.0, "bubble": 0.5}


def test_metadata_keys_and_fitted_on():
    doc = {**FULL, "_fitted_on": copy.deepcopy(FITTED_ON), "_comment": "by hand"}
    before = copy.deepcopy(doc)
    r = Ratios(doc)
    assert doc == before
    assert dict(r.values) == FULL
    assert r.fitted_on["csv"] == "runs.csv"
    assert r.fitted_on["strategies"][1]["tp"] == 4
    doc["_fitted_on"]["csv"] = "changed.csv"
    doc["COMPUTE"] = 99.0
    assert r.fitted_on["csv"] == "runs.csv" and r.ratio("COMPUTE") == 2.0
    with pytest.raises(TypeError):
        r.values["COMPUTE"] = 1.0
    with pytest.raises(TypeError):
        r.fitted_on["csv"] = "x"


def test_load_caches_by_path_mtime_and_size(tmp_path):
    path = write(tmp_path / "ratios.json", FULL)
    first = Ratios.load(path)
    assert Ratios.load(str(path)) is first
    assert Ratios.load(tmp_path / "." / "ratios.json") is first  # resolved path keys the cache
    assert first.source == str(path.resolve())
    # Same size, new content, new mtime: parsed again.
    write(path, {**FULL, "COMPUTE": 3.0})
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    second = Ratios.load(path)
    assert second is not first
    assert second.ratio("COMPUTE") == 3.0
    assert Ratios.load(path) is second


def test_load_reparses_when_only_the_size_changes(tmp_path):
    path = write(tmp_path / "ratios.json", FULL)
    first = Ratios.load(path)
    stat = os.stat(path)
    write(path, {**FULL, "COMPUTE": 2.125})
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime, different size
    assert Ratios.load(path).ratio("COMPUTE") == 2.125 and Ratios.load(path) is not first


def test_save_load_round_trip(tmp_path):
    r = Ratios({"COMPUTE": 2.0, "BUBBLE": 0.25, "MP_COMM": 1e-9}, fitted_on=FITTED_ON)
    path = tmp_path / "out.json"
    r.save(path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert list(doc) == ["COMPUTE", "MP_COMM", "BUBBLE", "_fitted_on"]
    assert doc["_fitted_on"] == FITTED_ON
    back = Ratios.load(path)
    assert dict(back.values) == dict(r.values)
    assert back.fitted_on == r.fitted_on
    assert back.source == str(path.resolve())
    assert sorted(os.listdir(tmp_path)) == ["out.json"]  # no temporary left behind
    plain = Ratios({"COMPUTE": 1.0})
    plain.save(path)
    assert json.loads(path.read_text(encoding="utf-8")) == {"COMPUTE": 1.0}


def test_coerce(tmp_path):
    path = write(tmp_path / "r.json", FULL)
    r = Ratios(FULL)
    assert Ratios.coerce(None) is None
    assert Ratios.coerce(r) is r
    assert Ratios.coerce(path) is Ratios.load(path)
    assert Ratios.coerce(str(path)) is Ratios.load(path)
    assert dict(Ratios.coerce({"COMPUTE": 1}).values) == {"COMPUTE": 1.0}
    with pytest.raises(SpecError, match=message(
            "ratios", "Ratios.coerce",
            "be a Ratios, a path to a ratios JSON file, a mapping of ratio keys to numbers, or None", 3)):
        Ratios.coerce(3)


def test_pickle_copy_and_equality():
    r = Ratios(FULL, fitted_on=FITTED_ON, source="x.json")
    assert pickle.loads(pickle.dumps(r)) == r
    assert copy.deepcopy(r) == r
    assert hash(copy.deepcopy(r)) == hash(r)


COMPUTE_RULE = "be stated: it turns ND's units into milliseconds, and every missing ratio falls back on it"


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"DP_COMM": 1.0}, message("COMPUTE", "Ratios", COMPUTE_RULE, None)),
        ({}, message("COMPUTE", "Ratios", COMPUTE_RULE, None)),
        ({"COMPUTE": 1.0, "TP_COMM": 2.0},
         message("TP_COMM", "Ratios", "be a ratio key (COMPUTE, DP_COMM, DP_REDUCE, MP_COMM, EP_COMM, CP_COMM, "
                 "PP_COMM, BUBBLE) or metadata starting with '_'", 2.0)),
        ({"compute": 1.0},
         message("compute", "Ratios", "be a ratio key (COMPUTE, DP_COMM, DP_REDUCE, MP_COMM, EP_COMM, CP_COMM, "
                 "PP_COMM, BUBBLE) or metadata starting with '_'", 1.0)),
        ({"COMPUTE": 0}, message("COMPUTE", "Ratios", "be a finite number > 0", 0)),
        ({"COMPUTE": 1.0, "MP_COMM": -0.5}, message("MP_COMM", "Ratios", "be a finite number > 0", -0.5)),
        ({"COMPUTE": True}, message("COMPUTE", "Ratios", "be a finite number > 0", True)),
        ({"COMPUTE": "1.0"}, message("COMPUTE", "Ratios", "be a finite number > 0", "1.0")),
        ({"COMPUTE": None}, message("COMPUTE", "Ratios", "be a finite number > 0", None)),
        ({"COMPUTE": float("inf")}, message("COMPUTE", "Ratios", "be a finite number > 0", float("inf"))),
        ({"COMPUTE": 10**400}, message("COMPUTE", "Ratios", "be a finite number > 0", 10**400)),
        ({"COMPUTE": 1.0, "_fitted_on": [1]},
         message("_fitted_on", "Ratios", "be a JSON object (ND writes {csv, strategies})", [1])),
    ],
)
def test_refusals(doc, expected):
    with pytest.raises(SpecError, match=expected):
        Ratios(doc)


def test_file_refusals_name_the_path(tmp_path):
    no_compute = write(tmp_path / "no_compute.json", {"DP_COMM": 1.0, "_fitted_on": FITTED_ON})
    owner = str(no_compute.resolve())
    with pytest.raises(SpecError, match=message("COMPUTE", owner, COMPUTE_RULE, None)):
        Ratios.load(no_compute)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    owner = str(bad.resolve())
    with pytest.raises(SpecError, match=message(
            "path", owner, "be valid JSON (a ratios file)",
            "line 1, column 2: Expecting property name enclosed in double quotes")):
        Ratios.load(bad)
    listed = write(tmp_path / "list.json", [1, 2])
    owner = str(listed.resolve())
    with pytest.raises(SpecError, match=message("path", owner, "hold a JSON object of ratio keys to numbers", "list")):
        Ratios.load(listed)
    missing = tmp_path / "missing.json"
    owner = str(missing.resolve())
    with pytest.raises(SpecError, match=message(
            "path", owner, "name a readable ratios file (No such file or directory)", str(missing))):
        Ratios.load(missing)


def test_a_refused_file_is_not_cached(tmp_path):
    path = write(tmp_path / "r.json", {"DP_COMM": 1.0})
    with pytest.raises(SpecError):
        Ratios.load(path)
    write(path, {"COMPUTE": 1.0, "DP_COMM": 1.0})
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert Ratios.load(path).ratio("COMPUTE") == 1.0


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda r: r.ratio("TOTAL"),
         message("key", "Ratios.ratio", "be one of COMPUTE, DP_COMM, DP_REDUCE, MP_COMM, EP_COMM, CP_COMM, PP_COMM, "
                 "BUBBLE", "TOTAL")),
        (lambda r: r.part_ratio("MP_COMM"),
         message("part_name", "Ratios.part_ratio", "be one of fw_compute, bw_compute, recompute, dp_comm, dp_reduce, "
                 "tp_comm, ep_comm, cp_comm, pp_comm, bubble", "MP_COMM")),
    ],
)
def test_lookup_refusals(call, expected):
    with pytest.raises(SpecError, match=expected):
        call(Ratios(FULL))


def test_module_registry_is_process_wide():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Ratios({"COMPUTE": 1.0}).ratio("EP_COMM")
    assert "EP_COMM" in ratios_module._MISSING_WARNED
