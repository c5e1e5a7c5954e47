"""Bad input: every refusal names the parameter, the rule and the value, exactly.

Also: the caller's objects are never changed, and ``ExecSpec.from_strategy``
keeps the seed ``strategy_exec``'s semantics.
"""
from __future__ import annotations

import pytest

from ndcost.spec.device import Cluster, Device
from ndcost.errors import SpecError
from ndcost.spec.exec_spec import ExecSpec
from ndcost.spec.model import Model
from ndcost.spec.recompute_spec import RecomputeRange, mask_from_switches, selective_switches, switches_from_mask
from ndcost.tables.joint_rules import explain, offset_chunk_counts, validate

DENSE = Model(name="dense-70b", hidden_size=8192, num_hidden_layers=80, num_attention_heads=64,
              num_key_value_heads=8, intermediate_size=28672, vocab_size=128256)
SMALL = Model(name="small", hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512,
              vocab_size=1000)
MIXTRAL = Model(name="moe-8x7b", family="mixtral", hidden_size=4096, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, num_experts=8,
                num_experts_per_tok=2, moe_intermediate_size=14336)
DEEPSEEK = Model(name="deepseek-v3", family="deepseek_v3", hidden_size=7168, num_hidden_layers=61,
                 num_attention_heads=128, vocab_size=129280, intermediate_size=18432, num_experts=256,
                 num_experts_per_tok=8, moe_intermediate_size=2048, shared_expert_intermediate_size=2048,
                 first_k_dense_replace=3, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
                 qk_nope_head_dim=128, v_head_dim=128, num_nextn_predict_layers=1)
GPU = Device(name="gpu-x", peak_flops={"bf16": 1e15, "fp16": 1e15}, hbm_bytes=80e9, hbm_bandwidth=3e12,
             devices_per_node=8, intra_node_bandwidth=450e9, inter_node_bandwidth=50e9)

M = dict(micro_batch_num=1)  # the smallest batch statement


def cluster(num_devices: int) -> Cluster:
    return Cluster(GPU, num_devices)


