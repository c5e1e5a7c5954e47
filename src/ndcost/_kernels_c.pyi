# Stub of the compiled module ndcost._kernels_c (cysrc/ndcost/_kernels_c.pyx).
# Array arguments: the exact memoryview type is in the trailing comment.
import numpy as np
import numpy.typing as npt

_F64Array = npt.NDArray[np.float64]
_I64Array = npt.NDArray[np.int64]
_U8Array = npt.NDArray[np.uint8]

# --- pipeline (kernels/pipeline.pxi) ---
def nd_straggler(stage_times: _F64Array) -> int: ...  # const double[::1]
def nd_pipeline_time(stage_times: _F64Array, micro_batch_num: int, vpp: int) -> float: ...  # const double[::1]
def nd_p2p_count(pp: int, micro_batch_num: int, vpp: int) -> float: ...
def nd_p2p_time(pp: int, micro_batch_num: int, vpp: int, straggler_time: float, sp: float, ratio: float) -> float: ...

# --- switches (kernels/switches.pxi) ---
def switch_settings(plain: _F64Array, alone: _F64Array, acting_mask: int, out: _F64Array) -> None: ...  # const double[::1], const double[:, ::1], long long, double[:, ::1]
def dominance_front(values: _F64Array, n_criteria: int, always_keep: _I64Array, out_keep: _I64Array) -> None: ...  # const double[:, ::1], long long, const long long[::1], long long[::1]
def mck_min_time(weights: _I64Array, values: _F64Array, group_start: _I64Array, budget_buckets: int, out_choice: _I64Array) -> float: ...  # const long long[::1], const double[::1], const long long[::1], long long, long long[::1]

# --- nd (kernels/nd_ops.pxi, nd_comm.pxi, nd_combine.pxi): ND's score in ND units ---
def nd_op_loads(kinds: _F64Array, model: _F64Array, cand: _F64Array, k: int, out: _F64Array) -> None: ...  # const double[:, ::1], const double[::1], const double[::1], long long, double[::1]
def nd_recompute_factors(kinds: _F64Array, k: int, option: int, keep_mask: int, out: _F64Array) -> None: ...  # const double[:, ::1], long long, long long, long long, double[::1]
def nd_fsdp_part_traffic(size: float, computed: float, kept: float, group: float, gathers: float, reduces: float, bytes_p: float, bytes_grad: float, out: _F64Array) -> None: ...  # double x 8, double[::1]
def nd_stage_sums(kinds: _F64Array, model: _F64Array, cand: _F64Array, counts: _F64Array, slot_option: _I64Array, slot_mask: _I64Array, emb_stage: int, out_stage: int, out: _F64Array) -> None: ...  # const double[:, ::1], const double[::1], const double[::1], const double[:, ::1], const long long[::1], const long long[::1], long long, long long, double[:, ::1]
def nd_combine(stage: _F64Array, cand: _F64Array, model: _F64Array, options: _F64Array, stage_savings: _F64Array, stage_focused: int, parts: _F64Array, stage_times: _F64Array) -> float: ...  # const double[:, ::1], const double[::1] x 4, long long, double[::1], double[::1]
def nd_apply_ratios(parts: _F64Array, ratios: _F64Array, out: _F64Array) -> float: ...  # const double[::1], const double[::1], double[::1]

# --- memory (kernels/memory.pxi): bytes per pipeline stage ---
def inflight_micro_batches(schedule: int, p: int, m: int, vp: int, stage: int, chunk: int, seq_split: int) -> float: ...  # long long x 7
def layer_activation_bytes(seq: float, batch: float, hidden: float, tp: float, sp: float, cp: float, etp: float, attention: int, heads: float, kv_heads: float, head_dim: float, out_gate: int, qk_norm: int, q_lora: float, kv_lora: float, qk_nope: float, qk_rope: float, v_dim: float, lin_k_heads: float, lin_k_dim: float, lin_v_heads: float, lin_v_dim: float, lin_conv: float, lin_chunk: float, ffn: int, gated: int, ffn_width: float, experts: float, top_k: float, shared_width: float, token_factor: float, flash: int, compute_bytes: float, softmax_bytes: float, dropout_bytes: float, norm_bytes: float, linear_bytes: float, option: int, keep_mask: int, slice_input: int) -> float: ...  # double for sizes, long long for codes and flags
def stage_memory(static_per_layer: _F64Array, act_per_layer: _F64Array, work_per_layer: _F64Array, counts: _F64Array, inflight: _F64Array, stage_static: _F64Array, extra_act: _F64Array, comm_buffers: _F64Array, reserve: float, out: _F64Array, overlapped_chunks: int = ...) -> None: ...  # const double[:, ::1] x 3, const double[:, :, ::1], const double[:, ::1] x 3, const double[::1], double, double[:, ::1], long long
def pair_dualpipe_rows(out: _F64Array) -> None: ...  # double[:, ::1]

