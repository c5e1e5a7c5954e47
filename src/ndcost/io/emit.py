"""How to launch a strategy as priced: Megatron-LM flags, a NeMo 2.0 recipe, torchtitan TOML keys.

Each emitter states the model's shape and every setting that changes what ndcost prices -- the
degrees and layout, the batch, sharding, recompute, precision and fp8 recipe, the communication
overlaps, the MoE dispatcher -- so that the printed settings, read back, are the strategy priced
(tests/test_emit_roundtrip.py parses them back and prices them again). What the launcher has no
setting for is said in a ``#`` comment line, never dropped silently.
"""
from __future__ import annotations

from typing import Any

from ..spec.exec_spec import ExecSpec
from .emit_recompute import launcher_recompute
from .launch_layout import needs_layout, torchtitan_fqns
from .launch_settings import fp8_recipe_of as _fp8_recipe, megatron_settings, shape_settings, stack_notes

__all__ = ["megatron_flags", "nemo_recipe", "torchtitan_toml", "EMITTERS", "TORCHTITAN_FLAVORS"]

# torchtitan's schedule names (torchtitan/distributed/pipeline_parallel.py, torch.distributed.pipelining).
_TORCHTITAN_SCHEDULES = {
    "1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe", "zero_bubble_v": "ZBVZeroBubble",
    "seq1f1b": "1F1B", "dualpipev": "DualPipeV", "dualpipe": "DualPipeV",   # torch's ScheduleDualPipeV (a note says
}                                                                           # DualPipe's own is not)
#: Catalog models torchtitan ships as a flavor: name -> (model name, flavor) (pytorch/torchtitan@9dec370
#: torchtitan/models/llama/__init__.py llama3_configs; deepseek_v3 and qwen3 in later versions' registries).
TORCHTITAN_FLAVORS = {"llama3-8b": ("llama3", "8B"), "llama3-70b": ("llama3", "70B"), "llama3.1-405b": ("llama3", "405B"),
                      "deepseek-v3": ("deepseek_v3", "671B"), "qwen3-8b": ("qwen3", "8B"), "qwen3-32b": ("qwen3", "32B")}
#: The fp8 recipes torchtitan runs through torchao's Float8Linear ([float8] recipe_name).
_TORCHAO_RECIPES = {"torchao": "tensorwise"}


def _notes(model: Any, spec: ExecSpec, rates: Any, launcher: str) -> list[str]:
    notes = stack_notes(model, spec, rates, launcher)
    if launcher != "torchtitan" and spec.schedule not in ("1f1b", "interleaved"):
        notes.append(f"pipeline schedule {spec.schedule} is not one of Megatron-Core's (1F1B, interleaved)")
    if launcher != "torchtitan" and spec.pp_runs > 1:
        notes.append(f"pp_runs {spec.pp_runs}: Megatron-Core runs a step's micro-batches as one pipeline schedule")
    return ["# not stated by these settings: " + note for note in notes]


