"""Batches of candidates (oracle): ND's score and the memory model over N candidates.

The twin is ``cysrc/ndcost/kernels/batch.pxi``. Each candidate is one column of a
candidate matrix (fields x N; ND: ``CAND_FIELDS``, memory: ``MEMORY_CAND_FIELDS``:
numpy fills a field for every candidate contiguously) and the index of its layout in a layout table (``LAYOUT_FIELDS``), whose arrays sit in
two pools: ``pool`` (float64: the chunk-summed counts, the per-chunk counts and
the stage x kind presence of every layout) and ``slot_pool`` (int64: each
layout's slot options, then its slot keep masks).

A row whose ``reason`` is an invalid-candidate code (>= len(KERNEL_REASONS)) is
skipped: its outputs are NaN (and ``fits`` False). A priced row whose result is
NaN gets ``reason`` "undefined"; one whose peak stage exceeds ``capacity`` gets
"no_fit" (only rows still "ok" change). Nothing raises once the shapes are checked.

The ND batch calls :func:`ndcost.kernels.nd_comm.nd_stage_sums`, :func:`~ndcost.kernels.nd_combine.nd_combine`
and :func:`~ndcost.kernels.nd_combine.nd_apply_ratios` per candidate. The memory batch prices, per
candidate, what ``ndcost.tables.memory`` describes -- static bytes per layer of each kind (ZeRO,
Rajbhandari et al. 2020 §5), activations and backward working set per option slot
(Korthikanti et al. 2022 Table 2, via :func:`~ndcost.kernels.memory.layer_activation_bytes`),
comm buffers (docs/ND_MODEL.md §3.2), micro-batches in flight (§3.6), the embedding, output
and MTP extras -- and adds them up with :func:`~ndcost.kernels.memory.stage_memory`.

A layer is priced on its kind's own hidden size and tokens per sample (``hidden``,
``seq_tokens``: a vision tower's), its attention window (``att_window``), and, where the
kind has a census (``census_saved`` >= 0; docs/ND_MODEL.md §3.4 "Census path"), what the census
says a plain layer keeps, and a selective one running HyperParallel's policy
(``HYPER_POLICY_MASK``, ``census_sel`` >= 0); every other setting by the formulas. The
model-level parts (embedding, output, MTP) stay on the model's hidden size and the
candidate's tokens; ``p_vision_extra`` adds to the embedding stage's static bytes.
"""
from __future__ import annotations

import math

from .columns import (
    CAND_FIELDS, HYPER_POLICY_MASK, KERNEL_REASON, KERNEL_REASONS, KIND_FIELDS, LAYOUT, LAYOUT_FIELDS, MEMORY_CAND,
    MEMORY_CAND_FIELDS, MEMORY_KIND, MEMORY_KIND_FIELDS, MEMORY_MODEL, MEMORY_MODEL_FIELDS, MODEL, MODEL_FIELDS,
    ND_OPTION_FIELDS, OPTION_FULL, OPTION_NONE, OPTION_SELECTIVE, PART_NAMES, STAGE_FIELDS,
)
from ..spec.recompute_spec import ALL_KEPT
from .codes import MEMORY_ATTENTIONS, MEMORY_CP, MEMORY_FFNS, MEMORY_SCHEDULES
from .memory import (
    _FP32_BYTES, _NORMOP, N_MEMORY_COLUMNS, _kept, inflight_micro_batches, pair_dualpipe_rows, stage_memory,
    windowed_layer_activation_bytes,
)
from .activation_storage import _fp8_storage_saving
from .autocast import _autocast_activation, _grads_from_backward
from .nd_combine import nd_apply_ratios, nd_combine
from .nd_comm import nd_stage_sums
from .nd_ops import _check_len

__all__ = ["nd_estimate_batch", "memory_batch", "kind_activation_bytes"]

NAN = math.nan
_ALL_KEPT = ALL_KEPT
_N_KERNEL_REASONS = len(KERNEL_REASONS)
_UNDEFINED = KERNEL_REASON["undefined"]
_NO_FIT = KERNEL_REASON["no_fit"]
_L, _MK, _MM, _MC = LAYOUT, MEMORY_KIND, MEMORY_MODEL, MEMORY_CAND
# The memory model's codes (ndcost.kernels.codes), as the float columns hold them.
_ATT_MLA, _ATT_LINEAR = (float(MEMORY_ATTENTIONS.index(name)) for name in ("mla", "linear"))
_FFN_MOE = float(MEMORY_FFNS.index("moe"))
_CP_ALLGATHER = float(MEMORY_CP.index("ring-allgather"))    # memory candidate cp_ring
_SCHED_ZB_V, _SCHED_SEQ1F1B, _SCHED_DUALPIPE_V, _SCHED_DUALPIPE = (
    float(MEMORY_SCHEDULES.index(name)) for name in ("zero_bubble_v", "seq1f1b", "dualpipev", "dualpipe"))


