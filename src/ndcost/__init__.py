"""ndcost: price a distributed LLM training strategy without running it.

>>> import ndcost
>>> m = ndcost.Model.from_catalog("llama3-70b")
>>> c = ndcost.Cluster("h100-sxm", num_devices=1024)
>>> s = ndcost.ExecSpec(dp=16, tp=8, pp=8, global_batch_size=1024, seq_length=8192,
...                     sequence_parallel=True, recompute="selective")
>>> e = ndcost.estimate(m, s, c)   # doctest: +SKIP
"""
from ._backend import BACKEND
from ._version import __version__
from .spec.device import Cluster, Device, devices
from .price.batch_result import BatchEstimate
from .price.candidates import Candidates
from .errors import SpecError
from .price.estimate import estimate, layer_times
from .price.estimate_many import estimate_many
from .spec.exec_spec import ExecSpec
from .price.explain import explain
from .io.compare import Comparison, compare
from .io import calibrate as _calibrate  # noqa: F401 (registers fit_ratios behind the deprecated Ratios.fit)
from .io.fit_rates import RatesFit, fit_rates
from .io.fit_runs import MeasuredRun
from .spec.layer_kinds import LayerKind, OpCounts
from .spec.model import Model
from .spec.model_parameters import ParamCount
from .spec.model_catalog import models
from .price.pipeline_balance import BalancedPipeline, balance_pipeline
from .price.knapsack import plan_stage
from .spec.ratios import Ratios
from .spec.rates_io import load_rates, save_rates
from .tables.reasons import REASONS, explain_reason
from .price.recompute_plan import RecomputePlan, plan_recompute
from .spec.recompute_spec import SWITCHES, RecomputeRange
from .price.result import Estimate
from .price.search import SearchResult, search
from .price.switch_profile import Cost, SwitchProfile


__all__ = [
    "BACKEND", "SpecError", "__version__",
    "Model", "LayerKind", "OpCounts", "ParamCount", "models",
    "Device", "Cluster", "devices",
    "ExecSpec", "RecomputeRange", "SWITCHES",
    "Ratios", "Estimate", "estimate", "layer_times", "explain", "compare", "Comparison",
    "Cost", "SwitchProfile", "plan_stage", "RecomputePlan", "plan_recompute",
    "BalancedPipeline", "balance_pipeline",
    "search", "SearchResult",
    "Candidates", "estimate_many", "BatchEstimate", "REASONS", "explain_reason",
    "fit_rates", "RatesFit", "MeasuredRun", "load_rates", "save_rates",
]
