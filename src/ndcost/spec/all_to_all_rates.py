"""NCCL's all-to-all inside a node as NVIDIA measured it: the share of the scale-up link rate its bus bandwidth reaches.

Seconds mode prices a collective inside a node at ``Rates.intra_node_efficiency`` of the link (0.8: an NCCL
maintainer's "effective NVLink bandwidth of 370 GB/s" of H100's 450). An all-to-all reaches less: every rank
sends to every other at once through the switch, where a ring streams to one neighbour. NVIDIA's aiconfigurator
publishes nccl-tests' alltoall_perf on one node of each part (NCCL 2.29.2; ``tests/data/aiconfigurator/
nccl_alltoall.json``, its source inside). ``tools/fit_all_to_all.py`` fits, per part and GPU count, time = latency +
bytes (n - 1)/n / bus bandwidth over buffers of 8 MB and more: at 8 GPUs an H100 node reaches 321 GB/s (0.714 of
450; latency 31 us, against seconds mode's 7 steps of 5 us) and a B200 node 583 GB/s (0.648 of 900). GB200 and
GB300 trays were measured up to 4 GPUs (0.556 and 0.585, the B200 at 4: 0.556): the B200's 8-GPU share stands for
them, an assumption for the NVL72's larger groups. A benchmark of buffers in a loop: the shares are used as they
are (a collective is bound by its link, not the clock).

``Rates.all_to_all_efficiency`` carries the share; None (a part with no measurement) takes
``intra_node_efficiency``. DeepEP's kernels have their own share (``deepep_nvlink_efficiency``).
"""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, Mapping

__all__ = ["ALL_TO_ALL_SOURCE", "ALL_TO_ALL_SHARES", "ALL_TO_ALL_FIT", "with_all_to_all"]

ALL_TO_ALL_SOURCE = (
    "ai-dynamo/aiconfigurator@095f58a51 aic-core/src/aiconfigurator_core/systems/data/{part}/comm/nccl/2.29.2/"
    "nccl_perf.parquet: nccl-tests alltoall_perf on one {device} node (tests/data/aiconfigurator/nccl_alltoall.json), "
    "time = latency + bytes x (n-1)/n / bus bandwidth fitted over 8 MB-537 MB buffers at {gpus} GPUs "
    "(tools/fit_all_to_all.py): {busbw:.0f} GB/s of the {link:.0f} GB/s link")

#: (measured part, GPUs, fitted bus bandwidth GB/s, link GB/s a direction) behind each share.
ALL_TO_ALL_FIT: Mapping[str, tuple[str, int, float, float]] = MappingProxyType({
    "h100_sxm": ("H100", 8, 321.3, 450.0),
    "b200_sxm": ("B200", 8, 583.0, 900.0),
})


def _shares(part: str, devices: tuple[str, ...], kin: str) -> dict[str, tuple[float, str]]:
    """Each of *devices* at the share *part*'s fit gives (the first device is the measured one; *kin* says why the
    others take it)."""
    name, gpus, busbw, link = ALL_TO_ALL_FIT[part]
    source = ALL_TO_ALL_SOURCE.format(part=part, device=f"DGX {name}", gpus=gpus, busbw=busbw, link=link)
    return {device: (busbw / link, source + ("" if device == devices[0] else kin.format(device=device, name=name)))
            for device in devices}


#: Catalog device -> (share of its link an all-to-all's bus bandwidth reaches, source).
ALL_TO_ALL_SHARES: Mapping[str, tuple[float, str]] = MappingProxyType({
    **_shares("h100_sxm", ("h100-sxm", "h800", "h200"),
              "; the {device}: an SM90 part on NVLink 4 switches (the H800 with fewer links), the {name}'s share"),
    **_shares("b200_sxm", ("b200", "gb200-nvl72", "gb300-nvl72"),
              "; assumption for the {device}: its tray measured up to 4 GPUs (0.556-0.585 of the link, the {name}'s "
              "4 GPUs 0.556), the {name}'s 8-GPU share taken for its NVLink 5 domain"),
})


def with_all_to_all(device: str, rates: Any) -> Any:
    """*rates* (a :class:`~ndcost.spec.rates.Rates`) with the part's measured all-to-all share and its source,
    where one is measured; else *rates* as they are."""
    if device not in ALL_TO_ALL_SHARES:
        return rates
    share, source = ALL_TO_ALL_SHARES[device]
    return dataclasses.replace(rates, all_to_all_efficiency=share,
                               sources=MappingProxyType({**rates.sources, "all_to_all_efficiency": source}))
