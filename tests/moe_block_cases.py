"""One routed MoE block priced on its own by a backend's ``seconds_moe_block``: the tests' shared call."""
from __future__ import annotations

import numpy as np

from ndcost.kernels.columns import LAYER_OP_FIELDS, LAYER_OP_NAMES, MOE_BLOCK, MOE_BLOCK_FIELDS


def block_shape(**fields: float) -> np.ndarray:
    """The MOE_BLOCK vector of *fields* by name, the rest 0."""
    shape = np.zeros(len(MOE_BLOCK_FIELDS))
    for name, value in fields.items():
        shape[MOE_BLOCK[name]] = value
    return shape


def price_moe_block(kernels, cand, rate, shape=None, **fields: float) -> np.ndarray:
    """(LAYER_OP_NAMES, LAYER_OP_FIELDS): *kernels*' op table of the block *shape* (or *fields* by name) with the
    candidate vector *cand* and rate vector *rate*."""
    vector = block_shape(**fields) if shape is None else shape
    out = np.empty((len(LAYER_OP_NAMES), len(LAYER_OP_FIELDS)))
    kernels.seconds_moe_block(vector, np.asarray(cand, dtype=np.float64), np.asarray(rate, dtype=np.float64), out)
    return out
