"""Column layouts of the flat arrays the kernels read (the kernel ABI).

The Python layer turns a (model, cluster) into a per-kind table and a model
vector once, and each candidate into a candidate vector; the kernels read them
by these indices. ``cysrc/ndcost/kernels/columns.pxi`` holds the same numbers
as C enums: it is generated from this file by ``python tools/gen_columns.py``
and tests/test_columns.py checks that the two agree.

Names follow ND's cost-model config fields (docs/ND_MODEL.md §1.3) where ND has one.
"""
from __future__ import annotations

from .codes import DISPATCHERS, EP_OVERLAPS, SCHEDULES  # noqa: F401 (the codes of three candidate columns)

# --- per layer kind: one row per kind of the model (float64, K x KIND_COLUMNS) ---
KIND_FIELDS = (
    "att_a",          # attention heads of the kind (linear/GDN kind: linear_num_value_heads)
    "att_n_kv",       # kv heads (GDN: n_k*d_k/d_v, ND's mapping onto q/k/v/o, docs/ND_MODEL.md §1.5)
    "att_dh",         # head dim (GDN: linear_value_head_dim; MLA: v_head_dim as ND's deepseek profile)
    "att_gate",       # 1 when a fused output gate doubles Q (Qwen3-Next gated attention, every GDN kind)
    "qk_nope",        # MLA qk_nope_head_dim (0 -> att_dh)
    "dhr",            # MLA qk_rope_head_dim (0 otherwise)
    "lin_n_v",        # GDN value heads (0 for other kinds: no n_linrec entry)
    "lin_d_k",        # GDN key head dim
    "lin_d_v",        # GDN value head dim
    "is_mla",         # 1 for an MLA kind (ND: dc_kv != 0 uses mla_weights for attMM)
    "mla_w",          # MLA: every attention weight W of mla_weights (docs/ND_MODEL.md §2.2)
    "mla_up",         # MLA: the up-projection weights (attUp's share is mla_up/mla_w)
    "is_moe",         # 1 for a MoE-FFN kind (expert table; dispatches once)
    "ffn_width",      # the kind's FFN width: dense intermediate_size, or the routed expert width on a MoE kind
    "n_attMM", "n_attBMM", "n_ffMM", "n_softmax", "n_dropout", "n_normOp",
    "n_gather", "n_headCast", "n_ffAct", "n_linrec", "n_qknorm", "n_dispatch",  # ND op counts of the kind
    "p_nonexp",       # ND's num_params_layer: non-expert params of one layer (attention + norms [+ dense FFN])
    "p_routed_base",  # ND: all routed experts' params with etp = 1 (the kernel divides by etp)
    "p_shared",       # ND: shared experts' params
    "attn_extra_p",   # GDN conv + gate params ND adds to the attention count
    # The kind's submodule (ND prices each submodule of a multimodal model on its own config,
    # seed _submodule_parts): a text kind carries the model's values, a vision-tower kind its own.
    "sub_h",          # ND's cfg.h of the submodule: hidden size
    "sub_a",          # ND's cfg.a of the submodule: attention heads (softmax/headCast/dropout loads)
    "sub_hff",        # ND's cfg.hff of the submodule: the dense FFN width a dense kind runs
    "sub_seq",        # ND's cfg.s of the submodule: tokens per sample; 0 = the candidate's s (text).
                      #   Vision: tokens // spatial_merge_size**2 (ND's grid // merge^2, docs/ND_MODEL.md §1.4)
    "seq_tokens",     # tokens per sample the layer really runs on (seconds, memory); 0 = the candidate's s.
                      #   Vision: the patch tokens the encoder sees (before the merger's 2x2 merge)
    "bidirectional",  # 1: attention is not causal (a vision encoder): the whole score matrix runs
    "att_window",     # tokens a query attends to in a windowed-attention layer; 0 = the whole sequence.
                      #   Seconds and memory only: ND's op table prices s x s whatever the window
    "att_chunked",    # 1: the window is a chunk (Llama 4's chunked attention: causal inside fixed blocks of
                      #   att_window tokens), not a sliding window; seconds only
    "mixer",          # the layer's token mixer: 0 attention (full, MLA, gated DeltaNet), 1 a Mamba-2 mixer
                      #   (att_a its heads, att_n_kv its B/C groups, att_dh its head dim, lin_d_k its state),
                      #   2 none (an MLP-only block of a hybrid stack), 3 a Mamba-1 mixer (att_a its d_inner,
                      #   att_n_kv its dt rank, lin_d_k its state); seconds only (ND refuses 1-3)
    "has_ffn",        # 1: the layer has an FFN (dense or MoE); 0: a mixer-only block of a hybrid stack
    "ssm_chunk",      # Mamba-2's SSD chunk length (mamba_chunk_size); 0 for other kinds
    "census_att",     # HyperParallel census: share of the attention matmuls (attMM) its selective policy
                      #   recomputes; -1 = no census (docs/ND_MODEL.md §2.4 selective_shares)
    "census_ffn",     # the same for the FFN matmuls (ffMM); -1 = no census
)

