"""SwitchProfile: every switch setting priced, and its dominance front (docs/ND_MODEL.md §4.4).

The kernels run on both backends through the ``kernels`` fixture; the profile
methods run on the backend the ``backend`` fixture installs. Brute force is
the seed's rule, setting by setting: ``SwitchProfile.selective``.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from ndcost import SpecError
from ndcost import _backend
from ndcost.spec.recompute_spec import ALL_KEPT, SWITCHES, switches_from_mask
from ndcost.price.switch_profile import FULL_KEEP_MASK, Cost, SwitchProfile

HYPER_POLICY = frozenset({"headCast", "dropout", "softmax", "normOp", "gather", "ffAct"})


@pytest.fixture
def backend(kernels, backend_name):
    """Run the API on the fixture's backend."""
    with _backend.use(backend_name):
        yield kernels


def make_profile(seed, *, counts=(1, 3, 6), mla=True, selective_base=False, census=False, whole=False,
                 free_switch=None):
    """A seeded profile shaped like a real layer kind: each switch saves memory and costs time,
    only ``gather`` moves the buffers kept once and the excess. *free_switch* saves and costs
    nothing (its settings duplicate others exactly)."""
    rng = np.random.default_rng(seed)
    n_counts = len(counts)

    def vary(cost, saving, extra_time, gather=False):
        excess = tuple(x + (rng.uniform(0, 4e6) if gather and 0 < j < n_counts - 1 else 0.0)
                       for j, x in enumerate(cost.excess))
        return Cost(cost.memory_per_micro_batch - saving,
                    cost.memory_once - (rng.uniform(5e6, 3e7) if gather else 0.0),
                    cost.backward_time + extra_time, excess,
                    working=cost.working + rng.uniform(-2e6, 2e6),
                    first_working=cost.first_working + rng.uniform(-2e6, 2e6),
                    census_kept=cost.census_kept - (rng.uniform(1e6, 4e7) if census else 0.0))

    plain = Cost(rng.uniform(6e8, 1e9), rng.uniform(2e7, 6e7), rng.uniform(5e-3, 2e-2),
                 tuple(0.0 for _ in counts), working=rng.uniform(1e7, 1e8), first_working=rng.uniform(1e7, 1e8),
                 census_kept=rng.uniform(2e8, 3e8) if census else 0.0)
    base = vary(plain, -rng.uniform(1e6, 1e7), rng.uniform(1e-5, 1e-4)) if selective_base else plain
    alone = {}
    for name in SWITCHES:
        if name == "attUp" and not mla:
            continue
        if name == free_switch:
            alone[name] = base
        else:
            alone[name] = vary(base, rng.uniform(1e7, 2e8), rng.uniform(1e-4, 3e-3), gather=name == "gather")
    full = Cost(rng.uniform(5e7, 1e8), plain.memory_once, plain.backward_time * 1.4, tuple(0.0 for _ in counts),
                working=plain.memory_per_micro_batch, first_working=plain.first_working)
    measured = {HYPER_POLICY: vary(base, rng.uniform(3e8, 4e8), rng.uniform(1e-3, 5e-3), gather=True)} if whole else {}
    held = plain.census_kept - 1.5e8 if census else None
    return SwitchProfile(rng.uniform(3e-3, 1e-2), plain, alone, full, counts,
                         selective_base=base if selective_base else None, whole=measured, census_held=held)


def recomputed(settings, row):
    """The switches row *row* of a settings table recomputes (its bits over the acting switches)."""
    return [name for j, name in enumerate(settings.acting) if row >> j & 1]


# --- Cost -------------------------------------------------------------------------------------

