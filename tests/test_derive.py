"""ND's derived values (docs/ND_MODEL.md §1.4 derive steps 1-5, 8, 10), checked
against values computed by hand from the formulas."""
from __future__ import annotations

import dataclasses

import pytest

from ndcost.tables.derive import Derived, derive
from ndcost.errors import SpecError
from ndcost.spec.exec_spec import ExecSpec
from ndcost.spec.model import Model
from ndcost.tables.joint_rules import validate

DENSE = Model(name="dense-70b", hidden_size=8192, num_hidden_layers=80, num_attention_heads=64,
              num_key_value_heads=8, intermediate_size=28672, vocab_size=128256)
MIXTRAL = Model(name="moe-8x7b", family="mixtral", hidden_size=4096, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, num_experts=8,
                num_experts_per_tok=2, moe_intermediate_size=14336, tie_word_embeddings=True)


def test_dense_zero1():
    spec = ExecSpec(dp=16, tp=8, pp=8, global_batch_size=1024, seq_length=8192, sequence_parallel=True,
                    recompute="selective", optimizer_shard=8)
    validate(DENSE, spec)
    got = derive(DENSE, spec)
    # step 1
    assert got.sp == 8
    # step 2: etp None, ep 1 <= dp: t_exp = t = 8, d_exp = 16 // 1
    assert (got.t_exp, got.d_exp, got.expert_data_parallel) == (8, 16, 16)
    # step 3: ranks = os_max_shard = 8; cp 1
    assert got.has_op and not got.has_grad_shard and not got.grad_shard_as_params
    assert got.os_ranks == 8
    assert got.shard_p_os_non_exp_partial == 8 * 8 * 1
    assert got.shard_p_os_non_exp == 16 * 1 * 8
    assert got.shard_p_os_exp_partial == 64  # gcd(0, 8*8)
    assert got.shard_p_os_exp == 16 * 1 * 8
    assert (got.shard_grad_non_exp, got.shard_grad_exp, got.shard_grad_exp_partial) == (8, 8, 8)
    # step 4
    assert (got.comm_d_non_exp, got.comm_d_exp) == (2, 2)
    assert (got.comm_t, got.comm_ep, got.comm_cp) == (1, 0, 0)
    assert (got.comm_dp_overlap, got.comm_tp_overlap) == (0.9, 0.5)
    # step 5: has_op, not vocab_emb_dp -> d*t
    assert got.shard_embed == 128
    # step 8: s/a with flash attention
    assert got.s_fa == 8192 / 64
    # step 10
    assert (got.shard_recompute_input, got.shard_output_activ) == (1, 1)
    assert got.micro_batch_num == 64 and got.global_batch_size == 1024 and got.grad_accumulation
    assert (got.nd_bytes_grad, got.bytes_grad) == (4, 4)
    assert got.bytes_optim == 2 * 4 + 4 and got.bytes_optim_table == 2 * 4 + 4
    assert got.zero_shard_ranks == 8
    assert got.keep_mask == 0b1111_0000  # megatron: attention core recomputed
    assert got.tie_embeddings is False
    assert (got.reshards, got.defers_grads, got.overlaps_grad_reduce) == (False, False, True)


def test_moe_with_ep_and_etp():
    spec = ExecSpec(dp=8, tp=4, pp=2, cp=2, ep=8, etp=2, micro_batch_num=16, optimizer_shard=4,
                    seq_length=4096, sequence_parallel=True, recompute_slice_activation=True)
    validate(MIXTRAL, spec)
    got = derive(MIXTRAL, spec)
    # step 2, etp stated: t_exp = 2, d_exp = d*t*cp // t_exp // ep = 64 // 2 // 8
    assert (got.t_exp, got.d_exp) == (2, 4)
    assert got.expert_data_parallel == 8 * 2 * 4 // (8 * 2)
    # step 3: ranks 4, cp 2
    assert got.os_ranks == 4
    assert got.shard_p_os_non_exp_partial == 4 * 4 * 2
    assert got.shard_p_os_non_exp == 8 * 2 * 4
    assert got.shard_p_os_exp_partial == 8  # gcd(8 experts, 4*2)
    assert got.shard_p_os_exp == 4 * 2 * 2
    assert (got.shard_grad_non_exp, got.shard_grad_exp, got.shard_grad_exp_partial) == (4, 2, 2)
    # step 4
    assert (got.comm_d_non_exp, got.comm_d_exp) == (2, 2)
    assert (got.comm_t, got.comm_ep, got.comm_cp) == (1, 1, 1)
    # step 5 and 10
    assert got.shard_embed == 8 * 4
    assert got.shard_recompute_input == 4
    assert got.s_fa == 4096 / 32
    assert got.global_batch_size == 128 and got.nd_bytes_grad == 4
    assert got.zero_shard_ranks == 4 * 2
    assert got.tie_embeddings is True  # the model's


def test_moe_ep_borrowing_tp_ranks():
    # ND step 2 without etp: ep 8 > dp 2 -> d_exp = d*t // ep = 1 and t_exp = 1
    spec = ExecSpec(dp=2, tp=4, ep=8, micro_batch_num=1, tie_embeddings=False)
    validate(MIXTRAL, spec)
    got = derive(MIXTRAL, spec)
    assert (got.t_exp, got.d_exp, got.expert_data_parallel) == (1, 1, 1)
    assert got.shard_p_os_exp_partial == 2  # gcd(8, ranks 2 * t_exp 1)
    assert got.shard_p_os_exp == 1
    assert (got.comm_d_non_exp, got.comm_d_exp) == (2, 0)  # d_exp == 1: no expert DP traffic
    # pp 1 and one micro-batch: ND holds no gradient buffer
    assert (got.grad_accumulation, got.nd_bytes_grad, got.bytes_grad) == (False, 0, 4)
    assert got.tie_embeddings is False  # the spec's wins


