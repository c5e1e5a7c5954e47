"""The memory kernels on a submodule's layer kinds (a vision tower) and a kind's census.

A layer kind carries its own hidden size and tokens per sample (``hidden``,
``seq_tokens``), an attention window (``att_window``) and, from HyperParallel's
census, the bytes per token a plain layer keeps and a selective layer running the
HyperParallel policy keeps (``census_*``); the model carries the vision tower's patch
embedding and merger params (``p_vision_extra``). The tables here are a catalog
model's tables with a row edited; every expected value is written out by hand.

The harness runs ``memory_batch`` on two stages with both ends on stage 0 and the
layers under test on stage 1, where one micro-batch is in flight (1F1B, p = m = 2):
stage 1's activations are exactly the layers' kept bytes, its working set the
layer's, its comm buffers the layer's and its static bytes the layer's.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from ndcost.kernels.columns import (
    HYPER_POLICY_MASK, MEMORY_CAND_FIELDS, MEMORY_KIND, MEMORY_MODEL, OPTION_FULL,
    OPTION_NONE, OPTION_SELECTIVE,
)
from ndcost.tables.layout_pool import LayoutPiece, pack_layouts
from ndcost.tables.memory import memory_kind_table, memory_model_vector
from ndcost.spec.model import Model

RTOL = 1e-12
PARAMS, GRADS, OPTIM, ACT, COMM, WORK, RESERVE, TOTAL = range(8)


# --------------------------------------------------------------------------- harness


def text_tables() -> tuple[np.ndarray, np.ndarray]:
    """Writable copies of llama3-8b's memory kind table (one kind: h 4096, 32 heads of 128,
    8 kv heads, SwiGLU 14336) and model vector."""
    model = Model.from_catalog("llama3-8b")
    return np.array(memory_kind_table(model)), np.array(memory_model_vector(model))


def vision_row(row: np.ndarray, **changes: float) -> np.ndarray:
    """A Qwen2.5-VL-like vision block from a text row: h 1280, 16 heads of 80 (MHA), SwiGLU 3420,
    1024 tokens per sample (and *changes*)."""
    row = np.array(row)
    values = dict(hidden=1280.0, heads=16.0, kv_heads=16.0, head_dim=80.0, ffn_width=3420.0, gated=1.0,
                  seq_tokens=1024.0, p_nonexp=19_688_960.0)
    values.update(changes)
    for name, value in values.items():
        row[MEMORY_KIND[name]] = value
    return row


def candidate(**changes: float) -> np.ndarray:
    """A memory candidate written by hand (MEMORY_CAND_FIELDS): 2 stages, 2 micro-batches, 1F1B."""
    values = dict(seq=4096.0, b=2.0, tp=2.0, sp=2.0, cp=1.0, etp=1.0, ep=1.0, p=2.0, vp=1.0, m=2.0, seq_split=1.0,
                  schedule=0.0, token_factor=1.0, flash=0.0, slice_input=0.0, bytes_c=2.0, bytes_softmax=2.0,
                  bytes_dropout=0.0, bytes_norm=2.0, bytes_linear=2.0, w_param=2.0, w_grad=4.0, w_optim=12.0, div_param=1.0,
                  div_grad=2.0, div_optim=4.0, ediv_param=1.0, ediv_grad=1.0, ediv_optim=1.0, fsdp_gathers=0.0,
                  shards_grads=0.0, cp_ring=1.0, tie_emb=0.0, bytes_logit=4.0, w_fp8_cache=0.0, autocast=0.0,
                  grads_none=0.0, moe_weighted_act=1.0, fp8_act_store=0.0, z3_param_fetch=0.0)
    values.update(changes)
    assert set(values) == set(MEMORY_CAND_FIELDS)
    return np.array([values[name] for name in MEMORY_CAND_FIELDS], dtype=np.float64)


def run(kernels, kinds, model, mc, counts, options, masks, emb_stage=0, out_stage=0, emb_chunk=0, out_chunk=None,
        mtp_out=0) -> np.ndarray:
    """memory_batch of one candidate on one layout: its (p, 8) stage rows."""
    counts = np.asarray(counts, dtype=np.float64)
    p, vp = counts.shape[:2]
    piece = LayoutPiece(counts, np.asarray(options, dtype=np.int64), np.asarray(masks, dtype=np.int64), emb_stage,
                        out_stage, emb_chunk, vp - 1 if out_chunk is None else out_chunk, mtp_out)
    pool = pack_layouts([piece])
    out = np.full((1, p, 8), -1.0)
    kernels.memory_batch(np.ascontiguousarray(kinds, dtype=np.float64), np.ascontiguousarray(model),
                         np.ascontiguousarray(np.asarray(mc).reshape(-1, 1)), np.zeros(1, dtype=np.int64),
                         pool.layouts, pool.pool, pool.slot_pool, 0.0, 1e30, np.zeros(1, dtype=np.int64),
                         np.empty(1), np.empty(1, dtype=np.uint8), out)
    return out[0]


def layer_stage(kernels, kinds, model, mc, kind: int, option: int, mask: int = 255) -> np.ndarray:
    """Stage 1's row with one layer of *kind* running (option, mask) there, both ends on stage 0."""
    counts = np.zeros((2, 1, len(kinds), 1))
    counts[1, 0, kind, 0] = 1.0
    return run(kernels, kinds, model, mc, counts, [option], [mask])[1]


