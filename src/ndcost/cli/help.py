"""Help lines of the strategy flags ``ndcost estimate`` and ``ndcost explain`` share: each states
what the flag sets, its unit and its default (ExecSpec's), and the worked examples of the commands."""
from __future__ import annotations

__all__ = ["STRATEGY_HELP", "ESTIMATE_EXAMPLES", "SEARCH_EXAMPLES", "examples_epilog", "add_pricing_arguments",
           "add_software_argument"]

#: ExecSpec field -> help line (the defaults are ExecSpec's; tests/test_cli_help.py checks each names one).
STRATEGY_HELP = {
    "dp": "data-parallel degree (default: --devices / (tp*pp*cp) where --devices is given, else 1)",
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
    "pp_runs": "the step's micro-batches run as this many whole pipeline schedules, each filling and draining the "
               "pipeline (gradient accumulation over torch.distributed.pipelining runs: torchtitan, NeMo AutoModel) "
               "(default 1; with pp > 1, dividing the micro-batches)",
    "sequence_parallel": "Megatron sequence parallelism over the tp ranks (default off)",
    "recompute": "activation recompute of every layer: none, full or selective (default none)",
    "pp_schedule": "pipeline schedule: 1f1b, interleaved, zero_bubble_v (ND's DualPipeV), gpipe, seq1f1b, "
                   "dualpipe (DeepSeek's bidirectional DualPipe: even pp, vpp 1, >= 2*pp micro-batches, two "
                   "copies of the parameters) or dualpipev (its V: vpp 2, >= 2*pp micro-batches) (default 1f1b; "
                   "interleaved when vpp > 1)",
}

#: Worked examples, each a whole command the tests run.
ESTIMATE_EXAMPLES = (
    "ndcost estimate llama3-70b --device h100-sxm --dp 16 --tp 8 --pp 8 --global-batch-size 1024 "
    "--seq-length 8192 --sequence-parallel --recompute selective",
    "ndcost estimate gpt-oss-120b --device h100-sxm --dp 16 --pp 4 --ep 16 --global-batch-size 512 "
    "--seq-length 8192 --recompute full",
    "ndcost estimate llama3.1-70b --device h100-sxm --dp 2 --tp 4 --pp 4 --cp 2 --vpp 5 --global-batch-size 128 "
    "--seq-length 8192 --sequence-parallel --software nemo --tp-comm-overlap --precision fp8 --fp8-recipe current",
    "ndcost estimate llama3-70b --device gb200-nvl72 --devices-per-node 64 --devices-per-host 4 --nics-per-host 8 "
    "--nic-gbps 200 --devices 128 --dp 16 --tp 8 --global-batch-size 256 --seq-length 8192",
)
SEARCH_EXAMPLES = (
    "ndcost search llama3-8b --device h100-sxm --devices 64 --global-batch-size 512 --seq-length 8192 --top 5",
    "ndcost search llama3-8b --device h100-sxm --devices 64 --global-batch-size 512 --seq-length 8192 --top 5 "
    "--tp-comm-overlap on,off --precision bf16,fp8 --fp8-recipe current --emit nemo",
)


def add_pricing_arguments(p) -> None:
    """--units, --ratios, --rates and --software: how a command prices (estimate, search, plot)."""
    p.add_argument("--units", choices=("seconds", "nd"), default="seconds",
                   help="seconds (default) or ND's relative score")
    p.add_argument("--ratios", metavar="FILE", help="a ratios JSON file (ND's calibration; default: none)")
    p.add_argument("--rates", metavar="FILE",
                   help="seconds mode's rates from a JSON (`ndcost calibrate --fit rates`); with --software, a "
                        "figure both state must agree (default: the device's and the software preset's)")
    add_software_argument(p)


def add_software_argument(p) -> None:
    """--software: the training stack (its strategy fields; in seconds mode its rates too)."""
    from ..spec.rates import SOFTWARE_PRESETS

    p.add_argument("--software", metavar="NAME",
                   help=f"the training stack ({', '.join(SOFTWARE_PRESETS)}, or none): the strategy fields it fixes "
                        "(NVIDIA's recipes: TP comm overlap, param-gather overlap, fp8 parameters; torchtitan: "
                        "FSDP2's sharding and widths, its loss, torchao's casts, its CP ring) and, in seconds mode, "
                        "its kernels, fusions and fp8 recipe; each stack flag overrides it (default: megatron-bridge, "
                        "Megatron-Core as NVIDIA's recipes run it; none: the strategy and the device's rates as "
                        "stated; `ndcost software NAME` lists every field)")


def examples_epilog(examples: tuple[str, ...]) -> str:
    """The epilog of a command's --help: its examples, one a line."""
    return "examples:\n" + "\n".join("  " + line for line in examples)
