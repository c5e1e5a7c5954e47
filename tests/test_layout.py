"""Layout: ND's partition generator, model order, recompute per layer (docs/ND_MODEL.md §1.6)."""
from __future__ import annotations

import numpy as np
import pytest

from ndcost import ExecSpec, Model, RecomputeRange
from ndcost.tables.layout import build_layout


@pytest.fixture(scope="module")
def dense():
    return Model(name="t", hidden_size=64, num_hidden_layers=10, num_attention_heads=4, vocab_size=100,
                 intermediate_size=128)


def spec(**kw):
    kw.setdefault("micro_batch_num", 8)
    kw.setdefault("seq_length", 64)
    return ExecSpec(**kw)


def test_even_split_and_ends(dense):
    layout = build_layout(dense, spec(pp=2))
    assert layout.layers_per_stage().tolist() == [5, 5]
    assert (layout.emb_stage, layout.out_stage) == (0, 1)
    assert layout.stages[0][0][0] == -1 and layout.stages[1][0][-1] == -2


def test_remainder_goes_to_the_middle_stages(dense):
    # 10 layers on 4 stages: per = 2, remainder 2 -> stages 1 and 2 (nearest the middle)
    assert build_layout(dense, spec(pp=4)).layers_per_stage().tolist() == [2, 3, 3, 2]


def test_one_dimensional_offset(dense):
    # per = 10 // 2 = 5; offset (+1, -1) -> 6, 4
    assert build_layout(dense, spec(pp=2, offset=(1, -1))).layers_per_stage().tolist() == [6, 4]


def test_interleaved_model_order(dense):
    # pp 2, vpp 2 with offset: per = 10 // 4 = 2, offset (1,1) gives the last chunk of each stage 2 + 1
    layout = build_layout(dense, spec(pp=2, vpp=2, offset=(1, 1)))
    # model order: chunk 0 of stage 0 (layers 0,1), chunk 0 of stage 1 (2,3), chunk 1 of stage 0 (4,5,6), ...
    assert layout.stages[0][0] == (-1, 0, 1)
    assert layout.stages[1][0] == (2, 3)
    assert layout.stages[0][1] == (4, 5, 6)
    assert layout.stages[1][1] == (7, 8, 9, -2)


def test_zero_bubble_v_runs_the_second_chunk_backwards(dense):
    layout = build_layout(dense, spec(pp=2, vpp=2, pp_schedule="zero_bubble_v", offset=(1, 1)))
    assert layout.stages[1][1] == (4, 5, 6)   # the V turns on the last stage
    assert layout.stages[0][1][-1] == -2      # and ends, with the output layer, on stage 0
    assert layout.out_stage == 0


def test_recompute_ranges_in_model_order(dense):
    ranges = (RecomputeRange(first=0, count=3, option="full"),
              RecomputeRange(first=5, count=2, option="selective", switches={"attBMM": 0}))
    layout = build_layout(dense, spec(pp=2, recompute=ranges))
    assert layout.slot_option.tolist() == [0, 1, 2]
    assert layout.counts[0, 0, 0].tolist() == [2, 3, 0]      # stage 0: layers 0-4, three full
    assert layout.counts[1, 0, 0].tolist() == [3, 0, 2]      # stage 1: layers 5-9, two selective
    assert layout.slot_mask[2] == 0xFF & ~1


def test_per_stage_full_recompute_counts(dense):
    layout = build_layout(dense, spec(pp=2, full_recompute=(3, 1)))
    assert layout.counts[:, 0, 0, 1].tolist() == [3, 1]


def test_mtp_layers_follow_the_last_layer_and_take_its_kind():
    ds = Model.from_catalog("deepseek-v3")
    layout = build_layout(ds, ExecSpec(dp=1, pp=4, ep=1, micro_batch_num=8, seq_length=128))
    assert layout.counts.sum() == 62
    assert layout.mtp_stage_counts.tolist() == [0, 0, 0, 1]
    assert layout.counts[:, :, 0].sum() == 3    # the three dense layers
    assert layout.counts[0, 0, 0].sum() == 3    # all on the first stage


def test_layout_is_cached_and_read_only(dense):
    a = build_layout(dense, spec(pp=2))
    assert build_layout(dense, spec(pp=2)) is a
    with pytest.raises(ValueError):
        a.counts[0, 0, 0, 0] = 7.0
    assert isinstance(a.stage_counts(), np.ndarray)


