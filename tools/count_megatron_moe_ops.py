"""Count the host work of Megatron-Core's MoE layer: the PyTorch operators one forward and one backward dispatch,
and the host's wall time for them, on the CPU with tiny tensors (a measurement for issue 23, not part of ndcost).

Why: ndcost prices a layer's host time as kernels x launch_s (``ndcost.kernels.seconds_layer``). Megatron-Core's
MoE layer runs more host work than its kernels: the router's aux-loss bookkeeping, the token dispatcher's split
sizes and index arithmetic, views and casts that launch nothing but still pass through the dispatcher. This script
runs Megatron-Core's own ``MoELayer`` (alltoall dispatcher, local experts ``SequentialMLP``, EP 1, one process,
gloo) and counts every aten operator it dispatches (``TorchDispatchMode``), the views apart, then times a forward
and a forward+backward with tensors small enough that the host's work is the whole of it.

Run it in a scratch environment, not ndcost's (Megatron-Core is not a dependency)::

    python3 -m venv /tmp/mvenv && . /tmp/mvenv/bin/activate
    pip install torch==2.13.0 numpy megatron-core==0.16.1   # 0.16.1: the newest the index serves Python 3.11
    python tools/count_megatron_moe_ops.py 16 4              # experts, top-k

CUDA-only calls in the dispatcher (its device-to-host stream, ``torch.cuda.current_device``) are stubbed for the CPU;
``te_general_gemm``, undefined in moe_utils when Transformer Engine is absent, is set to None.

Measured 2026-12-06 on the 2-core AMD EPYC development machine (torch 2.13.0 CPU, megatron-core 0.16.1, hidden 64,
64 tokens), aten ops forward / backward (all, not a view) and the host's wall time per forward+backward:

=======  ===================  ===================  ============
E, k     forward              backward             fw+bw wall
=======  ===================  ===================  ============
2, 2     88 / 46              85 / 53              923 us
8, 4     160 / 82             205 / 131            1,790 us
16, 4    256 / 130            365 / 235            3,038 us
32, 4    448 / 226            685 / 443            5,481 us
=======  ===================  ===================  ============

One run each; the wall times move by up to a third between runs on this shared machine (32 experts: 5.5-8.1 ms),
the counts not at all. The layer's fixed part (E -> 0 from 16 and 32 experts): 34 forward and 27 backward operators
that are not views (64 / 45
in all); each local expert of SequentialMLP adds 6 / 13 (a TE GroupedLinear, as the NVIDIA recipes run, launches its
experts from one module). ndcost counts 11 launches for the same router, permutation and
un-permutation: the layer's host work is several times what it prices, about 1 ms forward+backward on this x86
host, but a gpt-oss layer's device time on a GB200 is 15 ms a micro-batch, so the host stays hidden except after
the token-count synchronisation -- not the 10 ms a layer the Megatron-Bridge 26.04 gpt-oss rows miss.
"""
from __future__ import annotations

import collections
import contextlib
import os
import sys
import time


class _Stream:
    """A CUDA stream's methods that the dispatcher calls, as no-ops (the CPU has one stream)."""

    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, *args):
        pass

    def synchronize(self):
        pass

    def record_event(self, *args, **kwargs):
        return _Event()

    def wait_event(self, *args):
        pass


class _Event(_Stream):
    def record(self, *args):
        pass

    def wait(self, *args):
        pass


#: Operators that launch no kernel on a GPU (views, metadata, allocation without a fill).
VIEWS = {"view", "_unsafe_view", "t", "transpose", "expand", "slice", "select", "as_strided", "detach", "alias",
         "reshape", "permute", "unsqueeze", "squeeze", "split", "split_with_sizes", "chunk", "unbind",
         "_reshape_alias", "empty", "empty_like", "new_empty", "empty_strided", "narrow", "lift_fresh"}


def main(experts: int, top_k: int, rounds: int = 200) -> None:
    import torch
    import torch.distributed as dist
    from torch.utils._python_dispatch import TorchDispatchMode

    torch.cuda.Stream, torch.cuda.Event = _Stream, _Event
    torch.cuda.current_stream = lambda *a, **k: _Stream()
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()
    torch.cuda.current_device = lambda: "cpu"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)

    from megatron.core import parallel_state
    import megatron.core.transformer.moe.moe_utils as moe_utils
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.moe.moe_layer import MoELayer
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=1)
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    config = TransformerConfig(
        num_layers=1, hidden_size=64, num_attention_heads=4, ffn_hidden_size=64, moe_ffn_hidden_size=64,
        num_moe_experts=experts, moe_router_topk=top_k, moe_token_dispatcher_type="alltoall",
        moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-2, gated_linear_unit=True,
        activation_func=torch.nn.functional.silu, params_dtype=torch.float32, use_cpu_initialization=True,
        add_bias_linear=False, moe_grouped_gemm=False)
    layer = MoELayer(config, get_gpt_layer_local_spec(num_experts=experts, moe_grouped_gemm=False).submodules.mlp
                     .submodules)

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    x = torch.randn(32, 2, 64, requires_grad=True)
    for _ in range(3):   # warm: lazy initialisations out of the count
        out, _ = layer(x)
        out.sum().backward()
    counter = Count()
    with counter:
        out, _ = layer(x)
    forward = counter.ops.copy()
    counter.ops.clear()
    with counter:
        out.sum().backward()
    backward = counter.ops

    def split(ops):
        return sum(ops.values()), sum(n for name, n in ops.items() if name not in VIEWS)

    start = time.perf_counter()
    for _ in range(rounds):
        out, _ = layer(x)
        out.sum().backward()
    wall = (time.perf_counter() - start) / rounds
    print(f"experts {experts}, top-k {top_k}: forward ops {split(forward)} (all, not a view), "
          f"backward {split(backward)}; forward+backward {wall * 1e6:.0f} us on this host")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 16, int(sys.argv[2]) if len(sys.argv) > 2 else 4)