def _rows(array) -> list:
    """A 2-D input as a list of lists of Python numbers (numpy rows read faster this way)."""
    return array.tolist() if hasattr(array, "tolist") else [list(row) for row in array]


def _columns_as_rows(cands) -> list:
    """A (fields, N) candidate matrix as one list of Python numbers per candidate."""
    if hasattr(cands, "T"):
        return cands.T.tolist()
    return [list(row) for row in zip(*cands)]


def _flat(array) -> list:
    return array.tolist() if hasattr(array, "tolist") else list(array)


def _check_common(kinds, kind_width, model, model_width, cands, cand_width, layout_index, layouts,
                  pool, slot_pool, reason) -> tuple[int, int, list]:
    """Shapes shared by both batch kernels; returns (N, K, layout rows)."""
    n_kinds = len(kinds)
    if n_kinds < 1 or any(len(row) != kind_width for row in kinds):
        raise ValueError(f"kinds must be (K, {kind_width}) with K >= 1")
    if len(model) != model_width:
        raise ValueError(f"model must have length {model_width}, got {len(model)}")
    if len(cands) != cand_width:
        raise ValueError(f"cands must have {cand_width} rows (a candidate per column), got {len(cands)}")
    n = len(cands[0]) if cand_width else 0
    if any(len(row) != n for row in cands):
        raise ValueError(f"cands must be ({cand_width}, N)")
    if len(layout_index) != n:
        raise ValueError(f"layout_index must have length {n}, got {len(layout_index)}")
    if len(reason) != n:
        raise ValueError(f"reason must have length {n}, got {len(reason)}")
    rows = _rows(layouts)
    if any(len(row) != len(LAYOUT_FIELDS) for row in rows):
        raise ValueError(f"layouts must be (L, {len(LAYOUT_FIELDS)})")
    n_pool, n_slot_pool = len(pool), len(slot_pool)
    for row in rows:
        p, vp, n_slots = row[_L["pp"]], row[_L["vpp"]], row[_L["n_slots"]]
        k_o = n_kinds * n_slots
        spans = ((row[_L["counts_at"]], p * k_o, n_pool), (row[_L["mcounts_at"]], p * vp * k_o, n_pool),
                 (row[_L["present_at"]], p * n_kinds, n_pool), (row[_L["slots_at"]], 2 * n_slots, n_slot_pool))
        if p < 1 or vp < 1 or n_slots < 1 or any(at < 0 or at + size > bound for at, size, bound in spans):
            raise ValueError("layouts must hold pp, vpp, n_slots >= 1 and pool spans within the pools")
        if not (0 <= row[_L["emb_stage"]] < p and 0 <= row[_L["out_stage"]] < p
                and 0 <= row[_L["emb_chunk"]] < vp and 0 <= row[_L["out_chunk"]] < vp and row[_L["mtp_out"]] >= 0):
            raise ValueError("layouts must place the embedding and output on a stage and chunk of their layout")
    return n, n_kinds, rows


def _check_rows(cands, layout_index, reason, rows, p_column, vp_column) -> None:
    """Every priced row names a layout whose pp and vpp are the candidate's."""
    for i in range(len(cands)):
        if reason[i] >= _N_KERNEL_REASONS:
            continue
        li = layout_index[i]
        if not 0 <= li < len(rows):
            raise ValueError(f"layout_index[{i}] must be a layout row in [0, {len(rows)}), got {li}")
        row = rows[li]
        if cands[i][p_column] != row[_L["pp"]] or cands[i][vp_column] != row[_L["vpp"]]:
            raise ValueError(f"candidate {i} must have the pp and vpp of its layout {li}")


# --------------------------------------------------------------------------- ND's score