SPEC_CASES = [
    # --- degrees and types
    ("dp zero", lambda: ExecSpec(dp=0, **M),
     "The 'dp' parameter of ExecSpec must be an integer >= 1. Got 0 instead."),
    ("tp bool", lambda: ExecSpec(tp=True, **M),
     "The 'tp' parameter of ExecSpec must be an integer >= 1. Got True instead."),
    ("pp float", lambda: ExecSpec(pp=2.0, **M),
     "The 'pp' parameter of ExecSpec must be an integer >= 1. Got 2.0 instead."),
    ("etp zero", lambda: ExecSpec(etp=0, **M),
     "The 'etp' parameter of ExecSpec must be an integer >= 1. Got 0 instead."),
    ("sp not bool", lambda: ExecSpec(sequence_parallel=1, **M),
     "The 'sequence_parallel' parameter of ExecSpec must be True or False. Got 1 instead."),
    ("micro batch size", lambda: ExecSpec(micro_batch_size=0, **M),
     "The 'micro_batch_size' parameter of ExecSpec must be an integer >= 1. Got 0 instead."),
    ("seq_length str", lambda: ExecSpec(seq_length="4k", **M),
     "The 'seq_length' parameter of ExecSpec must be an integer >= 1. Got '4k' instead."),
    ("param bytes", lambda: ExecSpec(param_bytes=0, **M),
     "The 'param_bytes' parameter of ExecSpec must be an integer >= 1. Got 0 instead."),
    ("dropout bytes", lambda: ExecSpec(dropout_bytes=-1, **M),
     "The 'dropout_bytes' parameter of ExecSpec must be an integer >= 0. Got -1 instead."),
    ("capacity below 1", lambda: ExecSpec(capacity_factor=0.5, **M),
     "The 'capacity_factor' parameter of ExecSpec must be a finite number >= 1. Got 0.5 instead."),
    ("capacity nan", lambda: ExecSpec(capacity_factor=float("nan"), **M),
     "The 'capacity_factor' parameter of ExecSpec must be a finite number >= 1. Got nan instead."),
    ("moe dispatch", lambda: ExecSpec(moe_dispatch=-1, **M),
     "The 'moe_dispatch' parameter of ExecSpec must be a finite number >= 0. Got -1 instead."),
    ("cp algo", lambda: ExecSpec(cp_algo="hybrid", **M),
     "The 'cp_algo' parameter of ExecSpec must be one of 'ring', 'ulysses', 'ring-allgather'. Got 'hybrid' instead."),
    ("precision", lambda: ExecSpec(precision="fp32", **M),
     "The 'precision' parameter of ExecSpec must be one of 'bf16', 'fp16', 'fp8'. Got 'fp32' instead."),
    ("selective rule", lambda: ExecSpec(selective_rule="nemo", **M),
     "The 'selective_rule' parameter of ExecSpec must be one of 'megatron', 'mindformers', 'hyperparallel'. "
     "Got 'nemo' instead."),
    ("tie", lambda: ExecSpec(tie_embeddings="yes", **M),
     "The 'tie_embeddings' parameter of ExecSpec must be True or False. Got 'yes' instead."),
    # --- batch
    ("no batch", lambda: ExecSpec(),
     "The 'global_batch_size' parameter of ExecSpec must be given when micro_batch_num is not "
     "(state one of them). Got None instead."),
    ("batch not a multiple", lambda: ExecSpec(dp=8, global_batch_size=100),
     "The 'global_batch_size' parameter of ExecSpec must be a multiple of micro_batch_size*dp (= 8). "
     "Got 100 instead."),
    ("batch disagrees", lambda: ExecSpec(dp=8, global_batch_size=64, micro_batch_num=4),
     "The 'global_batch_size' parameter of ExecSpec must equal micro_batch_size*dp*micro_batch_num (= 32). "
     "Got 64 instead."),
    ("micro batches zero", lambda: ExecSpec(micro_batch_num=0),
     "The 'micro_batch_num' parameter of ExecSpec must be an integer >= 1. Got 0 instead."),
    # --- pipeline
    ("schedule", lambda: ExecSpec(pp_schedule="zero_bubble", **M),
     "The 'pp_schedule' parameter of ExecSpec must be one of '1f1b', 'interleaved', 'zero_bubble_v', "
     "'gpipe', 'seq1f1b', 'dualpipe', 'dualpipev'. Got 'zero_bubble' instead."),
    ("vpp without pp", lambda: ExecSpec(vpp=2, **M),
     "The 'vpp' parameter of ExecSpec must be 1 when pp is 1 (vpp without pp). Got 2 instead."),
    ("interleaved vpp 1", lambda: ExecSpec(pp=4, pp_schedule="interleaved", **M),
     "The 'vpp' parameter of ExecSpec must be > 1 with pp_schedule='interleaved'. Got 1 instead."),
    ("zero bubble vpp", lambda: ExecSpec(pp=4, vpp=3, pp_schedule="zero_bubble_v", **M),
     "The 'vpp' parameter of ExecSpec must be 2 with pp_schedule='zero_bubble_v' (DualPipeV's two chunks). "
     "Got 3 instead."),
    ("gpipe vpp", lambda: ExecSpec(pp=2, vpp=2, pp_schedule="gpipe", **M),
     "The 'vpp' parameter of ExecSpec must be 1 with pp_schedule='gpipe'. Got 2 instead."),
    ("seq split schedule", lambda: ExecSpec(seq_split=2, **M),
     "The 'seq_split' parameter of ExecSpec must be 1 unless pp_schedule is 'seq1f1b'. Got 2 instead."),
    ("seq split divides", lambda: ExecSpec(pp=2, pp_schedule="seq1f1b", seq_split=3, **M),
     "The 'seq_split' parameter of ExecSpec must divide seq_length (4096). Got 3 instead."),
    ("offset length", lambda: ExecSpec(pp=4, offset=[1, 0], **M),
     "The 'offset' parameter of ExecSpec must be an int or ints: one int per stage (pp = 4) or vpp = 1 rows "
     "of pp = 4 ints. Got [1, 0] instead."),
    ("offset rows", lambda: ExecSpec(pp=2, vpp=2, offset=[[1, 0]], **M),
     "The 'offset' parameter of ExecSpec must be an int or ints: one int per stage (pp = 2) or vpp = 2 rows "
     "of pp = 2 ints. Got [[1, 0]] instead."),
    ("offset float", lambda: ExecSpec(pp=2, offset=[0, 0.5], **M),
     "The 'offset' parameter of ExecSpec must hold only integers. Got 0.5 instead."),
    ("offset and partition", lambda: ExecSpec(pp=2, offset=[0, 0], pp_partition=(4, 4), **M),
     "The 'pp_partition' parameter of ExecSpec must be None when offset is given (state one of them). "
     "Got (4, 4) instead."),
    ("partition negative", lambda: ExecSpec(pp=2, pp_partition=[5, -1], **M),
     "The 'pp_partition' parameter of ExecSpec must be one layer count per stage (pp = 2 integers >= 0). "
     "Got [5, -1] instead."),
    # --- recompute
    ("recompute word", lambda: ExecSpec(recompute="partial", **M),
     "The 'recompute' parameter of ExecSpec must be one of 'none', 'full', 'selective'. Got 'partial' instead."),
    ("recompute type", lambda: ExecSpec(recompute=True, **M),
     "The 'recompute' parameter of ExecSpec must be 'none', 'full', 'selective' or a sequence of "
     "RecomputeRange. Got True instead."),
    ("ranges overlap", lambda: ExecSpec(recompute=[RecomputeRange(4, 2, "full"), RecomputeRange(5, 1, "full")], **M),
     "The 'recompute' parameter of ExecSpec must hold ranges sorted by first layer and not overlapping "
     "(this one must start at >= 6). Got RecomputeRange(first=5, count=1, option='full', switches=None) "
     "instead."),
    ("range entry", lambda: ExecSpec(recompute=["full"], **M),
     "The 'recompute' parameter of ExecSpec must hold only RecomputeRange entries. Got 'full' instead."),
    ("range count", lambda: ExecSpec(recompute=[{"first": 0, "count": 0, "option": "full"}], **M),
     "The 'count' parameter of RecomputeRange must be an integer >= 1. Got 0 instead."),
    ("range key", lambda: ExecSpec(recompute=[{"first": 0, "layers": 2, "option": "full"}], **M),
     "The 'recompute' parameter of ExecSpec must hold ranges with only the keys first, count, option, switches. "
     "Got 'layers' instead."),
    ("range option", lambda: RecomputeRange(0, 1, "some"),
     "The 'option' parameter of RecomputeRange must be one of 'none', 'full', 'selective'. Got 'some' instead."),
    ("range switches", lambda: RecomputeRange(0, 1, "full", {"attBMM": 0}),
     "The 'switches' parameter of RecomputeRange must be None unless option is 'selective'. "
     "Got {'attBMM': 0} instead."),
    ("switch name", lambda: ExecSpec(selective_switches={"attbmm": 0}, **M),
     "The 'selective_switches' parameter of ExecSpec must name only the switches attBMM, headCast, dropout, "
     "softmax, normOp, gather, ffAct, attUp. Got 'attbmm' instead."),
    ("switch value", lambda: ExecSpec(selective_switches={"attBMM": 2}, **M),
     "The 'selective_switches.attBMM' parameter of ExecSpec must be 1 (keep) or 0 (recompute). Got 2 instead."),
    ("switches type", lambda: ExecSpec(selective_switches=["attBMM"], **M),
     "The 'selective_switches' parameter of ExecSpec must be a mapping of switch names (attBMM, headCast, "
     "dropout, softmax, normOp, gather, ffAct, attUp) to 1 or 0. Got ['attBMM'] instead."),
    ("full rec shape", lambda: ExecSpec(pp=2, full_recompute=[1, 2, 3], **M),
     "The 'full_recompute' parameter of ExecSpec must be True/False or layer counts: one int per stage "
     "(pp = 2) or vpp = 1 rows of pp = 2 ints. Got [1, 2, 3] instead."),
    ("sel rec negative", lambda: ExecSpec(pp=2, selective_recompute=[1, -1], **M),
     "The 'selective_recompute' parameter of ExecSpec must hold only integers >= 0. Got -1 instead."),
    ("recompute twice", lambda: ExecSpec(pp=2, recompute="full", full_recompute=(2, 2), **M),
     "The 'recompute' parameter of ExecSpec must be 'none' when full_recompute or selective_recompute "
     "states the recompute per stage. Got 'full' instead."),
    # --- sharding
    ("zero stage 4", lambda: ExecSpec(zero_stage=4, **M),
     "The 'zero_stage' parameter of ExecSpec must be one of 0, 1, 2, 3. Got 4 instead."),
    ("zero stage bool", lambda: ExecSpec(zero_stage=True, **M),
     "The 'zero_stage' parameter of ExecSpec must be one of 0, 1, 2, 3. Got True instead."),
    ("optimizer shard", lambda: ExecSpec(dp=8, optimizer_shard=3, **M),
     "The 'optimizer_shard' parameter of ExecSpec must divide dp (8). Got 3 instead."),
    ("reshard without fsdp", lambda: ExecSpec(reshard_params=True, **M),
     "The 'reshard_params' parameter of ExecSpec must be None or False unless zero_stage is 3. Got True instead."),
    # --- recompute helpers
    ("mask range", lambda: switches_from_mask(256),
     "The 'mask' parameter of switches_from_mask must be an integer in [0, 255]. Got 256 instead."),
    ("mask bool", lambda: switches_from_mask(True),
     "The 'mask' parameter of switches_from_mask must be an integer >= 0. Got True instead."),
    ("mask switch name", lambda: mask_from_switches({"ffact": 0}),
     "The 'switches' parameter of mask_from_switches must name only the switches attBMM, headCast, dropout, "
     "softmax, normOp, gather, ffAct, attUp. Got 'ffact' instead."),
    ("rule name", lambda: selective_switches("nemo", flash_attention=True, sequence_parallel_degree=1,
                                             comm_recompute=False),
     "The 'rule' parameter of selective_switches must be one of 'megatron', 'mindformers', 'hyperparallel'. "
     "Got 'nemo' instead."),
    # --- from_strategy
    ("strategy twice", lambda: ExecSpec.from_strategy(dp=2, mp=2, pp=1, mb=1, tp=2),
     "The 'tp' parameter of ExecSpec.from_strategy must be stated once, by its ND keyword. Got 2 instead."),
    ("strategy op", lambda: ExecSpec.from_strategy(dp=2, mp=2, pp=1, mb=1, op="8"),
     "The 'op' parameter of ExecSpec.from_strategy must be an integer or None. Got '8' instead."),
]


