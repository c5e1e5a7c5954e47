"""How a published run was configured: the facts file beside a runs file, read into ndcost's specs.

``validation/h100_runs.yaml`` leaves most of each run's configuration unstated (recompute, sequence
parallelism, overlaps, the fp8 recipe, the software). ``data/validation/h100_run_facts.yaml``
records each of them per run, read from the benchmark's own configs at the commit that published
the figure (every fact with its source). :func:`load_run_facts` reads that file;
:func:`modern_run` builds the run's Model, ExecSpec and Cluster from the runs-file row plus its
facts, and names the training software (a ``Rates.for_software`` preset) the run used.

What the facts say is turned into ndcost fields by the small rules of this module, each noted
on the row; a fact the estimate needs and the file leaves null makes the row skip with the reason.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ..spec.device import Cluster
from ..errors import SpecError
from ..spec.model import Model
from ..spec.software_fields import with_software
from ..spec.stack_options import OPTIONS, parse_option
from ..spec.moe_kernels import EXPERT_BIASES, GROUPED_GEMMS
from ..spec.rates import ATTENTION_KERNELS, ELEMENTWISE, FP8_RECIPES
from .fact_rules import catalog_cluster, fake_gate_fields, held_bytes_fields, stack_choice, stated_stack_fields

__all__ = ["BuiltRun", "RunFacts", "figure_value", "figure_int", "load_run_facts", "facts_for", "modern_run", "FACTS_FILES", "CATALOG_BY_NAME"]

_DATA = Path(__file__).parents[1] / "data" / "validation"

#: Runs file name -> its facts file (package data).
FACTS_FILES: Mapping[str, Path] = {"h100_runs.yaml": _DATA / "h100_run_facts.yaml",
                                   "moe_runs.yaml": _DATA / "moe_run_facts.yaml"}

#: A runs-file model name -> the catalog model with the same published config.json (the rows of
#: the NVIDIA pages name the model and state only some of its dimensions; the dimensions they do
#: state are checked against the catalog's).
CATALOG_BY_NAME: tuple[tuple[str, str], ...] = (
    (r"llama ?3(\.1)? ?/? ?(3\.1 )?8b|llama3_8b", "llama3-8b"),
    (r"llama ?3(\.1)? ?/? ?(3\.1 )?70b|llama3_70b", "llama3-70b"),
    (r"llama ?3\.1[_ ]405b|llama3\.1_405b", "llama3.1-405b"),
    (r"deepseek ?v3", "deepseek-v3"),
    (r"qwen3_30b_a3b", "qwen3-30b-a3b"),
    (r"qwen3_235b_a22b", "qwen3-235b-a22b"),
)

#: Runs-file model keys checked against the catalog model's fields.
_DIMENSION_CHECKS = (("layers", "num_hidden_layers"), ("hidden", "hidden_size"),
                     ("heads", "num_attention_heads"), ("kv_heads", "num_key_value_heads"),
                     ("vocab", "vocab_size"))

#: Grand Teton's H100 (torchtitan's benchmark hardware): 96 GB HBM2e at 2.4 TB/s, run at a 500 W limit
#: (the SXM's TDP is 700 W), per pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md "Hardware".
#: Its peak is "between SXM and NVL, and we don't know its exact value" (the file's footnote 2): the
#: H100 datasheet's dense peaks are 989.4 (SXM) and 835.5 (NVL, 1,671 with sparsity) bf16 TFLOP/s,
#: 1978.9 and 1670.5 fp8, 494.7 and 417.5 tf32. ndcost prices the middle of that stated interval (an
#: estimate: within 8.4% of either end) with the H100's sustained shares of it (Rates).
GRAND_TETON_H100 = {"hbm_bytes": 96e9, "hbm_bandwidth": 2.4e12, "peak_flops": {
    "bf16": (989.4e12 + 835.5e12) / 2, "fp16": (989.4e12 + 835.5e12) / 2,
    "fp8": (1978.9e12 + 1670.5e12) / 2, "tf32": (494.7e12 + 417.5e12) / 2}}


@dataclass(frozen=True)
class RunFacts:
    """One run's facts: fact name -> value (``None`` where no source states it)."""

    run_id: str
    family: str
    framework: str
    facts: Mapping[str, Any]

    def value(self, name: str) -> Any:
        entry = self.facts.get(name)
        return entry.get("value") if isinstance(entry, Mapping) else entry

    def text(self, name: str) -> str:
        value = self.value(name)
        return "" if value is None else str(value).lower()

    def flag(self, name: str, default: bool = False) -> bool:
        """A yes/no fact: True/False, or a text starting with "true"/"false"."""
        value = self.value(name)
        if isinstance(value, bool):
            return value
        text = self.text(name)
        if text.startswith("true"):
            return True
        if text.startswith("false"):
            return False
        return default