def nd_estimate_batch(kinds, model, cands, layout_index, layouts, pool, slot_pool, options, ratios,
                      reason, out_step, out_parts, out_stage_times) -> None:
    """ND's score of N candidates (one :func:`nd_stage_sums` + :func:`nd_combine` each).

    Args:
        kinds: (K, KIND_FIELDS); model: (MODEL_FIELDS,); cands: (CAND_FIELDS, N), a candidate per column.
        layout_index: (N,) the layout row of each candidate; layouts: (L, LAYOUT_FIELDS).
        pool, slot_pool: the layouts' arrays (see the module docstring).
        options: (ND_OPTION_FIELDS,); ratios: (PART_NAMES,) to turn parts into ms, or empty.
        reason: (N,) IN/OUT reason codes; out_step: (N,) the score (ratios applied).
        out_parts: (PART_NAMES, N), a part per row; out_stage_times: (N, >= max pp) each stage's
            time per micro-batch, NaN beyond the candidate's pp, or (0, 0) for none.
    """
    n, n_kinds, rows = _check_common(kinds, len(KIND_FIELDS), model, len(MODEL_FIELDS), cands,
                                     len(CAND_FIELDS), layout_index, layouts, pool, slot_pool, reason)
    if len(options) != len(ND_OPTION_FIELDS):
        raise ValueError(f"options must have length {len(ND_OPTION_FIELDS)}, got {len(options)}")
    n_parts = len(PART_NAMES)
    if len(ratios) not in (0, n_parts):
        raise ValueError(f"ratios must have length 0 or {n_parts}, got {len(ratios)}")
    if len(out_step) != n:
        raise ValueError(f"out_step must have length {n}, got {len(out_step)}")
    if len(out_parts) != n_parts or any(len(part) != n for part in out_parts):
        raise ValueError(f"out_parts must be ({n_parts}, {n})")
    n_times = len(out_stage_times[0]) if len(out_stage_times) else 0
    if len(out_stage_times) not in (0, n) or any(n_times < row[_L["pp"]] for row in rows) and len(out_stage_times):
        raise ValueError(f"out_stage_times must be (0, 0) or ({n}, >= the largest pp)")
    model_row = _flat(model)
    if not 0 <= model_row[MODEL["default_kind"]] < n_kinds:
        raise ValueError(f"model[default_kind] must be a kind row in [0, {n_kinds})")
    cand_rows = _columns_as_rows(cands)
    _check_rows(cand_rows, layout_index, reason, rows, CAND_FIELDS.index("p"), CAND_FIELDS.index("vp"))
    kind_rows, pool_list, slots, options, ratios = _rows(kinds), _flat(pool), _flat(slot_pool), _flat(options), _flat(ratios)
    n_stage_fields = len(STAGE_FIELDS)
    for i in range(n):
        if reason[i] >= _N_KERNEL_REASONS:
            out_step[i] = NAN
            for j in range(n_parts):
                out_parts[j][i] = NAN
            for s in range(n_times):
                out_stage_times[i][s] = NAN
            continue
        row = rows[layout_index[i]]
        p, n_slots = row[_L["pp"]], row[_L["n_slots"]]
        k_o = n_kinds * n_slots
        at = row[_L["counts_at"]]
        counts = [pool_list[at + s * k_o: at + (s + 1) * k_o] for s in range(p)]
        slot_at = row[_L["slots_at"]]
        stage = [[0.0] * n_stage_fields for _ in range(p)]
        nd_stage_sums(kind_rows, model_row, cand_rows[i], counts, slots[slot_at: slot_at + n_slots],
                      slots[slot_at + n_slots: slot_at + 2 * n_slots], row[_L["emb_stage"]], row[_L["out_stage"]], stage)
        parts = [0.0] * n_parts
        times = [0.0] * p
        total = nd_combine(stage, cand_rows[i], model_row, options, [], -1, parts, times)
        if ratios:
            scaled = [0.0] * n_parts
            total = nd_apply_ratios(parts, ratios, scaled)
            parts = scaled
        out_step[i] = total
        for j in range(n_parts):
            out_parts[j][i] = parts[j]
        for s in range(n_times):
            out_stage_times[i][s] = times[s] if s < p else NAN
        if total != total and reason[i] == 0:
            reason[i] = _UNDEFINED


# --------------------------------------------------------------------------- memory


def _max_nan(values) -> float:
    """The largest value, NaN when any is NaN (numpy's max)."""
    best = values[0]
    for value in values[1:]:
        if value != value or value > best:
            best = value
    return best


def _static_layer(kind, mc) -> list:
    """(params, grads, optimizer) bytes of one layer of the kind on one rank (memory.static_layer_bytes)."""
    dense = (kind[_MK["p_nonexp"]] + kind[_MK["p_shared"]]) / mc[_MC["tp"]]   # non-expert + shared, over tp
    out = [dense * mc[_MC["w_param"]] / mc[_MC["div_param"]],
           dense * mc[_MC["w_grad"]] / mc[_MC["div_grad"]],
           dense * mc[_MC["w_optim"]] / mc[_MC["div_optim"]]]
    # Transformer Engine's fp8 weight copies (ExecSpec.fp8_weight_cache), sharded as the weights are
    out[0] += dense * mc[_MC["w_fp8_cache"]] / mc[_MC["div_param"]]
    if kind[_MK["p_routed"]] != 0.0:
        routed = kind[_MK["p_routed"]] / (mc[_MC["ep"]] * mc[_MC["etp"]])  # routed experts over ep·etp
        out[0] += routed * (mc[_MC["w_param"]] + mc[_MC["w_fp8_cache"]]) / mc[_MC["ediv_param"]]
        out[1] += routed * mc[_MC["w_grad"]] / mc[_MC["ediv_grad"]]
        out[2] += routed * mc[_MC["w_optim"]] / mc[_MC["ediv_optim"]]
    return out


