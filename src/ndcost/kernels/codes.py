"""The codes the kernels switch on, each enumeration stated once (the kernel ABI beside columns.py).

A code is its name's position in its tuple. The choice vocabularies a user states (pipeline schedules,
dispatchers, EP overlap modes, permutation modes, recompute switches) are ExecSpec's and Rates' own
tuples, read from ``ndcost.spec``; the others are the kernels' own. ``cysrc/ndcost/kernels/codes.pxi``
holds the same codes as C enums (and the constants of ``ndcost.kernels.constants``): it is generated
by ``python tools/gen_columns.py``, and tests/test_codes.py checks that it is current and that the
compiled module reads the values the oracle does. Adding a name to a tuple here (or to the ExecSpec
vocabulary it is read from) gives it a code on both backends; the kernels then need its branch.
"""
from __future__ import annotations

from ..spec.exec_spec_rules import EP_OVERLAPS, MOE_DISPATCHERS, PP_SCHEDULES
from ..spec.moe_kernels import EXPERT_BIASES, GLU_CLAMPS, GROUPED_GEMMS, MOE_PERMUTES
from ..spec.recompute_spec import SWITCHES
from ..spec.rope_scaling import ROPE_SCALES

#: Pipeline schedules of seconds mode, in SECONDS_CAND_FIELDS["schedule"] code order: ExecSpec's pp_schedule
#: choices (ExecSpec.schedule runs a 1f1b with vpp > 1 as "interleaved").
SCHEDULES: tuple[str, ...] = PP_SCHEDULES
#: EP_OVERLAPS (imported above): how the expert all-to-all overlaps compute, in SECONDS_CAND_FIELDS["ep_mode"]
#: code order (ExecSpec.ep_overlap).
#: MoE token dispatchers, in SECONDS_CAND_FIELDS["ep_disp"] code order (ExecSpec.moe_dispatcher).
DISPATCHERS: tuple[str, ...] = MOE_DISPATCHERS
#: Token permutation modes, in RATE_FIELDS["permute"] code order (Rates.moe_permute).
PERMUTES: tuple[str, ...] = MOE_PERMUTES
#: How the routed experts' GEMMs launch, in RATE_FIELDS["g_launch"] code order (Rates.grouped_gemm_impl).
GEMM_LAUNCHES: tuple[str, ...] = GROUPED_GEMMS
#: How the routed experts' biases are added, in RATE_FIELDS["e_bias"] code order (Rates.expert_bias).
BIAS_ADDS: tuple[str, ...] = EXPERT_BIASES
#: How a GLU's clamped halves are clamped, in RATE_FIELDS["glu_clamp"] code order (Rates.glu_clamp).
CLAMPS: tuple[str, ...] = GLU_CLAMPS
#: How a RoPE attention factor is applied, in RATE_FIELDS["rope_scale"] code order (Rates.rope_scale).
ROPE_APPLIES: tuple[str, ...] = ROPE_SCALES
#: Collective operations of seconds_collective: an all-reduce, a reduce-scatter or all-gather (the same
#: ring), an all-to-all, a point-to-point send/recv.
COLLECTIVES: tuple[str, ...] = ("all_reduce", "gather_or_scatter", "all_to_all", "send_recv")
#: A kind's token mixer (KIND_FIELDS "mixer"): attention (full, MLA, gated DeltaNet), a Mamba-2 mixer, none (an
#: MLP-only block of a hybrid stack), a Mamba-1 mixer. ND units refuse all but attention.
MIXERS: tuple[str, ...] = ("attention", "mamba", "none", "mamba1")
#: Where a layer's kernels run, for what a stack replays from CUDA graphs (seconds_ops: SCOPE_*): the
#: SECONDS_CAND_FIELDS["graphs"] code is a bit mask, bit i set where scope i replays (ExecSpec.cuda_graphs,
#: ndcost.spec.graph_scopes, whose GRAPH_SCOPE_NAMES are these scopes in this order).
SCOPES: tuple[str, ...] = ("attn", "pre", "ffn")

