"""From specs to the flat arrays the ND kernels read (docs/ND_MODEL.md §1.3-§1.5, §3.3).

A model becomes, once, a per-kind table (``KIND_FIELDS`` of ``ndcost.kernels.columns``) and a
model vector; a candidate becomes a candidate vector. Names and formulas are
ND's: ND's parameter counts (§3.3) drive its DP traffic, and its layer-kind
mapping (§1.5) turns a gated-DeltaNet layer into the q/k/v/o shape its op
table prices. Seconds mode and the memory model use the real parameter counts
of :class:`~ndcost.spec.model.Model` instead.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels import codes
from ..kernels.columns import CAND_FIELDS, KIND, KIND_FIELDS, MODEL, MODEL_FIELDS, ND_OPTION, ND_OPTION_FIELDS
from .cache import cached
from .formulas import SCALAR, ClusterConstants, nd_candidate_columns_scalar
from .derive import Derived
from ..errors import SpecError
from ..spec.exec_spec import ExecSpec
from .kind_shape import kind_shape

__all__ = [
    "MOE_DISPATCH", "MANUAL_P2P_RATIO", "STATIC_RATIO", "RATIO_TYPES", "REC_TYPES",
    "nd_kind_table", "nd_model_vector", "nd_candidate_vector", "cluster_constants", "nd_options_vector", "nd_mla_weights",
]

#: What a MoE layer's dispatch costs per token, hidden unit, routed expert and
#: EP rank, in ND's units: EMPIRICAL, fitted by upstream on 15 profiled points
#: of Qwen3.5-35B-A3B at 8192 tokens on 64 dies (seed estimate.py, MOE_DISPATCH;
#: docs/ND_MODEL.md §2.3). ``ExecSpec.moe_dispatch`` overrides it; 0 prices none. ND charges it as many
#: times as its op count n_dispatch says (``ExecSpec.moe_dispatch_count``, 0 unless stated).
MOE_DISPATCH = 1040.0
#: ND's P2P weight per send/receive (seed estimate.py, MANUAL_P2P_RATIO).
MANUAL_P2P_RATIO = 0.002
#: ND's STATIC comm weight (seed estimate_stage).
STATIC_RATIO = 1e4
#: ND's RatioType / RecType names -> kernel codes (docs/ND_MODEL.md §2.7; ndcost.kernels.codes).
RATIO_TYPES = {name: code for code, name in enumerate(codes.RATIO_TYPES)}
REC_TYPES = {name: code for code, name in enumerate(codes.REC_TYPES)}
#: LayerKind.attention -> the kind's mixer code (ndcost.kernels.codes.MIXERS): every attention flavour is "attention".
_MIXER = {name: float(codes.MIXERS.index(name if name in codes.MIXERS else "attention"))
          for name in ("full", "mla", "linear", "mamba", "none", "mamba1")}


def nd_mla_weights(h: float, a: float, n_kv: float, dh: float, dc_q: float, dc_kv: float,
                   qk_nope: float, dhr: float) -> tuple[float, float]:
    """ND's ``mla_weights`` (docs/ND_MODEL.md §2.2): every MLA attention weight W, and the up-projections' share.

    d_nope = qk_nope or dh; heads = a·(d_nope + dhr); query = dc_q·(h + heads) with a
    q LoRA, else h·heads; W = query + h·(dc_kv + dhr) + dc_kv·n_kv·(d_nope + dh) + a·dh·h;
    up = dc_q·heads (with a q LoRA) + dc_kv·n_kv·(d_nope + dh).
    """
    d_nope = qk_nope or dh
    heads = a * (d_nope + dhr)
    query = dc_q * (h + heads) if dc_q else h * heads
    weights = query + h * (dc_kv + dhr) + dc_kv * n_kv * (d_nope + dh) + a * dh * h
    up = (dc_q * heads if dc_q else 0.0) + dc_kv * n_kv * (d_nope + dh)
    return weights, up


def _attention_dims(model: Any, kind: Any, shape: Any) -> dict:
    """The attention shape ND prices a kind with (docs/ND_MODEL.md §1.5 bind_layer_stack); a Mamba-2
    mixer's heads, B/C groups (as kv heads), head dim and state (as lin_d_k) for seconds mode; no
    mixer (an MLP-only block): zeros."""
    if kind.attention == "mamba":
        return dict(a=model.mamba_num_heads, n_kv=model.mamba_n_groups, dh=model.mamba_head_dim, gate=0.0,
                    lin=(0, model.mamba_state_size, 0), extra=0.0)
    if kind.attention == "mamba1":
        # Mamba-1: d_inner channels as heads of width 1, the dt rank in the kv-heads column
        return dict(a=model.mamba_d_inner, n_kv=model.mamba_dt_rank, dh=1.0, gate=0.0,
                    lin=(0, model.mamba_state_size, 0), extra=0.0)
    if kind.attention == "none":
        return dict(a=0.0, n_kv=0.0, dh=0.0, gate=0.0, lin=(0, 0, 0), extra=0.0)
    if kind.attention == "linear":
        # Gated DeltaNet mapped onto q/k/v/o: a = n_v, dh = d_v, n_kv = n_k·d_k/d_v, gated output.
        n_v, d_v = model.linear_num_value_heads, model.linear_value_head_dim
        n_k, d_k = model.linear_num_key_heads, model.linear_key_head_dim
        extra = model.linear_conv_kernel_dim * (2 * n_k * d_k + n_v * d_v) + 2 * model.hidden_size * n_v
        return dict(a=n_v, n_kv=n_k * d_k / d_v, dh=d_v, gate=1.0, lin=(n_v, d_k, d_v), extra=extra)
    return dict(a=shape.heads, n_kv=shape.kv_heads, dh=shape.head_dim,
                gate=1.0 if shape.out_gate else 0.0, lin=(0, 0, 0), extra=0.0)


def _nd_layer_params(model: Any, kind: Any, att: dict, shape: Any, n_exp: float,
                     n_shared: float) -> tuple[float, float, float]:
    """ND's num_params_layer (docs/ND_MODEL.md §3.3): (non-expert, routed with etp = 1, shared),
    at the kind's own hidden size and FFN width (a vision block's are the tower's)."""
    h = float(shape.hidden)
    ops = kind.ops
    if kind.attention == "mla":
        a, n_kv, dh = model.num_attention_heads, model.num_key_value_heads, model.head_dim
        dc_kv, dc_q, dhr = model.kv_lora_rank, model.q_lora_rank, model.qk_rope_head_dim
        attention = (0.5 * ops.attMM * dc_kv * (n_kv * dh + h)            # kv down + up
                     + 0.25 * ops.attMM * dc_q * (a * dh + h + a * dhr)   # q LoRA
                     + 0.25 * ops.attMM * (h * a * dh + h * dhr))         # output + rope key
    else:
        g = 2.0 if att["gate"] else 1.0
        d_q = att["a"] * att["dh"]
        attention = (0.25 * ops.attMM * (g * h * d_q + h)                 # Q (doubled by a gate)
                     + 0.25 * ops.attMM * (h * d_q + h)                   # O
                     + 0.5 * ops.attMM * (h * att["n_kv"] * att["dh"] + h)  # K and V
                     + att["extra"])                                      # GDN conv and gates
    norm = ops.normOp * 2.0 * h
    n_ff = ops.ffMM or 3.0
    if kind.ffn == "moe":
        hff_exp = float(model.moe_intermediate_size)
        routed = n_exp * n_ff * (hff_exp * h + hff_exp)
        shared = n_shared * n_ff * (hff_exp * h + hff_exp)
        return attention + norm, routed, shared
    hff = float(shape.ffn_width)
    return attention + norm + n_ff * (hff * h + hff), 0.0, 0.0