def _kind_seq(kind, mc) -> float:
    """Tokens per sequence one layer of the kind runs on, as priced: the candidate's seq, or the
    kind's own seq_tokens when > 0 (a vision tower's patch tokens), split into Seq1F1B's sequence
    chunks as the candidate's seq is (the in-flight counts count chunks). NaN for a negative one."""
    seq_tokens = kind[_MK["seq_tokens"]]
    if seq_tokens == 0.0:
        return mc[_MC["seq"]]
    if not seq_tokens > 0.0:
        return NAN
    if mc[_MC["schedule"]] == _SCHED_SEQ1F1B and mc[_MC["seq_split"]] > 1.0:
        return seq_tokens / mc[_MC["seq_split"]]
    return seq_tokens


def _census_activation(kind, mc, option: int, keep_mask: int) -> float | None:
    """What the kind's census says a layer keeps for one micro-batch (docs/ND_MODEL.md §3.4 "Census
    path": tokens × (saved/sp + saved_tp/tp), selective/selective_tp for a selective layer running
    HyperParallel's policy), or None where no census prices the setting (the formulas then do).
    NaN for a census whose tp part is missing (negative) or an undefined size or degree."""
    if option == OPTION_NONE:
        split, split_tp = kind[_MK["census_saved"]], kind[_MK["census_saved_tp"]]
    elif option == OPTION_SELECTIVE and keep_mask == HYPER_POLICY_MASK:
        split, split_tp = kind[_MK["census_sel"]], kind[_MK["census_sel_tp"]]
    else:
        return None
    if not split >= 0.0:
        return None
    if keep_mask < 0 or keep_mask > _ALL_KEPT:
        return NAN
    seq, batch = _kind_seq(kind, mc), mc[_MC["b"]]
    tp, sp, cp = mc[_MC["tp"]], mc[_MC["sp"]], mc[_MC["cp"]]
    if not (seq > 0.0 and batch > 0.0 and tp >= 1.0 and sp >= 1.0 and cp >= 1.0 and split_tp >= 0.0):
        return NAN
    tokens = seq * batch / cp
    return tokens * (split / sp + split_tp / tp)


def _layer_activation(kind, mc, option: int, keep_mask: int) -> float:
    """One layer of the kind for one micro-batch: its census where one prices the setting, else
    windowed_layer_activation_bytes on the kind's hidden size, tokens and attention window."""
    census = _census_activation(kind, mc, option, keep_mask)
    if census is not None:
        return census
    return _formula_activation(kind, mc, option, keep_mask)


def kind_activation_bytes(kind, mc, option: int, keep_mask: int) -> float:
    """Bytes one layer of a kind keeps for one micro-batch, as ``memory_batch`` prices it: *kind*
    is a row of the memory kind table, *mc* a memory candidate vector. The recompute planner
    asks it for each setting, so that it sees the kind's tokens, window and census too."""
    _check_len(kind, "kind", len(MEMORY_KIND_FIELDS))
    _check_len(mc, "mc", len(MEMORY_CAND_FIELDS))
    return _layer_activation(kind, mc, int(option), int(keep_mask))


def _weighted_activation_output(kind, mc, option: int, tokens: float) -> float:
    """The experts' outputs layer_activation_bytes keeps for the probability-weighted combine (its routed
    tokens x hidden at the compute width), which a stack that weights the tokens inside the expert activation
    does not keep (ExecSpec.moe_weighted_activation: Megatron-Core since core_v0.13, whose un-permutation sums
    without weights); 0 for another layer, another stack, or under full recompute (the layer keeps its input
    alone); *tokens* of one micro-batch on the rank."""
    if mc[_MC["moe_weighted_act"]] == 0.0 or kind[_MK["ffn"]] != _FFN_MOE or option == OPTION_FULL:
        return 0.0
    routed = tokens * kind[_MK["top_k"]] * mc[_MC["token_factor"]] * mc[_MC["etp"]] / mc[_MC["tp"]]
    return routed * kind[_MK["hidden"]] * mc[_MC["bytes_c"]]


