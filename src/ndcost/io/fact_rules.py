"""The rules that turn a run's stated stack facts into ndcost's fields, beyond the H100 file's.

``run_facts.modern_run`` reads the facts files of the shipped runs. The MoE runs
(``data/validation/moe_run_facts.yaml``) state more of their stack than the H100 ones: the catalog
device and the job's NVLink segment, Megatron-Core's ``recompute_modules``, the MoE dispatcher
backend, the pipeline schedule, the fp8 recipe by name. Each rule here maps one such fact; a fact
naming a choice ndcost does not price yet is priced as the nearest choice it has, and the row's
notes say so (never silently). A fact the H100 file does not state leaves its rows as they were.
"""
from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping, Sequence

from ..errors import SpecError
from ..spec.device import Cluster
from ..spec.graph_scopes import graphs_from_megatron
from ..spec.recompute_spec import MEGATRON_RECOMPUTE_MODULES, SWITCHES
from ..spec.software_fields import BF16_CROSS_ENTROPY_LOGIT_BYTES, TE_CROSS_ENTROPY_LOGIT_BYTES

__all__ = ["RECOMPUTE_MODULE_SWITCHES", "catalog_cluster", "recompute_module_switches", "stack_choice",
           "dispatcher_choice", "expert_exchange_fields", "fake_gate_fields", "fake_gate_ranks", "stated_stack_fields",
           "held_bytes_fields", "cuda_graphs_choice"]

#: Megatron-Core ``recompute_modules`` -> the ND switches each one recomputes (ndcost.spec.recompute_spec).
RECOMPUTE_MODULE_SWITCHES = MEGATRON_RECOMPUTE_MODULES
_WHOLE_BLOCKS = ("mlp", "moe")


def recompute_module_switches(modules: Sequence[str], run_id: str) -> tuple[dict[str, int], list[str]]:
    """The selective switches of Megatron-Core's ``recompute_modules`` list, with the notes it needs.

    Raises:
        SpecError: A module that Megatron-Core does not name (a typo in the facts file).
    """
    if isinstance(modules, str) or not isinstance(modules, Sequence) or not modules:
        raise SpecError("recompute_modules", run_id, "be a non-empty list of Megatron-Core module names", modules)
    switches = {name: 1 for name in SWITCHES}
    notes = [f"recompute modules {', '.join(modules)}"]
    for module in modules:
        if module not in RECOMPUTE_MODULE_SWITCHES:
            rule = f"name Megatron-Core recompute modules ({', '.join(RECOMPUTE_MODULE_SWITCHES)})"
            raise SpecError("recompute_modules", run_id, rule, module)
        for switch in RECOMPUTE_MODULE_SWITCHES[module]:
            switches[switch] = 0
        if module in _WHOLE_BLOCKS:
            notes.append(f"'{module}' recomputes the whole block: priced as its activation (ffAct) only")
    return switches, notes


def stack_choice(field: str, stated: str, choices: Iterable[str], nearest: str, why: str) -> tuple[str, str | None]:
    """*stated* when ndcost prices it (in *choices*), else *nearest* with a note naming both and *why*."""
    if stated in tuple(choices):
        return stated, None
    return nearest, f"{field} '{stated}' is not one ndcost prices yet: priced as '{nearest}' ({why})"


def dispatcher_choice(text: str, choices: Iterable[str]) -> tuple[str, str | None]:
    """The MoE dispatcher a ``moe_token_dispatcher`` fact names: HybridEP, DeepEP or NCCL all-to-all.

    HybridEP is NVIDIA's backend of Megatron-Core's flex dispatcher from DeepEP's ``hybrid-ep`` branch
    (NVIDIA/Megatron-LM megatron/core/transformer/moe/README.md: "FlexDispatcher with HybridEP backend
    ... TMA and IBGDA, fewer SMs, native MNNVL support"): priced as itself where *choices* hold it, else as
    DeepEP, the nearest.
    """
    text = text.lower()
    if "hybridep" in text:
        return stack_choice("moe_dispatcher", "hybridep", choices, "deepep", "DeepEP's hybrid-ep branch")
    return ("deepep" if "deepep" in text else "alltoall"), None


