"""Measured runs: ND's classified CSV read into MeasuredRow (docs/ND_MODEL.md §2.10, §4.7)."""
from __future__ import annotations

import copy
import pickle
import re

import pytest

from ndcost import ExecSpec
from ndcost.errors import SpecError
from ndcost.io.measured import MEASURED_COLUMNS, MeasuredRow, MeasuredRuns, read_measured

WAITS = "comp,dp_wait,op_wait,mp_wait,sp_wait,ep_wait,cp_wait,pp_wait"
GOOD = (
    f"time,DP,MP,PP,VPP,CP,EP,MB,MBS,OP,{WAITS},step_trainer,recompute,unclassified\n"
    "1200.5,8,1,1,1,1,1,4,1,8,900,10,50,0,0,0,0,0,1100,none,3\n"
    "1500,4,2,1,1,1,1,8,1,1,950,20,0,120,30,0,0,0,,selective,4\n"
    "2100,2,2,2,2,1,1,16,1,2,980,5,40,110,20,0,0,300,2000,full,7\n"
)


def write(tmp_path, text, name="runs.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def message(parameter, owner, rule, value):
    return "^" + re.escape(f"The {parameter!r} parameter of {owner} must {rule}. Got {value!r} instead.") + "$"


def replace_cell(text, line, column, value):
    """*text* with the cell of *column* (a header name) on 1-based *line* set to *value*."""
    lines = text.splitlines()
    header = lines[0].split(",")
    cells = lines[line - 1].split(",")
    cells[header.index(column)] = value
    lines[line - 1] = ",".join(cells)
    return "\n".join(lines) + "\n"


def drop_column(text, column):
    lines = [line.split(",") for line in text.splitlines()]
    index = lines[0].index(column)
    return "\n".join(",".join(cells[:index] + cells[index + 1:]) for cells in lines) + "\n"


def test_reads_rows_specs_and_parts(tmp_path):
    path = write(tmp_path, GOOD)
    runs = read_measured(path, seq_length=4096)
    assert isinstance(runs, MeasuredRuns) and len(runs) == 3
    assert runs.path == str(path)
    assert runs.ignored == ("unclassified",)
    first, second, third = runs
    assert first.spec == ExecSpec.from_strategy(dp=8, mp=1, pp=1, mb=4, mbs=1, op=8, seq_length=4096, recompute="none")
    assert first.spec.optimizer_shard == 8 and first.spec.zero_stage == 1
    assert second.spec.tp == 2 and second.spec.zero_stage == 0  # op 1: no optimizer sharding (ND's op > 1)
    assert second.spec.recompute == "selective"
    assert third.spec.vpp == 2 and third.spec.pp == 2 and third.spec.resolved_micro_batch_num == 16
    assert third.spec.recompute == "full" and third.recompute == "full"
    assert first.time == 1200.5 and first.step_trainer == 1100.0 and second.step_trainer is None
    assert dict(first.parts) == {"comp": 900.0, "dp_wait": 10.0, "op_wait": 50.0, "mp_wait": 0.0, "sp_wait": 0.0,
                                 "ep_wait": 0.0, "cp_wait": 0.0, "pp_wait": 0.0}
    assert third.busy == 980 + 5 + 40 + 110 + 20 + 300
    assert first.source == f"{path}, line 2" and third.source == f"{path}, line 4"
    assert first.degrees["op"] == 8 and first.degrees["mp"] == 1
    assert third.label == "DP 2 MP 2 PP 2 VPP 2 MB 16 OP 2 rec full"
    assert second.strategy()["op"] == 1 and first.strategy()["op"] == 8
    assert len({first, second, third, copy.deepcopy(first)}) == 3
    assert third.strategy() == {"dp": 2, "mp": 2, "pp": 2, "vpp": 2, "cp": 1, "ep": 1, "mb": 16, "mbs": 1, "op": 2,
                                "sp": True, "zero_stage": 1, "recompute": "full"}


def test_header_names_in_any_case_and_long_names(tmp_path):
    text = f"Time,dp,TP,micro_batch_num,micro_batch_size,{WAITS.upper()}\n100,4,2,2,2,50,1,2,3,4,5,6,7\n"
    (row,) = read_measured(write(tmp_path, text), seq_length=2048)
    assert (row.spec.dp, row.spec.tp, row.spec.micro_batch_size, row.spec.resolved_micro_batch_num) == (4, 2, 2, 2)
    assert row.spec.seq_length == 2048 and row.parts["pp_wait"] == 7.0


def test_times_in_seconds_become_milliseconds(tmp_path):
    text = f"time,dp,mb,{WAITS},step_trainer\n1.5,8,1,1,0.25,0,0,0,0,0,0,1.25\n"
    (row,) = read_measured(write(tmp_path, text), seq_length=4096, time_unit="s")
    assert row.time == 1500.0 and row.parts["comp"] == 1000.0 and row.parts["dp_wait"] == 250.0
    assert row.step_trainer == 1250.0


def test_mb_from_the_global_batch_and_checked_against_it(tmp_path):
    text = f"time,dp,tp,mbs,{WAITS}\n100,4,2,2,1,0,0,0,0,0,0,0\n"
    (row,) = read_measured(write(tmp_path, text), seq_length=4096, global_batch_size=64)
    assert row.spec.resolved_micro_batch_num == 8 and row.spec.global_batch_size == 64
    path = write(tmp_path, GOOD, "good.csv")
    with pytest.raises(SpecError) as info:
        read_measured(path, seq_length=4096, global_batch_size=64)
    assert info.value.parameter == "MB" and info.value.owner.startswith(f"{path}, line 2")
    assert "equal micro_batch_size*dp*micro_batch_num (= 32)" in str(info.value)
    with pytest.raises(SpecError, match=message("dp", f"{tmp_path / 'odd.csv'}, line 2",
                                                "divide the global batch size (63), as mbs*dp", 8)):
        read_measured(write(tmp_path, text, "odd.csv"), seq_length=4096, global_batch_size=63)


def test_missing_degrees_default_to_one_and_sp_is_read(tmp_path):
    text = f"time,dp,mb,sp,{WAITS}\n100,8,1,false,1,0,0,0,0,0,0,0\n100,8,1,TRUE,1,0,0,0,0,0,0,0\n"
    first, second = read_measured(write(tmp_path, text), seq_length=4096)
    assert (first.spec.tp, first.spec.pp, first.spec.cp, first.spec.ep, first.spec.vpp) == (1, 1, 1, 1, 1)
    assert first.spec.sequence_parallel is False and second.spec.sequence_parallel is True


def test_shared_fields_pass_through_and_a_recompute_column_overrides(tmp_path):
    runs = read_measured(write(tmp_path, GOOD), seq_length=4096, recompute="full", zero_stage=2)
    assert [row.spec.recompute for row in runs] == ["none", "selective", "full"]
    assert {row.spec.zero_stage for row in runs} == {2}
    with pytest.raises(SpecError, match=message("tp", "read_measured", "be stated by the CSV's columns or "
                                                "read_measured's own arguments, not as a shared field", 2)):
        read_measured(write(tmp_path, GOOD), seq_length=4096, tp=2)


@pytest.mark.parametrize("column", ["time", "DP", *MEASURED_COLUMNS])
def test_a_missing_column_is_named(tmp_path, column):
    text = drop_column(GOOD, column)
    path = write(tmp_path, text)
    name = column.lower()
    rule = "be a column of the CSV (ND's measured format: time, the degrees, comp, *_wait)"
    with pytest.raises(SpecError, match=message(name, f"{path}, line 1", rule, None)):
        read_measured(path, seq_length=4096)


def test_mb_column_needed_without_a_global_batch(tmp_path):
    path = write(tmp_path, drop_column(GOOD, "MB"))
    with pytest.raises(SpecError, match=message("mb", f"{path}, line 1",
                                                "be a column of the CSV, or the runs' global batch size be given",
                                                None)):
        read_measured(path, seq_length=4096)


def test_only_time_and_degrees_without_require_parts(tmp_path):
    text = "time,dp,tp,mb\n100,4,2,2\n"
    (row,) = read_measured(write(tmp_path, text), seq_length=4096, require_parts=False)
    assert row.busy == 0.0 and row.time == 100.0


@pytest.mark.parametrize(("line", "column", "value", "rule"), [
    (3, "comp", "abc", "be a finite number >= 0"),
    (2, "pp_wait", "-1", "be a finite number >= 0"),
    (4, "mp_wait", "nan", "be a finite number >= 0"),
    (2, "time", "0", "be a finite number > 0"),
    (3, "time", "inf", "be a finite number > 0"),
    (4, "step_trainer", "-5", "be a finite number > 0"),
    (2, "PP", "2.5", "be an integer >= 1"),
    (3, "DP", "0", "be an integer >= 1"),
    (4, "EP", "two", "be an integer >= 1"),
    (2, "comp", "", "be filled in"),
    (3, "DP", "", "be filled in"),
    (2, "recompute", "auto", "be none (or off), full or selective"),
])
def test_a_malformed_cell_names_its_column_and_line(tmp_path, line, column, value, rule):
    path = write(tmp_path, replace_cell(GOOD, line, column, value))
    with pytest.raises(SpecError, match=message(column, f"{path}, line {line}", rule, value)):
        read_measured(path, seq_length=4096)


def test_a_strategy_the_spec_refuses_names_the_column(tmp_path):
    path = write(tmp_path, replace_cell(GOOD, 3, "OP", "3"))
    with pytest.raises(SpecError) as info:
        read_measured(path, seq_length=4096)
    assert info.value.parameter == "OP"
    assert info.value.owner == f"{path}, line 3 (ExecSpec)"
    assert info.value.rule == "divide dp (4)"
    path = write(tmp_path, replace_cell(GOOD, 2, "VPP", "2"), "vpp.csv")
    with pytest.raises(SpecError) as info:
        read_measured(path, seq_length=4096)
    assert info.value.parameter == "VPP" and "line 2" in info.value.owner


def test_sp_cell_must_be_a_boolean(tmp_path):
    text = f"time,dp,mb,sp,{WAITS}\n100,8,1,maybe,1,0,0,0,0,0,0,0\n"
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        read_measured(path, seq_length=4096)
    assert info.value.parameter == "sp" and info.value.owner == f"{path}, line 2" and info.value.value == "maybe"


def test_header_problems(tmp_path):
    path = write(tmp_path, f"time,dp,tp,mp,mb,{WAITS}\n")
    with pytest.raises(SpecError, match=message("mp", f"{path}, line 1",
                                                "be left out: column 'tp' states the same degree", "mp")):
        read_measured(path, seq_length=4096)
    path = write(tmp_path, f"time,dp,mb,comp,comp,{WAITS[5:]}\n", "dup.csv")
    with pytest.raises(SpecError, match="be stated once"):
        read_measured(path, seq_length=4096)
    empty = write(tmp_path, "", "empty.csv")
    with pytest.raises(SpecError, match=re.escape(f"The 'path' parameter of {empty} must hold a header line")):
        read_measured(empty, seq_length=4096)
    header_only = write(tmp_path, GOOD.splitlines()[0] + "\n", "header.csv")
    with pytest.raises(SpecError, match="must hold at least one measured run below its header"):
        read_measured(header_only, seq_length=4096)


def test_too_many_cells_and_blank_lines(tmp_path):
    path = write(tmp_path, GOOD + "\n" + GOOD.splitlines()[1] + ",9\n")
    with pytest.raises(SpecError) as info:
        read_measured(path, seq_length=4096)
    assert info.value.parameter == "row" and info.value.owner == f"{path}, line 6"
    blank = write(tmp_path, GOOD + "\n\n", "blank.csv")
    assert len(read_measured(blank, seq_length=4096)) == 3


def test_unreadable_file_and_bad_time_unit(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(SpecError, match=re.escape(f"The 'path' parameter of {missing} must name a readable CSV")):
        read_measured(missing, seq_length=4096)
    with pytest.raises(SpecError, match=message("time_unit", "read_measured", "be one of 'ms', 's'", "min")):
        read_measured(write(tmp_path, GOOD), seq_length=4096, time_unit="min")


def test_measured_row_by_hand():
    spec = ExecSpec(dp=8, micro_batch_num=1)
    row = MeasuredRow(spec, 100, {"comp": 80, "op_wait": 5})
    assert row.parts["pp_wait"] == 0.0 and row.busy == 85.0 and row.time == 100.0
    assert row.label == "DP 8" and row.source is None
    with pytest.raises(TypeError):
        row.parts["comp"] = 1.0
    assert pickle.loads(pickle.dumps(row)) == row
    assert copy.deepcopy(row) == row
    with pytest.raises(SpecError, match=message("parts", "MeasuredRow", "have only the keys " +
                                                ", ".join(MEASURED_COLUMNS), "idle")):
        MeasuredRow(spec, 100, {"idle": 1.0})
    with pytest.raises(SpecError, match=message("comp", "MeasuredRow", "be a finite number >= 0", -1)):
        MeasuredRow(spec, 100, {"comp": -1})
    with pytest.raises(SpecError, match=message("time", "here", "be a finite number > 0", 0)):
        MeasuredRow(spec, 0, {}, source="here")
    with pytest.raises(SpecError, match=message("spec", "MeasuredRow", "be an ExecSpec", "dp=8")):
        MeasuredRow("dp=8", 1.0)
