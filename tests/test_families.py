"""The config.json families beyond Llama/Qwen/DeepSeek-V3: each read from its public model's real
fields (``tests/data/hf_configs/<family>.json``, each file naming its source), its parameters
checked against the published figure, and one estimate in seconds with memory on both backends."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import ndcost
from ndcost import Cluster, ExecSpec, Model
from ndcost.kernels.columns import PART_NAMES
from ndcost.errors import SpecError

from strategies import on_both_backends

DATA = Path(__file__).parent / "data" / "hf_configs"
FAMILIES = sorted(path.stem for path in DATA.glob("*.json"))


def _entry(family: str) -> dict:
    return json.loads((DATA / f"{family}.json").read_text(encoding="utf-8"))


def _model(family: str) -> Model:
    return Model.from_hf_config(_entry(family)["config"], name=family)


def test_every_new_family_has_a_config_file():
    assert set(FAMILIES) >= {"mistral", "phi3", "olmo2", "gemma2", "gemma3", "gpt_oss", "qwen2_moe",
                             "deepseek_v2", "kimi_k2", "llama4", "nemotron_h", "glm4_moe", "jamba"}
    for family in FAMILIES:
        source = _entry(family)["source"]
        assert source["hf_repo"] and source["config_source"], family


@pytest.mark.parametrize("family", FAMILIES)
def test_total_parameters_match_the_published_figure(family):
    """Within 1% of the published total, or within the rounding the source states its figure to."""
    published = _entry(family)["published"]
    count = _model(family).parameter_count()
    tolerance = max(0.01 * published["total"], published.get("total_rounding", 0))
    assert abs(count.total - published["total"]) <= tolerance, (count.total, published)


@pytest.mark.parametrize("family", [f for f in FAMILIES if "active" in _entry(f)["published"]])
def test_active_parameters_match_in_the_cards_convention(family):
    published = _entry(family)["published"]
    model = _model(family)
    active = model.parameter_count().active
    if published["active_convention"].startswith("without the input embedding"):
        active -= model.embedding_parameters()
    tolerance = max(0.01 * published["active"], published.get("active_rounding", 0))
    assert abs(active - published["active"]) <= tolerance, (active, published)


def test_gemma_runs_four_norms_a_layer(kernels):
    """Gemma 2/3's four RMSNorms a layer are elementwise work seconds mode prices: the same model
    with the llama family's two norms spends half the norm time (read + write of the residual)."""
    from ndcost.kernels.columns import SECONDS_LAYER, SECONDS_LAYER_FIELDS
    from ndcost.tables.seconds import seconds_arrays
    import numpy as np

    spec = ExecSpec(dp=1, tp=2, pp=1, micro_batch_size=1, micro_batch_num=1, seq_length=4096,
                    sequence_parallel=True)
    gemma = _model("gemma2")
    assert {kind.ops.normOp for kind in gemma.kinds} == {4.0}
    rows = []
    for model in (gemma, Model(**{**gemma.to_dict(), "family": "llama", "layer_types": None, "sliding_window": 0,
                                  "census": ()})):
        a = seconds_arrays(model, spec, Cluster("h100-sxm", 2))
        out = np.empty((len(model.kinds), len(SECONDS_LAYER_FIELDS)))
        kernels.seconds_layer_times(a["kinds"], a["skinds"], a["model"], a["smodel"], a["cand"], a["rate"], out)
        rows.append(out[-1][SECONDS_LAYER["sw_normOp"]])
    assert rows[0] == pytest.approx(2.0 * rows[1], rel=1e-12)    # bytes and kernels both double


def test_gemma2_matches_its_report_to_the_parameter():
    """Gemma 2 report Table 2 states 9B's counts to the unit: four RMSNorms a layer, head_dim 256 with
    16 heads over a 3,584-wide residual, tied embeddings."""
    model = _model("gemma2")
    published = _entry("gemma2")["published"]
    assert model.embedding_parameters() == published["embedding"]
    assert model.output_parameters() == 0                        # tied
    count = model.parameter_count()
    assert count.total - model.embedding_parameters() == published["non_embedding"]


