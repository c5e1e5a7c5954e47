"""ExecSpec.fp8_transpose_cache: whether the fp8 weights' transposes are kept across a step's micro-batches
(Transformer Engine) or made for each backward (DeepSeek-V3's framework), and the profile that says which DeepSeek
does (issue 25: a shipped run that ran fits)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import ndcost
from batch_cases import batch_memory_as_estimated
from ndcost.errors import SpecError
from ndcost.files import read_mapping
from ndcost.io.validation import BUILTIN_RUNS, build_row
from ndcost.tables.memory import static_layer_bytes

PROFILE = Path(__file__).parent / "data" / "deepseek_profile" / "train_fp8_transposes.json"
ROW = "deepseek_v3_pretrain_h800_2048gpu"


def _tiles(rows: int, cols: int) -> int:
    return math.ceil(rows / 128) * math.ceil(cols / 128)


def test_deepseeks_profile_transposes_every_fp8_weight_in_each_backward():
    """train.json's fp8 batched_transpose kernels, one set per layer of the pair's backward chunk (4 layers): their
    grids are DeepSeek-V3's weights (its config: hidden 7168, q_lora 1536, kv_lora 512, 128 heads of 128 + 64
    rope dims, v 128, experts 2048 wide; 4 local experts at EP 64) in 128x128 tiles. Its fp8 casts all run on
    token-shaped tensors (4096 tokens, or the routed tokens), so the weights are held in fp8 and only their
    transposes are made in the pair (a 4096x7168 weight -- the shared expert's gate and up -- would share a
    4096-token activation's grid, and is not told apart)."""
    model = ndcost.Model.from_catalog("deepseek-v3")
    h = model.hidden_size
    assert h == 7168
    heads, q_lora, kv_lora, nope, rope, v, width, local = 128, 1536, 512, 128, 64, 128, 2048, 256 // 64
    weights = {"q_a": _tiles(h, q_lora), "q_b": _tiles(q_lora, heads * (nope + rope)),
               "kv_a": _tiles(h, 640),  # kv_lora + rope = 576, padded to 640
               "kv_b": _tiles(kv_lora, heads * (nope + v)), "o": _tiles(heads * v, h),
               "shared_up": _tiles(2 * width, h), "shared_down": _tiles(width, h),
               "experts_up": local * _tiles(2 * width, h), "experts_down": local * _tiles(width, h)}
    assert kv_lora + rope == 576
    kernels = json.loads(PROFILE.read_text(encoding="utf-8"))["kernels"]
    transposes = [k for k in kernels if "cuda::batched_transpose" in k["name"] and "unsigned char" in k["name"]]
    grids = {}
    for k in transposes:
        grids[k["grid"][0]] = grids.get(k["grid"][0], 0) + 1
    expected = {}
    for tiles in weights.values():
        expected[tiles] = expected.get(tiles, 0) + 4             # once per layer, 4 layers
    assert grids == expected                                      # o and the experts' gate-and-up share 7168
    for k in kernels:
        if "per_token_cast_to_fp8" in k["name"]:
            assert k["grid"][0] == 4096 or k["grid"][0] > 20000, k["grid"]
        elif "channel_cast_and_transpose" in k["name"]:
            assert k["grid"][1] == 4096 // 128 or k["grid"][1] > 200, k["grid"]


def test_a_transpose_made_per_backward_holds_one_byte_less_per_weight_parameter():
    model = ndcost.Model.from_catalog("llama3-8b")
    kept = ndcost.ExecSpec(dp=8, precision="fp8", global_batch_size=64)
    made = kept.replace(fp8_transpose_cache=False)
    for k in range(len(model.kinds)):
        non_expert, routed, shared = model.kind_parameters(k)
        assert static_layer_bytes(model, made, k)[0] == pytest.approx(
            static_layer_bytes(model, kept, k)[0] - (non_expert + shared + routed), rel=1e-12)
        # fp8 weights held (param_bytes 1): TE's cache is the transpose alone, which made per backward is gone
        fp8_params = kept.replace(param_bytes=1)
        assert static_layer_bytes(model, fp8_params.replace(fp8_transpose_cache=False), k)[0] == pytest.approx(
            static_layer_bytes(model, kept.replace(fp8_weight_cache=False, param_bytes=1), k)[0], rel=1e-12)


def test_the_batch_prices_it_as_estimate_does(backend_name):
    model = ndcost.Model.from_catalog("mixtral-8x7b")
    cluster = ndcost.Cluster("h100-sxm", 64)
    cands = ndcost.Candidates.from_arrays(dp=8, tp=2, pp=4, ep=8, global_batch_size=256, seq_length=4096,
                                          precision="fp8", fp8_transpose_cache=[True, False])
    held = batch_memory_as_estimated(model, cands, cluster, backend_name)
    assert held[1] < held[0]


def test_off_without_a_kept_fp8_weight_is_refused():
    for kw in ({}, {"precision": "fp8", "fp8_weight_cache": False}):
        with pytest.raises(SpecError, match="fp8_transpose_cache.*be True unless precision is 'fp8' and "
                                            "fp8_weight_cache is True"):
            ndcost.ExecSpec(dp=8, global_batch_size=64, fp8_transpose_cache=False, **kw)
    model = ndcost.Model.from_catalog("llama3-8b")
    cands = ndcost.Candidates.from_arrays(dp=8, global_batch_size=64, precision=["fp8", "bf16"],
                                          fp8_transpose_cache=False)
    batch = ndcost.estimate_many(model, cands, ndcost.Cluster("h100-sxm", 8))
    assert np.isfinite(batch.step_time[0]) and not np.isfinite(batch.step_time[1])
    assert batch.reason_names()[1] == "fp8_transpose_cache" and "fp8_weight_cache" in batch.explain(1)


def test_the_deepseek_row_states_it_and_fits():
    doc = read_mapping(BUILTIN_RUNS["moe"], "a runs file")
    row = next(r for r in doc["runs"] if r["id"] == ROW)
    built = build_row(row, doc.get("hardware") or {}, BUILTIN_RUNS["moe"])
    assert built.spec.fp8_transpose_cache is False
    assert any("fp8 weight transposes made for each backward" in note for note in built.notes)
    e = ndcost.estimate(built.model, built.spec, built.cluster, rates=built.rates)
    assert e.fits and e.memory.headroom > 0
    kept = ndcost.estimate(built.model, built.spec.replace(fp8_transpose_cache=True), built.cluster, rates=built.rates)
    assert not kept.fits


def test_the_command_line_states_it(capsys):
    from ndcost.cli.main import main

    words = ["estimate", "llama3-8b", "--device", "h100-sxm", "--dp", "8", "--global-batch-size", "64",
             "--seq-length", "4096", "--json"]
    assert main(words + ["--precision", "fp8", "--fp8-transpose-cache", "off"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert main(words + ["--precision", "fp8"]) == 0
    kept = json.loads(capsys.readouterr().out)
    assert made["memory"]["peak_allocated"] < kept["memory"]["peak_allocated"]
    assert main(words + ["--fp8-transpose-cache", "off"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fp8" in err
    # --emit says that no launcher states it
    assert main(["search", "llama3-8b", "--devices", "8", "--device", "h100-sxm", "--global-batch-size", "64",
                 "--seq-length", "4096", "--precision", "fp8", "--fp8-transpose-cache", "off", "--tp", "1", "--pp",
                 "1", "--emit", "megatron"]) == 0
    assert "fp8_transpose_cache off (fp8 weight transposes made for each backward)" in capsys.readouterr().out
