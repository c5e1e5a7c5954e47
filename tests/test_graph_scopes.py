"""CUDA graphs as a set of a layer's scopes (ndcost.spec.graph_scopes): Megatron-Core's --cuda-graph-scope
lists any subset of attn, moe_router, moe_preprocess, mlp, moe, so ``ExecSpec.cuda_graphs`` is a set of
ndcost's three scopes (attn, router, ffn), its code a bit mask. Checked: every set's name and spellings, bad
sets refused by name, each scope replaying exactly its own kernels on both backends (by hand on a
launch-bound layer), a batch reading any spelling, and Megatron-Core's flags for each set."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import ndcost
from ndcost.cli.main import main
from ndcost.io.emit import megatron_flags
from ndcost.kernels.codes import SCOPES
from ndcost.kernels.columns import LAYER_OP, LAYER_OP_FIELD, LAYER_OP_FIELDS, LAYER_OP_NAMES, RATE, SECONDS_CAND
from ndcost.spec.graph_scopes import (CUDA_GRAPHS, GRAPH_SCOPE_NAMES, canonical_graphs,
                                      graphs_from_megatron, megatron_graph_scopes)
from ndcost.tables.reasons import REASON_CODES
from ndcost.tables.seconds import seconds_arrays

F = LAYER_OP_FIELD
_ARGS = ("kinds", "skinds", "model", "smodel", "cand", "rate")
_COMPUTE_ROWS = [i for i, name in enumerate(LAYER_OP_NAMES) if not name.endswith("_comm")]


def _scopes_of(mask: int) -> list[str]:
    return [name for i, name in enumerate(GRAPH_SCOPE_NAMES) if mask >> i & 1]


def test_every_set_has_one_name_and_any_spelling_reaches_it():
    assert len(CUDA_GRAPHS) == 2 ** len(GRAPH_SCOPE_NAMES) and len(set(CUDA_GRAPHS)) == len(CUDA_GRAPHS)
    assert GRAPH_SCOPE_NAMES == ("attn", "router", "ffn") and SCOPES == ("attn", "pre", "ffn")  # the bit order
    # the two names that predate the sets keep their meaning
    assert CUDA_GRAPHS[0b011] == "moe_router" and CUDA_GRAPHS[0b111] == "layer" and CUDA_GRAPHS[0] == "none"
    for mask, name in enumerate(CUDA_GRAPHS):
        assert canonical_graphs(name) == name and CUDA_GRAPHS.index(name) == mask   # the code is the mask
        for order in itertools.permutations(_scopes_of(mask)):
            if order:
                assert canonical_graphs("+".join(order)) == name
                assert ndcost.ExecSpec(dp=1, global_batch_size=1, cuda_graphs=" + ".join(order)).cuda_graphs == name
    assert canonical_graphs("moe_router+ffn") == "layer"          # a named set joins others too


@pytest.mark.parametrize("bad", ["bogus", "none+attn", "", "attn++ffn", "attn+", 3, None, True, ("attn",)])
def test_a_set_ndcost_cannot_read_is_refused_by_name(bad):
    with pytest.raises(ndcost.SpecError, match="cuda_graphs") as err:
        ndcost.ExecSpec(dp=1, global_batch_size=1, cuda_graphs=bad)
    assert "'+'-joined set" in str(err.value)


def test_the_command_line_takes_a_set_and_refuses_a_bad_one(capsys):
    argv = ["estimate", "qwen3-30b-a3b", "--device", "h100-sxm", "--devices", "8", "--ep", "8",
            "--global-batch-size", "64", "--seq-length", "1024", "--json"]
    assert main([*argv, "--cuda-graphs", "router+attn"]) == 0
    spelled = capsys.readouterr().out
    assert main([*argv, "--cuda-graphs", "moe_router"]) == 0
    assert capsys.readouterr().out == spelled                       # the same set, the same estimate
    assert main([*argv, "--cuda-graphs", "attn+experts"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "--cuda-graphs" in err[0] and "attn+experts" in err[0]


def _launch_bound_layer(graphs: str):
    """Qwen3-30B-A3B's MoE layer at 256 tokens, 16 experts a rank, on an H100: its host launches outlast
    its device time (tests/test_seconds_moe.py::test_a_launch_bound_layer_by_hand)."""
    model = ndcost.Model.from_catalog("qwen3-30b-a3b")
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=1, global_batch_size=8, seq_length=256, cuda_graphs=graphs)
    return seconds_arrays(model, spec, ndcost.Cluster("h100-sxm", 8))


def _ops(kernels, a):
    out = np.empty((len(LAYER_OP_NAMES), len(LAYER_OP_FIELDS)))
    kernels.seconds_layer_ops(*(a[name] for name in _ARGS), 0, out)
    return out


def test_each_scope_replays_its_own_kernels_by_hand(kernels):
    """A layer's host seconds are each scope's kernels at a replay's cost (0.84 us) where the set holds the
    scope, a launch's (9.58 us) where not: additive over the scopes, by hand -- the router scope is the
    FFN pre-norm, the router and the permutation; the FFN scope the experts, their activation, the
    un-permutation and the FFN's residual add; the attention scope the rest. Only where the FFN scope
    replays do the experts' per-expert GEMMs stop waiting on the host."""
    ops = {name: _ops(kernels, _launch_bound_layer(name)) for name in CUDA_GRAPHS}
    a = _launch_bound_layer("none")
    launch_s, replay_s = a["rate"][RATE["launch_s"]], a["rate"][RATE["graph_s"]]
    assert (launch_s, replay_s) == (9.58e-6, 0.84e-6)
    base = ops["none"]
    for p, k in (("f", "kernels_f"), ("b", "kernels_b")):
        kernels_of = lambda names: sum(base[LAYER_OP[name], F[k]] for name in names)  # noqa: E731
        ffn = kernels_of(("experts", "expert_act", "unpermute")) + 1
        router = kernels_of(("router", "permute")) + 1      # + the FFN's pre-norm
        total = base[_COMPUTE_ROWS, F[k]].sum()
        per_scope = {"attn": total - ffn - router, "router": router, "ffn": ffn}
        assert per_scope["attn"] > 0
        for mask, name in enumerate(CUDA_GRAPHS):
            held = _scopes_of(mask)
            host = sum(n * (replay_s if scope in held else launch_s) for scope, n in per_scope.items())
            assert ops[name][LAYER_OP["launch"], F["host_" + p]] == pytest.approx(host, rel=1e-12), (name, p)
    loop_f = 2 * 16                                 # a GEMM per local expert, gate-up and down
    device_f = base[[i for i in _COMPUTE_ROWS if LAYER_OP_NAMES[i] != "launch"], F["time_f"]].sum()
    for name in CUDA_GRAPHS:
        row = ops[name][LAYER_OP["launch"]]
        if "ffn" in _scopes_of(CUDA_GRAPHS.index(name)):
            assert row[F["time_f"]] == pytest.approx(max(0.0, row[F["host_f"]] - device_f), rel=1e-12, abs=0.0)
        else:
            assert row[F["time_f"]] >= loop_f * launch_s * (1 - 1e-12), name