# --- batch (kernels/batch.pxi): N candidates per call, the GIL released ---
def nd_estimate_batch(kinds: _F64Array, model: _F64Array, cands: _F64Array, layout_index: _I64Array, layouts: _I64Array, pool: _F64Array, slot_pool: _I64Array, options: _F64Array, ratios: _F64Array, reason: _I64Array, out_step: _F64Array, out_parts: _F64Array, out_stage_times: _F64Array) -> None: ...  # const double[:, ::1] (K, K_COUNT), const double[::1], const double[:, ::1] (C_COUNT, N), const long long[::1], const long long[:, ::1], const double[::1], const long long[::1], const double[::1] x 2, long long[::1], double[::1], double[:, :] (P_COUNT, N), double[:, ::1]
def one_tables(kinds: _F64Array, skinds: _F64Array, model: _F64Array, smodel: _F64Array, mkinds: _F64Array, mmodel: _F64Array, layout: _I64Array, pool: _F64Array, slot_pool: _I64Array, extras: _F64Array) -> object: ...  # const double[:, ::1] (K, K_COUNT), const double[:, ::1] (K, SK_COUNT), const double[::1] (M_COUNT), const double[::1] (SM_COUNT), const double[:, ::1] (K, MK_COUNT), const double[::1] (MM_COUNT), const long long[::1] (LY_COUNT), const double[::1], const long long[::1], const double[::1] (>= pp x SX_COUNT); returns the held tables nd/seconds_estimate_one read
def nd_estimate_one(tables: object, cand: tuple[float, ...], options: _F64Array, ratios: _F64Array, reserve: float, out: _F64Array, out_stage_times: _F64Array, out_stages: _F64Array) -> None: ...  # one_tables(...), tuple of numbers (C_COUNT [+ MC_COUNT]), const double[::1] (O_COUNT), const double[::1] (P_COUNT or 0), double, double[::1] (2 + P_COUNT), double[::1] (>= pp), double[:, ::1] (>= pp, 8) or (0, 8)
def memory_batch(kinds: _F64Array, model: _F64Array, cands: _F64Array, layout_index: _I64Array, layouts: _I64Array, pool: _F64Array, slot_pool: _I64Array, reserve: float, capacity: float, reason: _I64Array, out_peak: _F64Array, out_fits: _U8Array, out_stages: _F64Array) -> None: ...  # const double[:, ::1] (K, MK_COUNT), const double[::1], const double[:, ::1] (MC_COUNT, N), const long long[::1], const long long[:, ::1], const double[::1], const long long[::1], double x 2, long long[::1], double[::1], unsigned char[::1], double[:, :, ::1]
def kind_activation_bytes(kind: _F64Array, mc: _F64Array, option: int, keep_mask: int) -> float: ...  # const double[::1] (MK_COUNT,), const double[::1] (MC_COUNT,), long long x 2

