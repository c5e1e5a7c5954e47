"""ND's score kernels (kernels/nd_*.pxi, ndcost/kernels/nd_*.py) against hand-derived values, and in parity.

Arrays are built by hand with the ABI indices of ndcost.kernels.columns. The small dims used
throughout: b = 1, s = 8, h = 4, model heads A = 2, kind heads a = 2, n_kv = 1, d_h = 2,
t = 2, cp = 1, sp = 1, bytes_p = 2, so that bytes_p/t/cp = 1 and an op's load is its formula.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from ndcost.kernels.columns import (
    CAND, KIND, KIND_FIELDS, MODEL, OPTION_FULL, OPTION_NONE, OPTION_SELECTIVE, PART, PART_NAMES, STAGE, STAGE_FIELDS,
)
from ndcost.kernels.nd_ops import ND_OPS
from ndcost.spec.recompute_spec import ALL_KEPT, SWITCHES

from nd_arrays import cand_of, kinds_of, model_of, options_of

OP = {name: i for i, name in enumerate(ND_OPS)}
BIT = {name: 1 << i for i, name in enumerate(SWITCHES)}
NOT_GATHER = ALL_KEPT & ~BIT["gather"]

COUNTS_ONE = {f"n_{op}": 1.0 for op in ND_OPS}
DENSE = dict(COUNTS_ONE, att_a=2, att_n_kv=1, att_dh=2, ffn_width=6, n_linrec=0.0, n_dispatch=0.0)
MOE = dict(DENSE, is_moe=1, ffn_width=3, n_dispatch=1.0)
# ND's default op profile (4/2/3/1/0/2/4/1/1/0), the counts the comm tests price.
PROFILE = dict(att_a=2, att_n_kv=1, att_dh=2, ffn_width=6, n_attMM=4, n_attBMM=2, n_ffMM=3,
               n_softmax=1, n_dropout=0, n_normOp=2, n_gather=4, n_headCast=1, n_ffAct=1)
MOE_PROFILE = dict(PROFILE, is_moe=1, ffn_width=3, n_dispatch=1)
MOE_MODEL = dict(n_exp=8, n_chosen=2, n_shared=1, hff_exp=3, shared_gate=1)


def loads(kernels, kind, model=None, cand=None) -> np.ndarray:
    out = np.full(len(ND_OPS), -1.0)
    kernels.nd_op_loads(kinds_of(kind), model_of() if model is None else model,
                        cand_of() if cand is None else cand, 0, out)
    return out


def factors(kernels, kind, option, mask=ALL_KEPT) -> np.ndarray:
    out = np.full(len(ND_OPS), -1.0)
    kernels.nd_recompute_factors(kinds_of(kind), 0, option, mask, out)
    return out


def stage_sums(kernels, kinds, model, cand, counts, slots=((OPTION_NONE, ALL_KEPT),), emb=-1, out_stage=-1):
    counts = np.ascontiguousarray(counts, dtype=np.float64)
    out = np.full((counts.shape[0], len(STAGE_FIELDS)), -1.0)
    kernels.nd_stage_sums(kinds, model, cand, counts, np.array([o for o, _ in slots], dtype=np.int64),
                          np.array([m for _, m in slots], dtype=np.int64), emb, out_stage, out)
    return out


def one_layer(kernels, kind, option=OPTION_NONE, mask=ALL_KEPT, model=None, cand=None) -> dict:
    """The stage fields of one layer of *kind* alone on a one-stage pipeline."""
    row = stage_sums(kernels, kinds_of(kind), model_of() if model is None else model,
                     cand_of() if cand is None else cand, [[1.0]], slots=((option, mask),))[0]
    return dict(zip(STAGE_FIELDS, row))


def comm_total(row: dict) -> float:
    return row["tp"] + row["dp"] + row["ep"] + row["cp"]


def stage_row(**values) -> list:
    return [values.get(name, 0.0) for name in STAGE_FIELDS]


def combine(kernels, stage, cand, model=None, options=None, savings=(), focused=-1):
    parts = np.full(len(PART_NAMES), -1.0)
    stage = np.asarray(stage, dtype=np.float64)
    times = np.full(stage.shape[0], -1.0)
    total = kernels.nd_combine(stage, cand, model_of() if model is None else model,
                               options_of() if options is None else options,
                               np.asarray(savings, dtype=np.float64), focused, parts, times)
    return total, dict(zip(PART_NAMES, parts))


# --- op loads (docs/ND_MODEL.md §2.2, §2.3; seed op_table, _flavour_tables) ---------------------

def test_op_order_is_the_abi_order():
    assert ND_OPS == ("attMM", "linrec", "ffMM", "attBMM", "softmax", "headCast",
                      "gather", "ffAct", "normOp", "qknorm", "dropout", "dispatch")


@pytest.mark.parametrize("op", ND_OPS)
def test_each_op_lands_in_its_slot(kernels, op):
    # One count at a time on a MoE kind with GDN dims, where every op has a load: only that slot moves.
    kind = dict(MOE, lin_n_v=2, lin_d_k=3, lin_d_v=2, **{f"n_{o}": 0.0 for o in ND_OPS})
    kind[f"n_{op}"] = 1.0
    out = loads(kernels, kind, model_of(**MOE_MODEL))
    assert out[OP[op]] > 0.0
    assert np.count_nonzero(out) == 1


def test_dense_op_formulas(kernels):
    out = loads(kernels, DENSE)
    # d_q = a·d_h = 4, g = 1:            1.5·1·8·4·((1+1)·4 + 2·1·2)      = 48·12 = 576
    assert out[OP["attMM"]] == 576.0
    assert out[OP["linrec"]] == 0.0     # no GDN dims: no entry
    assert out[OP["ffMM"]] == 1152.0    # 6·b·s·h·hff = 6·1·8·4·6
    assert out[OP["attBMM"]] == 1536.0  # 3·b·s²·a·(d_qk + d_h) = 3·64·2·(2 + 2)
    assert out[OP["softmax"]] == 1664.0  # 13·A·b·s² = 13·2·64
    assert out[OP["headCast"]] == 384.0  # 3·A·b·s² = 3·2·64
    assert out[OP["gather"]] == 32.0    # b·s·h·(t − 1) = 32·1
    assert out[OP["ffAct"]] == 1008.0   # 21·b·s·hff = 21·8·6
    assert out[OP["normOp"]] == 1920.0  # 30·b·s·h·t/sp = 30·8·4·2
    assert out[OP["qknorm"]] == 1440.0  # 30·b·s·(a + n_kv)·d_h = 30·8·3·2
    assert out[OP["dropout"]] == 576.0  # 3·b·s·max(A·s = 16, 3·h·t/sp = 24) = 24·24
    assert out[OP["dispatch"]] == 0.0   # a dense kind never dispatches


def test_counts_and_bytes_scale_every_entry(kernels):
    base = loads(kernels, DENSE)
    doubled = loads(kernels, dict(DENSE, **{f"n_{op}": 2.0 for op in ND_OPS if op not in ("linrec", "dispatch")}))
    np.testing.assert_array_equal(doubled, 2.0 * base)
    # cp = 2 halves every entry (bytes_p/t/cp), bytes_p = 4 doubles it
    np.testing.assert_array_equal(loads(kernels, DENSE, cand=cand_of(cp=2)), base / 2.0)
    np.testing.assert_array_equal(loads(kernels, DENSE, cand=cand_of(bytes_p=4)), base * 2.0)


def test_zero_count_is_exactly_zero(kernels):
    out = loads(kernels, dict(DENSE, n_attMM=0.0, n_softmax=0.0, n_qknorm=0.0))
    assert out[OP["attMM"]] == out[OP["softmax"]] == out[OP["qknorm"]] == 0.0


def test_head_dim_defaults_to_h_over_a_and_gate_doubles_q(kernels):
    # att_dh = 0 -> d_h = h/a = 2: the same as stating 2
    np.testing.assert_array_equal(loads(kernels, dict(DENSE, att_dh=0)), loads(kernels, DENSE))
    # gate: 1.5·8·4·((2+1)·4 + 4) = 48·16
    assert loads(kernels, dict(DENSE, att_gate=1))[OP["attMM"]] == 768.0


def test_softmax_takes_the_models_heads_and_attbmm_the_kinds(kernels):
    out = loads(kernels, dict(DENSE, att_a=4, att_n_kv=2, att_dh=1), model_of(a=3))
    assert out[OP["softmax"]] == 13 * 3 * 64  # model A = 3
    assert out[OP["attBMM"]] == 3 * 64 * 4 * (1 + 1)  # kind a = 4, d_h = 1


def test_gdn_linrec(kernels):
    out = loads(kernels, dict(DENSE, lin_n_v=2, lin_d_k=3, lin_d_v=2, n_linrec=1))
    # 3·b·s·n_v·(2·64·(3·3 + 2·2) + 6·3·2) = 48·(1664 + 36)
    assert out[OP["linrec"]] == 81600.0


def test_moe_expert_table_and_dispatch(kernels):
    out = loads(kernels, dict(MOE, n_ffMM=3), model_of(**MOE_MODEL), cand_of(cap_fact=1.25, ep=2))
    # experts = hff_exp·(max(1, n_chosen)·cap + n_shared) = 3·(2·1.25 + 1) = 10.5
    # width = experts + (n_exp + gate)/n_ff = 10.5 + 9/3 = 13.5; ffMM = 6·8·4·13.5·3 (count)
    assert out[OP["ffMM"]] == 6 * 8 * 4 * 13.5 * 3
    assert out[OP["ffAct"]] == 21 * 8 * 10.5       # 21·b·s·experts
    # dispatch = 1040·b·s·h·max(1, n_chosen)·max(1, ep) = 1040·32·2·2
    assert out[OP["dispatch"]] == 133120.0
    # no shared gate without shared experts, the router over n_ff = n_ffMM = 1 matmul:
    # width = 3·(2·1 + 0) + (8 + 0)/1 = 14
    out = loads(kernels, MOE, model_of(**dict(MOE_MODEL, n_shared=0)), cand_of())
    assert out[OP["ffMM"]] == 192 * 14
    # moe_dispatch 0 prices none
    assert loads(kernels, MOE, model_of(**MOE_MODEL), cand_of(moe_dispatch=0))[OP["dispatch"]] == 0.0


def test_dense_kind_runs_the_models_hff(kernels):
    # ND's op_table reads cfg.hff for a dense kind, not the kind's ffn_width
    out = loads(kernels, dict(DENSE, ffn_width=100), model_of(hff=6))
    assert out[OP["ffMM"]] == 1152.0


def test_mla_attmm_and_qk_width(kernels):
    mla = dict(DENSE, is_mla=1, mla_w=100, mla_up=30, n_attMM=4, qk_nope=3, dhr=1)
    out = loads(kernels, mla)
    assert out[OP["attMM"]] == 6 * 8 * 100           # 6·b·s·W/(n_attMM or 4) x n_attMM
    assert out[OP["attBMM"]] == 3 * 64 * 2 * (4 + 2)  # d_qk = qk_nope + dhr = 4
    assert loads(kernels, dict(mla, n_attMM=0))[OP["attMM"]] == 0.0


@pytest.mark.parametrize("bad", [dict(t=0), dict(cp=0), dict(sp=-1), dict(t=math.nan)])
def test_bad_divisors_are_nan_everywhere(kernels, bad):
    assert np.isnan(loads(kernels, DENSE, cand=cand_of(**bad))).all()
    assert np.isnan(loads(kernels, dict(DENSE, att_a=0))).all()


def test_op_loads_checks_lengths(kernels):
    with pytest.raises(ValueError, match="out"):
        kernels.nd_op_loads(kinds_of(DENSE), model_of(), cand_of(), 0, np.zeros(11))
    with pytest.raises(ValueError, match="cand"):
        kernels.nd_op_loads(kinds_of(DENSE), model_of(), np.zeros(3), 0, np.zeros(12))
    with pytest.raises(ValueError, match="k must"):
        kernels.nd_op_loads(kinds_of(DENSE), model_of(), cand_of(), 1, np.zeros(12))


# --- recompute factors (docs/ND_MODEL.md §2.4) -------------------------------------------------

def test_full_and_none_factors(kernels):
    assert (factors(kernels, DENSE, OPTION_FULL, 0) == 1.0).all()
    assert (factors(kernels, DENSE, OPTION_NONE) == 0.0).all()
    assert np.isnan(factors(kernels, DENSE, 7)).all()


def test_selective_factors_follow_the_switches(kernels):
    assert (factors(kernels, DENSE, OPTION_SELECTIVE, ALL_KEPT) == 0.0).all()
    switched = {"attBMM", "headCast", "dropout", "softmax", "normOp", "qknorm", "gather", "ffAct"}
    out = factors(kernels, DENSE, OPTION_SELECTIVE, 0)
    assert {op for op in ND_OPS if out[OP[op]] == 1.0} == switched
    for switch in SWITCHES[:7]:
        out = factors(kernels, DENSE, OPTION_SELECTIVE, ALL_KEPT & ~BIT[switch])
        expected = {switch, "qknorm"} if switch == "normOp" else {switch}
        assert {op for op in ND_OPS if out[OP[op]] == 1.0} == expected, switch
        assert {op for op in ND_OPS if out[OP[op]] != 0.0} == expected, switch


def test_mla_attup_share(kernels):
    mla = dict(DENSE, is_mla=1, mla_w=100, mla_up=30)
    assert factors(kernels, mla, OPTION_SELECTIVE, ALL_KEPT & ~BIT["attUp"])[OP["attMM"]] == 0.3
    assert factors(kernels, mla, OPTION_SELECTIVE, ALL_KEPT)[OP["attMM"]] == 0.0
    # attUp acts on MLA kinds only
    assert factors(kernels, DENSE, OPTION_SELECTIVE, ALL_KEPT & ~BIT["attUp"])[OP["attMM"]] == 0.0


# --- FSDP part traffic (docs/ND_MODEL.md §2.6 unit test) ---------------------------------------

def test_fsdp_part_traffic(kernels):
    out = np.zeros(2)
    kernels.nd_fsdp_part_traffic(100, 1, 4, 16, 2, 0.5, 2, 2, out)
    # shards 4, copies 4: 0.75·100·(2·2 + 2) + 2·0.75·25·2·0.5
    assert tuple(out) == (0.75 * 100 * 6 + 2 * 0.75 * 25 * 2 * 0.5, 2 * 0.75 * 25 * 2 * 0.5)
    kernels.nd_fsdp_part_traffic(100, 1, 1, 4, 2, 1, 2, 2, out)
    assert tuple(out) == (2 * 0.75 * 100 * 2, 2 * 0.75 * 100 * 2)  # no shards: all-reduce only
    kernels.nd_fsdp_part_traffic(0, 0, 0, 4, 2, 1, 2, 2, out)
    assert tuple(out) == (0.0, 0.0)  # no parameters, nothing sent
    kernels.nd_fsdp_part_traffic(100, 0, 4, 16, 2, 1, 2, 2, out)
    assert np.isnan(out).all()
    with pytest.raises(ValueError, match="out"):
        kernels.nd_fsdp_part_traffic(100, 1, 4, 16, 2, 1, 2, 2, np.zeros(1))


# --- compute walk (docs/ND_MODEL.md §2.5) ------------------------------------------------------

def test_compute_walk_plain_and_recomputed(kernels):
    layer = loads(kernels, DENSE).sum()
    switched = layer - sum(loads(kernels, DENSE)[OP[op]] for op in ("attMM", "ffMM"))
    model, cand = model_of(), cand_of()
    slots = ((OPTION_NONE, ALL_KEPT), (OPTION_FULL, 0), (OPTION_SELECTIVE, 0))
    out = stage_sums(kernels, kinds_of(DENSE), model, cand, [[2.0, 1.0, 1.0]], slots=slots)[0]
    assert out[STAGE["comp"]] == 4 * layer
    # FULL re-runs the whole layer, SEL with every switch off the switched ops
    assert out[STAGE["recomp"]] == 4 * layer + layer + switched


def test_output_layer_and_embedding(kernels):
    kinds = kinds_of(DENSE)
    out = stage_sums(kernels, kinds, model_of(), cand_of(comm_t=0), [[0.0], [0.0]], emb=0, out_stage=1)
    # embedding: no compute; output: (1/16)·6·b·v·h·s·bytes_p/t = 6·10·4·8/16 = 120, both modes
    assert out[0, STAGE["comp"]] == 0.0
    assert out[1, STAGE["comp"]] == out[1, STAGE["recomp"]] == 120.0
    # output not divided by cp
    assert stage_sums(kernels, kinds, model_of(), cand_of(comm_t=0, cp=2), [[0.0]], out_stage=0)[0, 0] == 120.0
    # MLA model (dc_kv != 0): ND counts the output n_mtp times
    assert stage_sums(kernels, kinds, model_of(dc_kv=8, n_mtp=2), cand_of(comm_t=0), [[0.0]], out_stage=0)[0, 0] == 240.0
    assert stage_sums(kernels, kinds, model_of(dc_kv=8, n_mtp=0), cand_of(comm_t=0), [[0.0]], out_stage=0)[0, 0] == 0.0


# --- comm walk (docs/ND_MODEL.md §2.6) ---------------------------------------------------------

def test_dense_tp(kernels):
    # 0.25·n_gather·s·b·h + 0.25·n_gather·s·b·ffn_width = 0.25·4·8·4 + 0.25·4·8·6 = 32 + 48
    assert one_layer(kernels, PROFILE)["tp"] == 80.0
    assert one_layer(kernels, PROFILE, cand=cand_of(cp=2))["tp"] == 40.0   # × comm_t/cp
    assert one_layer(kernels, PROFILE, cand=cand_of(comm_t=0))["tp"] == 0.0


def test_moe_tp_uses_h_squared(kernels):
    row = one_layer(kernels, MOE_PROFILE, model=model_of(**MOE_MODEL), cand=cand_of(ep=2))
    # ND's oddity: 0.25·n_gather·h·h·bytes_c·n_attMM = 0.25·4·16·2·4 = 128, plus
    # 0.25·n_gather·h·bytes_c·n_ffMM·(n_exp/ep·hff_exp + n_shared·hff_exp) = 24·(12 + 3) = 360
    assert row["tp"] == 488.0


def test_ep(kernels):
    model = model_of(**MOE_MODEL)
    # t_local = n_chosen·s·b/cp = 16; ·(ep−1)/ep = 8; ·h·bytes_c·2 = 8·4·2·2
    assert one_layer(kernels, MOE_PROFILE, model=model, cand=cand_of(ep=2, comm_ep=1))["ep"] == 128.0
    assert one_layer(kernels, MOE_PROFILE, model=model, cand=cand_of(ep=2, comm_ep=0))["ep"] == 0.0
    assert one_layer(kernels, MOE_PROFILE, model=model, cand=cand_of(ep=1, comm_ep=1))["ep"] == 0.0
    # the busiest rank's tokens replace t_local: 10·(3/4)·4·2·2
    row = one_layer(kernels, MOE_PROFILE, model=model, cand=cand_of(ep=4, comm_ep=1, ep_local_tokens=10))
    assert row["ep"] == 120.0
    # a dense kind runs ep = 1 (ND's bind_layer_stack): no EP traffic
    assert one_layer(kernels, PROFILE, model=model, cand=cand_of(ep=2, comm_ep=1))["ep"] == 0.0


def test_cp_ring_and_ulysses(kernels):
    ring = cand_of(comm_cp=1, cp_ring=1, comm_t=0)
    # rf = 1 (plain, p = 1): 2·s·b·((2·0.5 + 0.5)·n_attMM·h + n_ffMM·ffn_width)/t = 16·(24 + 18)/2
    assert one_layer(kernels, PROFILE, cand=ring)["cp"] == 336.0
    # Ulysses: (0.5 + 0.5) = 1 in place of 1.5: 16·(16 + 18)/2
    assert one_layer(kernels, PROFILE, cand=cand_of(comm_cp=1, cp_ring=0, comm_t=0))["cp"] == 272.0
    # p > 1: rf = 0, coefficient 0.5: 16·(8 + 18)/2
    assert one_layer(kernels, PROFILE, cand=cand_of(comm_cp=1, cp_ring=1, comm_t=0, p=2))["cp"] == 208.0
    # SEL with the gather recomputed: rf = 0 too
    assert one_layer(kernels, PROFILE, OPTION_SELECTIVE, NOT_GATHER, cand=ring)["cp"] == 208.0
    assert one_layer(kernels, PROFILE, cand=cand_of(comm_cp=0))["cp"] == 0.0


def test_selective_gather_drops_tp(kernels):
    # rec_coeff: a SEL layer that recomputes its gather prices no TP in the plain walk
    assert one_layer(kernels, PROFILE, OPTION_SELECTIVE, NOT_GATHER)["tp"] == 0.0
    assert one_layer(kernels, PROFILE, OPTION_SELECTIVE, ALL_KEPT)["tp"] == 80.0
    assert one_layer(kernels, PROFILE, OPTION_FULL, 0)["tp"] == 80.0


def test_recompute_resends(kernels):
    model = model_of(**MOE_MODEL)
    cand = cand_of(ep=2, comm_ep=1, comm_cp=1, cp_ring=1)
    plain = one_layer(kernels, MOE_PROFILE, model=model, cand=cand)
    tp, ep = plain["tp"], plain["ep"]   # 488, 128
    # MoE CP: 2·s·b·(1.5·4·4 + 3·3)/2 = 16·33/2 = 264 (rf = 1); with rf = 0: 16·(8 + 9)/2 = 136
    assert (tp, ep, plain["cp"]) == (488.0, 128.0, 264.0)

    def resent(option, mask):
        row = one_layer(kernels, MOE_PROFILE, option, mask, model=model, cand=cand)
        return row["recomm"] - comm_total(row)

    assert plain["recomm"] == comm_total(plain)                  # plain: nothing again
    assert resent(OPTION_SELECTIVE, ALL_KEPT) == 0.0             # gather kept: nothing again
    assert resent(OPTION_SELECTIVE, NOT_GATHER) == tp + 136 / 2  # the full TP, no EP, half the CP
    assert resent(OPTION_FULL, 0) == tp + ep + 264 / 2           # TP + EP + half the CP


def test_dp_zero_counts(kernels):
    moe = dict(MOE_PROFILE, p_nonexp=100, p_routed_base=80, p_shared=20)
    model = model_of(**MOE_MODEL)

    def dp(**modes):
        row = one_layer(kernels, moe, model=model, cand=cand_of(t=2, t_exp=2, ep=2, **modes))
        assert row["dp_reduce"] == 0.0   # ND's ZeRO path has no all-reduce share
        return row["dp"]

    assert dp() == 0.0                                   # plain DDP: no DP traffic in ND
    assert dp(comm_d_non_exp=2) == 100 / 2 + 100 / 2     # non_exp/(cp·t) + non_exp/t
    assert dp(comm_d_non_exp=3) == 50.0                  # non_exp/t
    # E = p_routed_base/t_exp + p_shared = 40 + 20: E/(cp·t_exp·ep) + E/max(ep, t_exp) = 15 + 30
    assert dp(comm_d_exp=2) == 45.0
    assert dp(comm_d_exp=3) == 15.0
    # every option is priced as NOT_REC
    row = one_layer(kernels, moe, OPTION_FULL, 0, model=model, cand=cand_of(t=2, t_exp=2, ep=2, comm_d_non_exp=3))
    assert row["dp"] == 50.0


def test_dp_fsdp_body_and_roots(kernels):
    kind = dict(PROFILE, p_nonexp=100)
    fsdp = dict(t=1, fsdp=1, reshard=1, m=2, d=16, shard_nonexp_partial=4, bytes_grad=2,
                shard_embed=4, gather_embed=2)
    cand = cand_of(**fsdp)
    row = one_layer(kernels, kind, cand=cand)
    # the §2.6 unit part: (100, t = 1, 4, d·cp·t = 16), gathers 2 (reshard), reduces 1/m (4 > t·cp)
    assert (row["dp"], row["dp_reduce"]) == (487.5, 37.5)
    out = stage_sums(kernels, kinds_of(kind), model_of(), cand, [[0.0]], emb=0, out_stage=0)[0]
    # embedding (h·v = 40, computed 4/2 = 2, kept 4, group 16·2): whole 20, shards 2, copies 8, gathers 1:
    #   0.5·20·(2 + 2) + 2·(7/8)·10·2·0.5 = 40 + 17.5
    # output (h·v + v = 50, t = 1, kept 4, group 16): 0.75·50·4 + 2·0.75·12.5·2·0.5 = 150 + 18.75
    assert out[STAGE["dp"]] == 57.5 + 168.75
    assert out[STAGE["dp_reduce"]] == 17.5 + 18.75
    # tied embedding with p ≤ 1: no embedding part
    tied = stage_sums(kernels, kinds_of(kind), model_of(), cand_of(**fsdp, tie_emb=1),
                      [[0.0]], emb=0, out_stage=0)[0]
    assert tied[STAGE["dp"]] == 168.75


def test_nodes_price_tp_and_ep_as_the_default_kind(kernels):
    kinds = kinds_of(PROFILE, MOE_PROFILE)
    cand = cand_of(ep=2, comm_ep=1)
    dense_default = stage_sums(kernels, kinds, model_of(**MOE_MODEL, default_kind=0), cand, [[0.0, 0.0]], emb=0)[0]
    moe_default = stage_sums(kernels, kinds, model_of(**MOE_MODEL, default_kind=1), cand, [[0.0, 0.0]], emb=0)[0]
    assert (dense_default[STAGE["tp"]], dense_default[STAGE["ep"]]) == (80.0, 0.0)
    assert (moe_default[STAGE["tp"]], moe_default[STAGE["ep"]]) == (488.0, 128.0)
    assert dense_default[STAGE["cp"]] == 0.0 and dense_default[STAGE["comp"]] == 0.0
    with pytest.raises(ValueError, match="default_kind"):
        stage_sums(kernels, kinds, model_of(default_kind=2), cand, [[0.0, 0.0]], emb=0)


def test_per_stage_multipliers_and_a3(kernels):
    kind = dict(MOE_PROFILE, p_nonexp=100)
    model = model_of(**MOE_MODEL)
    degrees = dict(t=16, ep=16, cp=24, t_exp=1, comm_ep=1, comm_cp=1, comm_d_non_exp=3)
    neutral = one_layer(kernels, kind, OPTION_FULL, 0, model, cand_of(**degrees))
    scaled = one_layer(kernels, kind, OPTION_FULL, 0, model,
                       cand_of(**degrees, dpn=8, dp_overlap=0.9, tp_overlap=0.5, is_a3=1))
    # DP ×(1 − 0.9)/2; TP ×⌊16/8⌋·(1 − 0.5)/2; EP ×⌊16/8⌋/2; CP ×⌊24/8⌋/2
    f = dict(dp=0.1 * 0.5, tp=2 * 0.5 * 0.5, ep=2 * 0.5, cp=3 * 0.5)
    for name, factor in f.items():
        assert neutral[name] > 0.0
        assert scaled[name] == pytest.approx(factor * neutral[name], rel=1e-15), name
    # the re-sent volumes take the same multipliers: FULL sends TP + EP + CP/2 again
    resent = f["tp"] * neutral["tp"] + f["ep"] * neutral["ep"] + f["cp"] * neutral["cp"] / 2
    assert scaled["recomm"] - comm_total(scaled) == pytest.approx(resent, rel=1e-12)
    # a degree below dpn multiplies by max(1, 0) = 1
    low = one_layer(kernels, kind, OPTION_NONE, ALL_KEPT, model, cand_of(**dict(degrees, t=4), dpn=8))
    assert low["tp"] == one_layer(kernels, kind, OPTION_NONE, ALL_KEPT, model, cand_of(**dict(degrees, t=4)))["tp"]


def test_dp_reduce_takes_dps_multipliers(kernels):
    kind = dict(PROFILE, p_nonexp=100)
    cand = dict(t=1, fsdp=1, reshard=1, m=2, d=16, shard_nonexp_partial=4, bytes_grad=2)
    row = one_layer(kernels, kind, cand=cand_of(**cand, dp_overlap=0.9, is_a3=1))
    assert row["dp"] == pytest.approx(487.5 * 0.05, rel=1e-15)
    assert row["dp_reduce"] == pytest.approx(37.5 * 0.05, rel=1e-15)


def test_counts_weigh_layers_per_stage_and_skip_zero_columns(kernels):
    kinds = kinds_of(PROFILE, dict(PROFILE, att_a=0))   # kind 1 would be NaN, but has no layer
    slots = ((OPTION_NONE, ALL_KEPT), (OPTION_FULL, 0))
    out = stage_sums(kernels, kinds, model_of(), cand_of(p=2), [[3.0, 1.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0]], slots=slots)
    one = one_layer(kernels, PROFILE, cand=cand_of(p=2))
    assert out[0, STAGE["comp"]] == 4 * one["comp"]
    assert out[1, STAGE["comp"]] == 2 * one["comp"]
    assert out[1, STAGE["recomp"]] == 4 * one["comp"]
    assert out[0, STAGE["tp"]] == 4 * one["tp"]
    assert np.isfinite(out).all()


def test_stage_sums_nan_and_checks(kernels):
    assert np.isnan(stage_sums(kernels, kinds_of(PROFILE), model_of(), cand_of(t_exp=0), [[1.0]])).all()
    with pytest.raises(ValueError, match="counts"):
        stage_sums(kernels, kinds_of(PROFILE), model_of(), cand_of(), [[1.0, 1.0]])
    with pytest.raises(ValueError, match="out_stage"):
        stage_sums(kernels, kinds_of(PROFILE), model_of(), cand_of(), [[1.0]], out_stage=1)
    with pytest.raises(ValueError, match="slot_mask"):
        kernels.nd_stage_sums(kinds_of(PROFILE), model_of(), cand_of(), np.ones((1, 1)), np.zeros(1, np.int64),
                              np.zeros(2, np.int64), -1, -1, np.zeros((1, len(STAGE_FIELDS))))
    with pytest.raises(ValueError, match="out"):
        kernels.nd_stage_sums(kinds_of(PROFILE), model_of(), cand_of(), np.ones((1, 1)), np.zeros(1, np.int64),
                              np.zeros(1, np.int64), -1, -1, np.zeros((2, len(STAGE_FIELDS))))


# --- stage, pipeline, P2P (docs/ND_MODEL.md §2.7-§2.10) ----------------------------------------

ROW = stage_row(comp=30.0, recomp=36.0, dp=2.0, dp_reduce=0.5, tp=1.0, ep=0.5, cp=0.5, recomm=6.0)


def assert_parts_sum(total, parts):
    assert math.isclose(sum(parts.values()), total, rel_tol=1e-9)


def test_combine_one_stage(kernels):
    # STATIC weight 10: perf = 30 + 10·4 = 70; re = (36 − 30 + 10·(6 − 4))/3 = 26/3; m = 4
    total, parts = combine(kernels, [ROW], cand_of(m=4), options=options_of(static_ratio=10.0))
    assert total == pytest.approx(4 * (70 + 26 / 3), rel=1e-15)
    assert parts["fw_compute"] == 40.0 and parts["bw_compute"] == 80.0
    assert parts["recompute"] == pytest.approx(4 * 26 / 3, rel=1e-15)
    assert parts["dp_comm"] == 4 * 15.0 and parts["dp_reduce"] == 4 * 5.0   # DP less its all-reduce
    assert (parts["tp_comm"], parts["ep_comm"], parts["cp_comm"]) == (40.0, 20.0, 20.0)
    assert parts["pp_comm"] == 0.0
    assert abs(parts["bubble"]) < 1e-12
    assert_parts_sum(total, parts)


def test_combine_one_chunk_per_stage(kernels):
    slow = stage_row(comp=60.0, recomp=60.0, recomm=0.0)
    total, parts = combine(kernels, [ROW, slow], cand_of(m=4, p=2), options=options_of(static_ratio=10.0))
    s0 = 70 + 26 / 3
    # S + (m − 1)·M, M = 70 + 26/3 (> 60): the straggler is stage 0
    assert total == pytest.approx(s0 + 60 + 3 * s0, rel=1e-15)
    assert parts["fw_compute"] == 40.0
    assert parts["bubble"] == pytest.approx(total - 4 * s0, rel=1e-12)
    assert_parts_sum(total, parts)


def test_combine_interleaved_with_p2p(kernels):
    stages = [stage_row(comp=10.0, recomp=10.0), stage_row(comp=30.0, recomp=30.0)]
    cand = cand_of(m=4, p=2, vp=2, sp=2)
    total, parts = combine(kernels, stages, cand, options=options_of(p2p=1, p2p_ratio=0.002))
    # S/vp + (m·vp − 1)·M/vp = 20 + 7·15 = 125; P2P: 0.002·(8·m·vp − 4·m)/p·M/sp = 0.002·48/2·30/2
    assert parts["pp_comm"] == pytest.approx(0.002 * 48 / 2 * 30 / 2, rel=1e-15)
    assert total == pytest.approx(125 + parts["pp_comm"], rel=1e-15)
    assert parts["fw_compute"] == pytest.approx(4 * 10.0, rel=1e-15)
    assert_parts_sum(total, parts)


def test_stage_savings_and_focus(kernels):
    stages = [ROW, ROW]
    cand = cand_of(m=2, p=2)
    opts = options_of(static_ratio=10.0)
    base, _ = combine(kernels, stages, cand, options=opts)
    total, parts = combine(kernels, stages, cand, options=opts, savings=[1.0, 2.0])
    s = 70 + 26 / 3
    # the straggler is now stage 0 (s − 1): S + (m − 1)·M
    assert total == pytest.approx((s - 1) + (s - 2) + (s - 1), rel=1e-15)
    assert parts["recompute"] == pytest.approx(2 * (26 / 3 - 1), rel=1e-15)
    assert base == pytest.approx(3 * s, rel=1e-15)
    _, focused = combine(kernels, stages, cand, options=opts, savings=[1.0, 2.0], focused=1)
    assert focused["recompute"] == pytest.approx(2 * (26 / 3 - 2), rel=1e-15)
    assert_parts_sum(total, parts)
    with pytest.raises(ValueError, match="stage_savings"):
        combine(kernels, stages, cand, options=opts, savings=[1.0])
    with pytest.raises(ValueError, match="stage_focused"):
        combine(kernels, stages, cand, options=opts, focused=2)


@pytest.mark.parametrize("model, weight", [
    (model_of(), 1.5 * (6 + 8) * 8192 / (4 + 8)),                        # dense: hff
    (model_of(**MOE_MODEL), 1.5 * (3 + 8) * 8192 / (4 + 8)),             # n_exp > 1: hff_exp
])
def test_dynamic_ratio(kernels, model, weight):
    total, parts = combine(kernels, [stage_row(comp=1.0, recomp=1.0, tp=1.0, recomm=1.0)], cand_of(), model=model,
                           options=options_of(ratio_type=0))
    assert parts["tp_comm"] == pytest.approx(weight, rel=1e-15)
    assert total == pytest.approx(1 + weight, rel=1e-15)


def test_compute_only_and_comm_only(kernels):
    total, parts = combine(kernels, [ROW], cand_of(), options=options_of(ratio_type=2))
    # comm_w = 0: 30 + (36 − 30)/3
    assert total == 32.0 and parts["tp_comm"] == 0.0 and parts["dp_reduce"] == 0.0
    total, parts = combine(kernels, [ROW], cand_of(), options=options_of(ratio_type=3))
    # comp_w = 0: 4 + (6 − 4)/3
    assert total == pytest.approx(4 + 2 / 3, rel=1e-15) and parts["fw_compute"] == 0.0
    assert_parts_sum(total, parts)


@pytest.mark.parametrize("rec_type, rerun", [
    (0, (6 + 20) / 3),   # WITH: compute and comm re-run
    (1, 0.0),            # NONE: no recompute term
    (2, 6 / 3),          # COMPUTE_ONLY
    (3, 20 / 3),         # COMM_ONLY
])
def test_rec_types(kernels, rec_type, rerun):
    total, parts = combine(kernels, [ROW], cand_of(), options=options_of(rec_type=rec_type, static_ratio=10.0))
    assert parts["recompute"] == pytest.approx(rerun, rel=1e-15)
    assert total == pytest.approx(70 + rerun, rel=1e-15)


def test_unknown_option_codes_are_nan(kernels):
    total, parts = combine(kernels, [ROW], cand_of(), options=options_of(ratio_type=9))
    assert math.isnan(total) and math.isnan(parts["fw_compute"])
    total, parts = combine(kernels, [ROW], cand_of(), options=options_of(rec_type=9))
    assert math.isnan(total) and math.isnan(parts["recompute"])


def test_combine_degenerate(kernels):
    total, parts = combine(kernels, [ROW], cand_of(m=0))
    assert math.isnan(total) and all(math.isnan(v) for v in parts.values())
    total, _ = combine(kernels, np.zeros((0, len(STAGE_FIELDS))), cand_of())
    assert math.isnan(total)


# --- ratios (seed apply_regression_coefficients) -------------------------------------------

def test_apply_ratios(kernels):
    parts = np.array([1.0, 2.0, 0.0, 4.0, 0.5, 3.0, 0.0, 1.0, 2.0, -1.0])
    ratios = np.array([2.0, 2.0, math.inf, 0.5, 4.0, 1.0, math.nan, 3.0, 1.0, 1.0])
    out = np.full(len(PART_NAMES), -1.0)
    score = kernels.nd_apply_ratios(parts, ratios, out)
    assert out[PART["recompute"]] == 0.0 and out[PART["ep_comm"]] == 0.0   # a zero stays zero
    np.testing.assert_array_equal(out, [2.0, 4.0, 0.0, 2.0, 2.0, 3.0, 0.0, 3.0, 2.0, -1.0])
    assert score == 17.0
    with pytest.raises(ValueError, match="ratios"):
        kernels.nd_apply_ratios(parts, np.ones(9), out)


# --- parity: compiled vs oracle --------------------------------------------------------------

def random_case(rng, **plant):
    n_kinds = int(rng.integers(1, 4))
    kinds = np.zeros((n_kinds, len(KIND_FIELDS)))
    for k in range(n_kinds):
        row = {}
        a = int(rng.choice([1, 2, 4, 8, 16]))
        row.update(att_a=a, att_n_kv=int(rng.integers(1, a + 1)), att_dh=float(rng.choice([0, 16, 64, 128])),
                   att_gate=int(rng.integers(0, 2)), is_moe=int(rng.integers(0, 2)), is_mla=int(rng.random() < 0.3))
        if row["is_mla"]:
            row.update(qk_nope=float(rng.choice([0, 64, 128])), dhr=float(rng.choice([0, 32, 64])),
                       mla_w=float(rng.uniform(1e5, 1e7)), mla_up=float(rng.uniform(1e4, 1e5)))
        if rng.random() < 0.3:
            row.update(lin_n_v=int(rng.integers(1, 32)), lin_d_k=128, lin_d_v=128, n_linrec=1)
        row["ffn_width"] = float(rng.integers(64, 20000))
        for op in ("attMM", "attBMM", "ffMM", "softmax", "dropout", "normOp", "gather", "headCast", "ffAct", "qknorm"):
            row[f"n_{op}"] = int(rng.integers(0, 5))
        row["n_dispatch"] = row["is_moe"]
        row.update(p_nonexp=float(rng.uniform(0, 1e9)), p_routed_base=float(rng.uniform(0, 1e10)) * row["is_moe"],
                   p_shared=float(rng.uniform(0, 1e8)) * row["is_moe"])
        for name, value in row.items():
            kinds[k, KIND[name]] = value
    n_exp = int(rng.choice([1, 8, 64, 256]))
    model = model_of(h=float(rng.choice([256, 1024, 4096, 7168])), a=float(rng.choice([8, 32, 64])),
                     hff=float(rng.integers(256, 30000)), v=float(rng.integers(1000, 160000)), n_exp=n_exp,
                     n_chosen=float(rng.integers(0, 9)), n_shared=float(rng.integers(0, 3)),
                     hff_exp=float(rng.integers(0, 4096)), shared_gate=float(rng.integers(0, 2)),
                     dc_kv=float(rng.choice([0, 512])), n_mtp=float(rng.integers(0, 3)),
                     default_kind=float(rng.integers(0, n_kinds)))
    t = int(rng.choice([1, 2, 4, 8, 16]))
    p = int(rng.choice([1, 2, 4, 8]))
    ep = int(rng.choice([1, 2, 4, 8, 16]))
    cand = cand_of(b=float(rng.integers(1, 5)), s=float(rng.choice([1024, 4096, 32768])), t=t,
                   sp=float(rng.choice([1, t])), cp=float(rng.choice([1, 2, 4, 16])), ep=ep,
                   t_exp=float(rng.choice([1, 2, 4])), d=float(rng.choice([1, 2, 8, 64])),
                   d_exp=float(rng.choice([1, 2, 8])), p=p, vp=float(rng.choice([1, 1, 2, 3])),
                   m=float(rng.integers(1, 33)), bytes_p=float(rng.choice([2, 4])), bytes_c=2.0,
                   bytes_grad=float(rng.choice([0, 2, 4])), cap_fact=float(rng.uniform(1, 1.5)),
                   moe_dispatch=float(rng.choice([0, 1040])), comm_d_non_exp=float(rng.choice([0, 2, 3])),
                   comm_d_exp=float(rng.choice([0, 2, 3])), comm_t=float(rng.integers(0, 2)),
                   comm_ep=float(rng.integers(0, 2)), comm_cp=float(rng.integers(0, 2)),
                   cp_ring=float(rng.integers(0, 2)), shard_nonexp_partial=float(rng.choice([1, 2, 8, 64])),
                   shard_exp=float(rng.choice([1, 2, 8])), shard_exp_partial=float(rng.choice([1, 4])),
                   shard_embed=float(rng.choice([1, 2, 8])), gather_embed=float(rng.choice([1, 2])),
                   fsdp=float(rng.integers(0, 2)), reshard=float(rng.integers(0, 2)),
                   tie_emb=float(rng.integers(0, 2)), dpn=float(rng.choice([8, 16])),
                   is_a3=float(rng.integers(0, 2)), dp_overlap=0.9, tp_overlap=0.5,
                   ep_local_tokens=float(rng.choice([0, 0, 5000])))
    for name, value in plant.items():
        if name in CAND:
            cand[CAND[name]] = value
    if plant.get("ep_is_n_exp"):
        cand[CAND["ep"]] = model[MODEL["n_exp"]] = 64.0
    p = int(cand[CAND["p"]])
    n_slots = int(rng.integers(1, 4))
    slot_option = rng.integers(0, 3, n_slots).astype(np.int64)
    slot_mask = rng.integers(0, 256, n_slots).astype(np.int64)
    counts = rng.integers(0, 6, (p, n_kinds * n_slots)).astype(np.float64)
    counts[:, rng.random(n_kinds * n_slots) < 0.3] = 0.0
    if plant.get("zero_counts"):
        counts[:] = 0.0
    emb = int(rng.choice([-1, 0]))
    out_stage = int(rng.choice([-1, p - 1]))
    options = options_of(ratio_type=int(rng.integers(0, 4)), rec_type=int(rng.integers(0, 4)),
                         p2p=int(rng.integers(0, 2)), static_ratio=1e4)
    savings = rng.uniform(0, 1e6, p) if rng.random() < 0.3 else np.zeros(0)
    focused = int(rng.integers(-1, p)) if rng.random() < 0.3 else -1
    return kinds, model, cand, counts, slot_option, slot_mask, emb, out_stage, options, savings, focused


def run_case(kernels, case):
    kinds, model, cand, counts, slot_option, slot_mask, emb, out_stage, options, savings, focused = case
    results = {}
    op_loads = np.empty((len(kinds), len(ND_OPS)))
    recompute = np.empty((len(kinds), len(slot_option), len(ND_OPS)))
    for k in range(len(kinds)):
        kernels.nd_op_loads(kinds, model, cand, k, op_loads[k])
        for o in range(len(slot_option)):
            kernels.nd_recompute_factors(kinds, k, int(slot_option[o]), int(slot_mask[o]), recompute[k, o])
    results["op_loads"], results["factors"] = op_loads, recompute
    stage = np.empty((counts.shape[0], len(STAGE_FIELDS)))
    kernels.nd_stage_sums(kinds, model, cand, counts, slot_option, slot_mask, emb, out_stage, stage)
    results["stage"] = stage
    parts = np.empty(len(PART_NAMES))
    times = np.empty(stage.shape[0])
    results["total"] = kernels.nd_combine(stage, cand, model, options, savings, focused, parts, times)
    results["parts"] = parts
    results["stage_times"] = times
    scaled = np.empty(len(PART_NAMES))
    results["score"] = kernels.nd_apply_ratios(parts, np.linspace(0.5, 2.0, len(PART_NAMES)), scaled)
    results["scaled"] = scaled
    return results


PLANTED = [
    dict(p=1), dict(p=1, vp=1), dict(cp=4, cp_ring=0, comm_cp=1), dict(ep_is_n_exp=True, comm_ep=1), dict(t=1),
    dict(zero_counts=True), dict(fsdp=1, reshard=0), dict(fsdp=1, reshard=1, tie_emb=1, p=1),
    dict(t=0), dict(m=0), dict(sp=math.nan), dict(is_a3=1, dpn=8, t=16, ep=16, cp=16),
]


@pytest.mark.cython
def test_parity_random_and_planted(ckernels, pykernels):
    rng = np.random.default_rng(0)
    cases = [random_case(rng) for _ in range(300)] + [random_case(rng, **plant) for plant in PLANTED]
    for i, case in enumerate(cases):
        c_out, py_out = run_case(ckernels, case), run_case(pykernels, case)
        for name, value in py_out.items():
            np.testing.assert_allclose(c_out[name], value, rtol=1e-12, atol=0, equal_nan=True,
                                       err_msg=f"case {i}: {name}")
        if np.isfinite(py_out["total"]):
            assert math.isclose(py_out["parts"].sum(), py_out["total"], rel_tol=1e-9), i


@pytest.mark.cython
def test_parity_fsdp_part_traffic(ckernels, pykernels):
    rng = np.random.default_rng(2)
    for _ in range(200):
        args = [float(rng.choice([0, 100, 1e9])), float(rng.choice([0, 1, 2, 8])), float(rng.choice([0, 1, 4, 64])),
                float(rng.choice([1, 16, 512])), float(rng.choice([2, 1, 0.25])), float(rng.choice([1, 0.125])),
                2.0, float(rng.choice([0, 2, 4]))]
        c_out, py_out = np.empty(2), np.empty(2)
        ckernels.nd_fsdp_part_traffic(*args, c_out)
        pykernels.nd_fsdp_part_traffic(*args, py_out)
        np.testing.assert_allclose(c_out, py_out, rtol=1e-12, atol=0, equal_nan=True, err_msg=str(args))


def test_random_parts_sum_to_total(kernels):
    rng = np.random.default_rng(1)
    for _ in range(40):
        result = run_case(kernels, random_case(rng))
        if np.isfinite(result["total"]):
            assert math.isclose(result["parts"].sum(), result["total"], rel_tol=1e-9)