def test_cost_adds_and_subtracts_field_by_field():
    a = Cost(10.0, 2.0, 0.5, (1.0, 2.0), working=3.0, first_working=4.0, census_kept=5.0)
    b = Cost(1.0, 0.5, 0.25, (0.5, 0.25), working=1.0, first_working=2.0, census_kept=3.0)
    assert a + b == Cost(11.0, 2.5, 0.75, (1.5, 2.25), working=4.0, first_working=6.0, census_kept=8.0)
    assert a - b == Cost(9.0, 1.5, 0.25, (0.5, 1.75), working=2.0, first_working=2.0, census_kept=2.0)
    assert (a - b) + b == a
    assert a.values() == (10.0, 2.0, 0.5)
    assert Cost.from_row(a.row()) == a


def test_cost_excess_is_a_tuple_and_lengths_must_match():
    assert Cost(1.0, 2.0, 3.0, [4.0]).excess == (4.0,)
    with pytest.raises(ValueError, match="excess lengths differ"):
        Cost(1.0, 2.0, 3.0, (1.0,)) + Cost(1.0, 2.0, 3.0, (1.0, 2.0))
    with pytest.raises(ValueError, match="excess lengths differ"):
        Cost(1.0, 2.0, 3.0, ()) - Cost(1.0, 2.0, 3.0, (1.0,))


# --- the seed's semantics: selective, whole, census clamp, acting -----------------------------

def _hand_profile(**extra):
    plain = Cost(100.0, 10.0, 1.0, (0.0,), working=5.0, first_working=6.0, census_kept=50.0)
    base = Cost(110.0, 10.0, 1.1, (0.0,), working=5.0, first_working=6.0, census_kept=60.0)
    alone = {name: Cost(105.0, 10.0, 1.2, (0.0,), working=5.0, first_working=6.0, census_kept=58.0)
             for name in SWITCHES if name != "attUp"}
    alone["attBMM"] = Cost(90.0, 10.0, 1.3, (0.0,), working=5.0, first_working=6.0, census_kept=40.0)
    alone["softmax"] = Cost(100.0, 10.0, 1.2, (0.0,), working=5.0, first_working=6.0, census_kept=55.0)
    full = Cost(20.0, 10.0, 2.0, (0.0,), working=100.0, first_working=100.0)
    return SwitchProfile(0.5, plain, alone, full, (1,), selective_base=base, **extra)


def test_selective_adds_up_from_the_base_and_clamps_the_census_working_set(backend):
    profile = _hand_profile(census_held=30.0)
    # Nothing recomputed: the plain layer, unclamped (census_kept 50 > 30 does not count).
    assert profile.selective(()) == profile.plain
    # One op: base + (alone - base) = alone; working 5 + max(0, 40 - 30) = 15.
    one = profile.selective(["attBMM"])
    assert one.values() == (90.0, 10.0, 1.3) and one.census_kept == 40.0 and one.working == 15.0
    # Two ops: 110 + (90 - 110) + (100 - 110) = 80; kept 60 - 20 - 5 = 35 -> working 5 + 5.
    two = profile.selective({"attBMM", "softmax"})
    assert two.memory_per_micro_batch == 80.0 and two.census_kept == 35.0 and two.working == 10.0
    assert two.backward_time == pytest.approx(1.1 + 0.2 + 0.1)
    # Below the held bytes the clamp adds nothing: kept 60 - 20 - 5 - 2 = 33 with normOp too.
    profile = _hand_profile(census_held=40.0)
    assert profile.selective({"attBMM", "softmax"}).working == 5.0


def test_selective_takes_a_setting_measured_whole_as_measured(backend):
    measured = Cost(1.0, 2.0, 3.0, (4.0,), working=5.0, first_working=6.0, census_kept=7.0)
    profile = _hand_profile(census_held=0.0, whole={frozenset({"headCast", "dropout"}): measured})
    assert profile.selective(["dropout", "headCast"]) is measured  # no clamp on a measured setting
    row = sum(1 << profile.acting().index(name) for name in ("headCast", "dropout"))
    assert profile.all_settings().cost(row) == measured


def test_selective_rejects_unknown_switches():
    with pytest.raises(SpecError, match="'ops' parameter of SwitchProfile"):
        _hand_profile().selective(["attBMM", "flash"])