VALIDATE_CASES = [
    ("devices", DENSE, ExecSpec(dp=8, tp=8, pp=8, **M), cluster(1024),
     "The 'dp*tp*pp*cp' parameter of ExecSpec on Cluster('gpu-x', num_devices=1024) must equal num_devices "
     "(1024). Got 512 instead."),
    ("heads", DENSE, ExecSpec(tp=3, **M), None,
     "The 'tp' parameter of ExecSpec must divide num_attention_heads (64). Got 3 instead."),
    ("kv heads", DENSE, ExecSpec(tp=16, **M), None,
     "The 'tp' parameter of ExecSpec must divide num_key_value_heads (8). Got 16 instead."),
    ("dense ep", DENSE, ExecSpec(dp=2, ep=2, **M), None,
     "The 'ep' parameter of ExecSpec must be 1 for a dense model (num_experts = 0). Got 2 instead."),
    ("experts", MIXTRAL, ExecSpec(dp=3, ep=3, **M), None,
     "The 'ep' parameter of ExecSpec must divide num_experts (8). Got 3 instead."),
    ("expert grid", MIXTRAL, ExecSpec(dp=2, tp=2, ep=4, etp=2, **M), None,
     "The 'ep*etp' parameter of ExecSpec must divide dp*cp*tp (= 4). Got 8 instead."),
    ("etp width", MIXTRAL, ExecSpec(dp=3, etp=3, **M), None,
     "The 'etp' parameter of ExecSpec must divide moe_intermediate_size (14336) (the experts' TP degree). "
     "Got 3 instead."),
    ("ep in dp", MIXTRAL, ExecSpec(dp=6, ep=4, **M), None,
     "The 'ep' parameter of ExecSpec must divide dp (6) (experts at tp; or state etp). Got 4 instead."),
    ("ep borrows tp", MIXTRAL, ExecSpec(dp=2, cp=2, ep=4, **M), None,
     "The 'ep' parameter of ExecSpec must divide dp*tp (= 2) when ep > dp (experts at tp 1; or state etp). "
     "Got 4 instead."),
    ("pp over layers", SMALL, ExecSpec(pp=8, micro_batch_num=8), None,
     "The 'pp' parameter of ExecSpec must be at most the layer count (4, MTP layers included). Got 8 instead."),
    ("vpp over layers", SMALL, ExecSpec(pp=2, vpp=3, micro_batch_num=6), None,
     "The 'vpp' parameter of ExecSpec must keep vpp*pp within the layer count (4, MTP layers included). "
     "Got 3 instead."),
    ("micro batches", DENSE, ExecSpec(pp=8, global_batch_size=4), None,
     "The 'micro_batch_num' parameter of ExecSpec must be >= pp (8) for the '1f1b' schedule. Got 4 instead."),
    ("interleaved", DENSE, ExecSpec(pp=4, vpp=2, micro_batch_num=6), None,
     "The 'micro_batch_num' parameter of ExecSpec must be a multiple of pp (4) for the 'interleaved' schedule. "
     "Got 6 instead."),
    ("sp sequence", DENSE, ExecSpec(tp=8, sequence_parallel=True, seq_length=4100, **M), None,
     "The 'seq_length' parameter of ExecSpec must be divisible by tp (8) with sequence parallelism. "
     "Got 4100 instead."),
    ("ring sequence", DENSE, ExecSpec(cp=4, seq_length=4100, **M), None,
     "The 'seq_length' parameter of ExecSpec must be divisible by 2*cp (= 8) for ring context parallelism. "
     "Got 4100 instead."),
    ("ulysses heads", DENSE, ExecSpec(tp=4, cp=4, cp_algo="ulysses", **M), None,
     "The 'tp*cp' parameter of ExecSpec must divide num_key_value_heads (8) for Ulysses context parallelism. "
     "Got 16 instead."),
    ("offset negative", SMALL, ExecSpec(pp=2, offset=[3, -3], micro_batch_num=2), None,
     "The 'offset' parameter of ExecSpec must leave no stage or chunk with fewer than 0 layers "
     "(stage 1, chunk 0 gets 2 + offset = -1). Got (3, -3) instead."),
    ("offset total", SMALL, ExecSpec(pp=2, offset=[1, 0], micro_batch_num=2), None,
     "The 'offset' parameter of ExecSpec must place exactly 4 layers (2 per chunk plus the offset places 5). "
     "Got (1, 0) instead."),
    ("partition total", SMALL, ExecSpec(pp=2, pp_partition=[2, 1], micro_batch_num=2), None,
     "The 'pp_partition' parameter of ExecSpec must sum to the layer count (4). Got (2, 1) instead."),
    ("range past layers", SMALL, ExecSpec(recompute=[RecomputeRange(2, 3, "full")], **M), None,
     "The 'recompute' parameter of ExecSpec must hold ranges within layers 0..3 (MTP layers included). "
     "Got RecomputeRange(first=2, count=3, option='full', switches=None) instead."),
    ("fp8", DENSE, ExecSpec(dp=8, precision="fp8", **M), cluster(8),
     "The 'precision' parameter of ExecSpec on Cluster('gpu-x', num_devices=8) must name a dtype the device "
     "has a peak for ('bf16', 'fp16'). Got 'fp8' instead."),
    ("model type", "llama", ExecSpec(**M), None,
     "The 'model' parameter of validate must be a Model. Got 'llama' instead."),
]


