"""Every enumeration and constant the two backends share has one source (issue 26).

The codes are ``ndcost.kernels.codes`` (the choice vocabularies read from ``ndcost.spec``), the constants
``ndcost.kernels.constants`` (each value in its oracle module); ``cysrc/ndcost/kernels/codes.pxi`` is generated
from them. These tests change nothing: they read each value through the compiled module and through the oracle.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ndcost.cli.args import add_strategy_arguments
from ndcost.kernels import codes, columns, seconds_comm, seconds_layer
from ndcost.kernels.constants import CONSTANTS, kernel_codes
from ndcost.spec import mamba
from ndcost.spec.exec_spec_rules import PP_SCHEDULES
from ndcost.tables.formulas_ops import CHOICES
from source_tools import tool

ROOT = Path(__file__).resolve().parents[1]
CODES_PXI = "cysrc/ndcost/kernels/codes.pxi"


def test_generated_codes_pxi_is_current():
    module = tool("gen_columns", CODES_PXI)
    assert (ROOT / CODES_PXI).read_text() == module.render_codes(), "run: python tools/gen_columns.py"


@pytest.mark.cython
def test_both_backends_read_the_same_codes_and_constants(ckernels, pykernels):
    compiled, oracle = ckernels.kernel_codes(), pykernels.kernel_codes()
    assert compiled == oracle
    assert {name: type(value) for name, value in compiled.items()} == {name: type(v) for name, v in oracle.items()}


def test_every_c_name_is_one_value():
    """No two enumerations or constants write the same C name (a clash would not compile, or would shadow)."""
    names = [codes.c_name(prefix, name, upper) for prefix, names, upper in codes.ENUMS for name in names]
    names += list(CONSTANTS)
    assert len(names) == len(set(names)) == len(kernel_codes())


def test_the_schedules_are_one_list(kernels):
    """The CLI's choices, ExecSpec's rule, the candidate columns and both kernels read ExecSpec's tuple."""
    import argparse

    parser = argparse.ArgumentParser()
    add_strategy_arguments(parser)
    assert tuple(parser._option_string_actions["--pp-schedule"].choices) == PP_SCHEDULES
    assert columns.SCHEDULES is codes.SCHEDULES is PP_SCHEDULES
    assert CHOICES["pp_schedule"] is PP_SCHEDULES
    values = kernels.kernel_codes()
    assert [values[f"SEC_{name.upper()}"] for name in PP_SCHEDULES] == list(range(len(PP_SCHEDULES)))


def test_the_selective_scan_flops_are_one_number(kernels):
    assert kernels.kernel_codes()["SEC_SELECTIVE_SCAN_FLOPS"] == mamba.SELECTIVE_SCAN_FLOPS == 9.0
    assert seconds_layer.SELECTIVE_SCAN_FLOPS is mamba.SELECTIVE_SCAN_FLOPS


def test_the_collective_codes_are_one_list(kernels):
    values = kernels.kernel_codes()
    for name, code in (("all_reduce", seconds_comm.ALL_REDUCE), ("gather_or_scatter", seconds_comm.GATHER_OR_SCATTER),
                       ("all_to_all", seconds_comm.ALL_TO_ALL), ("send_recv", seconds_comm.SEND_RECV)):
        assert values[f"SEC_{name.upper()}"] == code == codes.COLLECTIVES.index(name)
    for name, code in (("alltoall", seconds_comm.NCCL_ALL_TO_ALL), ("deepep", seconds_comm.DEEPEP)):
        assert values[f"SEC_DISPATCH_{name.upper()}"] == code


# ------------------------------------------------------------------ the add-a-schedule recipe, in a copy

_PROBE = textwrap.dedent("""
    import argparse, importlib.util, sys
    sys.path.insert(0, sys.argv[1] + "/src")
    import ndcost
    from ndcost.cli.args import add_strategy_arguments
    from ndcost.kernels import columns
    from ndcost.kernels.constants import kernel_codes
    parser = argparse.ArgumentParser()
    add_strategy_arguments(parser)
    print("cli", "myschedule" in parser._option_string_actions["--pp-schedule"].choices)
    print("spec", ndcost.ExecSpec(pp_schedule="myschedule", micro_batch_num=4).pp_schedule)
    print("columns", columns.SCHEDULES.index("myschedule"))
    print("codes", kernel_codes()["SEC_MYSCHEDULE"], kernel_codes()["_MEM_SCHED_MYSCHEDULE"])
    spec = importlib.util.spec_from_file_location("gen_columns", sys.argv[1] + "/tools/gen_columns.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = gen.render_codes()
    print("pxi", "SEC_MYSCHEDULE = 7" in text, "_MEM_SCHED_MYSCHEDULE = 6" in text)
""")


def _copy_with(tmp_path: Path, edits: dict[str, tuple[str, str]]) -> Path:
    """The package's sources and tools/gen_columns.py in *tmp_path*, with each file's (old, new) edit made."""
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    (tmp_path / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "gen_columns.py", tmp_path / "tools")
    for path, (old, new) in edits.items():
        target = tmp_path / path
        text = target.read_text()
        assert text.count(old) == 1, path
        target.write_text(text.replace(old, new))
    return tmp_path


def _probe(root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NDCOST_PURE_PYTHON="1", PYTHONPATH=str(root / "src"))
    return subprocess.run([sys.executable, "-c", _PROBE, str(root)], capture_output=True, text=True, env=env,
                          cwd=root, timeout=120)


_SCHEDULE_LIST = '"seq1f1b", "dualpipe", "dualpipev")'


@pytest.mark.skipif(not (ROOT / "tools" / "gen_columns.py").exists(), reason="source tree not available")
def test_a_new_schedule_name_reaches_the_cli_the_spec_and_both_kernels(tmp_path):
    root = _copy_with(tmp_path, {
        "src/ndcost/spec/exec_spec_rules.py": (_SCHEDULE_LIST, '"seq1f1b", "dualpipe", "dualpipev", "myschedule")'),
        "src/ndcost/kernels/codes.py": ('"dualpipev", "dualpipe")', '"dualpipev", "dualpipe", "myschedule")'),
    })
    done = _probe(root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == ["cli True", "spec myschedule", "columns 7", "codes 7 6", "pxi True True"]


@pytest.mark.skipif(not (ROOT / "tools" / "gen_columns.py").exists(), reason="source tree not available")
def test_a_new_schedule_without_its_memory_rule_is_refused_at_import(tmp_path):
    root = _copy_with(tmp_path, {
        "src/ndcost/spec/exec_spec_rules.py": (_SCHEDULE_LIST, '"seq1f1b", "dualpipe", "dualpipev", "myschedule")'),
    })
    done = _probe(root)
    assert done.returncode != 0
    assert "pipeline schedules without a memory rule" in done.stderr and "'myschedule'" in done.stderr
