"""A priced strategy as Megatron-Core's settings: one list that Megatron-LM's flags and NeMo's recipe both state.

Megatron-LM builds most of its flags from the dataclass fields of ``TransformerConfig`` /
``ModelParallelConfig`` (NVIDIA/Megatron-LM@d98e8a6 megatron/training/argument_utils.py
``ArgumentGroupFactory``: ``--`` + the field name with dashes, ``argparse_meta`` renaming a few:
``fp8`` is ``--fp8-format``), and NeMo 2.0's recipes set the same fields on ``recipe.model.config``
(NVIDIA/NeMo@8cfedd7 nemo/collections/llm/recipes/llama3_70b.py), the parallel degrees on
``recipe.trainer.strategy`` (``MegatronStrategy``), the batch on ``recipe.data``. A :class:`Setting`
names both spellings of one field; :func:`megatron_settings` lists the model's shape and the strategy's
settings, every field that changes what ndcost prices stated (Megatron's own default where it differs
from ndcost's, such as its 0.1 dropout or its all-gather dispatcher, stated too). What a launcher has no
setting for (a routing skew, torchtitan's eager kernels) is returned as a note.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..spec.exec_spec import ExecSpec
from ..spec.graph_scopes import CUDA_GRAPHS, megatron_graph_scopes
from .emit_recompute import launcher_recompute
from .launch_layout import megatron_layout, needs_layout

__all__ = ["Setting", "megatron_settings", "shape_settings", "MEGATRON_FP8_RECIPES", "stack_notes", "fp8_recipe_of",
           "launcher_graphs"]

#: torchtitan's job config states no CUDA graphs: no field of its JobConfig captures one (pytorch/torchtitan@000204a4
#: torchtitan/config/job_config.py), and its compile switch runs torch.compile with no mode, not "reduce-overhead"
#: (pytorch/torchtitan@9dec370a torchtitan/parallelisms/parallelize_llama.py L297-306 apply_compile), so its layers
#: launch.
_TORCHTITAN_GRAPHS = ("torchtitan's job config has no CUDA-graph setting (torchtitan/config/job_config.py: its "
                      "compile switch runs torch.compile's default mode); every layer launches eagerly")

#: ndcost's fp8 recipes as Megatron's --fp8-recipe (TransformerConfig.fp8_recipe: "tensorwise" is per-tensor
#: current scaling); torchao's Float8Linear is torchtitan's, not Megatron's.
MEGATRON_FP8_RECIPES = {"delayed": "delayed", "current": "tensorwise", "blockwise": "blockwise"}


@dataclass(frozen=True)
class Setting:
    """One field: its Megatron-LM flag (None: no flag) and NeMo attribute path under ``recipe.`` (None: none),
    and its value (True: a bare flag; a list: several words)."""

    megatron: str | None
    nemo: str | None
    value: Any


def fp8_recipe_of(rates: Any) -> str:
    """The fp8 recipe priced: the rates', else Rates' default (Transformer Engine's delayed scaling)."""
    from ..spec.rates import Rates

    return rates.fp8_recipe if rates is not None else Rates.__dataclass_fields__["fp8_recipe"].default


def _config(flag: str, value: Any) -> Setting:
    """A TransformerConfig field: flag --x-y, NeMo model.config.x_y."""
    return Setting(flag, "model.config." + flag[2:].replace("-", "_"), value)


def shape_settings(model: Any, spec: ExecSpec) -> list[Setting]:
    """The model's shape: what Megatron's flags and NeMo's model config state of it."""
    heads, kv = model.num_attention_heads, model.num_key_value_heads or model.num_attention_heads
    out = [_config("--num-layers", model.num_hidden_layers), _config("--hidden-size", model.hidden_size),
           _config("--num-attention-heads", heads)]
    if model.intermediate_size:
        out.append(_config("--ffn-hidden-size", model.intermediate_size))
    if kv != heads:
        out += [Setting("--group-query-attention", None, True), _config("--num-query-groups", kv)]
    if model.head_dim and model.head_dim != model.hidden_size // heads and not model.kv_lora_rank:
        out.append(_config("--kv-channels", model.head_dim))
    out += [_config("--seq-length", spec.seq_length), Setting("--max-position-embeddings", None, spec.seq_length),
            _config("--vocab-size", model.vocab_size),
            _config("--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm")]
    if model.gated_ffn:
        out.append(Setting("--swiglu", "model.config.gated_linear_unit", True))
    if not (model.attention_bias or model.mlp_bias):
        out.append(Setting("--disable-bias-linear", "model.config.add_bias_linear", False))
    out.append(Setting("--position-embedding-type", "model.config.position_embedding_type",
                       "learned_absolute" if model.learned_position_embeddings else "rope"))
    if not model.tie_word_embeddings:
        out.append(Setting("--untie-embeddings-and-output-weights", "model.config.share_embeddings_and_output_weights",
                           False))
    if model.qk_norm:
        out.append(Setting("--qk-layernorm", "model.config.qk_layernorm", True))
    if model.kv_lora_rank:
        out += [_config("--multi-latent-attention", True), _config("--kv-lora-rank", model.kv_lora_rank),
                _config("--qk-head-dim", model.qk_nope_head_dim), _config("--qk-pos-emb-head-dim", model.qk_rope_head_dim),
                _config("--v-head-dim", model.v_head_dim)]
        if model.q_lora_rank:
            out.append(_config("--q-lora-rank", model.q_lora_rank))
    if model.is_moe:
        out += [Setting("--num-experts", "model.config.num_moe_experts", model.num_experts),
                _config("--moe-router-topk", model.num_experts_per_tok),
                _config("--moe-ffn-hidden-size", model.moe_intermediate_size)]
        if model.shared_expert_intermediate_size:
            out.append(_config("--moe-shared-expert-intermediate-size", model.shared_expert_intermediate_size))
        freq = [1 if kind_is_moe else 0 for kind_is_moe in _moe_layers(model)]
        if not all(freq):
            out.append(Setting("--moe-layer-freq", "model.config.moe_layer_freq", freq))
    if model.num_nextn_predict_layers:
        out.append(_config("--mtp-num-layers", model.num_nextn_predict_layers))
    return out


def _moe_layers(model: Any) -> list[bool]:
    kinds = model.kinds
    return [kinds[k].ffn == "moe" for k in model.layer_kinds_in_order[:model.num_hidden_layers]]


def megatron_settings(model: Any, spec: ExecSpec, rates: Any = None) -> list[Setting]:
    """The strategy's settings (parallelism, batch, sharding, recompute, precision, overlaps, MoE, dropout)."""
    out = [Setting("--tensor-model-parallel-size", "trainer.strategy.tensor_model_parallel_size", spec.tp),
           Setting("--pipeline-model-parallel-size", "trainer.strategy.pipeline_model_parallel_size", spec.pp),
           Setting("--context-parallel-size", "trainer.strategy.context_parallel_size", spec.cp)]
    if model.is_moe:
        out.append(Setting("--expert-model-parallel-size", "trainer.strategy.expert_model_parallel_size", spec.ep))
        if spec.etp is not None:
            out.append(Setting("--expert-tensor-parallel-size", "trainer.strategy.expert_tensor_parallel_size",
                               spec.etp))
    if needs_layout(model, spec):
        # not the even split: the layout states every virtual stage (and with it vpp)
        out.append(Setting("--pipeline-model-parallel-layout", "trainer.strategy.pipeline_model_parallel_layout",
                           megatron_layout(model, spec)))
    elif spec.vpp > 1:
        out.append(Setting("--num-virtual-stages-per-pipeline-rank",
                           "trainer.strategy.virtual_pipeline_model_parallel_size", spec.vpp))
    out.append(Setting("--sequence-parallel", "trainer.strategy.sequence_parallel",
                       spec.sequence_parallel and spec.tp > 1))
    if spec.cp > 1 and spec.cp_algo != "ring":
        out.append(_config("--cp-comm-type", "a2a" if spec.cp_algo == "ulysses" else "all_gather"))
    out += [Setting("--micro-batch-size", "data.micro_batch_size", spec.micro_batch_size),
            Setting("--global-batch-size", "data.global_batch_size", spec.resolved_global_batch_size)]
    if spec.zero_stage == 3:
        out.append(Setting("--use-torch-fsdp2", "trainer.strategy.fsdp", "pytorch"))
    elif spec.zero_stage == 2:
        # Megatron-FSDP sharding gradients and optimizer states (its ZeRO-2)
        out += [Setting("--use-megatron-fsdp", "trainer.strategy.fsdp", "megatron"),
                Setting("--data-parallel-sharding-strategy", "trainer.strategy.ddp.data_parallel_sharding_strategy",
                        "optim_grads")]
    else:
        out.append(Setting("--use-distributed-optimizer", "trainer.strategy.ddp.use_distributed_optimizer",
                           spec.zero_stage == 1))
    for line in launcher_recompute("megatron", model, spec).lines:
        flag, *words = line.split()
        out.append(_config(flag, words if flag == "--recompute-modules" else
                           (int(words[0]) if words[0].isdigit() else words[0])))
    out += _stack_settings(model, spec, rates)
    return out


def _stack_settings(model: Any, spec: ExecSpec, rates: Any) -> list[Setting]:
    recipe = fp8_recipe_of(rates)
    out = [Setting("--bf16" if spec.precision != "fp16" else "--fp16", None, True)]
    if spec.precision == "fp8":
        out += [_config("--fp8-format", "hybrid"), _config("--fp8-recipe", MEGATRON_FP8_RECIPES.get(recipe, recipe))]
        if spec.param_bytes == 1:
            out.append(Setting("--fp8-param-gather", "trainer.plugins.fp8_param_gather", True))
    out += [Setting("--tp-comm-overlap", "comm.tp_comm_overlap", spec.tp_overlap and spec.tp > 1),
            Setting("--overlap-grad-reduce", "comm.overlap_grad_reduce", spec.overlapped_grad_reduce),
            Setting("--overlap-param-gather", "comm.overlap_param_gather", spec.overlapped_param_gather)]
    if rates is not None and not rates.grad_accumulation_fusion:
        out.append(Setting("--no-gradient-accumulation-fusion", "model.config.gradient_accumulation_fusion", False))
    if model.is_moe:
        if spec.moe_dispatcher in ("deepep", "hybridep"):
            # Megatron-Core's flex dispatcher on DeepEP or HybridEP (TransformerConfig moe_token_dispatcher_type,
            # moe_flex_dispatcher_backend; the SMs: moe_deepep_num_sms, default 20, moe_hybridep_num_sms, default 16)
            backend = spec.moe_dispatcher
            out += [_config("--moe-token-dispatcher-type", "flex"), _config("--moe-flex-dispatcher-backend", backend)]
            if backend == "hybridep" or spec.moe_dispatcher_sms != 20:
                out.append(_config(f"--moe-{backend}-num-sms", spec.moe_dispatcher_sms))
        else:
            out.append(_config("--moe-token-dispatcher-type", "alltoall"))   # Megatron's default is allgather
        if spec.ep_overlap == "1f1b":
            # the EP A2A overlap of the combined 1F1B schedule (megatron/core/transformer/moe/README.md)
            out.append(_config("--overlap-moe-expert-parallel-comm", True))
        if spec.moe_node_limit:
            # group-limited routing, node-limited when its groups are the EP group's nodes
            # (TransformerConfig.moe_router_num_groups: the group count is stack_notes')
            out.append(_config("--moe-router-group-topk", spec.moe_node_limit))
        elif spec.moe_device_limit:
            # group-limited routing with a group per EP rank: device-limited (DeepSeek-V2 §2.2.1)
            out += [_config("--moe-router-num-groups", spec.ep),
                    _config("--moe-router-group-topk", spec.moe_device_limit)]
        if spec.grouped_gemm:
            out.append(_config("--moe-grouped-gemm", True))
        else:
            out += [_config("--moe-expert-capacity-factor", spec.capacity_factor),
                    _config("--moe-pad-expert-input-to-capacity", True)]
        if rates is not None:
            # the permutation's and the router's kernels (TransformerConfig moe_permute_fusion, moe_router_fusion)
            out += [_config("--moe-permute-fusion", rates.moe_permute == "fused"),
                    _config("--moe-router-fusion", rates.moe_router_fusion)]
    out += _cuda_graph_settings(model, spec)
    dropout = 0.1 if spec.dropout_bytes else 0.0      # Megatron's default is 0.1
    out += [_config("--hidden-dropout", dropout), _config("--attention-dropout", dropout)]
    out.append(Setting("--use-flash-attn", None, True) if spec.flash_attention else
               _config("--attention-backend", "unfused"))
    return out


def _graph_scopes(model: Any, spec: ExecSpec) -> tuple[list[str] | None, str | None]:
    """``megatron_graph_scopes`` of *spec*'s set on *model*: dropless unless capacity mode, and whether a MoE model
    has dense layers (its ``--moe-layer-freq``) for ``mlp`` to capture."""
    dense_layers = model.is_moe and not all(_moe_layers(model))
    return megatron_graph_scopes(spec.cuda_graphs, model.is_moe, spec.grouped_gemm, dense_layers)


def launcher_graphs(launcher: str, model: Any, spec: ExecSpec) -> tuple[str, str | None]:
    """The set of scopes (``ExecSpec.cuda_graphs``) *launcher*'s settings capture for *spec*, and why it is less than
    the priced set (None where they capture it): Megatron-Core ("megatron", "nemo") leaves a dropless MoE's experts
    eager (``megatron_graph_scopes``): the set less ``ffn`` -- where the model has dense layers their ``mlp``
    capture is stated but priced eager with the experts, the one scope holding both; torchtitan captures none."""
    if spec.cuda_graphs == "none":
        return "none", None
    if launcher == "torchtitan":
        return "none", _TORCHTITAN_GRAPHS
    why = _graph_scopes(model, spec)[1]
    if why is None:
        return spec.cuda_graphs, None
    held = CUDA_GRAPHS.index(spec.cuda_graphs) & ~CUDA_GRAPHS.index("ffn")
    return CUDA_GRAPHS[held], f"Megatron-Core {why}; they stay eager in the flags"


def _cuda_graph_settings(model: Any, spec: ExecSpec) -> list[Setting]:
    """ExecSpec.cuda_graphs as Megatron-Core states it (NVIDIA/Megatron-LM@d98e8a64
    megatron/core/transformer/transformer_config.py cuda_graph_impl, cuda_graph_modules: per-layer graphs of the
    listed sub-blocks, the whole layer when none is listed; ``ndcost.spec.graph_scopes.megatron_graph_scopes``);
    a dense layer has no router to capture."""
    scopes, _ = _graph_scopes(model, spec)
    if scopes is None:
        return []
    out = [_config("--cuda-graph-impl", "transformer_engine")]
    if scopes:
        out.append(_config("--cuda-graph-modules", scopes))
    return out


def stack_notes(model: Any, spec: ExecSpec, rates: Any, launcher: str) -> list[str]:
    """What ndcost priced that *launcher* has no setting for, one line each."""
    notes = []
    if model.is_moe and spec.moe_imbalance != 1.0:
        notes.append(f"routing imbalance {spec.moe_imbalance:g} (the busiest rank's tokens over the mean) is an "
                     "input ndcost priced, not a launcher setting")
    if launcher != "torchtitan" and spec.precision == "fp8" and fp8_recipe_of(rates) not in MEGATRON_FP8_RECIPES:
        owner = "DeepSeek-V3's own framework's" if fp8_recipe_of(rates) == "deepseek" else "torchao's (torchtitan)"
        notes.append(f"fp8 recipe {fp8_recipe_of(rates)} is {owner}, not Transformer Engine's")
    if rates is not None and launcher != "torchtitan":
        for name, megatron in (("attention_kernel", "best"), ("elementwise", "fused"), ("attention_copies", False)):
            if getattr(rates, name) != megatron:
                notes.append(f"{name} {getattr(rates, name)!r} is another stack's kernels (Megatron-Core with "
                             f"Transformer Engine runs {megatron!r})")
    if launcher != "torchtitan" and (spec.param_bytes not in (1, 2) or spec.deferred_grad_accumulation
                                     or not spec.fp8_weight_cache):
        notes.append("FSDP2's fp32 parameters, deferred gradients or per-forward fp8 casts are torchtitan's, not "
                     "Megatron-Core's")
    if spec.grad_bytes == 2 and spec.precision != "fp16":
        notes.append("16-bit gradient reduction under bf16 (Megatron reduces bf16 runs' gradients in fp32)")
    if spec.fp8_activation_storage:
        notes.append("fp8_activation_storage (DeepSeek-V3's fp8 SwiGLU inputs and E5M6 attention output, report "
                     "§3.3.2) is DeepSeek's own framework's; no launcher option states it")
    if not spec.fp8_transpose_cache:
        notes.append("fp8_transpose_cache off (fp8 weight transposes made for each backward) is DeepSeek's own "
                     "framework's; Transformer Engine keeps them and no launcher option states otherwise")
    why = launcher_graphs(launcher, model, spec)[1]
    if why:
        notes.append(f"cuda_graphs {spec.cuda_graphs!r}: {why}")
    if model.is_moe:
        notes += _expert_exchange_notes(spec, launcher)
    return notes


def _expert_exchange_notes(spec: ExecSpec, launcher: str) -> list[str]:
    """The expert all-to-all's settings *launcher* cannot state."""
    if launcher == "torchtitan":
        stated = [f"{name} {value!r}" for name, value, default in (
            ("moe_dispatcher", spec.moe_dispatcher, "alltoall"), ("ep_overlap", spec.ep_overlap, "none"),
            ("moe_node_limit", spec.moe_node_limit, 0), ("moe_device_limit", spec.moe_device_limit, 0),
            ("moe_dispatch_fp8", spec.moe_dispatch_fp8, False))
            if value != default]
        notes = [f"{', '.join(stated)} (torchtitan's all-to-all as priced)"] if stated else []
        if spec.schedule == "dualpipe":
            notes.append("pp_schedule 'dualpipe' (bidirectional, two parameter copies): its V, DualPipeV, stated")
        return notes
    notes = []
    if spec.moe_node_limit:
        notes.append(f"--moe-router-num-groups: the nodes the EP group spans (node-limited routing to "
                     f"{spec.moe_node_limit})")
        if spec.moe_device_limit:
            notes.append(f"moe_device_limit {spec.moe_device_limit} beside the node limit (Megatron-Core's "
                         "group-limited routing states one of them)")
    if spec.ep_overlap == "dualpipe":
        notes.append("ep_overlap 'dualpipe' (DualPipe's overlapped chunks)")
    if spec.moe_dispatch_fp8:
        notes.append("moe_dispatch_fp8 (Megatron-Core's DeepEP path dispatches in bf16; the ncclep backend's "
                     "--moe-dispatch-fwd-dtype mxfp8 is the nearest)")
    return notes
