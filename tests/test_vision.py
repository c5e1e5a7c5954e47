"""A vision-language model: its vision tower as a spec, from config.json, in the layout and the rules."""
from __future__ import annotations

import dataclasses

import pytest

import ndcost
from ndcost import ExecSpec, Model
from ndcost.errors import SpecError
from ndcost.tables.layout import build_layout
from ndcost.spec.model_catalog import catalog_entry
from ndcost.tables.joint_rules import explain, validate
from ndcost.spec.vision import DEFAULT_VISION_TOKENS, VisionTower

VL = "qwen2.5-vl-7b"


def _tower(**changes):
    fields = dict(depth=4, hidden_size=64, num_heads=4, intermediate_size=96, out_hidden_size=128)
    fields.update(changes)
    return VisionTower(**fields)


def _vlm(**tower_changes):
    return Model(name="tiny-vl", hidden_size=128, num_hidden_layers=8, num_attention_heads=8, vocab_size=1000,
                 intermediate_size=256, family="qwen2", attention_bias=True, vision=_tower(**tower_changes))


# --------------------------------------------------------------------------- the spec


def test_block_parameters_by_hand():
    t = _tower()
    h, w = 64, 96
    norms = 2 * h                                  # two RMSNorms
    attention = h * 3 * h + 3 * h + h * h + h      # qkv and proj, with biases
    mlp = 3 * h * w + 2 * w + h                    # gate, up (with biases), down (with bias)
    assert t.block_parameters() == norms + attention + mlp
    gelu = _tower(gated_ffn=False, norm="layernorm")
    assert gelu.block_parameters() == 2 * 2 * h + attention + 2 * h * w + w + h


def test_patch_embedding_and_merger_by_hand():
    t = _tower()
    assert t.patch_embed_parameters() == 3 * 2 * 14 * 14 * 64       # Conv3d, no bias
    wide = 64 * 4                                                     # 2 x 2 patches concatenated
    assert t.merger_parameters() == 64 + wide * wide + wide + wide * 128 + 128


def test_qwen25_vl_tower_counts():
    tower = Model.from_catalog(VL).vision
    # 32 blocks of 19,702,200: norms 2,560; qkv 4,919,040; proj 1,639,680; MLP 8,762,040 + 4,378,880.
    assert tower.block_parameters() == 19_702_200
    assert tower.patch_embed_parameters() == 1_505_280
    assert tower.merger_parameters() == 1280 + 5120 * 5120 + 5120 + 5120 * 3584 + 3584
    # ~675M, the Qwen2-VL report's ViT size (arXiv 2409.12191 §2.1), within 0.3%.
    assert tower.total_parameters() == pytest.approx(675e6, rel=0.003)


def test_qwen2_vl_tower_is_the_675m_vit():
    # Qwen2-VL's vision_config names: embed_dim is the block width, hidden_size the text's.
    config = {"model_type": "qwen2_vl", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
              "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
              "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16,
                                "hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
                                "temporal_patch_size": 2, "in_chans": 3}}
    model = Model.from_hf_config(config, name="qwen2-vl-7b")
    tower = model.vision
    assert (tower.hidden_size, tower.intermediate_size, tower.out_hidden_size) == (1280, 5120, 3584)
    assert not tower.gated_ffn and tower.norm == "layernorm" and tower.window_tokens == 0
    assert tower.total_parameters() == pytest.approx(675e6, rel=0.003)
    assert [k.name for k in model.kinds] == ["dense", "vision"]
    assert model.kinds[1].ops.ffMM == 2.0   # ND's vision profile: a 2-matmul MLP


def test_nested_text_config_reads_the_same_model():
    flat = catalog_entry(VL)["config"]
    text_keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "vocab_size", "tie_word_embeddings")
    nested = {k: v for k, v in flat.items() if k not in text_keys}
    nested["text_config"] = {k: flat[k] for k in text_keys}
    assert Model.from_hf_config(nested, name=VL) == Model.from_catalog(VL)


def test_catalog_vlm_shape():
    m = Model.from_catalog(VL)
    assert m.family == "qwen2" and m.attention_bias
    assert [k.name for k in m.kinds] == ["dense", "vision_window", "vision"]
    assert [k.module for k in m.kinds] == ["text", "vision", "vision"]
    order = m.vision_kinds_in_order
    assert len(order) == 32 and [i for i, k in enumerate(order) if k == 2] == [7, 15, 23, 31]
    assert m.vision.window_tokens == 64 and m.vision.merged_tokens == DEFAULT_VISION_TOKENS // 4 == 1024
    assert m.layer_kinds_in_order == (0,) * 28          # the text model's order is the text's only
    assert m.kind_parameters(1) == (19_702_200, 0, 0)
    assert m.parameter_count().total == pytest.approx(8.285e9, rel=0.01)
    assert Model.from_dict(m.to_dict()) == m
    assert m.describe()["kinds"][1]["layers"] == 28 and m.describe()["kinds"][2]["layers"] == 4


def test_with_vision_tokens():
    m = Model.from_catalog(VL)
    n = m.with_vision_tokens(16384)
    assert n.vision.tokens == 16384 and n.vision.merged_tokens == 4096 and m.vision.tokens == DEFAULT_VISION_TOKENS
    with pytest.raises(SpecError, match="'tokens' parameter of VisionTower must be a multiple of"):
        m.with_vision_tokens(4097)
    with pytest.raises(SpecError, match="'vision' parameter of Model must be set"):
        Model.from_catalog("llama3-8b").with_vision_tokens(1024)


