"""The pure-Python twins of the compiled kernels (cysrc/ndcost/kernels/<area>.pxi), and the kernel ABI."""