@pytest.mark.parametrize(("build", "message"), [case[1:] for case in SPEC_CASES], ids=[c[0] for c in SPEC_CASES])
def test_spec_refusals(build, message):
    with pytest.raises(SpecError) as info:
        build()
    assert str(info.value) == message


@pytest.mark.parametrize(("model", "spec", "machine", "message"), [case[1:] for case in VALIDATE_CASES],
                         ids=[c[0] for c in VALIDATE_CASES])
def test_validate_refusals(model, spec, machine, message):
    with pytest.raises(SpecError) as info:
        validate(model, spec, machine)
    assert str(info.value) == message
    if isinstance(model, Model):
        assert explain(model, spec, machine)[0] == message


def test_error_is_a_value_error_naming_its_parts():
    with pytest.raises(ValueError, match=r"^The 'tp' parameter of ExecSpec must divide num_attention_heads \(64\)"):
        validate(DENSE, ExecSpec(tp=3, **M))
    try:
        validate(DENSE, ExecSpec(tp=3, **M))
    except SpecError as error:
        assert (error.parameter, error.owner, error.value) == ("tp", "ExecSpec", 3)


def test_cross_node_tp_is_refused_on_request():
    spec = ExecSpec(tp=16, **M)
    model = Model(name="wide", hidden_size=4096, num_hidden_layers=4, num_attention_heads=32,
                  intermediate_size=8192, vocab_size=1000)
    validate(model, spec, cluster(16))  # allowed by default
    with pytest.raises(SpecError) as info:
        validate(model, spec, cluster(16), allow_cross_node_tp=False)
    assert str(info.value) == (
        "The 'tp' parameter of ExecSpec on Cluster('gpu-x', num_devices=16) must be at most devices_per_node (8) "
        "unless allow_cross_node_tp=True. Got 16 instead."
    )


