"""Seconds mode as a whole: properties every estimate must have (seeded loops), rates, overlap.

Runs through :func:`ndcost.tables.seconds.seconds_estimate` on the selected backend.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import ndcost
from ndcost.kernels.columns import SECONDS_LAYER, SECONDS_LAYER_FIELDS
from ndcost.tables.layout import build_layout
from ndcost.spec.rates import DEFAULT_RATES, GENERIC_RATES, Rates
from ndcost.tables.seconds import Overlap, seconds_arrays, seconds_estimate
from ndcost.tables.joint_rules import validate

_MODELS = ("llama3-8b", "qwen3-30b-a3b", "deepseek-v3", "qwen3-next-80b-a3b", "gpt3-175b")


def _specs(seed: int, count: int, **fixed):
    """Seeded valid (model, spec, cluster) triples on H100s."""
    rng = np.random.default_rng(seed)
    models = [ndcost.Model.from_catalog(name) for name in _MODELS]
    found = 0
    tries = 0
    while found < count and tries < 50 * count:
        tries += 1
        model = models[int(rng.integers(len(models)))]
        tp = int(rng.choice([1, 2, 4, 8]))
        pp = int(rng.choice([1, 2, 4]))
        fields = dict(
            dp=int(rng.choice([2, 4, 8])), tp=tp, pp=pp, cp=int(rng.choice([1, 2])),
            ep=int(rng.choice([1, 2, 4])) if model.is_moe else 1,
            micro_batch_size=int(rng.choice([1, 2])), micro_batch_num=int(rng.choice([4, 8, 16])),
            seq_length=int(rng.choice([2048, 4096])), sequence_parallel=bool(rng.random() < 0.5),
            recompute="none", zero_stage=int(rng.choice([0, 1, 2, 3])),
            pp_schedule=str(rng.choice(["1f1b", "gpipe"])), flash_attention=bool(rng.random() < 0.7),
        )
        fields.update(fixed)
        try:
            spec = ndcost.ExecSpec(**fields)
            cluster = ndcost.Cluster("h100-sxm", spec.num_devices)
            validate(model, spec, cluster)
        except ndcost.SpecError:
            continue
        found += 1
        yield model, spec, cluster


def test_parts_sum_to_the_step_and_every_value_is_finite():
    for model, spec, cluster in _specs(1, 25):
        result = seconds_estimate(model, spec, cluster)
        assert math.isfinite(result["step_time"]) and result["step_time"] > 0.0
        assert sum(result["parts"].values()) == pytest.approx(result["step_time"], rel=1e-12)
        assert all(value >= 0.0 for value in result["parts"].values())
        assert len(result["stage_times"]) == spec.pp
        assert max(result["stage_times"]) <= result["step_time"] * (1.0 + 1e-12)
        assert 0.0 < result["mfu"] <= result["hfu"] < 1.0
        tokens = spec.resolved_global_batch_size * spec.seq_length
        assert result["tokens_per_second"] == pytest.approx(tokens / result["step_time"])


def test_more_bandwidth_never_slows_a_step():
    for model, spec, cluster in _specs(2, 25):
        base = seconds_estimate(model, spec, cluster)["step_time"]
        device = cluster.device
        for change in (dict(intra_node_bandwidth=2 * device.intra_node_bandwidth),
                       dict(inter_node_bandwidth=2 * device.inter_node_bandwidth),
                       dict(hbm_bandwidth=2 * device.hbm_bandwidth)):
            faster = ndcost.Cluster(device, cluster.num_devices, **change)
            assert seconds_estimate(model, spec, faster)["step_time"] <= base * (1.0 + 1e-12), change


def test_more_micro_batches_shrink_the_bubble_share():
    for model, spec, cluster in _specs(3, 20, pp=4, micro_batch_num=4):
        shares = []
        for m in (4, 8, 16, 64):
            result = seconds_estimate(model, spec.replace(micro_batch_num=m, global_batch_size=None), cluster)
            shares.append(result["parts"]["bubble"] / result["step_time"])
        assert all(later < earlier for earlier, later in zip(shares, shares[1:])), shares


def test_recompute_never_lowers_the_time():
    for model, spec, cluster in _specs(4, 20):
        none = seconds_estimate(model, spec, cluster)["step_time"]
        for option in ("selective", "full"):
            assert seconds_estimate(model, spec.replace(recompute=option), cluster)["step_time"] >= none * (1 - 1e-12)


def test_full_recompute_costs_about_one_extra_forward():
    """step(full) - step(none) is one more forward (and its tp/cp/ep traffic) of every layer on
    the straggler stage per micro-batch, within the pipeline's (p-1)/m share and a few %."""
    checked = 0
    for model, spec, cluster in _specs(5, 20, micro_batch_num=32, zero_stage=1):
        spec = spec.replace(overlapped_grad_reduce=False)
        none = seconds_estimate(model, spec, cluster)
        full = seconds_estimate(model, spec.replace(recompute="full"), cluster)
        arrays = seconds_arrays(model, spec, cluster)
        layer = np.empty((arrays["kinds"].shape[0], len(SECONDS_LAYER_FIELDS)))
        ndcost._backend.kernels.seconds_layer_times(arrays["kinds"], arrays["skinds"], arrays["model"],
                                                    arrays["smodel"], arrays["cand"], arrays["rate"], layer)
        counts = build_layout(model, spec).counts.sum(axis=(1, 3))             # (pp, K) layers per stage
        # a layer's forward with its traffic as exposed by the default overlap (tp exposed, the cp
        # ring under the attention core, ep exposed)
        cp_f = layer[:, SECONDS_LAYER["cp_f"]]
        forward = (layer[:, SECONDS_LAYER["fw"]] + layer[:, SECONDS_LAYER["tp_f"]] + layer[:, SECONDS_LAYER["ep_f"]]
                   + cp_f - np.minimum(cp_f, layer[:, SECONDS_LAYER["core_f"]]))
        extra = float((counts @ forward).max()) * 32                           # m = 32 micro-batches
        ratio = (full["step_time"] - none["step_time"]) / extra
        assert 0.95 <= ratio <= 1.0 + (spec.pp - 1) / 32 + 0.05, ratio
        checked += 1
    assert checked == 20


