"""ND's per-layer formulas on a kind's own submodule (sub_h, sub_a, sub_hff, sub_seq), and the
HyperParallel census shares of a selective layer (docs/ND_MODEL.md §2.2-§2.6; seed _submodule_parts,
selective_shares), on both backends and in parity.

ND prices each submodule of a multimodal model on its own config: every per-layer formula (op
table, TP, CP, EP, what recompute re-sends) reads the kind's submodule columns, while the
embedding and output nodes stay on the text model's h and the candidate's s.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import ndcost
from ndcost import Cluster, ExecSpec
from ndcost.kernels.columns import (
    CAND, CAND_FIELDS, HYPER_POLICY_MASK, KIND, KIND_FIELDS, MODEL, OPTION_FULL, OPTION_NONE, OPTION_SELECTIVE,
    PART_NAMES, STAGE, STAGE_FIELDS,
)
from ndcost.kernels.nd_ops import ND_OPS
from ndcost.tables.derive import derive
from ndcost.tables.nd_tables import nd_candidate_vector, nd_kind_table, nd_model_vector
from ndcost.spec.recompute_spec import ALL_KEPT, SWITCHES

from nd_arrays import cand_of, kinds_of, model_of, options_of

OP = {name: i for i, name in enumerate(ND_OPS)}
BIT = {name: 1 << i for i, name in enumerate(SWITCHES)}


def loads(kernels, kinds, model, cand, k=0) -> np.ndarray:
    out = np.full(len(ND_OPS), -1.0)
    kernels.nd_op_loads(kinds, model, cand, k, out)
    return out


def factors(kernels, kinds, option, mask, k=0) -> np.ndarray:
    out = np.full(len(ND_OPS), -1.0)
    kernels.nd_recompute_factors(kinds, k, option, mask, out)
    return out


def stage_sums(kernels, kinds, model, cand, counts, slots, emb=-1, out_stage=-1) -> np.ndarray:
    counts = np.ascontiguousarray(counts, dtype=np.float64)
    out = np.full((counts.shape[0], len(STAGE_FIELDS)), -1.0)
    kernels.nd_stage_sums(kinds, model, cand, counts, np.array([o for o, _ in slots], dtype=np.int64),
                          np.array([m for _, m in slots], dtype=np.int64), emb, out_stage, out)
    return out


def one_layer(kernels, kinds, model, cand, k=0, option=OPTION_NONE, mask=ALL_KEPT) -> dict:
    """The stage fields of one layer of kind *k* alone on a one-stage pipeline, no nodes."""
    counts = np.zeros((1, len(kinds)))
    counts[0, k] = 1.0
    return dict(zip(STAGE_FIELDS, stage_sums(kernels, kinds, model, cand, counts, ((option, mask),))[0]))


# The synthetic submodule of the hand-derived tests: every dimension differs from the model's
# (model h = 4, heads 2, hff 6; candidate s = 8). att_dh = 0, so the head dim is sub_h/att_a.
COUNTS_ONE = {f"n_{op}": 1.0 for op in ND_OPS}
SUB = dict(COUNTS_ONE, att_a=2, att_n_kv=1, att_dh=0, ffn_width=10, n_linrec=0.0, n_dispatch=0.0,
           sub_h=8, sub_a=4, sub_hff=10, sub_seq=16, census_att=-1, census_ffn=-1)


def sub_loads() -> dict:
    """SUB's op loads by hand: b = 1, s = 16, h = 8, heads A = 4, hff = 10, t = 2, sp = 1,
    kind a = 2, n_kv = 1, d_h = h/a = 4, d_q = a·d_h = 8, d_qk = 4; bytes_p/t/cp = 1."""
    b, s, h, A, hff, t, sp, a, n_kv, d_h = 1, 16, 8, 4, 10, 2, 1, 2, 1, 4
    d_q, d_qk = a * d_h, d_h
    return dict(
        attMM=1.5 * b * s * h * ((1 + 1) * d_q + 2 * n_kv * d_h),   # 1.5·16·8·24 = 4608
        linrec=0.0,
        ffMM=6 * b * s * h * hff,                                    # 6·16·8·10 = 7680
        attBMM=3 * b * s * s * a * (d_qk + d_h),                     # 3·256·2·8 = 12288
        softmax=13 * A * b * s * s,                                  # 13·4·256 = 13312
        headCast=3 * A * b * s * s,                                  # 3·4·256 = 3072
        gather=b * s * h * (t - 1),                                  # 16·8·1 = 128
        ffAct=21 * b * s * hff,                                      # 21·16·10 = 3360
        normOp=30 * b * s * h * t / sp,                              # 30·16·8·2 = 7680
        qknorm=30 * b * s * (a + n_kv) * d_h,                        # 30·16·3·4 = 5760
        dropout=3 * b * s * max(A * s, 3 * h * t / sp),              # 3·16·max(64, 48) = 3072
        dispatch=0.0,
    )


# --- (a) hand-derived arithmetic ---------------------------------------------------------------

def test_op_loads_take_the_submodules_dims(kernels):
    out = loads(kernels, kinds_of(SUB), model_of(), cand_of())
    expected = sub_loads()
    assert expected["attMM"] == 4608 and expected["dropout"] == 3072 and expected["softmax"] == 13312
    np.testing.assert_allclose(out, [expected[op] for op in ND_OPS], rtol=1e-15)


def test_zero_sub_columns_mean_the_models_and_the_candidates(kernels):
    # sub_h/sub_a/sub_hff = 0 and sub_seq ≤ 0 fall back to the model's h, a, hff and the cand's s.
    model, cand = model_of(h=8, a=4, hff=10), cand_of(s=16)
    same = loads(kernels, kinds_of(SUB), model_of(), cand_of())
    for seq in (0.0, -5.0, math.nan):
        zeroed = dict(SUB, sub_h=0, sub_a=0, sub_hff=0, sub_seq=seq)
        np.testing.assert_array_equal(loads(kernels, kinds_of(zeroed), model, cand), same)


def test_moe_kind_dispatch_and_ep_take_the_submodules_h_and_s(kernels):
    kind = dict(SUB, is_moe=1, n_dispatch=1.0, ffn_width=3)
    model = model_of(n_exp=8, n_chosen=2, hff_exp=3)
    cand = cand_of(ep=2, comm_ep=1, t_exp=1)
    out = loads(kernels, kinds_of(kind), model, cand)
    s, h, n_chosen, ep = 16, 8, 2, 2
    assert out[OP["dispatch"]] == pytest.approx(1040 * 1 * s * h * n_chosen * ep, rel=1e-15)
    experts = 3 * (2 * 1 + 0)                      # hff_exp·(n_chosen·cap_fact + n_shared)
    width = experts + (8 + 0) / 1                  # + (n_exp + gate)/n_ffMM
    assert out[OP["ffMM"]] == pytest.approx(6 * 1 * s * h * width, rel=1e-15)
    assert out[OP["ffAct"]] == pytest.approx(21 * 1 * s * experts, rel=1e-15)
    # EP: local = n_chosen·s·b/cp = 32 tokens, cross = 32·(ep−1)/ep = 16; 16·h·bytes_c·2 = 512.
    assert one_layer(kernels, kinds_of(kind), model, cand)["ep"] == pytest.approx(16 * h * 2 * 2, rel=1e-15)


def test_layer_comm_and_recompute_take_the_submodules_h_and_s(kernels):
    cand = cand_of(comm_cp=1, cp_ring=1)
    none = one_layer(kernels, kinds_of(SUB), model_of(), cand)
    full = one_layer(kernels, kinds_of(SUB), model_of(), cand, option=OPTION_FULL, mask=0)
    s, b, h, width, t = 16, 1, 8, 10, 2
    tp = 0.25 * 1 * s * b * h + 0.25 * 1 * s * b * width          # 32 + 40 = 72 (comm_t 1, cp 1)
    cp = 1 * 2.0 * s * b * ((2 * 0.5 * 1 + 0.5) * 1 * h + 1 * width) / t   # rf = 1 (p = 1): 2·16·22/2 = 352
    plain = sum(sub_loads().values())
    assert none["tp"] == pytest.approx(tp, rel=1e-15) and tp == 72
    assert none["cp"] == pytest.approx(cp, rel=1e-15) and cp == 352
    assert none["comp"] == pytest.approx(plain, rel=1e-15)
    assert none["recomm"] == pytest.approx(tp + cp, rel=1e-15)
    # FULL re-runs every op and re-sends its whole TP and half its CP.
    assert full["recomp"] == pytest.approx(2 * plain, rel=1e-15)
    assert full["recomm"] == pytest.approx(tp + cp + tp + 0.5 * cp, rel=1e-15)


def test_nodes_stay_on_the_text_models_h_and_s(kernels):
    # The output and embedding nodes price on the model config even when the default kind is a
    # submodule's: model h = 4, candidate s = 8, v = 10, bytes_p/t = 1.
    row = stage_sums(kernels, kinds_of(SUB), model_of(), cand_of(), np.zeros((1, 1)),
                     ((OPTION_NONE, ALL_KEPT),), emb=0, out_stage=0)[0]
    b, v, h, s, width = 1, 10, 4, 8, 10
    output = (1.0 / 16.0) * 6 * b * v * h * s * 2 / 2                # 120
    node_tp = 0.25 * 1 * s * b * h + 0.25 * 1 * s * b * width          # 8 + 20 = 28
    assert row[STAGE["comp"]] == pytest.approx(output, rel=1e-15) and output == 120
    assert row[STAGE["tp"]] == pytest.approx(2 * node_tp, rel=1e-15)   # embedding + output


def test_dynamic_ratio_stays_on_the_text_model(kernels):
    # nd_combine reads no kind: the DYNAMIC weight is 1.5·(hff + s)·8192/(h + s) of the model.
    stage = np.array([[30.0, 30.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]])
    parts = np.empty(len(PART_NAMES))
    times = np.empty(1)
    total = kernels.nd_combine(stage, cand_of(), model_of(), options_of(ratio_type=0), np.zeros(0), -1, parts, times)
    assert total == pytest.approx(10.0 * 3 + 1.5 * (6 + 8) * 8192 / (4 + 8), rel=1e-15)


# --- (b) a tower kind in a text model == the same layer of a plain model -----------------------

TEXT = dict(name="t", hidden_size=3584, num_attention_heads=28, num_key_value_heads=4, num_hidden_layers=4,
            vocab_size=152064, intermediate_size=18944)
TOWER = dict(name="v", hidden_size=1280, num_attention_heads=16, num_hidden_layers=4, vocab_size=1000,
             intermediate_size=3420)
SPECS = [
    dict(dp=2, tp=2, sequence_parallel=True, micro_batch_size=2, micro_batch_num=4),
    dict(dp=2, tp=4, cp=2, sequence_parallel=True, zero_stage=3, micro_batch_num=2),
    dict(dp=4, tp=1, cp=2, cp_algo="ulysses", zero_stage=2, global_batch_size=16),
]
SLOTS = [(OPTION_NONE, ALL_KEPT), (OPTION_FULL, 0), (OPTION_SELECTIVE, HYPER_POLICY_MASK),
         (OPTION_SELECTIVE, ALL_KEPT & ~BIT["gather"]), (OPTION_SELECTIVE, 0)]


def _cand(model, spec) -> np.ndarray:
    cluster = Cluster("h100-sxm", num_devices=spec.num_devices)
    return nd_candidate_vector(spec, derive(model, spec, cluster), cluster)


@pytest.mark.parametrize("fields", SPECS)
def test_tower_kind_prices_as_its_own_model(kernels, fields):
    text, tower = ndcost.Model(**TEXT), ndcost.Model(**TOWER)
    cand_tower = _cand(tower, ExecSpec(seq_length=1024, **fields))
    cand_text = _cand(text, ExecSpec(seq_length=4096, **fields))
    differ = [name for name in CAND_FIELDS if cand_tower[CAND[name]] != cand_text[CAND[name]]]
    assert differ == ["s"], differ
    model_text = nd_model_vector(text)
    assert (model_text[MODEL["h"]], model_text[MODEL["a"]], model_text[MODEL["hff"]]) == (3584, 28, 18944)

    # The tower's row as the kind table of a multimodal model would hold it: its own submodule.
    row = np.array(nd_kind_table(tower)[0])
    for name, value in dict(sub_h=1280, sub_a=16, sub_hff=3420, sub_seq=1024, att_a=16, att_n_kv=16,
                            att_dh=80, ffn_width=3420).items():
        row[KIND[name]] = value
    mm_kinds = np.ascontiguousarray(np.vstack([nd_kind_table(text), row]))
    plain_kinds = np.ascontiguousarray(nd_kind_table(tower))
    for option, mask in SLOTS:
        mm = one_layer(kernels, mm_kinds, model_text, cand_text, k=1, option=option, mask=mask)
        plain = one_layer(kernels, plain_kinds, nd_model_vector(tower), cand_tower, k=0, option=option, mask=mask)
        assert mm["comp"] > 0.0
        for name in STAGE_FIELDS:
            assert mm[name] == pytest.approx(plain[name], rel=1e-15, abs=0.0), (option, mask, name)
        # and the text kind of the same walk is not the tower's
        text_layer = one_layer(kernels, mm_kinds, model_text, cand_text, k=0, option=option, mask=mask)
        assert text_layer["comp"] > 10 * mm["comp"]


# --- (c) census shares ---------------------------------------------------------------------------

def test_census_factors_at_the_hyperparallel_mask(kernels):
    census = kinds_of(dict(SUB, census_att=0.5, census_ffn=0.25))
    plain = kinds_of(SUB)
    f = factors(kernels, census, OPTION_SELECTIVE, HYPER_POLICY_MASK)
    g = factors(kernels, plain, OPTION_SELECTIVE, HYPER_POLICY_MASK)
    # 0x81 keeps attBMM and attUp; every other switch recomputes.
    expected = dict(attMM=0.5, linrec=0.0, ffMM=0.25, attBMM=0.0, softmax=1.0, headCast=1.0, gather=1.0,
                    ffAct=1.0, normOp=1.0, qknorm=1.0, dropout=1.0, dispatch=0.0)
    np.testing.assert_array_equal(f, [expected[op] for op in ND_OPS])
    np.testing.assert_array_equal(g, [dict(expected, attMM=0.0, ffMM=0.0)[op] for op in ND_OPS])
    # FULL and NONE ignore the census.
    np.testing.assert_array_equal(factors(kernels, census, OPTION_FULL, HYPER_POLICY_MASK), np.ones(len(ND_OPS)))
    np.testing.assert_array_equal(factors(kernels, census, OPTION_NONE, HYPER_POLICY_MASK), np.zeros(len(ND_OPS)))
    # census_att = 0 is a census (it re-runs none of attMM, but census_ffn of ffMM).
    zero = factors(kernels, kinds_of(dict(SUB, census_att=0.0, census_ffn=0.75)), OPTION_SELECTIVE, HYPER_POLICY_MASK)
    assert (zero[OP["attMM"]], zero[OP["ffMM"]]) == (0.0, 0.75)


def test_census_recompute_load_by_hand(kernels):
    L = sub_loads()
    plain = sum(L.values())
    switched = L["softmax"] + L["headCast"] + L["gather"] + L["ffAct"] + L["normOp"] + L["qknorm"] + L["dropout"]
    with_census = one_layer(kernels, kinds_of(dict(SUB, census_att=0.5, census_ffn=0.25)), model_of(), cand_of(),
                            option=OPTION_SELECTIVE, mask=HYPER_POLICY_MASK)
    without = one_layer(kernels, kinds_of(SUB), model_of(), cand_of(),
                        option=OPTION_SELECTIVE, mask=HYPER_POLICY_MASK)
    # recomputed = Σ (1 + f)·load: plain + the switched ops + 0.5·attMM + 0.25·ffMM.
    assert with_census["comp"] == without["comp"] == pytest.approx(plain, rel=1e-15)
    assert without["recomp"] == pytest.approx(plain + switched, rel=1e-15)
    assert with_census["recomp"] == pytest.approx(plain + switched + 0.5 * 4608 + 0.25 * 7680, rel=1e-15)
    assert with_census["recomp"] - without["recomp"] == pytest.approx(0.5 * L["attMM"] + 0.25 * L["ffMM"], rel=1e-12)
    # the census changes compute only: comm is the same
    for name in ("dp", "dp_reduce", "tp", "ep", "cp", "recomm"):
        assert with_census[name] == without[name]


@pytest.mark.parametrize("mask", [HYPER_POLICY_MASK & ~BIT["attUp"], HYPER_POLICY_MASK | BIT["gather"], 0, ALL_KEPT])
def test_another_mask_ignores_the_census(kernels, mask):
    census = kinds_of(dict(SUB, census_att=0.5, census_ffn=0.25))
    np.testing.assert_array_equal(factors(kernels, census, OPTION_SELECTIVE, mask),
                                  factors(kernels, kinds_of(SUB), OPTION_SELECTIVE, mask))
    a = one_layer(kernels, census, model_of(), cand_of(), option=OPTION_SELECTIVE, mask=mask)
    b = one_layer(kernels, kinds_of(SUB), model_of(), cand_of(), option=OPTION_SELECTIVE, mask=mask)
    assert a == b


def test_census_replaces_the_mla_attup_share(kernels):
    mla = dict(SUB, is_mla=1, mla_w=1000.0, mla_up=250.0, census_att=0.5, census_ffn=0.25)
    # at the policy's mask (attUp kept) the census; with attUp recomputed the MLA share, no census
    f = factors(kernels, kinds_of(mla), OPTION_SELECTIVE, HYPER_POLICY_MASK)
    assert (f[OP["attMM"]], f[OP["ffMM"]]) == (0.5, 0.25)
    g = factors(kernels, kinds_of(mla), OPTION_SELECTIVE, HYPER_POLICY_MASK & ~BIT["attUp"])
    assert (g[OP["attMM"]], g[OP["ffMM"]]) == (0.25, 0.0)
    h = factors(kernels, kinds_of(dict(mla, census_att=-1)), OPTION_SELECTIVE, HYPER_POLICY_MASK)
    assert (h[OP["attMM"]], h[OP["ffMM"]]) == (0.0, 0.0)        # attUp kept: no share either


# --- (d) parity ----------------------------------------------------------------------------------

def random_case(rng):
    n_kinds = int(rng.integers(1, 4))
    kinds = np.zeros((n_kinds, len(KIND_FIELDS)))
    for k in range(n_kinds):
        a = int(rng.choice([1, 2, 4, 8, 16]))
        row = dict(att_a=a, att_n_kv=int(rng.integers(1, a + 1)), att_dh=float(rng.choice([0, 16, 64, 80, 128])),
                   att_gate=int(rng.integers(0, 2)), is_moe=int(rng.integers(0, 2)), is_mla=int(rng.random() < 0.2),
                   ffn_width=float(rng.integers(64, 20000)))
        if row["is_mla"]:
            row.update(qk_nope=float(rng.choice([0, 64])), dhr=float(rng.choice([0, 32])),
                       mla_w=float(rng.uniform(1e5, 1e7)), mla_up=float(rng.uniform(1e4, 1e5)))
        if rng.random() < 0.2:
            row.update(lin_n_v=int(rng.integers(1, 32)), lin_d_k=128, lin_d_v=128, n_linrec=1)
        for op in ("attMM", "attBMM", "ffMM", "softmax", "dropout", "normOp", "gather", "headCast", "ffAct", "qknorm"):
            row[f"n_{op}"] = int(rng.integers(0, 5))
        row["n_dispatch"] = row["is_moe"]
        row.update(p_nonexp=float(rng.uniform(0, 1e9)), p_routed_base=float(rng.uniform(0, 1e10)) * row["is_moe"],
                   p_shared=float(rng.uniform(0, 1e8)) * row["is_moe"])
        # the submodule: the model's (0), a tower's, or odd values
        row.update(sub_h=float(rng.choice([0, 1280, 3584, 7168])), sub_a=float(rng.choice([0, 16, 28, 64])),
                   sub_hff=float(rng.choice([0, 3420, 18944])),
                   sub_seq=float(rng.choice([0, 0, 256, 1024, 4096, -1])))
        if rng.random() < 0.05:
            row[str(rng.choice(["sub_h", "sub_a", "sub_hff", "sub_seq"]))] = math.nan
        census = rng.random() < 0.5
        row.update(census_att=float(rng.uniform(0, 1)) if census else -1.0,
                   census_ffn=float(rng.uniform(0, 1)) if census else -1.0)
        if census and rng.random() < 0.1:
            row["census_att"] = 0.0
        for name, value in row.items():
            kinds[k, KIND[name]] = value
    model = model_of(h=float(rng.choice([1024, 3584, 7168])), a=float(rng.choice([8, 28, 64])),
                     hff=float(rng.integers(256, 30000)), v=float(rng.integers(1000, 160000)),
                     n_exp=int(rng.choice([1, 8, 64])), n_chosen=float(rng.integers(0, 9)),
                     n_shared=float(rng.integers(0, 3)), hff_exp=float(rng.integers(0, 4096)),
                     shared_gate=float(rng.integers(0, 2)), dc_kv=float(rng.choice([0, 512])),
                     n_mtp=float(rng.integers(0, 3)), default_kind=float(rng.integers(0, n_kinds)))
    t = int(rng.choice([1, 2, 4, 8]))
    p = int(rng.choice([1, 1, 2, 4]))
    cand = cand_of(b=float(rng.integers(1, 5)), s=float(rng.choice([1024, 4096, 32768])), t=t,
                   sp=float(rng.choice([1, t])), cp=float(rng.choice([1, 2, 4])), ep=float(rng.choice([1, 2, 8])),
                   t_exp=float(rng.choice([1, 2])), d=float(rng.choice([1, 2, 8])), d_exp=float(rng.choice([1, 2])),
                   p=p, vp=float(rng.choice([1, 2])), m=float(rng.integers(1, 17)),
                   bytes_p=float(rng.choice([2, 4])), bytes_grad=float(rng.choice([0, 2, 4])),
                   cap_fact=float(rng.uniform(1, 1.5)), comm_d_non_exp=float(rng.choice([0, 2, 3])),
                   comm_d_exp=float(rng.choice([0, 2, 3])), comm_t=float(rng.integers(0, 2)),
                   comm_ep=float(rng.integers(0, 2)), comm_cp=float(rng.integers(0, 2)),
                   cp_ring=float(rng.integers(0, 2)), shard_nonexp_partial=float(rng.choice([1, 2, 8])),
                   fsdp=float(rng.integers(0, 2)), reshard=float(rng.integers(0, 2)),
                   dpn=float(rng.choice([8, 16])), is_a3=float(rng.integers(0, 2)), dp_overlap=0.9,
                   tp_overlap=0.5, ep_local_tokens=float(rng.choice([0, 0, 5000])))
    n_slots = int(rng.integers(1, 5))
    slot_option = rng.integers(0, 3, n_slots).astype(np.int64)
    slot_mask = np.where(rng.random(n_slots) < 0.5, HYPER_POLICY_MASK, rng.integers(0, 256, n_slots)).astype(np.int64)
    counts = rng.integers(0, 6, (p, n_kinds * n_slots)).astype(np.float64)
    emb = int(rng.choice([-1, 0]))
    out_stage = int(rng.choice([-1, p - 1]))
    options = options_of(ratio_type=int(rng.integers(0, 4)), rec_type=int(rng.integers(0, 3)))
    return kinds, model, cand, counts, slot_option, slot_mask, emb, out_stage, options


def run_case(kernels, case) -> dict:
    kinds, model, cand, counts, slot_option, slot_mask, emb, out_stage, options = case
    out = {"loads": np.empty((len(kinds), len(ND_OPS))),
           "factors": np.empty((len(kinds), len(slot_option), len(ND_OPS)))}
    for k in range(len(kinds)):
        kernels.nd_op_loads(kinds, model, cand, k, out["loads"][k])
        for o in range(len(slot_option)):
            kernels.nd_recompute_factors(kinds, k, int(slot_option[o]), int(slot_mask[o]), out["factors"][k, o])
    stage = np.empty((counts.shape[0], len(STAGE_FIELDS)))
    kernels.nd_stage_sums(kinds, model, cand, counts, slot_option, slot_mask, emb, out_stage, stage)
    out["stage"] = stage
    parts = np.empty(len(PART_NAMES))
    times = np.empty(stage.shape[0])
    out["total"] = kernels.nd_combine(stage, cand, model, options, np.zeros(0), -1, parts, times)
    out["parts"], out["times"] = parts, times
    return out


@pytest.mark.cython
def test_parity_random_submodules_and_census(ckernels, pykernels):
    rng = np.random.default_rng(20240613)
    n_census_sel = 0
    for i in range(400):
        case = random_case(rng)
        kinds, slot_option, slot_mask = case[0], case[4], case[5]
        n_census_sel += int(np.any(kinds[:, KIND["census_att"]] >= 0)
                            and np.any((slot_option == OPTION_SELECTIVE) & (slot_mask == HYPER_POLICY_MASK)))
        c_out, py_out = run_case(ckernels, case), run_case(pykernels, case)
        for name, value in py_out.items():
            np.testing.assert_allclose(c_out[name], value, rtol=1e-12, atol=0, equal_nan=True,
                                       err_msg=f"case {i}: {name}")
    assert n_census_sel > 50          # the census path is exercised
