"""The ``ndcost`` console script: one module per command, shared arguments in ``args``."""