def test_attup_acts_only_when_it_changes_the_cost():
    profile = _hand_profile()
    assert profile.acting() == SWITCHES[:7]
    same = _hand_profile()
    same_alone = dict(same.alone, attUp=same.selective_base)
    assert SwitchProfile(0.5, same.plain, same_alone, same.full, (1,), selective_base=same.selective_base).acting() \
        == SWITCHES[:7]
    # Equal to the plain layer but not to the base the settings add up from: it acts.
    plain_alone = dict(same.alone, attUp=same.plain)
    assert SwitchProfile(0.5, same.plain, plain_alone, same.full, (1,), selective_base=same.selective_base).acting() \
        == SWITCHES
    # A non-acting attUp recomputed adds nothing.
    assert profile.selective(["attBMM", "attUp"]) == profile.selective(["attBMM"])


@pytest.mark.parametrize(
    "change, parameter",
    [
        (dict(alone={"attBMM": None}), "alone"),
        (dict(alone={"nope": None}), "alone"),
        (dict(counts=(1, 2)), "plain.excess"),
        (dict(counts=(0,)), "counts"),
        (dict(whole={frozenset({"flash"}): None}), "whole"),
        (dict(census_held="many"), "census_held"),
    ],
)
def test_bad_profiles_raise_spec_errors(change, parameter):
    profile = _hand_profile()
    fields = dict(forward_time=0.5, plain=profile.plain, alone=dict(profile.alone), full=profile.full, counts=(1,))
    fields.update(change)
    with pytest.raises(SpecError, match=f"'{parameter}' parameter of SwitchProfile"):
        SwitchProfile(**fields)


def test_profile_is_read_only_hashable_and_pickles():
    profile = make_profile(1, whole=True, census=True, selective_base=True)
    assert profile == pickle.loads(pickle.dumps(profile))
    assert hash(profile) == hash(pickle.loads(pickle.dumps(profile)))
    with pytest.raises(TypeError):
        profile.alone["attBMM"] = profile.plain


# --- all settings -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    "options",
    [
        dict(mla=True),
        dict(mla=True, selective_base=True, census=True, whole=True),
        dict(mla=False),
        dict(mla=False, census=True, whole=True, counts=(1, 2, 4, 8)),
        dict(mla=True, counts=()),
    ],
)
def test_every_setting_is_the_seeds_sum_over_its_switches(backend, options):
    profile = make_profile(7, **options)
    settings = profile.all_settings()
    n_settings = 256 if options["mla"] else 128
    assert len(settings) == n_settings + 1
    assert settings.acting == (SWITCHES if options["mla"] else SWITCHES[:7])
    for row in range(n_settings):
        expected = profile.selective(recomputed(settings, row))
        # The kernel adds the switches in the seed's order: equal to the last bit.
        np.testing.assert_array_equal(settings.table[row], expected.row())
    np.testing.assert_array_equal(settings.table[-1], profile.full.row())
    assert settings.excess.shape == (n_settings + 1, len(profile.counts))


@pytest.mark.parametrize("mla", [True, False])
def test_rows_run_by_recompute_bitmask_and_full_comes_last(mla):
    settings = make_profile(3, mla=mla).all_settings()
    n_settings = len(settings) - 1
    np.testing.assert_array_equal(settings.keep_mask[:-1], ALL_KEPT - np.arange(n_settings))
    assert settings.keep_mask[-1] == FULL_KEEP_MASK
    assert settings.is_full.tolist() == [False] * n_settings + [True]
    for row in (0, 1, 5, 77, n_settings - 1):
        kept = switches_from_mask(int(settings.keep_mask[row]))
        assert [name for name in SWITCHES if not kept[name]] == recomputed(settings, row)


def test_settings_are_read_only_and_computed_once():
    profile = make_profile(4)
    settings = profile.all_settings()
    assert profile.all_settings() is settings
    with pytest.raises(ValueError):
        settings.memory_per_micro_batch[0] = 0.0
    with pytest.raises(ValueError):
        profile.front()[0] = 3