# --- model-level constants (float64 vector) ---
MODEL_FIELDS = (
    "h", "a", "hff", "v",          # hidden, heads, model FFN width (dense width; MoE-only models: the expert width), vocab
    "n_exp", "n_chosen", "n_shared", "hff_exp",  # routed experts, top-k, shared experts (count, each as wide as a routed one), routed width
    "shared_gate",                 # 1 when the shared experts have a gate (its weights spread over the FFN matmuls)
    "dc_kv",                       # MLA kv_lora_rank (0: not MLA; ND's output layer then counts once, else n_mtp times)
    "n_mtp",                       # MTP layers
    "default_kind",                # the kind whose counts the embedding and output nodes take (ND prices them on the model config)
)

# --- one candidate strategy (float64 vector) ---
CAND_FIELDS = (
    "b", "s", "t", "sp", "cp", "ep", "t_exp", "d", "d_exp", "p", "vp", "m",
    "bytes_p", "bytes_c", "bytes_grad",     # ND byte widths: params, compute, gradients (ND: 0 without accumulation)
    "cap_fact", "moe_dispatch",             # capacity factor; MOE_DISPATCH constant (1040, or the spec's)
    "comm_d_non_exp", "comm_d_exp",         # 0 / 2 / 3 (docs/ND_MODEL.md §2.6)
    "comm_t", "comm_ep", "comm_cp",         # 0/1 flags
    "cp_ring",                              # 1 ring (colossalai_cp), 0 Ulysses
    "shard_nonexp_partial", "shard_exp", "shard_exp_partial",  # shard_p_os_non_exp_partial, shard_p_os_exp, shard_p_os_exp_partial
    "shard_embed", "gather_embed",
    "fsdp",                                 # 1 when gradients shard as params (ZeRO-3 / FSDP traffic path)
    "reshard",                              # 1 when FSDP reshards after forward (gathers twice a micro-batch)
    "tie_emb",                              # 1 when embedding and output share weights
    "dpn",                                  # ND devices per node (level_bound_number[0]: A2 8, A3 16)
    "is_a3",                                # 1 on ND's "A3": every comm part halved
    "dp_overlap", "tp_overlap",             # ND 0.9 / 0.5
    "ep_local_tokens",                      # 0: balanced EP; else the tokens of the busiest EP rank (ND's tokens_per_expert)
)

# --- ND estimator options (float64 vector) ---
ND_OPTION_FIELDS = (
    "ratio_type",    # 0 DYNAMIC, 1 STATIC, 2 COMPUTE_ONLY, 3 COMM_ONLY
    "rec_type",      # 0 WITH, 1 NONE, 2 COMPUTE_ONLY, 3 COMM_ONLY
    "p2p",           # 0 NONE, 1 MANUAL
    "p2p_ratio",     # MANUAL_P2P_RATIO 0.002
    "static_ratio",  # 1e4
)

# --- option slots of a layout: what a layer runs (int64 pairs) ---
OPTION_NONE, OPTION_FULL, OPTION_SELECTIVE = 0, 1, 2
#: The keep mask of HyperParallel's selective policy (recompute_spec's "hyperparallel" rule:
#: attBMM and attUp kept, every other switch recomputed). A selective layer running exactly this
#: setting runs the policy, and a kind's census shares (census_att, census_ffn) then price the
#: projection matmuls the policy also recomputes (docs/ND_MODEL.md §1.4, §2.4 selective_shares).
HYPER_POLICY_MASK = 0x81

