"""A synchronous job at its slowest GPU (ndcost.spec.straggler): the busy-node figures by hand, the order
statistic, and where the factor reaches the price."""
import math

import numpy as np
import pytest

import ndcost
from ndcost.errors import SpecError
from ndcost.spec.rates import Rates
from ndcost.spec.straggler import BLACKWELL_BUSY, HOPPER_BUSY, expected_largest_normal, job_clock_share


def test_the_expected_largest_of_n_normal_draws():
    """Blom's approximation against the exact expected maxima of standard normal samples (Harter's tables: 2 draws
    0.5642, 8 draws 1.4236, 40 draws 2.1608 -- half the expected range of 40, d2 = 4.3216): within 1% from 8
    draws on (the sizes of the jobs and of the published sample), 4.5% at two."""
    assert expected_largest_normal(1) == 0.0
    for n, exact, within in ((2, 0.5642, 0.05), (8, 1.4236, 0.01), (40, 2.1608, 0.01)):
        assert expected_largest_normal(n) == pytest.approx(exact, rel=within)
    values = [expected_largest_normal(n) for n in (2, 8, 64, 1024, 2 ** 24)]
    assert values == sorted(values) and values[-1] < 6.0


def test_the_busy_node_figures_by_hand():
    """H200: all 8 GPUs busy 698.6 TFLOP/s of 702.9 alone, their 40 samples spread over 4.5%: sigma = 0.045 /
    (2 z(40)) = 1.04%; a 64-GPU job's slowest runs at 0.9939 x (1 - 2.34 x 0.0104) = 0.970 of the alone rate."""
    share, sigma, source = HOPPER_BUSY
    assert share == pytest.approx(698.6 / 702.9, rel=1e-12) and "all-8 concurrent" in source
    assert sigma == pytest.approx(0.045 / (2 * expected_largest_normal(40)), rel=1e-12)
    assert 0.0103 < sigma < 0.0106
    assert job_clock_share(share, sigma, 64) == pytest.approx(share * (1 - expected_largest_normal(64) * sigma))
    assert 0.965 < job_clock_share(share, sigma, 64) < 0.972
    b_share, b_sigma, _ = BLACKWELL_BUSY
    assert b_share == pytest.approx(1426.4 / 1455.7)
    assert b_sigma == pytest.approx(0.104 / (2 * expected_largest_normal(40)))
    assert job_clock_share(share, sigma, 1) == job_clock_share(b_share, b_sigma, 1) == 1.0


def test_the_catalog_parts_carry_their_familys_figures():
    for name in ("h100-sxm", "h200", "h800"):
        assert (Rates.for_device(name).busy_clock_share, Rates.for_device(name).clock_sigma) == HOPPER_BUSY[:2]
    assert (Rates.for_device("b200").busy_clock_share, Rates.for_device("b200").clock_sigma) == BLACKWELL_BUSY[:2]
    for name in ("a100-80g", "gb200-nvl72", "gb300-nvl72", "ascend-910b"):   # unmeasured, or liquid-cooled racks
        rates = Rates.for_device(name)
        assert (rates.busy_clock_share, rates.clock_sigma) == (1.0, 0.0)
        assert "no measurement" in rates.sources["clock_sigma"]


def _compute_rows(estimate):
    return {(layer.name, row.op, row.pass_): row.seconds for layer in estimate.ops() for row in layer.rows
            if row.bound == "compute"}


def test_a_jobs_gemms_run_at_its_slowest_gpu(kernels):
    """llama3-70b on 64 H100s: every compute-bound op takes 1/job_clock_share(64) of its time on GPUs that all run
    at the alone rate; one GPU alone is priced at the measured rate whatever the figures."""
    model = ndcost.Model.from_catalog("llama3-70b")
    spec = ndcost.ExecSpec(dp=4, tp=8, pp=2, global_batch_size=64, micro_batch_size=1, seq_length=4096)
    cluster = ndcost.Cluster("h100-sxm", 64)
    flat = Rates.for_device("h100-sxm").replace(busy_clock_share=1.0, clock_sigma=0.0)
    busy, alone = _compute_rows(ndcost.estimate(model, spec, cluster)), _compute_rows(
        ndcost.estimate(model, spec, cluster, rates=flat))
    share = job_clock_share(*HOPPER_BUSY[:2], 64)
    assert busy and busy.keys() == alone.keys()
    for key, seconds in busy.items():
        assert seconds > alone[key]
        if key[1] == "attn_core":        # the attention kernel: its time at the compute rate, and its fixed cost
            fixed = flat.kernel_overhead
            assert seconds - fixed == pytest.approx((alone[key] - fixed) / share, rel=1e-9)
    one = ndcost.ExecSpec(global_batch_size=1, micro_batch_size=1, seq_length=2048)
    small = ndcost.Model.from_catalog("qwen3-8b")
    h200 = ndcost.Cluster("h200", 1)
    assert ndcost.estimate(small, one, h200).step_time == ndcost.estimate(
        small, one, h200, rates=Rates.for_device("h200").replace(busy_clock_share=1.0, clock_sigma=0.0)).step_time


def test_the_batch_prices_each_row_at_its_own_job_size(kernels):
    """estimate_many over rows of 8, 16 and 64 GPUs on a bare device: each row as estimate() prices it on a cluster
    of its own size."""
    model = ndcost.Model.from_catalog("llama3-8b")
    specs = [ndcost.ExecSpec(dp=dp, tp=tp, global_batch_size=64, micro_batch_size=1, seq_length=4096)
             for dp, tp in ((8, 1), (4, 4), (16, 4), (2, 4))]
    batch = ndcost.estimate_many(model, specs, "h100-sxm", threads=1)
    for i, spec in enumerate(specs):
        single = ndcost.estimate(model, spec, ndcost.Cluster("h100-sxm", spec.num_devices))
        assert batch.step_time[i] == pytest.approx(single.step_time, rel=1e-12)
    assert len({round(float(t), 9) for t in batch.step_time}) == len(specs)


@pytest.mark.parametrize("field, value", [("clock_sigma", 0.2), ("clock_sigma", -0.01), ("clock_sigma", math.nan),
                                          ("busy_clock_share", 0.0), ("busy_clock_share", 1.5)])
def test_bad_figures_are_refused_naming_the_field(field, value):
    with pytest.raises(SpecError, match=field):
        Rates.for_device("h100-sxm").replace(**{field: value})
    assert np.isfinite(job_clock_share(1.0, 0.1, 2 ** 24))