def test_memory_in_flight_is_the_knapsack_weight(backend):
    settings = make_profile(5, counts=(1, 2, 5)).all_settings()
    memory = settings.memory_in_flight()
    assert memory.shape == (257, 3)
    for j, count in enumerate((1, 2, 5)):
        np.testing.assert_array_equal(
            memory[:, j], count * settings.memory_per_micro_batch + settings.memory_once - settings.excess[:, j])


@pytest.mark.cython
def test_switch_settings_parity_on_random_rows(ckernels, pykernels):
    rng = np.random.default_rng(11)
    for acting_mask in (0, 1, 0b1011, 0x7F, 0xFF):
        width = int(rng.integers(1, 12))
        plain = rng.normal(size=width) * 10.0 ** rng.integers(-3, 10, size=width)
        alone = plain + rng.normal(size=(8, width)) * 10.0 ** rng.integers(-3, 9, size=(8, width))
        rows = 1 << bin(acting_mask).count("1")
        compiled, oracle = np.empty((rows, width)), np.empty((rows, width))
        ckernels.switch_settings(plain, alone, acting_mask, compiled)
        pykernels.switch_settings(plain, alone, acting_mask, oracle)
        np.testing.assert_allclose(compiled, oracle, rtol=1e-12, atol=0.0)


@pytest.mark.cython
def test_profiles_agree_across_backends(ckernels, pykernels):
    for seed in range(4):
        tables, fronts = [], []
        for name in ("cython", "python"):
            with _backend.use(name):
                profile = make_profile(seed, mla=seed % 2 == 0, census=seed > 1, whole=seed > 1,
                                       selective_base=seed == 3)
                tables.append(profile.all_settings().table)
                fronts.append(profile.front())
        np.testing.assert_allclose(tables[0], tables[1], rtol=1e-12, atol=0.0)
        np.testing.assert_array_equal(fronts[0], fronts[1])


def test_switch_settings_checks_lengths(kernels):
    plain, alone = np.zeros(3), np.zeros((8, 3))
    with pytest.raises(ValueError, match=r"out must have 2\*\*2 rows of plain's width \(3\); got shape \(3, 3\)"):
        kernels.switch_settings(plain, alone, 0b101, np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"alone must have one row of plain's width \(3\) per switch; got width 2"):
        kernels.switch_settings(plain, np.zeros((8, 2)), 1, np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"acting_mask must name rows of alone \(bits 0..7\); got 256"):
        kernels.switch_settings(plain, alone, 256, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="acting_mask must name rows of alone"):
        kernels.switch_settings(plain, alone, -1, np.zeros((2, 3)))


# --- front ------------------------------------------------------------------------------------

def brute_force_front(profile):
    """The seed's definition, pair by pair: keep a row unless another is <= on every criterion and
    < on one, or equal on every criterion and preferred (fewer switches recomputed, then the
    lower row; full last); plain and full always."""
    settings = profile.all_settings()
    table = settings.table
    n = len(settings)
    criteria = np.column_stack(
        [table[:, 0], table[:, 1], table[:, 2]]
        + [count * table[:, 0] + table[:, 1] - table[:, 6 + j] for j, count in enumerate(profile.counts)])
    preference = np.array([(bin(row).count("1") if row < n - 1 else 99) * 1000 + row for row in range(n)])
    kept = []
    for i in range(n):
        no_worse = (criteria <= criteria[i]).all(axis=1)
        better = (criteria < criteria[i]).any(axis=1)
        equal = (criteria == criteria[i]).all(axis=1)
        dominated = (no_worse & better).any() or (equal & (preference < preference[i])).any()
        if not dominated or i in (0, n - 1):
            kept.append(i)
    return np.array(kept)