def test_fp8_prices_gemms_at_the_fp8_peak():
    model = ndcost.Model.from_catalog("llama3-70b")
    cluster = ndcost.Cluster("h100-sxm", 64)
    spec = ndcost.ExecSpec(dp=8, tp=8, global_batch_size=64, seq_length=4096, sequence_parallel=True)
    bf16 = seconds_estimate(model, spec, cluster)
    fp8 = seconds_estimate(model, spec.replace(precision="fp8"), cluster)
    assert fp8["step_time"] < bf16["step_time"]
    assert fp8["parts"]["fw_compute"] < 0.8 * bf16["parts"]["fw_compute"]


def test_overlap_hides_comm_only_up_to_its_window():
    model = ndcost.Model.from_catalog("llama3-70b")
    cluster = ndcost.Cluster("h100-sxm", 64)
    spec = ndcost.ExecSpec(dp=8, tp=8, global_batch_size=64, seq_length=4096, sequence_parallel=True)
    exposed = seconds_estimate(model, spec, cluster, overlap=Overlap(tp=0.0))
    hidden = seconds_estimate(model, spec, cluster, overlap=Overlap(tp=1.0))
    assert exposed["parts"]["tp_comm"] > 0.0
    # the layers' TP traffic hides under their GEMMs; the embedding's and the head's stays
    assert hidden["parts"]["tp_comm"] < 0.05 * exposed["parts"]["tp_comm"]
    assert seconds_estimate(model, spec.replace(tp_overlap=True), cluster)["step_time"] == hidden["step_time"]
    with pytest.raises(ndcost.SpecError, match="dp_gather"):
        Overlap(dp_gather=1.5)


