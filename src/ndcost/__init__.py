"""ndcost: price a distributed LLM training strategy without running it.

>>> import ndcost
>>> m = ndcost.Model.from_catalog("llama3-70b")
>>> c = ndcost.Cluster("h100-sxm", num_devices=1024)
>>> s = ndcost.ExecSpec(dp=16, tp=8, pp=8, global_batch_size=1024, seq_length=8192,
...                     sequence_parallel=True, recompute="selective")
>>> e = ndcost.estimate(m, s, c)   # doctest: +SKIP
"""
from ._backend import BACKEND
from .device import Cluster, Device, devices
from .batch_result import BatchEstimate
from .candidates import Candidates
from .errors import SpecError
from .estimate import estimate, layer_times
from .estimate_many import estimate_many
from .exec_spec import ExecSpec
from .explain import explain
from .fit_rates import RatesFit, fit_rates
from .fit_runs import MeasuredRun
from .layer_kinds import LayerKind, OpCounts
from .model import Model
from .model_parameters import ParamCount
from .model_catalog import models
from .pipeline_balance import BalancedPipeline, balance_pipeline
from .knapsack import plan_stage
from .ratios import Ratios
from .rates_io import load_rates, save_rates
from .reasons import REASONS, explain_reason
from .recompute_plan import RecomputePlan, plan_recompute
from .recompute_spec import SWITCHES, RecomputeRange
from .result import Estimate
from .search import SearchResult, search
from .switch_profile import Cost, SwitchProfile

__version__ = "0.1.0"

__all__ = [
    "BACKEND", "SpecError", "__version__",
    "Model", "LayerKind", "OpCounts", "ParamCount", "models",
    "Device", "Cluster", "devices",
    "ExecSpec", "RecomputeRange", "SWITCHES",
    "Ratios", "Estimate", "estimate", "layer_times", "explain",
    "Cost", "SwitchProfile", "plan_stage", "RecomputePlan", "plan_recompute",
    "BalancedPipeline", "balance_pipeline",
    "search", "SearchResult",
    "fit_rates", "RatesFit", "MeasuredRun", "load_rates", "save_rates",
]
