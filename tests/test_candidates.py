"""Candidates: columns, broadcasting, ExecSpec's rules vectorised, rows back to specs,
shared layouts, and the vectorised derive() against derive() row by row."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from batch_cases import columns_of, planted_rows, random_rows
from ndcost import Cluster, ExecSpec, Model, RecomputeRange, SpecError
from ndcost.tables.formulas import (
    ARRAY, SCALAR, derived_columns, derived_extra_columns, joint_reason, memory_candidate_columns,
    nd_candidate_columns,
)
from ndcost.price.candidate_columns import FIELDS
from ndcost.price.candidates import Candidates
from ndcost.tables.derive import derive, model_constants
from ndcost.tables.layout import build_layout
from ndcost.tables.memory import memory_candidate_vector
from ndcost.tables.nd_tables import MOE_DISPATCH, cluster_constants, nd_candidate_vector
from ndcost.tables.reasons import FIRST_INVALID, REASON_CODES, REASON_TABLE, REASONS, explain_reason

MODELS = ("llama3-70b", "qwen3-32b", "mixtral-8x7b", "deepseek-v3", "qwen3-next-80b-a3b", "qwen3-30b-a3b")


# --------------------------------------------------------------------------- building and reading


def test_from_arrays_broadcasts_scalars_and_reads_back_specs():
    cands = Candidates.from_arrays(dp=np.array([1, 2, 4]), tp=2, pp=[1, 2, 2], global_batch_size=64,
                                   seq_length=4096, recompute=["none", "full", "selective"])
    assert len(cands) == 3
    assert cands.dp.tolist() == [1, 2, 4] and cands["tp"].tolist() == [2, 2, 2]
    assert cands.column("recompute").tolist() == ["none", "full", "selective"]
    assert cands.reason.tolist() == [0, 0, 0]
    assert cands[1] == ExecSpec(dp=2, tp=2, pp=2, global_batch_size=64, seq_length=4096, recompute="full")
    assert cands[-1].recompute == "selective"
    assert cands.column("etp").tolist() == [None, None, None]


def test_columns_are_read_only_and_inputs_untouched():
    dp = np.array([1, 2, 4])
    cands = Candidates.from_arrays(dp=dp, global_batch_size=64)
    dp[0] = 8
    assert cands.dp[0] == 1
    for name in ("dp", "tp", "recompute", "etp", "sequence_parallel"):
        with pytest.raises(ValueError):
            cands.column(name)[0] = 3
    with pytest.raises(ValueError):
        cands.reason[0] = 1


def test_bad_columns_raise_and_bad_values_are_reasons():
    with pytest.raises(SpecError, match="nonsense"):
        Candidates.from_arrays(nonsense=1)
    with pytest.raises(SpecError, match="length"):
        Candidates.from_arrays(dp=[1, 2], tp=[1, 2, 4])
    with pytest.raises(SpecError, match="1-D"):
        Candidates.from_arrays(dp=np.ones((2, 2), dtype=int))
    with pytest.raises(TypeError):
        Candidates()
    cands = Candidates.from_arrays(dp=np.array([2.0, 2.5, 0.0]), global_batch_size=8, sequence_parallel=1)
    degree, flag = REASON_CODES["bad_degree"], REASON_CODES["bad_flag"]
    assert cands.reason.tolist() == [flag, degree, degree]    # an int is not a bool; degrees are checked first
    cands = Candidates.from_arrays(dp=np.array([2.0, 2.5, 0.0]), global_batch_size=8)
    assert cands.reason.tolist() == [0, REASON_CODES["bad_degree"], REASON_CODES["bad_degree"]]
    with pytest.raises(SpecError, match="'dp'.*2.5"):
        cands[1]


def test_from_specs_round_trip():
    specs = [ExecSpec(dp=2, tp=4, pp=2, global_batch_size=32, offset=(1, -1), recompute="selective",
                      selective_switches={"attBMM": 0, "softmax": 0}),
             ExecSpec(dp=4, ep=4, micro_batch_num=4, recompute=(RecomputeRange(0, 4, "full"),), zero_stage=3,
                      reshard_params=False, tie_embeddings=True, moe_dispatch=0.0, etp=1),
             ExecSpec(dp=2, pp=4, vpp=2, pp_schedule="zero_bubble_v", global_batch_size=16, cp=2,
                      cp_algo="ulysses", full_recompute=(1, 0, 2, 1))]
    cands = Candidates.from_specs(specs)
    assert len(cands) == 3 and cands.reason.tolist() == [0, 0, 0]
    assert [cands[i] for i in range(3)] == specs
    assert sorted(cands.layout_index.tolist()) == [0, 1, 2] and len(cands.layouts) == 3
    with pytest.raises(SpecError):
        Candidates.from_specs([specs[0], "not a spec"])


def test_take_keeps_rows_and_layouts():
    cands = Candidates.from_arrays(dp=[1, 2, 4, 8], global_batch_size=64, recompute=["none", "full", "none", "full"])
    part = cands.take([3, 0])
    assert len(part) == 2 and part[0] == cands[3] and part[1] == cands[0]
    assert part.layouts is cands.layouts and part.layout_index.tolist() == [cands.layout_index[3], cands.layout_index[0]]
    masked = cands.take(np.array([True, False, True, False]))
    assert masked.dp.tolist() == [1, 4]


def test_rows_share_layouts():
    """One layout per distinct layout key; the mask keys only where a layer can be selective."""
    cands = Candidates.from_arrays(dp=[1, 2, 4, 8, 1, 2], tp=[1, 2, 1, 2, 4, 4], pp=[2, 2, 2, 2, 4, 4],
                                   global_batch_size=64, sequence_parallel=True, selective_rule="mindformers",
                                   recompute=["none", "none", "selective", "selective", "full", "full"])
    index = cands.layout_index.tolist()
    assert index[0] == index[1]            # tp differs, no selective layer: one layout
    assert index[2] != index[3]            # selective: mindformers' mask differs with sp > 1
    assert index[4] == index[5]
    assert len(cands.layouts) == 4
    model = Model.from_catalog("llama3-70b")
    for row in range(len(cands)):
        layout = build_layout(model, cands.layout_spec(index[row]))
        own = build_layout(model, cands[row])
        np.testing.assert_array_equal(layout.counts, own.counts)
        np.testing.assert_array_equal(layout.slot_mask, own.slot_mask)
        assert (layout.emb_stage, layout.out_stage) == (own.emb_stage, own.out_stage)


# --------------------------------------------------------------------------- ExecSpec's rules, vectorised


def _raw_row(rng: np.random.Generator) -> dict:
    """A row of field values; each field out of ExecSpec's range now and then, on purpose."""
    def pick(good, bad=()):
        options = bad if bad and rng.random() < 0.04 else good
        return options[int(rng.integers(len(options)))]
    return dict(
        dp=pick((1, 2, 4, 8), (0, -1, 2.5, "2")), tp=pick((1, 2, 4), (3.0, True)), pp=pick((1, 2, 4), (0,)),
        vpp=pick((1, 1, 2), (3, 0)), cp=pick((1, 2)), ep=pick((1, 2)), etp=pick((None, None, 1, 2), (0, 1.5)),
        sequence_parallel=pick((True, False), (1, None)), micro_batch_size=pick((1, 2), (0,)),
        micro_batch_num=pick((None, None, 4, 8), (0, 2.5)), global_batch_size=pick((None, 64, 32), (30, 0, 33)),
        seq_length=pick((4096, 2048), (4000, 0)),
        pp_schedule=pick(("1f1b", "1f1b", "interleaved", "zero_bubble_v", "gpipe", "seq1f1b"), ("bogus", 3)),
        seq_split=pick((1, 1, 1, 2), (3, 0)), offset=pick((None, None, None, 1, (1, -1)), (((1, -1), (0, 0)), (1,))),
        pp_partition=pick((None, None, None, (40, 40)), ((80,),)),
        recompute=pick(("none", "full", "selective", (RecomputeRange(0, 4, "full"),)), ("sometimes", ("full",))),
        full_recompute=pick((None, None, None, True, (1, 2)), ((1,),)),
        selective_rule=pick(("megatron", "mindformers", "hyperparallel"), ("nope",)),
        selective_switches=pick((None, None, {"attBMM": 0}), ({"bogus": 0}, {"attBMM": 2})),
        zero_stage=pick((0, 1, 2, 3), (4, -1)), optimizer_shard=pick((None, None, 2), (3, 0)),
        reshard_params=pick((None, None, False), (True, "yes")), param_bytes=pick((2, 4), (0,)),
        dropout_bytes=pick((0, 1), (-1,)), capacity_factor=pick((1.0, 1.5, 2), (0.5, float("inf"), True)),
        moe_imbalance=pick((1.0, 1.0, 1.25), (0.9, float("nan"))),
        moe_dispatch=pick((None, None, 0.0, 500), (-1.0, float("nan"))),
        moe_dispatch_count=pick((0.0, 0.0, 1.0, 2), (-1.0, float("inf"), "1")), cp_algo=pick(("ring", "ulysses", "ring-allgather"), ("zigzag",)),
        moe_dispatcher=pick(("alltoall", "alltoall", "deepep"), ("nccl",)),
        precision=pick(("bf16", "fp16", "fp8"), ("fp4",)), tie_embeddings=pick((None, True, False), (0,)),
    )