def table_with(row: np.ndarray, base: np.ndarray) -> np.ndarray:
    """The text table with *row* appended as kind 1."""
    return np.vstack([base, row[None, :]])


# --------------------------------------------------------------------------- hand formulas


def plain_mha_dense(tokens: float, hidden: float, heads_local: float, head_dim: float, keys: float,
                    width_local: float, sp: float, kv_local: float | None = None, c: float = 2.0, norm: float = 2.0,
                    softmax: float = 2.0) -> float:
    """A plain attention + SwiGLU layer, no dropout, softmax in the compute dtype (Korthikanti §4.1):
    norms 2·(tokens·h/sp)·norm; QKV input (tokens·h/sp)·c; Q, K, V and the core output
    (2·heads_local + 2·kv_local)·head_dim·tokens·c; the softmax output heads_local·tokens·keys·softmax
    (no separate P·V copy: no dropout, no cast); FFN input (tokens·h/sp)·c, gate and up outputs
    and the activation output 3·width_local·tokens·c."""
    kv_local = heads_local if kv_local is None else kv_local
    residual = tokens * hidden / sp
    return (2.0 * residual * norm
            + residual * c + tokens * c * (2.0 * heads_local + 2.0 * kv_local) * head_dim
            + heads_local * tokens * keys * softmax
            + residual * c + tokens * c * 3.0 * width_local)


# --------------------------------------------------------------------------- 1. the kind's hidden size and tokens


def test_a_vision_kind_runs_on_its_own_hidden_size_and_tokens(kernels):
    base, model = text_tables()
    kinds = table_with(vision_row(base[0]), base)
    mc = candidate()                         # the text runs 4096 tokens; the vision kind 1024
    row = layer_stage(kernels, kinds, model, mc, 1, OPTION_NONE)
    tokens = 1024 * 2 / 1                    # seq_tokens · b / cp
    expected = plain_mha_dense(tokens, 1280, 16 / 2, 80, 1024, 3420 / 2, sp=2)
    assert row[ACT] == pytest.approx(expected, rel=RTOL)
    # By hand, term by term: 5,242,880 (norms) + 2,621,440 (QKV input) + 10,485,760 (Q, K, V, out)
    # + 33,554,432 (scores) + 2,621,440 (FFN input) + 21,012,480 (SwiGLU) = 75,538,432.
    assert row[ACT] == 75_538_432.0
    # SP's all-gathered layer input: tokens · 1280 · 2 bytes (the text kind's would be 8192 · 4096 · 2).
    assert row[COMM] == pytest.approx(2048 * 1280 * 2, rel=RTOL)
    assert row[WORK] == 0.0
    # Its static bytes: p_nonexp / tp · (2, 4 / 2, 12 / 4).
    np.testing.assert_allclose(row[:3], [19_688_960 / 2 * 2, 19_688_960 / 2 * 2, 19_688_960 / 2 * 3], rtol=RTOL)
    # The text kind next to it is priced as before: its hidden size and the candidate's tokens.
    # (GQA: 32 heads and 8 kv heads of 128 over tp 2; 4096 · 2 tokens.)
    text = layer_stage(kernels, kinds, model, mc, 0, OPTION_NONE)
    assert text[ACT] == pytest.approx(plain_mha_dense(8192, 4096, 16, 128, 4096, 14336 / 2, sp=2, kv_local=4),
                                      rel=RTOL)
    assert text[COMM] == pytest.approx(8192 * 4096 * 2, rel=RTOL)


