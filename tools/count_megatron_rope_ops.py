"""Count what Megatron-Core's unfused RoPE runs: the kernels and the bytes of one forward and one backward of
``apply_rotary_pos_emb`` when the model scales cos and sin (YaRN's attention factor), per rotated element (a
measurement behind ``ndcost.kernels.seconds_layer.MEGATRON_ROPE_*``, not part of ndcost).

Why: Megatron-Core falls back from Transformer Engine's fused RoPE to its PyTorch path whenever the attention
factor is not 1 (``megatron/core/models/common/embeddings/rope_utils.py`` ``apply_rotary_pos_emb``: "mscale=... is
not supported by TE's fused RoPE. Using unfused implementation."), which gpt-oss's YaRN (factor 32, no mscale keys:
0.1 ln 32 + 1 = 1.347) always is. This script calls Megatron-Core's own function on a [s, b, heads, head_dim] bf16
tensor with apply_rope_fusion on and that factor, under a ``TorchDispatchMode`` that records every aten operator
the forward and the backward dispatch: the ones that are not views, and the bytes each reads and writes (its tensor
arguments and outputs, once each: what a kernel streams from and to HBM). Bytes are reported per element of the
rotated tensor; tensors of the rotary table's size (s x head_dim, broadcast over batch and heads) are counted as
kernels, their bytes apart.

Run it in a scratch environment, not ndcost's (Megatron-Core is not a dependency)::

    python3 -m venv /tmp/rvenv && . /tmp/rvenv/bin/activate
    pip install torch==2.13.0 numpy megatron-core==0.16.1   # 0.16.1: the newest the index serves Python 3.11
    python tools/count_megatron_rope_ops.py

Measured 2026-12-06 (torch 2.13.0 CPU, megatron-core 0.16.1, whose bshd path is the one of NVIDIA/Megatron-LM@
d7288711, the Megatron-Bridge 26.04 pin; s 256, b 2, 8 heads of 64), per rotated element, forward / backward: 12 / 14
passes over it (24 / 28 bytes of a bf16 element) in 6 / 7 full-size kernels, plus 6 / 0 kernels on the rotary table.
Forward: t * cos, the negated half, the rotated halves concatenated, times sin, the sum, and the result concatenated
with the empty pass-through slice (a copy); backward: the two products' gradients, the negation's, the halves'
concatenation, the sum of the two paths into t, the empty slice's zero gradient and its sum. The fused kernel reads
and writes each element once each way. ``-v`` prints each operator's passes.
"""
from __future__ import annotations

import collections
import math
import sys
import types

VERBOSE = '-v' in sys.argv


def main() -> int:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from megatron.core.models.common.embeddings import rope_utils

    s, b, heads, head_dim = 256, 2, 8, 64
    # the fields apply_rotary_pos_emb reads (TransformerConfig refuses apply_rope_fusion without Transformer Engine,
    # whose fused kernel the unfused factor bypasses anyway)
    config = types.SimpleNamespace(apply_rope_fusion=True, mrope_section=None, rotary_interleaved=False,
                                   multi_latent_attention=False)
    factor = 0.1 * math.log(32.0) + 1.0      # gpt-oss: YaRN factor 32, no mscale keys (Megatron-Bridge's bridge)
    freqs = torch.randn(s, 1, 1, head_dim, dtype=torch.float32)
    leaf = torch.randn(s, b, heads, head_dim, dtype=torch.bfloat16, requires_grad=True)
    global full
    full = leaf.numel() * leaf.element_size()
    table = freqs.numel()

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()
            self.big = self.small = 0
            self.moved = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.is_view or func.__name__.startswith(("detach", "alias")):
                return out
            flat = []
            for a in list(args) + list((kwargs or {}).values()):
                flat.extend(a if isinstance(a, (list, tuple)) else (a,))    # cat's inputs come as a list
            tensors = [a for a in flat if isinstance(a, torch.Tensor)]
            outs = out if isinstance(out, (tuple, list)) else (out,)
            tensors += [o for o in outs if isinstance(o, torch.Tensor)]
            largest = max((t.numel() for t in tensors), default=0)
            self.ops[func.__name__] += 1
            if largest > table:
                self.big += 1
                moved = sum(t.numel() * t.element_size() for t in tensors if t.numel() > table)
                self.moved += moved
                if VERBOSE:
                    print(f"  {func.__name__}: {moved / full:.2f} passes", [tuple(t.shape) for t in tensors])
            else:
                self.small += 1
            return out

    source = leaf
    with Count() as forward:
        rotated = rope_utils.apply_rotary_pos_emb(source, freqs, config, mscale=factor, cp_group=object())
    grad = torch.randn_like(rotated)
    with Count() as backward:
        rotated.backward(grad)
    for name, mode in (("forward", forward), ("backward", backward)):
        print(f"{name}: {mode.big} full-size kernels, {mode.small} on the rotary table; "
              f"{mode.moved / (full / 2):.1f} bytes per rotated element of 2 bytes "
              f"({mode.moved / full:.1f} passes); ops {dict(mode.ops)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
