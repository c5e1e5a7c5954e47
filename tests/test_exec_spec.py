"""ExecSpec and RecomputeRange: defaults, normalisation, views, identity, the
recompute switches and rules, and ND's keyword strategy."""
from __future__ import annotations

import copy
import dataclasses
import pickle
from types import MappingProxyType

import pytest

from ndcost.errors import SpecError
from ndcost.spec.exec_spec import ExecSpec
from ndcost.spec.recompute_spec import (
    ALL_KEPT, SWITCHES, RecomputeRange, mask_from_switches, selective_switches, switches_from_mask,
)

# ---------------------------------------------------------------- switches and masks


def test_switch_order_is_the_seeds():
    # seed recompute/profile.py SWITCHES; bit i of a keep mask is SWITCHES[i]
    assert SWITCHES == ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct", "attUp")
    assert ALL_KEPT == 0xFF


def test_mask_round_trip_over_all_settings():
    for mask in range(256):
        assert mask_from_switches(switches_from_mask(mask)) == mask


def test_mask_bits_and_missing_switches_keep():
    assert mask_from_switches({}) == 0xFF
    assert mask_from_switches({"attBMM": 0}) == 0xFF - 1
    assert mask_from_switches({"attUp": 0, "gather": False}) == 0xFF - 128 - 32
    assert switches_from_mask(0) == dict.fromkeys(SWITCHES, 0)
    assert switches_from_mask(0b1000_0001) == {
        "attBMM": 1, "headCast": 0, "dropout": 0, "softmax": 0,
        "normOp": 0, "gather": 0, "ffAct": 0, "attUp": 1,
    }


def test_megatron_rule_recomputes_the_attention_core():
    switches = selective_switches("megatron", flash_attention=True, sequence_parallel_degree=8, comm_recompute=False)
    assert switches == {"attBMM": 0, "headCast": 0, "dropout": 0, "softmax": 0,
                        "normOp": 1, "gather": 1, "ffAct": 1, "attUp": 1}
    # comm_recompute drops the kept all-gather of a sequence-parallel layer only
    assert selective_switches("megatron", flash_attention=True, sequence_parallel_degree=8,
                              comm_recompute=True)["gather"] == 0
    assert selective_switches("megatron", flash_attention=True, sequence_parallel_degree=1,
                              comm_recompute=True)["gather"] == 1


@pytest.mark.parametrize(
    ("fa", "sp", "comm", "expected"),
    [
        # docs/ND_MODEL.md §1.4 with sel = 1:
        # attBMM = not(not fa and sp>1), headCast = not fa, dropout 1, softmax = fa,
        # normOp = not(sp>1), gather = not(comm and sp>1), ffAct = not(sp>1), attUp 1
        (True, 1, False, dict(attBMM=1, headCast=0, dropout=1, softmax=1, normOp=1, gather=1, ffAct=1, attUp=1)),
        (True, 4, False, dict(attBMM=1, headCast=0, dropout=1, softmax=1, normOp=0, gather=1, ffAct=0, attUp=1)),
        (False, 4, True, dict(attBMM=0, headCast=1, dropout=1, softmax=0, normOp=0, gather=0, ffAct=0, attUp=1)),
        (False, 1, True, dict(attBMM=1, headCast=1, dropout=1, softmax=0, normOp=1, gather=1, ffAct=1, attUp=1)),
    ],
)
def test_mindformers_rule(fa, sp, comm, expected):
    assert selective_switches("mindformers", flash_attention=fa, sequence_parallel_degree=sp,
                              comm_recompute=comm) == expected


def test_hyperparallel_rule():
    assert selective_switches("hyperparallel", flash_attention=False, sequence_parallel_degree=1,
                              comm_recompute=False) == {
        "attBMM": 1, "headCast": 0, "dropout": 0, "softmax": 0,
        "normOp": 0, "gather": 0, "ffAct": 0, "attUp": 1,
    }


# ---------------------------------------------------------------- RecomputeRange


def test_range_keep_masks():
    assert RecomputeRange(0, 4, "none").keep_mask == ALL_KEPT
    assert RecomputeRange(0, 4, "full").keep_mask == 0
    assert RecomputeRange(0, 4, "selective").keep_mask is None
    selective = RecomputeRange(2, 3, "selective", {"softmax": 0})
    assert selective.keep_mask == 0xFF - 8
    assert selective.end == 5
    # stored complete, in SWITCHES order, read-only
    assert isinstance(selective.switches, MappingProxyType)
    assert tuple(selective.switches) == SWITCHES
    with pytest.raises(TypeError):
        selective.switches["softmax"] = 1  # type: ignore[index]