def test_full_recompute_keeps_the_kinds_input(kernels):
    base, model = text_tables()
    kinds = table_with(vision_row(base[0]), base)
    for slice_input, divisor in ((0, 2), (1, 4)):          # tp 4, sp 2: slicing splits over tp
        mc = candidate(slice_input=float(slice_input), tp=4.0, sp=2.0)
        row = layer_stage(kernels, kinds, model, mc, 1, OPTION_FULL, 0)
        assert row[ACT] == pytest.approx(2048 * 1280 * 2 / divisor, rel=RTOL)
        # The working set re-materialises the plain layer (tp 4: 4 local heads of 80, width 855).
        assert row[WORK] == pytest.approx(plain_mha_dense(2048, 1280, 4, 80, 1024, 855, sp=2), rel=RTOL)


def test_context_parallel_buffers_on_the_kinds_tokens(kernels):
    base, model = text_tables()
    kinds = table_with(vision_row(base[0]), base)
    # Ring CP, no SP: K and V chunks double-buffered, 2 · tokens · (k + v widths) · c, tokens = 1024 · 2 / 2.
    mc = candidate(cp=2.0, sp=1.0, cp_ring=1.0)
    row = layer_stage(kernels, kinds, model, mc, 1, OPTION_NONE)
    assert row[COMM] == pytest.approx(2 * 1024 * (8 * 80 + 8 * 80) * 2, rel=RTOL)
    # Ulysses: q, k and v in and out.
    row = layer_stage(kernels, kinds, model, candidate(cp=2.0, sp=1.0, cp_ring=0.0), 1, OPTION_NONE)
    assert row[COMM] == pytest.approx(2 * 1024 * (3 * 8 * 80) * 2, rel=RTOL)
    # The activations split the kind's sequence over cp: 1024 tokens, 1024 keys each.
    expected = plain_mha_dense(1024, 1280, 8, 80, 1024, 1710, sp=1)
    assert row[ACT] == pytest.approx(expected, rel=RTOL)


def test_seq1f1b_splits_the_kinds_tokens_as_the_candidates(kernels):
    """Seq1F1B prices a layer per sequence chunk (the candidate's seq is s / seq_split, the
    in-flight counts count chunks): a kind's own tokens are split the same way."""
    base, model = text_tables()
    kinds = table_with(vision_row(base[0]), base)
    mc = candidate(schedule=3.0, seq_split=4.0, seq=1024.0)
    row = layer_stage(kernels, kinds, model, mc, 1, OPTION_NONE)
    # Stage 1 of 2, 2 micro-batches: base − stage + seq_split − 1 = 4 chunks in flight, each of 256 tokens.
    assert row[ACT] == pytest.approx(4 * plain_mha_dense(256 * 2, 1280, 8, 80, 256, 1710, sp=2), rel=RTOL)
    assert row[COMM] == pytest.approx(256 * 2 * 1280 * 2, rel=RTOL)


def test_seq_tokens_equal_to_the_candidates_change_nothing(kernels):
    base, model = text_tables()
    same = np.array(base)
    same[0, MEMORY_KIND["seq_tokens"]] = 4096.0
    for option, mask in ((OPTION_NONE, 255), (OPTION_FULL, 0), (OPTION_SELECTIVE, 0x41), (OPTION_SELECTIVE, 0)):
        for mc in (candidate(), candidate(cp=2.0, sp=1.0), candidate(flash=1.0, bytes_dropout=1.0)):
            a = layer_stage(kernels, base, model, mc, 0, option, mask)
            b = layer_stage(kernels, same, model, mc, 0, option, mask)
            np.testing.assert_array_equal(a, b)


