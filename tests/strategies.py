"""A realistic strategy per catalog model, shared by the API tests and the benchmarks."""
from __future__ import annotations

from ndcost import Cluster, ExecSpec, Model

# (model, device, fields): degrees as published runs or common practice use them.
REALISTIC = {
    "llama3-8b": ("h100-sxm", dict(dp=4, tp=2, pp=1, micro_batch_size=1, global_batch_size=64, seq_length=8192,
                                   sequence_parallel=True, recompute="selective")),
    "llama3-70b": ("h100-sxm", dict(dp=16, tp=8, pp=8, global_batch_size=1024, seq_length=8192,
                                    sequence_parallel=True, recompute="selective")),
    "llama3.1-405b": ("h100-sxm", dict(dp=8, tp=8, pp=16, vpp=2, global_batch_size=256, seq_length=8192,
                                       sequence_parallel=True, recompute="full")),
    "qwen2.5-72b": ("a100-80g", dict(dp=8, tp=8, pp=4, global_batch_size=256, seq_length=4096,
                                     sequence_parallel=True, recompute="full")),
    # A VLM: the 32-block vision tower front-loaded on stage 0, the offset moving text layers off it.
    "qwen2.5-vl-7b": ("h100-sxm", dict(dp=4, tp=2, pp=4, global_batch_size=256, seq_length=8192,
                                       offset=(-4, 2, 1, 1), sequence_parallel=True, recompute="selective")),
    "qwen3-8b": ("h100-sxm", dict(dp=4, tp=2, pp=1, global_batch_size=64, seq_length=4096)),
    "qwen3-32b": ("h100-sxm", dict(dp=8, tp=4, pp=2, global_batch_size=128, seq_length=4096,
                                   sequence_parallel=True, recompute="selective")),
    "qwen3-30b-a3b": ("h100-sxm", dict(dp=8, tp=2, pp=2, ep=8, global_batch_size=256, seq_length=4096,
                                       sequence_parallel=True)),
    "qwen3-235b-a22b": ("h800", dict(dp=16, tp=4, pp=8, ep=16, global_batch_size=512, seq_length=4096,
                                     sequence_parallel=True, recompute="full")),
    "qwen3-next-80b-a3b": ("h100-sxm", dict(dp=16, tp=2, pp=2, ep=16, global_batch_size=256, seq_length=4096,
                                            sequence_parallel=True, recompute="selective")),
    "deepseek-v3": ("h800", dict(dp=64, tp=1, pp=16, ep=64, global_batch_size=4096, seq_length=4096,
                                 recompute="full", zero_stage=1)),
    "mixtral-8x7b": ("a100-80g", dict(dp=8, tp=2, pp=4, ep=8, global_batch_size=256, seq_length=4096,
                                      sequence_parallel=True, recompute="full")),
    "gpt3-175b": ("a100-80g", dict(dp=8, tp=8, pp=16, global_batch_size=1536, seq_length=2048,
                                   sequence_parallel=True, recompute="selective")),
    # Sliding-window families: gpt-oss's alternating 128-token windows, Gemma 3's 5-of-6 1,024-token ones.
    "gpt-oss-120b": ("h100-sxm", dict(dp=16, tp=1, pp=4, ep=16, global_batch_size=512, seq_length=8192,
                                      recompute="full")),
    "gemma3-27b": ("h100-sxm", dict(dp=8, tp=4, pp=2, global_batch_size=256, seq_length=8192,
                                    sequence_parallel=True, recompute="selective")),
    "kimi-k2": ("h800", dict(dp=64, tp=1, pp=16, ep=64, global_batch_size=4096, seq_length=4096,
                             recompute="full", zero_stage=1)),
    # Llama 4: dense and MoE layers alternate; chunked attention at 16k tokens (two 8k chunks).
    "llama4-maverick": ("h100-sxm", dict(dp=16, tp=4, pp=4, ep=16, global_batch_size=512, seq_length=16384,
                                         sequence_parallel=True, recompute="full")),
    # A hybrid Mamba-2 stack: 118 one-part blocks over 4 stages; seconds only (ND refuses it).
    "nemotron-h-56b": ("h100-sxm", dict(dp=8, tp=8, pp=4, global_batch_size=768, seq_length=8192,
                                        sequence_parallel=True, recompute="selective")),
    "deepseek-v2-lite": ("h100-sxm", dict(dp=8, tp=1, pp=1, ep=8, global_batch_size=256, seq_length=4096)),
}

#: Catalog models ND's op tables cannot price (a Mamba-2 mixer, one-part blocks): seconds only.
SECONDS_ONLY = ("nemotron-h-56b",)
#: The REALISTIC models ND units price.
ND_PRICED = tuple(sorted(name for name in REALISTIC if name not in SECONDS_ONLY))


def realistic(name: str) -> tuple[Model, ExecSpec, Cluster]:
    device, fields = REALISTIC[name]
    spec = ExecSpec(**fields)
    return Model.from_catalog(name), spec, Cluster(device, num_devices=spec.num_devices)


def on_both_backends(price):
    """``{"cython": price(), "python": price()}``, each run with the whole API on that backend."""
    from ndcost import _backend

    results = {}
    for backend in ("cython", "python"):
        with _backend.use(backend):
            results[backend] = price()
    return results