def test_range_identity():
    one = RecomputeRange(0, 2, "selective", {"attBMM": 0})
    same = RecomputeRange(0, 2, "selective", {"attBMM": 0, "softmax": 1})
    assert one == same and hash(one) == hash(same)
    assert pickle.loads(pickle.dumps(one)) == one
    assert copy.deepcopy(one) == one


# ---------------------------------------------------------------- ExecSpec basics


def test_defaults_and_views():
    spec = ExecSpec(global_batch_size=8)
    assert (spec.dp, spec.tp, spec.pp, spec.vpp, spec.cp, spec.ep, spec.etp) == (1, 1, 1, 1, 1, 1, None)
    assert spec.resolved_micro_batch_num == 8 and spec.micro_batch_num is None
    assert spec.resolved_global_batch_size == 8
    assert spec.sp == 1 and spec.schedule == "1f1b" and spec.num_devices == 1
    assert spec.recompute_option == "none"
    assert spec.zero_stage == 1 and spec.resolved_reshard_params is False
    assert spec.capacity_factor == 1.0 and isinstance(spec.capacity_factor, float)


def test_batch_from_either_side():
    by_count = ExecSpec(dp=4, micro_batch_size=2, micro_batch_num=8)
    assert by_count.resolved_global_batch_size == 64
    by_size = ExecSpec(dp=4, micro_batch_size=2, global_batch_size=64)
    assert by_size.resolved_micro_batch_num == 8
    both = ExecSpec(dp=4, micro_batch_size=2, global_batch_size=64, micro_batch_num=8)
    assert both.resolved_micro_batch_num == 8


def test_sequence_parallel_and_devices():
    spec = ExecSpec(dp=2, tp=4, pp=2, cp=2, ep=2, global_batch_size=16, sequence_parallel=True)
    assert spec.sp == 4
    assert spec.num_devices == 32  # ep folds into dp*tp*pp*cp


@pytest.mark.parametrize(
    ("pp_schedule", "vpp", "schedule"),
    [("1f1b", 1, "1f1b"), ("1f1b", 2, "interleaved"), ("interleaved", 3, "interleaved"),
     ("zero_bubble_v", 2, "zero_bubble_v"), ("gpipe", 1, "gpipe"), ("seq1f1b", 2, "seq1f1b")],
)
def test_schedule_is_normalised(pp_schedule, vpp, schedule):
    spec = ExecSpec(pp=4, vpp=vpp, pp_schedule=pp_schedule, micro_batch_num=8)
    assert spec.schedule == schedule


def test_seq1f1b_splits():
    spec = ExecSpec(pp=2, micro_batch_num=4, pp_schedule="seq1f1b", seq_split=4, seq_length=8192)
    assert spec.seq_split == 4


def test_lists_become_tuples_and_int_offset_spreads():
    spec = ExecSpec(pp=4, micro_batch_num=4, offset=[1, 0, 0, -1], full_recompute=[2, 2, 1, 0])
    assert spec.offset == (1, 0, 0, -1) and spec.full_recompute == (2, 2, 1, 0)
    grid = ExecSpec(pp=2, vpp=2, micro_batch_num=4, offset=[[1, 0], [0, -1]])
    assert grid.offset == ((1, 0), (0, -1))
    assert ExecSpec(pp=3, micro_batch_num=3, offset=0).offset == (0, 0, 0)
    assert ExecSpec(pp=2, micro_batch_num=2, pp_partition=[5, 3]).pp_partition == (5, 3)