#: The memory model's schedules (MEMORY_CAND_FIELDS "schedule"): 1f1b and interleaved share a rule
#: (ndcost.kernels.memory.inflight_micro_batches).
MEMORY_SCHEDULES: tuple[str, ...] = ("1f1b", "gpipe", "zero_bubble_v", "seq1f1b", "dualpipev", "dualpipe")
#: The memory model's schedule of each pp_schedule.
MEMORY_SCHEDULE_OF: dict[str, str] = {name: "1f1b" if name == "interleaved" else name for name in PP_SCHEDULES}
if not set(MEMORY_SCHEDULE_OF.values()) <= set(MEMORY_SCHEDULES):   # a new schedule needs its in-flight rule
    raise ImportError("pipeline schedules without a memory rule (ndcost.kernels.codes.MEMORY_SCHEDULES, "
                      f"ndcost.kernels.memory.inflight_micro_batches): "
                      f"{sorted(set(MEMORY_SCHEDULE_OF.values()) - set(MEMORY_SCHEDULES))}")
#: The memory model's attention flavours (MEMORY_KIND_FIELDS "attention": LayerKind.attention's names).
MEMORY_ATTENTIONS: tuple[str, ...] = ("full", "mla", "linear", "mamba", "none", "mamba1")
#: The memory model's FFN flavours (MEMORY_KIND_FIELDS "ffn": LayerKind.ffn's names).
MEMORY_FFNS: tuple[str, ...] = ("dense", "moe", "none")
#: How the memory model's context parallelism holds K/V (MEMORY_CAND_FIELDS "cp_ring"): Ulysses, the P2P ring,
#: PyTorch's all-gather ring (ExecSpec.cp_algo "ulysses", "ring", "ring-allgather").
MEMORY_CP: tuple[str, ...] = ("ulysses", "ring", "ring-allgather")

#: ND's ops of one layer, in the order of every per-op output of the ND kernels (the entries of the seed's
#: op_table plus the MoE dispatch of _flavour_tables).
ND_OPS: tuple[str, ...] = (
    "attMM", "linrec", "ffMM", "attBMM", "softmax", "headCast",
    "gather", "ffAct", "normOp", "qknorm", "dropout", "dispatch",
)
#: ND's estimator options (ND_OPTION_FIELDS; docs/ND_MODEL.md §2.7): how compute and comm are weighed, what
#: recompute adds, how P2P is priced.
RATIO_TYPES: tuple[str, ...] = ("DYNAMIC", "STATIC", "COMPUTE_ONLY", "COMM_ONLY")
REC_TYPES: tuple[str, ...] = ("WITH", "NONE", "COMPUTE_ONLY", "COMM_ONLY")
P2P_MODES: tuple[str, ...] = ("NONE", "MANUAL")

#: Every enumeration the compiled kernels read, as (C prefix, names, upper-case): the C name of a code is
#: prefix + "_" + its name (hyphens as underscores; upper-cased unless the names are ND's op spellings).
ENUMS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("SEC", SCHEDULES, True),
    ("SEC_EP", EP_OVERLAPS, True),
    ("SEC_DISPATCH", DISPATCHERS, True),
    ("SEC_PERMUTE", PERMUTES, True),
    ("SEC_GEMMS", GEMM_LAUNCHES, True),
    ("SEC_BIAS", BIAS_ADDS, True),
    ("SEC_CLAMP", CLAMPS, True),
    ("SEC_ROPE", ROPE_APPLIES, True),
    ("SEC", COLLECTIVES, True),
    ("SEC_MIXER", MIXERS, True),
    ("SEC_SCOPE", SCOPES, True),
    ("_MEM_SCHED", MEMORY_SCHEDULES, True),
    ("_MEM_ATT", MEMORY_ATTENTIONS, True),
    ("_MEM_FFN", MEMORY_FFNS, True),
    ("_MEM_CP", MEMORY_CP, True),
    ("OP", ND_OPS, False),
    ("BIT", SWITCHES, False),
    ("RATIO", RATIO_TYPES, True),
    ("REC", REC_TYPES, True),
    ("P2P", P2P_MODES, True),
)


def c_name(prefix: str, name: str, upper: bool) -> str:
    """The C name of code *name* of an enumeration (ENUMS)."""
    name = name.replace("-", "_")
    return f"{prefix}_{name.upper() if upper else name}"
