"""Upper bounds on every size a person or a config can state (and the range of a device's rates), in one place.

ndcost refuses a size above its bound with a :class:`~ndcost.errors.SpecError`
that names the parameter and states the bound (docs/LIMITS.md lists them for
users). The bounds exist for two reasons:

* Work. A layer count, a pipeline depth or a chunk count drives loops and
  allocations (the layer stack, the layout's stage x chunk grid); an unbounded
  one turns a typo into a hang or an exhausted memory.
* Exact arithmetic. The batch path forms products of degrees and batch sizes
  in int64 and both backends read them as float64. With the bounds below every
  such product stays below 2**53 (exact in float64, far inside int64):
  dp*tp*pp*cp <= MAX_DEVICES = 2**24 (a rule of its own, as the degrees could
  multiply past int64), micro_batch_size*dp <= 2**48, the global batch times the
  sequence <= 2**50; and the float quantities the kernels form from them (FLOPs,
  bytes, s**2 attention scores over every layer) stay below about 1e40 (5e35
  measured at the largest sizes), far from float64 overflow, so neither backend
  meets an inf or a NaN it could compute differently from the other.

Each bound is far above the largest real value (cited beside it), so no real
model, cluster or strategy comes near one. Every number here is a power of two
or a round decimal so that it reads well in a message.
"""
from __future__ import annotations

__all__ = [
    "MAX_LAYERS", "MAX_WIDTH", "MAX_HEADS", "MAX_EXPERTS", "MAX_VOCAB", "MAX_SEQ_LENGTH", "MAX_BATCH",
    "MAX_DEVICES", "MAX_BYTE_WIDTH", "MAX_OPTIMIZER_STATES", "MAX_CAPACITY_FACTOR", "MIN_RATE", "MAX_RATE",
    "MAX_HBM_BYTES", "MAX_LATENCY", "MAX_SMS", "MIN_STEP_SECONDS", "MAX_STEP_SECONDS",
    "MAX_ROPE_ATTENTION_FACTOR",
]

#: Transformer layers of a model (num_hidden_layers, MTP layers, first_k_dense_replace, a vision
#: tower's depth), and a pipeline's stages (pp) and chunks per stage (vpp), since each stage and
#: chunk holds at least one layer (validate rule 4). Real models: 61 (DeepSeek-V3), 96 (GPT-3
#: 175B), 118 (PaLM 540B), 126 (Llama 3.1 405B): 10,000 is ~80x the deepest. The layer stack
#: and the layout are built in Python, linear in the layers: 10,000 layers build in milliseconds.
MAX_LAYERS = 10_000

#: A width: hidden_size, FFN / expert / shared-expert widths, head_dim and the other per-head
#: widths, MLA's latent ranks, a vision tower's widths, patching sizes (pixels, frames, channels)
#: and window. Real: hidden 12,288 (GPT-3), 16,384 (Llama 3.1 405B), 18,432 (PaLM 540B),
#: 20,480 (MT-NLG 530B); FFN 53,248 (Llama 3.1 405B), 81,920 (MT-NLG); heads 64-256 wide.
#: 2**20 = 1,048,576 is ~13x the widest FFN.
MAX_WIDTH = 2**20

#: Attention heads (query, key/value, linear-attention key and value heads, a vision tower's).
#: Real: 128 (Llama 3.1 405B, DeepSeek-V3, MT-NLG). 2**16 = 65,536 is 512x that.
MAX_HEADS = 2**16

#: Routed experts (and experts per token). Real: 256 (DeepSeek-V3), 384 (Kimi K2), 512
#: (Qwen3-Next); the most ever published, PEER's 1024**2 tiny experts (He, "Mixture of A
#: Million Experts", 2024), is exactly this bound, 2**20.
MAX_EXPERTS = 2**20

#: Vocabulary size. Real: 128,256 (Llama 3), 151,936 (Qwen2.5), 262,144 (Gemma 3). 2**24 =
#: 16,777,216 is 64x the largest.
MAX_VOCAB = 2**24

#: Tokens of one sequence (seq_length, seq_split, learned position tables, a vision tower's
#: patches per sample). Real: 1,048,576-token training (Qwen2.5-1M), a 10M-token context
#: (Llama 4 Scout). 2**26 = 67,108,864 is 6x the longest context.
MAX_SEQ_LENGTH = 2**26