def test_explain_lists_every_broken_rule():
    spec = ExecSpec(dp=3, tp=3, pp=8, cp=2, cp_algo="ulysses", seq_length=8191, global_batch_size=24,
                    offset=[1] * 8, precision="fp8")
    reasons = explain(DENSE, spec, cluster(64))
    assert [reason.split(" must ")[0] for reason in reasons] == [
        "The 'dp*tp*pp*cp' parameter of ExecSpec on Cluster('gpu-x', num_devices=64)",
        "The 'tp' parameter of ExecSpec",                 # attention heads
        "The 'tp' parameter of ExecSpec",                 # kv heads
        "The 'tp*cp' parameter of ExecSpec",              # Ulysses heads
        "The 'seq_length' parameter of ExecSpec",         # Ulysses sequence
        "The 'offset' parameter of ExecSpec",             # offset total
        "The 'precision' parameter of ExecSpec on Cluster('gpu-x', num_devices=64)",
    ]
    assert explain(DENSE, ExecSpec(dp=8, **M), cluster(8)) == []


def test_valid_reference_strategies():
    # docs/ND_MODEL.md §5 deepseek.yaml: dp 16, mp 4, pp 16, ep 8, mb 32, SP, OWSS 4, offset [1 x 15, -1],
    # MTP 1 in the offset: 62 layers, 3 per stage, +14 -> 62.
    spec = ExecSpec.from_strategy(dp=16, mp=4, pp=16, ep=8, mb=32, op=4, offset=[1] * 15 + [-1])
    validate(DEEPSEEK, spec, Cluster(GPU, 1024))
    assert offset_chunk_counts(DEEPSEEK, spec) == ((4,) * 15 + (2,),)
    # the 8 Qwen3-72B reference strategies of "ISSUE 126 exp6" (docs/ND_MODEL.md §5), gbs 1024, 128 devices
    qwen = Model(name="qwen3-72b", hidden_size=8192, num_hidden_layers=80, num_attention_heads=64,
                 num_key_value_heads=8, intermediate_size=29568, vocab_size=152064)
    for dp, tp, pp, mb in [(16, 4, 2, 8), (8, 8, 2, 16), (8, 4, 4, 16), (4, 8, 4, 32),
                           (4, 4, 8, 32), (4, 2, 16, 32), (2, 8, 8, 64), (1, 8, 16, 128)]:
        validate(qwen, ExecSpec.from_strategy(dp=dp, mp=tp, pp=pp, mb=mb, op=dp), cluster(128))