# --- ND parts, in output order (sum == total) ---
PART_NAMES = (
    "fw_compute", "bw_compute", "recompute", "dp_comm", "dp_reduce",
    "tp_comm", "ep_comm", "cp_comm", "pp_comm", "bubble",
)

# --- per-stage raw sums the ND walk produces (float64, p x STAGE_FIELDS) ---
STAGE_FIELDS = (
    "comp", "recomp",                 # compute walk: plain, and with recompute
    "dp", "dp_reduce", "tp", "ep", "cp",  # comm walk (plain), after the per-stage multipliers
    "recomm",                          # comm walk with recompute (total, after multipliers)
)


def index(fields: tuple) -> dict:
    """Name -> column index."""
    return {name: i for i, name in enumerate(fields)}


KIND = index(KIND_FIELDS)
MODEL = index(MODEL_FIELDS)
CAND = index(CAND_FIELDS)
ND_OPTION = index(ND_OPTION_FIELDS)
PART = index(PART_NAMES)
STAGE = index(STAGE_FIELDS)

GROUPS = {
    "K": KIND_FIELDS,
    "M": MODEL_FIELDS,
    "C": CAND_FIELDS,
    "O": ND_OPTION_FIELDS,
    "P": PART_NAMES,
    "S": STAGE_FIELDS,
}


# ============================================================== seconds mode (kernels/seconds.pxi)
# The kernels of ``units="seconds"`` read ND's kind table (KIND_FIELDS) and model vector
# (MODEL_FIELDS) for the dimensions, plus the groups below. Units: seconds, bytes, FLOP/s.

# --- per layer kind: the real parameter counts (float64, K x SECONDS_KIND_FIELDS) ---
SECONDS_KIND_FIELDS = (
    "p_nonexp",       # Model.kind_parameters(k)[0]: attention, norms, router, dense FFN of one layer
    "p_routed",       # Model.kind_parameters(k)[1]: every routed expert of one layer
    "p_shared",       # Model.kind_parameters(k)[2]: the shared experts of one layer
)

# --- model-level constants of seconds mode (float64 vector) ---
SECONDS_MODEL_FIELDS = (
    "shared_width",   # shared_expert_intermediate_size (the real width; ND's n_shared is a count)
    "p_embed",        # token embedding params (vocab x hidden)
    "p_pos",          # learned position table params (0 without one); not split over tp
    "p_final_norm",   # the norm before the output head
    "p_mtp_extra",    # one MTP module's own params beyond its layer (norms, eh_proj)
    # a vision tower's edges, run where the embedding runs (0 patches: no tower)
    "v_patches",      # patches per sample the tower runs
    "v_patch_in",     # the patch embedding's input width: channels x temporal x patch²
    "v_hidden",       # the tower's hidden size
    "v_merge",        # patches merged into one text token (spatial_merge_size²)
    "v_out",          # the merger's output width (the text model's hidden size)
    "p_vision_extra", # patch embedding + merger params (split over tp, as the memory model holds them)
    "rms_norm",       # 1: the norms are RMSNorm (0: LayerNorm)
    "rope",           # 1: attention rotates q and k (RoPE); 0: learned or no positions
    "logit_softcap",  # 1: the logits are soft-capped, cap·tanh(logits/cap), before the loss (Gemma 2)
    "router_bias",    # 1: the MoE router scores by sigmoid and adds a score-correction bias before its top-k
    "expert_bias",    # 1: the routed experts carry biases on their GEMMs (gpt-oss)
    "glu_clamp",      # 1: the gated experts clamp their two halves before the activation (gpt-oss's swiglu_limit)
    "rope_scaled",    # 1: RoPE's cos and sin carry an attention factor other than 1 (YaRN's: gpt-oss)
)