def test_moe_ep_within_dp():
    got = derive(MIXTRAL, ExecSpec(dp=8, tp=2, ep=4, micro_batch_num=2))
    assert (got.t_exp, got.d_exp, got.expert_data_parallel) == (2, 2, 2)


def test_zero3():
    spec = ExecSpec(dp=64, tp=2, cp=2, micro_batch_num=1, zero_stage=3, seq_length=8192)
    validate(DENSE, spec)
    got = derive(DENSE, spec)
    assert got.has_op and got.has_grad_shard and got.grad_shard_as_params
    assert got.os_ranks == 64
    assert got.shard_p_os_non_exp_partial == 64 * 2 * 2
    assert got.shard_p_os_non_exp == 64 * 2 * 2
    assert got.shard_p_os_exp_partial == 128  # gcd(0, 64*2)
    assert got.shard_p_os_exp == 64 * 2 * 2
    # gradients shard as the params
    assert (got.shard_grad_non_exp, got.shard_grad_exp, got.shard_grad_exp_partial) == (256, 256, 128)
    assert (got.comm_d_non_exp, got.comm_d_exp) == (3, 3)
    assert got.reshards is True
    assert (got.nd_bytes_grad, got.bytes_grad) == (0, 4)
    assert got.zero_shard_ranks == 128
    assert got.comm_cp == 1


def test_zero2_and_zero3_differ_in_gradient_shards():
    zero2 = derive(DENSE, ExecSpec(dp=64, tp=2, cp=2, micro_batch_num=1, zero_stage=2, optimizer_shard=16))
    # ranks 16: non_exp_partial = 16*2*2 = 64, non_exp = 64*2*2 = 256, exp_partial = gcd(0, 32)
    assert (zero2.shard_grad_non_exp, zero2.shard_grad_exp, zero2.shard_grad_exp_partial) == (256, 256, 32)
    assert zero2.comm_d_non_exp == 3 and not zero2.reshards
    zero3 = derive(DENSE, ExecSpec(dp=64, tp=2, cp=2, micro_batch_num=1, zero_stage=3, optimizer_shard=16))
    assert (zero3.shard_grad_non_exp, zero3.shard_grad_exp, zero3.shard_grad_exp_partial) == (64, 256, 32)


def test_zero0_and_shards_outside_cp():
    ddp = derive(DENSE, ExecSpec(dp=4, tp=2, cp=2, micro_batch_num=2, zero_stage=0))
    assert not ddp.has_op and ddp.os_ranks == 1
    assert ddp.shard_p_os_non_exp_partial == 1 * 2 * 2  # ND keeps its cp factor at ZeRO-0
    assert ddp.shard_p_os_non_exp == 1 * 2 * 2
    assert (ddp.comm_d_non_exp, ddp.comm_d_exp) == (0, 0)
    assert ddp.shard_embed == 2 and ddp.zero_shard_ranks == 1
    within_dp = derive(DENSE, ExecSpec(dp=4, tp=2, cp=2, micro_batch_num=2, shard_spans_cp=False))
    assert within_dp.shard_p_os_non_exp_partial == 4 * 2
    assert within_dp.zero_shard_ranks == 4


def test_embedding_shards_and_no_flash_attention():
    got = derive(DENSE, ExecSpec(dp=4, tp=2, micro_batch_num=1, vocab_emb_dp=True, flash_attention=False))
    assert got.shard_embed == 4  # vocab_emb_dp with pp 1: not split over tp
    assert got.s_fa == 4096.0
    staged = derive(DENSE, ExecSpec(dp=4, tp=2, pp=2, micro_batch_num=2, vocab_emb_dp=True))
    assert staged.shard_embed == 8


def test_byte_widths():
    spec = ExecSpec(micro_batch_num=1, optimizer_states=1, optimizer_state_bytes=2, main_param_bytes=0)
    got = derive(DENSE, spec)
    assert got.bytes_optim == 2 and got.bytes_optim_table == 4


def test_strict_expert_degrees():
    # ND strict mode refuses an expert grid with no expert data-parallel rank
    with pytest.raises(SpecError, match=r"The 'ep' parameter of ExecSpec must be at most dp\*tp \(= 4\)"):
        derive(MIXTRAL, ExecSpec(dp=2, tp=2, ep=8, micro_batch_num=1))
    with pytest.raises(SpecError, match=r"The 'ep\*etp' parameter of ExecSpec must be at most dp\*tp\*cp \(= 4\)"):
        derive(MIXTRAL, ExecSpec(dp=2, tp=2, ep=4, etp=2, micro_batch_num=1))


def test_derived_is_frozen_and_documented():
    got = derive(DENSE, ExecSpec(micro_batch_num=1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.sp = 2  # type: ignore[misc]
    assert isinstance(got, Derived)
    with pytest.raises(SpecError, match="The 'spec' parameter of derive must be an ExecSpec"):
        derive(DENSE, {"dp": 1})  # type: ignore[arg-type]