def refuse_nd_units(model: Any, owner: str) -> None:
    """ND's op tables have no profile for a Mamba-2 mixer or a one-part block of a hybrid stack:
    such a model is priced in seconds only, never as something else."""
    for kind in model.kinds:
        if kind.attention in ("mamba", "none", "mamba1") or kind.ffn == "none":
            block = {"mamba": "a Mamba-2 mixer", "mamba1": "a Mamba-1 mixer"}.get(
                kind.attention, "a hybrid stack's one-part block")
            rule = f"be 'seconds' for this model (ND's op tables cannot price {block}; kind {kind.name!r})"
            raise SpecError("units", owner, rule, "nd")


def nd_kind_table(model: Any) -> np.ndarray:
    """(K, len(KIND_FIELDS)) float64, read-only: one row per layer kind of *model* (cached per model)."""
    return cached(model, "nd_kind_table", lambda: _nd_kind_table(model))


def _nd_kind_table(model: Any) -> np.ndarray:
    table = np.zeros((len(model.kinds), len(KIND_FIELDS)), dtype=np.float64)
    n_exp = float(max(1, model.num_experts))
    n_shared = float(model.num_shared_experts)
    for k, kind in enumerate(model.kinds):
        row = table[k]
        shape = kind_shape(model, k)
        att = _attention_dims(model, kind, shape)
        row[KIND["att_a"]] = att["a"]
        row[KIND["att_n_kv"]] = att["n_kv"]
        row[KIND["att_dh"]] = att["dh"]
        row[KIND["att_gate"]] = att["gate"]
        row[KIND["lin_n_v"]], row[KIND["lin_d_k"]], row[KIND["lin_d_v"]] = att["lin"]
        if kind.attention == "mla":
            row[KIND["is_mla"]] = 1.0
            row[KIND["qk_nope"]] = model.qk_nope_head_dim
            row[KIND["dhr"]] = model.qk_rope_head_dim
            row[KIND["mla_w"]], row[KIND["mla_up"]] = nd_mla_weights(
                model.hidden_size, model.num_attention_heads, model.num_key_value_heads, model.head_dim,
                model.q_lora_rank, model.kv_lora_rank, model.qk_nope_head_dim, model.qk_rope_head_dim)
        moe = kind.ffn == "moe"
        row[KIND["is_moe"]] = 1.0 if moe else 0.0
        row[KIND["ffn_width"]] = shape.ffn_width
        for op in ("attMM", "attBMM", "ffMM", "softmax", "dropout", "normOp", "gather", "headCast", "ffAct", "linrec"):
            row[KIND["n_" + op]] = getattr(kind.ops, op)
        row[KIND["n_qknorm"]] = 1.0 if shape.qk_norm else 0.0
        # Only ND's expert table carries a dispatch entry (docs/ND_MODEL.md §2.3): 1 marks a MoE kind. How
        # many times its layers are charged is ND's count n_dispatch, the spec's moe_dispatch_count,
        # folded into the candidate's moe_dispatch column (0 by default: ND's unset count prices none).
        row[KIND["n_dispatch"]] = 1.0 if moe else 0.0
        if kind.attention in ("mamba", "none", "mamba1") or kind.ffn == "none":
            # no ND profile prices a hybrid block (ND units refuse it): its real counts
            row[KIND["p_nonexp"]], row[KIND["p_routed_base"]], row[KIND["p_shared"]] = model.kind_parameters(k)
        else:
            row[KIND["p_nonexp"]], row[KIND["p_routed_base"]], row[KIND["p_shared"]] = _nd_layer_params(
                model, kind, att, shape, n_exp, n_shared)
        row[KIND["mixer"]] = _MIXER.get(kind.attention, _MIXER["full"])
        row[KIND["has_ffn"]] = 0.0 if kind.ffn == "none" else 1.0
        row[KIND["ssm_chunk"]] = model.mamba_chunk_size if kind.attention == "mamba" else 0.0
        row[KIND["attn_extra_p"]] = att["extra"]
        _fill_submodule(row, model, kind, shape)
    table.setflags(write=False)
    return table