def test_olmo2_by_hand():
    """OLMo 2 7B, modeling_olmo2: q/k/v/o 4·4096², q_norm over 4096 and k_norm over 4096 (the whole
    projections, MHA), two post-norms, SwiGLU 3·4096·11008, untied 100,352-token tables."""
    h, layers, ffn, vocab = 4096, 32, 11008, 100352
    per_layer = 4 * h * h + 2 * h + 2 * h + 3 * h * ffn
    assert _model("olmo2").parameter_count().total == layers * per_layer + 2 * vocab * h + h


def test_gpt_oss_by_hand():
    """gpt-oss-120b: q/k/v/o with biases, one sink logit per head, a biased router, 128 SwiGLU experts
    with biases (gate_up 2·2880 + down 2880), alternating 128-token sliding and full attention."""
    h, heads, kv, d, experts, width, layers, vocab = 2880, 64, 8, 64, 128, 2880, 36, 201088
    attention = (h * heads * d + heads * d) + 2 * (h * kv * d + kv * d) + (heads * d * h + h) + heads
    expert = 3 * h * width + 2 * width + h
    per_layer = attention + 2 * h + (experts * h + experts) + experts * expert
    model = _model("gpt_oss")
    assert model.parameter_count().total == layers * per_layer + 2 * vocab * h + h
    assert [kind.name for kind in model.kinds] == ["sliding_moe", "full_moe"]
    assert [kind.window for kind in model.kinds] == [128, 0]
    assert model.layer_kinds_in_order[:4] == (0, 1, 0, 1)


def test_sliding_layers_follow_each_familys_rule():
    gemma2, gemma3 = _model("gemma2"), _model("gemma3")
    # Gemma2DecoderLayer: even layers slide (4,096 keys); Gemma3TextConfig: every 6th layer is global
    assert gemma2.layer_kinds_in_order[:4] == (0, 1, 0, 1) and gemma2.kinds[0].window == 4096
    order = gemma3.layer_kinds_in_order
    assert [gemma3.kinds[i].window for i in order[:6]] == [1024] * 5 + [0]
    assert sum(1 for i in order if gemma3.kinds[i].window == 0) == 62 // 6
    # Mistral and Phi-3 slide on every layer when sliding_window is set, and on none when it is null
    assert [k.window for k in _model("mistral").kinds] == [4096]
    assert [k.window for k in _model("phi3").kinds] == [2047]
    config = dict(_entry("mistral")["config"], sliding_window=None)
    assert [k.window for k in Model.from_hf_config(config).kinds] == [0]


def test_sliding_window_costs_less_attention_than_full():
    """Same Mistral, same strategy: the 4,096-key window at 32k tokens runs fewer attention FLOPs."""
    config = _entry("mistral")["config"]
    windowed, full = Model.from_hf_config(config), Model.from_hf_config(dict(config, sliding_window=None))
    spec = ExecSpec(dp=1, tp=8, pp=1, global_batch_size=8, seq_length=32768, sequence_parallel=True)
    cluster = Cluster("h100-sxm", num_devices=8)
    a, b = ndcost.estimate(windowed, spec, cluster), ndcost.estimate(full, spec, cluster)
    assert a.step_time < b.step_time
    assert a.memory.peak_allocated <= b.memory.peak_allocated


