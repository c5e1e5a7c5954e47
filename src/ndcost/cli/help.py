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
    "pp_schedule": "pipeline schedule: 1f1b, interleaved, zero_bubble_v (ND's DualPipeV), gpipe, seq1f1b, "
                   "dualpipe (DeepSeek's bidirectional DualPipe: even pp, vpp 1, >= 2*pp micro-batches, two "
                   "copies of the parameters) or dualpipev (its V: vpp 2, >= 2*pp micro-batches) (default 1f1b; "
                   "interleaved when vpp > 1)",
    "moe_dispatcher": "MoE token dispatcher: alltoall (NCCL's all-to-all, a copy per token and expert) or deepep "
                      "(DeepEP's normal kernels: RDMA once per node, NVLink once per rank; its buffers held "
                      "beside NCCL's) (default alltoall)",
    "moe_dispatcher_sms": "SMs DeepEP's kernels hold, taken from compute while they overlap it (default 20, "
                          "Megatron-Core's and DeepSeek-V3's)",
    "moe_node_limit": "node-limited routing: nodes a token is sent to at most (DeepSeek-V3: 4) (default 0: no "
                      "limit)",
    "moe_dispatch_fp8": "dispatch (and the combine's backward) in fp8 with 1x128 scales, the combine in bf16, as "
                        "DeepSeek-V3 (default off; needs --precision fp8)",
    "ep_overlap": "how the expert all-to-all overlaps compute: none, 1f1b (Megatron-Core's "
                  "--overlap-moe-expert-parallel-comm: a forward and a backward micro-batch co-scheduled; vpp > 1 "
                  "when pp > 1, no full recompute) or dualpipe (DualPipe's overlapped chunks, with --pp-schedule "
                  "dualpipe, dualpipev or zero_bubble_v) (default none)",
    "cp_algo": "context-parallel algorithm: ring (Transformer Engine's P2P ring), ulysses, or ring-allgather (PyTorch's context_parallel as torchtitan runs it: a backward holds all ranks' K/V) (default ring)",
    "precision": "matmul precision (default bf16; fp8 needs a device with an fp8 peak)",
    "capacity_factor": "MoE capacity factor of the token-dropping mode (default 1.0; with --no-grouped-gemm)",
    "moe_imbalance": "the busiest expert-parallel rank's routed tokens over the mean, dropless mode "
                     "(default 1.0: balanced)",
    "grouped_gemm": "dropless MoE with grouped GEMMs (default on); --no-grouped-gemm: capacity mode",
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