@pytest.mark.cython
def test_both_backends_read_every_code_alike_planted_ones_too(ckernels, pykernels):
    """Each set's code, and codes no spec makes (a NaN, negative, past 7, fractional: a NaN or out-of-range
    double has no defined int in C, so the compiled kernel checks the range first) priced alike to 1e-12."""
    a = _launch_bound_layer("none")
    for code in [*range(8), float("nan"), -1.0, 8.0, 3.5, 1e300, -0.0, 7.999]:
        cand = a["cand"].copy()
        cand[SECONDS_CAND["graphs"]] = code
        b = dict(a, cand=cand)
        np.testing.assert_allclose(_ops(ckernels, b), _ops(pykernels, b), rtol=1e-12, atol=0.0, err_msg=str(code))
    nan = dict(a, cand=a["cand"].copy())
    nan["cand"][SECONDS_CAND["graphs"]] = float("nan")
    np.testing.assert_array_equal(_ops(pykernels, nan), _ops(pykernels, a))     # captures nothing


def test_a_batch_reads_any_spelling_and_refuses_a_bad_row():
    model = ndcost.Model.from_catalog("qwen3-30b-a3b")
    fields = dict(dp=8, ep=8, micro_batch_size=1, global_batch_size=8, seq_length=256)
    spelled = ["router+attn", "ffn", "attn+ffn+router", "bogus", "router"]
    batch = ndcost.estimate_many(model, ndcost.Candidates.from_arrays(**fields, cuda_graphs=spelled), "h100-sxm",
                                 units="seconds")
    cluster = ndcost.Cluster("h100-sxm", 8)
    for i, spelling in enumerate(spelled):
        if spelling == "bogus":
            assert batch.reason[i] == REASON_CODES["bad_choice"] and np.isnan(batch.step_time[i])
            continue
        one = ndcost.estimate(model, ndcost.ExecSpec(**fields, cuda_graphs=spelling), cluster)
        assert batch.step_time[i] == pytest.approx(one.step_time, rel=1e-12)