def test_default_rates_cite_a_source_for_every_figure():
    assert set(DEFAULT_RATES) == set(ndcost.devices())
    for name, rates in DEFAULT_RATES.items():
        for field in dataclasses.fields(Rates):
            if field.name == "sources" or getattr(rates, field.name) is None:
                continue
            assert rates.sources.get(field.name), (name, field.name)
    assert Rates.for_device("not-a-part") is GENERIC_RATES
    assert Rates.for_device(ndcost.Cluster("a100-80g", 8)) is DEFAULT_RATES["a100-80g"]
    changed = DEFAULT_RATES["a100-80g"].replace(matmul_efficiency=0.5)
    assert changed.matmul_efficiency == 0.5 and changed.sources["matmul_efficiency"] == "override"
    with pytest.raises(ndcost.SpecError, match="hbm_efficiency"):
        changed.replace(hbm_efficiency=1.5)
    with pytest.raises(ndcost.SpecError, match="sm_count"):
        changed.replace(sm_count=0)


def test_rates_override_changes_the_estimate():
    model = ndcost.Model.from_catalog("llama3-8b")
    cluster = ndcost.Cluster("a100-80g", 8)
    spec = ndcost.ExecSpec(dp=8, global_batch_size=64, seq_length=4096, zero_stage=1)
    base = seconds_estimate(model, spec, cluster)
    slow = seconds_estimate(model, spec, cluster, rates=Rates.for_device("a100-80g").replace(matmul_efficiency=0.5))
    assert slow["step_time"] > base["step_time"]
    assert slow["mfu"] < base["mfu"]


def test_software_presets_are_sourced_and_validated():
    from ndcost.spec.rates import SOFTWARE_PRESETS

    for name, (figures, cited) in SOFTWARE_PRESETS.items():
        rates = Rates.for_software("a100-80g", name)
        for field_name, value in figures.items():
            assert getattr(rates, field_name) == value
            assert rates.sources[field_name] == cited[field_name]
            # each figure cites the framework's own code, docs or configs
            assert any(word in cited[field_name] for word in ("DeepSpeed", "Megatron", "NeMo", "torchtitan",
                                                               "Transformer Engine", "TE", "huggingface/transformers",
                                                               "pytorch/pytorch")), (name, field_name)
        # the silicon figures are the device's own
        assert rates.matmul_efficiency == DEFAULT_RATES["a100-80g"].matmul_efficiency
    today = DEFAULT_RATES["a100-80g"]
    assert today.grad_accumulation_fusion and today.zero3_fetch_bandwidth == 0.0
    assert not today.zero3_recompute_gather and not today.zero3_grad_all_reduce
    with pytest.raises(ndcost.SpecError, match="software"):
        Rates.for_software("a100-80g", "megatron-1999")
    with pytest.raises(ndcost.SpecError, match="zero3_fetch_bandwidth"):
        today.replace(zero3_fetch_bandwidth=-1.0)
    with pytest.raises(ndcost.SpecError, match="grad_accumulation_fusion"):
        today.replace(grad_accumulation_fusion=1)


def test_older_software_is_never_faster():
    """Unfused gradient accumulation and DeepSpeed 2021's ZeRO-3 fetch only add time."""
    from ndcost.tables.seconds import DEEPSPEED_2021

    model = ndcost.Model.from_catalog("llama3-8b")
    cluster = ndcost.Cluster("a100-80g", 16)
    for zero in (0, 1, 3):
        spec = ndcost.ExecSpec(dp=8, tp=2, global_batch_size=64, seq_length=4096, zero_stage=zero, recompute="full")
        today = seconds_estimate(model, spec, cluster)["step_time"]
        megatron = seconds_estimate(model, spec, cluster, rates=Rates.for_software(cluster, "megatron-2021"))
        deepspeed = seconds_estimate(model, spec, cluster, rates=Rates.for_software(cluster, "deepspeed-2021"),
                                     overlap=DEEPSPEED_2021)
        assert today < megatron["step_time"] <= deepspeed["step_time"]
        if zero == 3:
            assert deepspeed["parts"]["dp_comm"] > 2.0 * megatron["parts"]["dp_comm"]


