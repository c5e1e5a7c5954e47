"""The pipeline layout a launch command states when the placement is not the even split."""
from __future__ import annotations

import pytest

import ndcost
from ndcost.io.emit import megatron_flags, torchtitan_toml
from ndcost.io.launch_layout import megatron_layout, needs_layout, torchtitan_fqns


def test_an_offset_is_stated_stage_by_stage():
    # 28 layers over 4 stages: 7 each, and the offset (-4, 2, 1, 1) gives 3, 9, 8, 8.
    model = ndcost.Model.from_catalog("qwen2.5-vl-7b")
    spec = ndcost.ExecSpec(dp=4, tp=2, pp=4, global_batch_size=256, seq_length=8192, offset=[-4, 2, 1, 1])
    assert megatron_layout(model, spec) == "E" + "t" * 3 + "|" + "t" * 9 + "|" + "t" * 8 + "|" + "t" * 8 + "L"
    flags = megatron_flags(model, spec)
    assert '--pipeline-model-parallel-layout "Ettt|ttttttttt|tttttttt|ttttttttL"' in flags
    fqns = torchtitan_fqns(model, spec)
    assert fqns[0] == ["tok_embeddings", "layers.0", "layers.1", "layers.2"]
    assert fqns[-1][-2:] == ["norm", "output"]
    assert "module_fqns_per_model_part = [[\"tok_embeddings\", \"layers.0\"" in torchtitan_toml(model, spec)


def test_the_even_split_states_no_layout():
    model = ndcost.Model.from_catalog("llama3-8b")
    spec = ndcost.ExecSpec(dp=2, tp=2, pp=4, vpp=2, global_batch_size=64, seq_length=4096)
    assert not needs_layout(model, spec)
    flags = megatron_flags(model, spec)
    assert "--pipeline-model-parallel-layout" not in flags
    assert "--num-virtual-stages-per-pipeline-rank 2" in flags
    assert "module_fqns_per_model_part" not in torchtitan_toml(model, spec)


@pytest.mark.parametrize("name, fields", [
    ("llama3-8b", dict(pp=4, vpp=2, pp_partition=(10, 8, 8, 6))),
    ("llama3-8b", dict(pp=4, vpp=2, pp_schedule="zero_bubble_v", pp_partition=(6, 8, 8, 10))),
    ("deepseek-v3", dict(pp=16, vpp=2, ep=8)),      # 61 + 1 MTP layers: no even split
    ("qwen2.5-vl-7b", dict(pp=4, offset=(-4, 2, 1, 1))),
])
def test_launch_order_is_model_order(name, fields):
    """Read virtual stage by virtual stage, the layout lists every layer once, in model order,
    the embedding first and the output last, whatever the schedule's stage order."""
    model = ndcost.Model.from_catalog(name)
    spec = ndcost.ExecSpec(dp=1, tp=1, global_batch_size=64, seq_length=4096, **fields)
    assert needs_layout(model, spec)
    stages = megatron_layout(model, spec).split("|")
    assert len(stages) == spec.pp * spec.vpp
    text = "".join(stages)
    assert text[0] == "E" and text[-1] == "L"
    assert text.count("t") == model.num_hidden_layers and text.count("m") == model.num_nextn_predict_layers
    names = [name for part in torchtitan_fqns(model, spec) for name in part]
    assert names == ["tok_embeddings", *(f"layers.{i}" for i in range(model.num_hidden_layers)), "norm", "output"]


def test_whether_a_layout_is_stated_follows_the_placement_not_the_fields():
    """An offset of zeros is the even split; MTP layers counted in the offset move layers even
    when the body divides (60 + 1 over 4 stages: 15, 16, 15, 14 + MTP), and then must be stated."""
    import dataclasses

    llama = ndcost.Model.from_catalog("llama3-8b")
    spec = ndcost.ExecSpec(dp=2, tp=1, pp=4, global_batch_size=64, seq_length=4096)
    assert not needs_layout(llama, spec.replace(offset=(0, 0, 0, 0)))
    mtp = dataclasses.replace(ndcost.Model.from_catalog("deepseek-v3"), num_hidden_layers=60)
    spec = ndcost.ExecSpec(dp=64, tp=1, pp=4, ep=8, global_batch_size=4096, seq_length=4096)
    assert megatron_layout(mtp, spec).split("|") == ["E" + "t" * 15, "t" * 16, "t" * 15, "t" * 14 + "mL"]
    assert needs_layout(mtp, spec)
    assert not needs_layout(mtp, spec.replace(mtp_in_offset=False))   # 15 each, the MTP after the last