# --- one candidate of seconds mode (float64 vector) ---
SECONDS_CAND_FIELDS = (
    "b", "s", "t", "sp", "cp", "ep", "t_exp",   # micro-batch, seq, tp, ND's sp (t with SP else 1), cp, ep, expert tp
    "d", "edp", "p", "vp", "m", "seq_split",   # dp, expert-data-parallel ranks, pp, vpp, micro-batches, Seq1F1B chunks
    "bytes_c", "bytes_mm", "bytes_p", "bytes_grad", "bytes_opt", "dropout_bytes",
    #   activations, matmul inputs (1 for fp8), params, gradients, optimizer bytes per param per step, dropout mask
    "flash", "dropless", "cap_fact", "cp_ring",  # 0/1, 0/1 (grouped GEMM) or capacity mode, factor, 1 ring / 0 Ulysses
    "moe_imb",                                    # dropless: the busiest expert's load over the mean
    "zero", "zero_ranks", "defer_grads", "reshard", "tie_emb",
    "schedule",                                   # SCHEDULES index: 1f1b, interleaved, zero_bubble_v, gpipe, seq1f1b, ...
    "ov_dp", "ov_dp_gather", "ov_fsdp", "ov_tp", "ov_cp", "ov_ep",  # overlap: share of the window that hides comm
    "ep_mode",        # how the expert all-to-all overlaps (EP_OVERLAPS index): 0 none, 1 Megatron's 1F1B, 2 DualPipe
    "ep_disp",        # the dispatcher: 0 NCCL all-to-all, 1 DeepEP's normal kernels
    "ep_sms",         # SMs DeepEP's kernels hold while they run (taken from compute when overlapped)
    "ep_nodes",       # node-limited routing: nodes a token is sent to at most (0: no limit)
    "disp_b",         # bytes per element of a dispatch-direction payload (16-bit, or fp8 with its 1x128 scales)
    "graphs",         # ExecSpec.cuda_graphs index: 0 none, 1 attention, 2 + a MoE layer's router, 3 whole layers
    "autocast",       # 1: fp32 parameters under torch.autocast, an fp32 residual stream (ExecSpec.autocast)
    "pp_runs",        # the step's micro-batches run as this many pipeline schedules, each filled and drained
    "ep_devs",        # device-limited routing: ranks a token's experts lie on at most (0: no limit)
)

# --- device and achievable rates (float64 vector) ---
RATE_FIELDS = (
    "peak_mm",        # dense peak FLOP/s of the matmul dtype (bf16/fp16, or fp8)
    "peak_attn",      # dense peak FLOP/s of the attention core (16-bit)
    "mm_eff",         # achievable share of peak_mm on a large GEMM
    "attn_eff",       # achievable share of peak_attn of a flash-attention kernel (fwd + bwd)
    "hbm_bw", "hbm_eff",            # bytes/s and its achievable share
    "kernel_s",                     # fixed seconds per kernel (launch + ramp)
    "intra_bw", "intra_eff", "intra_lat",   # scale-up link per device per direction; share; seconds per step
    "inter_bw", "inter_eff", "inter_lat",   # scale-out NIC per device per direction; share; seconds per step
    "dpn",                          # devices per node
    "wave",                         # GEMM outputs one wave of tiles covers: SMs x 256 x 128
    "z3_fetch_bw",     # ZeRO-3 parameter fetch: gathered parameter bytes/s per device (0: NCCL's rate only)
    "z3_rc_gather",    # 1: a recompute forward gathers its parameters again (released after every use)
    "z3_grad_ar",      # 1: ZeRO-3 reduces gradients with an all-reduce instead of a reduce-scatter
    "grad_reduce_bytes",  # bytes per gradient element the data-parallel reduction moves (0: the held width)
    "grad_acc_pass",   # 1: weight gradients added to the main gradient by a separate pass (no wgrad fusion)
    "wave_tail",       # waves of a GEMM left idle on average beyond its work (wave quantization)
    "mm16_eff",        # achievable share of peak_attn (16-bit) of a GEMM kept 16-bit under fp8
    "f8_cast_b", "f8_cast_k",  # fp8 cast of a 16-bit tensor: bytes moved per element, kernels
    "f8_w_mb",         # 1: weights cast to fp8 every micro-batch (0: stored fp8 or cast once a step)
    "f8_gcast_b", "f8_gcast_k",  # fp8 cast of an output gradient in the backward: bytes per element, kernels
    "f8_rq_b", "f8_rq_k",        # backward re-quantization of a cached fp8 input: bytes per element, kernels
    "ew_eager",        # 1: elementwise ops run unfused, one PyTorch op per kernel
    "attn_copies",     # 1: the attention copies K/V per query head and its output to SDPA's layout
    "tp_ov_splits",    # TP comm overlap: chunks of a pipelined reduce-scatter GEMM
    "tp_ov_sm",        # TP comm overlap: share of the SMs the pipelined reduce-scatter kernels hold
    "ov_slow",         # share of an NCCL collective's time beside compute that the compute loses: s / (1 + s)
    "dep_nvl_eff",     # share of the scale-up link DeepEP's normal kernels reach (bytes a rank receives, its own included)
    "sms",             # compute units (NVIDIA SMs) of the device: a grouped GEMM's tiles are spread over them
    "g_tile_k",        # grouped GEMM: a tile's fixed cost, in elements of its inner dimension
    "g_stream",        # grouped GEMM: share of the shorter of its compute and its memory time left exposed
    "g_launch",        # grouped GEMM launches: 0 one kernel (+ its setup kernel) a call, 1 a GEMM per local expert
    "launch_s",        # host seconds to launch one kernel eagerly
    "graph_s",         # seconds per kernel replayed from a CUDA graph
    "permute",         # Rates.moe_permute index: 0 fused, 1 unfused (a dense routing map), 2 sort (torchtitan)
    "router_fused",    # 1: the router's score, top-k and aux loss run as one fused kernel a pass
    "aux_loss",        # 1: a load-balancing auxiliary loss is computed from the routing (its kernels priced)
    "scatter_rate",    # 16-bit elements a second a scatter-add adds into its targets (atomics); 0: not priced
    "f8_split",        # 1: a GEMM per expert quantizes each expert's rows by its own cast kernels (not one for all)
    "e_bias",          # Rates.expert_bias index: 0 epilogue, 1 down_split, 2 split, 3 gathered (experts with biases)
    "glu_clamp",       # Rates.glu_clamp index: 0 fused, 1 separate, 2 concatenated (a GLU that clamps its halves)
    "rope_scale",      # Rates.rope_scale index: 0 fused, 1 unfused (how a RoPE attention factor is applied)
    "a2a_eff",         # share of the scale-up link an NCCL all-to-all reaches (Rates.all_to_all_share)
    "attn_h64",        # share of attn_eff a flash kernel reaches at head dim 64 (Rates.attention_head64_share)
    "attn_fbar",       # a causal kernel's mean tile efficiency at the lengths attn_eff was measured at (0: none)
    "dep_intra_eff",   # share of the scale-up link a DeepEP call inside a node reaches beside dep_call_s and dep_tok_s
    "dep_call_s",      # seconds one DeepEP dispatch or combine inside a node costs beside its bytes
    "dep_tok_s",       # seconds each token a rank sends adds to a DeepEP call inside a node
)

