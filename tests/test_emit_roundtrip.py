"""What ``--emit megatron|nemo|torchtitan`` prints, read back by a small parser of each launcher's own settings,
prices the same strategy to 1e-12: the printed settings are the whole strategy (its stack included), and they
state the model's shape.

Each parser below reads the launcher's names as the launcher does (Megatron-LM's flags, NeMo 2.0's recipe
attributes, torchtitan's TOML keys), independently of the emitter's tables.
"""
from __future__ import annotations

import ast
import re
import shlex
import tomllib

import pytest

import ndcost
from ndcost.io.emit import megatron_flags, nemo_recipe, torchtitan_toml
from ndcost.spec.software_fields import with_software
from ndcost.spec.stack_rates import stack_rates
from ndcost.spec.stack_options import with_torchtitan_op

_RECIPES = {"delayed": "delayed", "tensorwise": "current", "blockwise": "blockwise"}
_PLUGINS = {"bf16_mixed": ("bf16", None), "fp16_mixed": ("fp16", None), "bf16_with_fp8_mixed": ("fp8", "delayed"),
            "bf16_with_fp8_current_scaling_mixed": ("fp8", "current"),
            "bf16_with_fp8_subchannel_scaling_mixed": ("fp8", "blockwise")}


def _vpp(layout: str | None, pp: int, stated: int) -> int:
    """Virtual stages per rank: a layout's ("|" between virtual stages), else the stated degree."""
    return stated if layout is None else (layout.count("|") + 1) // pp


def _megatron_words(text: str) -> dict:
    body = " ".join(line.rstrip("\\").strip() for line in text.splitlines() if not line.startswith("#"))
    flags, key = {}, None
    for word in shlex.split(body):
        if word.startswith("--"):
            key = word
            flags[key] = []
        else:
            flags[key].append(word)
    return {k: (v[0] if len(v) == 1 else (v if v else True)) for k, v in flags.items()}


def parse_megatron(text: str, devices: int) -> tuple[dict, dict, dict]:
    """(ExecSpec fields, Rates figures, model shape) that Megatron-LM's flags state."""
    f = _megatron_words(text)
    tp, pp, cp = (int(f.get(k, 1)) for k in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                                              "--context-parallel-size"))
    zero = (3 if "--use-torch-fsdp2" in f else 2 if f.get("--data-parallel-sharding-strategy") == "optim_grads"
            else 1 if "--use-distributed-optimizer" in f else 0)
    granularity = f.get("--recompute-granularity")
    recompute = {None: "none", "full": "full", "selective": "selective"}[granularity]
    if granularity == "full":
        assert f["--recompute-method"] == "uniform"
    if granularity == "selective":
        assert f["--recompute-modules"] == "core_attn"
    precision = "fp8" if "--fp8-format" in f else "fp16" if "--fp16" in f else "bf16"
    fields = dict(dp=devices // (tp * pp * cp), tp=tp, pp=pp, cp=cp,
                  vpp=_vpp(f.get("--pipeline-model-parallel-layout"), pp,
                           int(f.get("--num-virtual-stages-per-pipeline-rank", 1))),
                  sequence_parallel="--sequence-parallel" in f,
                  cp_algo={"a2a": "ulysses", "all_gather": "ring-allgather"}.get(f.get("--cp-comm-type"), "ring"),
                  micro_batch_size=int(f["--micro-batch-size"]), global_batch_size=int(f["--global-batch-size"]),
                  seq_length=int(f["--seq-length"]), zero_stage=zero, recompute=recompute, precision=precision,
                  tp_overlap="--tp-comm-overlap" in f, overlapped_grad_reduce="--overlap-grad-reduce" in f,
                  overlapped_param_gather="--overlap-param-gather" in f,
                  dropout_bytes=1 if float(f["--hidden-dropout"]) > 0 else 0,
                  flash_attention=f.get("--attention-backend") != "unfused")
    if "--fp8-param-gather" in f:
        fields["param_bytes"] = 1
    if "--num-experts" in f:
        fields.update(ep=int(f["--expert-model-parallel-size"]), grouped_gemm="--moe-grouped-gemm" in f,
                      moe_dispatcher="deepep" if f.get("--moe-flex-dispatcher-backend") == "deepep" else "alltoall")
        if "--moe-expert-capacity-factor" in f:
            fields["capacity_factor"] = float(f["--moe-expert-capacity-factor"])
    figures = {"grad_accumulation_fusion": "--no-gradient-accumulation-fusion" not in f}
    if precision == "fp8":
        figures["fp8_recipe"] = _RECIPES[f["--fp8-recipe"]]
    shape = dict(num_hidden_layers=int(f["--num-layers"]), hidden_size=int(f["--hidden-size"]),
                 num_attention_heads=int(f["--num-attention-heads"]), vocab_size=int(f["--vocab-size"]),
                 num_key_value_heads=int(f.get("--num-query-groups", f["--num-attention-heads"])))
    if "--ffn-hidden-size" in f:
        shape["intermediate_size"] = int(f["--ffn-hidden-size"])
    return fields, figures, shape