def test_spec_rules_match_execspec_first_error():
    """On 1500 raw rows: a row is valid iff ExecSpec accepts it, and an invalid row's
    reason names the parameter of the SpecError ExecSpec raises first."""
    rng = np.random.default_rng(20260101)
    rows = [_raw_row(rng) for _ in range(1500)]
    columns = {}
    for name in rows[0]:
        array = np.empty(len(rows), dtype=object)
        array[:] = [row[name] for row in rows]
        columns[name] = array
    cands = Candidates.from_arrays(**columns)
    assert np.count_nonzero(cands.reason) > 300 and np.count_nonzero(cands.reason == 0) > 30
    for i, row in enumerate(rows):
        code = int(cands.reason[i])
        try:
            spec = ExecSpec(**row)
        except SpecError as error:
            assert code >= FIRST_INVALID, (i, row, error)
            parameter = error.parameter.split(".")[0]
            assert parameter in REASON_TABLE[code].parameters, (i, row, str(error), REASON_TABLE[code])
            with pytest.raises(SpecError):
                cands[i]
            continue
        assert code == 0, (i, row, REASON_TABLE[code])
        assert cands[i] == spec


def test_reason_table():
    assert [reason.code for reason in REASON_TABLE] == list(range(len(REASONS)))
    assert REASONS == tuple(reason.text for reason in REASON_TABLE) and len(set(REASONS)) == len(REASONS)
    assert REASON_TABLE[0].name == "ok" and explain_reason(0).startswith("priced")
    assert REASONS[REASON_CODES["no_fit"]] == "does not fit in memory"
    assert "memory" in explain_reason(REASON_CODES["no_fit"])
    assert "heads" in explain_reason(REASON_CODES["tp_heads"])
    with pytest.raises(ValueError):
        explain_reason(len(REASONS))
    with pytest.raises(ValueError):
        explain_reason("x")