def test_megatron_scopes_and_flags_for_each_set():
    """The fact's Megatron-Core scopes -> the set, and the set -> Megatron-Core's flags: the router scope is
    moe_router + moe_preprocess, router and experts together its 'moe', all of a layer no list; a dense
    layer has no router; a MoE layer's experts without their router have no Megatron-Core scope (noted)."""
    assert graphs_from_megatron(["moe_router", "moe_preprocess"]) == "router"
    assert graphs_from_megatron(["attn", "moe_router", "moe_preprocess"]) == "moe_router"
    assert graphs_from_megatron(["moe"]) == "router+ffn" and graphs_from_megatron(["mlp"]) == "ffn"
    assert graphs_from_megatron([]) == "layer" and graphs_from_megatron(["full_iteration"]) == "layer"
    assert graphs_from_megatron(["mamba"]) == "attn"
    moe = ndcost.Model.from_catalog("qwen3-30b-a3b")
    dense = ndcost.Model.from_catalog("llama3-8b")
    spec = ndcost.ExecSpec(dp=8, ep=8, global_batch_size=64)
    dense_spec = ndcost.ExecSpec(dp=8, global_batch_size=64)

    def graph_flags(model, s):
        return [line.strip(" \\") for line in megatron_flags(model, s).splitlines() if "cuda-graph" in line]

    assert graph_flags(moe, spec.replace(cuda_graphs="router")) == [
        "--cuda-graph-impl transformer_engine", "--cuda-graph-modules moe_router moe_preprocess"]
    # the whole MoE block ('moe') only with drop-and-pad; a dropless layer's experts stay eager, noted
    dropped = spec.replace(grouped_gemm=False, capacity_factor=1.25)
    assert graph_flags(moe, dropped.replace(cuda_graphs="router+ffn"))[1] == "--cuda-graph-modules moe"
    assert graph_flags(moe, spec.replace(cuda_graphs="router+ffn"))[1] == (
        "--cuda-graph-modules moe_router moe_preprocess")
    assert "only with drop-and-pad" in megatron_flags(moe, spec.replace(cuda_graphs="router+ffn"))
    assert "only with drop-and-pad" not in megatron_flags(moe, dropped.replace(cuda_graphs="router+ffn"))
    # whole layers: a dropless MoE layer is uncapturable (Megatron-LM@d98e8a64 megatron/core/transformer/moe/
    # README.md L514), so 'layer' captures its attention and router, noted; drop-and-pad captures it whole
    assert graph_flags(moe, spec.replace(cuda_graphs="layer")) == [
        "--cuda-graph-impl transformer_engine", "--cuda-graph-modules attn moe_router moe_preprocess"]
    assert "or whole layers) only with drop-and-pad" in megatron_flags(moe, spec.replace(cuda_graphs="layer"))
    assert graph_flags(moe, dropped.replace(cuda_graphs="layer")) == ["--cuda-graph-impl transformer_engine"]
    assert graph_flags(dense, dense_spec.replace(cuda_graphs="router")) == []
    assert graph_flags(dense, dense_spec.replace(cuda_graphs="attn+ffn")) == ["--cuda-graph-impl transformer_engine"]
    assert graph_flags(dense, dense_spec.replace(cuda_graphs="ffn"))[1] == "--cuda-graph-modules mlp"
    eager = megatron_flags(moe, spec.replace(cuda_graphs="attn+ffn"))
    assert "--cuda-graph-modules attn" in eager and "no scope for a MoE layer's experts" in eager
    # a MoE model with dense layers (DeepSeek-V3's first three: --moe-layer-freq holds 0s) captures their MLP with
    # 'mlp', which Megatron-Core refuses for a model of MoE layers only (transformer_config.py __post_init__)
    mixed = ndcost.Model.from_catalog("deepseek-v3")
    mixed_spec = ndcost.ExecSpec(dp=64, pp=16, ep=64, global_batch_size=1024, seq_length=4096)
    assert graph_flags(mixed, mixed_spec.replace(cuda_graphs="layer"))[1] == (
        "--cuda-graph-modules attn moe_router moe_preprocess mlp")
    assert graph_flags(mixed, mixed_spec.replace(cuda_graphs="ffn"))[1] == "--cuda-graph-modules mlp"
    assert graph_flags(mixed, mixed_spec.replace(cuda_graphs="moe_router"))[1] == (
        "--cuda-graph-modules attn moe_router moe_preprocess")
    assert all("mlp" not in flag
               for graphs in CUDA_GRAPHS for flag in graph_flags(moe, spec.replace(cuda_graphs=graphs)))
    for mask, name in enumerate(CUDA_GRAPHS):      # what the flags state reads back as the same set
        for is_moe, dropless, held in ((True, False, mask), (True, True, mask), (False, False, mask & ~0b010)):
            scopes, why = megatron_graph_scopes(name, is_moe, dropless)
            if scopes is None:
                assert held == 0 or why, name
            elif not scopes:
                assert held == (0b111 if is_moe else 0b101), name
            elif why is None:
                assert graphs_from_megatron(scopes) == CUDA_GRAPHS[held], name
            else:                                  # less than the set: the experts left eager
                assert held & 0b100 and graphs_from_megatron(scopes) == CUDA_GRAPHS[held & ~0b100], name