def _fill_submodule(row: np.ndarray, model: Any, kind: Any, shape: Any) -> None:
    """The kind's submodule columns: what ND reads off the submodule's own config (seed
    _submodule_parts prices each submodule on its copy), and the census shares."""
    row[KIND["sub_h"]] = shape.hidden
    row[KIND["sub_a"]] = shape.heads
    row[KIND["sub_hff"]] = shape.nd_hff
    row[KIND["sub_seq"]] = shape.nd_seq
    row[KIND["seq_tokens"]] = shape.tokens
    row[KIND["bidirectional"]] = 1.0 if shape.bidirectional else 0.0
    row[KIND["att_window"]] = shape.window
    row[KIND["att_chunked"]] = 1.0 if shape.chunked else 0.0
    census = model.kind_census(kind.name)
    row[KIND["census_att"]] = -1.0 if census is None else census.selective_attention_mm
    row[KIND["census_ffn"]] = -1.0 if census is None else census.selective_ffn_mm


def nd_model_vector(model: Any) -> np.ndarray:
    """(len(MODEL_FIELDS),) float64, read-only: ND's model-level constants (cached per model)."""
    return cached(model, "nd_model_vector", lambda: _nd_model_vector(model))


def _nd_model_vector(model: Any) -> np.ndarray:
    vec = np.zeros(len(MODEL_FIELDS), dtype=np.float64)
    vec[MODEL["h"]] = model.hidden_size
    vec[MODEL["a"]] = model.num_attention_heads
    # ND's cfg.hff: the dense width; a MoE-only model's hook sets it to the expert width (mixtral).
    vec[MODEL["hff"]] = model.intermediate_size or model.moe_intermediate_size
    vec[MODEL["v"]] = model.vocab_size
    vec[MODEL["n_exp"]] = max(1, model.num_experts)       # ND: a dense model has n_exp = 1
    vec[MODEL["n_chosen"]] = max(1, model.num_experts_per_tok)
    vec[MODEL["n_shared"]] = model.num_shared_experts
    vec[MODEL["hff_exp"]] = model.moe_intermediate_size or 0
    vec[MODEL["shared_gate"]] = 1.0 if model.shared_expert_gate else 0.0
    vec[MODEL["dc_kv"]] = model.kv_lora_rank
    vec[MODEL["n_mtp"]] = model.num_nextn_predict_layers
    # ND prices the embedding and output nodes on the model config, i.e. the family's default kind:
    # the kind the body ends with (deepseek: moe; qwen3-next: full attention).
    vec[MODEL["default_kind"]] = model.layer_kinds_in_order[model.num_hidden_layers - 1]
    vec.setflags(write=False)
    return vec


