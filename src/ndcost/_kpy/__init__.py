"""The pure-Python oracle, one module per area; ``ndcost._kernels_py`` re-exports them all."""