@pytest.mark.parametrize("fields, nd_out, model_out", [
    # ND's scan stops at the empty stage 1; the model's last layer runs on stage 3
    (dict(pp=4, offset=(2, -2, 1, 1)), 0, 3),
    # chunk 1 of stage 1 is empty: the last layer in model order is stage 0's chunk 1, and ND's scan agrees
    (dict(pp=2, vpp=2, offset=((1, 1), (2, -2))), 0, 0),
])
def test_the_output_layer_after_an_empty_cell(dense, fields, nd_out, model_out):
    layout = build_layout(dense, spec(**fields))
    assert layout.out_stage == model_out
    assert build_layout(dense, spec(**fields), nd=True).out_stage == nd_out


def test_nd_places_mtp_duplicates_and_ends_in_its_last_cell():
    ds = Model.from_catalog("deepseek-v3")
    # 61 body layers (the MTP layer outside the offset) on 4 stages of 15: stage 1 empty, the scan stops
    # at stage 0, which takes the output layer and the MTP layer's duplicate; model order then numbers
    # the duplicate 31 and stage 2's last layer 61, the MTP index
    s = ExecSpec(dp=1, pp=4, ep=1, micro_batch_num=8, seq_length=128, mtp_in_offset=False, offset=(16, -15, 15, -15))
    layout = build_layout(ds, s, nd=True)
    assert layout.out_stage == 0 and layout.mtp_stage_counts.tolist() == [0, 0, 1, 0]
    assert layout.layers_per_stage().tolist() == [32, 0, 30, 0]
    assert layout.stages[0][0][0] == -1 and layout.stages[0][0][-1] == -2
    physical = build_layout(ds, s)     # the MTP layer and the output after the model's last layer
    assert physical.out_stage == 2 and physical.mtp_stage_counts.tolist() == [0, 0, 1, 0]
    assert physical.layers_per_stage().tolist() == [31, 0, 31, 0]


def test_nd_with_emb_out_in_offset_takes_the_first_and_last_slots(dense):
    # 12 placed (10 + embedding + output) on 2 stages of 6: the embedding and output replace a slot each
    layout = build_layout(dense, spec(pp=2, emb_out_in_offset=True), nd=True)
    assert layout.layers_per_stage().tolist() == [5, 5]
    assert layout.stages[0][0][0] == -1 and layout.stages[1][0][-1] == -2


def test_nd_and_physical_placements_agree_where_nd_places_layers_where_they_run():
    """Every layer placed (an offset, or layers that divide evenly), no empty cell, not zero_bubble_v:
    ND's generator and the physical placement are the same layout, kinds, options and ends included."""
    rng = np.random.default_rng(26)
    models = [Model.from_catalog(name) for name in ("deepseek-v3", "qwen3-next-80b-a3b", "llama3-8b")]
    checked = 0
    for _ in range(120):
        model = models[int(rng.integers(len(models)))]
        pp, vpp = int(rng.choice((2, 3, 4))), int(rng.choice((1, 2)))
        mtp_in = bool(rng.random() < 0.7)
        lay = model.num_hidden_layers + (model.num_nextn_predict_layers if mtp_in else 0)
        per, rest = divmod(lay, pp * vpp)
        extra = [1] * rest + [0] * (pp * vpp - rest)
        rng.shuffle(extra)
        offset = tuple(tuple(extra[v * pp:(v + 1) * pp]) for v in range(vpp))
        recompute = rng.choice(["none", "full", "ranges", "per_stage"])
        fields = dict(pp=pp, vpp=vpp, offset=offset if vpp > 1 else offset[0], mtp_in_offset=mtp_in,
                      micro_batch_num=8, seq_length=4096)
        if recompute == "ranges":
            fields["recompute"] = (RecomputeRange(first=int(rng.integers(0, 10)), count=7, option="full"),)
        elif recompute == "per_stage":
            fields["full_recompute"] = tuple(int(x) for x in rng.integers(0, per + 1, size=pp))
        else:
            fields["recompute"] = str(recompute)
        s = ExecSpec(**fields)
        nd, physical = build_layout(model, s, nd=True), build_layout(model, s)
        assert np.array_equal(nd.counts, physical.counts)
        assert (nd.emb_stage, nd.emb_chunk, nd.out_stage, nd.out_chunk) == (
            physical.emb_stage, physical.emb_chunk, physical.out_stage, physical.out_chunk)
        assert nd.mtp_stage_counts.tolist() == physical.mtp_stage_counts.tolist()
        assert nd.positions == physical.positions and nd.stages == physical.stages
        checked += 1
    assert checked == 120