def expert_exchange_fields(dispatcher_text: str, overlap_text: str, sms_text: str = "") -> dict[str, Any]:
    """The expert all-to-all's ExecSpec fields a row's facts state: the EP overlap it ran
    (``ep_a2a_overlap``: Megatron-Core's ``overlap_moe_expert_parallel_comm true`` -> '1f1b', DualPipe's
    overlapped chunks -> 'dualpipe'), and what its dispatcher fact says of node-limited routing ("at most N
    nodes"), fp8 dispatch ("dispatch in FP8") and its SMs ("N SMs"); *sms_text*, a fact of the SMs the
    dispatcher's kernels are given (Megatron-Bridge's ``moe_hybridep_num_sms``), states them where the
    dispatcher fact does not."""
    fields: dict[str, Any] = {}
    if overlap_text.startswith("overlap_moe_expert_parallel_comm true"):
        fields["ep_overlap"] = "1f1b"
    elif overlap_text.startswith("dualpipe"):
        fields["ep_overlap"] = "dualpipe"
    text = dispatcher_text.lower()
    for pattern, field in ((r"at most (\d+) nodes", "moe_node_limit"), (r"(\d+) sms", "moe_dispatcher_sms")):
        found = re.search(pattern, text)
        if found:
            fields[field] = int(found.group(1))
    if "dispatch in fp8" in text:
        fields["moe_dispatch_fp8"] = True
    found = re.search(r"(\d+) sms", sms_text.lower())
    if found and "moe_dispatcher_sms" not in fields:
        fields["moe_dispatcher_sms"] = int(found.group(1))
    return fields


def catalog_cluster(hardware: Mapping[str, Any], gpus: int, segment: int | None, run_id: str) -> tuple[Cluster, str]:
    """The Cluster of a hardware block that names its catalog device (``device:``), with the job's
    NVLink segment (GPUs per scale-up domain, e.g. a GB200 NVL72 job in 64-GPU segments) when stated.

    Raises:
        SpecError: An unknown device, or a GPU count that is not whole segments (nodes).
    """
    device = hardware.get("device")
    if not isinstance(device, str) or not device:
        raise SpecError("hardware.device", run_id, "name a catalog device (ndcost devices)", device)
    overrides = {} if segment is None else {"devices_per_node": segment}
    cluster = Cluster(device, gpus, **overrides)
    note = f"{device}" + ("" if segment is None else f", NVLink segment {segment} GPUs")
    return cluster, note