def test_frozen():
    spec = ExecSpec(global_batch_size=8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.dp = 2  # type: ignore[misc]


# ---------------------------------------------------------------- recompute statements


def test_recompute_options():
    assert ExecSpec(micro_batch_num=1, recompute="full").recompute_option == "full"
    assert ExecSpec(micro_batch_num=1, recompute="selective").recompute_option == "selective"
    ranges = ExecSpec(micro_batch_num=1, recompute=[RecomputeRange(0, 2, "full")])
    assert ranges.recompute_option == "ranges" and ranges.recompute == (RecomputeRange(0, 2, "full"),)
    assert ExecSpec(micro_batch_num=1, recompute=[]).recompute == "none"
    assert ExecSpec(pp=2, micro_batch_num=2, full_recompute=True).recompute_option == "full"
    assert ExecSpec(pp=2, micro_batch_num=2, selective_recompute=True).recompute_option == "selective"
    assert ExecSpec(pp=2, micro_batch_num=2, full_recompute=[1, 0]).recompute_option == "per_stage"
    assert ExecSpec(pp=2, micro_batch_num=2, full_recompute=False).recompute_option == "none"
    # False states nothing, so it may sit beside a recompute string
    assert ExecSpec(pp=2, micro_batch_num=2, recompute="full", selective_recompute=False).recompute_option == "full"


def test_ranges_from_mappings():
    spec = ExecSpec(micro_batch_num=1, recompute=[
        {"first": 0, "count": 2, "option": "full"},
        {"first": 2, "count": 1, "option": "selective", "switches": {"gather": 0}},
    ])
    assert spec.recompute[1] == RecomputeRange(2, 1, "selective", {"gather": 0})


def test_keep_mask_follows_rule_and_explicit_switches():
    megatron = ExecSpec(tp=4, micro_batch_num=1, sequence_parallel=True, recompute="selective")
    assert megatron.keep_mask == 0b1111_0000
    mindformers = megatron.replace(selective_rule="mindformers")
    # fa on, sp 4: attBMM 1, headCast 0, dropout 1, softmax 1, normOp 0, gather 1, ffAct 0, attUp 1
    assert mindformers.keep_mask == 1 + 4 + 8 + 32 + 128
    explicit = megatron.replace(selective_switches={"ffAct": 0})
    assert explicit.keep_mask == 0xFF - 64
    assert explicit.selective_setting["ffAct"] == 0


def test_range_keep_mask_defers_to_the_spec():
    spec = ExecSpec(micro_batch_num=1, recompute=[RecomputeRange(0, 1, "selective"),
                                                  RecomputeRange(1, 1, "selective", {"attUp": 0})])
    assert spec.range_keep_mask(spec.recompute[0]) == spec.keep_mask == 0b1111_0000
    assert spec.range_keep_mask(spec.recompute[1]) == 0x7F


# ---------------------------------------------------------------- identity


def test_hash_eq_pickle_deepcopy():
    spec = ExecSpec(dp=2, tp=2, pp=2, vpp=2, micro_batch_num=4, offset=[[0, 0], [0, 0]],
                    selective_switches={"attBMM": 0}, recompute="selective")
    twin = ExecSpec(dp=2, tp=2, pp=2, vpp=2, micro_batch_num=4, offset=((0, 0), (0, 0)),
                    selective_switches={"attBMM": 0, "gather": 1}, recompute="selective")
    assert spec == twin and hash(spec) == hash(twin)
    assert len({spec, twin}) == 1
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert copy.deepcopy(spec) == spec
    assert spec != spec.replace(dp=4, micro_batch_num=2)


def test_replace_validates():
    spec = ExecSpec(dp=8, global_batch_size=64)
    assert spec.replace(dp=4).resolved_micro_batch_num == 16
    with pytest.raises(SpecError, match="'global_batch_size' parameter of ExecSpec"):
        spec.replace(dp=3)


# ---------------------------------------------------------------- from_strategy


def test_from_strategy_design_example():
    # HyperParallel's strategy names: ExecSpec.from_strategy(dp=16, mp=8, pp=8, mb=64, mbs=1, op=16, sp=True)
    spec = ExecSpec.from_strategy(dp=16, mp=8, pp=8, mb=64, mbs=1, op=16, sp=True, seq_length=8192)
    assert spec == ExecSpec(dp=16, tp=8, pp=8, micro_batch_num=64, micro_batch_size=1, global_batch_size=1024,
                            optimizer_shard=16, zero_stage=1, sequence_parallel=True, seq_length=8192)


def test_from_strategy_passes_fields_through():
    spec = ExecSpec.from_strategy(dp=2, mp=1, pp=2, mb=4, recompute="full", flash_attention=False,
                                  zero_stage=2, cp_algo="ulysses")
    assert spec.recompute == "full" and spec.flash_attention is False
    assert spec.zero_stage == 2 and spec.cp_algo == "ulysses"


@pytest.mark.parametrize("rule", ["megatron", "mindformers", "hyperparallel"])
@pytest.mark.parametrize("fa", [True, False])
@pytest.mark.parametrize("sp", [1, 2, 8])
@pytest.mark.parametrize("comm", [True, False])
def test_cached_rule_mask_equals_the_rule(rule, fa, sp, comm):
    from ndcost.spec.recompute_spec import selective_keep_mask

    kwargs = dict(flash_attention=fa, sequence_parallel_degree=sp, comm_recompute=comm)
    assert selective_keep_mask(rule, **kwargs) == mask_from_switches(selective_switches(rule, **kwargs))