#: Samples: micro_batch_size, micro_batch_num and the global batch (stated, or
#: micro_batch_size*dp*micro_batch_num). Real: 1,536 (GPT-3), 4,096 (Llama 3 405B's 16M tokens
#: at 4,096), 65,536 (BERT with LAMB, You et al. 2019). 2**24 = 16,777,216 is 256x the largest;
#: times MAX_SEQ_LENGTH it is 2**50 tokens a step, exact in float64.
MAX_BATCH = 2**24

#: Devices: a Cluster's num_devices and devices_per_node, every parallel degree (dp, tp, cp,
#: ep, etp, optimizer_shard) and their product dp*tp*pp*cp. Real: 16,384 H100 (Llama 3 405B),
#: 100,000-200,000 GPUs (xAI Colossus), 576 per NVLink domain (NVL576), 8,960 per TPU v5p pod.
#: 2**24 = 16,777,216 is ~80x the largest cluster.
MAX_DEVICES = 2**24

#: Bytes per element of a byte width (param_bytes, grad_bytes, ...). Real: 1 (fp8) to 8 (fp64).
MAX_BYTE_WIDTH = 64

#: Optimizer states per parameter (optimizer_states). Real: 2 (Adam's two moments).
MAX_OPTIMIZER_STATES = 64

#: A MoE capacity factor. Real: 1.0-2.0 (Switch Transformer, GShard). At num_experts / top_k
#: every expert already has room for every token, so no factor above MAX_EXPERTS changes
#: anything; a larger one only inflates the numbers.
MAX_CAPACITY_FACTOR = float(MAX_EXPERTS)

#: Compute units (NVIDIA SMs) a communication kernel holds (ExecSpec.moe_dispatcher_sms). Real: 20
#: (DeepEP in DeepSeek-V3's training, Megatron-Core's default), 132 (every SM of an H100). 2**16 is
#: ~400x the largest GPU's.
MAX_SMS = 2**16

#: The factor RoPE's cos and sin are multiplied by (Model.rope_attention_factor, YaRN's attention factor
#: 0.1 ln(s) + 1). Real: 1.0-1.35 (gpt-oss's context scale 32); 0.1 ln(s) + 1 reaches 100 at s = e^990.
MAX_ROPE_ATTENTION_FACTOR = 100.0

# -- a device's figures (Device, Cluster overrides)

#: A rate: peak FLOP/s per dtype, HBM and link bytes/s. Real: 1e10-1e13 bytes/s (a 100 Gb/s
#: NIC to B200's 8 TB/s HBM), 1e14-5e15 FLOP/s. The lower bound keeps every time finite: with
#: the sizes above a step moves at most ~1e40 FLOPs or bytes, so at one per second or faster
#: every part stays far below float64's range (a rate of 1e-300 overflowed to inf, and inf - inf
#: gave NaN step times). The upper bound is 1e14x the fastest part.
MIN_RATE = 1.0
MAX_RATE = 1e30

#: HBM capacity in bytes. Real: 80e9 (H100), 192e9 (B200), 288e9 (B300). 2**60 (an exbibyte) is
#: ~4,000,000x that.
MAX_HBM_BYTES = 2**60

#: Seconds per message of a link (0 turns latency off). Real: 1e-6 to 1e-5 s (NCCL's tuning
#: model). A second is 100,000x the slowest; with at most ~1e15 messages a step (devices x
#: micro-batches) the latency terms stay finite.
MAX_LATENCY = 1.0

# -- a priced step (what ratios and rates a person states may scale it to)

#: The shortest and longest training step ndcost reports when a ratios or rates file scales the price
#: (its own figures cannot leave this range). A microsecond is shorter than one kernel launch of a real
#: step (5-20 us each, thousands a step); 1e9 s is 31 years. A ratio of 1e300 or 1e-320 (a fuzzer's, a
#: typo's) gave "inf ms", "0.000 ms" or a 300-digit step with exit status 0; it is refused instead.
MIN_STEP_SECONDS = 1e-6
MAX_STEP_SECONDS = 1e9