def test_a_vision_kind_equals_a_plain_model_of_its_size(kernels):
    """A kind row with hidden 1280 and seq_tokens 1024 in a 4096-hidden model at seq 4096 ==
    the kind of a plain 1280-hidden Model at seq 1024, in every option."""
    text = Model.from_catalog("llama3-8b")
    small = dataclasses.replace(text, hidden_size=1280, num_attention_heads=16, num_key_value_heads=16, head_dim=80,
                                intermediate_size=3420)
    small_row = np.array(memory_kind_table(small)[0])
    assert small_row[MEMORY_KIND["hidden"]] == 1280 and small_row[MEMORY_KIND["seq_tokens"]] == 0
    row = np.array(small_row)
    row[MEMORY_KIND["seq_tokens"]] = 1024.0
    kinds = table_with(row, np.array(memory_kind_table(text)))
    model = np.array(memory_model_vector(text))
    small_model = np.array(memory_model_vector(small))
    settings = [(OPTION_NONE, 255), (OPTION_FULL, 0)] + [(OPTION_SELECTIVE, mask) for mask in (0, 0x81, 0x7F, 255)]
    for fields in (dict(), dict(cp=2.0, sp=1.0), dict(cp=2.0, cp_ring=0.0, tp=4.0, sp=4.0), dict(flash=1.0),
                   dict(bytes_dropout=1.0, bytes_softmax=4.0, fsdp_gathers=1.0, shards_grads=1.0)):
        for option, mask in settings:
            vision = layer_stage(kernels, kinds, model, candidate(**fields), 1, option, mask)
            plain = layer_stage(kernels, small_row[None, :], small_model, candidate(**{**fields, "seq": 1024.0}),
                                0, option, mask)
            np.testing.assert_array_equal(vision[[PARAMS, GRADS, OPTIM, ACT, COMM, WORK]],
                                          plain[[PARAMS, GRADS, OPTIM, ACT, COMM, WORK]])


def test_model_level_parts_stay_on_the_models_hidden_size(kernels):
    """The embedding and output activations (stage 0 here) follow the model's h and the
    candidate's seq, whatever the kinds' hidden sizes and tokens."""
    base, model = text_tables()
    mc = candidate(bytes_dropout=1.0)
    counts = np.zeros((2, 1, 2, 1))
    counts[1, 0, 1, 0] = 1.0
    small = run(kernels, table_with(vision_row(base[0]), base), model, mc, counts, [0], [255])
    text = run(kernels, table_with(base[0], base), model, mc, counts, [0], [255])
    np.testing.assert_array_equal(small[0], text[0])
    tokens = 4096 * 2
    logits = tokens * 128256 * 4 / 2
    emb = tokens * 8 + tokens * 4096 * 1 / 2
    out = tokens * 4096 * 2 / 2 + tokens * 4096 * 2 / 2 + logits
    assert small[0, ACT] == pytest.approx(2 * (emb + out), rel=RTOL)   # stage 0: 2 micro-batches in flight


# --------------------------------------------------------------------------- 2. windowed attention


def test_a_window_shrinks_the_score_matrices(kernels):
    base, model = text_tables()
    mc = candidate()
    windowed = table_with(vision_row(base[0], att_window=64.0), base)
    row = layer_stage(kernels, windowed, model, mc, 1, OPTION_NONE)
    # The scores keep heads_local · tokens · min(64, 1024) elements: 8 · 2048 · 64 · 2 bytes.
    assert row[ACT] == pytest.approx(plain_mha_dense(2048, 1280, 8, 80, 64, 1710, sp=2), rel=RTOL)
    assert row[ACT] == 75_538_432.0 - 8 * 2048 * (1024 - 64) * 2
    # A window of the whole sequence or more is no window.
    whole = layer_stage(kernels, table_with(vision_row(base[0]), base), model, mc, 1, OPTION_NONE)
    for window in (1024.0, 5000.0):
        wide = layer_stage(kernels, table_with(vision_row(base[0], att_window=window), base), model, mc, 1,
                           OPTION_NONE)
        np.testing.assert_array_equal(wide, whole)
    # Dropout and a wider softmax dtype: every score term shrinks by the same factor.
    mc = candidate(bytes_dropout=1.0, bytes_softmax=4.0)
    a = layer_stage(kernels, windowed, model, mc, 1, OPTION_NONE)[ACT]
    b = layer_stage(kernels, table_with(vision_row(base[0]), base), model, mc, 1, OPTION_NONE)[ACT]
    assert b - a == pytest.approx(8 * 2048 * (1024 - 64) * (4 + 1 + 2), rel=1e-9)


def test_a_window_changes_nothing_under_flash(kernels):
    base, model = text_tables()
    mc = candidate(flash=1.0)
    a = layer_stage(kernels, table_with(vision_row(base[0], att_window=64.0), base), model, mc, 1, OPTION_NONE)
    b = layer_stage(kernels, table_with(vision_row(base[0]), base), model, mc, 1, OPTION_NONE)
    np.testing.assert_array_equal(a, b)
    # Flash keeps the fp32 logsumexp: 8 heads · 2048 rows · 4 bytes.
    residual = 2048 * 1280 / 2
    expected = 2 * residual * 2 + residual * 2 + 2048 * 2 * 4 * 8 * 80 + 8 * 2048 * 4 + residual * 2 + 2048 * 2 * 3 * 1710
    assert a[ACT] == pytest.approx(expected, rel=RTOL)