def _word(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(map(str, value))
    if isinstance(value, str) and ("|" in value or " " in value or "(" in value):
        return f'"{value}"'
    return str(value)


def megatron_flags(model: Any, spec: ExecSpec, rates: Any = None, software: str | None = None) -> str:
    """Megatron-LM command-line flags (megatron/training/arguments.py and its config dataclasses' names)."""
    flags = []
    for setting in shape_settings(model, spec) + megatron_settings(model, spec, rates):
        if setting.megatron is None or setting.value is False:
            continue
        if setting.megatron == "--moe-layer-freq":
            flags.append(f'--moe-layer-freq "{setting.value}"')
        elif setting.value is True:
            flags.append(setting.megatron)
        else:
            flags.append(f"{setting.megatron} {_word(setting.value)}")
    return " \\\n  ".join(flags) + "".join("\n" + line for line in _notes(model, spec, rates, "megatron"))


#: ndcost's precision and fp8 recipe as NeMo 2.0's mixed-precision recipe functions
#: (nemo/collections/llm/recipes/precision/mixed_precision.py).
_NEMO_PLUGINS = {("bf16", None): "bf16_mixed", ("fp16", None): "fp16_mixed", ("fp8", "delayed"): "bf16_with_fp8_mixed",
                 ("fp8", "current"): "bf16_with_fp8_current_scaling_mixed",
                 ("fp8", "blockwise"): "bf16_with_fp8_subchannel_scaling_mixed"}


def nemo_recipe(model: Any, spec: ExecSpec, rates: Any = None, software: str | None = None) -> str:
    """NeMo 2.0 recipe statements: ``recipe.trainer.strategy.*``, ``recipe.data.*``, ``recipe.model.config.*``,
    the mixed-precision plugin and the MegatronCommOverlapCallback of its overlaps."""
    recipe = _fp8_recipe(rates)
    plugin = _NEMO_PLUGINS.get((spec.precision, recipe if spec.precision == "fp8" else None), "bf16_with_fp8_mixed")
    lines = [f"recipe.trainer.plugins = {plugin}()"]
    comm = []
    for setting in shape_settings(model, spec) + megatron_settings(model, spec, rates):
        if setting.nemo is None:
            continue
        if setting.nemo.startswith("comm."):
            comm.append(f"{setting.nemo[5:]}={setting.value!r}")
        elif setting.nemo in ("model.config.fp8_format", "model.config.fp8_recipe"):
            continue                                    # the plugin above states them
        else:
            lines.append(f"recipe.{setting.nemo} = {setting.value!r}")
    lines.append(f"recipe.data.seq_length = {spec.seq_length!r}")
    lines.append(f"recipe.trainer.callbacks.append(run.Config(MegatronCommOverlapCallback, {', '.join(comm)}))")
    return "\n".join(lines + _notes(model, spec, rates, "nemo"))


def torchtitan_toml(model: Any, spec: ExecSpec, rates: Any = None, software: str | None = None) -> str:
    """torchtitan job-config TOML keys ([model], [parallelism], [training], [activation_checkpoint], [compile],
    [float8])."""
    shard = spec.dp if spec.zero_stage >= 1 else 1  # torchtitan shards with FSDP2 over dp_shard
    replicate = spec.dp // shard
    schedule = _TORCHTITAN_SCHEDULES[spec.schedule]
    name, flavor = TORCHTITAN_FLAVORS.get(model.name, (None, None))
    lines = ["[model]"]
    if name is not None:
        lines += [f'name = "{name}"', f'flavor = "{flavor}"']
    else:
        lines.append(f"# no torchtitan flavor of {model.name}: register one with these dims")
    lines.append(f"# dims: layers {model.num_hidden_layers}, hidden {model.hidden_size}, heads "
                 f"{model.num_attention_heads}, kv heads {model.num_key_value_heads or model.num_attention_heads}, "
                 f"ffn {model.intermediate_size or model.moe_intermediate_size}, vocab {model.vocab_size}")
    lines += [
        "",
        "[parallelism]",
        f"data_parallel_replicate_degree = {replicate}",
        f"data_parallel_shard_degree = {shard}",
        f"tensor_parallel_degree = {spec.tp}",
        f"context_parallel_degree = {spec.cp}",
        f"pipeline_parallel_degree = {spec.pp}",
        f'pipeline_parallel_schedule = "{schedule}"',
        f"pipeline_parallel_microbatch_size = {spec.micro_batch_size}",
    ]
    if spec.cp > 1 and spec.cp_algo != "ulysses":
        lines.append(f'context_parallel_rotate_method = "{"allgather" if spec.cp_algo == "ring-allgather" else "alltoall"}"')
    if getattr(model, "is_moe", False):
        lines.append(f"expert_parallel_degree = {spec.ep}")
    if spec.vpp > 1 and not needs_layout(model, spec):
        lines.append(f"pipeline_parallel_layers_per_stage = {model.num_hidden_layers // (spec.pp * spec.vpp)}")
    if needs_layout(model, spec):
        parts = ", ".join("[" + ", ".join(f'"{name}"' for name in part) + "]" for part in torchtitan_fqns(model, spec))
        lines.append(f"module_fqns_per_model_part = [{parts}]")
    lines += [
        "",
        "[training]",
        # one schedule.step() a local batch: pp_runs of them a step (torchtitan's gradient accumulation)
        f"local_batch_size = {spec.micro_batch_size * spec.resolved_micro_batch_num // spec.pp_runs}",
        f"global_batch_size = {spec.resolved_global_batch_size}",
        f"seq_len = {spec.seq_length}",
        f'mixed_precision_param = "{"float16" if spec.precision == "fp16" else "bfloat16"}"',
        "",
        "[activation_checkpoint]",
        *launcher_recompute("torchtitan", model, spec).lines,
        "",
        "[compile]",
        f"enable = {'true' if getattr(rates, 'elementwise', 'fused') == 'fused' or spec.tp_overlap else 'false'}",
        f"enable_async_tensor_parallel = {'true' if spec.tp_overlap and spec.tp > 1 else 'false'}",
    ]
    if spec.precision == "fp8":
        recipe = _fp8_recipe(rates)
        lines += ["", "[float8]", f'recipe_name = "{_TORCHAO_RECIPES.get(recipe, recipe)}"']
    notes = _notes(model, spec, rates, "torchtitan")
    if spec.cp > 1 and spec.cp_algo == "ulysses":
        notes.append("# not stated by these settings: Ulysses context parallelism is not torchtitan's")
    if spec.precision == "fp8" and _fp8_recipe(rates) not in _TORCHAO_RECIPES:
        notes.append(f"# not stated by these settings: fp8 recipe {_fp8_recipe(rates)} is Transformer Engine's, not "
                     "torchao's")
    return "\n".join(lines + notes)


EMITTERS = {"megatron": megatron_flags, "nemo": nemo_recipe, "torchtitan": torchtitan_toml}
