"""ExecSpec's own rules applied to candidate columns, vectorised, and the distinct layouts of the valid rows.

A row that ``ExecSpec(...)`` would refuse gets a reason code (:mod:`ndcost.tables.reasons`) instead of an
exception; structured fields are probed through ExecSpec once per distinct combination; each valid
row gets an index into the distinct layouts (the layout fields, the recompute statement and, where a
selective layer can occur, the keep mask).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Sequence

import numpy as np

from ..tables.formulas import CHOICES, NONE_INT
from ..errors import SpecError
from ..spec.exec_spec import BYTE_LIMITS, DEGREE_LIMITS, ExecSpec
from ..spec.exec_spec_rules import DEEPEP_RANKS, DUALPIPE_SCHEDULES, MOE_INT_RULES, recomputes_fully
from ..limits import MAX_BATCH, MAX_CAPACITY_FACTOR, MAX_DEVICES, MAX_SEQ_LENGTH
from ..tables.reasons import REASON_CODES
from ..spec.recompute_spec import SELECTIVE_RULES, mask_from_switches, selective_keep_mask
from .candidate_columns import _BOOL_FIELDS, _BYTE_MINIMUM, _Column, _DEGREE_FIELDS, _OBJECT_FIELDS, _freeze

__all__ = []

# --------------------------------------------------------------------------- the rules


class _Rules:
    """ExecSpec's checks over columns: the first broken one per row (its __post_init__ order)."""

    def __init__(self, n: int) -> None:
        self.reason = np.zeros(n, dtype=np.int64)

    def add(self, name: str, broken: Any) -> None:
        if broken is None or broken is False:
            return
        broken = np.asarray(broken)
        if not broken.any():
            return
        self.reason[(self.reason == 0) & broken] = REASON_CODES[name]


def _bad(column: _Column) -> np.ndarray:
    """The rows whose value could not be stored (a bool column; a view of False when none)."""
    if column.bad is not None:
        return column.bad
    return np.broadcast_to(np.False_, column.array.shape)