_STRATEGY = {
    "mistral": dict(dp=2, tp=4, pp=1, global_batch_size=32, seq_length=8192, sequence_parallel=True),
    "phi3": dict(dp=8, tp=1, pp=1, global_batch_size=64, seq_length=4096),
    "olmo2": dict(dp=4, tp=2, pp=1, global_batch_size=64, seq_length=4096, sequence_parallel=True),
    "gemma2": dict(dp=2, tp=4, pp=1, global_batch_size=32, seq_length=8192, sequence_parallel=True),
    "gemma3": dict(dp=2, tp=8, pp=2, global_batch_size=64, seq_length=8192, sequence_parallel=True,
                   recompute="selective"),
    "gpt_oss": dict(dp=8, tp=1, pp=4, ep=8, global_batch_size=256, seq_length=4096, recompute="full"),
    "qwen2_moe": dict(dp=8, tp=1, pp=1, ep=4, global_batch_size=64, seq_length=4096),
    "deepseek_v2": dict(dp=8, tp=1, pp=1, ep=8, global_batch_size=64, seq_length=4096),
    "llama4": dict(dp=8, tp=4, pp=4, ep=8, global_batch_size=256, seq_length=16384, sequence_parallel=True,
                   recompute="full"),
    "nemotron_h": dict(dp=8, tp=8, pp=4, global_batch_size=768, seq_length=8192, sequence_parallel=True,
                       recompute="selective"),
    "glm4_moe": dict(dp=16, tp=2, pp=2, ep=16, global_batch_size=512, seq_length=4096, sequence_parallel=True,
                     recompute="full"),
    "jamba": dict(dp=8, tp=4, pp=2, ep=8, global_batch_size=256, seq_length=8192, sequence_parallel=True,
                  recompute="full"),
    "kimi_k2": dict(dp=32, tp=1, pp=16, ep=32, global_batch_size=1024, seq_length=4096, recompute="full"),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_one_estimate_in_seconds_and_memory_on_both_backends(ckernels, family):
    model = _model(family)
    spec = ExecSpec(**_STRATEGY[family])
    cluster = Cluster("h100-sxm", num_devices=spec.num_devices)
    results = on_both_backends(lambda: ndcost.estimate(model, spec, cluster))
    c, py = results["cython"], results["python"]
    assert math.isfinite(c.step_time) and c.step_time > 0
    assert c.step_time == pytest.approx(py.step_time, rel=1e-12)
    for part in PART_NAMES:
        assert c.parts[part] == pytest.approx(py.parts[part], rel=1e-12, abs=1e-15 * c.step_time)
    assert 0.0 < c.mfu <= c.hfu <= 1.0
    assert c.memory.peak_allocated == pytest.approx(py.memory.peak_allocated, rel=1e-12)
    assert c.memory.peak_reserved == pytest.approx(py.memory.peak_reserved, rel=1e-12)
    if model.has_mamba:
        with pytest.raises(SpecError, match="ND's op tables cannot price a Mamba-[12] mixer"):
            ndcost.estimate(model, spec, cluster, units="nd")
        return
    nd = on_both_backends(lambda: ndcost.estimate(model, spec, cluster, units="nd"))
    assert nd["cython"].step_time == pytest.approx(nd["python"].step_time, rel=1e-12)


def test_a_sliding_layer_without_a_window_is_refused():
    config = dict(_entry("gpt_oss")["config"])
    del config["sliding_window"]
    with pytest.raises(SpecError, match="sliding_window"):
        Model.from_hf_config(config)


def test_nemotron_h_blocks_by_hand():
    """Nemotron-H 56B (modeling_nemotron_h): 54 Mamba-2 blocks -- in_proj 8192 -> 2·16384 + 2·8·256 + 256,
    conv1d over 16384 + 2·8·256 channels (4 taps + bias), dt_bias/A_log/D per head, a gated RMSNorm over
    16384, out_proj 16384 -> 8192 -- 10 attention blocks, 54 squared-ReLU MLPs (2 matmuls of 32,768),
    one RMSNorm a block, untied 131,072-token tables."""
    h, heads, p, groups, state, conv_k = 8192, 256, 64, 8, 256, 4
    d_inner, conv = heads * p, heads * p + 2 * groups * state
    mamba = h * (2 * d_inner + 2 * groups * state + heads) + conv * conv_k + conv + 3 * heads + d_inner + d_inner * h
    attention = 2 * h * h + 2 * h * 8 * 128
    mlp = 2 * h * 32768
    model = _model("nemotron_h")
    assert model.parameter_count().total == (54 * (mamba + h) + 10 * (attention + h) + 54 * (mlp + h)
                                             + 2 * 131072 * h + h)
    assert [(k.attention, k.ffn) for k in model.kinds] == [("mamba", "none"), ("none", "dense"), ("full", "none")]


def test_hybrid_rules_refuse_what_is_not_priced():
    model = _model("nemotron_h")
    cluster = Cluster("h100-sxm", num_devices=64)
    four_groups = Model.from_hf_config(dict(_entry("nemotron_h")["config"], n_groups=4))
    with pytest.raises(SpecError, match=r"divide mamba_n_groups \(4\)"):
        ndcost.estimate(four_groups, ExecSpec(dp=8, tp=8, global_batch_size=64, seq_length=8192), cluster)
    with pytest.raises(SpecError, match="context parallelism is not priced"):
        ndcost.estimate(model, ExecSpec(dp=4, tp=8, cp=2, global_batch_size=64, seq_length=8192), cluster)


def test_jamba_layers_by_hand():
    """Jamba (modeling_jamba): 28 Mamba-1 layers (in_proj 4096 -> 2·8192, conv1d 8192 x 4 + bias,
    x_proj 8192 -> 256 + 2·16, dt_proj 256 -> 8192 + bias, A_log 8192 x 16, D, the dt/B/C RMSNorms,
    out_proj 8192 -> 4096) and 4 attention layers (i % 8 == 4); every odd layer a MoE of 16 SwiGLU
    experts of 14,336 (top-2, unbiased router), the others a SwiGLU MLP; two RMSNorms a layer."""
    h, d, rank, state, conv_k, ff, experts = 4096, 8192, 256, 16, 4, 14336, 16
    mamba = 3 * h * d + d * conv_k + d + d * (rank + 2 * state) + rank * d + d + d * state + d + rank + 2 * state
    attention = 2 * h * h + 2 * h * 1024
    mlp = 3 * h * ff
    moe = experts * mlp + experts * h
    model = _model("jamba")
    expected = 28 * mamba + 4 * attention + 16 * mlp + 16 * moe + 32 * 2 * h + 2 * 65536 * h + h
    assert model.parameter_count().total == expected
    order = [model.kinds[i] for i in model.layer_kinds_in_order]
    assert [k.attention for k in order[:9]] == ["mamba1"] * 4 + ["full"] + ["mamba1"] * 4
    assert [k.ffn for k in order[:4]] == ["dense", "moe", "dense", "moe"]


def test_gemma2_soft_caps_its_logits():
    """Gemma 2's final_logit_softcapping prices one more elementwise pass over the logits; without it
    (the same config, the key removed) the step is shorter by that pass only."""
    config = _entry("gemma2")["config"]
    capped = Model.from_hf_config(config)
    plain = Model.from_hf_config({k: v for k, v in config.items() if k != "final_logit_softcapping"})
    assert capped.logit_softcapping and not plain.logit_softcapping
    spec = ExecSpec(dp=2, tp=4, pp=1, global_batch_size=32, seq_length=8192, sequence_parallel=True)
    cluster = Cluster("h100-sxm", num_devices=8)
    a, b = ndcost.estimate(capped, spec, cluster), ndcost.estimate(plain, spec, cluster)
    assert a.step_time > b.step_time
    assert a.parts["tp_comm"] == b.parts["tp_comm"]


def test_gpt_oss_alternating_windows_by_hand(kernels):
    """gpt-oss-120b at 8,192 tokens: a sliding layer's 64 heads (d 64) meet s·128 - 128·127/2 key pairs,
    a full layer's the causal half of s²; attention FLOPs 2·b·pairs·heads·(d_qk + d_v) each, and the
    model's attention core is 18 of each."""
    import numpy as np

    from ndcost.kernels.columns import SECONDS_LAYER, SECONDS_LAYER_FIELDS
    from ndcost.tables.seconds import seconds_arrays

    model = _model("gpt_oss")
    spec = ExecSpec(dp=1, tp=1, pp=1, ep=1, micro_batch_size=1, micro_batch_num=1, seq_length=8192)
    a = seconds_arrays(model, spec, Cluster("h100-sxm", 1))
    out = np.empty((len(model.kinds), len(SECONDS_LAYER_FIELDS)))
    kernels.seconds_layer_times(a["kinds"], a["skinds"], a["model"], a["smodel"], a["cand"], a["rate"], out)
    s, w, heads, d = 8192.0, 128.0, 64.0, 64.0
    sliding = 2.0 * (s * w - w * (w - 1.0) / 2.0) * heads * (d + d)
    full = 2.0 * s * s * heads * (d + d) * 0.5
    names = [kind.name for kind in model.kinds]
    core = out[:, SECONDS_LAYER["flops_core"]]
    assert core[names.index("sliding_moe")] == pytest.approx(sliding, rel=1e-12)
    assert core[names.index("full_moe")] == pytest.approx(full, rel=1e-12)
    counts = dict(zip(names, (body for body, _ in model.kind_counts())))
    assert counts == {"sliding_moe": 18, "full_moe": 18}


def test_the_new_families_run_end_to_end_on_the_command_line(capsys):
    from ndcost.cli.main import main

    assert main(["estimate", "gpt-oss-120b", "--device", "h100-sxm", "--dp", "16", "--pp", "4", "--ep", "16",
                 "--global-batch-size", "512", "--seq-length", "8192", "--recompute", "full"]) == 0
    assert "gpt-oss-120b on 64 x h100-sxm" in capsys.readouterr().out
    assert main(["search", "nemotron-h-56b", "--device", "h100-sxm", "--devices", "256", "--global-batch-size",
                 "768", "--seq-length", "8192", "--top", "3", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "ndcost estimate nemotron-h-56b" in out
    assert main(["estimate", "nemotron-h-56b", "--device", "h100-sxm", "--dp", "8", "--tp", "8", "--pp", "4",
                 "--global-batch-size", "768", "--seq-length", "8192", "--units", "nd"]) == 2
    assert "ND's op tables cannot price a Mamba-2 mixer" in capsys.readouterr().err


def test_gemma_keeps_its_post_norm_inputs(ckernels):
    """Gemma 2's post-attention and post-feedforward norms keep their inputs: a layer without recompute
    keeps 2 x tokens x hidden / sp x norm bytes more than the same layer with two norms (both backends)."""
    from ndcost import _backend
    from ndcost.tables.memory import memory_candidate_vector, memory_kind_table
    from ndcost.kernels.columns import MEMORY_KIND, OPTION_FULL, OPTION_NONE

    model = _model("gemma2")
    spec = ExecSpec(dp=1, tp=4, pp=1, micro_batch_size=1, micro_batch_num=1, seq_length=8192,
                    sequence_parallel=True)
    table = memory_kind_table(model)
    mc = memory_candidate_vector(model, spec)
    assert list(table[:, MEMORY_KIND["extra_norms"]]) == [2.0, 2.0]
    two = table.copy()
    two[:, MEMORY_KIND["extra_norms"]] = 0.0
    for backend in ("cython", "python"):
        with _backend.use(backend) as kernels:
            more = kernels.kind_activation_bytes(table[0], mc, OPTION_NONE, 255)
            less = kernels.kind_activation_bytes(two[0], mc, OPTION_NONE, 255)
            assert more - less == pytest.approx(2 * 8192 * 3584 / 4 * 2, rel=1e-12)
            assert kernels.kind_activation_bytes(table[0], mc, OPTION_FULL, 255) == \
                kernels.kind_activation_bytes(two[0], mc, OPTION_FULL, 255)
