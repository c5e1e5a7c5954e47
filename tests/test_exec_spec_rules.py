"""ExecSpec's construction: its fast test of the scalars (``scalars_hold``) never changes an outcome
-- every spec, valid or not, comes out as running every rule group in order says -- and its own
__init__ keeps the dataclass's calling convention (keywords, positionals, the errors of either)."""
from __future__ import annotations

import dataclasses
import inspect
import math

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ndcost import ExecSpec, SpecError  # noqa: E402
from ndcost.spec.exec_spec_rules import CHECKS, check_scalars, scalars_hold  # noqa: E402
from ndcost.limits import MAX_BYTE_WIDTH, MAX_CAPACITY_FACTOR, MAX_DEVICES, MAX_LAYERS  # noqa: E402

FIELDS = tuple(f.name for f in dataclasses.fields(ExecSpec))
DEFAULTS = {f.name: f.default for f in dataclasses.fields(ExecSpec)}

#: Values at and past every bound, of every type a scalar must not be, and of the types it may be.
EDGES = (0, 1, 2, 4, 8, -1, 64, 65, MAX_LAYERS, MAX_LAYERS + 1, MAX_DEVICES, MAX_DEVICES + 1, 2**63, True, False,
         None, 1.0, 1.5, 0.0, -0.0, MAX_CAPACITY_FACTOR, MAX_CAPACITY_FACTOR * 2, math.nan, math.inf, "ring",
         "ulysses", "fp8", "x", "megatron", "selective", "gpipe", "seq1f1b", (1, 0), [1, 1], MAX_BYTE_WIDTH)
SCALARS = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp", "sequence_parallel", "micro_batch_size", "micro_batch_num",
           "global_batch_size", "seq_length", "seq_split", "pp_schedule", "param_bytes", "optimizer_states",
           "main_param_bytes", "logit_bytes", "flash_attention", "tp_overlap", "capacity_factor", "moe_imbalance",
           "moe_dispatch", "moe_dispatch_count", "cp_algo", "precision", "selective_rule", "tie_embeddings", "zero_stage", "recompute",
           "reshard_params", "optimizer_shard")


class _IntLike(int):
    """An int subclass: accepted by the rules, but not by the fast test (which falls back to them)."""


def _outcome(build):
    """('error', message) or ('spec', every field as (type, value)), comparable across builds."""
    try:
        spec = build()
    except SpecError as exc:
        return "error", str(exc)
    return "spec", tuple((type(spec.__dict__[name]), repr(spec.__dict__[name])) for name in FIELDS)


def _every_rule_in_order(fields):
    """The spec as running every rule group in order, the scalars included, makes it."""
    spec = object.__new__(ExecSpec)
    object.__setattr__(spec, "__dict__", {**DEFAULTS, **fields})
    for check in CHECKS:
        check(spec)
    return spec


values = st.one_of(st.sampled_from(EDGES), st.integers(-3, 70), st.builds(_IntLike, st.integers(1, 8)),
                   st.floats(allow_nan=True))
specs = st.dictionaries(st.sampled_from(SCALARS), values, max_size=4).map(
    lambda fields: {"global_batch_size": 1024, **fields})


@settings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(specs)
def test_construction_comes_out_as_every_rule_in_order(fields):
    assert _outcome(lambda: ExecSpec(**fields)) == _outcome(lambda: _every_rule_in_order(fields))


@settings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(specs)
def test_scalars_that_hold_pass_the_ordered_check_unchanged(fields):
    values = {**DEFAULTS, **fields}
    if not scalars_hold(values):
        return
    spec = object.__new__(ExecSpec)
    object.__setattr__(spec, "__dict__", dict(values))
    check_scalars(spec)
    assert [(type(v), v) for v in spec.__dict__.values()] == [(type(v), v) for v in values.values()]


def test_the_fast_test_passes_the_common_specs():
    for fields in ({}, {"dp": 16, "tp": 8, "pp": 8, "sequence_parallel": True, "recompute": "selective"},
                   {"etp": 2, "tie_embeddings": False, "moe_dispatch": 0.0, "capacity_factor": 1.25}):
        assert scalars_hold({**DEFAULTS, "micro_batch_num": 1, **fields})
    for odd in ({"capacity_factor": 2}, {"dp": _IntLike(2)}, {"moe_dispatch": 1040}):
        assert not scalars_hold({**DEFAULTS, **odd})
        spec = ExecSpec(global_batch_size=64, **odd)   # ...and the rules accept them, as before
        assert type(spec.capacity_factor) is float and type(spec.moe_imbalance) is float


def test_the_dataclass_calling_convention():
    by_position = ExecSpec(2, 4, 1, 1, 1, 1, None, True, micro_batch_num=3)
    assert by_position == ExecSpec(dp=2, tp=4, sequence_parallel=True, micro_batch_num=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tensor_parallel'"):
        ExecSpec(micro_batch_num=1, tensor_parallel=2)
    with pytest.raises(TypeError, match="multiple values for argument 'dp'"):
        ExecSpec(2, dp=2, micro_batch_num=1)
    with pytest.raises(TypeError, match="positional arguments"):
        ExecSpec(*range(len(FIELDS) + 1))
    assert list(inspect.signature(ExecSpec).parameters) == list(FIELDS)
    assert inspect.signature(ExecSpec).parameters["seq_length"].default == 4096


def test_the_instance_holds_exactly_its_fields():
    spec = ExecSpec(dp=2, micro_batch_num=1, offset=[1], pp=1)
    assert list(vars(spec)) == list(FIELDS)
    assert dataclasses.asdict(spec)["offset"] == (1,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.dp = 4  # type: ignore[misc]
    assert spec.replace(dp=4).dp == 4 and spec.dp == 2
