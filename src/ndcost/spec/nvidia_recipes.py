"""Megatron-Core as NVIDIA's recipes configure it (NeMo, Megatron-Bridge), and as plain Megatron-LM's defaults run it.

Three presets of ``--software`` (``Rates.for_software``, ``ndcost.spec.software_fields``):

* ``megatron-bridge``: NVIDIA-NeMo/Megatron-Bridge's recipes, what NVIDIA's performance pages train with
  since NeMo 2.0's LLM collection moved there (its migration guide: "Megatron Bridge uses the same Megatron
  Core engine"): TP communication overlapped when tp > 1 in dense models (the MoE recipes turn it off), the
  distributed optimizer's parameter all-gather overlapped, sequence parallelism with TP, fp8 as per-tensor
  current scaling with fp8 parameters (the H100 "FP8-CS" configs). The CLI's default stack.
* ``nemo``: NVIDIA/NeMo 2.0's recipes: the same choices with NeMo's fp8 recipe, delayed scaling.
* ``megatron-lm``: ``pretrain_gpt.py`` with no stack flag: every overlap off, no distributed optimizer (DDP),
  the MoE permutation and router unfused.

Each row cites the file at the commit it was read at. The Rates figures of each preset are here too
(only those that differ from Megatron-Core with Transformer Engine, ``rates._MCORE_TE``); SOFTWARE_PRESETS
and ``software_fields`` register them with one line each.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

from .preset_fields import PresetField

__all__ = ["NVIDIA_RECIPE_FIELDS", "NEMO_FIELDS", "MEGATRON_BRIDGE_FIELDS", "MEGATRON_LM_FIELDS",
           "MEGATRON_BRIDGE_RATES", "MEGATRON_LM_RATES", "NEMO_FP8_SOURCE"]

_BRIDGE = "NVIDIA-NeMo/Megatron-Bridge@7af9601c9da746d21481194356295bfe23df3737 (v0.2.0)"
_NEMO = "NVIDIA/NeMo@8cfedd7203462cb251a914e700e5605444277561"
_MLM = "NVIDIA/Megatron-LM@23e00ed0963c35382dfe8a5a94fb3cda4d21e133 (core_v0.14.0) megatron/training/arguments.py"


def _dense_tp(view: Any) -> bool:
    return view.tp > 1 and not view.moe


def _zero_1_or_2(view: Any) -> bool:
    return view.zero_stage in (1, 2)


def _fp8(view: Any) -> bool:
    return view.precision == "fp8"


def _recipe_fields(tp_overlap: str, param_gather: str, sequence_parallel: str, fp8_params: str) -> tuple:
    return (
        PresetField("tp_overlap", True, "tp > 1 in a dense model", tp_overlap, _dense_tp),
        PresetField("overlapped_param_gather", True, "ZeRO-1/2 (the distributed optimizer)", param_gather,
                    _zero_1_or_2),
        PresetField("sequence_parallel", True, "tp > 1", sequence_parallel, lambda view: view.tp > 1),
        PresetField("param_bytes", 1, "precision fp8 (fp8 parameters, all-gathered in fp8)", fp8_params, _fp8),
    )


#: Megatron-Bridge's recipes (v0.2.0).
MEGATRON_BRIDGE_FIELDS: tuple[PresetField, ...] = _recipe_fields(
    f"{_BRIDGE} src/megatron/bridge/recipes/llama/llama3.py:L301-303 llama3_70b_pretrain_config "
    "CommOverlapConfig(tp_comm_overlap=True) (as the 405B, 16k and 64k recipes); MoE recipes leave it off: "
    "recipes/deepseek/deepseek_v3.py:L350-352 CommOverlapConfig(tp_comm_overlap=False)",
    f"{_BRIDGE} src/megatron/bridge/recipes/llama/llama3.py:L555-559 DistributedDataParallelConfig("
    "overlap_grad_reduce=True, overlap_param_gather=True, use_distributed_optimizer=True)",
    f"{_BRIDGE} src/megatron/bridge/recipes/llama/llama3.py:L300 sequence_parallel True with tensor_model_parallel_"
    "size 4 (every recipe with TP > 1 sets it)",
    f"{_BRIDGE} src/megatron/bridge/training/mixed_precision.py:L272-290 bf16_with_fp8_current_scaling_mixed: "
    "fp8_param_gather = True",
)
#: NeMo 2.0's recipes.
NEMO_FIELDS: tuple[PresetField, ...] = _recipe_fields(
    f"{_NEMO} nemo/collections/llm/recipes/llama31_70b.py:L232-234 MegatronCommOverlapCallback(tp_comm_overlap=True) "
    "(the recipes' performance mode, which NVIDIA's scripts/performance runs); MoE recipes leave it off: "
    "nemo/collections/llm/recipes/deepseek_v3.py:L144-146 MegatronCommOverlapCallback(tp_comm_overlap=False)",
    f"{_NEMO} nemo/collections/llm/recipes/llama31_70b.py:L122-124 DistributedDataParallelConfig("
    "grad_reduce_in_fp32=True, overlap_grad_reduce=True, overlap_param_gather=True)",
    f"{_NEMO} nemo/collections/llm/recipes/llama31_70b.py:L66-71,L110-115 tensor_parallelism 4, "
    "sequence_parallelism True -> MegatronStrategy(sequence_parallel=...)",
    f"{_NEMO} nemo/collections/llm/recipes/precision/mixed_precision.py:L56-68 bf16_with_fp8_mixed: "
    "fp8_param_gather = True",
)
#: Plain Megatron-LM: its argument defaults (every overlap a store_true flag, off).
MEGATRON_LM_FIELDS: tuple[PresetField, ...] = (
    PresetField("zero_stage", 0, "", f"{_MLM}:L2412 --use-distributed-optimizer store_true (off: DDP all-reduces "
                "the gradients, every rank holds the optimizer states)"),
    PresetField("overlapped_grad_reduce", False, "", f"{_MLM}:L2359 --overlap-grad-reduce store_true, default False"),
)

#: Preset name -> its ExecSpec rows.
NVIDIA_RECIPE_FIELDS: Mapping[str, tuple[PresetField, ...]] = MappingProxyType({
    "nemo": NEMO_FIELDS, "megatron-bridge": MEGATRON_BRIDGE_FIELDS, "megatron-lm": MEGATRON_LM_FIELDS,
})

NEMO_FP8_SOURCE = (f"{_NEMO} nemo/collections/llm/recipes/precision/mixed_precision.py:L56-68 bf16_with_fp8_mixed: "
                   "fp8_recipe 'delayed'; scripts/performance/argument_parser.py:L98-110 --fp8_recipe default 'ds' "
                   "(per-tensor delayed scaling)")

#: Megatron-Bridge's Rates figures beyond Megatron-Core with TE's: its H100 fp8 recipe.
MEGATRON_BRIDGE_RATES: tuple[Mapping[str, Any], Mapping[str, str]] = (
    MappingProxyType({"fp8_recipe": "current"}),
    MappingProxyType({"fp8_recipe": (
        f"{_BRIDGE} src/megatron/bridge/training/mixed_precision.py:L272-290 bf16_with_fp8_current_scaling_mixed: "
        "fp8_recipe 'tensorwise' (per-tensor current scaling); scripts/performance/configs/llama3/"
        "workload_base_configs.py:L140 LLAMA3_70B_H100_FP8_CS_BASE_CONFIG (the H100 fp8 configs are FP8-CS)")}),
)
#: Plain Megatron-LM's: its MoE kernels unfused (the flags are store_true), TE's delayed scaling.
MEGATRON_LM_RATES: tuple[Mapping[str, Any], Mapping[str, str]] = (
    MappingProxyType({"moe_permute": "unfused", "moe_router_fusion": False, "fp8_recipe": "delayed"}),
    MappingProxyType({
        "moe_permute": f"{_MLM}:L2877 --moe-permute-fusion store_true (off: the permutation as PyTorch ops); "
                       "its default dispatcher (L2869-2871 --moe-token-dispatcher-type default 'allgather') is "
                       "priced as the all-to-all, the dispatcher ndcost has",
        "moe_router_fusion": f"{_MLM}:L2826 --moe-router-fusion store_true (off)",
        "fp8_recipe": f"{_MLM}:L1224 --fp8-recipe default 'delayed'",
    }),
)
