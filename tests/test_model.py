"""Model, LayerKind, OpCounts, ParamCount: hand-counted parameters, the layer
stack, and validation messages."""
from __future__ import annotations

import dataclasses
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndcost.errors import SpecError
from ndcost.spec.layer_kinds import LayerKind, OpCounts
from ndcost.spec.model import Model
from ndcost.spec.model_parameters import ParamCount
from ndcost.spec.model_validation import FAMILIES


def tiny_llama(**overrides) -> Model:
    fields = dict(
        name="tiny",
        hidden_size=8,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=4,
        intermediate_size=16,
        vocab_size=10,
    )
    fields.update(overrides)
    return Model(**fields)


def tiny_mla_moe(**overrides) -> Model:
    fields = dict(
        name="tiny-mla",
        hidden_size=8,
        num_hidden_layers=2,
        num_attention_heads=2,
        vocab_size=10,
        intermediate_size=16,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=6,
        shared_expert_intermediate_size=6,
        first_k_dense_replace=1,
        q_lora_rank=4,
        kv_lora_rank=4,
        qk_rope_head_dim=2,
        qk_nope_head_dim=2,
        v_head_dim=3,
        num_nextn_predict_layers=1,
        family="deepseek_v3",
    )
    fields.update(overrides)
    return Model(**fields)


def tiny_hybrid(**overrides) -> Model:
    fields = dict(
        name="tiny-next",
        hidden_size=8,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=4,
        vocab_size=10,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=6,
        shared_expert_intermediate_size=6,
        shared_expert_gate=True,
        qk_norm=True,
        attn_output_gate=True,
        layer_types=("linear_attention", "full_attention", "linear_attention", "full_attention"),
        linear_num_key_heads=1,
        linear_key_head_dim=2,
        linear_num_value_heads=2,
        linear_value_head_dim=2,
        linear_conv_kernel_dim=3,
        family="qwen3_next",
    )
    fields.update(overrides)
    return Model(**fields)


# --------------------------------------------------------------------------- OpCounts / LayerKind