def test_shared_experts_replay_with_the_router_scope(kernels):
    """Megatron-Core's moe_router capture holds the FFN pre-norm, the router and the shared experts (unless
    moe_shared_expert_overlap runs them beside the dispatch, off by default): NVIDIA/Megatron-LM@d98e8a64
    transformer_layer.py _get_submodules_under_cudagraphs. So a set holding the router scope launches the shared
    experts' kernels at a replay's cost, one without it at a launch's; the routed experts stay with the FFN scope."""
    model = ndcost.Model.from_catalog("deepseek-v2-lite")                # 2 shared experts on its MoE layers
    spec = dict(dp=8, ep=8, micro_batch_size=1, global_batch_size=8, seq_length=256)
    cluster = ndcost.Cluster("h100-sxm", 8)
    moe_kind = next(i for i, kind in enumerate(model.kinds) if kind.ffn == "moe")
    for graphs, shared_held, routed_held in (("router", True, False), ("moe_router", True, False),
                                             ("ffn", False, True), ("attn", False, False), ("layer", True, True)):
        a = seconds_arrays(model, ndcost.ExecSpec(**spec, cuda_graphs=graphs), cluster)
        out = np.empty((len(LAYER_OP_NAMES), len(LAYER_OP_FIELDS)))
        kernels.seconds_layer_ops(*(a[name] for name in _ARGS), moe_kind, out)
        launch_s, replay_s = a["rate"][RATE["launch_s"]], a["rate"][RATE["graph_s"]]
        for op, held in (("shared_experts", shared_held), ("experts", routed_held)):
            row = out[LAYER_OP[op]]
            assert row[F["kernels_f"]] > 0 and row[F["kernels_b"]] > 0, op
            for p in ("f", "b"):
                cost = replay_s if held else launch_s
                assert row[F["host_" + p]] == pytest.approx(row[F["kernels_" + p]] * cost, rel=1e-12), (graphs, op, p)


@pytest.mark.parametrize("graphs", CUDA_GRAPHS)
def test_the_per_op_table_counts_the_kernels_each_set_replays(graphs):
    """Estimate.ops(): an op's graphed kernels are those of its kernels in a scope the set holds, so its host
    seconds are graphed x a replay's cost + the rest x a launch's, row by row; over the layer they are the
    kernels of the held scopes (the same split by hand as test_each_scope_replays_its_own_kernels_by_hand)."""
    model = ndcost.Model.from_catalog("qwen3-30b-a3b")
    spec = ndcost.ExecSpec(dp=8, ep=8, micro_batch_size=1, global_batch_size=8, seq_length=256, cuda_graphs=graphs)
    result = ndcost.estimate(model, spec, ndcost.Cluster("h100-sxm", 8))
    a = _launch_bound_layer(graphs)
    launch_s, replay_s = a["rate"][RATE["launch_s"]], a["rate"][RATE["graph_s"]]
    held = _scopes_of(CUDA_GRAPHS.index(graphs))
    (table,) = result.ops()
    for p in ("forward", "backward"):
        rows = [row for row in table.rows if row.pass_ == p and row.op != "launch" and row.bound != "communication"]
        for row in rows:
            assert 0.0 <= row.graphed_kernels <= row.kernels, row
            assert row.host_seconds == pytest.approx(row.graphed_kernels * replay_s
                                                     + (row.kernels - row.graphed_kernels) * launch_s, rel=1e-12)
        count = {row.op: row.kernels for row in rows}
        ffn = count["experts"] + count["expert_act"] + count["unpermute"] + 1            # + the FFN's residual add
        router = count["router"] + count["permute"] + 1                                  # + the FFN's pre-norm
        per_scope = {"attn": sum(count.values()) - ffn - router, "router": router, "ffn": ffn}
        assert sum(row.graphed_kernels for row in rows) == sum(per_scope[s] for s in held)
        assert all(row.graphed_kernels == 0.0 for row in table.rows if row.pass_ == p and row.op == "launch")
    assert all("graphed_kernels" in row for row in table.to_dict()["rows"])
    assert "graphed" in table.table().splitlines()[1]
