"""``estimate()``: one strategy, priced, in seconds or in ND's units.

The Python layer validates once, builds (or fetches from cache) the layout and
the flat arrays, and hands them to the backend's kernels; it computes no
price itself, so both backends price every candidate the same way.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..kernels import columns as col
from .. import _backend
from ..tables.derive import derive
from ..spec.device import Cluster
from ..errors import SpecError
from .estimate_one import estimate_nd_one, estimate_seconds_one, nd_options, single_layout
from ..spec.exec_spec import ExecSpec
from ..tables.layout import Layout, build_layout
from ..spec.model import Model
from ..tables.nd_tables import nd_candidate_vector, nd_kind_table, nd_model_vector, refuse_nd_units
from ..spec.rates_io import as_rates
from .software_arg import apply_software
from ..spec.ratios import Ratios
from .result import Estimate, check_parts_sum
from ..tables.joint_rules import validate

__all__ = ["estimate", "nd_estimate", "nd_options", "layer_times", "UNITS", "as_model", "as_cluster",
           "check_physical_step", "memory_limit_bytes"]

UNITS = ("seconds", "nd")


def as_model(model: Any) -> Model:
    """A Model from a Model or a catalog name."""
    if isinstance(model, Model):
        return model
    if isinstance(model, str):
        return Model.from_catalog(model)
    raise SpecError("model", "estimate", "be a Model or a catalog model name", model)


def as_cluster(cluster: Any, spec: ExecSpec | None = None) -> Cluster:
    """A Cluster from a Cluster, or a device name sized to the spec."""
    if isinstance(cluster, Cluster):
        return cluster
    if isinstance(cluster, str) and spec is not None:
        return Cluster(cluster, num_devices=spec.num_devices)
    raise SpecError("cluster", "estimate", "be a Cluster (or a device name, sized to the spec)", cluster)


def _empty_savings() -> np.ndarray:
    return np.zeros(0, dtype=np.float64)


def _nd_stage_sums(model: Model, spec: ExecSpec, cluster: Cluster, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """The ND walk: per-stage raw sums (p, STAGE_FIELDS) and the candidate vector."""
    derived = derive(model, spec, cluster)
    cand = nd_candidate_vector(spec, derived, cluster)
    stage = np.empty((layout.pp, len(col.STAGE_FIELDS)), dtype=np.float64)
    _backend.kernels.nd_stage_sums(
        nd_kind_table(model), nd_model_vector(model), cand, layout.stage_counts(),
        layout.slot_option, layout.slot_mask, layout.emb_stage, layout.out_stage, stage,
    )
    return stage, cand


_options = nd_options


def nd_estimate(model: Model, spec: ExecSpec, cluster: Cluster, layout: Layout, *, ratios: Any = None,
                ratio_type: str = "DYNAMIC", rec_type: str = "WITH", p2p: bool = False,
                stage_savings: Any = None, stage_focused: int | None = None) -> dict:
    """ND's score of a validated strategy (seed estimate_performance), as a dict of results."""
    stage, cand = _nd_stage_sums(model, spec, cluster, layout)
    savings = _empty_savings() if stage_savings is None else np.ascontiguousarray(stage_savings, dtype=np.float64)
    if savings.shape[0] not in (0, layout.pp):
        raise SpecError("stage_savings", "estimate", f"hold one value per stage ({layout.pp})", len(savings))
    focus = -1 if stage_focused is None else int(stage_focused)
    if not -1 <= focus < layout.pp:
        raise SpecError("stage_focused", "estimate", f"be a stage index in [0, {layout.pp})", stage_focused)
    parts = np.empty(len(col.PART_NAMES), dtype=np.float64)
    stage_times = np.empty(layout.pp, dtype=np.float64)
    total = _backend.kernels.nd_combine(stage, cand, nd_model_vector(model), _options(ratio_type, rec_type, bool(p2p)),
                               savings, focus, parts, stage_times)
    units = "nd"
    ratio_set = Ratios.coerce(ratios)
    if ratio_set is not None:
        scaled = np.empty_like(parts)
        total = _backend.kernels.nd_apply_ratios(parts, np.asarray(ratio_set.vector(), dtype=np.float64), scaled)
        parts = scaled
        units = "nd_ms"
    return {"units": units, "step_time": float(total), "parts": dict(zip(col.PART_NAMES, map(float, parts))),
            "stage_times": tuple(map(float, stage_times))}