@pytest.mark.parametrize("changes, parameter", [
    (dict(num_heads=5), "num_heads"),
    (dict(depth=0), "depth"),
    (dict(window_size=100), "window_size"),
    (dict(fullatt_block_indexes=(9,)), "fullatt_block_indexes"),
    (dict(fullatt_block_indexes=(1, 1)), "fullatt_block_indexes"),
    (dict(norm="batchnorm"), "norm"),
])
def test_bad_tower_fields_name_the_parameter(changes, parameter):
    with pytest.raises(SpecError, match=f"'{parameter}' parameter of VisionTower"):
        _tower(**changes)


def test_tower_must_project_to_the_text_width():
    with pytest.raises(SpecError, match="'vision' parameter of Model must project to the text model's hidden_size"):
        Model(name="x", hidden_size=256, num_hidden_layers=2, num_attention_heads=4, vocab_size=10,
              intermediate_size=8, vision=_tower())


def test_missing_vision_config_is_refused():
    config = dict(catalog_entry(VL)["config"])
    del config["vision_config"]
    with pytest.raises(SpecError, match="'vision_config' parameter"):
        Model.from_hf_config(config)


# --------------------------------------------------------------------------- layout


def _spec(**changes):
    fields = dict(dp=2, tp=2, pp=4, micro_batch_size=1, global_batch_size=32, seq_length=4096)
    fields.update(changes)
    return ExecSpec(**fields)


@pytest.mark.parametrize("recompute, option", [("none", 0), ("full", 1), ("selective", 2)])
def test_vision_blocks_run_where_the_embedding_runs(recompute, option):
    m = Model.from_catalog(VL)
    layout = build_layout(m, _spec(recompute=recompute))
    vision = layout.counts[:, :, 1:, :]
    assert vision.sum() == 32 and vision[layout.emb_stage, layout.emb_chunk].sum() == 32
    slots = [o for o in range(len(layout.slot_option)) if vision[..., o].sum()]
    assert [int(layout.slot_option[o]) for o in slots] == [option]
    assert layout.stages[0][0][:33] == (-3,) * 32 + (-1,)      # the tower, then the embedding
    assert len(layout.positions) == 28                          # model order: the text's layers
    assert layout.counts[:, :, 0, :].sum() == 28


def test_per_stage_and_range_recompute_leave_the_tower_plain():
    m = Model.from_catalog(VL)
    layout = build_layout(m, _spec(recompute=(ndcost.RecomputeRange(0, 7, "full"),)))
    vision = layout.counts[:, :, 1:, :]
    assert all(int(layout.slot_option[o]) == 0 for o in range(vision.shape[-1]) if vision[..., o].sum())


# --------------------------------------------------------------------------- rules


def test_tp_must_divide_the_tower_heads():
    m = _vlm(num_heads=2, hidden_size=64)
    spec = ExecSpec(dp=1, tp=4, pp=1, micro_batch_size=1, global_batch_size=4, seq_length=128)
    with pytest.raises(SpecError, match=r"'tp' parameter of ExecSpec must divide the vision tower's num_heads \(2\)"):
        validate(m, spec)
    assert any("vision tower's num_heads" in line for line in explain(m, spec))


def test_tower_tokens_follow_the_sequence_rules():
    m = _vlm(tokens=4 * 3)   # 12 patches
    ring = ExecSpec(dp=1, tp=1, pp=1, cp=4, micro_batch_size=1, global_batch_size=4, seq_length=128)
    with pytest.raises(SpecError, match=r"'vision.tokens' parameter of Model must be divisible by 2\*cp \(= 8\)"):
        validate(m, ring)


def test_seq1f1b_is_refused_with_a_tower():
    m = Model.from_catalog(VL)
    spec = _spec(pp_schedule="seq1f1b", seq_split=2)
    with pytest.raises(SpecError, match="'pp_schedule' parameter of ExecSpec must not be 'seq1f1b'"):
        validate(m, spec)


@pytest.mark.parametrize("spec", [
    _spec(), _spec(pp_schedule="seq1f1b", seq_split=2),
    ExecSpec(dp=1, tp=1, pp=1, cp=4, micro_batch_size=1, global_batch_size=4, seq_length=128),
    ExecSpec(dp=1, tp=4, pp=1, micro_batch_size=1, global_batch_size=4, seq_length=128),
])
def test_batch_reasons_agree_with_validate(spec):
    from ndcost.price.candidates import Candidates
    from ndcost.tables.reasons import REASON_TABLE

    for model in (Model.from_catalog(VL), _vlm(num_heads=2, hidden_size=64, tokens=12)):
        cands = Candidates.from_specs([spec])
        batch = ndcost.estimate_many(model, cands, "h100-sxm", units="nd")
        broken = explain(model, spec)
        reason = REASON_TABLE[int(batch.reason[0])].name
        assert (reason in ("ok", "no_fit")) == (not broken), (reason, broken)


def test_tower_field_is_hashable_and_frozen():
    m = Model.from_catalog(VL)
    assert hash(m) == hash(Model.from_dict(m.to_dict()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.vision.depth = 3