def test_offset_counts_follow_nd_floor_rules():
    # 1-D offset over vpp 2: offset[s] // vpp to each chunk, the remainder to the last (docs/ND_MODEL.md §1.6)
    spec = ExecSpec(pp=2, vpp=2, offset=[1, -1], micro_batch_num=4)
    # lay 80, per 20: stage 0 -> 20 + 0, 20 + 0 + 1; stage 1 -> 20 - 1, 20 - 1 + 1
    assert offset_chunk_counts(DENSE, spec) == ((20, 19), (21, 20))
    validate(DENSE, spec)
    grid = ExecSpec(pp=2, vpp=2, offset=[[1, 0], [0, -1]], micro_batch_num=4)
    assert offset_chunk_counts(DENSE, grid) == ((21, 20), (20, 19))
    assert offset_chunk_counts(DENSE, ExecSpec(**M)) is None


# ---------------------------------------------------------------- inputs are never mutated


def test_inputs_are_not_mutated():
    offset = [1, 0, 0, -1]
    full = [[1, 1, 0, 0], [0, 0, 1, 1]]
    switches = {"attBMM": 0}
    ranges = [RecomputeRange(0, 2, "full"), {"first": 2, "count": 1, "option": "selective", "switches": switches}]
    ranges_copy = list(ranges)
    spec = ExecSpec(pp=4, vpp=2, micro_batch_num=8, offset=offset, full_recompute=full,
                    selective_switches=switches, recompute="none")
    ranged = ExecSpec(micro_batch_num=1, recompute=ranges)
    assert offset == [1, 0, 0, -1] and full == [[1, 1, 0, 0], [0, 0, 1, 1]]
    assert switches == {"attBMM": 0} and ranges == ranges_copy and isinstance(ranges[1], dict)
    # and the spec does not follow later changes to them
    offset[0] = 9
    full[0][0] = 9
    switches["attBMM"] = 1
    switches["gather"] = 0
    assert spec.offset == (1, 0, 0, -1) and spec.full_recompute[0][0] == 1
    assert spec.selective_switches["attBMM"] == 0 and spec.selective_switches["gather"] == 1
    assert ranged.recompute[1].switches["attBMM"] == 0
    with pytest.raises(TypeError):
        spec.selective_switches["attBMM"] = 1  # type: ignore[index]