class _NoCluster:
    """ND's defaults where no cluster is given: 8 devices per node, not A3."""

    dpn = 8.0
    is_a3 = 0.0


def cluster_constants(cluster: Any) -> Any:
    """What the formulas read off *cluster* (cached per cluster); ND's defaults for None."""
    if cluster is None:
        return _NoCluster
    return cached(cluster, "cluster_constants", lambda: ClusterConstants(cluster))


def nd_candidate_vector(spec: ExecSpec, derived: Derived, cluster: Any) -> np.ndarray:
    """(len(CAND_FIELDS),) float64: one candidate, ND's strategy fields."""
    vec = np.empty(len(CAND_FIELDS), dtype=np.float64)
    fill_candidate(vec, spec, derived, cluster)
    return vec


def fill_candidate(vec: np.ndarray, spec: ExecSpec, derived: Derived, cluster: Any) -> None:
    """Write one candidate's ND fields into *vec* (a row of a batch, or a fresh vector).

    The values are ``ndcost.tables.formulas.nd_candidate_columns``, the formulas ``estimate_many``
    runs on columns; ``gather_embed`` is 1 (ND's default unless a parser says otherwise),
    ``ep_local_tokens`` 0 (balanced EP).
    """
    vec[:] = nd_candidate_columns_scalar(SCALAR, spec.__dict__, derived.__dict__, cluster_constants(cluster), MOE_DISPATCH)


def nd_options_vector(ratio_type: str = "DYNAMIC", rec_type: str = "WITH", p2p: bool = False) -> np.ndarray:
    """ND's estimator options (CustomConfig: rtype, retype, ptype; docs/ND_MODEL.md §2.7)."""
    if ratio_type not in RATIO_TYPES:
        raise SpecError("ratio_type", "estimate", f"be one of {', '.join(RATIO_TYPES)}", ratio_type)
    if rec_type not in REC_TYPES:
        raise SpecError("rec_type", "estimate", f"be one of {', '.join(REC_TYPES)}", rec_type)
    vec = np.zeros(len(ND_OPTION_FIELDS), dtype=np.float64)
    vec[ND_OPTION["ratio_type"]] = RATIO_TYPES[ratio_type]
    vec[ND_OPTION["rec_type"]] = REC_TYPES[rec_type]
    vec[ND_OPTION["p2p"]] = 1.0 if p2p else 0.0
    vec[ND_OPTION["p2p_ratio"]] = MANUAL_P2P_RATIO
    vec[ND_OPTION["static_ratio"]] = STATIC_RATIO
    return vec
