"""A runs-file row that states its own stack: the self-contained rows ``ndcost validate FILE`` reads.

A row is *stated* when its strategy names its ``software`` or its hardware names a catalog ``device``
(a cluster block, :mod:`ndcost.spec.cluster_options`), or its model is a catalog name: then everything
the estimate needs is in the row, as the command line states it::

    - id: llama31_70b_64gpu
      model: {catalog: llama3.1-70b, seq_len: 8192}          # a catalog name, alias or config.json path;
                                                               # or GPT-style dims (layers, hidden, heads, ...)
      strategy: {gpus: 64, tp: 4, pp: 4, cp: 2, vpp: 5, micro_batch: 1, global_batch: 128, recompute: none,
                 sequence_parallel: true, software: nemo, precision: fp8, fp8_recipe: current,
                 tp_comm_overlap: true, overlap_grad_reduce: true}
      hardware: dgx_h100                                       # a name in the file's hardware table
      measured: {iteration_s: 11.0}                            # or tokens_per_s_per_gpu

The strategy's keys are the degrees, the batch and recompute, ``zero`` (the ZeRO stage), ``software`` (a
``--software`` preset: the fields and rates its stack fixes) and every stack option by its name
(:data:`ndcost.spec.stack_options.STACK_OPTIONS`: ``tp_comm_overlap``, ``fp8_recipe``, ``moe_dispatcher``,
``overlap_moe_expert_parallel_comm``, ...), each overriding the software's; an unknown key is refused with
the nearest name. What the estimate cannot do without (gpus, the batch, the micro-batch, recompute, the
sequence length, a measured step) is refused naming the field; nothing is guessed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import SpecError
from ..spec.stack_options import OPTIONS, check_applies, parse_option, stack_fields
from .run_facts import figure_int, figure_value

__all__ = ["STRATEGY_KEYS", "StatedRun", "is_stated", "stated_run"]

#: The keys a stated row's strategy block may hold; the last three are descriptions, not read.
STRATEGY_KEYS = ("gpus", "dp", "tp", "pp", "vpp", "cp", "ep", "etp", "micro_batch", "global_batch", "seq_len",
                 "recompute", "zero", "sequence_parallel", "pp_schedule", "software", *OPTIONS,
                 "note", "framework", "source")
#: The model block's keys of a GPT-style model stated by its dims (ndcost.io.validation.gpt_model).
_GPT_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len")


@dataclass(frozen=True)
class StatedRun:
    """A stated row ready to estimate."""

    model: Any
    spec: Any
    cluster: Any
    measured_s: float
    software: str | None
    rates_figures: Mapping[str, Any]
    overlap: Any
    notes: tuple[str, ...]


def is_stated(row: Mapping, hardware_table: Mapping) -> bool:
    """Whether *row* states its own stack (its software, a catalog device or a catalog model)."""
    strategy = row.get("strategy") or {}
    model = row.get("model")
    hardware = row.get("hardware")
    block = hardware if isinstance(hardware, Mapping) else (hardware_table or {}).get(hardware)
    return ("software" in strategy or isinstance(model, str) or (isinstance(model, Mapping) and "catalog" in model)
            or hardware is None or (isinstance(block, Mapping) and "device" in block))


def _model(block: Any, run_id: str, gpt_model: Any) -> tuple[Any, str]:
    from ..spec.model_source import model_from_text

    if isinstance(block, str):
        return model_from_text(block), f"model: {block}"
    if not isinstance(block, Mapping):
        raise SpecError("model", run_id, "be a catalog name, alias or config.json path, or a block of dims", block)
    name = block.get("catalog")
    if name is not None:
        model = model_from_text(str(name))
        for key, field in (("layers", "num_hidden_layers"), ("hidden", "hidden_size"), ("heads", "num_attention_heads"),
                           ("vocab", "vocab_size")):
            stated = figure_int(block.get(key))
            if stated is not None and stated != getattr(model, field):
                raise SpecError(f"model.{key}", run_id, f"equal {name}'s {field} ({getattr(model, field)})", stated)
        return model, f"model: {name}"
    act = str(block.get("act", "gelu")).lower()
    if "glu" in act:
        raise SpecError("model.act", run_id, "be GELU for a model stated by its dims (GPT-style); name a catalog "
                        "model, alias or config.json (model.catalog) for a gated FFN", block.get("act"))
    return gpt_model(block, run_id, untied=block.get("tie_embeddings") is False), "model: GPT-style from its dims"


def _required_int(strategy: Mapping, key: str, run_id: str, rule: str) -> int:
    value = figure_int(strategy.get(key))
    if value is None or value < 1:
        raise SpecError(key, run_id, rule, strategy.get(key))
    return value


def _options(strategy: Mapping, run_id: str) -> dict:
    from ..suggest import did_you_mean

    for key in strategy:
        if key not in STRATEGY_KEYS:
            raise SpecError(f"strategy.{key}", run_id, f"be one of {', '.join(STRATEGY_KEYS)}"
                            f"{did_you_mean(str(key), STRATEGY_KEYS)}", strategy[key])
    return {OPTIONS[key]: parse_option(OPTIONS[key], figure_value(strategy[key]), run_id) for key in strategy
            if key in OPTIONS}


def stated_run(row: Mapping, hardware_table: Mapping, gpt_model: Any, cluster_options: Mapping | None = None
               ) -> StatedRun:
    """The :class:`StatedRun` of a stated row; *cluster_options* (``--cluster FILE``) stand for a row that names
    no hardware.

    Raises:
        SpecError: Naming the field, when the row lacks what the estimate needs or states it wrongly.
    """
    from ..spec.cluster_options import cluster_block, make_cluster
    from ..spec.software_fields import software_fields, stack_strategy
    from ..spec.software_rates import DEFAULT_SOFTWARE, NO_SOFTWARE

    run_id = str(row.get("id", "?"))
    strategy = row.get("strategy") or {}
    if not isinstance(strategy, Mapping):
        raise SpecError("strategy", run_id, "be a mapping of the run's strategy", strategy)
    stated = _options(strategy, run_id)
    model, note = _model(row.get("model"), run_id, gpt_model)
    notes = [note]
    gpus = _required_int(strategy, "gpus", run_id, "be the run's GPU count")
    tp, pp, cp, vpp, ep = (figure_int(strategy.get(key)) or 1 for key in ("tp", "pp", "cp", "vpp", "ep"))
    if gpus % (tp * pp * cp):
        raise SpecError("gpus", run_id, f"be a multiple of tp*pp*cp ({tp * pp * cp})", gpus)
    dp = gpus // (tp * pp * cp)
    if figure_int(strategy.get("dp")) not in (None, dp):
        raise SpecError("dp", run_id, f"equal gpus/(tp*pp*cp) ({dp})", figure_int(strategy.get("dp")))
    block = row.get("model") if isinstance(row.get("model"), Mapping) else {}
    seq = figure_int(strategy.get("seq_len")) or figure_int(block.get("seq_len"))
    if seq is None:
        raise SpecError("seq_len", run_id, "be stated (in the model or the strategy block)", None)
    recompute = figure_value(strategy.get("recompute"))
    if recompute not in ("none", "full", "selective"):
        raise SpecError("recompute", run_id, "be stated: none, full or selective", recompute)
    # a row that names no stack ran on the default one (as the command line prices it); "none": as stated
    software = figure_value(strategy.get("software"))
    software = DEFAULT_SOFTWARE if software is None else None if software == NO_SOFTWARE else software
    if software is not None:
        software_fields(str(software))      # the name checked, with the nearest one
    fields: dict[str, Any] = dict(
        dp=dp, tp=tp, pp=pp, cp=cp, vpp=vpp, ep=ep, seq_length=seq, recompute=recompute,
        micro_batch_size=_required_int(strategy, "micro_batch", run_id, "be stated (sequences per micro-batch)"),
        global_batch_size=_required_int(strategy, "global_batch", run_id, "be stated (sequences per step)"))
    for key, field in (("etp", "etp"), ("zero", "zero_stage")):
        if strategy.get(key) is not None:
            fields[field] = figure_int(strategy.get(key))
    for key, field in (("sequence_parallel", "sequence_parallel"), ("pp_schedule", "pp_schedule")):
        if strategy.get(key) is not None:
            fields[field] = figure_value(strategy.get(key))
    if vpp > 1 and "pp_schedule" not in fields:
        fields["pp_schedule"] = "interleaved"
    spec_changes, figures, overlap_shares = stack_fields(stated)
    model, spec = stack_strategy(software, model, {**fields, **spec_changes}, run_id)
    check_applies(stated, spec, model, run_id)
    options, where = _hardware(row, hardware_table, cluster_options, run_id, cluster_block)
    cluster = make_cluster(options["device"], gpus, options, where)
    if where == "the --cluster file":
        notes.append("hardware: the --cluster file")
    overlap = None
    if overlap_shares:
        from ..tables.seconds import Overlap

        overlap = Overlap(**overlap_shares)
    return StatedRun(model, spec, cluster, _measured(row, spec, gpus, run_id), software, figures, overlap,
                     tuple(notes))


def _hardware(row: Mapping, table: Mapping, cluster_options: Mapping | None, run_id: str, cluster_block: Any):
    hardware = row.get("hardware")
    if hardware is None:
        if cluster_options is None:
            raise SpecError("hardware", run_id, "name the run's hardware (or give ndcost validate --cluster FILE)", None)
        return cluster_options, "the --cluster file"
    block = hardware if isinstance(hardware, Mapping) else (table or {}).get(hardware)
    if not isinstance(block, Mapping) or "device" not in block:
        raise SpecError("hardware", run_id, "name a hardware block that states its device (a catalog name) and "
                        "cluster figures (devices_per_node, nics_per_host, hbm_gb, ...)", hardware)
    where = f"{run_id} hardware" if isinstance(hardware, Mapping) else f"hardware {hardware}"
    return cluster_block(block, where), where


def _measured(row: Mapping, spec: Any, gpus: int, run_id: str) -> float:
    measured = row.get("measured") or {}
    seconds = figure_value(measured.get("iteration_s"))
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds > 0:
        return float(seconds)
    per_gpu = figure_value(measured.get("tokens_per_s_per_gpu"))
    if isinstance(per_gpu, (int, float)) and not isinstance(per_gpu, bool) and per_gpu > 0:
        # the step's tokens over the measured rate
        return spec.resolved_global_batch_size * spec.seq_length / (per_gpu * gpus)
    raise SpecError("measured", run_id, "state iteration_s or tokens_per_s_per_gpu", measured)