def fake_gate_ranks(topk: int, experts: int, ep: int) -> int:
    """The most ranks of an EP group of *ep* a token's *topk* consecutive experts lie on: NeMo AutoModel's
    FakeBalancedGate gives token t the experts (t·k + j) mod E, j < k (Automodel@8d9bfb90
    nemo_automodel/components/moe/layers.py L509-552), each rank holding E/ep consecutive ones; the first
    expert's offset inside its rank, (t·k) mod (E/ep), runs over the multiples of gcd(k, E/ep)."""
    per_rank = experts // ep
    if per_rank < 1:
        return ep
    step = math.gcd(topk, per_rank)
    return max(-(-(offset + topk) // per_rank) for offset in range(0, per_rank, step))


def fake_gate_fields(facts: Any, topk: int, experts: int, ep: int) -> tuple[dict[str, Any], list[str]]:
    """The routing a row's benchmark gate states: NeMo AutoModel's FakeBalancedGate sends each token to k
    consecutive experts, on one node and :func:`fake_gate_ranks` ranks -- node- and device-limited routing."""
    if "consecutive experts" not in facts.text("moe_router_force_load_balancing"):
        return {}, []
    ranks = fake_gate_ranks(topk, experts, ep)
    return ({"moe_node_limit": 1, "moe_device_limit": ranks},
            [f"fake balanced gate: each token's experts are consecutive, priced as routed to one node and at most "
             f"{ranks} rank{'s' if ranks > 1 else ''}"])


def stated_stack_fields(facts: Any, strategy: Mapping[str, Any], recompute: str, vpp: int,
                        run_id: str) -> tuple[dict[str, Any], list[str]]:
    """The ExecSpec fields a row's stack facts state (schedule, dispatcher, recompute modules, expert
    TP), with the notes of each choice ndcost prices differently; *facts* is a ``RunFacts``.

    A row whose facts leave ``pp_schedule``, ``recompute_modules`` and the strategy's ``etp`` out gets
    the schedule its vpp implies and the dispatcher its text names, as the H100 file's rows always did.
    """
    from ..spec.exec_spec_rules import MOE_DISPATCHERS, PP_SCHEDULES

    notes: list[str] = []
    schedule = "interleaved" if vpp > 1 else "1f1b"
    stated = facts.text("pp_schedule")
    if stated:
        # DualPipe (DeepSeek-V3 report §3.2.1) runs 1F1B-like steady phases in both directions
        schedule, note = stack_choice("pp_schedule", stated.split()[0], PP_SCHEDULES, schedule,
                                      "its steady phase overlaps a forward and a backward chunk; the EP overlap "
                                      "fact states the all-to-all it hides")
        notes += [note] if note else []
    dispatcher, note = dispatcher_choice(facts.text("moe_token_dispatcher"), MOE_DISPATCHERS)
    notes += [note] if note else []
    fields: dict[str, Any] = {"pp_schedule": schedule, "moe_dispatcher": dispatcher}
    # Megatron-Bridge gives HybridEP's kernels their own SM count (fact ``hybridep_sms``)
    sms_text = facts.text("hybridep_sms") if "hybridep" in facts.text("moe_token_dispatcher").lower() else ""
    fields.update(expert_exchange_fields(facts.text("moe_token_dispatcher"), facts.text("ep_a2a_overlap"), sms_text))
    modules = facts.value("recompute_modules")
    if recompute == "selective" and modules is not None:
        fields["selective_switches"], module_notes = recompute_module_switches(modules, run_id)
        notes += module_notes
    etp = strategy.get("etp")
    if isinstance(etp, Mapping):
        etp = etp.get("value")
    if isinstance(etp, int) and not isinstance(etp, bool):
        fields["etp"] = etp
    if facts.text("gradient_sync").startswith("every micro-batch"):
        # FSDP2 left at its defaults under gradient accumulation: each backward reduce-scatters and reshards
        fields["deferred_grad_accumulation"] = False
        notes.append("gradients reduced every micro-batch (FSDP2's defaults), the weights gathered again each")
    reshard = facts.value("reshard_after_forward")
    if isinstance(reshard, bool):  # FSDP2's reshard_after_forward: a re-gather in the backward, or none
        fields["reshard_params"] = reshard
    if facts.flag("cuda_graphs"):
        fields["cuda_graphs"], note = cuda_graphs_choice(facts.text("cuda_graphs"))
        notes.append(note)
    weighting = facts.text("moe_expert_weighting")
    if weighting:  # where the routing probability multiplies a routed token (ExecSpec.moe_weighted_activation)
        fields["moe_weighted_activation"] = weighting.startswith("inside the expert activation")
        notes.append("routed tokens weighted " + ("inside the expert activation" if fields["moe_weighted_activation"]
                                                  else "after the experts (their outputs kept)"))
    runs = facts.value("pp_runs")
    if isinstance(runs, int) and not isinstance(runs, bool) and runs != 1:
        # gradient accumulation over whole pipeline schedules (torch.distributed.pipelining's step() a local batch)
        fields["pp_runs"] = runs
        notes.append(f"{runs} pipeline schedule runs a step, each filled and drained")
    return fields, notes


def held_bytes_fields(facts: Any, fp8: bool) -> tuple[dict[str, Any], list[str]]:
    """The bytes per parameter a run's facts say its weights, gradients and master copy are held in, as
    ExecSpec fields (the defaults -- 16-bit weights, fp32 gradients and master -- where they say nothing),
    with a note for each; *facts* is a ``RunFacts``.

    * ``fp8_params`` true under fp8: Transformer Engine's fp8_model_init keeps the weights as fp8
      tensors (``param_bytes`` 1: TE's cache then holds only their transpose, ExecSpec.fp8_weight_cache).
    * ``grad_buffer`` bf16: the gradients accumulate in a 16-bit buffer (``grad_bytes`` 2).
    * ``main_params`` a 16-bit remainder: the fp32 master is the 16-bit weight plus a stored remainder
      (Apex's store_param_remainders: ``main_param_bytes`` 2).
    * ``weights`` bf16: the model's own parameters are bf16 and the optimizer steps on them, with no fp32
      master (pure bf16 training, e.g. NeMo AutoModel's models cast to bf16 at init): ``param_bytes`` 2;
      under FSDP2 with ``reshard_after_forward`` false the gathered bf16 copy stays beside the bf16 shards,
      which ndcost holds as the master (``main_param_bytes`` 2, sharded), else there is none (0).
    * ``adam_moments`` bf16: Megatron-Core's precision-aware optimizer keeps exp_avg and exp_avg_sq in
      bf16 (OptimizerConfig exp_avg_dtype / exp_avg_sq_dtype: ``optimizer_state_bytes`` 2); likewise
      ``torch.optim.Adam`` over bf16 parameters (its states are ``zeros_like(param)``).
    * ``loss`` a bf16 cross_entropy: the loss runs on the 16-bit logits with no fp32 copy
      (``logit_bytes`` ``BF16_CROSS_ENTROPY_LOGIT_BYTES``); Transformer Engine's fused cross entropy
      ("te fused cross entropy", Megatron-Core's ``cross_entropy_fusion_impl 'te'``) writes the gradient
      into the 16-bit logits in place (``logit_bytes`` ``TE_CROSS_ENTROPY_LOGIT_BYTES``).
    * ``activation_storage`` fp8 under fp8: DeepSeek-V3's low-precision activations, the MoE SwiGLU's cached
      inputs in fp8 and the attention output in E5M6 (``fp8_activation_storage``).
    * ``fp8_weight_transpose`` "per backward" under fp8: the fp8 weights' transposes are made for each backward,
      not kept across micro-batches (``fp8_transpose_cache`` False; DeepSeek-V3's profile).
    """
    fields: dict[str, Any] = {}
    notes: list[str] = []
    if fp8 and facts.flag("fp8_params"):
        fields["param_bytes"] = 1
        notes.append("fp8_params: weights held in fp8")
    if facts.text("grad_buffer").startswith("bf16"):
        fields["grad_bytes"] = 2
        notes.append("gradients in a bf16 buffer")
    if facts.text("main_params").startswith("16-bit remainder"):
        fields["main_param_bytes"] = 2
        notes.append("master weights as 16-bit remainders")
    if facts.text("weights").startswith("bf16"):
        kept_gathered = facts.value("reshard_after_forward") is False
        fields["param_bytes"], fields["main_param_bytes"] = 2, 2 if kept_gathered else 0
        notes.append("bf16 weights, no fp32 master" + (" (the gathered copy kept beside the shards)"
                                                        if kept_gathered else ""))
    if facts.text("adam_moments").startswith("bf16"):
        fields["optimizer_state_bytes"] = 2
        notes.append("Adam moments in bf16")
    if facts.text("loss").startswith("bf16 cross_entropy"):
        fields["logit_bytes"] = BF16_CROSS_ENTROPY_LOGIT_BYTES
        notes.append("the loss on the bf16 logits (no fp32 copy)")
    elif facts.text("loss").startswith("te fused cross entropy"):
        fields["logit_bytes"] = TE_CROSS_ENTROPY_LOGIT_BYTES
        notes.append("TE fused cross entropy: the gradient written into the bf16 logits")
    if fp8 and facts.text("fp8_weight_transpose").startswith("per backward"):
        fields["fp8_transpose_cache"] = False
        notes.append("fp8 weight transposes made for each backward, not kept")
    if fp8 and facts.text("activation_storage").startswith("fp8"):
        fields["fp8_activation_storage"] = True
        notes.append("activations stored as DeepSeek-V3 does: the MoE SwiGLU's inputs in fp8, the attention "
                     "output in E5M6")
    return fields, notes


def cuda_graphs_choice(text: str) -> tuple[str, str]:
    """The ExecSpec.cuda_graphs a ``cuda_graphs`` fact states, with its note: Megatron-Core's per-layer
    graphs of the listed scopes ("scope attn, moe_router, moe_preprocess": ``graphs_from_megatron``), or whole
    layers (``enable_cuda_graph`` with no scope; a full-iteration graph's layers are whole too)."""
    scopes = text.split("scope", 1)[1].split(",") if "scope" in text else []
    choice = graphs_from_megatron(scopes)
    return choice, f"CUDA graphs '{choice}' ({text})"