def test_a_window_in_a_selective_setting(kernels):
    base, model = text_tables()
    kinds = table_with(vision_row(base[0], att_window=64.0), base)
    # Recomputing the softmax (bit 3 cleared) drops the windowed scores; the working set
    # brings them back: 8 · 2048 · 64 · 2 bytes.
    mask = 255 & ~(1 << 3)
    row = layer_stage(kernels, kinds, model, candidate(), 1, OPTION_SELECTIVE, mask)
    assert row[ACT] == pytest.approx(plain_mha_dense(2048, 1280, 8, 80, 0, 1710, sp=2), rel=RTOL)
    assert row[WORK] == pytest.approx(8 * 2048 * 64 * 2, rel=RTOL)


# --------------------------------------------------------------------------- 3. census activations


def census_row(base_row: np.ndarray, saved=1000.0, saved_tp=3000.0, sel=400.0, sel_tp=600.0, **changes) -> np.ndarray:
    return vision_row(base_row, census_saved=saved, census_saved_tp=saved_tp, census_sel=sel, census_sel_tp=sel_tp,
                      **changes)


def test_a_census_prices_the_plain_layer(kernels):
    base, model = text_tables()
    kinds = table_with(census_row(base[0]), base)
    # tokens = 1024 · 2 / 2 (cp 2); kept = tokens · (1000 / sp 2 + 3000 / tp 2).
    mc = candidate(cp=2.0)
    row = layer_stage(kernels, kinds, model, mc, 1, OPTION_NONE)
    assert row[ACT] == pytest.approx(1024 * (1000 / 2 + 3000 / 2), rel=RTOL)
    assert row[ACT] == 2_048_000.0
    # Without SP, the sp part stays whole: tp 4, sp 1.
    row = layer_stage(kernels, kinds, model, candidate(tp=4.0, sp=1.0), 1, OPTION_NONE)
    assert row[ACT] == pytest.approx(2048 * (1000 / 1 + 3000 / 4), rel=RTOL)
    # The census prices what the layer keeps, not its buffers or params.
    plain = layer_stage(kernels, table_with(vision_row(base[0]), base), model, mc, 1, OPTION_NONE)
    row = layer_stage(kernels, kinds, model, mc, 1, OPTION_NONE)
    np.testing.assert_array_equal(row[[PARAMS, GRADS, OPTIM, COMM]], plain[[PARAMS, GRADS, OPTIM, COMM]])
    assert row[WORK] == 0.0


def test_a_census_prices_the_hyperparallel_policy(kernels):
    base, model = text_tables()
    kinds = table_with(census_row(base[0]), base)
    mc = candidate(cp=2.0)
    row = layer_stage(kernels, kinds, model, mc, 1, OPTION_SELECTIVE, HYPER_POLICY_MASK)
    assert HYPER_POLICY_MASK == 0x81
    assert row[ACT] == pytest.approx(1024 * (400 / 2 + 600 / 2), rel=RTOL)
    # Its working set: the census's plain layer minus what the policy keeps, at one micro-batch.
    assert row[WORK] == pytest.approx(1024 * (1000 / 2 + 3000 / 2) - 1024 * (400 / 2 + 600 / 2), rel=RTOL)
    # A census of the plain layer alone: the policy falls back on the formulas.
    only_plain = table_with(census_row(base[0], sel=-1.0, sel_tp=-1.0), base)
    formulas = table_with(vision_row(base[0]), base)
    a = layer_stage(kernels, only_plain, model, mc, 1, OPTION_SELECTIVE, HYPER_POLICY_MASK)
    b = layer_stage(kernels, formulas, model, mc, 1, OPTION_SELECTIVE, HYPER_POLICY_MASK)
    np.testing.assert_array_equal(a, b)


def test_other_settings_keep_the_formulas(kernels):
    base, model = text_tables()
    with_census = table_with(census_row(base[0]), base)
    formulas = table_with(vision_row(base[0]), base)
    for mc in (candidate(), candidate(cp=2.0, sp=1.0), candidate(flash=1.0, bytes_dropout=1.0)):
        for option, mask in [(OPTION_FULL, 0), (OPTION_FULL, HYPER_POLICY_MASK)] + [
                (OPTION_SELECTIVE, m) for m in (0, 0x80, 0x01, 0x83, 0xC1, 0x7F, 255)]:
            a = layer_stage(kernels, with_census, model, mc, 1, option, mask)
            b = layer_stage(kernels, formulas, model, mc, 1, option, mask)
            assert a[ACT] == b[ACT], (option, mask)
            if option == OPTION_SELECTIVE:
                # What such a setting recomputes is the formulas' own difference.
                assert a[WORK] == b[WORK], mask
            else:
                # Full recompute re-materialises the plain layer: the census's.
                plain = layer_stage(kernels, with_census, model, mc, 1, OPTION_NONE)
                assert a[WORK] == plain[ACT]


