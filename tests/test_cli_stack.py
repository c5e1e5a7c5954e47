"""The stack flags on the command line: each reaches its field and overrides --software's, a search takes them
as dimensions, and a contradiction is one line naming it (exit 2), never a flag silently ignored."""
from __future__ import annotations

import json

import pytest

import ndcost
from ndcost.cli.args import strategy_from_args
from cli_cases import refused
from ndcost.cli.main import build_parser, main
from ndcost.spec.rates import Rates
from ndcost.spec.rates_io import save_rates
from ndcost.spec.stack_options import OPTIONS, STACK_OPTIONS, option_text, parse_option, parse_option_list

LLAMA = ["llama3-70b", "--device", "h100-sxm", "--dp", "2", "--tp", "4", "--pp", "4", "--cp", "2", "--vpp", "5",
         "--global-batch-size", "128", "--seq-length", "8192", "--sequence-parallel"]


def _strategy(*words):
    return strategy_from_args(build_parser().parse_args(["estimate", *words]))


def test_every_option_parses_its_words_and_refuses_others():
    for option in STACK_OPTIONS:
        if option.kind == "bool":
            assert parse_option(option, "on") == (option.values or {True: True})[True]
            assert parse_option(option, "off") == (option.values or {False: False})[False]
            bad = "maybe"
        elif option.kind == "choice":
            assert parse_option(option, str(option.choices[0])) == (option.values or {}).get(option.choices[0],
                                                                                             option.choices[0])
            bad = "bogus"
        elif option.kind == "list":
            value = parse_option(option, "core_attn,layernorm")
            assert option_text(option, value) == "core_attn,layernorm"
            bad = "core_attn,bogus"
        else:
            assert parse_option(option, "2") == 2
            bad = "two"
        with pytest.raises(ndcost.SpecError, match=option.flag):
            parse_option(option, bad)
    assert parse_option_list(OPTIONS["tp_comm_overlap"], "on,off") == [True, False]
    with pytest.raises(ndcost.SpecError, match="did you mean 'fp8'"):
        parse_option(OPTIONS["precision"], "fp-8")


def test_the_nvidia_llama31_70b_recipe_states_its_stack_on_the_command_line():
    """NeMo's Llama 3.1 70B fp8 recipe (64 H100, TP 4 PP 4 CP 2 VPP 5, TP comm overlap, current scaling) is the
    validated row priced from flags alone."""
    from ndcost.io.validation import BUILTIN_RUNS, validate_runs

    s = _strategy(*LLAMA, "--software", "nemo", "--precision", "fp8", "--fp8-recipe", "current", "--tp-comm-overlap")
    assert s.spec.tp_overlap and s.spec.precision == "fp8" and s.rates.fp8_recipe == "current"
    assert s.rates.sources["fp8_recipe"] == "--fp8-recipe as stated"
    # the row's facts hold the gradients in Apex's bf16 buffer and the master weights as 16-bit remainders
    bf16 = _strategy(*LLAMA, "--software", "nemo", "--tp-comm-overlap", "--micro-batch-size", "1", "--grad-bytes", "2",
                     "--master-weights", "remainder")
    row = {r.id: r for r in validate_runs(BUILTIN_RUNS["h100"]).rows}["dgxc_llama31_70b_bf16_64gpu"]
    priced = ndcost.estimate(bf16.model, bf16.spec, bf16.cluster, rates=bf16.rates)
    assert priced.step_time == pytest.approx(row.estimate_s, rel=1e-9)


def test_a_flag_overrides_the_software_preset():
    s = _strategy(*LLAMA, "--software", "torchtitan-eager", "--attention-kernel", "best", "--elementwise", "fused")
    preset = Rates.for_software("h100-sxm", "torchtitan-eager")
    assert (s.rates.attention_kernel, s.rates.elementwise, s.rates.attention_copies) == ("best", "fused", True)
    assert preset.attention_kernel == "fa2"
    s = _strategy(*LLAMA, "--software", "torchtitan-eager", "--precision", "fp8", "--fp8-weight-cache")
    assert s.spec.fp8_weight_cache is True      # torchtitan's own is off
    s = _strategy(*LLAMA, "--software", "torchtitan-eager", "--recompute", "selective", "--selective-rule",
                  "torchtitan-op")
    assert s.spec.selective_rule == "hyperparallel" and s.model.census