def parse_nemo(text: str, devices: int) -> tuple[dict, dict, dict]:
    """(ExecSpec fields, Rates figures, model shape) that NeMo 2.0 recipe statements state."""
    values, comm, plugin = {}, {}, None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("recipe.trainer.callbacks.append("):
            comm = {k: ast.literal_eval(v) for k, v in re.findall(r"(\w+)=([^,)]+)", line)}
        elif m := re.fullmatch(r"recipe\.trainer\.plugins = (\w+)\(\)", line):
            plugin = m.group(1)
        else:
            m = re.fullmatch(r"recipe\.(\S+) = (.+)", line)
            values[m.group(1)] = ast.literal_eval(m.group(2))
    s, c = "trainer.strategy.", "model.config."
    tp, pp, cp = (values.get(s + k, 1) for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                                 "context_parallel_size"))
    precision, recipe = _PLUGINS[plugin]
    zero = (3 if values.get(s + "fsdp") == "pytorch" else 2 if values.get(s + "ddp.data_parallel_sharding_strategy")
            == "optim_grads" else 1 if values.get(s + "ddp.use_distributed_optimizer") else 0)
    recompute = values.get(c + "recompute_granularity") or "none"
    if recompute == "full":
        assert values[c + "recompute_method"] == "uniform"
    fields = dict(dp=devices // (tp * pp * cp), tp=tp, pp=pp, cp=cp,
                  vpp=_vpp(values.get(s + "pipeline_model_parallel_layout"), pp,
                           values.get(s + "virtual_pipeline_model_parallel_size", 1)),
                  sequence_parallel=values.get(s + "sequence_parallel", False),
                  cp_algo={"a2a": "ulysses", "all_gather": "ring-allgather"}.get(values.get(c + "cp_comm_type"), "ring"),
                  micro_batch_size=values["data.micro_batch_size"], global_batch_size=values["data.global_batch_size"],
                  seq_length=values["data.seq_length"], zero_stage=zero, recompute=recompute, precision=precision,
                  tp_overlap=comm.get("tp_comm_overlap", False), overlapped_grad_reduce=comm["overlap_grad_reduce"],
                  overlapped_param_gather=comm["overlap_param_gather"],
                  dropout_bytes=1 if values[c + "hidden_dropout"] > 0 else 0,
                  flash_attention=values.get(c + "attention_backend") != "unfused")
    if values.get("trainer.plugins.fp8_param_gather"):
        fields["param_bytes"] = 1
    if c + "num_moe_experts" in values:
        fields.update(ep=values[s + "expert_model_parallel_size"], grouped_gemm=values.get(c + "moe_grouped_gemm", False),
                      moe_dispatcher="deepep" if values.get(c + "moe_flex_dispatcher_backend") == "deepep"
                      else "alltoall")
        if c + "moe_expert_capacity_factor" in values:
            fields["capacity_factor"] = float(values[c + "moe_expert_capacity_factor"])
    figures = {"grad_accumulation_fusion": values.get(c + "gradient_accumulation_fusion", True)}
    if recipe is not None:
        figures["fp8_recipe"] = recipe
    shape = dict(num_hidden_layers=values[c + "num_layers"], hidden_size=values[c + "hidden_size"],
                 num_attention_heads=values[c + "num_attention_heads"], vocab_size=values[c + "vocab_size"],
                 num_key_value_heads=values.get(c + "num_query_groups", values[c + "num_attention_heads"]))
    if c + "ffn_hidden_size" in values:
        shape["intermediate_size"] = values[c + "ffn_hidden_size"]
    return fields, figures, shape


