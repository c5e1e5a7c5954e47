"""Seeded random candidates for the batch tests and benchmarks: mostly valid strategies
over a model's legal degrees, with planted edges (p = 1, vp > 1 with few micro-batches,
ep = experts, ring and Ulysses CP, parts that are exactly zero) and, on request, rows
broken on purpose."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ndcost import ExecSpec, Model

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ExecSpec)}

SCHEDULES = ("1f1b", "interleaved", "zero_bubble_v", "gpipe", "seq1f1b")


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in (1, 2, 4, 8, 16, 32, 64, 128, 256) if d <= limit and n % d == 0]


def legal_tp(model: Model, limit: int = 8) -> list[int]:
    """tp values that divide every head count the model splits."""
    out = []
    for tp in _divisors(model.num_attention_heads, limit):
        if not model.is_mla and model.num_key_value_heads % tp:
            continue
        if model.has_linear_attention and (model.linear_num_key_heads % tp or model.linear_num_value_heads % tp):
            continue
        out.append(tp)
    return out


def random_rows(model: Model, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """*n* valid strategy dicts (ExecSpec fields) for *model*, every candidate on its own devices."""
    rng = np.random.default_rng(seed)
    comm = np.random.default_rng(seed + 7919)   # DeepSeek's schedules and the all-to-all: a stream of their own
    layers = model.num_layers_with_mtp
    tps = legal_tp(model)
    rows = []
    while len(rows) < n:
        tp = int(rng.choice(tps))
        pp = int(rng.choice([p for p in (1, 1, 2, 4, 8, 16) if p <= layers]))
        schedule = str(rng.choice(SCHEDULES)) if pp > 1 else "1f1b"
        if schedule == "interleaved":
            vpp = int(rng.choice([v for v in (2, 3, 4) if v * pp <= layers] or [1]))
            if vpp == 1:
                schedule = "1f1b"
        elif schedule == "zero_bubble_v":
            vpp = 2 if 2 * pp <= layers else 1
            if vpp == 1:
                schedule = "1f1b"
        elif schedule == "1f1b" and pp > 1 and rng.random() < 0.2:
            vpp = 2 if 2 * pp <= layers else 1           # "1f1b" with vpp > 1 runs interleaved
        else:
            vpp = 1
        dp = int(rng.choice((1, 2, 4, 8, 16, 32)))
        cp = int(rng.choice((1, 1, 1, 2, 4)))
        cp_algo = str(rng.choice(("ring", "ulysses", "ring-allgather")))
        if cp > 1 and cp_algo == "ulysses" and model.num_key_value_heads % (tp * cp):
            cp_algo = "ring"
        ep, etp = 1, None
        if model.is_moe:
            choices = [e for e in _divisors(model.num_experts, model.num_experts)
                       if (e <= dp and dp % e == 0) or (e > dp and (dp * tp) % e == 0)]
            ep = int(rng.choice(choices))
            if rng.random() < 0.15:
                ep = model.num_experts if (dp * tp) % model.num_experts == 0 else ep   # ep = experts
            t_exp = tp if ep <= dp else 1
            if rng.random() < 0.15:
                grid = [e for e in (1, 2) if (dp * cp * tp) % (ep * e) == 0 and model.moe_intermediate_size % e == 0]
                etp = int(rng.choice(grid)) if grid else None
                t_exp = etp or t_exp
            if model.moe_intermediate_size % t_exp:
                continue
        mbs = int(rng.choice((1, 1, 2, 4)))
        family = schedule != "gpipe"
        mbn = int(rng.choice((1, 2, 4, 8))) * (pp if family else 1)
        if rng.random() < 0.1:
            mbn = pp                                       # the fewest micro-batches the schedule allows
        seq = int(rng.choice((2048, 4096, 8192)))
        seq_split = int(rng.choice((1, 2, 4))) if schedule == "seq1f1b" else 1
        recompute = str(rng.choice(("none", "full", "selective")))
        zero = int(rng.choice((0, 1, 1, 2, 3)))
        row = dict(dp=dp, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp, sequence_parallel=bool(tp > 1 and rng.random() < 0.7),
                   micro_batch_size=mbs, global_batch_size=mbs * dp * mbn, seq_length=seq, pp_schedule=schedule,
                   seq_split=seq_split, recompute=recompute, zero_stage=zero, cp_algo=cp_algo,
                   selective_rule=str(rng.choice(("megatron", "mindformers", "hyperparallel"))),
                   flash_attention=bool(rng.random() < 0.8), grouped_gemm=bool(rng.random() < 0.7),
                   capacity_factor=float(rng.choice((1.0, 1.25, 2.0))),
                   moe_imbalance=float(rng.choice((1.0, 1.0, 1.3))),
                   optimizer_shard=int(rng.choice(_divisors(dp, dp))) if zero and rng.random() < 0.3 else None,
                   deferred_grad_accumulation=bool(rng.random() < 0.2), shard_spans_cp=bool(rng.random() < 0.8),
                   tie_embeddings=None if rng.random() < 0.7 else bool(rng.random() < 0.5),
                   reshard_params=None if zero != 3 or rng.random() < 0.6 else bool(rng.random() < 0.5),
                   selective_comm_recompute=bool(rng.random() < 0.2),
                   recompute_slice_activation=bool(rng.random() < 0.2), vocab_emb_dp=bool(rng.random() < 0.2),
                   moe_dispatch=None if rng.random() < 0.9 else float(rng.choice((0.0, 500.0))),
                   moe_dispatch_count=float(rng.choice((0.0, 0.0, 1.0, 2.0))),
                   dropout_bytes=int(rng.choice((0, 1))), main_param_bytes=int(rng.choice((0, 4))))
        if row["sequence_parallel"] and seq % (tp * cp):
            row["sequence_parallel"] = False
        _moe_comm(row, model, comm, layers)
        rows.append(row)
    return rows


def _moe_comm(row: dict[str, Any], model: Model, rng: Any, layers: int) -> None:
    """Now and then: a DualPipe schedule (even pp, 2·pp micro-batches a step or more), and on a MoE model
    DeepEP, node-limited routing, the all-to-all's overlap mode and its dispatcher's SMs."""
    pp = row["pp"]
    if pp > 1 and pp % 2 == 0 and row["pp_schedule"] != "seq1f1b" and rng.random() < 0.25:
        name = str(rng.choice(("dualpipe", "dualpipev"))) if 2 * pp <= layers else "dualpipe"
        row.update(pp_schedule=name, vpp=2 if name == "dualpipev" else 1, seq_split=1,
                   global_batch_size=row["micro_batch_size"] * row["dp"] * 2 * pp * int(rng.choice((1, 2))))
    if not model.is_moe or row["ep"] == 1:
        return
    if row["ep"] in (2, 4, 8, 16, 32, 64, 128) and rng.random() < 0.5:
        row.update(moe_dispatcher="deepep", moe_dispatcher_sms=int(rng.choice((20, 24))),
                   moe_node_limit=int(rng.choice((0, 1, 2, 4))))
    if row["pp_schedule"] in ("dualpipe", "dualpipev", "zero_bubble_v") and rng.random() < 0.6:
        row["ep_overlap"] = "dualpipe"
    elif (row["pp_schedule"] in ("1f1b", "interleaved") and (pp == 1 or row["vpp"] > 1)
          and row["recompute"] != "full" and model.num_nextn_predict_layers <= 1 and rng.random() < 0.5):
        row["ep_overlap"] = "1f1b"


def columns_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows of ExecSpec fields as Candidates.from_arrays columns (object arrays where None occurs)."""
    out = {}
    names = sorted({name for row in rows for name in row})
    for name in names:
        values = [row.get(name, _DEFAULTS[name]) for row in rows]
        if any(v is None for v in values) or any(isinstance(v, str) for v in values):
            array = np.empty(len(values), dtype=object)
            array[:] = values
            out[name] = array
        else:
            out[name] = np.asarray(values)
    return out