@pytest.mark.parametrize("extra, words", [
    (["--fp8-recipe", "current"], ("--fp8-recipe", "--precision fp8")),
    (["--precision", "bf16", "--fp8-recipe", "current"], ("--fp8-recipe", "--precision fp8")),
    (["--tp", "1", "--dp", "8", "--tp-comm-overlap"], ("--tp-comm-overlap", "tp > 1")),
    (["--moe-dispatcher", "deepep"], ("--moe-dispatcher", "a MoE model")),
    (["--capacity-factor", "1.25"], ("--capacity-factor", "a MoE model")),
    (["--selective-rule", "mindformers"], ("--selective-rule", "--recompute selective")),
    (["--zero-stage", "3", "--overlap-param-gather"], ("--overlap-param-gather", "--zero-stage 1 or 2")),
    (["--cp", "1", "--dp", "4", "--cp-algo", "ulysses"], ("--cp-algo", "cp > 1")),
    (["--units", "nd", "--tp-comm-overlap"], ("--tp-comm-overlap", "seconds units only")),
    (["--tp-comm-overlap", "maybe"], ("--tp-comm-overlap", "on or off")),
])
def test_contradictory_flags_are_one_line_naming_the_conflict(capsys, extra, words):
    refused(capsys, ["estimate", *LLAMA, *extra], *words)


def test_torchtitan_op_states_its_own_census():
    from ndcost.spec.stack_options import with_torchtitan_op
    from ndcost.spec.torchtitan_sac import torchtitan_op_census

    model = ndcost.Model.from_catalog("llama3-8b")
    with_census, fields = with_torchtitan_op(model, {"selective_rule": ["megatron", "torchtitan-op"]})
    assert fields["selective_rule"] == ["megatron", "hyperparallel"] and with_census.census
    with pytest.raises(ndcost.SpecError, match="without a --census"):
        with_torchtitan_op(model.with_census(torchtitan_op_census(model)), {"selective_rule": "torchtitan-op"})
    with pytest.raises(ndcost.SpecError, match="not both"):
        with_torchtitan_op(model, {"selective_rule": ["hyperparallel", "torchtitan-op"]})
    with pytest.raises(ndcost.SpecError, match="dense text model"):
        with_torchtitan_op(ndcost.Model.from_catalog("mixtral-8x7b"), {"selective_rule": "torchtitan-op"})


def test_capacity_factor_needs_capacity_mode(capsys):
    moe = ["mixtral-8x7b", "--device", "h100-sxm", "--dp", "8", "--ep", "8", "--global-batch-size", "64"]
    refused(capsys, ["estimate", *moe, "--capacity-factor", "1.25"], "--capacity-factor", "--no-grouped-gemm")
    assert main(["estimate", *moe, "--capacity-factor", "1.25", "--no-grouped-gemm"]) == 0
    refused(capsys, ["estimate", *moe, "--moe-imbalance", "1.2", "--no-grouped-gemm"], "--moe-imbalance", "dropless")


def test_software_and_a_rates_file_together_agree_or_arerefused(tmp_path, capsys):
    fitted = tmp_path / "rates.json"
    save_rates(Rates.for_device("h100-sxm").replace(matmul_efficiency=0.7), fitted, device="h100-sxm")
    s = _strategy(*LLAMA, "--software", "nemo", "--rates", str(fitted))
    assert s.rates.matmul_efficiency == 0.7 and s.rates.sources["fp8_recipe"].startswith("NVIDIA/NeMo")
    stated = tmp_path / "stated.json"
    save_rates(Rates.for_software("h100-sxm", "torchtitan-eager"), stated, device="h100-sxm")
    refused(capsys, ["estimate", *LLAMA, "--software", "nemo", "--rates", str(stated)], "--software",
             "attention_kernel")
    current = tmp_path / "current.json"
    save_rates(Rates.for_device("h100-sxm").replace(fp8_recipe="current"), current, device="h100-sxm")
    refused(capsys, ["estimate", *LLAMA, "--precision", "fp8", "--rates", str(current), "--fp8-recipe", "delayed"],
             "--fp8-recipe", "fp8_recipe 'current'")
    assert main(["estimate", *LLAMA, "--precision", "fp8", "--rates", str(current), "--fp8-recipe", "current"]) == 0


