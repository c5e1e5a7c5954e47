"""``software=`` on every pricing function: the stack's strategy fields and its rates in one argument (issue 24),
the same as stating them by hand, and as ``--software`` on the command line."""
from __future__ import annotations

import dataclasses

import pytest

import ndcost
from ndcost import _backend
from ndcost.price.software_arg import apply_software, stated_fields
from ndcost.spec.rates import Rates

MODEL = "llama3-70b"
SPEC = ndcost.ExecSpec(dp=2, tp=4, pp=4, vpp=5, cp=2, micro_batch_size=1, global_batch_size=64, seq_length=8192,
                       precision="fp8", pp_schedule="interleaved", recompute="none")


def _by_hand(name):
    """NVIDIA's 70B recipe stated field by field, as one had to before ``software=``."""
    from ndcost.spec.software_fields import software_fields

    stated = {k: v for k, v in stated_fields(SPEC).items() if k not in ("tp", "pp", "cp")}
    fields = software_fields(name, SPEC.tp, SPEC.pp, SPEC.cp, **stated)
    return dataclasses.replace(SPEC, **fields), Rates.for_software("h100-sxm", name)


@pytest.mark.parametrize("name", ["nemo", "megatron-bridge", "torchtitan-eager"])
def test_estimate_with_software_is_the_stack_stated_by_hand(backend_name, name):
    with _backend.use(backend_name):
        model, cluster = ndcost.Model.from_catalog(MODEL), ndcost.Cluster("h100-sxm", 64)
        spec, rates = _by_hand(name)
        one = ndcost.estimate(model, SPEC, cluster, software=name)
        assert one.step_time == ndcost.estimate(model, spec, cluster, rates=rates).step_time
        # and it changes the price: the recipe's TP overlap, its fp8 parameters and recipe (or FSDP2's widths)
        assert one.step_time != ndcost.estimate(model, SPEC, cluster).step_time
        if name != "torchtitan-eager":
            assert spec.tp_overlap and spec.overlapped_param_gather and spec.param_bytes == 1


def test_every_pricing_function_takes_software(backend_name):
    with _backend.use(backend_name):
        model, cluster = ndcost.Model.from_catalog(MODEL), ndcost.Cluster("h100-sxm", 64)
        spec, rates = _by_hand("megatron-bridge")
        want = ndcost.estimate(model, spec, cluster, rates=rates)
        batch = ndcost.estimate_many(model, [SPEC, SPEC], cluster, software="megatron-bridge")
        assert list(batch.step_time) == [want.step_time] * 2
        assert ndcost.explain(model, SPEC, cluster, software="megatron-bridge") == \
            ndcost.explain(model, spec, cluster, rates=rates)
        planned = ndcost.plan_recompute(model, SPEC, cluster, software="megatron-bridge")
        assert planned.spec.tp_overlap and planned.spec.param_bytes == 1
        balanced = ndcost.balance_pipeline(model, SPEC, cluster, software="megatron-bridge", max_moves=1)
        assert balanced.spec.tp_overlap
        nd = ndcost.layer_times(model, SPEC, cluster, 0, software="megatron-bridge")
        assert nd == ndcost.layer_times(model, spec, cluster, 0)
        found = ndcost.search(model, cluster, global_batch_size=64, seq_length=8192, software="megatron-bridge",
                              tp=4, pp=4, cp=2, vpp=5, precision="fp8", top=1, per_layer_recompute=0, balance=0)
        assert found.best.spec.tp_overlap and found.best.spec.param_bytes == 1


def test_a_stated_field_or_figure_wins_over_the_stack(backend_name):
    from ndcost.spec.software_fields import stack_strategy

    with _backend.use(backend_name):
        model, cluster = ndcost.Model.from_catalog(MODEL), ndcost.Cluster("h100-sxm", 64)
        _, spec, rates = apply_software("megatron-bridge", model, dataclasses.replace(SPEC, param_bytes=4), cluster,
                                        Rates.for_device("h100-sxm").replace(fp8_recipe="delayed"), owner="estimate")
        assert spec.param_bytes == 4 and spec.tp_overlap and spec.overlapped_param_gather
        assert rates.fp8_recipe == "delayed"                          # the caller's, not the recipe's "current"
        # an ExecSpec field at its default reads as unstated; a default kept against the stack is stated by name
        assert "tp_overlap" not in stated_fields(dataclasses.replace(SPEC, tp_overlap=False))
        _, kept = stack_strategy("megatron-bridge", model, {**stated_fields(SPEC), "tp_overlap": False})
        assert kept.tp_overlap is False and kept.overlapped_param_gather


def test_a_batch_of_candidates_takes_the_stack_column_by_column(backend_name):
    with _backend.use(backend_name):
        model, cluster = ndcost.Model.from_catalog("llama3-8b"), ndcost.Cluster("h100-sxm", 16)
        cands = ndcost.Candidates.from_arrays(dp=[4, 2], tp=[4, 8], global_batch_size=[32, 32], seq_length=[4096, 4096],
                                              tp_overlap=[False, False])
        batch = ndcost.estimate_many(model, cands, cluster, software="nemo")
        each = [ndcost.estimate(model, ndcost.ExecSpec(dp=dp, tp=tp, global_batch_size=32, seq_length=4096),
                                cluster, software="nemo").step_time for dp, tp in ((4, 4), (2, 8))]
        # a column the batch holds with every row at ExecSpec's default is one it does not state: the recipe's
        # TP overlap applies to both rows, as it does to each ExecSpec alone
        assert list(batch.step_time) == each


def test_a_bad_stack_is_a_spec_error_naming_it():
    model, cluster = ndcost.Model.from_catalog("llama3-8b"), ndcost.Cluster("h100-sxm", 8)
    spec = ndcost.ExecSpec(dp=8, global_batch_size=16)
    for call in (lambda: ndcost.estimate(model, spec, cluster, software="nemmo"),
                 lambda: ndcost.estimate_many(model, [spec], cluster, software=3),
                 lambda: ndcost.explain(model, spec, cluster, software="titan"),
                 lambda: ndcost.layer_times(model, spec, cluster, 0, software="x")):
        with pytest.raises(ndcost.SpecError, match="software"):
            call()