def test_a_census_without_its_tp_part_is_undefined(kernels):
    base, model = text_tables()
    kinds = table_with(census_row(base[0], saved_tp=-1.0), base)
    row = layer_stage(kernels, kinds, model, candidate(), 1, OPTION_NONE)
    assert math.isnan(row[ACT]) and math.isnan(row[TOTAL])
    # A zero census is a census: the layer keeps nothing.
    kinds = table_with(census_row(base[0], saved=0.0, saved_tp=0.0), base)
    assert layer_stage(kernels, kinds, model, candidate(), 1, OPTION_NONE)[ACT] == 0.0


def test_census_activations_times_the_micro_batches_in_flight(kernels):
    """On stage 0 of 2 with 4 micro-batches (1F1B), two are in flight: 2 · tokens · kept per token."""
    base, model = text_tables()
    kinds = table_with(census_row(base[0]), base)
    mc = candidate(m=4.0)
    counts = np.zeros((2, 1, 2, 2))
    counts[0, 0, 1, 0] = 3.0                  # three plain vision layers
    counts[0, 0, 1, 1] = 2.0                  # two running the policy
    counts[1, 0, 0, 0] = 1.0                  # the text on stage 1
    with_layers = run(kernels, kinds, model, mc, counts, [OPTION_NONE, OPTION_SELECTIVE], [255, HYPER_POLICY_MASK],
                      emb_stage=0, out_stage=1)
    counts[0] = 0.0
    without = run(kernels, kinds, model, mc, counts, [OPTION_NONE, OPTION_SELECTIVE], [255, HYPER_POLICY_MASK],
                  emb_stage=0, out_stage=1)
    tokens = 1024 * 2
    expected = 2 * (3 * tokens * (1000 / 2 + 3000 / 2) + 2 * tokens * (400 / 2 + 600 / 2))
    assert with_layers[0, ACT] - without[0, ACT] == pytest.approx(expected, rel=1e-9)


# --------------------------------------------------------------------------- 4. the vision tower's own params


def test_vision_extra_params_sit_on_the_embedding_stage(kernels):
    base, model = text_tables()
    kinds = table_with(vision_row(base[0]), base)
    extra = 45_000_000.0
    model[MEMORY_MODEL["p_vision_extra"]] = extra
    mc = candidate()                                     # tp 2; w 2 / 4 / 12; ZeRO divisors 1 / 2 / 4
    counts = np.zeros((2, 1, 2, 1))
    counts[1, 0, :, 0] = 1.0
    rows = run(kernels, kinds, model, mc, counts, [0], [255], emb_stage=0, out_stage=1)
    p_embedding = 128256 * 4096
    np.testing.assert_allclose(rows[0, :3], [(p_embedding + extra) / 2 * 2 / 1, (p_embedding + extra) / 2 * 4 / 2,
                                             (p_embedding + extra) / 2 * 12 / 4], rtol=RTOL)
    assert rows[0, PARAMS] == 570_336_576.0          # (525,336,576 + 45,000,000) / 2 · 2
    # Nothing else moves: the other stage and every other part are those of a model without them.
    model[MEMORY_MODEL["p_vision_extra"]] = 0.0
    plain = run(kernels, kinds, model, mc, counts, [0], [255], emb_stage=0, out_stage=1)
    np.testing.assert_array_equal(rows[1], plain[1])
    np.testing.assert_array_equal(rows[0, 3:7], plain[0, 3:7])
    np.testing.assert_allclose(rows[0, :3] - plain[0, :3], [extra / 2 * 2, extra / 2 * 2, extra / 2 * 3], rtol=1e-9)
    # They follow the embedding wherever it runs.
    model[MEMORY_MODEL["p_vision_extra"]] = extra
    moved = run(kernels, kinds, model, mc, counts, [0], [255], emb_stage=1, out_stage=1)
    plain = np.array(model)
    plain[MEMORY_MODEL["p_vision_extra"]] = 0.0
    moved_plain = run(kernels, kinds, plain, mc, counts, [0], [255], emb_stage=1, out_stage=1)
    np.testing.assert_array_equal(moved[0], moved_plain[0])
    np.testing.assert_allclose(moved[1, :3] - moved_plain[1, :3], [extra, extra, 1.5 * extra], rtol=1e-9)