def _spec_rules(cols: dict[str, _Column], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(reason, the rows whose pp and vpp allow probing the structured fields) before the probe."""
    a = {name: column.array for name, column in cols.items()}
    rules = _Rules(n)
    with np.errstate(all="ignore"):
        # _check_scalars
        for name in _DEGREE_FIELDS:
            rules.add("bad_degree", _bad(cols[name]) | (a[name] < 1) | (a[name] > DEGREE_LIMITS[name]))
        rules.add("bad_degree", (a["etp"] != NONE_INT) & (_bad(cols["etp"]) | (a["etp"] < 1)
                                                          | (a["etp"] > MAX_DEVICES)))
        # In float64: four bounded degrees can multiply past int64, never past float64's range, and a
        # product above 2**24 cannot round down to it.
        devices = (a["dp"].astype(np.float64) * a["tp"] * a["pp"] * a["cp"])
        rules.add("too_many_devices", devices > MAX_DEVICES)
        for name in _BOOL_FIELDS:
            rules.add("bad_flag", _bad(cols[name]))
        for name, limit in (("micro_batch_size", MAX_BATCH), ("seq_length", MAX_SEQ_LENGTH),
                            ("seq_split", MAX_SEQ_LENGTH), ("pp_runs", MAX_BATCH)):
            rules.add("bad_size", _bad(cols[name]) | (a[name] < 1) | (a[name] > limit))
        for name, minimum in _BYTE_MINIMUM.items():
            rules.add("bad_bytes", _bad(cols[name]) | (a[name] < minimum) | (a[name] > BYTE_LIMITS[name]))
        for name in ("cp_algo", "precision", "selective_rule", "moe_dispatcher", "ep_overlap", "cuda_graphs"):
            rules.add("bad_choice", a[name] >= len(CHOICES[name]))
        rules.add("bad_flag", _bad(cols["tie_embeddings"]))
        factor = a["capacity_factor"]
        rules.add("bad_moe_setting", _bad(cols["capacity_factor"]) | ~np.isfinite(factor) | ~(factor >= 1.0)
                  | (factor > MAX_CAPACITY_FACTOR))
        imbalance = a["moe_imbalance"]
        rules.add("bad_moe_setting", _bad(cols["moe_imbalance"]) | ~np.isfinite(imbalance) | ~(imbalance >= 1.0)
                  | (imbalance > MAX_CAPACITY_FACTOR))
        dispatch = a["moe_dispatch"]
        rules.add("bad_moe_setting", _bad(cols["moe_dispatch"])
                  | (~np.isnan(dispatch) & (~np.isfinite(dispatch) | (dispatch < 0.0))))
        dispatches = a["moe_dispatch_count"]
        rules.add("bad_moe_setting", _bad(cols["moe_dispatch_count"]) | ~np.isfinite(dispatches) | ~(dispatches >= 0.0))
        for name, minimum, limit in MOE_INT_RULES:
            rules.add("bad_moe_setting", _bad(cols[name]) | (a[name] < minimum) | (a[name] > limit))
        deepep = a["moe_dispatcher"] == CHOICES["moe_dispatcher"].index("deepep")
        rules.add("bad_moe_setting", deepep & (a["ep"] != 1) & ~np.isin(a["ep"], sorted(DEEPEP_RANKS)))
        # _check_pipeline
        schedule = a["pp_schedule"]
        codes = {name: i for i, name in enumerate(CHOICES["pp_schedule"])}
        rules.add("bad_choice", schedule >= len(codes))
        pp, vpp = a["pp"], a["vpp"]
        rules.add("vpp_without_pp", (vpp > 1) & (pp == 1))
        rules.add("schedule_vpp", ((schedule == codes["interleaved"]) & (vpp == 1))
                  | (((schedule == codes["zero_bubble_v"]) | (schedule == codes["dualpipev"])) & (vpp != 2))
                  | (((schedule == codes["gpipe"]) | (schedule == codes["dualpipe"])) & (vpp != 1)))
        rules.add("dualpipe_pp", (schedule == codes["dualpipe"]) & (pp % 2 != 0))
        runs = a["pp_runs"]
        rules.add("pp_runs", (runs != 1) & (pp == 1))
        seq_split = a["seq_split"]
        safe_split = np.where(seq_split > 0, seq_split, 1)
        rules.add("bad_seq_split", (seq_split != 1)
                  & ((schedule != codes["seq1f1b"]) | (a["seq_length"] % safe_split != 0)))
        # _check_batch
        mbn, gbs = a["micro_batch_num"], a["global_batch_size"]
        mbn_stated, gbs_stated = mbn != NONE_INT, gbs != NONE_INT
        rules.add("bad_batch", mbn_stated & (_bad(cols["micro_batch_num"]) | (mbn < 1) | (mbn > MAX_BATCH)))
        rules.add("bad_batch", gbs_stated & (_bad(cols["global_batch_size"]) | (gbs < 1) | (gbs > MAX_BATCH)))
        rules.add("bad_batch", ~mbn_stated & ~gbs_stated)
        per_micro_batch = a["micro_batch_size"] * a["dp"]
        safe = np.where(per_micro_batch > 0, per_micro_batch, 1)
        rules.add("batch_not_divisible", gbs_stated & (gbs % safe != 0))
        # gbs is a multiple of per_micro_batch here (the rule above comes first), so it equals
        # per_micro_batch*mbn iff gbs // per_micro_batch == mbn: no product that could overflow.
        rules.add("batch_mismatch", gbs_stated & mbn_stated & (gbs // safe != mbn))
        # ExecSpec bounds the global batch micro_batch_num states (mbs*dp*mbn <= MAX_BATCH).
        rules.add("bad_batch", ~gbs_stated & mbn_stated & (mbn > MAX_BATCH // safe))
        micro_batches = np.where(mbn_stated, mbn, gbs // safe)
        safe_runs = np.where(runs > 0, runs, 1)
        rules.add("pp_runs", micro_batches % safe_runs != 0)
        micro_batches = micro_batches // safe_runs              # a schedule run's
        dualpipe = schedule == codes["dualpipe"]
        rules.add("dualpipe_micro_batches", (dualpipe | (schedule == codes["dualpipev"]))
                  & ((micro_batches < 2 * pp) | (dualpipe & (micro_batches % 2 != 0))))
    probe_rows = (pp >= 1) & (vpp >= 1) & ~((vpp > 1) & (pp == 1)) & ~_bad(cols["pp"]) & ~_bad(cols["vpp"])
    return rules.reason, probe_rows


def _moe_rules(cols: dict[str, _Column], reason: np.ndarray, full_recompute: np.ndarray) -> None:
    """ExecSpec's check_moe over columns (after the sharding rules, as ExecSpec runs it);
    *full_recompute* marks the rows whose recompute statement recomputes a layer fully."""
    a = {name: column.array for name, column in cols.items()}
    rules = _Rules(len(reason))
    rules.reason = reason
    fp8 = a["precision"] == CHOICES["precision"].index("fp8")
    rules.add("dispatch_fp8_precision", a["moe_dispatch_fp8"] & ~fp8)
    rules.add("fp8_storage_precision", a["fp8_activation_storage"] & ~fp8)
    rules.add("fp8_transpose_cache", ~a["fp8_transpose_cache"] & ~(fp8 & a["fp8_weight_cache"]))
    rules.add("zero3_parameter_fetch", a["zero3_parameter_fetch"] & (a["zero_stage"] != 3))
    overlap = a["ep_overlap"]
    codes = {name: i for i, name in enumerate(CHOICES["ep_overlap"])}
    schedule = a["pp_schedule"]
    schedules = {name: i for i, name in enumerate(CHOICES["pp_schedule"])}
    dualpipe_schedule = np.isin(schedule, [schedules[name] for name in DUALPIPE_SCHEDULES])
    megatron_schedule = (schedule == schedules["1f1b"]) | (schedule == schedules["interleaved"])
    megatron = overlap == codes["1f1b"]
    rules.add("ep_overlap_rule", ((overlap != codes["none"]) & (a["ep"] == 1))
              | ((overlap == codes["dualpipe"]) & ~dualpipe_schedule)
              | (megatron & (~megatron_schedule | ((a["pp"] > 1) & (a["vpp"] == 1)) | full_recompute)))


def _sharding_rules(cols: dict[str, _Column], reason: np.ndarray) -> None:
    a = {name: column.array for name, column in cols.items()}
    rules = _Rules(len(reason))
    rules.reason = reason
    with np.errstate(all="ignore"):
        zero = a["zero_stage"]
        rules.add("bad_zero_stage", _bad(cols["zero_stage"]) | (zero < 0) | (zero > 3))
        shard = a["optimizer_shard"]
        safe = np.where(shard > 0, shard, 1)
        rules.add("bad_optimizer_shard", (shard != NONE_INT)
                  & (_bad(cols["optimizer_shard"]) | (shard < 1) | (shard > MAX_DEVICES) | (a["dp"] % safe != 0)))
        rules.add("bad_flag", _bad(cols["reshard_params"]))
        rules.add("bad_reshard", (a["reshard_params"] == 1) & (zero != 3))


def _combine_keys(columns: Sequence[np.ndarray], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group id per row, -1 outside *rows*; the first row of each group) for the distinct
    tuples of int *columns* over *rows* (a mixed-radix key, counted densely when small)."""
    n = len(rows)
    group = np.full(n, -1, dtype=np.int64)
    if not rows.any():
        return group, np.zeros(0, dtype=np.int64)
    key = np.zeros(n, dtype=np.int64)
    product = 1
    for column in columns:
        values = np.where(rows, column, 0).astype(np.int64)
        values -= values.min()
        radix = int(values.max()) + 1
        if product * radix >= 2**62:
            stacked = np.stack([np.asarray(column)[rows].astype(np.int64) for column in columns], axis=1)
            _, inverse = np.unique(stacked, axis=0, return_inverse=True)
            group[rows] = inverse.reshape(-1)
            return group, _first_rows(group)
        key = key * radix + values
        product *= radix
    if product <= max(1 << 20, 4 * n):
        used = np.zeros(product, dtype=bool)
        used[key[rows]] = True
        ids = np.cumsum(used) - 1
        group[rows] = ids[key[rows]]
    else:
        _, inverse = np.unique(key[rows], return_inverse=True)
        group[rows] = inverse.reshape(-1)
    return group, _first_rows(group)


def _first_rows(group: np.ndarray) -> np.ndarray:
    valid = np.flatnonzero(group >= 0)
    if not len(valid):
        return np.zeros(0, dtype=np.int64)
    _, first = np.unique(group[valid], return_index=True)
    return valid[first]


def _probe_parameter_reason(error: SpecError) -> str:
    parameter = error.parameter.split(".")[0]
    return "bad_layout_field" if parameter in ("offset", "pp_partition") else "bad_recompute"

# --------------------------------------------------------------------------- structured fields and layouts


def _probe_structured(cols: dict[str, _Column], rows: np.ndarray, n: int) -> tuple[np.ndarray, dict]:
    """ExecSpec's _check_layout and _check_recompute per distinct (pp, vpp, structured values):
    (per row 0 ok / 1 bad layout field / 2 bad recompute; per row what the layout needs)."""
    arrays = [cols["pp"].array, cols["vpp"].array] + [cols[name].array for name in _OBJECT_FIELDS]
    group, first = _combine_keys(arrays, rows)
    n_groups = len(first)
    status = np.zeros(n_groups + 1, dtype=np.int8)       # the last entry serves rows of no group
    normal_code = np.zeros(n_groups + 1, dtype=np.int64)
    switches_mask = np.full(n_groups + 1, -1, dtype=np.int64)
    selective_possible = np.zeros(n_groups + 1, dtype=bool)
    full_possible = np.zeros(n_groups + 1, dtype=bool)
    normals: dict[Any, int] = {}
    normal_values: list[tuple] = []
    for g, row in enumerate(first.tolist()):
        values = {name: cols[name].table[int(cols[name].array[row])] for name in _OBJECT_FIELDS}
        try:
            probe = ExecSpec(pp=int(cols["pp"].array[row]), vpp=int(cols["vpp"].array[row]), micro_batch_num=1,
                             **values)
        except SpecError as error:
            status[g] = 1 if _probe_parameter_reason(error) == "bad_layout_field" else 2
            continue
        normal = tuple(getattr(probe, name) for name in ("offset", "pp_partition", "recompute", "full_recompute",
                                                         "selective_recompute"))
        key = _freeze(normal)
        if key not in normals:
            normals[key] = len(normal_values)
            normal_values.append(normal)
        normal_code[g] = normals[key]
        if probe.selective_switches is not None:
            switches_mask[g] = mask_from_switches(probe.selective_switches)
        selective_possible[g] = not (probe.recompute in ("none", "full")
                                     and probe.selective_recompute in (None, False))
        full_possible[g] = recomputes_fully(probe)
    slot = np.where(group >= 0, group, n_groups)
    return status[slot], {
        "normal_code": normal_code[slot], "normal_values": normal_values,
        "switches_mask": switches_mask[slot], "selective_possible": selective_possible[slot],
        "full_recompute": full_possible[slot],
    }


def _rule_masks() -> np.ndarray:
    """keep mask by (selective_rule code, flash_attention, sp > 1, selective_comm_recompute)."""
    table = np.zeros((len(SELECTIVE_RULES), 2, 2, 2), dtype=np.int64)
    for r, rule in enumerate(SELECTIVE_RULES):
        for flash in (0, 1):
            for sharded in (0, 1):
                for comm in (0, 1):
                    table[r, flash, sharded, comm] = selective_keep_mask(
                        rule, flash_attention=bool(flash), sequence_parallel_degree=2 if sharded else 1,
                        comm_recompute=bool(comm))
    return table


_RULE_MASKS = _rule_masks()


def _layouts_of(cols: dict[str, _Column], rows: np.ndarray, structured: dict, n: int) -> tuple[np.ndarray, tuple]:
    """(layout index per row, -1 outside *rows*; the distinct layouts' fields)."""
    a = {name: cols[name].array for name in ("pp", "vpp", "pp_schedule", "mtp_in_offset", "emb_out_in_offset",
                                             "selective_rule", "flash_attention", "sequence_parallel", "tp",
                                             "selective_comm_recompute")}
    rule = np.clip(a["selective_rule"], 0, len(SELECTIVE_RULES) - 1)
    sharded = a["sequence_parallel"] & (a["tp"] > 1)
    rule_mask = _RULE_MASKS[rule, a["flash_attention"].astype(np.int64), sharded.astype(np.int64),
                            a["selective_comm_recompute"].astype(np.int64)]
    keep = np.where(structured["switches_mask"] >= 0, structured["switches_mask"], rule_mask)
    layout_mask = np.where(structured["selective_possible"], keep, -1)
    columns = [a["pp"], a["vpp"], a["pp_schedule"], a["mtp_in_offset"], a["emb_out_in_offset"],
               structured["normal_code"], layout_mask + 1]
    group, first = _combine_keys(columns, rows)
    layouts = []
    for row in first.tolist():
        offset, partition, recompute, full, selective = structured["normal_values"][int(structured["normal_code"][row])]
        layouts.append(MappingProxyType({
            "pp": int(a["pp"][row]), "vpp": int(a["vpp"][row]),
            "pp_schedule": CHOICES["pp_schedule"][int(a["pp_schedule"][row])],
            "mtp_in_offset": bool(a["mtp_in_offset"][row]), "emb_out_in_offset": bool(a["emb_out_in_offset"][row]),
            "offset": offset, "pp_partition": partition, "recompute": recompute, "full_recompute": full,
            "selective_recompute": selective, "keep_mask": int(layout_mask[row]),
        }))
    return group.astype(np.int64), tuple(layouts)