def test_hopper_and_blackwell_gemms_run_at_their_sustained_rate():
    """A training step's GEMMs run at the power-saturated clock (MSMF), not the boost burst (MAMF):
    the H200 and B200 at their measured MSMF, the H100 / H800 at their MAMF times the H200's measured
    MSMF/MAMF, the GB200 / GB300 at theirs times the B200's; with the rate at the sustained clock the
    wave tail is each part's measured one. The A100 has no sustained measurement: its clock at its power limit
    stands for one."""
    h100, h200, b200 = DEFAULT_RATES["h100-sxm"], DEFAULT_RATES["h200"], DEFAULT_RATES["b200"]
    assert h200.matmul_efficiency == pytest.approx(708.5 / 989.0, rel=1e-12)
    assert h200.fp8_matmul_efficiency == pytest.approx(1288.7 / 1979.0, rel=1e-12)
    assert b200.matmul_efficiency == pytest.approx(1456.3 / 2250.0, rel=1e-12)
    assert h100.matmul_efficiency == pytest.approx(794.5 / 989.0 * 708.5 / 841.9, rel=1e-12)
    assert h100.fp8_matmul_efficiency == pytest.approx(1402.6 / 1979.0 * 1288.7 / 1491.9, rel=1e-12)
    assert DEFAULT_RATES["h800"].matmul_efficiency == h100.matmul_efficiency
    assert DEFAULT_RATES["gb200-nvl72"].matmul_efficiency == pytest.approx(1822.0 / 2500.0 * 1456.3 / 1770.9,
                                                                          rel=1e-12)
    assert (h100.gemm_wave_tail, h200.gemm_wave_tail, b200.gemm_wave_tail) == (0.10, 0.05, 0.35)
    for rates in (h100, h200, b200, DEFAULT_RATES["gb300-nvl72"]):
        assert "MSMF" in rates.sources["matmul_efficiency"] and "MSMF" in rates.sources["fp8_matmul_efficiency"]
    # attention kernels saturate the tensor cores too: the FlashAttention-3 paper's bursts at the same share
    assert h100.attention_efficiency == pytest.approx(0.55 * 708.5 / 841.9, rel=1e-12)
    assert h100.fa2_attention_efficiency == pytest.approx(0.35 * 708.5 / 841.9, rel=1e-12)
    # Blackwell's are cuDNN's measured bursts (tests/test_attention_rates.py) at the B200's sustained share
    assert "cudnn-frontend" in b200.sources["attention_efficiency"]
    # the A100 (no MSMF): its MAMF and FlashAttention-2's published share at its clock at the power limit, 1305 of
    # 1410 MHz (an estimate), with its measured wave tail
    a100 = DEFAULT_RATES["a100-80g"]
    assert a100.matmul_efficiency == pytest.approx(271.2 / 312.0 * 1305.0 / 1410.0, rel=1e-12)
    assert a100.attention_efficiency == pytest.approx(0.615 * 1305.0 / 1410.0, rel=1e-12)
    assert a100.gemm_wave_tail == 0.25 and "1305 MHz for A100" in a100.sources["matmul_efficiency"]


def test_grand_tetons_h100_prices_the_middle_of_its_stated_peak_interval():
    """torchtitan's H100s: peak 'between SXM and NVL' (its benchmark's footnote): the datasheet's dense
    peaks 989.4 and 835.5 bf16 TFLOP/s, 1978.9 and 1670.5 fp8; their middle."""
    from ndcost.io.run_facts import GRAND_TETON_H100

    device = ndcost.Cluster("h100-sxm", 8, **GRAND_TETON_H100).device
    assert device.peak_flops["bf16"] == pytest.approx(912.45e12, rel=1e-12)
    assert device.peak_flops["fp8"] == pytest.approx(1824.7e12, rel=1e-12)
    assert device.hbm_bandwidth == 2.4e12 and device.hbm_bytes == 96e9
