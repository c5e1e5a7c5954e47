"""What is emitted is what was priced (issue 13 #6): a search's #1 is priced again by the command it
prints, and a launcher's recompute settings either state the plan or say what they approximate,
with their own price."""
from __future__ import annotations

import json
import shlex

import pytest

import ndcost
from ndcost import Cluster, ExecSpec, Model
from ndcost.cli.main import main
from ndcost.io.emit_recompute import launcher_recompute, layer_plan
from ndcost.spec.exec_spec import RecomputeRange

SEARCH = ["search", "llama3-70b", "--devices", "64", "--device", "h100-sxm", "--global-batch-size", "256",
          "--seq-length", "8192", "--tp", "8", "--pp", "4", "--micro-batch-size", "1", "--memory-limit-gib", "40",
          "--plan-top", "3", "--balance-top", "0", "--top", "3", "--no-progress"]


@pytest.fixture(scope="module")
def model():
    return Model.from_catalog("llama3-70b")


def _printed_command(out: str) -> list[str]:
    lines = out.splitlines()
    return shlex.split(lines[lines.index("# price #1 again:") + 1])


def _estimate_json(capsys, words: list[str]) -> dict:
    assert words[:2] == ["ndcost", "estimate"]
    assert main(words[1:] + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("saved", (True, False), ids=("plan-file", "plan-inline"))
def test_the_printed_command_prices_the_planned_best_again(tmp_path, monkeypatch, capsys, saved):
    monkeypatch.chdir(tmp_path)
    argv = SEARCH + (["--save-plan", "plan.json"] if saved else [])
    assert main(argv + ["--json"]) == 0
    best = json.loads(capsys.readouterr().out)["results"][0]
    assert best["strategy"]["recompute"] == "per_layer" and best["strategy"]["recompute_ranges"]
    assert main(argv) == 0
    words = _printed_command(capsys.readouterr().out)
    assert "--recompute-plan" in words
    if saved:
        assert words[words.index("--recompute-plan") + 1] == "plan.json" and (tmp_path / "plan.json").exists()
    again = _estimate_json(capsys, words)
    assert again["step_time"] == pytest.approx(best["estimate"]["step_time"], rel=1e-12)
    assert again["memory"]["peak"] == pytest.approx(best["estimate"]["memory"]["peak"], rel=1e-12)


def test_emitted_flags_that_approximate_say_so_and_price_what_they_state(capsys, model):
    assert main(SEARCH + ["--emit", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "# NOTE: these megatron settings approximate the priced recompute plan" in out
    stated = [line for line in out.splitlines() if line.startswith("#   these settings:")][0]
    # the approximation's price is an estimate of the ExecSpec the flags mean (#1's, as printed)
    from ndcost.cli.main import build_parser
    from ndcost.cli.args import spec_from_args

    spec = spec_from_args(build_parser().parse_args(_printed_command(out)[1:]))
    emitted = launcher_recompute("megatron", model, spec)
    assert not emitted.exact
    meant = ndcost.estimate(model, emitted.meaning, Cluster("h100-sxm", 64))
    assert f"{meant.step_time:.6g} s" in stated
    # what the flags state is itself stated exactly by them
    assert launcher_recompute("megatron", model, emitted.meaning).exact


def test_uniform_recompute_is_stated_exactly(model):
    for recompute, expected in (("none", ()), ("full", ("--recompute-method uniform",)),
                                ("selective", ("--recompute-modules core_attn",))):
        spec = ExecSpec(dp=2, tp=8, pp=4, global_batch_size=256, seq_length=8192, sequence_parallel=True,
                        recompute=recompute)
        emitted = launcher_recompute("megatron", model, spec)
        assert emitted.exact and all(flag in emitted.lines for flag in expected)
        # torchtitan states none and full; its selective policy is its own ("op"), never ndcost's switches
        assert launcher_recompute("torchtitan", model, spec).exact == (recompute != "selective")


def test_block_recompute_is_megatrons_first_layers_of_every_stage(model):
    spec = ExecSpec(dp=2, tp=8, pp=4, global_batch_size=256, seq_length=8192, sequence_parallel=True)
    ranges = tuple(RecomputeRange(20 * stage, 3, "full") for stage in range(4))
    planned = ExecSpec(dp=2, tp=8, pp=4, global_batch_size=256, seq_length=8192, sequence_parallel=True,
                       recompute=ranges)
    emitted = launcher_recompute("megatron", model, planned)
    assert emitted.exact and "--recompute-num-layers 3" in emitted.lines and "--recompute-method block" in emitted.lines
    # not the first layers of a stage: approximated by the block the flags state, priced as such
    shifted = ExecSpec(dp=2, tp=8, pp=4, global_batch_size=256, seq_length=8192, sequence_parallel=True,
                       recompute=tuple(RecomputeRange(20 * stage + 5, 3, "full") for stage in range(4)))
    approx = launcher_recompute("megatron", model, shifted)
    assert not approx.exact and approx.meaning is not None
    full = [index for chunk in layer_plan(model, approx.meaning) for index, option, _ in chunk if option == 1]
    assert full == [i for stage in range(4) for i in range(20 * stage, 20 * stage + 3)]
    assert spec.recompute == "none"


def test_torchtitan_every_kth_block(model):
    every_4th = tuple(RecomputeRange(i, 1, "full") for i in range(0, 80, 4))
    spec = ExecSpec(dp=2, tp=8, pp=4, global_batch_size=256, seq_length=8192, sequence_parallel=True,
                    recompute=every_4th)
    emitted = launcher_recompute("torchtitan", model, spec)
    assert emitted.exact and 'selective_ac_option = "4"' in emitted.lines


def test_deepep_is_megatrons_flex_dispatcher():
    from ndcost.io.emit import megatron_flags

    model = ndcost.Model.from_catalog("deepseek-v3")
    spec = ndcost.ExecSpec(dp=64, pp=16, ep=64, global_batch_size=1024, seq_length=4096, moe_dispatcher="deepep")
    flags = megatron_flags(model, spec)
    assert "--moe-token-dispatcher-type flex" in flags and "--moe-flex-dispatcher-backend deepep" in flags
    assert "flex" not in megatron_flags(model, spec.replace(moe_dispatcher="alltoall"))


def test_cuda_graphs_as_megatron_states_them():
    """ExecSpec.cuda_graphs in Megatron-Core's flags: its graph implementation and the sub-blocks each layer's
    graphs capture (all of the layer when none is listed); a dense model has no router to capture."""
    from ndcost.io.emit import megatron_flags

    moe = ndcost.Model.from_catalog("qwen3-30b-a3b")
    spec = ndcost.ExecSpec(dp=8, ep=8, global_batch_size=64)
    assert "cuda-graph" not in megatron_flags(moe, spec)
    flags = megatron_flags(moe, spec.replace(cuda_graphs="moe_router"))
    assert "--cuda-graph-impl transformer_engine" in flags
    assert "--cuda-graph-modules attn moe_router moe_preprocess" in flags
    dense = ndcost.Model.from_catalog("llama3-8b")
    whole = megatron_flags(dense, ndcost.ExecSpec(dp=8, global_batch_size=64, cuda_graphs="layer"))
    assert "--cuda-graph-impl transformer_engine" in whole and "--cuda-graph-modules" not in whole
    # a dropless MoE layer is uncapturable whole (megatron/core/transformer/moe/README.md): its experts stay eager
    dropless = megatron_flags(moe, spec.replace(cuda_graphs="layer"))
    assert "--cuda-graph-modules attn moe_router moe_preprocess" in dropless and "stay eager" in dropless
    assert "--cuda-graph-modules attn" in megatron_flags(dense, ndcost.ExecSpec(dp=8, global_batch_size=64,
                                                                                cuda_graphs="moe_router"))


def test_emitted_flags_that_capture_fewer_graphs_say_so_and_price_what_they_capture():
    """A launcher that cannot capture the priced CUDA-graph set -- Megatron-Core a dropless MoE's experts
    (megatron/core/transformer/moe/README.md: uncapturable dynamic shapes), torchtitan any graph (no job-config
    setting) -- says so, and the price beside #1's is an estimate of the set its settings capture."""
    from types import SimpleNamespace

    from ndcost.cli.reproduce import emit_report
    from ndcost.io.launch_settings import launcher_graphs

    moe = Model.from_catalog("qwen3-30b-a3b")
    cluster = Cluster("h100-sxm", 8)
    spec = ExecSpec(dp=8, ep=8, micro_batch_size=1, global_batch_size=64, seq_length=4096, cuda_graphs="layer")
    ranked = SimpleNamespace(spec=spec, estimate=ndcost.estimate(moe, spec, cluster))
    assert launcher_graphs("megatron", moe, spec)[0] == "moe_router"
    assert launcher_graphs("torchtitan", moe, spec)[0] == "none"
    for launcher, held in (("megatron", "moe_router"), ("nemo", "moe_router"), ("torchtitan", "none")):
        lines = emit_report(launcher, moe, cluster, ranked, units="seconds", ratios=None, rates=None)
        note = next(line for line in lines if line.startswith(f"# NOTE: these {launcher} settings capture"))
        assert f"CUDA graphs {held!r}, not the priced 'layer'" in note
        assert sum("cuda_graphs 'layer':" in line for line in "\n".join(lines).splitlines()) == 1   # why, said once
        stated = ndcost.estimate(moe, spec.replace(cuda_graphs=held), cluster)
        assert stated.step_time > ranked.estimate.step_time          # the experts' launches come back
        assert f"{stated.step_time:.6g} s" in next(line for line in lines if line.startswith("#   these settings:"))
        assert f"{ranked.estimate.step_time:.6g} s" in next(line for line in lines if line.startswith("#   #1 as"))
    # a set the flags capture whole, and no graphs at all, print no note and no second price
    for exact in (spec.replace(cuda_graphs="moe_router"), spec.replace(cuda_graphs="none")):
        lines = emit_report("megatron", moe, cluster, SimpleNamespace(spec=exact, estimate=None), units="seconds",
                            ratios=None, rates=None)
        assert not any(line.startswith("# NOTE") or line.startswith("#   ") for line in lines)
