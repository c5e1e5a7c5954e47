"""The MoE validation file (data/validation/moe_runs.yaml with moe_run_facts.yaml, ``ndcost validate
--builtin moe``) and the rules that read its stack facts (ndcost.io.fact_rules).

The file must load, price every row or skip it with the reason, cover at least 15 runs of 4 model
families on 3 device kinds, and state every number with its source. The errors themselves are the
physics' business (issue 23): the bounds here only catch a loader that stops reading the file.
"""
from __future__ import annotations

import json

import pytest
import yaml

from facts_checks import fact_problems, overlapping_merges
from ndcost.cli.main import main
from ndcost.errors import SpecError
from ndcost.io.fact_rules import (RECOMPUTE_MODULE_SWITCHES, catalog_cluster, dispatcher_choice,
                                  recompute_module_switches, stack_choice)
from ndcost.io.run_facts import FACTS_FILES, load_run_facts
from ndcost.io.validation import BUILTIN_RUNS, validate_runs
from ndcost.spec.device import devices
from ndcost.spec.model import Model
from ndcost.spec.recompute_spec import SWITCHES

MOE_RUNS = BUILTIN_RUNS["moe"]
MOE_FACTS = FACTS_FILES["moe_runs.yaml"]


@pytest.fixture(scope="module")
def runs_doc() -> dict:
    return yaml.safe_load(MOE_RUNS.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def facts_doc() -> dict:
    return yaml.safe_load(MOE_FACTS.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def report():
    return validate_runs(MOE_RUNS)


def test_the_file_covers_runs_families_and_devices(runs_doc, report):
    rows = runs_doc["runs"]
    assert len(rows) == len(report.rows) == 34
    assert len({row["family"] for row in rows}) >= 4
    devices_used = {runs_doc["hardware"][row["hardware"]]["device"] for row in rows}
    assert devices_used == {"gb300-nvl72", "gb200-nvl72", "b200", "h100-sxm", "h800"}
    assert devices_used <= set(devices())
    assert len({row["id"] for row in rows}) == len(rows)


def test_every_row_is_priced_or_skipped_with_a_reason(report):
    for row in report.rows:
        if row.skipped:
            assert len(row.skipped) > 20, row.id
            continue
        assert row.estimate_s > 0 and row.measured_s > 0, row.id
        assert 0.0 < row.mfu < 1.0, row.id
        assert any(note.startswith("device ") for note in row.notes), row.id
        assert any(note.startswith("software ") for note in row.notes), row.id
    scored = report.scored
    assert len(scored) == 34
    # a loader that stopped reading a fact would move rows far; the physics moves them within this
    assert report.max_abs_error < 0.8
    assert set(report.family_mae()) == {"deepseek_v3", "gpt_oss", "qwen3_moe", "mixtral"}


def test_every_row_has_its_facts_and_every_fact_its_source(runs_doc, facts_doc):
    assert sorted(facts_doc["runs"]) == sorted(row["id"] for row in runs_doc["runs"])
    problems = []
    for run_id, entry in facts_doc["runs"].items():
        problems += fact_problems(run_id, "framework", entry["framework"])
        assert str(entry["figures_from"]).strip(), run_id
        for section in ("facts", "measurement"):
            for name, fact in (entry[section] or {}).items():
                problems += fact_problems(f"{run_id}.{section}", name, fact)
    assert not problems, "\n".join(problems)
    assert not overlapping_merges(MOE_FACTS.read_text(encoding="utf-8"))
    for row in runs_doc["runs"]:
        assert row["source"]["ref"] and row["source"]["where"], row["id"]
        Model.from_catalog(row["model"]["catalog"])  # every model is a catalog model
    for entry in facts_doc["left_out"]:
        assert entry["rows"] and len(entry["why"]) > 20


def test_measured_steps_follow_from_the_published_throughput(runs_doc):
    """Every derived step is the step's tokens over the published tokens/s of all GPUs; a published step
    (AutoModel's) agrees with its published tokens/s to the page's rounding."""
    for row in runs_doc["runs"]:
        measured, strategy = row["measured"], row["strategy"]
        if "tokens_per_s_per_gpu" not in measured:
            continue
        tokens = strategy["global_batch"] * row["model"]["seq_len"]
        step = tokens / (measured["tokens_per_s_per_gpu"] * strategy["gpus"])
        iteration = measured["iteration_s"]
        if isinstance(iteration, dict):
            assert iteration["derived"] and iteration["value"] == pytest.approx(step, rel=1e-4), row["id"]
        else:
            assert iteration == pytest.approx(step, rel=2e-3), row["id"]
        assert strategy["gpus"] % (strategy["tp"] * strategy["pp"] * strategy["cp"]) == 0


def test_deepseek_step_is_derived_from_the_reports_gpu_hours(runs_doc, report):
    """DeepSeek-V3 report §1: 180K H800 GPU hours per trillion tokens; §4.2: 15360 x 4096 tokens a
    step; §3.1: 2048 GPUs. 62,914,560 tokens x 1.8e-7 h x 3600 s / 2048 = 19.9066 s."""
    row = next(r for r in runs_doc["runs"] if r["id"] == "deepseek_v3_pretrain_h800_2048gpu")
    hours = row["measured"]["gpu_hours_per_trillion_tokens"]
    tokens = row["strategy"]["global_batch"] * row["model"]["seq_len"]
    assert (hours, tokens, row["strategy"]["gpus"]) == (180000, 15360 * 4096, 2048)
    step = tokens * hours / 1e12 * 3600 / row["strategy"]["gpus"]
    assert step == pytest.approx(19.9066, abs=1e-4)
    assert row["measured"]["iteration_s"]["value"] == pytest.approx(step, abs=1e-4)
    priced = next(r for r in report.rows if r.id == row["id"])
    assert priced.measured_s == pytest.approx(step, abs=1e-4)
    assert row["strategy"]["pp"] == 16 and row["strategy"]["ep"] == 64 and row["strategy"]["tp"] == 1
    # priced with its stack as DeepSeek ran it (the report's §3.2-3.3, its facts): DualPipe and its F&B
    # overlap, DeepEP on 20 SMs, node-limited routing to 4 nodes, fp8 dispatch
    from ndcost.io.validation import BUILTIN_RUNS, build_row

    spec = build_row(row, runs_doc.get("hardware", {}), BUILTIN_RUNS["moe"]).spec
    assert (spec.pp_schedule, spec.ep_overlap, spec.moe_dispatcher, spec.moe_dispatcher_sms, spec.moe_node_limit,
            spec.moe_dispatch_fp8, spec.precision) == ("dualpipe", "dualpipe", "deepep", 20, 4, True, "fp8")
    assert not any("dualpipe" in note for note in priced.notes)     # priced as stated, no nearest choice


def test_rows_are_read_with_their_stated_stack(report):
    rows = {row.id: row for row in report.rows}
    gb200 = rows["mbridge_26.04_gb200_deepseekv3_mxfp8_256gpu"].notes
    assert any("NVLink segment 64 GPUs" in note for note in gb200)
    assert any("recompute modules mlp" in note for note in gb200)
    assert any("CUDA graphs 'moe_router'" in note for note in gb200)
    assert any("'mxfp8'" in note for note in gb200)  # priced as blockwise, and said so
    assert not any("hybridep" in note for note in gb200)     # HybridEP priced as itself: no nearest choice
    h100 = rows["mbridge_26.04_h100_qwen3_235b_a22b_fp8_256gpu"].notes
    assert any("fp8_recipe current" in note for note in h100)
    mixtral = rows["nemo_25.02_b200_mixtral_8x7b_fp8_64gpu"].notes
    assert any("software nemo" in note and "delayed" in note for note in mixtral)


def test_the_facts_reach_the_specs():
    """What the loader builds from the facts (validation.build_row): EP overlap, expert TP, token drop,
    the job's NVLink segment, recompute switches."""
    from ndcost.io.validation import build_row

    doc = yaml.safe_load(MOE_RUNS.read_text(encoding="utf-8"))
    rows = {row["id"]: row for row in doc["runs"]}

    def built(run_id):
        return build_row(rows[run_id], doc["hardware"], MOE_RUNS)

    qwen = built("mbridge_26.04_h100_qwen3_235b_a22b_fp8_256gpu")
    assert qwen.overlap is None and qwen.spec.ep_overlap == "1f1b"     # Megatron-Core's EP overlap, stated
    assert (qwen.spec.tp, qwen.spec.etp, qwen.spec.pp, qwen.spec.vpp, qwen.spec.ep) == (2, 1, 8, 4, 32)
    assert qwen.spec.sequence_parallel and qwen.spec.precision == "fp8"
    gb300 = built("mbridge_26.04_gb300_deepseekv3_mxfp8_256gpu")
    assert gb300.cluster.device.devices_per_node == 64 and gb300.cluster.num_nodes == 4
    assert gb300.spec.selective_switches["attUp"] == 0 and gb300.spec.moe_dispatcher == "hybridep"
    mixtral = built("nemo_25.04_gb200_mixtral_8x7b_fp8_64gpu")
    assert not mixtral.spec.grouped_gemm  # token drop at capacity factor 1.0
    deepseek = built("deepseek_v3_pretrain_h800_2048gpu")
    assert deepseek.cluster.device.name == "h800" and deepseek.spec.dp == 128
    assert deepseek.spec.ep_overlap == "dualpipe" and deepseek.rates.fp8_recipe == "deepseek"
    gptoss = built("mbridge_26.04_gb300_gptoss120b_bf16_64gpu")
    assert gptoss.model.family == "gpt_oss" and gptoss.spec.precision == "bf16"
    # Megatron-Core's CUDA graph scopes: attention, router and preprocessing; Megatron's whole layers
    assert gptoss.spec.cuda_graphs == "moe_router" and mixtral.spec.cuda_graphs == "layer"
    assert built("mbridge_26.04_h100_qwen3_235b_a22b_fp8_256gpu").spec.cuda_graphs == "none"
    # Megatron-LM's H100 recipe graphs the router and preprocessing without the attention (a set, not a level)
    assert built("mlm_dev_h100_qwen3_235b_a22b_bf16_256gpu").spec.cuda_graphs == "router"
    automodel = built("automodel_h100_deepseekv3_bf16_256gpu")  # FSDP2 with EP, full AC, no MTP
    assert (automodel.spec.zero_stage, automodel.spec.reshard_params, automodel.spec.recompute) == (3, False, "full")
    assert automodel.model.num_nextn_predict_layers == 0 and automodel.spec.pp_schedule == "interleaved"
    assert automodel.rates.attention_kernel == "best"
    assert built("automodel_h100_gptoss120b_bf16_64gpu").rates.attention_kernel == "fa2"


def test_load_run_facts_reads_the_moe_file():
    facts = load_run_facts(str(MOE_FACTS))
    gb200 = facts["mbridge_26.04_gb200_gptoss120b_bf16_64gpu"]
    assert gb200.value("recompute_modules") == ["layernorm", "moe_act"]
    assert gb200.value("nvlink_segment") == 64
    assert facts["deepseek_v3_pretrain_h800_2048gpu"].value("software") == "megatron-te"


# ---------------------------------------------------------------------------------- fact rules


def test_recompute_modules_map_to_switches():
    switches, notes = recompute_module_switches(["layernorm", "moe_act"], "row")
    assert set(switches) == set(SWITCHES)
    assert {name for name, keep in switches.items() if not keep} == {"normOp", "ffAct"}
    core, _ = recompute_module_switches(["core_attn"], "row")
    assert {name for name, keep in core.items() if not keep} == {"attBMM", "headCast", "dropout", "softmax"}
    _, whole = recompute_module_switches(["mlp"], "row")
    assert any("whole block" in note for note in whole)
    assert set(RECOMPUTE_MODULE_SWITCHES["mla_up_proj"]) == {"attUp"}
    for bad in (["moe_actt"], [], "moe_act", None):
        with pytest.raises(SpecError, match="recompute_modules"):
            recompute_module_switches(bad, "row")


def test_stack_choices_say_what_they_price():
    assert stack_choice("pp_schedule", "1f1b", ("1f1b", "interleaved"), "interleaved", "why") == ("1f1b", None)
    value, note = stack_choice("pp_schedule", "dualpipe", ("1f1b",), "1f1b", "the reason")
    assert value == "1f1b" and "'dualpipe'" in note and "the reason" in note
    assert dispatcher_choice("flex with DeepEP", ("alltoall", "deepep")) == ("deepep", None)
    assert dispatcher_choice("alltoall", ("alltoall", "deepep")) == ("alltoall", None)
    value, note = dispatcher_choice("flex with HybridEP", ("alltoall", "deepep"))
    assert value == "deepep" and "hybridep" in note
    assert dispatcher_choice("HybridEP", ("alltoall", "deepep", "hybridep")) == ("hybridep", None)


def test_catalog_clusters_take_the_jobs_nvlink_segment():
    cluster, note = catalog_cluster({"device": "gb200-nvl72"}, 256, 64, "row")
    assert cluster.device.devices_per_node == 64 and cluster.num_nodes == 4 and "64" in note
    cluster, _ = catalog_cluster({"device": "b200"}, 64, None, "row")
    assert cluster.device.devices_per_node == 8 and cluster.num_nodes == 8
    with pytest.raises(SpecError):
        catalog_cluster({"device": "gb200-nvl72"}, 256, None, "row")  # 256 is not whole 72-GPU domains
    with pytest.raises(SpecError):
        catalog_cluster({"device": "b300"}, 64, None, "row")
    with pytest.raises(SpecError, match="hardware.device"):
        catalog_cluster({}, 64, None, "row")


def test_a_row_naming_an_unknown_device_is_skipped_with_the_reason(tmp_path):
    doc = yaml.safe_load(MOE_RUNS.read_text(encoding="utf-8"))
    doc["hardware"]["dgx_b200"]["device"] = "b300"
    path = tmp_path / "moe_runs.yaml"  # the facts file is found by this name
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    rows = {row.id: row for row in validate_runs(path).rows}
    skipped = rows["mbridge_26.04_b200_deepseekv3_mxfp8_256gpu"].skipped
    assert skipped and "b300" in skipped
    assert rows["mbridge_26.04_gb300_deepseekv3_mxfp8_256gpu"].skipped is None


def test_validate_builtin_moe_on_the_command_line(capsys):
    assert main(["validate", "--builtin", "moe"]) == 0
    table = capsys.readouterr().out
    assert "deepseek_v3_pretrain_h800_2048gpu" in table and "| **all** | 34 |" in table
    assert main(["validate", "--builtin", "moe", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 34 and set(out["family_mae"]) >= {"gpt_oss", "mixtral"}


def test_cuda_graph_facts_as_ndcost_prices_them():
    """Megatron-Core's graph scopes are a set, and so are ndcost's: a router scope without the attention leaves
    the attention launched (the Qwen3-235B-A22B H100 recipe's), with it is 'moe_router'; no scope, or the full
    iteration, captures whole layers; an unknown scope is refused by name."""
    from ndcost.io.fact_rules import cuda_graphs_choice

    assert cuda_graphs_choice("true: transformer_engine, scope attn, moe_router, moe_preprocess")[0] == "moe_router"
    assert cuda_graphs_choice("true: transformer_engine, scope attn")[0] == "attn"
    assert cuda_graphs_choice("true: megatron-core enable_cuda_graph (whole transformer layers)")[0] == "layer"
    assert cuda_graphs_choice("true: local, scope full_iteration")[0] == "layer"
    assert cuda_graphs_choice("true: transformer_engine, scope attn, moe")[0] == "layer"
    assert cuda_graphs_choice("true: transformer_engine, scope mlp")[0] == "ffn"
    choice, note = cuda_graphs_choice("true: transformer_engine, scope moe_router, moe_preprocess")
    assert choice == "router" and "'router'" in note
    with pytest.raises(SpecError, match="cuda_graphs"):
        cuda_graphs_choice("true: transformer_engine, scope attention")


def test_hybridep_rows_give_its_kernels_the_stated_sms(runs_doc):
    """Megatron-Bridge's perf overrides set moe_hybridep_num_sms = 32 wherever the flex backend is HybridEP (fact
    hybridep_sms): those rows' dispatcher holds 32 SMs (what it takes from an overlapped micro-batch's compute); an
    all-to-all row keeps the DeepEP default, 20, which it never uses."""
    from ndcost.io.validation import BUILTIN_RUNS, build_row

    rows = {row["id"]: row for row in runs_doc["runs"]}

    def spec(run_id):
        return build_row(rows[run_id], runs_doc.get("hardware", {}), BUILTIN_RUNS["moe"]).spec

    gb200 = spec("mbridge_26.04_gb200_gptoss120b_bf16_64gpu")
    assert (gb200.moe_dispatcher, gb200.ep_overlap, gb200.moe_dispatcher_sms) == ("hybridep", "1f1b", 32)
    gb300 = spec("mbridge_26.04_gb300_gptoss120b_bf16_64gpu")
    assert (gb300.moe_dispatcher, gb300.moe_dispatcher_sms) == ("alltoall", 20)


def test_the_stated_param_gather_overlap_is_read(runs_doc):
    """Megatron-Bridge's MoE recipes set ddp.overlap_param_gather = True (fact overlap_param_gather): with the
    distributed optimizer (ZeRO-1) the next step's parameter all-gather runs under its first forward."""
    from ndcost.io.validation import BUILTIN_RUNS, build_row

    row = next(r for r in runs_doc["runs"] if r["id"] == "mbridge_26.04_b200_gptoss120b_bf16_64gpu")
    spec = build_row(row, runs_doc.get("hardware", {}), BUILTIN_RUNS["moe"]).spec
    assert (spec.zero_stage, spec.overlapped_param_gather) == (1, True)
