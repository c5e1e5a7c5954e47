"""Hybrid state-space stacks: the Mamba-2 mixer and the one-part blocks around it.

A Nemotron-H stack (Transformers' NemotronHConfig, ``hybrid_override_pattern``) is a sequence of
blocks, each one pre-norm, one mixer and a residual add (NemotronHBlock): ``M`` a Mamba-2 mixer,
``*`` self-attention, ``-`` an MLP, ``E`` a MoE. ndcost prices each block as a layer of its own
(Megatron-LM's hybrid stack partitions pipeline stages by these blocks too): a mixer-only block is a
:class:`~ndcost.spec.layer_kinds.LayerKind` with ``ffn = "none"``, an MLP/MoE-only block one with ``attention =
"none"``.

The Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", §7 and Fig. 6; modeling_nemotron_h
NemotronHMamba2Mixer; Megatron-LM mamba_mixer.py): ``in_proj`` h -> [z, x, B, C, dt] of widths
d_inner, d_inner, G·N, G·N, H (d_inner = H·P heads of P channels, G groups of B/C of state N); a
causal depthwise conv1d of ``conv_kernel`` taps over [x, B, C]; the SSD scan; a gated RMSNorm over
d_inner (y · silu(z)); ``out_proj`` d_inner -> h; per-head ``dt_bias``, ``A_log`` and ``D``.
"""
from __future__ import annotations

from typing import Any

__all__ = ["BLOCK_TYPES", "MAMBA_FIELDS", "MAMBA1_FIELDS", "block_flavour", "mamba_dims", "mamba_mixer_parameters",
           "mamba1_mixer_parameters", "ssd_flops_per_token", "SELECTIVE_SCAN_FLOPS"]

#: ``layer_types`` entries of a hybrid stack: NemotronHConfig.layers_block_type's names.
BLOCK_TYPES = ("mamba", "attention", "mlp", "moe")
#: Model fields of the Mamba-2 mixer.
MAMBA_FIELDS = ("mamba_num_heads", "mamba_head_dim", "mamba_state_size", "mamba_n_groups",
                "mamba_conv_kernel", "mamba_chunk_size")

#: Model fields of the Mamba-1 mixer (Jamba's layers: a Mamba mixer or attention, then an MLP or MoE).
MAMBA1_FIELDS = ("mamba_d_inner", "mamba_dt_rank")
#: FLOPs of Mamba-1's selective scan per token, channel and state (discretise, update the state, read
#: it out: 9·B·L·D·N, state-spaces/mamba#110, the count VMamba's flop counter uses).
SELECTIVE_SCAN_FLOPS = 9.0

_FLAVOURS = {"mamba": ("mamba", "none"), "attention": ("full", "none"), "mlp": ("none", "dense"),
             "moe": ("none", "moe")}


def block_flavour(block_type: str) -> tuple[str, str]:
    """(attention, ffn) of a one-part block of a hybrid stack."""
    return _FLAVOURS[block_type]


def mamba_dims(model: Any) -> tuple[int, int, int, int]:
    """(d_inner, conv channels, in_proj outputs, heads) of the model's Mamba-2 mixer."""
    heads, groups, state = model.mamba_num_heads, model.mamba_n_groups, model.mamba_state_size
    d_inner = heads * model.mamba_head_dim
    conv = d_inner + 2 * groups * state                  # x, B, C go through the conv
    return d_inner, conv, d_inner + conv + heads, heads  # z, then x, B, C, then dt


def mamba_mixer_parameters(model: Any) -> int:
    """Parameters of one Mamba-2 mixer (NemotronHMamba2Mixer): in_proj and out_proj without biases
    (Nemotron-H's use_bias False), the conv1d with its bias (use_conv_bias True), dt_bias, A_log and D
    per head, and the gated RMSNorm's weight over d_inner."""
    d_inner, conv, in_out, heads = mamba_dims(model)
    h = model.hidden_size
    params = h * in_out                                  # in_proj
    params += conv * model.mamba_conv_kernel + conv      # conv1d (depthwise) + bias
    params += 3 * heads                                  # dt_bias, A_log, D
    params += d_inner                                    # norm (MambaRMSNormGated)
    params += d_inner * h                                # out_proj
    return params


def mamba1_mixer_parameters(model: Any) -> int:
    """Parameters of one Mamba-1 mixer as Jamba builds it (modeling_jamba JambaMambaMixer): in_proj
    h -> 2·d_inner and out_proj d_inner -> h without biases (mamba_proj_bias False), the conv1d over
    d_inner with its bias, x_proj d_inner -> dt_rank + 2·N, dt_proj dt_rank -> d_inner with a bias,
    A_log (d_inner x N), D (d_inner), and Jamba's RMSNorms of dt, B and C."""
    d, rank, state, h = model.mamba_d_inner, model.mamba_dt_rank, model.mamba_state_size, model.hidden_size
    params = h * 2 * d + d * h                           # in_proj, out_proj
    params += d * model.mamba_conv_kernel + d            # conv1d + bias
    params += d * (rank + 2 * state)                     # x_proj
    params += rank * d + d                               # dt_proj + bias
    params += d * state + d                              # A_log, D
    params += rank + 2 * state                           # dt_layernorm, b_layernorm, c_layernorm
    return params


def ssd_flops_per_token(head_dim: float, state: float, chunk: float) -> float:
    """Forward FLOPs of the SSD scan per token and head (Dao & Gu 2024, §6, the chunked algorithm's
    four steps, as Megatron's mamba_chunk_scan_combined runs them on chunks of Q tokens): the
    diagonal blocks C·Bᵀ (2·Q·N) and their product with X (2·Q·P), the chunk states Bᵀ·X (2·N·P) and
    the states' contribution to the output C·h (2·N·P); the state passing between chunks is O(N·P/Q)
    and left out. An estimate: the Triton kernels compute the whole Q x Q diagonal block and mask it."""
    return 2.0 * chunk * (state + head_dim) + 4.0 * state * head_dim