def _formula_activation(kind, mc, option: int, keep_mask: int) -> float:
    """windowed_layer_activation_bytes of one layer of the kind (Korthikanti et al. 2022 Table 2), plus
    the inputs of the norms it runs beyond its pre-norms (Gemma's post-norms), kept as the pre-norms'
    are (not under full recompute; selective recompute drops them with the normOp switch), plus what
    autocast's fp32 stream adds (:func:`_autocast_activation`), less what a weighted expert activation and
    DeepSeek-V3's low-precision storage do not keep (:func:`_weighted_activation_output`,
    ``activation_storage._fp8_storage_saving``)."""
    seq = _kind_seq(kind, mc)
    tokens = seq * mc[_MC["b"]] / mc[_MC["cp"]]
    extra = _autocast_activation(kind, mc, option, keep_mask, tokens)
    if kind[_MK["extra_norms"]] > 0.0 and option != OPTION_FULL:
        mask = _ALL_KEPT if option == OPTION_NONE else keep_mask
        residual = tokens * kind[_MK["hidden"]] / mc[_MC["sp"]]
        extra += _kept(mask, _NORMOP) * kind[_MK["extra_norms"]] * residual * mc[_MC["bytes_norm"]]
    extra -= _weighted_activation_output(kind, mc, option, tokens)
    extra -= _fp8_storage_saving(kind, mc, option, tokens)
    return extra + windowed_layer_activation_bytes(
        seq, mc[_MC["b"]], kind[_MK["hidden"]], mc[_MC["tp"]], mc[_MC["sp"]], mc[_MC["cp"]],
        mc[_MC["etp"]], int(kind[_MK["attention"]]), kind[_MK["heads"]], kind[_MK["kv_heads"]],
        kind[_MK["head_dim"]], int(kind[_MK["out_gate"]]), int(kind[_MK["qk_norm"]]), kind[_MK["q_lora"]],
        kind[_MK["kv_lora"]], kind[_MK["qk_nope"]], kind[_MK["qk_rope"]], kind[_MK["v_dim"]],
        kind[_MK["lin_k_heads"]], kind[_MK["lin_k_dim"]], kind[_MK["lin_v_heads"]], kind[_MK["lin_v_dim"]],
        kind[_MK["lin_conv"]], kind[_MK["lin_chunk"]], int(kind[_MK["ffn"]]), int(kind[_MK["gated"]]),
        kind[_MK["ffn_width"]], kind[_MK["experts"]], kind[_MK["top_k"]], kind[_MK["shared_width"]],
        mc[_MC["token_factor"]], int(mc[_MC["flash"]]), mc[_MC["bytes_c"]], mc[_MC["bytes_softmax"]],
        mc[_MC["bytes_dropout"]], mc[_MC["bytes_norm"]], mc[_MC["bytes_linear"]], option, keep_mask,
        int(mc[_MC["slice_input"]]), kind[_MK["att_window"]])


def _layer_params(kind, mc) -> float:
    """A whole layer of the kind's parameters on one rank: non-expert and shared over tp, routed over ep·etp."""
    return ((kind[_MK["p_nonexp"]] + kind[_MK["p_shared"]]) / mc[_MC["tp"]]
            + kind[_MK["p_routed"]] / (mc[_MC["ep"]] * mc[_MC["etp"]]))


def _largest_weight(kind, mc) -> float:
    """The largest weight matrix of a layer of the kind on one rank (ExecSpec.zero3_parameter_fetch: what a
    ZeRO-3 that gathers one parameter at a time holds whole): the non-expert one over tp, a routed expert's
    over etp."""
    dense = kind[_MK["p_largest"]] / mc[_MC["tp"]]
    expert = kind[_MK["p_largest_expert"]] / mc[_MC["etp"]]
    return dense if dense > expert else expert


def _comm_buffers(kind, mc) -> tuple[float, float]:
    """(max(dp, tp, cp), ep) buffer bytes of one layer of the kind (docs/ND_MODEL.md §3.2 comm_expr),
    on the kind's hidden size and tokens."""
    tokens = _kind_seq(kind, mc) * mc[_MC["b"]] / mc[_MC["cp"]]
    h, c, tp = kind[_MK["hidden"]], mc[_MC["bytes_c"]], mc[_MC["tp"]]
    tp_buffer = tokens * h * c if mc[_MC["sp"]] > 1.0 else 0.0       # SP's all-gathered layer input
    cp_buffer = 0.0
    if mc[_MC["cp"]] > 1.0 and kind[_MK["attention"]] != _ATT_LINEAR:
        heads_local = kind[_MK["heads"]] / tp
        if kind[_MK["attention"]] == _ATT_MLA:
            k_width = heads_local * (kind[_MK["qk_nope"]] + kind[_MK["qk_rope"]])
            v_width = heads_local * kind[_MK["v_dim"]]
            q_width = k_width
        else:
            kv_local = kind[_MK["kv_heads"]] / tp
            if 1.0 > kv_local:
                kv_local = 1.0                                       # each rank keeps one kv head
            k_width = v_width = kv_local * kind[_MK["head_dim"]]
            q_width = heads_local * kind[_MK["head_dim"]]
        if mc[_MC["cp_ring"]] == _CP_ALLGATHER:
            cp_buffer = 0.0                                          # held in the backward's working set
        elif mc[_MC["cp_ring"]] != 0.0:
            cp_buffer = 2.0 * tokens * (k_width + v_width) * c       # ring: K/V chunks double-buffered
        else:
            cp_buffer = 2.0 * tokens * (q_width + k_width + v_width) * c  # Ulysses: q, k, v in and out
    dp_buffer = 0.0
    if mc[_MC["shards_grads"]] != 0.0:
        if mc[_MC["z3_param_fetch"]] != 0.0:
            params = _largest_weight(kind, mc)                        # one parameter's gradient, reduced alone
        else:
            params = _layer_params(kind, mc)                          # one layer's gradient bucket
        dp_buffer = params * mc[_MC["w_grad"]]
    ep_buffer = 0.0
    if kind[_MK["ffn"]] == _FFN_MOE and mc[_MC["ep"]] > 1.0:
        routed_tokens = tokens * kind[_MK["top_k"]] * mc[_MC["token_factor"]] * mc[_MC["etp"]] / tp
        ep_buffer = 2.0 * routed_tokens * h * c                       # dispatch + combine buffers
    main = dp_buffer
    if tp_buffer > main:
        main = tp_buffer
    if cp_buffer > main:
        main = cp_buffer
    return main, ep_buffer


