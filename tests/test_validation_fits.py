"""A shipped run that ran fits (issue 25 item 2): every row of the shipped validation files is priced as
fitting its device -- or is one of the rows listed here, which ndcost still prices over its memory,
each with what is known of why. A listed row that starts to fit, or a new row that does not, fails.

What moved rows to fitting, each a published fact read (not a constant moved):

* NeMo's dgxc rows (``h100_run_facts.yaml``): with ``fp8_params`` the weights are Transformer Engine fp8
  tensors (``param_bytes`` 1; Llama 3.1 70B fp8 on 64 H100 went from 74.2 to 56.3 GiB reserved); every
  main_grad is a view into Apex's contiguous gradient buffer, allocated in ``grad_sync_dtype`` bf16
  (``grad_bytes`` 2); the bf16 Llama rows keep their fp32 master as a 16-bit remainder.
* BLOOM 176B: the row's own strategy says DeepSpeed's bf16 optimizer shards its optimizer states
  (ZeRO-1) under "stage 0" (DeepSpeed's BF16_Optimizer keeps one fp32 partition per rank).
* Transformer Engine's fp8 linears save the fp8 copy of their input for the weight gradient, not the
  bf16 input (TE@d0067d0d module/linear.py:598-621, layernorm_linear.py:477-487, grouped_linear.py:538-548;
  ndcost/kernels/memory.py): Qwen3 235B-A22B mxfp8 on 256 GB300 went from 274.1 to 234.6 GiB reserved of
  262.0 usable; the other fp8 rows dropped 6-14% and stay over.
"""
from __future__ import annotations

import pytest

from ndcost import estimate
from ndcost.errors import SpecError
from ndcost.files import read_mapping
from ndcost.io.validation import BUILTIN_RUNS, build_row

#: Rows ndcost still prices over their device's memory: the reserved peak against the usable HBM (GiB) and
#: the largest part of the fullest stage, as priced, and what is known of why. Left open: the activation
#: memory of Megatron-Core / Transformer Engine MoE layers, and of the Megatron-Bridge dense rows, is above
#: what the runs prove fits; no published fact found yet says which figure is wrong. Not priced and known:
#: under delayed scaling the attention projection's own fp8 input copy (1 byte per element more), and the
#: block scales of blockwise / MXFP8 fp8 copies (1/32 byte per element), both of which would add memory.
OVER_AS_PRICED = {
    "narayanan21_t2_zero3_530b_640gpu": "101.8 of 72.8, working set 38.1: DeepSpeed 2021 ZeRO-3 at micro-batch "
                                        "4 without flash attention: the recomputed layer's working set and 105 "
                                        "layers' checkpoints",
    "mbridge_25.09_dgxh100_llama3_70b_unstated_64gpu": "76.4 of 71.6, activations 40.3 (84.9 before TE's fp8 "
                                                       "saved inputs): 46 in-flight chunks (Korthikanti)",
    "mbridge_25.09_dgxh100_llama3p1_405b_unstated_1024gpu": "86.6 of 71.0, activations 28.6, params and 16-bit "
                                                            "grads 23.8 each: 126 layers / 8 stages",
    "mbridge_25.09_dgxh100_deepseekv3_unstated_1024gpu": "120.0 of 67.3, activations 90.7: MoE activations",
    "mbridge_25.09_dgxh100_qwen3_30b_a3b_unstated_16gpu": "100.9 of 68.6, activations 53.5: MoE activations at "
                                                          "24 virtual stages",
    "mbridge_25.09_dgxh100_qwen3_235b_a22b_unstated_256gpu": "77.1 of 67.9, activations 51.2: MoE activations",
    "mbridge_26.04_gb300_deepseekv3_mxfp8_256gpu": "387.9 of 261.8, activations 181.4: MoE activations",
    "mbridge_26.04_gb200_deepseekv3_mxfp8_256gpu": "222.2 of 166.6, activations 125.3: MoE activations",
    "mbridge_26.04_b200_deepseekv3_mxfp8_256gpu": "179.4 of 161.4, activations 84.7: MoE activations",
    "mbridge_26.04_b200_gptoss120b_bf16_64gpu": "208.0 of 162.1, activations 80.2, 16-bit grads 61.3: MoE "
                                                "activations (bf16: no fp8 saved inputs)",
    "mbridge_26.04_gb300_qwen3_30b_a3b_mxfp8_8gpu": "301.5 of 262.7, activations 199.1: MoE activations at "
                                                    "micro-batch 8",
    "mbridge_26.04_gb200_qwen3_30b_a3b_mxfp8_8gpu": "193.7 of 167.7, activations 99.5: MoE activations",
    "mbridge_26.04_b200_qwen3_30b_a3b_mxfp8_8gpu": "193.7 of 162.1, activations 99.5: MoE activations",
    "mbridge_26.04_h100_qwen3_30b_a3b_fp8_16gpu": "75.4 of 68.9, activations 24.9, optimizer 21.3: MoE "
                                                  "activations and 128 experts' states on 16 ranks",
    "mbridge_26.04_h100_qwen3_235b_a22b_fp8_256gpu": "77.1 of 67.9, activations 51.2: MoE activations",
    "deepseek_v3_pretrain_h800_2048gpu": "126.0 of 67.9, activations 87.5: MoE activations under DualPipe (priced "
                                         "as 1F1B); DeepSeek's own fp8 caching (report §3.3.2: the MoE SwiGLU's "
                                         "input in fp8, its output recomputed) goes beyond TE's and is not priced",
    "automodel_h100_deepseekv3_bf16_256gpu": "94.4 of 67.9, optimizer 30.3: FSDP2 expert optimizer states and MoE "
                                             "activations",
    "automodel_h100_kimik2_bf16_256gpu": "102.7 of 68.1, optimizer 42.1: FSDP2 expert optimizer states and MoE "
                                         "activations",
    "automodel_h100_qwen3_30b_a3b_bf16_8gpu": "103.5 of 69.0, activations 30.9, optimizer 28.4: MoE activations "
                                              "and the optimizer states of 128 experts on 8 ranks",
    "automodel_h100_gptoss120b_bf16_64gpu": "96.9 of 68.8, activations 61.9: FSDP2 expert optimizer states and MoE "
                                            "activations",
}