# --------------------------------------------------------------------------- derive(), vectorised


def _rows_over_models(seed: int, per_model: int):
    for name in MODELS:
        model = Model.from_catalog(name)
        yield model, random_rows(model, per_model, seed=seed) + planted_rows(model)


def test_vectorised_derive_equals_derive_row_by_row():
    """derived_columns on numpy columns == derive() per row, on >= 1000 random specs
    (the formulas are one source: derive() runs their scalar twin)."""
    checked = 0
    for model, rows in _rows_over_models(seed=11, per_model=180):
        cands = Candidates.from_arrays(**columns_of(rows))
        columns = {name: cands.storage(name) for name in FIELDS}
        constants = model_constants(model)
        with np.errstate(all="ignore"):
            derived = derived_columns(ARRAY, columns, constants)
            derived.update(derived_extra_columns(ARRAY, columns, constants, derived))
        for i in range(len(cands)):
            spec = cands[i]
            try:
                expected = derive(model, spec)
            except SpecError:
                assert derived["d_exp"][i] < 1
                continue
            for field in dataclasses.fields(expected):
                if field.name == "keep_mask":
                    continue
                got = np.asarray(derived[field.name])
                value = got[i] if got.ndim else got
                assert value == getattr(expected, field.name), (model.name, i, field.name)
            checked += 1
    assert checked >= 1000


def test_vectorised_candidate_vectors_equal_the_single_path():
    """The ND and memory candidate matrices == the vectors estimate() builds, bit for bit."""
    cluster = Cluster("h800", num_devices=8)
    cc = cluster_constants(cluster)
    for model, rows in _rows_over_models(seed=12, per_model=60):
        cands = Candidates.from_arrays(**columns_of(rows))
        columns = {name: cands.storage(name) for name in FIELDS}
        with np.errstate(all="ignore"):
            derived = derived_columns(ARRAY, columns, model_constants(model))
            nd = np.column_stack(np.broadcast_arrays(*nd_candidate_columns(ARRAY, columns, derived, cc, MOE_DISPATCH)))
            memory = np.column_stack(np.broadcast_arrays(*memory_candidate_columns(ARRAY, columns, derived)))
        for i in range(len(cands)):
            spec = cands[i]
            try:
                single = derive(model, spec)
            except SpecError:
                continue
            np.testing.assert_array_equal(nd[i], nd_candidate_vector(spec, single, cluster))
            np.testing.assert_array_equal(memory[i], memory_candidate_vector(model, spec))


def test_scalar_twins_equal_the_generic_formulas():
    """The scalar twins (generated from the formulas' source) == the generic code run on scalars."""
    from ndcost.tables import formulas as f

    cluster = Cluster("h100-sxm", num_devices=64)
    for model, rows in _rows_over_models(seed=13, per_model=40):
        constants = model_constants(model)
        for row in rows:
            spec = ExecSpec(**row)
            c = spec.__dict__
            d = f.derived_columns(SCALAR, c, constants)
            assert f.derived_columns_scalar(SCALAR, c, constants) == d
            assert f.derived_extra_columns_scalar(SCALAR, c, constants, d) == f.derived_extra_columns(SCALAR, c, constants, d)
            cc = cluster_constants(cluster)
            assert f.nd_candidate_columns_scalar(SCALAR, c, d, cc, MOE_DISPATCH) == f.nd_candidate_columns(
                SCALAR, c, d, cc, MOE_DISPATCH)
            assert f.memory_candidate_columns_scalar(SCALAR, c, d) == f.memory_candidate_columns(SCALAR, c, d)
            for allow in (True, False):
                assert f.joint_reason_scalar(SCALAR, c, constants, cc, False, allow, REASON_CODES) == joint_reason(
                    SCALAR, c, constants, cc, False, allow, REASON_CODES)