def parse_torchtitan(text: str, devices: int, layers: int) -> tuple[dict, dict, bool]:
    """(ExecSpec fields, Rates figures, per-op SAC?) that torchtitan's job-config TOML states."""
    doc = tomllib.loads(text)
    par, train, ac = doc["parallelism"], doc["training"], doc["activation_checkpoint"]
    pp = par["pipeline_parallel_degree"]
    vpp = layers // (pp * par["pipeline_parallel_layers_per_stage"]) if "pipeline_parallel_layers_per_stage" in par \
        else 1
    micro = par["pipeline_parallel_microbatch_size"]
    dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    fields = dict(dp=dp, tp=par["tensor_parallel_degree"], pp=pp, cp=par["context_parallel_degree"], vpp=vpp,
                  micro_batch_size=micro, global_batch_size=train["global_batch_size"], seq_length=train["seq_len"],
                  recompute=ac["mode"], tp_overlap=doc["compile"]["enable_async_tensor_parallel"],
                  precision="fp8" if "float8" in doc else "fp16" if train["mixed_precision_param"] == "float16"
                  else "bf16")
    assert train["local_batch_size"] == train["global_batch_size"] // dp
    if par.get("context_parallel_rotate_method") == "allgather":
        fields["cp_algo"] = "ring-allgather"
    figures = {"fp8_recipe": "torchao"} if doc.get("float8", {}).get("recipe_name") == "tensorwise" else {}
    if ac["mode"] == "selective":
        assert ac["selective_ac_option"] == "op"
        fields["selective_rule"] = "torchtitan-op"
    return fields, figures, ac["mode"] == "selective"


class _Priced:
    def __init__(self, spec, estimate):
        self.spec, self.estimate = spec, estimate


def _top(model, cluster, software=None, rates=None, count=16, **dims):
    """Strategies drawn across a search's whole space (seeded), each priced: not only the fastest few, so that
    every listed value of every dimension is read back."""
    import numpy as np

    from ndcost.price.search import _spec_of
    from ndcost.spec.search_space import build_space
    from ndcost.spec.software_fields import software_columns, software_fields

    if software is not None and "zero_stage" in software_fields(software):
        dims.setdefault("zero_stage", software_fields(software)["zero_stage"])
    batch, seq = dims.pop("global_batch_size"), dims.pop("seq_length")
    space = build_space(model, cluster.num_devices, cluster.device.devices_per_node, global_batch_size=batch,
                        seq_length=seq, dims=dims)
    columns = dict(space.columns)
    if software is not None:
        columns.update(software_columns(software, columns))
    out = []
    for i in np.random.default_rng(7).permutation(space.size):
        try:
            spec = _spec_of({k: v for k, v in columns.items() if k not in ("global_batch_size", "seq_length")},
                            int(i), {"global_batch_size": batch, "seq_length": seq})
            priced = ndcost.estimate(model, spec, cluster, rates=rates)
        except ValueError:
            continue
        out.append(_Priced(spec, priced))
        if len(out) == count:
            break
    return out