# --- per stage: what runs outside the layers (float64, pp x SECONDS_EXTRA_FIELDS) ---
SECONDS_EXTRA_FIELDS = (
    "has_emb",        # 1 on the stage holding the embedding
    "has_out",        # 1 on the stage holding the output layer and loss
    "n_mtp",          # MTP modules on the stage (each: eh_proj, norms and one more output head)
)

# --- one layer of a kind, priced once (float64, K x SECONDS_LAYER_FIELDS); seconds per micro-batch ---
SECONDS_LAYER_FIELDS = (
    "fw", "bw", "bw_w",               # forward; backward without weight grads; weight-grad GEMMs
    "gemm_f", "gemm_b", "core_f", "core_b",  # overlap windows: the GEMMs, the attention core (per pass)
    "tp_f", "tp_b", "cp_f", "cp_b", "ep_f", "ep_b",  # raw comm per pass (before overlap)
    "sw_attBMM", "sw_headCast", "sw_dropout", "sw_softmax",  # forward time of each recompute switch's ops
    "sw_normOp", "sw_gather", "sw_ffAct", "sw_attUp",        #   (sw_gather is comm: the SP all-gathers)
    "p_dense", "p_expert",            # params per device: reduced over dp*cp / over the expert-data-parallel ranks
    "flops_f", "flops_core", "flops_up",  # model FLOPs of one forward (whole micro-batch, unsplit): all, core, MLA up
    "flops_core_extra",               # attention FLOPs run beyond the model's (a masked matrix without flash)
    "att_mm_f", "ffn_mm_f",           # forward time of the attention projections / the FFN matmuls (census shares)
    "att_mm_flops", "ffn_mm_flops",   # their FLOPs (whole micro-batch): what a census share recomputes, for HFU
    "att_f", "att_b",                 # the token mixer's sub-block: forward, backward with its weight grads
    "ep_d",                           # one dispatch-direction exchange of ep_f (the rest of it: the combine)
    "ep_pre",                         # the forward dispatch's metadata preprocessing, in ep_f (HybridEP)
)