# --------------------------------------------------------------------------- backend parity


def random_kinds(rng: np.random.Generator, base: np.ndarray) -> np.ndarray:
    rows = []
    for _ in range(int(rng.integers(1, 4))):
        row = np.array(base[int(rng.integers(0, len(base)))])
        if rng.random() < 0.6:
            row[MEMORY_KIND["hidden"]] = float(rng.choice([640, 1280, 1536, 4096]))
            row[MEMORY_KIND["seq_tokens"]] = float(rng.choice([0, 256, 1024, 4096, 16384]))
        if rng.random() < 0.4:
            row[MEMORY_KIND["att_window"]] = float(rng.choice([0, 64, 112, 2048, 100000]))
        if rng.random() < 0.4:
            row[MEMORY_KIND["census_saved"]] = float(rng.uniform(0, 4e4))
            row[MEMORY_KIND["census_saved_tp"]] = float(rng.uniform(0, 4e4))
            if rng.random() < 0.7:
                row[MEMORY_KIND["census_sel"]] = float(rng.uniform(0, 2e4))
                row[MEMORY_KIND["census_sel_tp"]] = float(rng.uniform(0, 2e4))
        if rng.random() < 0.03:      # undefined columns: NaN in both backends
            name = str(rng.choice(["seq_tokens", "att_window", "census_saved_tp", "census_sel_tp"]))
            row[MEMORY_KIND[name]] = -1.0 if name.startswith("census") else -5.0
            if name.startswith("census"):
                row[MEMORY_KIND[name.replace("_tp", "")]] = 10.0
        rows.append(row)
    return np.vstack(rows)


def random_candidate(rng: np.random.Generator, p: int, vp: int) -> np.ndarray:
    tp = float(rng.choice([1, 2, 4, 8]))
    schedule = float(rng.choice([0, 3] if vp > 2 else ([0, 1, 3] if vp == 1 else [0, 2, 3])))
    return candidate(
        seq=float(rng.choice([1024, 4096, 8192])), b=float(rng.integers(1, 4)), tp=tp,
        sp=tp if rng.random() < 0.5 else 1.0, cp=float(rng.choice([1, 2, 4])), etp=float(rng.choice([1, tp])),
        ep=float(rng.choice([1, 2, 8])), p=float(p), vp=float(vp), m=float(rng.integers(1, 9)),
        seq_split=float(rng.choice([1, 2, 4])) if schedule == 3 else 1.0, schedule=schedule,
        token_factor=float(rng.choice([1.0, 1.25])), flash=float(rng.integers(0, 2)),
        slice_input=float(rng.integers(0, 2)), bytes_c=2.0, bytes_softmax=float(rng.choice([2, 4])),
        bytes_dropout=float(rng.choice([0, 1])), bytes_norm=float(rng.choice([2, 4])), w_param=2.0,
        w_grad=float(rng.choice([2, 4])), w_optim=12.0, div_param=float(rng.choice([1, 8])),
        div_grad=float(rng.choice([1, 8])), div_optim=float(rng.choice([1, 8])), ediv_param=1.0,
        ediv_grad=float(rng.choice([1, 2])), ediv_optim=float(rng.choice([1, 2])),
        fsdp_gathers=float(rng.integers(0, 2)), shards_grads=float(rng.integers(0, 2)),
        cp_ring=float(rng.integers(0, 2)), tie_emb=float(rng.integers(0, 2)),
        bytes_linear=float(rng.choice([1, 2])))


def random_piece(rng: np.random.Generator, p: int, vp: int, n_kinds: int) -> LayoutPiece:
    n_slots = int(rng.integers(1, 4))
    counts = rng.integers(0, 4, size=(p, vp, n_kinds, n_slots)).astype(np.float64)
    counts[rng.random(counts.shape) < 0.5] = 0.0
    options = rng.integers(0, 3, size=n_slots)
    masks = np.where(rng.random(n_slots) < 0.4, HYPER_POLICY_MASK, rng.integers(0, 256, size=n_slots))
    return LayoutPiece(counts, options, masks, int(rng.integers(0, p)), int(rng.integers(0, p)), 0, vp - 1,
                       int(rng.integers(0, 2)))


