"""The formulas' two paths: the scalar twins (checked-in generated code, no source rewriting
at import) agree with the column formulas row by row, joint reasons included."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from batch_cases import columns_of, random_rows
from source_tools import tool
from ndcost import Cluster, ExecSpec, Model, SpecError
from ndcost.tables import formulas as f
from ndcost.tables import formulas_fused as _formulas_fused, formulas_ops as _formulas_ops
from ndcost.tables import formulas_scalar as _formulas_scalar
from ndcost.price.candidates import FIELDS, Candidates
from ndcost.tables.derive import model_constants
from ndcost.tables.nd_tables import MOE_DISPATCH
from ndcost.tables.reasons import REASON_CODES

ROOT = Path(__file__).resolve().parents[1]
TWINS = ("derived_columns", "derived_extra_columns", "nd_candidate_columns", "memory_candidate_columns",
         "seconds_candidate_columns", "fixed_bytes_columns", "joint_reason")
#: One model per branch of the joint rules: dense GQA, MoE, MLA, linear attention, Mamba, a vision tower.
MODELS = ("llama3-70b", "mixtral-8x7b", "deepseek-v3", "qwen3-next-80b-a3b", "nemotron-h-56b", "qwen2.5-vl-7b")


def _generator():
    return tool("gen_formulas", "src/ndcost/tables/formulas.py")


def test_generated_scalar_twins_are_in_sync():
    module = _generator()
    assert (ROOT / "src/ndcost/tables/formulas_scalar.py").read_text() == module.render(), "run: python tools/gen_formulas.py"
    assert (ROOT / "src/ndcost/tables/formulas_fused.py").read_text() == module.render_fused(), \
        "run: python tools/gen_formulas.py"


def _twin_source(gen, source: str) -> str:
    aliases, inline = gen._scalar_rules(ast.parse((ROOT / "src/ndcost/tables/formulas_ops.py").read_text()))
    twin = gen._Scalarise(aliases, inline).visit(ast.parse(source).body[0])
    return ast.unparse(gen._ShortCircuit(gen._bool_names(twin)).visit(twin))


def test_the_generator_rewrites_only_what_it_can_prove():
    gen = _generator()
    text = _twin_source(gen, "def f(ops, c):\n    where = ops.where\n    x = (c['a'] > 1) & (c['b'] < 2)\n"
                             "    return where(x | c['flag'], ops.maximum(1, c['n']), ops.int_(x))")
    body = text.split("\n", 1)[1]
    assert "ops" not in body and "where" not in body
    assert "x = c['a'] > 1 and c['b'] < 2" in text             # bool & bool: short-circuited
    assert "x | c['flag']" in text                               # c['flag'] is not provably bool: kept
    assert "c['n'] if c['n'] > 1 else 1" in text                 # max(1, n) exactly
    for source, message in (("def f(ops, c):\n    return ops.unknown(c)", "no scalar rule"),
                            ("def f(ops, c):\n    return ops.maximum(1, c['a'] + 1)", "first"),
                            ("def f(ops, c):\n    return ops", "used other than"),
                            ("def f(ops, c):\n    return ops.where(c, 1)", "arguments")):
        with pytest.raises(ValueError, match=message):
            _twin_source(gen, source)


def test_no_source_is_rewritten_at_import():
    """The twins are plain functions of the checked-in module; the formula modules import no
    code-generation machinery and call no compile/exec; a twin never calls ``ops``."""
    for name in TWINS:
        twin = getattr(f, name + "_scalar")
        assert twin is getattr(_formulas_scalar, name + "_scalar")
        assert twin.__module__ == "ndcost.tables.formulas_scalar"
        assert Path(twin.__code__.co_filename).name == "formulas_scalar.py"
    for module in (f, _formulas_ops, _formulas_scalar, _formulas_fused):
        tree = ast.parse(Path(module.__file__).read_text())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module}
        assert not imported & {"ast", "inspect", "textwrap", "types.CodeType"}, module.__name__
        called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
        assert not called & {"compile", "exec", "eval"}, module.__name__
    for module in (_formulas_scalar, _formulas_fused):
        tree = ast.parse(Path(module.__file__).read_text())
        assert not [node for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == "ops"]


def _joint_rows(model: Model, n: int, seed: int) -> list[dict]:
    """Valid rows of batch_cases, degrees and choices shaken so every joint rule breaks somewhere
    (rows ExecSpec itself refuses are dropped: the joint rules assume ExecSpec's passed)."""
    rng = np.random.default_rng(seed)
    rows = []
    for row in random_rows(model, n, seed=seed):
        for field, choices in (("tp", (1, 2, 3, 4, 8, 16)), ("ep", (1, 2, 4, 8, 16)), ("pp", (1, 2, 4, 8, 64, 200)),
                               ("cp", (1, 2, 3, 4)), ("etp", (None, 1, 2, 4)), ("vpp", (1, 2, 3)),
                               ("micro_batch_num", (None, 1, 3, 8)), ("pp_schedule", ("1f1b", "interleaved",
                               "zero_bubble_v", "gpipe", "seq1f1b")), ("cp_algo", ("ring", "ulysses")),
                               ("precision", ("bf16", "fp8")), ("seq_length", (4096, 4098, 4100, 8190)),
                               ("sequence_parallel", (False, True))):
            if rng.random() < 0.3:
                row[field] = choices[rng.integers(len(choices))]
        if row["etp"] is not None and row["ep"] == 1 and not model.is_moe:
            row["etp"] = None
        try:
            ExecSpec(**row)
        except SpecError:
            continue
        rows.append(row)
    return rows


def _row(values: dict, i: int) -> dict:
    return {name: (np.asarray(value)[i] if np.ndim(value) else value) for name, value in values.items()}


@pytest.mark.parametrize("model_name", MODELS)
def test_scalar_twins_agree_with_the_columns_row_by_row(model_name):
    """joint_reason, the derived values and both candidate vectors: the scalar twins on each
    row's ExecSpec == the column formulas' row, on a seeded batch (exact, int or float64)."""
    model = Model.from_catalog(model_name)
    mc = model_constants(model)
    rows = _joint_rows(model, 150, seed=21)
    cands = Candidates.from_arrays(**columns_of(rows))
    columns = {name: cands.storage(name) for name in FIELDS}
    layout_bad = np.random.default_rng(22).random(len(rows)) < 0.05
    clusters = [f.ClusterConstants(Cluster("h100-sxm", num_devices=64)),
                f.ClusterConstants(Cluster("a100-80g", num_devices=16)),   # no fp8
                f.ClusterConstants(device=Cluster("h800", num_devices=8).device), None]       # bare device; no cluster
    with np.errstate(all="ignore"):
        reasons = {(k, allow): f.joint_reason(f.ARRAY, columns, mc, cc, layout_bad, allow, REASON_CODES)
                   for k, cc in enumerate(clusters) for allow in (True, False)}
        derived = f.derived_columns(f.ARRAY, columns, mc)
        extra = f.derived_extra_columns(f.ARRAY, columns, mc, derived)
        nd = np.column_stack(np.broadcast_arrays(*f.nd_candidate_columns(f.ARRAY, columns, derived, clusters[0],
                                                                         MOE_DISPATCH)))
        memory = np.column_stack(np.broadcast_arrays(*f.memory_candidate_columns(f.ARRAY, columns, derived)))
    priced, seen = 0, set()
    for i in range(len(rows)):
        c = cands[i].__dict__
        for (k, allow), reason in reasons.items():
            got = f.joint_reason_scalar(f.SCALAR, c, mc, clusters[k], bool(layout_bad[i]), allow, REASON_CODES)
            assert got == reason[i], (model_name, i, k, allow)
            seen.add(got)
            if got:   # the fused twins report the same broken rule, and nothing else
                args = (c, mc, clusters[k], bool(layout_bad[i]), allow, REASON_CODES)
                assert f.joint_nd_memory_candidate_scalar(*args, MOE_DISPATCH) == (got, None, None)
                assert f.joint_derived_memory_candidate_scalar(*args) == (got, None, None)
        d = f.derived_columns_scalar(f.SCALAR, c, mc)
        if reasons[3, True][i] or d["d_exp"] < 1:      # no cluster: the cluster rules aside
            continue
        assert d == _row(derived, i), (model_name, i)
        assert f.derived_extra_columns_scalar(f.SCALAR, c, mc, d) == _row(extra, i), (model_name, i)
        np.testing.assert_array_equal(
            np.array(f.nd_candidate_columns_scalar(f.SCALAR, c, d, clusters[0], MOE_DISPATCH)), nd[i])
        np.testing.assert_array_equal(np.array(f.memory_candidate_columns_scalar(f.SCALAR, c, d)), memory[i])
        _assert_fused_twins_agree(c, mc, d, clusters[0], bool(layout_bad[i]))
        priced += 1
    assert priced >= 20 and len(seen) >= 10, (priced, seen)    # 11 to 15 rules broken per model


def _assert_fused_twins_agree(c: dict, mc, d: dict, cc, layout_bad: bool) -> None:
    """On a row no joint rule breaks, the fused twins (estimate()'s one candidate) return what the
    separate twins do, the same Python values (type included: the kernels convert them as they are)."""
    if f.joint_reason_scalar(f.SCALAR, c, mc, cc, layout_bad, True, REASON_CODES):
        return
    nd = f.nd_candidate_columns_scalar(f.SCALAR, c, d, cc, MOE_DISPATCH)
    memory = f.memory_candidate_columns_scalar(f.SCALAR, c, d)
    got = f.joint_nd_memory_candidate_scalar(c, mc, cc, layout_bad, True, REASON_CODES, MOE_DISPATCH)
    assert got == (0, d["d_exp"], nd + memory)
    assert [type(v) for v in got[2]] == [type(v) for v in nd + memory]
    reason, exposed, values = f.joint_derived_memory_candidate_scalar(c, mc, cc, layout_bad, True, REASON_CODES)
    assert reason == 0 and exposed == {name: d[name] for name in exposed} and values == memory
    assert [type(v) for v in exposed.values()] == [type(d[name]) for name in exposed]


def test_the_generator_fuses_only_what_it_can_map():
    """A fused twin's consumer reads derived values by name only; derived's dropped assignments are
    the ones nothing reads; c is read once, for the keys the kept code reads."""
    gen = _generator()
    twins = {name: gen._Scalarise(*gen._scalar_rules(ast.parse(
        (ROOT / "src/ndcost/tables/formulas_ops.py").read_text()))).visit(ast.parse(source).body[0])
        for name, source in (("joint_reason", "def joint_reason(ops, c, codes):\n    x = c['a']\n"
                                              "    rules = []\n    rules.append(('big', x > 9))\n"
                                              "    return ops.first_reason(rules, codes)"),
                             ("derived_columns", "def derived_columns(ops, c):\n    x = c['a'] + c['b']\n"
                                                 "    unused = c['u']\n    return {'x': x, 'y': x * 2, 'z': unused}"),
                             ("good", "def good(ops, c, d):\n    k = d['y'] + 1\n    return (k, d['x'])"),
                             ("bad", "def bad(ops, c, d):\n    return (d,)"))}
    text = ast.unparse(gen._fused("both", ("good",), ("x",), False, twins))
    assert "unused" not in text and "good_k = d_y + 1" in text and "return (0, x, (good_k, x))" in text
    assert "c_a, c_b = _C_BOTH(c)" in text and "x = c_a + c_b" in text and "c_u" not in text   # one read of c
    assert "joint_x = c_a\n    if joint_x > 9:\n        return (codes['big'], None, None)" in text   # joint first
    with pytest.raises(ValueError, match="d read other than"):
        gen._fused("both", ("bad",), ("x",), False, twins)