# --- seconds (kernels/seconds.pxi): seconds mode, step time from rates and links ---
def seconds_collective(op: int, moved: float, n: float, stride: float, rate: _F64Array) -> float: ...  # long long, double x 3, const double[::1]
def seconds_expert_exchange(dispatcher: int, tokens: float, hidden: float, topk: float, experts: float, n: float, stride: float, node_limit: float, element_bytes: float, rate: _F64Array, device_limit: float = ...) -> float: ...  # long long, double x 8, const double[::1], double
def seconds_routing_gather(tokens: float, experts: float, n: float, stride: float, rate: _F64Array) -> float: ...  # double x 4, const double[::1]
def seconds_layer_times(kinds: _F64Array, skinds: _F64Array, model: _F64Array, smodel: _F64Array, cand: _F64Array, rate: _F64Array, out: _F64Array) -> None: ...  # const double[:, ::1] x 2, const double[::1] x 4, double[:, ::1]
def seconds_layer_ops(kinds: _F64Array, skinds: _F64Array, model: _F64Array, smodel: _F64Array, cand: _F64Array, rate: _F64Array, kind: int, out: _F64Array) -> None: ...  # const double[:, ::1] x 2, const double[::1] x 4, Py_ssize_t, double[:, ::1]
def seconds_moe_block(shape: _F64Array, cand: _F64Array, rate: _F64Array, out: _F64Array) -> None: ...  # const double[::1] x 3, double[:, ::1]
def seconds_stage_sums(kinds: _F64Array, skinds: _F64Array, model: _F64Array, smodel: _F64Array, cand: _F64Array, rate: _F64Array, counts: _F64Array, slot_option: _I64Array, slot_mask: _I64Array, extras: _F64Array, out: _F64Array) -> None: ...  # const double[:, ::1] x 2, const double[::1] x 4, const double[:, ::1], const long long[::1] x 2, const double[:, ::1], double[:, ::1]
def seconds_combine(stage: _F64Array, cand: _F64Array, parts: _F64Array, stage_times: _F64Array) -> float: ...  # const double[:, ::1], const double[::1], double[::1], double[::1]

# --- seconds_batch (kernels/seconds_batch.pxi): seconds mode over N candidates, the GIL released ---
def seconds_step_rates(stage: _F64Array, cand: _F64Array, rate: _F64Array, step: float, out: _F64Array) -> None: ...  # const double[:, ::1], const double[::1] x 2, double, double[::1] (mfu, hfu, tokens_per_second, model_flops)
def seconds_estimate_batch(kinds: _F64Array, skinds: _F64Array, model: _F64Array, smodel: _F64Array, cands: _F64Array, rates: _F64Array, rate_index: _I64Array, layout_index: _I64Array, layouts: _I64Array, pool: _F64Array, slot_pool: _I64Array, extras: _F64Array, extras_at: _I64Array, reason: _I64Array, out_step: _F64Array, out_parts: _F64Array, out_rates: _F64Array, out_stage_times: _F64Array, out_stage_sums: _F64Array) -> None: ...  # const double[:, ::1] (K, K_COUNT), const double[:, ::1] (K, SK_COUNT), const double[::1] x 2, const double[:, ::1] (SC_COUNT, N), const double[:, ::1] (Q, R_COUNT), const long long[::1] x 2, const long long[:, ::1], const double[::1], const long long[::1], const double[::1], const long long[::1], long long[::1], double[::1], double[:, :] (P_COUNT, N), double[:, :] (4, N), double[:, ::1], double[:, :, ::1] (N, >= max pp, SS_COUNT) or (0, 0, 0)
def seconds_estimate_one(tables: object, cand: tuple[float, ...], rate: _F64Array, reserve: float, out: _F64Array, out_stage_times: _F64Array, out_stage_sums: _F64Array, out_stages: _F64Array) -> None: ...  # one_tables(...), tuple of numbers (SC_COUNT [+ MC_COUNT]), const double[::1] (R_COUNT), double, double[::1] (ONE_FIELDS), double[::1] (>= pp), double[:, ::1] (>= pp, SS_COUNT), double[:, ::1] (>= pp, 8) or (0, 8)

# --- formula_rows (kernels/formula_rows.pxi, generated by tools/gen_formula_rows.py): a chunk's joint rules, derived values and candidate vectors, the GIL released ---
def formula_rows(columns: tuple[npt.NDArray, ...], start: int, stop: int, constants: _F64Array, codes: _I64Array, spec_reason: _I64Array, layout_index: _I64Array, layout_bad: _U8Array, layout_row: _I64Array, out_reason: _I64Array, out_layout: _I64Array, out_nd: _F64Array, out_seconds: _F64Array, out_memory: _F64Array, out_fixed: _F64Array) -> None: ...  # tuple of 1-D storage columns (FORMULA_ROW_FIELDS), Py_ssize_t x 2, const double[::1] (FORMULA_ROW_CONSTANTS), const long long[::1] (FORMULA_ROW_RULES) x 3, const unsigned char[::1] (L,), const long long[::1] (L,), long long[::1] x 2 (stop - start), double[:, :] (C_COUNT, n) / (SC_COUNT, n) / (MC_COUNT, n) / (1, n), each or (0, 0)

# --- codes (kernels/codes.pxi, generated from ndcost.kernels.codes and ndcost.kernels.constants) ---
def kernel_codes() -> dict[str, int | float]: ...