# --- per stage raw sums of seconds mode (float64, pp x SECONDS_STAGE_FIELDS) ---
SECONDS_STAGE_FIELDS = (
    "fw", "bw", "bw_w", "rc",         # compute per micro-batch: forward, backward, weight grads, recompute
    "tp", "cp", "ep", "pp",           # exposed comm per micro-batch
    "dp_mb_gather", "dp_mb_reduce",   # exposed ZeRO-2/3 traffic per micro-batch
    "dp_reduce", "dp_gather", "opt",  # per step, raw: gradient reduction, parameter gather, optimizer
    "layers",                         # transformer layers on the stage
    "model_flops", "hw_flops",        # per micro-batch, whole micro-batch: model FLOPs, with recompute
    "ov_slow",                        # the rate's ov_slow, for the data-parallel tail seconds_combine prices
)

# --- one layer's ops, priced (float64, LAYER_OP_NAMES x LAYER_OP_FIELDS; seconds_layer_ops) ---
#: The ops of a layer as seconds mode prices them; every second of a layer's fw, bw and bw_w is in exactly
#: one of the rows before "tp_comm" ("launch": what the host's kernel launches add beyond the device's time);
#: the communication rows are raw, before the step's overlap.
LAYER_OP_NAMES = (
    "attn_proj", "attn_core", "norm", "rope", "attn_other", "residual",
    "router", "permute", "experts", "expert_bias", "expert_act", "unpermute", "shared_experts",
    "mlp", "mlp_act", "grad_acc", "cast", "launch",
    "tp_comm", "cp_comm", "ep_comm",
)
LAYER_OP_FIELDS = (
    "flops_f", "bytes_f", "kernels_f", "time_f", "host_f",   # forward: FLOPs run, HBM bytes, kernels, seconds, host seconds
    "flops_b", "bytes_b", "kernels_b", "time_b", "host_b",   # backward, weight gradients included
    "graphed_f", "graphed_b",  # of those kernels, the ones replayed from a CUDA graph (ExecSpec.cuda_graphs' scopes)
)

# --- a MoE block priced on its own (float64 vector; seconds_moe_block) ---
MOE_BLOCK_FIELDS = (
    "tokens",         # tokens the rank routes (router, permutation, un-permutation)
    "rows",           # token-expert rows its local experts compute (a grouped GEMM's rows, all experts)
    "local",          # experts on the rank
    "hidden",         # hidden size
    "width",          # a routed expert's width (before expert tensor parallelism)
    "n_ff",           # 3: gated (SwiGLU), 2: GELU MLP
    "experts",        # routed experts of the model (the router's logits a token)
    "topk",           # experts a token picks
    "shared",         # the shared experts' width (0: none), before tensor parallelism
    "shared_tokens",  # tokens the shared experts run on
    "grad_acc",       # 1: the routed weights' gradients are added into existing ones by a separate pass
    "router_bias",    # 1: the router adds a score-correction bias before its top-k (SECONDS_MODEL "router_bias")
    "expert_bias",    # 1: the routed experts carry biases (SECONDS_MODEL "expert_bias")
    "glu_clamp",      # 1: the experts clamp their GLU halves (SECONDS_MODEL "glu_clamp")
)

# SCHEDULES, EP_OVERLAPS, DISPATCHERS (the codes of the "schedule", "ep_mode" and "ep_disp" columns) are
# ndcost.kernels.codes' (imported at the top): ExecSpec's own vocabularies.

#: What seconds_step_rates writes for a step (float64 vector; a row each of estimate_many's step rates).
STEP_RATE_FIELDS = ("mfu", "hfu", "tokens_per_second", "model_flops")

SECONDS_KIND = index(SECONDS_KIND_FIELDS)
SECONDS_MODEL = index(SECONDS_MODEL_FIELDS)
SECONDS_CAND = index(SECONDS_CAND_FIELDS)
RATE = index(RATE_FIELDS)
SECONDS_EXTRA = index(SECONDS_EXTRA_FIELDS)
SECONDS_LAYER = index(SECONDS_LAYER_FIELDS)
SECONDS_STAGE = index(SECONDS_STAGE_FIELDS)
MOE_BLOCK = index(MOE_BLOCK_FIELDS)
LAYER_OP = index(LAYER_OP_NAMES)
LAYER_OP_FIELD = index(LAYER_OP_FIELDS)

