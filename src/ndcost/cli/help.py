"""Help lines of the strategy flags ``ndcost estimate`` and ``ndcost explain`` share: each states
what the flag sets, its unit and its default (ExecSpec's), and the worked examples of the commands."""
from __future__ import annotations

__all__ = ["STRATEGY_HELP", "ESTIMATE_EXAMPLES", "SEARCH_EXAMPLES", "examples_epilog", "add_pricing_arguments"]

#: ExecSpec field -> help line (the defaults are ExecSpec's; tests/test_cli_help.py checks each names one).
STRATEGY_HELP = {
    "dp": "data-parallel degree (default 1)",
    "tp": "tensor-parallel degree (default 1)",
    "pp": "pipeline stages (default 1)",
    "vpp": "virtual pipeline chunks per stage (default 1; > 1 runs the interleaved schedule)",
    "cp": "context-parallel degree: the sequence split over cp ranks (default 1)",
    "ep": "expert-parallel degree (default 1; MoE models)",
    "etp": "expert tensor-parallel degree (default: the experts follow tp, ND's derivation)",
    "micro_batch_size": "sequences per micro-batch (default 1)",
    "micro_batch_num": "micro-batches per step (default: global batch / (micro-batch size x dp), or pp "
                       "when no global batch is given)",
    "global_batch_size": "sequences per step (default: micro-batch size x dp x micro-batches)",
    "seq_length": "tokens per sequence (default 4096)",
    "zero_stage": "ZeRO stage: 0 DDP, 1 optimizer states, 2 + gradients, 3 + parameters (FSDP) (default 1)",
    "seq_split": "Seq1F1B sequence chunks (default 1; with --pp-schedule seq1f1b)",
    "sequence_parallel": "Megatron sequence parallelism over the tp ranks (default off)",
    "recompute": "activation recompute of every layer: none, full or selective (default none)",
    "selective_rule": "which switches selective recompute turns on (default megatron: the core attention)",
    "pp_schedule": "pipeline schedule (default 1f1b; interleaved when vpp > 1)",
    "moe_dispatcher": "MoE token dispatcher: alltoall (NCCL) or deepep (DeepEP: its NVLink and RDMA buffers are "
                      "held beside NCCL's; priced as the all-to-all in time) (default alltoall)",
    "cp_algo": "context-parallel algorithm: ring (Transformer Engine's P2P ring), ulysses, or ring-allgather (PyTorch's context_parallel as torchtitan runs it: a backward holds all ranks' K/V) (default ring)",
    "precision": "matmul precision (default bf16; fp8 needs a device with an fp8 peak)",
    "capacity_factor": "MoE capacity factor of the token-dropping mode (default 1.0; with --no-grouped-gemm)",
    "moe_imbalance": "the busiest expert-parallel rank's routed tokens over the mean, dropless mode "
                     "(default 1.0: balanced)",
    "grouped_gemm": "dropless MoE with grouped GEMMs (default on); --no-grouped-gemm: capacity mode",
    "cuda_graphs": "what the stack replays from CUDA graphs instead of launching from the host: none, attn (each "
                   "layer's attention), moe_router (also a MoE layer's pre-norm, router and permutation: Megatron's "
                   "--cuda-graph-scope attn moe_router moe_preprocess) or layer (whole layers; torch.compile "
                   "mode=reduce-overhead) (default none)",
}

#: The Rates figures of a MoE layer's kernels and of the host, as flags (seconds mode; a flag overrides the
#: --software preset's or the --rates file's figure).
RATES_HELP = {
    "moe_permute": "how tokens are permuted to their experts and back: fused (TE moe_permute, Megatron "
                   "--moe-permute-fusion), unfused (Megatron's PyTorch ops) or sort (torchtitan's argsort, gather "
                   "and scatter-add) (default: the software's; fused)",
    "moe_router_fusion": "the router's score, top-k and aux loss as one fused kernel (Megatron --moe-router-fusion; "
                         "default: the software's; on)",
    "moe_aux_loss": "a load-balancing aux loss computed from the routing (default: the software's; on)",
    "grouped_gemm_impl": "how a grouped GEMM runs: cutlass (one grouped kernel: torch._grouped_mm, DeepGEMM) or "
                         "multi_stream (TE GroupedLinear: a cuBLAS GEMM per expert) (default: the software's)",
    "launch_overhead": "host seconds to launch one kernel eagerly (default 9.58e-6, measured on an H200's host)",
    "graph_kernel_overhead": "seconds per kernel replayed from a CUDA graph (default 0.84e-6, measured)",
    "grouped_gemm_tile_overhead": "a grouped GEMM tile's fixed cost in elements of its inner dimension (default 60)",
    "grouped_gemm_exposed": "share of a grouped GEMM's shorter of compute and weight stream left exposed "
                            "(default 0.35)",
    "scatter_add_rate": "16-bit elements a second an atomic scatter-add adds (unfused and sort permutations; "
                        "default 1e11, measured on an H200)",
}

#: Worked examples, each a whole command the tests run.
ESTIMATE_EXAMPLES = (
    "ndcost estimate llama3-70b --device h100-sxm --dp 16 --tp 8 --pp 8 --global-batch-size 1024 "
    "--seq-length 8192 --sequence-parallel --recompute selective",
    "ndcost estimate gpt-oss-120b --device h100-sxm --dp 16 --pp 4 --ep 16 --global-batch-size 512 "
    "--seq-length 8192 --recompute full",
)
SEARCH_EXAMPLES = (
    "ndcost search llama3-8b --device h100-sxm --devices 64 --global-batch-size 512 --seq-length 8192 --top 5",
)


def add_pricing_arguments(p) -> None:
    """--units, --ratios, --rates and --software: how a command prices (estimate, search)."""
    p.add_argument("--units", choices=("seconds", "nd"), default="seconds",
                   help="seconds (default) or ND's relative score")
    p.add_argument("--ratios", metavar="FILE", help="a ratios JSON file (ND's calibration; default: none)")
    p.add_argument("--rates", metavar="FILE",
                   help="seconds mode's rates from a JSON (`ndcost calibrate --fit rates`; default: the "
                        "device's and the software preset's)")
    p.add_argument("--software", metavar="NAME",
                   help="the training software's rates preset (megatron-te, nemo, torchtitan-eager, "
                        "torchtitan-compile, megatron-2021, deepspeed-2021; default: today's Megatron-LM)")


def examples_epilog(examples: tuple[str, ...]) -> str:
    """The epilog of a command's --help: its examples, one a line."""
    return "examples:\n" + "\n".join("  " + line for line in examples)