def _ring_allgather_work(kind, mc) -> float:
    """Bytes of the buffers the backward of one attention layer holds for PyTorch's all-gather ring
    (cp_algo "ring-allgather"); 0 for other algorithms.

    torch.distributed.tensor.experimental._attention (_templated_ring_attention_backward, with
    torchtitan's default ``context_parallel_rotate_method = "allgather"``, torchtitan 9dec370
    config_manager.py) all-gathers the K/V of every CP rank at once (``_AllGatherRotater``),
    accumulates dQ, dK and dV in fp32 (``_ContextParallelOptions.convert_to_f32``) and passes the
    fp32 dK/dV on to the next rank by all-to-all (one buffer out, one in). Its K/V are those the
    model hands to SDPA: torchtitan's Llama repeats them per query head first (llama/model.py
    ``repeat_kv``), so a K or V row is heads/tp x head_dim wide, like Q. Linear attention: 0.
    """
    if mc[_MC["cp_ring"]] != _CP_ALLGATHER or mc[_MC["cp"]] <= 1.0 or kind[_MK["attention"]] == _ATT_LINEAR:
        return 0.0
    tokens = _kind_seq(kind, mc) * mc[_MC["b"]] / mc[_MC["cp"]]
    heads_local = kind[_MK["heads"]] / mc[_MC["tp"]]
    if kind[_MK["attention"]] == _ATT_MLA:
        q_width = k_width = heads_local * (kind[_MK["qk_nope"]] + kind[_MK["qk_rope"]])
        v_width = heads_local * kind[_MK["v_dim"]]
    else:
        q_width = k_width = v_width = heads_local * kind[_MK["head_dim"]]
    gathered = mc[_MC["cp"]] * (k_width + v_width) * mc[_MC["bytes_c"]]  # every rank's K/V
    accumulators = _FP32_BYTES * (q_width + k_width + v_width)           # fp32 dQ, dK, dV
    exchange = 2.0 * _FP32_BYTES * (k_width + v_width)                  # fp32 dK/dV out and in
    return tokens * (gathered + accumulators + exchange)


