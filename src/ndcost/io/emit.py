"""How to launch a strategy: Megatron-LM flags and torchtitan TOML keys."""
from __future__ import annotations

from typing import Any

from ..spec.exec_spec import ExecSpec
from .emit_recompute import launcher_recompute
from .launch_layout import megatron_layout, needs_layout, torchtitan_fqns

__all__ = ["megatron_flags", "torchtitan_toml", "EMITTERS"]

# torchtitan's schedule names (torchtitan/distributed/pipeline_parallel.py, torch.distributed.pipelining).
_TORCHTITAN_SCHEDULES = {
    "1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe", "zero_bubble_v": "ZBVZeroBubble",
    "seq1f1b": "1F1B",
}


def megatron_flags(model: Any, spec: ExecSpec) -> str:
    """Megatron-LM command-line flags (megatron/training/arguments.py names)."""
    flags = [
        f"--tensor-model-parallel-size {spec.tp}",
        f"--pipeline-model-parallel-size {spec.pp}",
        f"--context-parallel-size {spec.cp}",
    ]
    if getattr(model, "is_moe", False):
        flags.append(f"--expert-model-parallel-size {spec.ep}")
        if spec.etp is not None:
            flags.append(f"--expert-tensor-parallel-size {spec.etp}")
        if spec.moe_dispatcher == "deepep":
            # Megatron-Core's flex dispatcher on DeepEP (TransformerConfig moe_token_dispatcher_type,
            # moe_flex_dispatcher_backend; the flags are generated from the config's fields)
            flags += ["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep"]
    if needs_layout(model, spec):
        # Not the even split: the layout states every virtual stage (and with it vpp).
        flags.append(f'--pipeline-model-parallel-layout "{megatron_layout(model, spec)}"')
    elif spec.vpp > 1:
        layers = model.num_hidden_layers // (spec.pp * spec.vpp)
        flags.append(f"--num-layers-per-virtual-pipeline-stage {max(1, layers)}")
    if spec.sequence_parallel and spec.tp > 1:
        flags.append("--sequence-parallel")
    if spec.cp > 1 and spec.cp_algo == "ulysses":
        flags.append("--cp-comm-type a2a")
    flags += [
        f"--micro-batch-size {spec.micro_batch_size}",
        f"--global-batch-size {spec.resolved_global_batch_size}",
        f"--seq-length {spec.seq_length}",
    ]
    if spec.zero_stage == 3:
        flags.append("--use-torch-fsdp2")
    elif spec.zero_stage >= 1:
        flags.append("--use-distributed-optimizer")
    flags += launcher_recompute("megatron", model, spec).lines
    if spec.precision == "fp8":
        flags += ["--fp8-format hybrid", "--bf16"]
    else:
        flags.append("--bf16" if spec.precision == "bf16" else "--fp16")
    if spec.flash_attention:
        flags.append("--use-flash-attn")
    flags += _megatron_cuda_graphs(model, spec)
    return " \\\n  ".join(flags)


def _megatron_cuda_graphs(model: Any, spec: ExecSpec) -> list[str]:
    """ExecSpec.cuda_graphs as Megatron-Core states it (NVIDIA/Megatron-LM@d98e8a64
    megatron/core/transformer/transformer_config.py cuda_graph_impl, cuda_graph_modules: per-layer graphs
    of the listed sub-blocks, the whole layer when none is listed); a dense layer has no router to capture."""
    if spec.cuda_graphs == "none":
        return []
    flags = ["--cuda-graph-impl transformer_engine"]
    if spec.cuda_graphs == "attn" or (spec.cuda_graphs == "moe_router" and not getattr(model, "is_moe", False)):
        flags.append("--cuda-graph-modules attn")
    elif spec.cuda_graphs == "moe_router":
        flags.append("--cuda-graph-modules attn moe_router moe_preprocess")
    return flags


def torchtitan_toml(model: Any, spec: ExecSpec) -> str:
    """torchtitan job-config TOML keys ([parallelism], [training], [activation_checkpoint])."""
    shard = spec.dp if spec.zero_stage >= 1 else 1  # torchtitan shards with FSDP2 over dp_shard
    replicate = spec.dp // shard
    schedule = _TORCHTITAN_SCHEDULES[spec.schedule]
    lines = [
        "[parallelism]",
        f"data_parallel_replicate_degree = {replicate}",
        f"data_parallel_shard_degree = {shard}",
        f"tensor_parallel_degree = {spec.tp}",
        f"context_parallel_degree = {spec.cp}",
        f"pipeline_parallel_degree = {spec.pp}",
        f'pipeline_parallel_schedule = "{schedule}"',
        f"pipeline_parallel_microbatch_size = {spec.micro_batch_size}",
    ]
    if getattr(model, "is_moe", False):
        lines.append(f"expert_parallel_degree = {spec.ep}")
    if needs_layout(model, spec):
        parts = ", ".join("[" + ", ".join(f'"{name}"' for name in part) + "]" for part in torchtitan_fqns(model, spec))
        lines.append(f"module_fqns_per_model_part = [{parts}]")
    lines += [
        "",
        "[training]",
        f"local_batch_size = {spec.micro_batch_size * spec.resolved_micro_batch_num}",
        f"global_batch_size = {spec.resolved_global_batch_size}",
        f"seq_len = {spec.seq_length}",
        "",
        "[activation_checkpoint]",
        *launcher_recompute("torchtitan", model, spec).lines,
    ]
    if spec.precision == "fp8":
        lines += ["", "[float8]", 'recipe_name = "rowwise"']
    return "\n".join(lines)


EMITTERS = {"megatron": megatron_flags, "torchtitan": torchtitan_toml}