def test_backend_parity_on_random_rows(ckernels, pykernels):
    rng = np.random.default_rng(20250611)
    text_models = ("llama3-8b", "deepseek-v3", "qwen3-next-80b-a3b", "mixtral-8x7b")
    bases = {name: np.array(memory_kind_table(Model.from_catalog(name))) for name in text_models}
    vectors = {name: np.array(memory_model_vector(Model.from_catalog(name))) for name in text_models}
    n_rows = n_finite = 0
    for batch in range(30):
        name = text_models[batch % len(text_models)]
        kinds = random_kinds(rng, bases[name])
        model = np.array(vectors[name])
        model[MEMORY_MODEL["p_vision_extra"]] = float(rng.choice([0.0, 4.5e7]))
        pieces, cands = [], []
        for _ in range(10):
            p, vp = int(rng.integers(1, 5)), int(rng.choice([1, 1, 2, 3]))
            pieces.append(random_piece(rng, p, vp, len(kinds)))
            cands.append(random_candidate(rng, p, vp))
        pool = pack_layouts(pieces)
        n = len(cands)
        cand_matrix = np.ascontiguousarray(np.stack(cands, axis=1))
        results = []
        for kernels in (ckernels, pykernels):
            out = np.full((n, pool.max_pp, 8), -1.0)
            peak, fits = np.empty(n), np.empty(n, dtype=np.uint8)
            reason = np.zeros(n, dtype=np.int64)
            kernels.memory_batch(kinds, model, cand_matrix, np.arange(n, dtype=np.int64), pool.layouts, pool.pool,
                                 pool.slot_pool, 2.0**30, 80e9, reason, peak, fits, out)
            results.append((out, peak, fits, reason))
        (c_out, c_peak, c_fits, c_reason), (py_out, py_peak, py_fits, py_reason) = results
        np.testing.assert_allclose(c_out, py_out, rtol=RTOL, atol=0, equal_nan=True)
        np.testing.assert_allclose(c_peak, py_peak, rtol=RTOL, atol=0, equal_nan=True)
        np.testing.assert_array_equal(c_fits, py_fits)
        np.testing.assert_array_equal(c_reason, py_reason)
        n_rows += n
        n_finite += int(np.isfinite(py_peak).sum())
    assert n_rows == 300 and n_finite >= 200


def test_tower_edges_keep_their_activations_on_the_embedding_stage(kernels, monkeypatch):
    """Qwen2.5-VL-7B, 4,096 patches, b 1, tp 2 with SP: the patch embedding keeps its input patches
    (4096/2 x 1176 at bytes_c), the merger its norm input (4096/2 x 1280 at bytes_norm), fc1's
    input (1024 x 5120 / 2) and GELU's input and output (2 x 1024 x 5120/2), each micro-batch in
    flight on the embedding's stage (4 at 1F1B, pp 4); no other stage changes."""
    import ndcost.tables.memory
    from ndcost import Cluster, ExecSpec, _backend
    from ndcost.kernels.columns import MEMORY_CAND, MEMORY_MODEL
    from ndcost.tables.layout import build_layout
    from ndcost.tables.memory import memory_candidate_vector, memory_estimate

    model = Model.from_catalog("qwen2.5-vl-7b")
    spec = ExecSpec(dp=4, tp=2, pp=4, global_batch_size=256, seq_length=8192, sequence_parallel=True)
    cluster = Cluster("h100-sxm", num_devices=32)
    layout = build_layout(model, spec)
    mc = memory_candidate_vector(model, spec)
    c, n = mc[MEMORY_CAND["bytes_c"]], mc[MEMORY_CAND["bytes_norm"]]
    per_micro_batch = 4096 / 2 * (1176 * c + 1280 * n) + 1024 * 5120 * c / 2 + 2 * 1024 * 5120 / 2 * c
    with _backend.use("cython" if kernels.__name__.endswith("_c") else "python"):
        tower = memory_estimate(model, spec, cluster, layout).stages
        vector = memory_model_vector(model)
        assert vector[MEMORY_MODEL["v_patches"]] == 4096
        no_edges = np.array(vector)          # the same model vector, the tower's edges left out
        no_edges[MEMORY_MODEL["v_patches"]] = 0.0
        monkeypatch.setattr(ndcost.tables.memory, "memory_model_vector", lambda _model: no_edges)
        without = memory_estimate(model, spec, cluster, layout).stages
    assert tower[0].activations - without[0].activations == pytest.approx(4 * per_micro_batch, rel=1e-12)
    for a, b in zip(tower[1:], without[1:]):
        assert a.activations == b.activations
