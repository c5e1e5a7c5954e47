"""fp8 in seconds mode: the cast of each GEMM input, what stays 16-bit, and the recipes.

The shape of the cast cost is checked against public fp8 GEMM measurements: ai-dynamo/aiconfigurator
(NVIDIA) aic-core/src/aiconfigurator_core/systems/data/h100_sxm/gemm/trtllm/1.3.0rc20/gemm_perf.parquet,
whose fp8 rows time TRT-LLM's Linear with dynamic per-tensor scaling of the input -- "the collected fp8
GEMM includes the compute-scale overhead" (collector/trtllm/collect_gemm.py): an amax pass and a cast
pass over the m x k input, i.e. per-tensor current scaling without the transposed copy.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import RATE, SECONDS_CAND_FIELDS, SECONDS_CAND, SECONDS_LAYER
from ndcost.kernels import seconds as oracle
from ndcost.kernels import seconds_ops
from ndcost.spec.rates import FP8_RECIPES, Rates
from ndcost.tables.seconds import rates_vector, seconds_arrays

#: (m, n, k) -> measured milliseconds on an H100 80GB HBM3 (median of the rows of that shape):
#: fp8 rows (with the dynamic input scaling) and bf16 rows of the same file.
AIC_H100_FP8_MS = {(2048, 4096, 4096): 0.07843, (4096, 8192, 8192): 0.4466, (16384, 6144, 4096): 0.71974}
AIC_H100_BF16_MS = {(2048, 4096, 4096): 0.08796, (4096, 8192, 8192): 0.67277, (16384, 6144, 4096): 1.02927}
#: The measured bursts leave a tenth of a wave idle (Rates.gemm_wave_tail's source).
ISOLATED_TAIL = 0.10
#: Isolated bursts (CUDA-graph bursts of 30 runs) hold the boost clock: they run at the H100's MAMF,
#: not at the sustained rate (MSMF) the default rates price a training step's GEMMs at.
BURST = dict(matmul_efficiency=794.5 / 989.0, fp8_matmul_efficiency=1402.6 / 1979.0)


def _cand(precision: str) -> np.ndarray:
    cand = np.zeros(len(SECONDS_CAND_FIELDS))
    cand[SECONDS_CAND["bytes_c"]] = 2.0
    cand[SECONDS_CAND["bytes_mm"]] = 1.0 if precision == "fp8" else 2.0
    return cand


def _rate(precision: str, recipe: str = "current") -> np.ndarray:
    rates = Rates.for_device("h100-sxm").replace(gemm_wave_tail=ISOLATED_TAIL, fp8_recipe=recipe, **BURST)
    return rates_vector(ndcost.Cluster("h100-sxm", 8), rates, precision)


def test_a_cast_moves_the_recipes_bytes_in_its_kernels():
    rate, cand = _rate("fp8", "current"), _cand("fp8")
    hbm = rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]
    elements = 8192.0 * 4096.0
    # current scaling: read for the amax, read + write fp8 + write the transposed fp8: 2 + 2 + 1 + 1 bytes, in
    # Transformer Engine's 4 kernels (zero the amax, the amax, the scale, the cast)
    assert seconds_ops._cast(elements, cand, rate) == pytest.approx(6.0 * elements / hbm + 4 * 3e-6, rel=1e-12)
    delayed = _rate("fp8", "delayed")
    assert seconds_ops._cast(elements, cand, delayed) == pytest.approx(4.0 * elements / hbm + 3e-6, rel=1e-12)
    # nothing to cast in 16-bit
    assert seconds_ops._cast(elements, _cand("bf16"), _rate("bf16")) == 0.0


def test_the_backward_casts_by_recipe():
    """Every recipe but DeepSeek's casts an output gradient as it casts a forward input and re-quantizes nothing;
    DeepSeek-V3's (report §3.5.2) casts the gradient to both tile layouts (2 + 1, twice: 6 bytes in 2 kernels) and
    re-quantizes the cached fp8 input for the weight gradient (dequantize 1 + 2, cast-and-transpose 2 + 1: 6 bytes
    in 2 kernels), where its forward wrote the 1x128 tiles alone (2 + 1: 3 bytes in 1 kernel)."""
    cand = _cand("fp8")
    gradient, cached = 4096.0 * 7168.0, 4096.0 * 2048.0
    for recipe in ("delayed", "current", "blockwise"):
        rate = _rate("fp8", recipe)
        assert seconds_ops._backward_casts(gradient, cached, cand, rate) == pytest.approx(
            seconds_ops._cast(gradient, cand, rate), rel=1e-12)
    rate = _rate("fp8", "deepseek")
    hbm = rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]
    assert seconds_ops._cast(cached, cand, rate) == pytest.approx(3.0 * cached / hbm + 3e-6, rel=1e-12)
    assert seconds_ops._backward_casts(gradient, cached, cand, rate) == pytest.approx(
        6.0 * gradient / hbm + 2 * 3e-6 + 6.0 * cached / hbm + 2 * 3e-6, rel=1e-12)
    assert seconds_ops._backward_casts(gradient, cached, _cand("bf16"), _rate("bf16", "deepseek")) == 0.0


def test_deepseek_v3_as_deepseek_ran_it_reads_its_recipe():
    from ndcost.files import read_mapping
    from ndcost.io.validation import BUILTIN_RUNS, build_row

    doc = read_mapping(BUILTIN_RUNS["moe"], "a runs file")
    row = next(r for r in doc["runs"] if r["id"] == "deepseek_v3_pretrain_h800_2048gpu")
    built = build_row(row, doc.get("hardware") or {}, BUILTIN_RUNS["moe"])
    assert built.rates.fp8_recipe == "deepseek"
    blockwise = ndcost.estimate(built.model, built.spec, built.cluster, rates=built.rates.replace(fp8_recipe="blockwise"))
    deepseek = ndcost.estimate(built.model, built.spec, built.cluster, rates=built.rates)
    assert deepseek.step_time > blockwise.step_time


@pytest.mark.parametrize("shape", sorted(AIC_H100_FP8_MS))
def test_an_fp8_gemm_with_its_input_cast_matches_public_measurements(shape):
    m, n, k = map(float, shape)
    rate, cand = _rate("fp8"), _cand("fp8")
    hbm = rate[RATE["hbm_eff"]] * rate[RATE["hbm_bw"]]
    gemm = seconds_ops._gemm(m, n, k, 1.0, 1.0, 2.0, rate)
    # the measured kernel casts its input with one amax read and one cast (read 2, write 1): 5 bytes
    # an element in 2 kernels -- the recipe's 6 bytes less the transposed copy only training writes, and
    # less the two one-thread kernels (the amax zeroed, the scale) Transformer Engine adds
    cast = seconds_ops._cast(m * k, cand, rate) - 1.0 * m * k / hbm - 2.0 * rate[RATE["kernel_s"]]
    measured = AIC_H100_FP8_MS[shape] * 1e-3
    assert gemm + cast == pytest.approx(measured, rel=0.15)
    # without the cast, the model would be far too fast on the smaller shapes
    if m * n * k < 1e11:
        assert gemm < 0.85 * measured


@pytest.mark.parametrize("shape", sorted(AIC_H100_BF16_MS))
def test_a_bf16_gemm_matches_public_measurements(shape):
    m, n, k = map(float, shape)
    assert seconds_ops._gemm(m, n, k, 1.0, 2.0, 2.0, _rate("bf16")) == pytest.approx(AIC_H100_BF16_MS[shape] * 1e-3,
                                                                                rel=0.15)


def test_sixteen_bit_gemms_ignore_the_fp8_peak():
    rate = _rate("fp8")
    fp8 = seconds_ops._gemm(8192.0, 8192.0, 8192.0, 1.0, 1.0, 2.0, rate)
    sixteen = seconds_ops._gemm(8192.0, 8192.0, 8192.0, 1.0, 2.0, 2.0, rate, True)
    bf16 = seconds_ops._gemm(8192.0, 8192.0, 8192.0, 1.0, 2.0, 2.0, _rate("bf16"))
    assert sixteen == pytest.approx(bf16, rel=1e-12)
    assert fp8 < 0.6 * sixteen


def test_the_output_head_and_router_stay_sixteen_bit(kernels):
    """Under fp8 the output layer prices as in bf16 (a plain ColumnParallelLinear in Megatron-Core)
    while the layers' GEMMs get faster: the last stage's head time is the same in both."""
    model = ndcost.Model.from_catalog("llama3-8b")
    cluster = ndcost.Cluster("h100-sxm", 8)
    times = {}
    for precision in ("bf16", "fp8"):
        spec = ndcost.ExecSpec(dp=8, global_batch_size=64, seq_length=4096, precision=precision)
        arrays = seconds_arrays(model, spec, cluster)
        head = [0.0, 0.0, 0.0]
        oracle._head(arrays["cand"], arrays["rate"], 4096.0, 4096.0, float(model.vocab_size), 0.0, head)
        times[precision] = head
    assert times["fp8"] == pytest.approx(times["bf16"], rel=1e-12)


@pytest.mark.parametrize("recipe", sorted(FP8_RECIPES))
def test_every_recipe_prices_fp8_layers_slower_than_pure_gemms_and_both_backends_agree(kernels, pykernels, recipe):
    model = ndcost.Model.from_catalog("llama3-8b")
    spec = ndcost.ExecSpec(dp=8, global_batch_size=64, seq_length=4096, precision="fp8")
    cluster = ndcost.Cluster("h100-sxm", 8)
    rates = Rates.for_device("h100-sxm").replace(fp8_recipe=recipe)
    arrays = seconds_arrays(model, spec, cluster, rates=rates)
    out = np.empty((len(model.kinds), len(SECONDS_LAYER)))
    ref = np.empty_like(out)
    args = [arrays[name] for name in ("kinds", "skinds", "model", "smodel", "cand", "rate")]
    kernels.seconds_layer_times(*args, out)
    pykernels.seconds_layer_times(*args, ref)
    np.testing.assert_allclose(out, ref, rtol=1e-12)
    no_cast = arrays["rate"].copy()
    for field in ("f8_cast_b", "f8_gcast_b", "f8_rq_b"):
        no_cast[RATE[field]] = 0.0
    bare = np.empty_like(out)
    kernels.seconds_layer_times(*args[:5], no_cast, bare)
    assert (out[:, SECONDS_LAYER["fw"]] > bare[:, SECONDS_LAYER["fw"]]).all()
    assert (out[:, SECONDS_LAYER["bw"]] > bare[:, SECONDS_LAYER["bw"]]).all()


def test_fp8_recipe_is_validated():
    with pytest.raises(ndcost.SpecError, match="fp8_recipe"):
        Rates.for_device("h100-sxm").replace(fp8_recipe="mxfp4")
    assert dataclasses.replace(Rates.for_device("h100-sxm"), fp8_recipe="torchao").fp8_cast()[2] == 1.0
