"""Seconds mode: a training step priced from the device's rates and the links its collectives cross.

:func:`seconds_estimate` turns (model, spec, cluster) into the flat arrays of the seconds kernels
(``ndcost.kernels.seconds`` / ``kernels/seconds.pxi``), runs ``seconds_stage_sums`` and
``seconds_combine`` and returns the step time with its parts, the per-stage times, MFU, HFU and
throughput. No constant here or in the kernels is fitted to a measured run: achievable rates come
from :mod:`ndcost.spec.rates` (each with its source), the rest from the model's dimensions and the
strategy. :class:`Overlap` says how much of each communication hides behind compute.

Parts (they sum to the step time): fw_compute, bw_compute, recompute, tp_comm, cp_comm,
ep_comm, pp_comm are the straggler stage's exposed times over the step's micro-batches;
``bubble`` is what the pipeline schedule adds beyond them; dp_reduce is the exposed gradient
reduction (all-reduce, or the ZeRO reduce-scatter), dp_comm the exposed parameter all-gathers
(ZeRO-1/2 after the optimizer, ZeRO-3/FSDP before each layer); the optimizer step (Adam,
HBM-bound) is counted in bw_compute. MFU counts the FLOPs the model needs -- a causal attention
over half the s x s matrix (Megatron-Bridge's flop_utils, newer Megatron-LM), no recompute; HFU
what runs -- recompute, and the masked half an unfused kernel computes too. Every FLOP is priced
at or below its dtype's dense peak, so MFU <= HFU <= 1. (Narayanan et al. 2021 Eq. 3 and the
dgxc-benchmarking READMEs count the full matrix: their MFU is higher by s/(12h)-ish shares.)

The inputs are not validated here: the caller (``ndcost.estimate``) runs
``ndcost.tables.joint_rules.validate`` once.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _backend
from ..kernels.window_attention import _tile_efficiency
from ..kernels.columns import (
    PART_NAMES, RATE, RATE_FIELDS, SECONDS_CAND_FIELDS, SECONDS_EXTRA, SECONDS_EXTRA_FIELDS, SECONDS_KIND,
    SECONDS_KIND_FIELDS, SECONDS_MODEL, SECONDS_MODEL_FIELDS, SECONDS_STAGE, SECONDS_STAGE_FIELDS,
)
from .derive import derive
from .formulas import SCALAR, seconds_candidate_columns_scalar
from ..errors import SpecError
from .layout import build_layout
from .nd_tables import nd_kind_table, nd_model_vector
from ..spec.moe_kernels import EXPERT_BIASES, GLU_CLAMPS, GROUPED_GEMMS, MOE_PERMUTES
from ..spec.rope_scaling import ROPE_SCALES
from ..spec.straggler import job_clock_share
from ..spec.rates import GEMM_TILE_OUTPUTS, Rates

#: Model families whose router adds a per-expert score-correction bias to sigmoid scores before its top-k
#: (the families Model._router_parameters gives an e_score_correction_bias).
ROUTER_BIAS_FAMILIES = ("deepseek_v3", "glm4_moe")

__all__ = ["ROUTER_BIAS_FAMILIES", "Overlap", "DEEPSPEED_2021", "FP8_DISPATCH_BYTES", "seconds_estimate",
           "seconds_arrays", "seconds_kind_table",
           "seconds_model_vector", "seconds_candidate_vector", "rates_vector"]


@dataclass(frozen=True)
class Overlap:
    """How much of each communication hides behind compute: the share (0..1) of the compute
    window that can cover it. ``None`` takes the spec's own switch.

    Attributes:
        dp_reduce: Gradient reduction under the last micro-batch's backward, bucket by bucket,
            the first layer's bucket never hidden (Megatron's ``overlap_grad_reduce``). None: 1
            when ``spec.overlapped_grad_reduce``, else 0.
        dp_gather: ZeRO-1/2 parameter all-gather under the next step's first forward (Megatron's
            ``overlap_param_gather``, off by default there). None: 1 when
            ``spec.overlapped_param_gather``, else 0.
        fsdp_prefetch: ZeRO-3/FSDP gathers and reduce-scatters under the layers' compute (FSDP's
            forward/backward prefetch, on by default): 1.
        tp: TP all-reduce / all-gather / reduce-scatter under the layer's GEMMs (TE's userbuffer
            overlap). None: 1 when ``spec.tp_overlap``, else 0 (exposed).
        cp: Ring-attention KV exchange under the attention core (Megatron's CP overlaps each step
            with the previous block's attention): 1.
        ep: Expert all-to-all: the share of the other micro-batch's compute that can hide it in an
            overlapped forward-and-backward pair (``spec.ep_overlap`` '1f1b' or 'dualpipe', which say
            which micro-batches pair up), or, with ``ep_overlap="none"``, of the same pass's compute.
            None: 1 when the spec states an overlap, else 0 (the dispatcher waits for it).
    """

    dp_reduce: float | None = None
    dp_gather: float | None = None
    fsdp_prefetch: float = 1.0
    tp: float | None = None
    cp: float = 1.0
    ep: float | None = None

    def __post_init__(self) -> None:
        for name in ("dp_reduce", "dp_gather", "fsdp_prefetch", "tp", "cp", "ep"):
            value = getattr(self, name)
            if value is None and name in ("dp_reduce", "dp_gather", "tp", "ep"):
                continue
            if isinstance(value, bool):
                value = float(value)
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise SpecError(name, "Overlap", "be a share in [0, 1] (or None where the spec decides)", value)
            object.__setattr__(self, name, float(value))

    def shares(self, spec: Any) -> tuple[float, float, float, float, float, float]:
        """(dp_reduce, dp_gather, fsdp_prefetch, tp, cp, ep) with the spec's defaults applied."""
        dp_reduce = (1.0 if spec.overlapped_grad_reduce else 0.0) if self.dp_reduce is None else self.dp_reduce
        tp = (1.0 if spec.tp_overlap else 0.0) if self.tp is None else self.tp
        gather = (1.0 if spec.overlapped_param_gather else 0.0) if self.dp_gather is None else self.dp_gather
        ep = (0.0 if spec.ep_overlap == "none" else 1.0) if self.ep is None else self.ep
        return dp_reduce, gather, self.fsdp_prefetch, tp, self.cp, ep


_DEFAULT_OVERLAP = Overlap()

#: Bytes per element of an fp8 dispatch: one byte, and a 4-byte scale per 128 elements (DeepSeek-V3
#: report §3.3.2's 1x128 activation tiles; DeepEP's tests count (1 + 4/128) bytes an element,
#: tests/legacy/test_internode.py fp8_factor).
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128.0

#: DeepSpeed ZeRO-3 as released in 2021 (v0.3.13-0.3.16): no overlap of the parameter fetch with
#: compute -- "the async version is not async at all, because each all_gather calls
#: torch.cuda.synchronize()" (deepspeedai/DeepSpeed PR #1188, 2021-06-25). Use it with
#: ``Rates.for_software(device, "deepspeed-2021")`` (ndcost.spec.rates), which carries the rest.
DEEPSPEED_2021 = Overlap(fsdp_prefetch=0.0)


@functools.lru_cache(maxsize=256)
def seconds_kind_table(model: Any) -> np.ndarray:
    """(K, len(SECONDS_KIND_FIELDS)) float64, read-only: the real parameters of one layer per kind."""
    table = np.zeros((len(model.kinds), len(SECONDS_KIND_FIELDS)), dtype=np.float64)
    for k in range(len(model.kinds)):
        non_expert, routed, shared = model.kind_parameters(k)
        table[k, SECONDS_KIND["p_nonexp"]] = non_expert
        table[k, SECONDS_KIND["p_routed"]] = routed
        table[k, SECONDS_KIND["p_shared"]] = shared
    table.setflags(write=False)
    return table


@functools.lru_cache(maxsize=256)
def seconds_model_vector(model: Any) -> np.ndarray:
    """(len(SECONDS_MODEL_FIELDS),) float64, read-only: seconds mode's model-level constants."""
    vec = np.zeros(len(SECONDS_MODEL_FIELDS), dtype=np.float64)
    h = model.hidden_size
    vec[SECONDS_MODEL["shared_width"]] = model.shared_expert_intermediate_size if model.is_moe else 0
    vec[SECONDS_MODEL["p_embed"]] = model.vocab_size * h
    vec[SECONDS_MODEL["p_pos"]] = model.learned_position_embeddings * h
    vec[SECONDS_MODEL["p_final_norm"]] = model.final_norm_parameters()
    n_mtp = model.num_nextn_predict_layers
    vec[SECONDS_MODEL["p_mtp_extra"]] = model.mtp_extra_parameters() / n_mtp if n_mtp else 0.0
    vec[SECONDS_MODEL["rms_norm"]] = 1.0 if model.norm == "rmsnorm" else 0.0
    # no RoPE with a learned table, nor in Jamba's and Nemotron-H's attention (Jamba, arXiv:2403.19887
    # §6.5: no explicit positional information; Nemotron-H's configs carry no rope_theta)
    no_rope = model.learned_position_embeddings or model.family in ("jamba", "nemotron_h")
    vec[SECONDS_MODEL["rope"]] = 0.0 if no_rope else 1.0
    vec[SECONDS_MODEL["logit_softcap"]] = 1.0 if model.logit_softcapping else 0.0
    # sigmoid scores with a score-correction bias (noaux_tc routing: DeepSeek-V3 report §2.1.2, GLM-4.5)
    vec[SECONDS_MODEL["router_bias"]] = 1.0 if model.is_moe and model.family in ROUTER_BIAS_FAMILIES else 0.0
    vec[SECONDS_MODEL["expert_bias"]] = 1.0 if model.is_moe and model.mlp_bias else 0.0
    vec[SECONDS_MODEL["glu_clamp"]] = 1.0 if model.is_moe and model.glu_clamp else 0.0
    vec[SECONDS_MODEL["rope_scaled"]] = 1.0 if model.rope_attention_factor != 1.0 else 0.0
    tower = model.vision
    if tower is not None:
        vec[SECONDS_MODEL["v_patches"]] = tower.tokens
        vec[SECONDS_MODEL["v_patch_in"]] = tower.in_channels * tower.temporal_patch_size * tower.patch_size ** 2
        vec[SECONDS_MODEL["v_hidden"]] = tower.hidden_size
        vec[SECONDS_MODEL["v_merge"]] = tower.spatial_merge_size ** 2
        vec[SECONDS_MODEL["v_out"]] = tower.out_hidden_size
        vec[SECONDS_MODEL["p_vision_extra"]] = tower.extra_parameters()
    vec.setflags(write=False)
    return vec


def rates_vector(cluster: Any, rates: Rates, precision: str, gpus: int | None = None) -> np.ndarray:
    """(len(RATE_FIELDS),) float64, read-only: the device's peaks and links with their achievable shares.

    fp8 (``precision == "fp8"``) prices the GEMMs at the fp8 peak and ``fp8_matmul_efficiency``;
    the attention core stays 16-bit (Transformer Engine runs attention in bf16). The compute-bound shares are
    those of the slowest of the job's *gpus* GPUs (the strategy's dp·tp·pp·cp; None: the cluster's), which a
    synchronous step waits for (``ndcost.spec.straggler``: one GPU alone keeps its measured rate).
    """
    return _rates_vector(cluster.device, rates, precision, cluster.num_devices if gpus is None else int(gpus))


@functools.lru_cache(maxsize=256)
def _rates_vector(device: Any, rates: Rates, precision: str, gpus: int) -> np.ndarray:
    vec = np.empty(len(RATE_FIELDS), dtype=np.float64)
    sixteen = device.peak("fp16" if precision == "fp16" else "bf16")
    slowest = job_clock_share(rates.busy_clock_share, rates.clock_sigma, gpus)
    vec[RATE["peak_mm"]] = device.peak("fp8") if precision == "fp8" else sixteen
    vec[RATE["peak_attn"]] = sixteen
    vec[RATE["mm_eff"]] = rates.matmul_share(precision) * slowest
    vec[RATE["attn_eff"]] = rates.attention_share() * slowest
    vec[RATE["attn_h64"]] = rates.head64_share()
    lengths = rates.attention_reference_tokens
    vec[RATE["attn_fbar"]] = (sum(_tile_efficiency(x / 2.0, 1.0) for x in lengths) / len(lengths)) if lengths else 0.0
    vec[RATE["hbm_bw"]] = device.hbm_bandwidth
    vec[RATE["hbm_eff"]] = rates.hbm_efficiency
    vec[RATE["kernel_s"]] = rates.kernel_overhead
    vec[RATE["intra_bw"]] = device.intra_node_bandwidth
    vec[RATE["intra_eff"]] = rates.intra_node_efficiency
    vec[RATE["intra_lat"]] = device.intra_node_latency
    vec[RATE["inter_bw"]] = device.inter_node_bandwidth
    vec[RATE["inter_eff"]] = rates.inter_node_efficiency
    vec[RATE["inter_lat"]] = device.inter_node_latency
    vec[RATE["dpn"]] = device.devices_per_node
    vec[RATE["wave"]] = rates.sm_count * GEMM_TILE_OUTPUTS
    vec[RATE["z3_fetch_bw"]] = rates.zero3_fetch_bandwidth
    vec[RATE["z3_rc_gather"]] = float(rates.zero3_recompute_gather)
    vec[RATE["z3_grad_ar"]] = float(rates.zero3_grad_all_reduce)
    vec[RATE["grad_reduce_bytes"]] = float(rates.grad_reduce_bytes)
    vec[RATE["grad_acc_pass"]] = 0.0 if rates.grad_accumulation_fusion else 1.0
    vec[RATE["wave_tail"]] = rates.gemm_wave_tail
    vec[RATE["mm16_eff"]] = rates.matmul_efficiency * slowest
    moved, kernels, every = rates.fp8_cast()
    vec[RATE["f8_cast_b"]] = moved
    vec[RATE["f8_cast_k"]] = kernels
    vec[RATE["f8_w_mb"]] = every
    vec[RATE["f8_gcast_b"]], vec[RATE["f8_gcast_k"]], vec[RATE["f8_rq_b"]], vec[RATE["f8_rq_k"]] = (
        rates.fp8_backward_casts())
    vec[RATE["ew_eager"]] = 1.0 if rates.elementwise == "eager" else 0.0
    vec[RATE["attn_copies"]] = 1.0 if rates.attention_copies else 0.0
    vec[RATE["tp_ov_splits"]] = rates.tp_overlap_splits
    vec[RATE["tp_ov_sm"]] = min(rates.tp_overlap_sms / rates.sm_count, 0.5)
    vec[RATE["ov_slow"]] = rates.collective_overlap_slowdown / (1.0 + rates.collective_overlap_slowdown)
    vec[RATE["dep_nvl_eff"]] = rates.deepep_nvlink_efficiency
    vec[RATE["dep_intra_eff"]] = rates.deepep_intranode_efficiency
    vec[RATE["dep_call_s"]] = rates.deepep_call_overhead
    vec[RATE["dep_tok_s"]] = rates.deepep_token_overhead
    vec[RATE["sms"]] = rates.sm_count
    vec[RATE["g_tile_k"]] = rates.grouped_gemm_tile_overhead
    vec[RATE["g_stream"]] = rates.grouped_gemm_exposed
    vec[RATE["g_launch"]] = GROUPED_GEMMS.index(rates.grouped_gemm_impl)
    vec[RATE["launch_s"]] = rates.launch_overhead
    vec[RATE["graph_s"]] = rates.graph_kernel_overhead
    vec[RATE["permute"]] = MOE_PERMUTES.index(rates.moe_permute)
    vec[RATE["router_fused"]] = 1.0 if rates.moe_router_fusion else 0.0
    vec[RATE["aux_loss"]] = 1.0 if rates.moe_aux_loss else 0.0
    vec[RATE["scatter_rate"]] = rates.scatter_add_rate
    vec[RATE["f8_split"]] = 1.0 if rates.fp8_split_casts() else 0.0
    vec[RATE["e_bias"]] = EXPERT_BIASES.index(rates.expert_bias)
    vec[RATE["glu_clamp"]] = GLU_CLAMPS.index(rates.glu_clamp)
    vec[RATE["rope_scale"]] = ROPE_SCALES.index(rates.rope_scale)
    vec[RATE["a2a_eff"]] = rates.all_to_all_share()
    vec.setflags(write=False)
    return vec


#: What ndcost.tables.formulas.seconds_candidate_columns returns, in order (the ABI's SECONDS_CAND_FIELDS;
#: checked at import).
_CANDIDATE_ORDER = (
    "b", "s", "t", "sp", "cp", "ep", "t_exp", "d", "edp", "p", "vp", "m", "seq_split",
    "bytes_c", "bytes_mm", "bytes_p", "bytes_grad", "bytes_opt", "dropout_bytes",
    "flash", "dropless", "cap_fact", "cp_ring", "moe_imb",
    "zero", "zero_ranks", "defer_grads", "reshard", "tie_emb", "schedule",
    "ov_dp", "ov_dp_gather", "ov_fsdp", "ov_tp", "ov_cp", "ov_ep",
    "ep_mode", "ep_disp", "ep_sms", "ep_nodes", "disp_b", "graphs", "autocast", "pp_runs", "ep_devs",
)
if _CANDIDATE_ORDER != SECONDS_CAND_FIELDS:   # a field added to the ABI must be given a value in the formula
    raise RuntimeError(f"seconds_candidate_values does not follow SECONDS_CAND_FIELDS {SECONDS_CAND_FIELDS}")


def seconds_candidate_values(spec: Any, d: Any, overlap: Overlap | None = None) -> tuple:
    """One candidate of seconds mode as Python values, in ``SECONDS_CAND_FIELDS`` order: the scalar twin
    of :func:`ndcost.tables.formulas.seconds_candidate_columns`, the formula the batches run.

    *d* maps derive's value names to values (``ndcost.tables.formulas.derived_columns`` of the spec,
    or ``vars()`` of a :class:`~ndcost.tables.derive.Derived`). ``estimate()`` packs the tuple straight
    into its batch-of-one column.
    """
    return seconds_candidate_columns_scalar(SCALAR, spec.__dict__, d, _DEFAULT_OVERLAP if overlap is None else overlap,
                                            FP8_DISPATCH_BYTES)


def seconds_candidate_vector(model: Any, spec: Any, derived: Any = None, overlap: Overlap | None = None) -> np.ndarray:
    """(len(SECONDS_CAND_FIELDS),) float64: one candidate of seconds mode."""
    derived = derive(model, spec) if derived is None else derived
    return np.array(seconds_candidate_values(spec, vars(derived), overlap), dtype=np.float64)


def _extras(layout: Any) -> np.ndarray:
    extras = np.zeros((layout.pp, len(SECONDS_EXTRA_FIELDS)), dtype=np.float64)
    extras[layout.emb_stage, SECONDS_EXTRA["has_emb"]] = 1.0
    extras[layout.out_stage, SECONDS_EXTRA["has_out"]] = 1.0
    extras[:, SECONDS_EXTRA["n_mtp"]] = layout.mtp_stage_counts
    return extras


def seconds_arrays(model: Any, spec: Any, cluster: Any, layout: Any = None, *,
                   rates: Rates | None = None, overlap: Overlap | None = None, derived: Any = None) -> dict:
    """Every array the seconds kernels read, by argument name (for tests and batch callers).

    *layout* and *derived* (``ndcost.tables.derive.derive(model, spec)``) are built when None; a caller
    that has them already passes them in.
    """
    layout = build_layout(model, spec) if layout is None else layout
    rates = Rates.for_device(cluster.device) if rates is None else rates
    return {
        "kinds": nd_kind_table(model),
        "skinds": seconds_kind_table(model),
        "model": nd_model_vector(model),
        "smodel": seconds_model_vector(model),
        "cand": seconds_candidate_vector(model, spec, derived, overlap),
        "rate": rates_vector(cluster, rates, spec.precision, spec.num_devices),
        "counts": layout.stage_counts(),
        "slot_option": np.ascontiguousarray(layout.slot_option, dtype=np.int64),
        "slot_mask": np.ascontiguousarray(layout.slot_mask, dtype=np.int64),
        "extras": _extras(layout),
    }


def seconds_estimate(model: Any, spec: Any, cluster: Any, layout: Any = None, *,
                     rates: Rates | None = None, overlap: Overlap | None = None, derived: Any = None) -> dict:
    """The step time of *spec* on *model* and *cluster*, in seconds, with its parts.

    Args:
        model, spec, cluster: A validated Model, ExecSpec and Cluster.
        layout: The spec's :class:`~ndcost.tables.layout.Layout` (built when None).
        rates: Achievable rates (default: ``Rates.for_device(cluster.device)``).
        overlap: Comm/compute overlap shares (default: :class:`Overlap`'s).
        derived: ``ndcost.tables.derive.derive(model, spec)`` when the caller has it (built when None).

    Returns:
        A dict: ``step_time`` (s); ``parts`` (PART_NAMES -> s, summing to step_time);
        ``stage_times`` (per stage: its busy time in the step, micro-batches and its
        data-parallel tail, without bubble); ``mfu`` and ``hfu`` (model FLOPs without and with
        recompute, per step, over step_time x devices x the matmul dtype's dense peak:
        Korthikanti et al. 2022 §6 / Narayanan et al. 2021 Eq. 3); ``tokens_per_second``;
        ``model_flops`` (per step); ``stage_sums`` (the raw per-stage array, SECONDS_STAGE_FIELDS
        columns).
    """
    arrays = seconds_arrays(model, spec, cluster, layout, rates=rates, overlap=overlap, derived=derived)
    n_stages = arrays["counts"].shape[0]
    stage = np.empty((n_stages, len(SECONDS_STAGE_FIELDS)), dtype=np.float64)
    kernels = _backend.kernels
    kernels.seconds_stage_sums(arrays["kinds"], arrays["skinds"], arrays["model"], arrays["smodel"],
                               arrays["cand"], arrays["rate"], arrays["counts"], arrays["slot_option"],
                               arrays["slot_mask"], arrays["extras"], stage)
    parts = np.empty(len(PART_NAMES), dtype=np.float64)
    stage_times = np.empty(n_stages, dtype=np.float64)
    step = kernels.seconds_combine(stage, arrays["cand"], parts, stage_times)
    # MFU, HFU, tokens/s, model FLOPs: one formula with the batch (ndcost.kernels.seconds_batch)
    step_rates = np.empty(4, dtype=np.float64)
    kernels.seconds_step_rates(stage, arrays["cand"], arrays["rate"], step, step_rates)
    mfu, hfu, tokens_per_second, model_flops = step_rates.tolist()
    return {
        "step_time": step,
        "parts": dict(zip(PART_NAMES, parts.tolist())),
        "stage_times": tuple(stage_times.tolist()),
        "mfu": mfu,
        "hfu": hfu,
        "tokens_per_second": tokens_per_second,
        "model_flops": model_flops,
        "stage_sums": stage,
    }


#: What one micro-batch of a layer takes in seconds mode: compute, recompute, exposed comm.
_LAYER_TIME_FIELDS = ("fw", "bw", "bw_w", "rc", "tp", "cp", "ep", "dp_mb_gather", "dp_mb_reduce")


def seconds_layer_time(model: Any, spec: Any, cluster: Any, kind: int, option: int, keep_mask: int, *,
                       rates: Rates | None = None) -> tuple:
    """(forward, backward) seconds of one layer of *kind* running (option, keep mask), per micro-batch.

    The layer is priced alone on one stage by the seconds kernels (``seconds_stage_sums``),
    as a stage prices it: forward is its forward compute; backward the rest of its
    micro-batch -- backward compute, recompute, and the communication left exposed.
    The recompute planner's times in seconds (``plan_recompute(units="seconds")``).
    """
    arrays = seconds_arrays(model, spec, cluster, rates=rates)
    n_kinds = len(model.kinds)
    counts = np.zeros((1, n_kinds), dtype=np.float64)
    counts[0, kind] = 1.0
    extras = np.zeros((1, len(SECONDS_EXTRA_FIELDS)), dtype=np.float64)
    stage = np.empty((1, len(SECONDS_STAGE_FIELDS)), dtype=np.float64)
    _backend.kernels.seconds_stage_sums(
        arrays["kinds"], arrays["skinds"], arrays["model"], arrays["smodel"], arrays["cand"], arrays["rate"],
        counts, np.array([option], dtype=np.int64), np.array([keep_mask], dtype=np.int64), extras, stage)
    row = stage[0]
    total = float(sum(row[SECONDS_STAGE[name]] for name in _LAYER_TIME_FIELDS))
    forward = float(row[SECONDS_STAGE["fw"]])
    return forward, total - forward
