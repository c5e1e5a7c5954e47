"""ND kernel inputs built by hand with the ABI indices of ndcost.kernels.columns, for the ND kernel tests.

The small neutral dims: b = 1, s = 8, h = 4, model heads 2, t = 2, cp = 1, sp = 1, bytes_p = 2,
so that bytes_p/t/cp = 1 and an op's load is its formula; no overlap, no A3, dpn above every
degree, no DP mode, comm_t on only.
"""
from __future__ import annotations

import numpy as np

from ndcost.kernels.columns import (
    CAND, CAND_FIELDS, KIND, KIND_FIELDS, MODEL, MODEL_FIELDS, ND_OPTION, ND_OPTION_FIELDS,
)


def kinds_of(*rows) -> np.ndarray:
    table = np.zeros((len(rows), len(KIND_FIELDS)))
    for k, row in enumerate(rows):
        for name, value in row.items():
            table[k, KIND[name]] = value
    return table


def model_of(**over) -> np.ndarray:
    values = dict(h=4, a=2, hff=6, v=10, n_exp=1, n_chosen=1, n_shared=0, hff_exp=0, shared_gate=0,
                  dc_kv=0, n_mtp=0, default_kind=0)
    values.update(over)
    vec = np.zeros(len(MODEL_FIELDS))
    for name, value in values.items():
        vec[MODEL[name]] = value
    return vec


def cand_of(**over) -> np.ndarray:
    values = dict(b=1, s=8, t=2, sp=1, cp=1, ep=1, t_exp=1, d=1, d_exp=1, p=1, vp=1, m=1,
                  bytes_p=2, bytes_c=2, bytes_grad=0, cap_fact=1, moe_dispatch=1040,
                  comm_d_non_exp=0, comm_d_exp=0, comm_t=1, comm_ep=0, comm_cp=0, cp_ring=1,
                  shard_nonexp_partial=1, shard_exp=1, shard_exp_partial=1, shard_embed=1, gather_embed=1,
                  fsdp=0, reshard=0, tie_emb=0, dpn=1e9, is_a3=0, dp_overlap=0, tp_overlap=0, ep_local_tokens=0)
    values.update(over)
    vec = np.zeros(len(CAND_FIELDS))
    for name, value in values.items():
        vec[CAND[name]] = value
    return vec


def options_of(ratio_type=1, rec_type=0, p2p=0, p2p_ratio=0.002, static_ratio=1.0) -> np.ndarray:
    vec = np.zeros(len(ND_OPTION_FIELDS))
    for name, value in dict(ratio_type=ratio_type, rec_type=rec_type, p2p=p2p, p2p_ratio=p2p_ratio,
                            static_ratio=static_ratio).items():
        vec[ND_OPTION[name]] = value
    return vec