def test_the_search_takes_stack_choices_as_dimensions_and_prints_them(capsys):
    argv = ["search", "llama3-8b", "--device", "h100-sxm", "--devices", "16", "--global-batch-size", "64",
            "--seq-length", "4096", "--tp-comm-overlap", "on,off", "--precision", "bf16,fp8", "--fp8-recipe", "current",
            "--no-progress", "--top", "20"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "precision tp_comm_overlap" in out
    table = [line for line in out.splitlines() if line[:3].strip().isdigit()]
    assert len(table) == 20
    assert {line.split()[10] for line in table} <= {"bf16", "fp8"} and "fp8" in {line.split()[10] for line in table}
    assert {line.split()[11] for line in table} <= {"on", "off"}
    again = [line for line in out.splitlines() if line.startswith("ndcost estimate")][0]
    assert "--fp8-recipe current" in again and "--precision" in again
    assert main(argv + ["--json"]) == 0
    best = json.loads(capsys.readouterr().out)["results"][0]["strategy"]
    assert best.get("precision") == "fp8"


@pytest.mark.parametrize("extra, words", [
    (["--precision", "bf16,fp8"], ("'precision'", "fp8 peak")),
    (["--fp8-recipe", "current"], ("--fp8-recipe", "--precision fp8")),
    (["--fp8-recipe", "current,delayed", "--precision", "fp8"], ("--fp8-recipe", "one value")),
    (["--tp", "1", "--tp-comm-overlap", "on"], ("'tp_overlap'", "tp > 1")),
])
def test_search_contradictions(capsys, extra, words):
    device = "a100-80g" if "bf16,fp8" in extra else "h100-sxm"
    refused(capsys, ["search", "llama3-8b", "--device", device, "--devices", "16", "--global-batch-size", "64",
                      "--seq-length", "4096", "--no-progress", *extra], *words)


def test_search_python_api_takes_stack_dimensions():
    model, cluster = ndcost.Model.from_catalog("llama3-8b"), ndcost.Cluster("h100-sxm", 16)
    plain = ndcost.search(model, cluster, global_batch_size=64, seq_length=4096, per_layer_recompute=0, balance=0)
    both = ndcost.search(model, cluster, global_batch_size=64, seq_length=4096, per_layer_recompute=0, balance=0,
                         tp_overlap=[False, True])
    tp_rows = int((plain.columns["tp"] > 1).sum())
    assert both.space_size == plain.space_size + tp_rows        # on only where tp > 1
    assert both.best.estimate.step_time <= plain.best.estimate.step_time
    with pytest.raises(ndcost.SpecError, match="'bogus'"):
        ndcost.search(model, cluster, global_batch_size=64, seq_length=4096, bogus=1)


def test_the_searchs_restated_command_carries_its_stack_and_cluster(capsys):
    import shlex

    argv = ["search", "llama3-8b", "--device", "h100-sxm", "--devices", "32", "--devices-per-node", "4",
            "--global-batch-size", "64", "--seq-length", "8192", "--tp-comm-overlap", "on,off", "--precision",
            "bf16,fp8", "--fp8-recipe", "current", "--software", "nemo", "--no-progress", "--top", "1",
            "--plan-top", "0", "--balance-top", "0"]
    assert main(argv + ["--json"]) == 0
    best = json.loads(capsys.readouterr().out)["results"][0]
    assert main(argv) == 0
    line = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ndcost estimate")][0]
    assert "--devices-per-node 4" in line and "--fp8-recipe current" in line and "--software nemo" in line
    assert main(shlex.split(line)[1:] + ["--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["step_time"] == pytest.approx(best["estimate"]["step_time"], rel=1e-12)


def test_explain_takes_the_stack_and_says_why(capsys):
    base = ["explain", "llama3-8b", "--device", "h100-sxm", "--dp", "2", "--tp", "4", "--global-batch-size", "64",
            "--seq-length", "8192"]
    # torchtitan runs a rank's local batch (32 here) as one micro-batch unless told: stated, it fits
    assert main(base + ["--tp-comm-overlap", "--software", "torchtitan-eager", "--micro-batch-size", "1"]) == 0
    assert main(base + ["--tp", "3", "--tp-comm-overlap"]) == 1
    assert "tp" in capsys.readouterr().out