def planted_rows(model: Model) -> list[dict[str, Any]]:
    """The edges every parity test must see, valid on *model* (on its own devices)."""
    tp = max(legal_tp(model))
    layers = model.num_layers_with_mtp
    pp = 4 if layers >= 8 else 1
    base = dict(dp=2, tp=tp, pp=pp, micro_batch_size=1, seq_length=4096, sequence_parallel=tp > 1)
    rows = [
        dict(base, pp=1, global_batch_size=8),                                              # p = 1
        dict(base, vpp=2, global_batch_size=2 * pp, pp_schedule="interleaved"),             # vp > 1, m = p
        dict(base, vpp=2, global_batch_size=2 * pp, pp_schedule="zero_bubble_v"),           # DualPipeV, m = p
        dict(base, tp=1, sequence_parallel=False, global_batch_size=2 * pp * 2, zero_stage=0),  # zero TP part
        dict(base, dp=1, global_batch_size=pp * 2, zero_stage=0),                           # zero DP part
        dict(base, cp=2, cp_algo="ring", global_batch_size=4 * pp),                         # ring CP
        dict(base, cp=2, cp_algo="ring-allgather", global_batch_size=4 * pp, recompute="full"),  # torch's ring
        dict(base, pp=1, global_batch_size=8, recompute="full", zero_stage=3),              # FSDP, full recompute
        dict(base, global_batch_size=2 * pp * 4, recompute="selective", selective_comm_recompute=True),
        dict(base, pp=2, global_batch_size=16, pp_schedule="seq1f1b", seq_split=4),
        dict(base, pp=2, global_batch_size=4, pp_schedule="gpipe", recompute="full"),
    ]
    if model.num_key_value_heads % (2 * tp) == 0:
        rows.append(dict(base, cp=2, cp_algo="ulysses", global_batch_size=4 * pp))         # Ulysses CP
    else:
        rows.append(dict(base, tp=1, sequence_parallel=False, cp=2, cp_algo="ulysses", global_batch_size=4 * pp))
    if model.is_moe:
        e = model.num_experts
        rows.append(dict(base, tp=1, sequence_parallel=False, dp=e, ep=e, global_batch_size=e * pp))  # ep = experts
        rows.append(dict(base, tp=1, sequence_parallel=False, dp=e, ep=e, global_batch_size=e * pp,
                         moe_dispatch=0.0, grouped_gemm=False, capacity_factor=1.5))      # no dispatch priced
        moe = dict(base, tp=1, sequence_parallel=False, dp=8, ep=8, moe_dispatcher="deepep")
        if pp > 1:
            rows.append(dict(moe, global_batch_size=8 * 2 * pp, pp_schedule="dualpipe", ep_overlap="dualpipe",
                             moe_node_limit=2))                                          # DualPipe, DeepEP
            rows.append(dict(moe, vpp=2, global_batch_size=8 * 2 * pp, pp_schedule="dualpipev",
                             ep_overlap="dualpipe", precision="fp8", moe_dispatch_fp8=True,
                             fp8_activation_storage=True, fp8_transpose_cache=False))  # DualPipeV, fp8 dispatch,
            # DeepSeek's fp8 storage and its per-backward weight transposes
        rows.append(dict(moe, vpp=2 if pp > 1 else 1, global_batch_size=8 * 2 * pp, ep_overlap="1f1b"))  # Megatron's
    elif pp > 1:
        rows.append(dict(base, global_batch_size=2 * 2 * pp, pp_schedule="dualpipe"))   # DualPipe, dense
    return rows


def batch_memory_as_estimated(model: Model, cands: Any, cluster: Any, backend_name: str) -> np.ndarray:
    """Each candidate's device memory as ``estimate_many`` prices it on *backend_name*, asserted equal (1e-12
    relative) to ``estimate`` on the same row: the batch path and the single path hold the same bytes."""
    import pytest

    import ndcost
    from ndcost import _backend

    with _backend.use(backend_name):
        batch = ndcost.estimate_many(model, cands, cluster)
        for i in range(len(cands)):
            single = ndcost.estimate(model, cands.spec(i), cluster)
            assert batch.device_memory[i] == pytest.approx(single.memory.device_peak, rel=1e-12)
    return np.asarray(batch.device_memory)