def _rows():
    for name, path in BUILTIN_RUNS.items():
        doc = read_mapping(path, "a runs file")
        for row in doc["runs"]:
            yield pytest.param(name, path, doc.get("hardware") or {}, row, id=str(row.get("id")))


@pytest.mark.parametrize("name, path, hardware, row", list(_rows()))
def test_a_shipped_run_that_ran_fits(name, path, hardware, row):
    try:
        built = build_row(row, hardware, path)
    except SpecError as exc:
        pytest.skip(f"not priced: {exc}")        # named in validate's summary (test_validation_bias)
    priced = estimate(built.model, built.spec, built.cluster, rates=built.rates)
    memory = priced.memory
    worst = memory.stages[memory.peak_stage]
    largest = max(("params", "grads", "optimizer", "activations", "working_set"), key=lambda n: getattr(worst, n))
    detail = (f"reserved peak {memory.peak_reserved / 2**30:.1f} GiB, usable HBM {memory.usable_bytes / 2**30:.1f} "
              f"GiB, largest part {largest} {getattr(worst, largest) / 2**30:.1f} GiB")
    if row["id"] in OVER_AS_PRICED:
        assert not priced.fits, f"{row['id']} fits now ({detail}): take it off OVER_AS_PRICED"
    else:
        assert priced.fits, f"{row['id']} ran but is priced over its memory: {detail}"


def test_llama31_70b_fp8_on_64_h100_fits_by_its_facts():
    """The issue's row: fits=False (74.2 GiB reserved of 71.0 usable) until its fp8_params, grad buffer and
    master weights were read from its facts."""
    doc = read_mapping(BUILTIN_RUNS["h100"], "a runs file")
    row = next(r for r in doc["runs"] if r["id"] == "dgxc_llama31_70b_fp8_64gpu")
    built = build_row(row, doc["hardware"], BUILTIN_RUNS["h100"])
    assert built.spec.param_bytes == 1 and built.spec.grad_bytes == 2 and built.spec.main_param_bytes == 4
    assert any("fp8_params" in note for note in built.notes)
    e = estimate(built.model, built.spec, built.cluster, rates=built.rates)
    assert e.fits and e.memory.headroom > 0