def _candidate_memory(kinds, model, mc, row, pool, slots, reserve, out) -> float:
    """One candidate's memory per stage into *out* (p rows of 8); returns the peak (NaN if any stage is)."""
    n_kinds = len(kinds)
    p, vp, n_slots = row[_L["pp"]], row[_L["vpp"]], row[_L["n_slots"]]
    slot_at = row[_L["slots_at"]]
    options = slots[slot_at: slot_at + n_slots]
    masks = slots[slot_at + n_slots: slot_at + 2 * n_slots]
    static, act, work, comm_main, comm_ep = [], [], [], [], []
    for kind in kinds:
        static.append(_static_layer(kind, mc))
        plain = _layer_activation(kind, mc, OPTION_NONE, _ALL_KEPT)
        # What a selective setting the formulas price recomputes: the formulas' plain layer
        # minus what it keeps (the census's plain layer, where one exists, is not on their scale).
        plain_formula = plain
        if kind[_MK["census_saved"]] >= 0.0:
            plain_formula = _formula_activation(kind, mc, OPTION_NONE, _ALL_KEPT)
        gathered = 0.0
        if mc[_MC["fsdp_gathers"]] != 0.0 and mc[_MC["z3_param_fetch"]] != 0.0:
            gathered = _largest_weight(kind, mc) * mc[_MC["w_param"]]   # one parameter gathered at a time
        elif mc[_MC["fsdp_gathers"]] != 0.0:
            # docs/ND_MODEL.md §3.7 FSDP extras: a backward holds two layers' gathered parameters.
            gathered = 2.0 * _layer_params(kind, mc) * mc[_MC["w_param"]]
        ring = _ring_allgather_work(kind, mc)
        act_row, work_row = [], []
        for o in range(n_slots):
            kept = _layer_activation(kind, mc, options[o], masks[o])
            extra = 0.0
            if options[o] == OPTION_FULL:
                extra = plain                     # §3.7 FULL_REC: the plain layer re-materialised
            elif options[o] == OPTION_SELECTIVE:
                # The recomputed ops come back, at one micro-batch: measured against the plain
                # layer of the same pricing (the census's for its policy, else the formulas').
                base = plain_formula
                if masks[o] == HYPER_POLICY_MASK and kind[_MK["census_sel"]] >= 0.0:
                    base = plain
                extra = base - kept
                if 0.0 > extra:
                    extra = 0.0
            act_row.append(kept)
            # The ring's buffers live while the attention's backward runs, after the recomputed MLP's
            # activations are freed: the larger of the two moments (the recomputed attention inputs
            # beside the ring's buffers are not added -- a lower bound of that moment).
            work_row.append((ring if ring > extra else extra) + gathered)
        act.append(act_row)
        work.append(work_row)
        main, ep_buffer = _comm_buffers(kind, mc)
        comm_main.append(main)
        comm_ep.append(ep_buffer)

    schedule, m, seq_split = int(mc[_MC["schedule"]]), int(mc[_MC["m"]]), int(mc[_MC["seq_split"]])
    inflight = [[inflight_micro_batches(schedule, p, m, vp, s, v, seq_split) for v in range(vp)] for s in range(p)]

    # Outside the layers: embedding, output head, MTP extras (memory._stage_static, _extra_activations).
    emb_stage, out_stage = row[_L["emb_stage"]], row[_L["out_stage"]]
    mtp_out = row[_L["mtp_out"]]
    tp, sp = mc[_MC["tp"]], mc[_MC["sp"]]
    widths = (mc[_MC["w_param"]], mc[_MC["w_grad"]], mc[_MC["w_optim"]])
    divisors = (mc[_MC["div_param"]], mc[_MC["div_grad"]], mc[_MC["div_optim"]])
    stage_static = [[0.0, 0.0, 0.0] for _ in range(p)]
    embedding = model[_MM["p_embedding"]] / tp
    # A vision tower's patch embedding and merger sit with the embedding, sharded as a
    # layer's non-expert params (over tp, then the ZeRO divisors of non-expert state).
    vision = model[_MM["p_vision_extra"]] / tp
    for j in range(3):
        stage_static[emb_stage][j] += embedding * widths[j] / divisors[j]
        if vision != 0.0:
            stage_static[emb_stage][j] += vision * widths[j] / divisors[j]
    split_ends = emb_stage != out_stage
    tied = mc[_MC["tie_emb"]] != 0.0
    word = model[_MM["word_embedding"]]
    head = (0.0 if (tied and not split_ends) else word) + model[_MM["p_final_norm"]]
    if mtp_out > 0 and model[_MM["n_mtp"]] > 0.0:
        head += mtp_out * model[_MM["p_mtp_module"]]
        if split_ends and not tied:
            head += word                          # Megatron-Core: the MTP stage builds the embedding too
    head = head / tp
    for j in range(3):
        stage_static[out_stage][j] += head * widths[j] / divisors[j]

    tokens = mc[_MC["seq"]] * mc[_MC["b"]] / mc[_MC["cp"]]
    h, v = model[_MM["h"]], model[_MM["v"]]
    c, n, dropout = mc[_MC["bytes_c"]], mc[_MC["bytes_norm"]], mc[_MC["bytes_dropout"]]
    logits = tokens * v * mc[_MC["bytes_logit"]] / tp                # the loss's logits (ExecSpec.logit_bytes)
    emb_act = tokens * 8.0 + tokens * h * dropout / sp               # int64 token ids (memory.TOKEN_ID_BYTES) + dropout mask
    emb_act += _vision_edge_bytes(model, mc)
    out_act = tokens * h * n / sp + tokens * h * c / sp + logits      # final norm, head input, logits
    if mc[_MC["autocast"]] != 0.0:
        # autocast (ExecSpec.autocast): the final norm's fp32 normalised input and the head weight's 16-bit cast
        # (the tied embedding's too: F.linear casts it), kept until the head's backward (_autocast_activation)
        out_act += tokens * h * _FP32_BYTES / sp + word / tp * c
    mtp_act = tokens * (2.0 * h * n + 2.0 * h * c + h * n + h * c) / sp + logits
    extra_act = [[0.0] * vp for _ in range(p)]
    extra_act[emb_stage][row[_L["emb_chunk"]]] += emb_act
    extra_act[out_stage][row[_L["out_chunk"]]] += out_act + mtp_out * mtp_act

    present_at = row[_L["present_at"]]
    comm = []
    for s in range(p):
        flags = pool[present_at + s * n_kinds: present_at + (s + 1) * n_kinds]
        main = _max_nan([comm_main[k] if flags[k] != 0.0 else 0.0 for k in range(n_kinds)])
        ep_buffer = _max_nan([comm_ep[k] if flags[k] != 0.0 else 0.0 for k in range(n_kinds)])
        comm.append(main + ep_buffer)

    k_o = n_kinds * n_slots
    at = row[_L["mcounts_at"]]
    counts = [[pool[at + (s * vp + chunk) * k_o: at + (s * vp + chunk + 1) * k_o] for chunk in range(vp)]
              for s in range(p)]
    stage_memory(static, act, work, counts, inflight, stage_static, extra_act, comm, reserve, out,
                 1 if mc[_MC["schedule"]] in (_SCHED_ZB_V, _SCHED_DUALPIPE_V) else 0)
    if mc[_MC["grads_none"]] != 0.0 and m == 1:
        _grads_from_backward(out)
    if mc[_MC["schedule"]] == _SCHED_DUALPIPE:
        pair_dualpipe_rows(out)
    return _max_nan([out[s][N_MEMORY_COLUMNS - 1] for s in range(p)])