def _check(model, cluster, ranked, fields, figures, software, rates):
    model2, fields = with_torchtitan_op(model.with_census(()) if fields.get("selective_rule") else model, fields)
    spec = with_software(software, fields)
    assert spec == ranked.spec
    rates2 = stack_rates(cluster, software=software, figures=figures)
    again = ndcost.estimate(model2, spec, cluster, rates=rates2)
    assert again.step_time == pytest.approx(ranked.estimate.step_time, rel=1e-12)
    assert again.memory.peak == pytest.approx(ranked.estimate.memory.peak, rel=1e-12)


_SHAPE = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "num_key_value_heads",
          "intermediate_size")

_MEGATRON_CASES = [
    ("llama3-70b", 64, dict(global_batch_size=128, seq_length=8192, tp_overlap=[True, False],
                            precision=["bf16", "fp8"], recompute=["none", "full", "selective"]), "current"),
    ("llama3-8b", 16, dict(global_batch_size=64, seq_length=4096, zero_stage=[0, 1, 2],
                           overlapped_param_gather=[True, False], overlapped_grad_reduce=[True, False],
                           dropout_bytes=[0, 1]), None),
    ("mixtral-8x7b", 64, dict(global_batch_size=256, seq_length=4096, grouped_gemm=[True, False], capacity_factor=1.25,
                              precision=["bf16", "fp8"], cp=[1, 2], cp_algo=["ring", "ulysses"],
                              moe_dispatcher=["alltoall", "deepep"]), "blockwise"),
]


@pytest.mark.parametrize("launcher", ["megatron", "nemo"])
@pytest.mark.parametrize("name, devices, dims, recipe", _MEGATRON_CASES, ids=[case[0] for case in _MEGATRON_CASES])
def test_megatron_core_settings_read_back_price_the_same(launcher, name, devices, dims, recipe):
    model = ndcost.Model.from_catalog(name)
    cluster = ndcost.Cluster("h100-sxm", devices)
    rates = stack_rates(cluster, figures={"fp8_recipe": recipe} if recipe else {})
    results = _top(model, cluster, rates=rates, **dims)
    assert len(results) == 16
    for ranked in results:
        emitter, parser = (megatron_flags, parse_megatron) if launcher == "megatron" else (nemo_recipe, parse_nemo)
        text = emitter(model, ranked.spec, rates=rates)
        assert "# not stated" not in text, text
        fields, figures, shape = parser(text, devices)
        _check(model, cluster, ranked, fields, figures, None, rates)
        for key, value in shape.items():
            assert getattr(model, key) == value, key
        assert set(shape) >= set(_SHAPE) - ({"intermediate_size"} if model.intermediate_size is None else set())


@pytest.mark.parametrize("software", ["torchtitan-compile", "torchtitan-eager"])
def test_torchtitan_settings_read_back_price_the_same(software):
    model = ndcost.Model.from_catalog("llama3-8b")
    cluster = ndcost.Cluster("h100-sxm", 64)
    dims = dict(global_batch_size=128, seq_length=8192, precision=["bf16", "fp8"], recompute=["none", "full"])
    if software == "torchtitan-compile":
        dims["tp_overlap"] = [True, False]
    rates = stack_rates(cluster, software=software)
    results = _top(model, cluster, software=software, rates=rates, **dims)
    op = _top(with_torchtitan_op(model, {"selective_rule": "torchtitan-op"})[0], cluster, software=software,
              rates=rates, count=4, global_batch_size=128, seq_length=8192, recompute="selective",
              selective_rule="hyperparallel")
    for ranked, census in [(r, False) for r in results] + [(r, True) for r in op]:
        text = torchtitan_toml(with_torchtitan_op(model, {"selective_rule": "torchtitan-op"})[0] if census else model,
                               ranked.spec, rates=rates, software=software)
        assert "# not stated" not in text, text
        fields, figures, sac = parse_torchtitan(text, 64, model.num_hidden_layers)
        assert sac == census
        _check(model, cluster, ranked, fields, figures, software, rates)