def estimate(model: Any, spec: ExecSpec, cluster: Any, *, units: str = "seconds", ratios: Any = None,
             ratio_type: str = "DYNAMIC", rec_type: str = "WITH", p2p: bool = False,
             stage_savings: Any = None, stage_focused: int | None = None,
             with_memory: bool = True, rates: Any = None, software: str | None = None) -> Estimate:
    """Price one strategy.

    Args:
        model: A :class:`Model` or a catalog name.
        spec: The strategy.
        cluster: A :class:`Cluster` (or a device name: a cluster of exactly the spec's devices).
        units: ``"seconds"`` (default) or ``"nd"`` (ND's score; with *ratios*, milliseconds).
        ratios: A :class:`Ratios`, a path to a ratios JSON, or a mapping.
        ratio_type, rec_type, p2p: ND's estimator options (CustomConfig rtype, retype, ptype), nd units only.
        stage_savings: Per stage, the recompute time a per-layer plan saves (ND's stage_savings).
        stage_focused: The stage whose parts are reported (ND's stage_focused); default the straggler.
        with_memory: Also estimate memory per stage and whether it fits.
        rates: Seconds mode's achievable rates: a :class:`~ndcost.spec.rates.Rates` or a rates JSON
            (``ndcost.spec.rates_io``, e.g. fitted by ``ndcost.fit_rates``); default the device's.
        software: A training stack, a ``SOFTWARE_PRESETS`` name (``ndcost software`` lists them): its strategy fields fill
            those the spec leaves at ExecSpec's defaults, and its rates fill those *rates* does not state
            (a figure *rates* states wins) -- ``ndcost.price.software_arg``. None (default): the spec and rates as given.

    Raises:
        SpecError: For anything invalid, naming the parameter, the rule and the value.
    """
    if units not in UNITS:
        raise SpecError("units", "estimate", f"be one of {', '.join(map(repr, UNITS))}", units)
    if not isinstance(spec, ExecSpec):
        raise SpecError("spec", "estimate", "be an ExecSpec", spec)
    if type(model) is not Model:   # (a Model as is: a per-call cost of a search's loop)
        model = as_model(model)
    if type(cluster) is not Cluster:
        cluster = as_cluster(cluster, spec)
    if units == "nd" and rates is not None:
        raise SpecError("rates", "estimate", "be given in seconds units only (ND's units price no rates)", rates)
    if software is not None:
        model, spec, rates = apply_software(software, model, spec, cluster, rates, owner="estimate", units=units)
    if units != "nd":
        # Seconds mode prices a per-layer plan as it runs (plan.spec's ranges), so ND's
        # stage_savings adjustment and its stage_focused view have no meaning there.
        if stage_savings is not None or stage_focused is not None:
            name, value = (("stage_savings", stage_savings) if stage_savings is not None
                           else ("stage_focused", stage_focused))
            raise SpecError(name, "estimate", "be given in nd units only (in seconds, price plan.spec)", value)
        if rates is not None:
            rates = as_rates(rates, device=cluster, owner="estimate")
        result = estimate_seconds_one(model, spec, cluster, ratios, rates, with_memory)
        if ratios is not None or rates is not None:
            check_physical_step(result, ratios, rates, "estimate")
        return result
    if stage_savings is None and stage_focused is None:
        # refuses a model ND's tables cannot price (refuse_nd_units) as it prepares the spec
        result = estimate_nd_one(model, spec, cluster, ratios, ratio_type, rec_type, p2p, with_memory)
        if ratios is not None:
            check_physical_step(result, ratios, None, "estimate")
        return result
    refuse_nd_units(model, "estimate")
    # ND's per-layer plan view (stage_savings, stage_focused): the seeds' own walk and combine.
    validate(model, spec, cluster)
    layout = build_layout(model, spec, nd=True)
    derived = derive(model, spec, cluster)
    memory = _memory(model, spec, cluster, derived) if with_memory else None
    priced = nd_estimate(model, spec, cluster, layout, ratios=ratios, ratio_type=ratio_type,
                         rec_type=rec_type, p2p=p2p, stage_savings=stage_savings, stage_focused=stage_focused)
    check_parts_sum(priced["parts"], priced["step_time"])
    return Estimate(
        units=priced["units"], step_time=priced["step_time"], parts=priced["parts"],
        stage_times=priced["stage_times"], memory=memory,
        fits=True if memory is None else memory.fits(cluster.device.memory_bytes))


def memory_limit_bytes(memory_limit: Any, cluster: Cluster, owner: str) -> float:
    """The bytes a device may use: *memory_limit* (a finite number of bytes > 0) or the device's HBM."""
    from ..errors import is_finite_number

    if memory_limit is None:
        return float(cluster.device.memory_bytes)
    from ..limits import MAX_HBM_BYTES

    if not is_finite_number(memory_limit) or not 0 < memory_limit <= MAX_HBM_BYTES:
        raise SpecError("memory_limit", owner, f"be a number of bytes in (0, {MAX_HBM_BYTES}] (None: the device's "
                        "HBM)", memory_limit)
    return float(memory_limit)


