"""ndcost: price a distributed LLM training strategy without running it."""
from ._backend import BACKEND
from .errors import SpecError

__version__ = "0.1.0"

__all__ = ["BACKEND", "SpecError", "__version__"]