def test_op_count_profiles_match_nd_reference():
    # docs/ND_MODEL.md §1.5, order attMM/attBMM/ffMM/softmax/dropout/normOp/gather/headCast/ffAct/linrec
    assert OpCounts.full_attention().as_tuple() == (4, 2, 3, 1, 0, 2, 4, 1, 1, 0)
    assert OpCounts.linear_attention().as_tuple() == (4, 0, 3, 0, 0, 2, 4, 0, 1, 1)
    assert OpCounts.full_attention(gated_ffn=False).ffMM == 2.0
    assert OpCounts.linear_attention(gated_ffn=False).ffMM == 2.0
    counts = OpCounts(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
    assert all(isinstance(v, float) for v in counts.as_tuple())
    assert list(counts.as_dict()) == [
        "attMM", "attBMM", "ffMM", "softmax", "dropout", "normOp", "gather", "headCast", "ffAct", "linrec",
    ]


def test_op_counts_and_layer_kind_reject_bad_values():
    with pytest.raises(SpecError, match=re.escape("The 'softmax' parameter of OpCounts must be a finite number >= 0. Got -1 instead.")):
        OpCounts(4, 2, 3, -1, 0, 2, 4, 1, 1, 0)
    with pytest.raises(SpecError, match=re.escape("The 'attention' parameter of LayerKind must be one of 'full', 'mla', 'linear', 'mamba', 'none', 'mamba1'. Got 'sparse' instead.")):
        LayerKind("x", "sparse", "dense", OpCounts.full_attention())
    with pytest.raises(SpecError, match=re.escape("The 'ops' parameter of LayerKind must be an OpCounts.")):
        LayerKind("x", "full", "dense", (4, 2, 3, 1, 0, 2, 4, 1, 1, 0))


# --------------------------------------------------------------------------- hand-counted parameters


def test_tiny_dense_parameters_by_hand():
    m = tiny_llama()
    # q_proj 8*(2*4)=64, k_proj 8*(1*4)=32, v_proj 32, o_proj (2*4)*8=64 -> 192
    # two RMSNorms 2*8=16; SwiGLU 3*8*16=384 -> one layer 592
    assert m.kind_parameters(0) == (592, 0, 0)
    # 2 layers 1184 + embedding 10*8=80 + head 80 + final norm 8 = 1352
    assert m.embedding_parameters() == 80
    assert m.output_parameters() == 80
    assert m.final_norm_parameters() == 8
    assert m.parameter_count() == ParamCount(total=1352, active=1352)
    # tied: the head disappears (1352 - 80)
    assert tiny_llama(tie_word_embeddings=True).parameter_count().total == 1272
    # attention_bias: q 8 + k 4 + v 4 + o 8 = 24 more per layer; llama mlp_bias: gate 16 + up 16 + down 8 = 40
    assert tiny_llama(attention_bias=True).kind_parameters(0)[0] == 592 + 24
    assert tiny_llama(mlp_bias=True).kind_parameters(0)[0] == 592 + 40
    # qwen2 puts biases on q/k/v only: 8 + 4 + 4 = 16
    assert tiny_llama(attention_bias=True, family="qwen2").kind_parameters(0)[0] == 592 + 16
    # QK-norm: two RMSNorms over head_dim 4 -> 8
    assert tiny_llama(qk_norm=True).kind_parameters(0)[0] == 592 + 8
    # output gate doubles q_proj: 64 more
    assert tiny_llama(attn_output_gate=True).kind_parameters(0)[0] == 592 + 64


def test_tiny_moe_parameters_by_hand():
    m = tiny_llama(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=6, qk_norm=True,
        tie_word_embeddings=True, family="qwen3_moe", intermediate_size=None,
    )
    # attention 192 + qk norms 8 + layer norms 16 + router 4*8=32 -> non-expert 248
    # routed: 4 experts * 3*8*6 (=144) = 576; no shared expert
    assert m.kind_parameters(0) == (248, 576, 0)
    # total 2*(248+576)=1648 + embedding 80 + tied head 0 + final norm 8 = 1736
    # active 2*(248 + 2*144)=1072 + 88 = 1160
    assert m.parameter_count() == ParamCount(total=1736, active=1160)


def test_tiny_mla_moe_mtp_parameters_by_hand():
    m = tiny_mla_moe()
    assert m.head_dim == 3  # MLA: head_dim defaults to v_head_dim (ND's deepseek profile)
    # MLA: q_a 8*4=32, q_a_norm 4, q_b 4*2*(2+2)=32, kv_a 8*(4+2)=48, kv_a_norm 4,
    #      kv_b 4*2*(2+3)=40, o 2*3*8=48 -> 208; + two layer norms 16 -> 224
    # dense kind: + SwiGLU 3*8*16=384 -> 608
    assert m.kind_parameters(0) == (608, 0, 0)
    # moe kind: 224 + router 32 + e_score_correction_bias 4 = 260; routed 4*144=576; shared 3*8*6=144
    assert m.kind_parameters(1) == (260, 576, 144)
    # total 608 + 980 + embedding 80 + head 80 + final norm 8 = 1756
    # active 608 + (260 + 2*144 + 144) + 168 = 1468
    assert m.parameter_count() == ParamCount(total=1756, active=1468)
    # MTP: hnorm 8 + enorm 8 + shared_head.norm 8 + eh_proj 2*8*8=128 = 152; copies of embedding+head +160
    assert m.mtp_extra_parameters() == 152
    assert m.mtp_extra_parameters(include_shared_copies=True) == 312
    assert m.mtp_layer_parameters() == 980
    # with MTP: total 1756 + 980 + 152; active 1468 + 692 + 152
    assert m.parameter_count(include_mtp=True) == ParamCount(total=2888, active=2312)
    # without query compression q_proj is 8*2*(2+2)=64 instead of 32+4+32=68
    assert tiny_mla_moe(q_lora_rank=0).kind_parameters(0)[0] == 608 - 4


def test_tiny_hybrid_parameters_by_hand():
    m = tiny_hybrid()
    linear, full = m.kinds
    assert (linear.name, linear.attention, linear.ffn) == ("linear_moe", "linear", "moe")
    assert (full.name, full.attention, full.ffn) == ("full_moe", "full", "moe")
    # gated DeltaNet: key_dim 1*2=2, value_dim 2*2=4; in_proj_qkvz 8*(2*2+2*4)=96, in_proj_ba 8*2*2=32,
    # conv1d (2*2+4)*3=24, dt_bias + A_log 2+2=4, norm 2, out_proj 4*8=32 -> 190
    # + layer norms 16 + router 32 + shared_expert_gate 8 -> 246; routed 576; shared 144
    assert m.kind_parameters(0) == (246, 576, 144)
    # gated attention: q 8*(2*4*2)=128, k 32, v 32, o 64, qk norms 8 -> 264; + 56 -> 320
    assert m.kind_parameters(1) == (320, 576, 144)
    # total 2*(246+720) + 2*(320+720) + 80 + 80 + 8 = 4180
    # active 2*(246+288+144) + 2*(320+288+144) + 168 = 3028
    assert m.parameter_count() == ParamCount(total=4180, active=3028)


def test_tiny_gpt2_style_parameters_by_hand():
    m = Model(
        name="tiny-gpt", hidden_size=8, num_hidden_layers=2, num_attention_heads=2, vocab_size=10,
        intermediate_size=32, learned_position_embeddings=6, tie_word_embeddings=True, gated_ffn=False,
        norm="layernorm", attention_bias=True, mlp_bias=True, family="gpt2",
    )
    # c_attn 8*24+24=216, c_proj 8*8+8=72, ln_1 + ln_2 2*(8+8)=32, c_fc 8*32+32=288, c_proj 32*8+8=264
    # -> 872 = 12h^2 + 13h
    assert m.kind_parameters(0) == (872, 0, 0)
    # wte 10*8 + wpe 6*8 = 128; tied head 0; ln_f 16 -> 2*872 + 144 = 1888
    assert m.embedding_parameters() == 128
    assert m.parameter_count().total == 1888
    assert m.kinds[0].ops.ffMM == 2.0


# --------------------------------------------------------------------------- stack


def test_dense_model_has_one_kind():
    m = tiny_llama()
    assert [k.name for k in m.kinds] == ["dense"]
    assert m.kinds[0].attention == "full"
    assert m.layer_kinds_in_order == (0, 0)
    assert not m.is_moe and not m.is_mla and not m.has_linear_attention
    assert m.num_layers_with_mtp == 2
    assert m.num_shared_experts == 0


def test_mla_moe_kinds_and_mtp_order():
    m = tiny_mla_moe()
    assert [(k.name, k.attention, k.ffn) for k in m.kinds] == [("dense", "mla", "dense"), ("moe", "mla", "moe")]
    # 1 dense body layer, 1 moe body layer, then the MTP layer repeating the last body kind
    assert m.layer_kinds_in_order == (0, 1, 1)
    assert m.kind_counts() == ((1, 0), (1, 1))
    assert m.num_layers_with_mtp == 3
    assert m.num_shared_experts == 1


def test_mixed_stack_kind_names_follow_first_appearance():
    m = tiny_hybrid()
    assert m.layer_kinds_in_order == (0, 1, 0, 1)
    m = tiny_hybrid(layer_types=("full_attention", "linear_attention", "linear_attention", "full_attention"))
    assert [k.name for k in m.kinds] == ["full_moe", "linear_moe"]
    assert m.layer_kinds_in_order == (0, 1, 1, 0)
    # a hybrid model with a dense prefix gets four-way names
    m = tiny_hybrid(first_k_dense_replace=1, intermediate_size=12)
    assert [k.name for k in m.kinds] == ["linear_dense", "full_moe", "linear_moe"]


def test_layer_types_all_full_keeps_plain_names():
    m = tiny_llama(layer_types=["full_attention", "full_attention"])
    assert m.layer_types == ("full_attention", "full_attention")  # list normalised to a tuple
    assert [k.name for k in m.kinds] == ["dense"]


def test_model_is_frozen_hashable_and_round_trips():
    m = tiny_hybrid()
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.hidden_size = 16
    assert hash(m) == hash(tiny_hybrid())
    assert Model.from_dict(m.to_dict()) == m
    assert Model.from_dict({**tiny_llama().to_dict(), "name": "ignored"}, name="renamed").name == "renamed"
    # normalised defaults
    m = Model(name="d", hidden_size=64, num_hidden_layers=1, num_attention_heads=4, vocab_size=3, intermediate_size=5)
    assert (m.num_key_value_heads, m.head_dim) == (4, 16)


def test_describe_is_json_and_consistent():
    m = tiny_mla_moe()
    d = m.describe()
    json.dumps(d)
    assert d["parameters"]["total"] == 1756
    assert d["parameters"]["mtp_extra"] == 152
    assert [(k["name"], k["layers"], k["mtp_layers"]) for k in d["kinds"]] == [("dense", 1, 0), ("moe", 1, 1)]
    assert d["layer_order"] == ["dense", "moe", "moe"]
    assert d["kinds"][1]["parameters_per_layer"] == {"non_expert": 260, "routed": 576, "shared": 144}
    assert d["dims"]["hidden_size"] == 8


# --------------------------------------------------------------------------- validation


def _msg(parameter, rule, value, owner="Model"):
    stop = "" if rule.endswith("?") else "."       # a did-you-mean question takes no full stop (ndcost.errors)
    return "^" + re.escape(f"The {parameter!r} parameter of {owner} must {rule}{stop} Got {value!r} instead.") + "$"


BAD_MODELS = [
    (lambda: tiny_llama(hidden_size=0), _msg("hidden_size", "be an integer >= 1", 0)),
    (lambda: tiny_llama(num_attention_heads=True), _msg("num_attention_heads", "be an integer >= 1", True)),
    (lambda: tiny_llama(vocab_size="10"), _msg("vocab_size", "be an integer >= 1", "10")),
    (lambda: tiny_llama(head_dim=4.0), _msg("head_dim", "be an integer >= 1", 4.0)),
    (lambda: tiny_llama(num_experts=-1), _msg("num_experts", "be an integer >= 0", -1)),
    (lambda: tiny_llama(name=""), _msg("name", "be a non-empty string", "")),
    (lambda: tiny_llama(num_key_value_heads=3, num_attention_heads=8), _msg("num_key_value_heads", "divide num_attention_heads (8)", 3)),
    (lambda: tiny_llama(norm="batchnorm"), _msg("norm", "be one of 'rmsnorm', 'layernorm'", "batchnorm")),
    (lambda: tiny_llama(family="bert"), _msg("family", f"be one of {', '.join(map(repr, FAMILIES))}", "bert")),
    (lambda: tiny_llama(qk_norm=1), _msg("qk_norm", "be True or False", 1)),
    (lambda: tiny_llama(intermediate_size=None), _msg("intermediate_size", "be set (the dense FFN width) when a layer has a dense FFN", None)),
    (lambda: tiny_llama(num_experts=4, num_experts_per_tok=5, moe_intermediate_size=6),
     _msg("num_experts_per_tok", "be in [1, num_experts (4)] for a MoE model", 5)),
    (lambda: tiny_llama(num_experts=4, num_experts_per_tok=0, moe_intermediate_size=6),
     _msg("num_experts_per_tok", "be in [1, num_experts (4)] for a MoE model", 0)),
    (lambda: tiny_llama(num_experts=4, num_experts_per_tok=2),
     _msg("moe_intermediate_size", "be set (the routed expert width) when num_experts > 0", None)),
    (lambda: tiny_llama(num_experts_per_tok=2), _msg("num_experts_per_tok", "be 0 when num_experts is 0 (a dense model)", 2)),
    (lambda: tiny_mla_moe(first_k_dense_replace=3), _msg("first_k_dense_replace", "be <= num_hidden_layers (2)", 3)),
    (lambda: tiny_hybrid(shared_expert_intermediate_size=0),
     _msg("shared_expert_gate", "be False when there is no shared expert (shared_expert_intermediate_size = 0)", True)),
    (lambda: tiny_hybrid(layer_types=("linear_attention", "full_attention")),
     _msg("layer_types", "have one entry per body layer (num_hidden_layers = 4); its length", 2)),
    (lambda: tiny_hybrid(layer_types=("linear_attention", "mamba2", "linear_attention", "full_attention")),
     _msg("layer_types", "hold only 'full_attention', 'linear_attention', 'sliding_attention', 'chunked_attention', "
          "'mamba1', 'mamba', 'attention', 'mlp', 'moe'", "mamba2")),
    (lambda: tiny_hybrid(layer_types=("linear_attention", "sliding_attention", "linear_attention", "full_attention")),
     _msg("sliding_window", "be an integer >= 1 when a layer is sliding_attention", 0)),
    (lambda: tiny_hybrid(layer_types="full_attention"), _msg("layer_types", "be a list of layer type names", "full_attention")),
    (lambda: tiny_hybrid(linear_conv_kernel_dim=0),
     _msg("linear_conv_kernel_dim", "be an integer >= 1 when a layer is linear_attention", 0)),
    (lambda: tiny_hybrid(linear_num_key_heads=2, linear_num_value_heads=3),
     _msg("linear_num_value_heads", "be a multiple of linear_num_key_heads (2)", 3)),
    (lambda: tiny_mla_moe(v_head_dim=0), _msg("v_head_dim", "be an integer >= 1 when kv_lora_rank > 0 (MLA)", 0)),
    (lambda: tiny_llama(q_lora_rank=4), _msg("q_lora_rank", "be 0 unless kv_lora_rank > 0 (MLA)", 4)),
]


@pytest.mark.parametrize("build, message", BAD_MODELS)
def test_bad_model_raises_spec_error_with_exact_message(build, message):
    with pytest.raises(SpecError, match=message):
        build()


def test_spec_error_is_a_value_error_with_fields():
    with pytest.raises(ValueError) as info:
        tiny_llama(hidden_size=-2)
    err = info.value
    assert (err.parameter, err.owner, err.value) == ("hidden_size", "Model", -2)


def test_from_dict_rejects_unknown_and_missing_keys():
    data = tiny_llama().to_dict()
    data["hiden_size"] = data.pop("hidden_size")
    with pytest.raises(SpecError, match=_msg("hiden_size", "be a known Model field; did you mean 'hidden_size'?", 8)):
        Model.from_dict(data)
    with pytest.raises(SpecError, match=_msg("zzz", "be a known Model field", 1)):
        Model.from_dict({**tiny_llama().to_dict(), "zzz": 1})
    data = tiny_llama().to_dict()
    del data["vocab_size"]
    with pytest.raises(SpecError, match=_msg("vocab_size", "be present", None)):
        Model.from_dict(data)
    with pytest.raises(SpecError, match=_msg("data", "be a mapping of Model fields", [1], owner="Model.from_dict")):
        Model.from_dict([1])


def test_kind_parameters_rejects_bad_index():
    with pytest.raises(SpecError, match=_msg("kind_index", "be an integer in [0, 0]", 1, owner="Model.kind_parameters")):
        tiny_llama().kind_parameters(1)


# --------------------------------------------------------------------------- properties


@st.composite
def valid_models(draw):
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    kv_heads = draw(st.sampled_from([h for h in (1, 2, 4, 8) if heads % h == 0]))
    layers = draw(st.integers(1, 6))
    experts = draw(st.sampled_from([0, 4, 8]))
    fields = dict(
        name="p",
        hidden_size=draw(st.integers(1, 64)) * heads,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=draw(st.integers(1, 100)),
        intermediate_size=draw(st.integers(1, 64)),
        tie_word_embeddings=draw(st.booleans()),
        qk_norm=draw(st.booleans()),
        num_nextn_predict_layers=draw(st.integers(0, 2)),
    )
    if experts:
        fields.update(
            num_experts=experts,
            num_experts_per_tok=draw(st.integers(1, experts)),
            moe_intermediate_size=draw(st.integers(1, 16)),
            shared_expert_intermediate_size=draw(st.sampled_from([0, 16])),
            first_k_dense_replace=draw(st.integers(0, layers)),
        )
    return Model(**fields)


@settings(max_examples=60, deadline=None)
@given(valid_models())
def test_counts_are_consistent_for_any_valid_model(m):
    count = m.parameter_count()
    assert 0 < count.active <= count.total
    if not m.is_moe or m.num_experts_per_tok == m.num_experts:
        assert count.active == count.total
    per_kind = sum(n * sum(m.kind_parameters(i)) for i, (n, _) in enumerate(m.kind_counts()))
    outside = m.embedding_parameters() + m.output_parameters() + m.final_norm_parameters()
    assert count.total == per_kind + outside
    assert len(m.layer_kinds_in_order) == m.num_layers_with_mtp
    assert Model.from_dict(m.to_dict()) == m