@lru_cache(maxsize=8)
def load_run_facts(path: str) -> Mapping[str, RunFacts]:
    """The facts of every run in a facts file, by run id (YAML merge keys resolved)."""
    import yaml

    doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    runs = doc.get("runs") if isinstance(doc, Mapping) else None
    if not isinstance(runs, Mapping):
        raise SpecError("runs", str(path), "be a mapping of run ids to their facts", type(runs).__name__)
    out = {}
    for run_id, entry in runs.items():
        framework = entry.get("framework")
        framework = framework.get("value") if isinstance(framework, Mapping) else framework
        out[str(run_id)] = RunFacts(str(run_id), str(entry.get("family", "")), str(framework or ""),
                                    dict(entry.get("facts") or {}))
    return out


def facts_for(runs_path: str | Path, run_id: str) -> RunFacts | None:
    """The facts of *run_id* when the runs file has a facts file beside it (by name), else None."""
    facts_path = FACTS_FILES.get(Path(runs_path).name)
    if facts_path is None or not facts_path.exists():
        return None
    return load_run_facts(str(facts_path)).get(run_id)


def figure_value(entry: Any) -> Any:
    """A runs-file figure's value: the plain value, or the ``value`` of a {value, derived, how} mapping."""
    return entry.get("value") if isinstance(entry, Mapping) else entry


def figure_int(entry: Any) -> int | None:
    """A figure's value as an int (an integral float too), else None."""
    value = figure_value(entry)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _catalog_model(block: Mapping, run_id: str) -> tuple[Model, str]:
    name = str(block.get("name", "")).lower()
    # a row may name its catalog model outright (``catalog:``); else its name is matched
    named = [(".*", block["catalog"])] if block.get("catalog") else CATALOG_BY_NAME
    for pattern, catalog in named:
        if re.search(pattern, name):
            model = Model.from_catalog(catalog)
            for key, field in _DIMENSION_CHECKS:
                stated = figure_int(block.get(key))
                if stated is not None and stated != getattr(model, field):
                    raise SpecError(key, run_id, f"equal the catalog {catalog}'s {field} ({getattr(model, field)})",
                                    stated)
            mtp = figure_int(block.get("mtp_layers"))
            if mtp is not None and mtp != model.num_nextn_predict_layers:
                # the run trains the catalog model without (or with other) multi-token prediction layers
                model = dataclasses.replace(model, num_nextn_predict_layers=mtp)
                return model, f"model: catalog {catalog}, {mtp} MTP layers"
            return model, f"model: catalog {catalog}"
    raise SpecError("model", run_id, "name a catalog model (ndcost.io.run_facts.CATALOG_BY_NAME) or state GPT dims",
                    block.get("name"))


def software_preset(facts: RunFacts) -> str:
    """The ``Rates.for_software`` preset of the run's stack: its ``software`` fact, else its framework's."""
    stated = facts.value("software")
    if stated:
        return str(stated)
    framework = facts.framework.lower()
    if "torchtitan" in framework:
        return "torchtitan-compile" if facts.text("torch_compile").startswith("per-") else "torchtitan-eager"
    if "nemo" in framework and "bridge" not in framework:
        return "nemo"
    return "megatron-te"