GROUPS["SK"] = SECONDS_KIND_FIELDS
GROUPS["SM"] = SECONDS_MODEL_FIELDS
GROUPS["SC"] = SECONDS_CAND_FIELDS
GROUPS["R"] = RATE_FIELDS
GROUPS["SX"] = SECONDS_EXTRA_FIELDS
GROUPS["SL"] = SECONDS_LAYER_FIELDS
GROUPS["SS"] = SECONDS_STAGE_FIELDS
GROUPS["MB"] = MOE_BLOCK_FIELDS
GROUPS["SR"] = STEP_RATE_FIELDS
GROUPS["LO"] = LAYER_OP_NAMES
GROUPS["LF"] = LAYER_OP_FIELDS


# ============================================================== batches (kernels/batch.pxi)
# ``estimate_many`` prices N candidates in one kernel call. The ND kernel reads the
# ND groups above (one CAND_FIELDS row per candidate); the memory kernel reads the
# groups below. Layout-dependent arrays are computed once per distinct layout and
# pooled: each candidate carries the row of its layout in a LAYOUT_FIELDS table.

# --- per layer kind, what the memory model reads (float64, K x MEMORY_KIND_FIELDS) ---
MEMORY_KIND_FIELDS = (
    "attention",      # memory.ATTENTION_CODES: 0 full, 1 MLA, 2 linear (gated DeltaNet), 3 Mamba-2 (its
                      #   groups, state, heads, head dim, conv and chunk in the lin_* columns), 4 none,
                      #   5 Mamba-1 (dt rank, state, d_inner, 1, conv, 1 in the lin_* columns)
    "heads", "kv_heads", "head_dim", "out_gate", "qk_norm",           # full attention (MLA: heads)
    "q_lora", "kv_lora", "qk_nope", "qk_rope", "v_dim",               # MLA dims
    "lin_k_heads", "lin_k_dim", "lin_v_heads", "lin_v_dim", "lin_conv", "lin_chunk",  # gated DeltaNet
    "ffn",            # memory.FFN_CODES: 0 dense, 1 MoE, 2 none (a mixer-only block)
    "gated",          # 1 SwiGLU, 0 GELU
    "ffn_width",      # dense width, or the routed expert width on a MoE kind
    "experts", "top_k", "shared_width",   # MoE kind only (0 on a dense kind)
    "p_nonexp", "p_routed", "p_shared",   # Model.kind_parameters: the real counts
    "hidden",         # the kind's hidden size (its submodule's: a vision tower has its own)
    "seq_tokens",     # tokens per sample the kind runs on; 0 = the candidate's seq (text)
    "att_window",     # tokens a query attends to (windowed attention); 0 = the whole sequence
    "extra_norms",    # norms a layer runs beyond its pre-norms, each keeping its input (Gemma 2/3's post-norms: 2)
    "census_saved", "census_saved_tp",  # census: bytes per token a plain layer keeps, split over sp / over tp;
    "census_sel", "census_sel_tp",      #   the same under HyperParallel's selective policy; -1 = no census
    "p_largest",      # the layer's largest non-expert weight matrix (unsplit; split over tp), for a per-parameter
    "p_largest_expert",  # ZeRO-3 fetch; and its largest routed-expert matrix (split over etp), 0 on a dense kind
)

# --- model-level constants of the memory model (float64 vector) ---
MEMORY_MODEL_FIELDS = (
    "h", "v",                  # hidden size, vocabulary
    "p_embedding",             # Model.embedding_parameters (word + learned positions)
    "word_embedding",          # v x h (the LM head, or a copy of the embedding)
    "p_final_norm",            # Model.final_norm_parameters
    "p_mtp_module",            # Model.mtp_extra_parameters / MTP layers (0 without MTP)
    "n_mtp",                   # MTP layers of the model
    "p_vision_extra",          # a vision tower's patch embedding and merger params (on the embedding's stage)
    "v_patches", "v_patch_in", "v_hidden", "v_merge",  # the tower's patches a sample, patch width, hidden, merge²
)