def _vision_edge_bytes(model, mc) -> float:
    """What a vision tower's patch embedding and merger keep for one micro-batch on the embedding's
    stage (seconds mode prices them: ``ndcost.kernels.seconds._vision_edges``): the patches and the merger's
    norm input on the token shard, fc1's input, and GELU's input and output on the merged tokens,
    tensor-parallel as the blocks'."""
    patches = model[_MM["v_patches"]]
    if patches <= 0.0:
        return 0.0
    c, tp, sp = mc[_MC["bytes_c"]], mc[_MC["tp"]], mc[_MC["sp"]]
    rows = mc[_MC["b"]] * patches / mc[_MC["cp"]]
    wide = model[_MM["v_hidden"]] * model[_MM["v_merge"]]
    merged = rows / model[_MM["v_merge"]]
    return (rows * (model[_MM["v_patch_in"]] * c + model[_MM["v_hidden"]] * mc[_MC["bytes_norm"]]) / sp
            + merged * wide * c / sp + 2.0 * merged * wide / tp * c)


def memory_batch(kinds, model, cands, layout_index, layouts, pool, slot_pool, reserve, capacity,
                 reason, out_peak, out_fits, out_stages) -> None:
    """Memory of N candidates: each one's peak stage (bytes) and whether it fits *capacity*.

    Args:
        kinds: (K, MEMORY_KIND_FIELDS); model: (MEMORY_MODEL_FIELDS,); cands: (MEMORY_CAND_FIELDS, N).
        layout_index, layouts, pool, slot_pool: as :func:`nd_estimate_batch`.
        reserve: bytes kept back on every device; capacity: the device's HBM in bytes.
        reason: (N,) IN/OUT; out_peak: (N,) the largest stage total (NaN if undefined);
        out_fits: (N,) 1 when out_peak <= capacity; out_stages: (N, >= max pp, 8) each
            stage's breakdown (memory.MEMORY_PARTS, then the total), NaN beyond the
            candidate's pp, or (0, 0, 8) for none.
    """
    n, n_kinds, rows = _check_common(kinds, len(MEMORY_KIND_FIELDS), model, len(MEMORY_MODEL_FIELDS), cands,
                                     len(MEMORY_CAND_FIELDS), layout_index, layouts, pool, slot_pool, reason)
    if len(out_peak) != n or len(out_fits) != n:
        raise ValueError(f"out_peak and out_fits must have length {n}")
    n_stage_rows = len(out_stages[0]) if len(out_stages) else 0
    if len(out_stages) not in (0, n) or (len(out_stages) and (
            any(n_stage_rows < row[_L["pp"]] for row in rows) or len(out_stages[0][0]) != N_MEMORY_COLUMNS)):
        raise ValueError(f"out_stages must be (0, 0, {N_MEMORY_COLUMNS}) or ({n}, >= the largest pp, {N_MEMORY_COLUMNS})")
    cand_rows = _columns_as_rows(cands)
    _check_rows(cand_rows, layout_index, reason, rows, MEMORY_CAND["p"], MEMORY_CAND["vp"])
    kind_rows, model_row, pool_list, slots = _rows(kinds), _flat(model), _flat(pool), _flat(slot_pool)
    reserve, capacity = float(reserve), float(capacity)
    for i in range(n):
        if reason[i] >= _N_KERNEL_REASONS:
            out_peak[i] = NAN
            out_fits[i] = 0
            for s in range(n_stage_rows):
                for j in range(N_MEMORY_COLUMNS):
                    out_stages[i][s][j] = NAN
            continue
        row = rows[layout_index[i]]
        p = row[_L["pp"]]
        out = [[0.0] * N_MEMORY_COLUMNS for _ in range(p)]
        peak = _candidate_memory(kind_rows, model_row, cand_rows[i], row, pool_list, slots, reserve, out)
        out_peak[i] = peak
        fits = peak <= capacity
        out_fits[i] = 1 if fits else 0
        for s in range(n_stage_rows):
            for j in range(N_MEMORY_COLUMNS):
                out_stages[i][s][j] = out[s][j] if s < p else NAN
        if reason[i] == 0:
            if peak != peak:
                reason[i] = _UNDEFINED
            elif not fits:
                reason[i] = _NO_FIT