@pytest.mark.parametrize(
    "options",
    [
        dict(mla=True),
        dict(mla=False),
        dict(mla=True, census=True, whole=True, selective_base=True),
        dict(mla=True, free_switch="dropout"),
        dict(mla=False, free_switch="gather", counts=(1, 2)),
        dict(mla=True, counts=()),
    ],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_front_is_the_brute_force_non_dominated_set(backend, options, seed):
    profile = make_profile(seed, **options)
    front = profile.front()
    np.testing.assert_array_equal(front, brute_force_front(profile))
    settings = profile.all_settings()
    assert front[0] == 0 and front[-1] == len(settings) - 1
    if "free_switch" in options:
        # Every setting recomputing the free switch equals one that keeps it: the one kept wins.
        assert not any(options["free_switch"] in recomputed(settings, row) for row in front[:-1])


def test_plain_and_full_stay_even_when_dominated(backend):
    profile = make_profile(2, mla=False)
    # A full recompute that is worse than everything still stays on the front.
    worse_full = Cost(2e9, 1e9, 1.0, profile.full.excess)
    alone = dict(profile.alone)
    alone["normOp"] = Cost(profile.plain.memory_per_micro_batch, profile.plain.memory_once,
                           profile.plain.backward_time - 1e-4, profile.plain.excess)  # beats plain
    profile = SwitchProfile(profile.forward_time, profile.plain, alone, worse_full, profile.counts)
    front = profile.front()
    assert 0 in front and len(profile.all_settings()) - 1 in front
    np.testing.assert_array_equal(front, brute_force_front(profile))


def brute_force_rows(values, n_criteria, always):
    """Rows no other row dominates (lower index wins exact ties), plus *always*."""
    criteria = values[:, :n_criteria]
    kept = np.zeros(len(values), dtype=np.int64)
    for i in range(len(values)):
        no_worse = (criteria <= criteria[i]).all(axis=1)
        better = (criteria < criteria[i]).any(axis=1)
        equal = (criteria == criteria[i]).all(axis=1)
        equal[i:] = False
        kept[i] = not ((no_worse & better).any() or equal.any())
    kept[list(always)] = 1
    return kept


@pytest.mark.parametrize("n, width, n_criteria, levels", [
    (40, 3, 3, 4), (257, 6, 6, 3), (257, 6, 4, 1000), (120, 2, 2, 5), (30, 4, 1, 6), (10, 3, 0, 3), (700, 3, 3, 50),
])
def test_dominance_front_kernel_against_brute_force(kernels, n, width, n_criteria, levels):
    rng = np.random.default_rng(n + width + levels)
    values = rng.integers(0, levels, size=(n, width)).astype(np.float64)  # many exact ties
    values[rng.integers(0, n, size=3), rng.integers(0, width, size=3)] = np.nan  # neither way
    values[5, 0] = np.inf
    values[6, 0] = -np.inf
    always = np.array([0, n - 1], dtype=np.int64)
    keep = np.empty(n, dtype=np.int64)
    kernels.dominance_front(values, n_criteria, always, keep)
    np.testing.assert_array_equal(keep, brute_force_rows(values, n_criteria, always))


def test_dominance_front_kernel_edge_cases(kernels):
    keep = np.empty(0, dtype=np.int64)
    kernels.dominance_front(np.zeros((0, 3)), 3, np.zeros(0, dtype=np.int64), keep)
    keep = np.full(2, 7, dtype=np.int64)
    kernels.dominance_front(np.array([[1.0, 2.0], [1.0, 2.0]]), 2, np.zeros(0, dtype=np.int64), keep)
    assert keep.tolist() == [1, 0]
    with pytest.raises(ValueError, match=r"n_criteria must be in \[0, values' width \(2\)\]; got 3"):
        kernels.dominance_front(np.zeros((2, 2)), 3, np.zeros(0, dtype=np.int64), keep)
    with pytest.raises(ValueError, match=r"out_keep must have one entry per row of values \(3\); got 2"):
        kernels.dominance_front(np.zeros((3, 2)), 2, np.zeros(0, dtype=np.int64), keep)
    with pytest.raises(ValueError, match=r"always_keep must hold row indices of values \(0..1\); got 2"):
        kernels.dominance_front(np.zeros((2, 2)), 2, np.array([2], dtype=np.int64), keep)