def check_physical_step(result: Any, ratios: Any, rates: Any, owner: str) -> None:
    """Refuse a step a ratios or rates file scaled out of physics: the step in seconds (seconds units;
    milliseconds with ND's ratios) within [MIN_STEP_SECONDS, MAX_STEP_SECONDS] (ndcost.limits)."""
    from ..limits import MAX_STEP_SECONDS, MIN_STEP_SECONDS

    seconds = result.step_time / 1e3 if result.units == "nd_ms" else result.step_time
    # ND's ratios turn a score into milliseconds at any scale a fit gives (a toy ratio of 2 ms per unit
    # is legal): only a step no clock can take, infinite or below a microsecond, is refused there
    highest = MAX_STEP_SECONDS if result.units == "seconds" else math.inf
    if result.units == "nd" or (math.isfinite(seconds) and MIN_STEP_SECONDS <= seconds <= highest):
        return
    name, value = ("ratios", ratios) if ratios is not None else ("rates", rates)
    raise SpecError(name, owner, f"give a physical step time, {MIN_STEP_SECONDS:g} s to {MAX_STEP_SECONDS:g} s "
                    f"(they price this step at {seconds:.3g} s)", value if isinstance(value, str) else name)


def _memory(model: Model, spec: ExecSpec, cluster: Cluster, derived: Any):
    """The memory model's estimate of a validated spec (its *derived* values given) in ND's units, on
    ND's placement, from the layout pool the one-candidate path caches per model (``memory_estimate``
    packs it on every call)."""
    from ..tables.memory import memory_candidate_vector, run_memory_batch

    return run_memory_batch(model, memory_candidate_vector(model, spec, derived).reshape(-1, 1),
                            single_layout(model, spec, nd=True), cluster)


def layer_times(model: Any, spec: ExecSpec, cluster: Any, kind: int, option: str = "none",
                switches: Any = None, *, software: str | None = None) -> tuple[float, float]:
    """(forward, backward) of one layer of *kind* in ND's units, as the seeds' ``estimate_layer_times``.

    The layer runs alone on the first stage of the spec's pipeline; backward
    includes its recompute (priced at a third, as a stage prices it). Cached
    per (model, spec, cluster, kind, option, switches) like the seeds' LayerTimes. *software* applies a
    training stack's strategy fields to the spec first (ND's units price no rates), as :func:`estimate`'s.
    """
    from ..spec.recompute_spec import mask_from_switches

    model = as_model(model)
    cluster = as_cluster(cluster, spec)
    model, spec, _ = apply_software(software, model, spec, cluster, None, owner="layer_times", units="nd")
    if not isinstance(kind, int) or not 0 <= kind < len(model.kinds):
        raise SpecError("kind", "layer_times", f"be a kind index in [0, {len(model.kinds)})", kind)
    codes = {"none": col.OPTION_NONE, "full": col.OPTION_FULL, "selective": col.OPTION_SELECTIVE}
    if option not in codes:
        raise SpecError("option", "layer_times", "be 'none', 'full' or 'selective'", option)
    if option == "selective":
        mask = spec.keep_mask if switches is None else mask_from_switches(switches)
    else:
        mask = 0xFF if option == "none" else 0
    return _layer_times(model, spec, cluster, kind, codes[option], mask)


@functools.lru_cache(maxsize=4096)
def _layer_times(model: Model, spec: ExecSpec, cluster: Cluster, kind: int, option: int, mask: int) -> tuple[float, float]:
    derived = derive(model, spec, cluster)
    cand = nd_candidate_vector(spec, derived, cluster)
    counts = np.zeros((spec.pp, len(model.kinds) * 1), dtype=np.float64)
    counts[0, kind] = 1.0
    stage = np.empty((spec.pp, len(col.STAGE_FIELDS)), dtype=np.float64)
    _backend.kernels.nd_stage_sums(nd_kind_table(model), nd_model_vector(model), cand, counts,
                          np.array([option], dtype=np.int64), np.array([mask], dtype=np.int64), -1, -1, stage)
    # One stage, one micro-batch: the pipeline is the stage itself (seed estimate_stage on the lone layer).
    one = cand.copy()
    one[col.CAND["p"]] = 1.0
    one[col.CAND["m"]] = 1.0
    one[col.CAND["vp"]] = 1.0
    parts = np.empty(len(col.PART_NAMES), dtype=np.float64)
    times = np.empty(1, dtype=np.float64)
    total = _backend.kernels.nd_combine(np.ascontiguousarray(stage[:1]), one, nd_model_vector(model),
                               _options("DYNAMIC", "WITH", False), _empty_savings(), -1, parts, times)
    once = total - parts[col.PART["recompute"]]
    forward = once / 3.0  # BACKWARD_RATIO = 2: the forward is a third of a pass (seed estimate_layer_times)
    return float(forward), float(total - forward)