def test_validate_and_derive_leave_the_spec_alone():
    from ndcost.tables.derive import derive

    spec = ExecSpec(dp=8, tp=8, pp=8, global_batch_size=512, offset=[0] * 8)
    before = repr(spec)
    validate(DENSE, spec, cluster(512))
    explain(DENSE, spec, cluster(512))
    derive(DENSE, spec)
    assert repr(spec) == before


# ---------------------------------------------------------------- from_strategy == seed strategy_exec


@pytest.mark.parametrize(
    ("keywords", "expected"),
    [
        # op > 1: optimizer_shard = op and the optimizer sharded; gbs = mbs*dp*mb; sp on when unstated
        (dict(dp=16, mp=8, pp=8, mb=64, op=16),
         dict(dp=16, tp=8, pp=8, micro_batch_num=64, micro_batch_size=1, global_batch_size=1024,
              optimizer_shard=16, zero_stage=1, sequence_parallel=True)),
        # op <= 1: no optimizer sharding
        (dict(dp=4, mp=2, pp=2, mb=8, mbs=2, op=1, sp=False),
         dict(dp=4, tp=2, pp=2, micro_batch_num=8, micro_batch_size=2, global_batch_size=64,
              zero_stage=0, sequence_parallel=False)),
        # op not stated: the spec's defaults stand; sp stated as an int
        (dict(dp=2, mp=4, pp=1, mb=4, sp=1),
         dict(dp=2, tp=4, micro_batch_num=4, global_batch_size=8, sequence_parallel=True)),
        # the run's sequence_parallel when the candidate states no sp
        (dict(dp=2, mp=4, pp=1, mb=4, sequence_parallel=False),
         dict(dp=2, tp=4, micro_batch_num=4, global_batch_size=8, sequence_parallel=False)),
        # ND's etp <= 1 means "experts follow tp"; ep, cp, vpp, offset and recompute pass through
        (dict(dp=8, mp=2, pp=2, mb=8, ep=4, etp=0, cp=2, vpp=2, offset=0, full_rec=[2, 1], seq_length=8192),
         dict(dp=8, tp=2, pp=2, micro_batch_num=8, global_batch_size=64, ep=4, etp=None, cp=2, vpp=2,
              offset=(0, 0), full_recompute=(2, 1), sequence_parallel=True, seq_length=8192)),
        (dict(dp=8, mp=2, pp=2, mb=8, ep=4, etp=2, sel_rec=True),
         dict(dp=8, tp=2, pp=2, micro_batch_num=8, global_batch_size=64, ep=4, etp=2,
              selective_recompute=True, sequence_parallel=True)),
    ],
)
def test_from_strategy_matches_the_seed(keywords, expected):
    assert ExecSpec.from_strategy(**keywords) == ExecSpec(**expected)


def test_from_strategy_global_batch_must_agree():
    assert ExecSpec.from_strategy(dp=2, mp=1, pp=1, mb=4, global_batch_size=8).global_batch_size == 8
    with pytest.raises(SpecError) as info:
        ExecSpec.from_strategy(dp=2, mp=1, pp=1, mb=4, global_batch_size=16)
    assert str(info.value) == (
        "The 'global_batch_size' parameter of ExecSpec must equal micro_batch_size*dp*micro_batch_num (= 8). "
        "Got 16 instead."
    )