# --- one candidate of the memory model (float64 vector; derived by ndcost.tables.formulas) ---
MEMORY_CAND_FIELDS = (
    "seq",                     # tokens per sequence as priced (s, or s / seq_split for Seq1F1B)
    "b", "tp", "sp", "cp", "etp", "ep",   # micro-batch size; degrees (sp: tp with SP, else 1; etp: ND's t_exp)
    "p", "vp", "m", "seq_split",          # pipeline: stages, chunks, micro-batches, Seq1F1B chunks
    "schedule",                # memory.SCHEDULE_CODES
    "token_factor",            # routed-token load: moe_imbalance dropless, capacity_factor in capacity mode
    "flash", "slice_input",    # 0/1 flags
    "bytes_c", "bytes_softmax", "bytes_dropout", "bytes_norm",  # activation byte widths
    "bytes_linear",            # bytes per element of a linear layer's saved input (TE's fp8 copy: 1)
    "w_param", "w_grad", "w_optim",        # bytes per parameter of params, gradients, optimizer state
    "div_param", "div_grad", "div_optim",  # ZeRO divisors of non-expert state
    "ediv_param", "ediv_grad", "ediv_optim",  # ZeRO divisors of routed-expert state
    "fsdp_gathers",            # 1: ZeRO-3 resharding, a backward holds two layers' gathered params
    "shards_grads",            # 1: ZeRO-2/3 reducing as the backward goes (not deferred)
    "cp_ring",                 # 0 Ulysses, 1 P2P ring, 2 PyTorch's all-gather ring (cp_algo "ring-allgather")
    "tie_emb",                 # 1 when embedding and output share weights
    "bytes_logit",             # bytes a logit of the loss holds at its peak (ExecSpec.logit_bytes)
    "w_fp8_cache",             # bytes per weight parameter of fp8 copies kept across micro-batches (0: none)
    "autocast",                # 1: fp32 parameters under torch.autocast, an fp32 residual stream (ExecSpec.autocast)
    "grads_none",              # 1: gradients exist only from the backward on (ExecSpec.grads_set_to_none)
    "moe_weighted_act",        # 1: router probabilities applied in the expert activation (ExecSpec.moe_weighted_activation)
    "fp8_act_store",           # 1: DeepSeek-V3's fp8 / E5M6 activation storage (ExecSpec.fp8_activation_storage)
    "z3_param_fetch",          # 1: ZeRO-3 gathers one parameter at a time (ExecSpec.zero3_parameter_fetch)
)

# --- one distinct layout (int64 rows of a layout table) ---
LAYOUT_FIELDS = (
    "pp", "vpp", "n_slots",    # stages, chunks, option slots
    "counts_at",               # pool offset of the chunk-summed counts (pp, K*O), ND's walk
    "mcounts_at",              # pool offset of the per-chunk counts (pp, vpp, K*O), the memory model
    "present_at",              # pool offset of (pp, K): 1 when the stage runs a layer of the kind
    "slots_at",                # slot-pool offset: O options, then O keep masks
    "emb_stage", "out_stage", "emb_chunk", "out_chunk",  # where the embedding and output run
    "mtp_out",                 # MTP layers on the output stage
)

# --- reason codes the kernels write (the full table: ndcost.tables.reasons.REASONS) ---
KERNEL_REASONS = (
    "ok",          # priced, and fits
    "undefined",   # the kernels found no finite price (NaN)
    "no_fit",      # priced, but the peak stage exceeds the device's memory
)   # codes >= len(KERNEL_REASONS) are invalid candidates: the kernels skip them

MEMORY_KIND = index(MEMORY_KIND_FIELDS)
MEMORY_MODEL = index(MEMORY_MODEL_FIELDS)
MEMORY_CAND = index(MEMORY_CAND_FIELDS)
LAYOUT = index(LAYOUT_FIELDS)
KERNEL_REASON = index(KERNEL_REASONS)

GROUPS["MK"] = MEMORY_KIND_FIELDS
GROUPS["MM"] = MEMORY_MODEL_FIELDS
GROUPS["MC"] = MEMORY_CAND_FIELDS
GROUPS["LY"] = LAYOUT_FIELDS
GROUPS["RS"] = KERNEL_REASONS
