"""What one call of DeepEP's normal kernels costs: its bytes at a share of the link, a fixed cost, a cost a token.

Inside a node, seconds mode prices a DeepEP dispatch or combine (``ndcost.kernels.seconds_comm._exchange``) as

    call + token * tokens + tokens * ranks * bytes / (link * share) + the link's latency

and across nodes as the call's and its tokens' costs plus the slower of the RDMA and the NVLink stages.

The byte count alone at DeepEP's published rate (the form before) priced a call at hidden 2048 39% short of its
measured time, and within 15% only from hidden 4096 up. NVIDIA's aiconfigurator timed DeepEP's normal kernels on one
DGX H100 at 4096 and 16384 tokens a rank and hidden 2048-7168 (ai-dynamo/aiconfigurator@095f58a51
``systems/data/h100_sxm/comm/sglang/0.5.12/wideep_deepep_normal_perf.parquet``, kept in
``tests/data/aiconfigurator/h100_deepep_normal.json``): twenty times that separate a call's fixed cost (the notify
kernel that swaps every rank's counts, the host's wait for them, the launches) from a token's (each token's routing
read and its destinations' queues, handled by the sender warps) from a byte's. ``tools/fit_deepep_overheads.py``
fits the three by least squares: 32.9 us a call, 11.94 ns a token, 0.8436 of the link; every measured call within
10%. The check is DeepEP's own table, not fitted: on the H800 (200 GB/s a direction) the three price its intranode
dispatch and combine at 0.99 and 0.98 of the published 153 and 158 GB/s (tests/test_seconds_expert_exchange.py).

Across nodes the NVLink stage runs beside the RDMA stage, forwarding what arrives over RDMA, at DeepEP's intranode
figure taken whole, 153 of 200 GB/s: at the direct send's 0.8436 it prices DeepEP's EP 16 row, where that stage
binds, 12% fast -- forwarding costs more than a direct send. With the call's and its tokens' costs on every call,
DeepEP's eight published figures are priced at 0.95-1.03 of their times (the bytes alone at the published share:
0.92-1.04, EP 16 at 0.92).

The figures are the software's (DeepEP's kernels with 24 SMs on Hopper). NVIDIA's HybridEP, which the B200, GB200
and GB300 rows run, is priced with them and two facts of its own (``ndcost.spec.hybridep_rates``): its NVLink kernels'
published rate by group size, and its dispatch blocking the host.
"""
from __future__ import annotations

__all__ = ["DEEPEP_CALL_OVERHEAD", "DEEPEP_TOKEN_OVERHEAD", "DEEPEP_INTRANODE_EFFICIENCY", "DEEPEP_NVLINK_EFFICIENCY",
           "DEEPEP_SOURCES"]

#: Seconds a call costs beside its bytes, seconds a token the rank sends adds to each call, and the share of the link
#: the bytes reach beside them, inside a node: tools/fit_deepep_overheads.py's least-squares fit of aiconfigurator's
#: twenty measured H100 calls (tests check the fit gives these).
DEEPEP_CALL_OVERHEAD = 32.9e-6
DEEPEP_TOKEN_OVERHEAD = 11.94e-9
DEEPEP_INTRANODE_EFFICIENCY = 0.8436

#: DeepEP's normal kernels inside one H800 node as published: 153 GB/s dispatching (158 combining) of the bytes each
#: rank receives, its own share included, over the H800's 200 GB/s a direction (ndcost's h800 device: DeepSeek's
#: 400 GB/s bidirectional NVLink) -- 0.765, a call's costs folded in at its size. The NVLink stage of the internode
#: kernels is priced at it; DeepEP's internode rows (RDMA-bound at EP 32 and 64, NVLink-bound at EP 16) check it.
DEEPEP_NVLINK_EFFICIENCY = 153.0 / 200.0

_AIC = ("ai-dynamo/aiconfigurator@095f58a51 systems/data/h100_sxm/comm/sglang/0.5.12/wideep_deepep_normal_perf.parquet "
        "(DeepEP normal kernels, one DGX H100, 24 SMs, top-8 of 256, 4096/16384 tokens, hidden 2048-7168; "
        "tests/data/aiconfigurator/h100_deepep_normal.json): least-squares fit, tools/fit_deepep_overheads.py")
_DEEPEP_TABLE = ("deepseek-ai/DeepEP@dd758caf451848bd150e1046af3d0a73e5fff38d docs/legacy.md 'Normal kernels with "
                 "NVLink and RDMA forwarding': Intranode EP 8 dispatch 153 GB/s (NVLink), H800 at 200 GB/s a "
                 "direction; the bytes a rank receives, its own share included (tests/legacy/test_intranode.py "
                 "nvl_recv_bytes)")
#: Rates field -> where its value comes from.
DEEPEP_SOURCES = {
    "deepep_call_overhead": f"{_AIC}: a call's fixed cost",
    "deepep_token_overhead": f"{_AIC}: a token's cost a call",
    "deepep_intranode_efficiency": f"{_AIC}: the bytes' share of the link; checked against {_DEEPEP_TABLE}",
    "deepep_nvlink_efficiency": f"{_DEEPEP_TABLE}: 0.765, the internode kernels' NVLink stage",
}