def _param_gather(facts: RunFacts, zero: int) -> dict:
    """``overlapped_param_gather`` where the facts state Megatron's ``overlap_param_gather`` for a distributed
    optimizer (ZeRO-1): the next step's parameter all-gather under its first forward; else the stack's own."""
    stated = facts.value("overlap_param_gather")
    return {"overlapped_param_gather": stated} if isinstance(stated, bool) and zero in (1, 2) else {}


def _recompute(facts: RunFacts) -> tuple[str, dict, str | None]:
    """(recompute, extra ExecSpec fields, note) from the recompute / activation-checkpointing facts."""
    text = facts.text("recompute") or facts.text("activation_checkpointing")
    if text.startswith("none"):
        return "none", {}, None
    if text.startswith("full"):
        return "full", {}, None
    if text.startswith("selective"):
        return "selective", {}, None
    raise SpecError("recompute", facts.run_id, "be stated in the run's facts (none, selective or full)", text or None)


@dataclass(frozen=True)
class BuiltRun:
    """A row ready to estimate: its specs, what was measured, the software it ran, and notes."""

    model: Any
    spec: Any
    cluster: Any
    measured_s: float
    software: str
    rates_changes: Mapping[str, Any]
    overlap: Any
    notes: tuple[str, ...]


def _fp8_recipe(facts: RunFacts) -> str | None:
    text = facts.text("fp8_recipe") + " " + facts.text("precision")
    for word, recipe in (("deepseek", "deepseek"), ("mxfp8", "mxfp8"), ("delayed", "delayed"),
                         ("current scaling", "current"), ("blockwise", "blockwise")):
        if word in text:
            return recipe
    return None


def measured_rate_changes(facts: RunFacts) -> dict[str, Any]:
    """The Rates a run's facts state as measured on its own stack: the HBM efficiency its memory-bound kernels
    ran at (``hbm_efficiency``, a number in (0, 1]; DeepSeek-V3's is derived from its published profile)."""
    efficiency = facts.value("hbm_efficiency")
    if efficiency is None:
        return {}
    if isinstance(efficiency, bool) or not isinstance(efficiency, (int, float)) or not 0.0 < efficiency <= 1.0:
        raise SpecError("hbm_efficiency", facts.run_id, "be a number in (0, 1]", efficiency)
    return {"hbm_efficiency": float(efficiency)}


def _gradient_reduce_changes(facts: RunFacts) -> dict[str, Any]:
    """``Rates.grad_reduce_bytes`` where the facts state the width the data-parallel reduction moves
    (``grad_reduce_dtype``: fp32, bf16), which FSDP2's ``MixedPrecisionPolicy.reduce_dtype`` sets apart from
    the width the gradients are held in."""
    stated = facts.text("grad_reduce_dtype").split(" ", 1)[0].lower()
    if not stated:
        return {}
    # the widths --grad-reduce-dtype takes (its StackOption's values), refused as that option refuses a word
    return {"grad_reduce_bytes": parse_option(OPTIONS["grad_reduce_dtype"], stated, where=facts.run_id)}


def _moe_kernel_changes(facts: RunFacts) -> dict[str, Any]:
    """The Rates a MoE run's facts state about its kernels: the permutation fused or not
    (moe_permute_fusion; with DeepEP's dispatcher the tokens reach their experts through DeepEP's layout and
    Transformer Engine's fused permutation -- Megatron-Core's flex dispatcher, NeMo AutoModel's DeepEP
    backend -- unless a fact says otherwise), the router fused or not (moe_router ... moe_router_fusion), the
    experts' GEMMs (moe_grouped_gemm: its value starts with a ``Rates.grouped_gemm_impl`` name) and how their
    biases are added (moe_expert_bias: a ``Rates.expert_bias`` name first)."""
    changes: dict[str, Any] = {}
    if facts.value("moe_permute_fusion") is not None:
        changes["moe_permute"] = "fused" if facts.flag("moe_permute_fusion") else "unfused"
    elif "deepep" in facts.text("moe_token_dispatcher"):
        changes["moe_permute"] = "fused"
    for fact, field, choices in (("moe_grouped_gemm", "grouped_gemm_impl", GROUPED_GEMMS),
                                 ("moe_expert_bias", "expert_bias", EXPERT_BIASES)):
        named = facts.text(fact).split(" ", 1)[0]
        if named in choices:
            changes[field] = named
    router = facts.text("moe_router")
    if "moe_router_fusion true" in router:
        changes["moe_router_fusion"] = True
    elif "moe_router_fusion false" in router:
        changes["moe_router_fusion"] = False
    return changes


