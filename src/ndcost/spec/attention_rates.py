"""Fused attention on Blackwell as NVIDIA measured it: the share of the bf16 peak cuDNN's SDPA reaches.

Seconds mode prices a flash-attention kernel at one achievable rate for its forward (f FLOPs) and backward
(2.5·f, FlashAttention's accounting: ``ndcost.kernels.seconds_layer.FLASH_BACKWARD_FLOPS``); a forward at
``R_f`` and a backward at ``R_b`` run both in ``f/R_f + 2.5·f/R_b``, the time of ``3.5·f`` at
``3.5 / (1/R_f + 2.5/R_b)``. NVIDIA's cudnn-frontend publishes its SDPA training benchmark on GB200 and GB300
(benchmark/sdpa_benchmark_training/results, cuDNN 9.22.0, bf16, batch 2, 10 iterations, FLOPs counted as
ndcost counts them: 2·b·s²·heads·(d_qk + d_v), halved for a causal mask -- checked against each row's time):
the rows below are its causal ("top_left") rows at the training lengths of the runs seconds mode is checked
against (4096 and 8192 tokens), for Llama 3.1's heads (64 query / 8 KV, d 128) and DeepSeek-V3's (128, d_qk
192, d_v 128), with the non-deterministic backward (Transformer Engine's default,
NVTE_ALLOW_NONDETERMINISTIC_ALGO=1). A benchmark of 10 iterations runs at the boost clock: the catalog prices it
at the part's sustained share (``ndcost.spec.rates``), as it does every burst figure.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

__all__ = ["CUDNN_SDPA_SOURCE", "CUDNN_SDPA_TFLOPS", "CUDNN_SDPA_TOKENS", "FA2_HEAD64_SHARE", "FA2_HEAD64_SOURCE",
           "FLASH_HEAD64_SHARE", "FLASH_HEAD64_SOURCE", "attention_burst_share", "combined_rate",
           "with_attention_shape"]

CUDNN_SDPA_SOURCE = (
    "NVIDIA/cudnn-frontend@fb682ce761a2705e40f9b5d528737a3e0eb33cec benchmark/sdpa_benchmark_training/results/"
    "{llama3.1,dsv3}/{part}/*_20260424_*.csv: cuDNN 9.22.0 SDPA, bf16, causal (top_left), batch 2, 4096 and 8192 "
    "tokens, Llama 3.1 heads (64/8, d 128) and DeepSeek-V3 heads (128, d 192/128), non-deterministic backward: "
    "the mean of 3.5 / (1/forward + 2.5/backward) TFLOP/s over the four rows, of the part's dense bf16 peak")

#: The causal lengths of those rows: the rate their mean is priced as holding at these lengths
#: (``Rates.attention_reference_tokens``).
CUDNN_SDPA_TOKENS: tuple[float, ...] = (4096.0, 8192.0)
#: (forward TFLOP/s, backward TFLOP/s) of each row, per part, as the result files print them.
CUDNN_SDPA_TFLOPS: dict[str, tuple[tuple[float, float], ...]] = {
    # llama3.1 s4096, s8192; dsv3 s4096, s8192
    "gb200": ((1408.0, 1148.0), (1574.0, 1332.0), (1406.0, 1057.0), (1585.0, 1193.0)),
    "gb300": ((1703.0, 1248.0), (1856.0, 1435.0), (1590.0, 1143.0), (1825.0, 1291.0)),
}


def combined_rate(forward: float, backward: float) -> float:
    """One rate for a forward at *forward* and its 2.5x backward at *backward* (seconds mode's accounting)."""
    return 3.5 / (1.0 / forward + 2.5 / backward)


def attention_burst_share(part: str, peak_tflops: float) -> float:
    """The share of *peak_tflops* a fused attention kernel reaches, forward and backward together, in the
    benchmark bursts of *part* ("gb200" or "gb300")."""
    rows = CUDNN_SDPA_TFLOPS[part]
    rate = sum(combined_rate(forward, backward) for forward, backward in rows) / len(rows)
    return rate / peak_tflops


#: The share of the head-dim-128 rate cuDNN's SDPA reaches at head dim 64, per part, forward and backward together:
#: fitted with the sliding window's fixed work to NVIDIA's windowed (d 64) and full causal (d 128) kernels
#: (tools/fit_window_attention.py; ndcost.kernels.window_attention states the model), rounded to 3 digits.
FLASH_HEAD64_SHARE: Mapping[str, float] = MappingProxyType({"gb200": 0.677, "gb300": 0.638, "h200": 0.792})
FLASH_HEAD64_SOURCE = (
    "fitted (tools/fit_window_attention.py) to NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results: "
    "gpt-oss's windowed heads (d 64) against Llama 3.1's full causal ones (d 128) on the same part at 2048-16384 "
    "tokens (tests/data/cudnn/sdpa_windows.json: GB200 at 128- and 1024-token windows, GB300 at 128, H200 at 1024), "
    "with one fixed work a query (485 keys) for every part; all 16 pairs within 3%. {part}")

#: FlashAttention-2 on the H100 at 4096 tokens, bf16, (forward, backward) TFLOP/s at head dim 64 and at 128, the
#: values on the bars of FlashAttention-3's Figures 5 and 6 (Shah et al. 2024, arXiv 2407.08608), and the share
#: they make (0.893): the kernel PyTorch's SDPA runs on Hopper (``Rates.attention_kernel`` "fa2").
FA2_H100_TFLOPS: Mapping[int, tuple[float, float]] = MappingProxyType({64: (321.0, 279.0),
                                                                      128: (368.0, 310.0)})
FA2_HEAD64_SHARE = round(combined_rate(*FA2_H100_TFLOPS[64]) / combined_rate(*FA2_H100_TFLOPS[128]), 3)
FA2_HEAD64_SOURCE = ("Shah et al. 2024, FlashAttention-3 (arXiv 2407.08608), Figures 5 and 6 (H100 SXM5, bf16, 4096 "
                     "tokens): FlashAttention-2 at 321 / 279 TFLOP/s forward / backward at head dim 64, 368 / 310 at "
                     "128; forward + 2.5x backward: 0.893")


def with_attention_shape(rates, part: str, note: str = "", lengths: tuple[float, ...] = ()):
    """*rates* (a ``Rates``) with the attention kernel's measured shape on *part*: its head-dim-64 share
    (``FLASH_HEAD64_SHARE``; FlashAttention-2's too where the part states a FlashAttention-2 rate, Hopper) and the
    causal *lengths* its rate was measured at (``Rates.attention_reference_tokens``; none: every length)."""
    sources = dict(rates.sources, attention_head64_share=FLASH_HEAD64_SOURCE.replace(
        "{part}", f"This part: the {part}'s" + note))
    fa2 = FA2_HEAD64_SHARE if rates.fa2_attention_efficiency is not None else None
    if fa2 is not None:
        sources["fa2_attention_head64_share"] = FA2_HEAD64_SOURCE
    if lengths:
        sources["attention_reference_tokens"] = ("the lengths of the rows of attention_efficiency's source ("
                                                 + CUDNN_SDPA_SOURCE.replace("{part}", part) + ")")
    return rates.replace(attention_head64_share=FLASH_HEAD64_SHARE[part], fa2_attention_head64_share=fa2,
                         attention_reference_tokens=tuple(lengths), sources=sources)
