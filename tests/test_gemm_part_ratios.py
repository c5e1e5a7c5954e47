"""The GB300's GEMM rate over the GB200's: recomputed from the measured shapes, and carried into the catalog."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ndcost.spec.gemm_part_ratios import GB300_OVER_GB200, LARGE_GEMM_DIM, latency_ratio
from ndcost.spec.rates import DEFAULT_RATES

DATA = Path(__file__).parent / "data" / "aiconfigurator" / "gemm_gb200_gb300.json"


@pytest.fixture(scope="module")
def tables():
    return json.loads(DATA.read_text())["tables"]


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_the_stated_ratio_is_the_median_of_the_measured_shapes(tables, dtype):
    table = tables[dtype]
    assert len(table["gb200"]) == len(table["gb300"]) == 675
    assert latency_ratio(table["gb200"], table["gb300"]) == pytest.approx(GB300_OVER_GB200[dtype], abs=5e-4)


def test_blockwise_fp8_agrees_with_per_tensor_fp8(tables):
    # one fp8 rate prices every fp8 recipe: DeepGEMM's blockwise kernels show the same gap between the parts
    blockwise = latency_ratio(tables["fp8_block"]["gb200"], tables["fp8_block"]["gb300"])
    assert blockwise == pytest.approx(GB300_OVER_GB200["fp8"], abs=0.01)


def test_the_ratio_is_per_shape_not_a_ratio_of_sums():
    # a hand-made pair of tables: the median of the per-shape ratios, duplicates at their shortest latency,
    # small shapes ignored
    slow = [(4096, 4096, 4096, 2.0), (8192, 4096, 4096, 9.0), (8192, 8192, 4096, 3.0), (8192, 8192, 4096, 2.5),
            (1024, 4096, 4096, 100.0)]
    fast = [(4096, 4096, 4096, 1.0), (8192, 4096, 4096, 3.0), (8192, 8192, 4096, 2.0), (1024, 4096, 4096, 1.0)]
    assert latency_ratio(slow, fast) == pytest.approx(2.0)   # ratios 2.0, 3.0, 1.25
    with pytest.raises(ValueError, match=str(LARGE_GEMM_DIM)):
        latency_ratio([(1024, 1024, 1024, 1.0)], [(1024, 1024, 1024, 1.0)])


def test_the_catalog_prices_the_gb300_at_the_gb200s_rate_times_the_ratio():
    gb200, gb300 = DEFAULT_RATES["gb200-nvl72"], DEFAULT_RATES["gb300-nvl72"]
    assert gb300.matmul_efficiency == pytest.approx(gb200.matmul_efficiency * GB300_OVER_GB200["bf16"], rel=1e-12)
    assert gb300.fp8_matmul_efficiency == pytest.approx(gb200.fp8_matmul_efficiency * GB300_OVER_GB200["fp8"],
                                                        rel=1e-12)
    assert "aiconfigurator" in gb300.sources["matmul_efficiency"]
    assert "aiconfigurator" in gb300.sources["fp8_matmul_efficiency"]
    # still a share of the part's peak a real GEMM can reach
    assert gb300.matmul_efficiency < 1.0 and gb300.fp8_matmul_efficiency < 1.0