def modern_run(row: Mapping, hardware_table: Mapping, facts: RunFacts, gpt_model: Any) -> BuiltRun:
    """The :class:`BuiltRun` of a row whose configuration its facts file states.

    *gpt_model* builds a GPT-style Model from a row's model block (the runs of a GPT-3 family,
    which has no config.json).

    Raises:
        SpecError: With the reason, when the row or its facts lack what the estimate needs.
    """
    run_id = str(row.get("id", "?"))
    block = row.get("model") or {}
    strategy = row.get("strategy") or {}
    notes: list[str] = []
    if not block.get("catalog") and "gpt" in str(block.get("name", "")).lower():
        model = gpt_model(block, run_id, untied=False)
    else:
        model, note = _catalog_model(block, run_id)
        notes.append(note)
    gpus = figure_int(strategy.get("gpus"))
    tp = figure_int(facts.value("tp")) or figure_int(strategy.get("tp")) or 1
    pp = figure_int(facts.value("pp")) or figure_int(strategy.get("pp")) or 1
    cp = figure_int(facts.value("cp")) or figure_int(strategy.get("cp")) or 1
    vpp = figure_int(facts.value("vpp")) or figure_int(strategy.get("vpp")) or 1
    if vpp != (figure_int(strategy.get("vpp")) or 1):
        notes.append(f"vpp {vpp} per the run's config (runs file: {figure_int(strategy.get('vpp'))})")
    ep = figure_int(strategy.get("ep")) or 1
    if gpus is None or gpus % (tp * pp * cp):
        raise SpecError("gpus", run_id, f"be a multiple of tp*pp*cp ({tp * pp * cp})", gpus)
    dp = gpus // (tp * pp * cp)
    seq = figure_int(block.get("seq_len"))
    micro = figure_int(strategy.get("micro_batch")) or figure_int(strategy.get("local_batch")) or 1
    global_batch = figure_int(strategy.get("global_batch"))
    if seq is None or global_batch is None:
        raise SpecError("seq_len/global_batch", run_id, "be stated", (seq, global_batch))
    recompute, extra, note = _recompute(facts)
    if recompute == "selective" and facts.text("selective_ac_option") == "op":
        # torchtitan's per-op SAC: the attention kept, wk, wo, w3 and the pointwise ops recomputed
        from ..spec.torchtitan_sac import torchtitan_op_census

        model = model.with_census(torchtitan_op_census(model))
        extra["selective_rule"] = "hyperparallel"
        notes.append("torchtitan per-op SAC (census: wk, wo, w3 recomputed)")
    precision_text = facts.text("precision")
    if not precision_text or precision_text.startswith("not determinable"):
        # the facts cannot tell from the layout; the page's own notes (the runs file) say fp8
        precision_text = str(figure_value(strategy.get("precision")) or "").lower()
        notes.append(f"precision per the runs file: {precision_text}")
    fp8 = precision_text.startswith(("fp8", "unstated (fp8")) or "float8" in precision_text
    fsdp = facts.text("fsdp")
    zero = 3 if (fsdp.startswith("fsdp2") or fsdp.startswith("megatron-core fsdp")) else 1
    dropout = facts.text("dropout")
    stack, stack_notes = stated_stack_fields(facts, strategy, recompute, vpp, run_id)
    notes += stack_notes
    gate, gate_notes = fake_gate_fields(facts, model.num_experts_per_tok, model.num_experts, ep)
    stack.update(gate)
    notes += gate_notes
    held, held_notes = held_bytes_fields(facts, fp8)
    notes += held_notes
    # the stack's own fields (torchtitan's FSDP2 widths, its loss) fill what the facts leave, as --software does
    spec = with_software(software_preset(facts), dict(
        dp=dp, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, micro_batch_size=micro, global_batch_size=global_batch,
        seq_length=seq, sequence_parallel=facts.flag("sequence_parallel", tp > 1) and tp > 1,
        recompute=recompute, zero_stage=zero, precision="fp8" if fp8 else "bf16",
        tp_overlap=facts.flag("tp_comm_overlap"), overlapped_grad_reduce=facts.flag("overlap_grad_reduce", True),
        **_param_gather(facts, zero),
        dropout_bytes=1 if dropout.startswith("hidden_dropout 0.1") else 0,
        flash_attention=True, grouped_gemm=not facts.text("moe_capacity").startswith("token drop"),
        **stack, **extra, **held,
    ))
    hardware = hardware_table.get(row.get("hardware"), {}) if isinstance(hardware_table, Mapping) else {}
    overrides = {}
    if hardware.get("device"):  # any catalog device, with the job's NVLink segment where stated
        cluster, placed = catalog_cluster(hardware, gpus, figure_int(facts.value("nvlink_segment")), run_id)
        notes.append(f"device {placed}")
    elif "hbm2e" in str(hardware.get("gpu", "")).lower():
        overrides = dict(GRAND_TETON_H100)
        notes.append("H100 96GB HBM2e (2.4 TB/s) at 500 W: the middle of its stated SXM-NVL peak interval")
    elif "h100" not in str(hardware.get("gpu", "")).lower():
        raise SpecError("hardware", run_id, "name an H100 or a catalog device (device:)", row.get("hardware"))
    if not hardware.get("device"):
        cluster = Cluster("h100-sxm", gpus, **overrides)
    measured = row.get("measured") or {}
    seconds = figure_value(measured.get("iteration_s"))
    if not isinstance(seconds, (int, float)):
        per_gpu = figure_value(measured.get("tokens_per_s_per_gpu"))
        if not isinstance(per_gpu, (int, float)) or per_gpu <= 0:
            raise SpecError("measured", run_id, "state iteration_s or tokens_per_s_per_gpu", measured)
        seconds = global_batch * seq / (per_gpu * gpus)  # the step's tokens over the measured rate
    if note:
        notes.append(note)
    changes: dict[str, Any] = {}
    if fp8:
        recipe = _fp8_recipe(facts)
        if recipe is not None:
            recipe, note = stack_choice("fp8_recipe", recipe, FP8_RECIPES, "blockwise",
                                        "MXFP8 scales 1x32 blocks inside its cast kernel, as blockwise does")
            notes += [note] if note else []
            changes["fp8_recipe"] = recipe
        else:
            notes.append("fp8 recipe not stated: the software's default")
    kernel = facts.text("attention_kernel").split(" ")[0]
    if kernel:  # the attention kernel the run states (TE's fused attention: "best"), where its preset's differs
        changes["attention_kernel"], note = stack_choice("attention_kernel", kernel, ATTENTION_KERNELS, "best",
                                                         "the fastest kernel ndcost prices")
        notes += [note] if note else []
    elementwise = facts.text("elementwise").split(" ")[0]
    if elementwise:  # how the norms and activations run (fused kernels, or eager PyTorch ops), where stated
        changes["elementwise"], note = stack_choice("elementwise", elementwise, ELEMENTWISE, "fused",
                                                    "the fused kernels ndcost prices")
        notes += [note] if note else []
    changes.update(measured_rate_changes(facts))
    changes.update(_moe_kernel_changes(facts))
    changes.update(_gradient_reduce_changes(facts))
    return BuiltRun(model, spec, cluster, float(seconds), software_preset(facts), changes, None, tuple(notes))
