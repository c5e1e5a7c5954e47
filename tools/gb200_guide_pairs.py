"""Seconds mode on NVIDIA's one-change pairs of DeepSeek-V3 on 256 GB200: the speed-up it prices beside the measured
one.

NVIDIA's guide "Optimizing DeepSeek-V3 Training Performance on NVIDIA GB200 NVL72" (NVIDIA/Megatron-LM@7fec52c2
docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md, §3 "optimization history") times
one configuration -- DeepSeek-V3, MXFP8, 256 GB200, TP1/PP8/VPP4/EP32/MBS1/GBS2048, no 1F1B all-to-all overlap
(§3.2: "the overall benefit is negative on the GB200") -- as its stack changed one step at a time, in Megatron-LM's
TFLOP/s a GPU. A pair of consecutive steps that changes one thing ndcost states is a measured speed-up of that thing
with everything else held; the ratio does not depend on how the FLOPs are counted.

The pairs printed (ndcost's speed-up is the earlier step's step time over the later one's):

* NCCL all-to-all -> DeepEP, 540.00 -> 566.07: the guide's reason is host time, not the wire ("we did not get the
  communication benefits ... reduced CPU overhead (DeepEP uses a fused kernel for the EP communication preprocess,
  further reducing the number of kernels in the router and preprocess parts to 17)", §2.2.1).
* CUDA graphs of attention, router and EP preprocess, 610.71 -> 663.27 (§2.3): the host's launches of those scopes.
* DeepEP -> HybridEP, 829.93 -> 943.56: DeepEP then ran EP 32 over the NVLink domain through a community patch at
  "about 400 GB/s" dispatching and "190 GB/s" combining with 24 SMs (§2.2.1); DeepEP's V2 has since published
  726/740 GB/s at EP 8 on SM100 and no larger domain (deepseek-ai/DeepEP@dd758caf README), which is what seconds
  mode prices, so this pair compares HybridEP with a DeepEP faster than the guide's.

The pairs were timed on the guide's 2025 stack, before the host-side work it lists after them (NUMA binding, PDL for
the quantization kernels, TE's host code): they bound that stack's host cost, not the 26.04 containers'.

The configuration is built from the shipped Megatron-LM dev row of DeepSeek-V3 on GB200
(``mlm_dev_gb200_deepseekv3_mxfp8_256gpu`` of ``ndcost validate --builtin moe``: its model, part, precision and
stack facts) with the guide's layout set on it; its recompute is the row's, not each step's (the pairs printed
change no recompute). Run: ``python tools/gb200_guide_pairs.py``. docs/VALIDATION.md "Stop 50" reads the output.
"""
from __future__ import annotations

import dataclasses
from typing import Any

#: (what changes, the earlier step's fields, the later step's fields, measured TFLOP/s a GPU before and after).
PAIRS: tuple[tuple[str, dict[str, Any], dict[str, Any], float, float], ...] = (
    ("NCCL all-to-all -> DeepEP",
     dict(moe_dispatcher="alltoall", cuda_graphs="none"),
     dict(moe_dispatcher="deepep", moe_dispatcher_sms=24, cuda_graphs="none"), 540.00, 566.07),
    ("CUDA graphs: attention, router, EP preprocess",
     dict(moe_dispatcher="deepep", moe_dispatcher_sms=24, cuda_graphs="none"),
     dict(moe_dispatcher="deepep", moe_dispatcher_sms=24, cuda_graphs="moe_router"), 610.71, 663.27),
    ("DeepEP -> HybridEP",
     dict(moe_dispatcher="deepep", moe_dispatcher_sms=24, cuda_graphs="moe_router"),
     dict(moe_dispatcher="hybridep", moe_dispatcher_sms=32, cuda_graphs="moe_router"), 829.93, 943.56),
)
#: The guide's layout (§1): 256 GPUs as TP1 / PP8 / VPP4 / EP32, one sequence a micro-batch, 2048 a step.
LAYOUT = dict(tp=1, pp=8, vpp=4, ep=32, dp=32, micro_batch_size=1, global_batch_size=2048, ep_overlap="none")
ROW = "mlm_dev_gb200_deepseekv3_mxfp8_256gpu"


def priced_pairs() -> list[tuple[str, float, float, float, float]]:
    """(what changes, ndcost's step time before, after, its speed-up, the measured speed-up) of each pair."""
    from ndcost.files import read_mapping
    from ndcost.io.validation import BUILTIN_RUNS, build_row
    from ndcost.tables.seconds import seconds_estimate

    path = BUILTIN_RUNS["moe"]
    doc = read_mapping(path, "runs file")
    built = build_row(next(row for row in doc["runs"] if row["id"] == ROW), doc["hardware"], path)
    base = dataclasses.replace(built.spec, **LAYOUT)

    def step(fields: dict[str, Any]) -> float:
        spec = dataclasses.replace(base, **fields)
        return seconds_estimate(built.model, spec, built.cluster, rates=built.rates,
                                overlap=built.overlap)["step_time"]

    out = []
    for name, before, after, measured_before, measured_after in PAIRS:
        t0, t1 = step(before), step(after)
        out.append((name, t0, t1, t0 / t1, measured_after / measured_before))
    return out


def main() -> None:
    print(f"{'one change':46s} {'ndcost (s)':>17s} {'ndcost x':>9s} {'measured x':>11s}")
    for name, t0, t1, priced, measured in priced_pairs():
        print(f"{name:46s} {t0:7.2f} -> {t1:6.2f} {priced:9.3f} {measured:11.3f}")


if __name__ == "__main__":
    main()
