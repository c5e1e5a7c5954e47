"""The routed experts' work is conserved over the expert grid (seconds mode, both backends).

A stage's t·dp·cp ranks compute every routed (token, expert) row of its micro-batches once, whatever the
expert grid: with the expert TP group as wide as the attention's (t_exp = t) each rank gathers its TP group's
tokens and runs 1/t of each expert's width; with t_exp = 1 under TP and SP (Megatron-Core's common TP 2,
ETP 1) each rank dispatches only its own 1/t of the tokens; with t_exp above t (ETP borrowing data-parallel
ranks) each rank runs the gathered tokens of t_exp / t data-parallel ranks at 1/t_exp of the width. One
rank's routed-expert FLOPs are therefore b·s/cp · top-k · 2·n_ff·h·width / t, the same for every t_exp and
ep -- a rank that computed b·s·top-k rows at 1/t_exp of the width priced TP 8 / ETP 1 eight times over and
ETP 8 on TP 1 at an eighth (a hardware FLOP utilisation of 1.59 on an H100).
"""
from __future__ import annotations

import pytest

import ndcost
from ndcost import _backend

#: (tp, etp, ep, sequence_parallel) on 8 H100s: etp None is Megatron-Core's default (the attention's TP).
GRIDS = [
    (1, None, 1, False), (1, None, 8, False), (1, 2, 4, False), (1, 8, 1, False), (1, 4, 2, False),
    (2, None, 4, True), (2, 1, 4, True), (2, 1, 8, True), (4, 1, 2, True), (8, 1, 1, True), (8, 8, 1, True),
]
SEQ, MBS = 4096, 1


def _experts_flops(backend_name: str, tp: int, etp: int | None, ep: int, sp: bool):
    model = ndcost.Model.from_catalog("mixtral-8x7b")
    spec = ndcost.ExecSpec(dp=8 // tp, tp=tp, etp=etp, ep=ep, sequence_parallel=sp, micro_batch_size=MBS,
                           global_batch_size=8, seq_length=SEQ)
    with _backend.use(backend_name):
        result = ndcost.estimate(model, spec, ndcost.Cluster("h100-sxm", 8))
        (table,) = result.ops()
    rows = {row.pass_: row for row in table.rows if row.op == "experts"}
    return model, result, rows["forward"].flops, rows["backward"].flops


@pytest.mark.parametrize("tp, etp, ep, sp", GRIDS)
def test_one_ranks_expert_flops_do_not_depend_on_the_expert_grid(backend_name, tp, etp, ep, sp):
    model, result, forward, backward = _experts_flops(backend_name, tp, etp, ep, sp)
    topk, h, width = model.num_experts_per_tok, model.hidden_size, model.moe_intermediate_size
    by_hand = MBS * SEQ * topk * 2.0 * 3.0 * h * width / tp       # gate, up and down: 3 GEMMs of h x width
    assert forward == pytest.approx(by_hand, rel=1e-12)
    assert backward == pytest.approx(2.0 * by_hand, rel=1e-12)    # the input's and the weights' gradients
    assert 0.0 < result.mfu <= result.hfu <= 1.0

