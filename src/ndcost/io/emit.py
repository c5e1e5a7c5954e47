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
    "seq1f1b": "1F1B", "dualpipev": "DualPipeV",   # torch.distributed.pipelining ScheduleDualPipeV
}


def megatron_flags(model: Any, spec: ExecSpec, devices_per_node: int | None = None) -> str:
    """Megatron-LM command-line flags (megatron/training/arguments.py names), then, one a line after them,
    ``#`` notes on what the strategy prices that Megatron-LM cannot state. *devices_per_node* (the
    cluster's) states node-limited routing's group count."""
    notes: list[str] = []
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
            if spec.moe_dispatcher_sms != 20:
                flags.append(f"--moe-flex-dispatcher-num-sms {spec.moe_dispatcher_sms}")
        flags += _megatron_moe_comm(spec, devices_per_node, notes)
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
    return " \\\n  ".join(flags) + "".join("\n# " + note for note in notes)


def _megatron_moe_comm(spec: ExecSpec, devices_per_node: int | None, notes: list[str]) -> list[str]:
    """The flags of the expert all-to-all Megatron-Core states; *notes* gets what it cannot state."""
    flags = []
    if spec.ep_overlap == "1f1b":
        # megatron/core/transformer/moe/README.md: "Batch-level EP overlap" (with --delay-wgrad-compute, whose
        # split weight gradient ndcost does not price apart)
        flags.append("--overlap-moe-expert-parallel-comm")
    if spec.moe_node_limit:
        # group-limited routing is node-limited when its groups are the nodes the EP group spans
        # (Megatron-Core transformer_config.py moe_router_num_groups)
        flags.append(f"--moe-router-group-topk {spec.moe_node_limit}")
        span = spec.ep * spec.tp * spec.cp
        if devices_per_node is not None and span > devices_per_node:
            flags.append(f"--moe-router-num-groups {span // devices_per_node}")
        else:
            notes.append("not stated: --moe-router-num-groups, the nodes the EP group spans (node-limited routing)")
    if spec.ep_overlap == "dualpipe" or spec.schedule in ("dualpipe", "dualpipev"):
        notes.append(f"not stated: pp_schedule '{spec.pp_schedule}', ep_overlap '{spec.ep_overlap}' (DeepSeek's "
                     "DualPipe is no Megatron-LM schedule)")
    if spec.moe_dispatch_fp8:
        notes.append("not stated: moe_dispatch_fp8 (Megatron-Core's DeepEP path dispatches in bf16; the ncclep "
                     "backend's --moe-dispatch-fwd-dtype mxfp8 is the nearest)")
    return flags


def torchtitan_toml(model: Any, spec: ExecSpec, devices_per_node: int | None = None) -> str:
    """torchtitan job-config TOML keys ([parallelism], [training], [activation_checkpoint])."""
    shard = spec.dp if spec.zero_stage >= 1 else 1  # torchtitan shards with FSDP2 over dp_shard
    replicate = spec.dp // shard
    # DeepSeek's bidirectional DualPipe is no torch.distributed.pipelining schedule: its V is the nearest
    schedule = _TORCHTITAN_SCHEDULES.get(spec.schedule, "DualPipeV")
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
    if spec.schedule == "dualpipe":
        lines.append("# not stated: pp_schedule 'dualpipe' (bidirectional, two parameter copies): DualPipeV above")
    if spec.ep_overlap != "none" or spec.moe_dispatcher != "alltoall" or spec.moe_node_limit or spec.moe_dispatch_fp8:
        lines.append(f"# not stated: ep_overlap '{spec.ep_overlap}', moe_dispatcher '{spec.moe_dispatcher}', "
                     f"moe_node_limit {spec.moe_node_limit}, moe_dispatch_fp8 {spec.moe_dispatch_fp8}")
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
