"""One stage's multiple-choice knapsack (docs/ND_MODEL.md §4.4), against brute-force enumeration."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ndcost import SpecError
from ndcost import _backend
from ndcost.price.knapsack import StagePlan, plan_stage, useful_options

MIB = 2**20


@pytest.fixture
def backend(kernels, backend_name):
    """Run the API on the fixture's backend."""
    with _backend.use(backend_name):
        yield kernels


def flat(groups):
    """(weights, values, group_start) of a list of groups of (weight, value) options."""
    weights = np.array([w for group in groups for w, _ in group], dtype=np.int64)
    values = np.array([v for group in groups for _, v in group], dtype=np.float64)
    group_start = np.zeros(len(groups) + 1, dtype=np.int64)
    np.cumsum([len(group) for group in groups], out=group_start[1:])
    return weights, values, group_start


def brute_force(groups, budget):
    """Least time over every plan within the budget, summed in group order; of the tied plans the
    lowest option index of the last group, then the group before it, and so on."""
    best_time, best_choice = math.inf, None
    for choice in itertools.product(*(range(len(group)) for group in groups)):
        if sum(groups[g][o][0] for g, o in enumerate(choice)) > budget:
            continue
        time = 0.0
        for g, o in enumerate(choice):
            time += groups[g][o][1]
        if time < best_time or (time == best_time and choice[::-1] < best_choice[::-1]):
            best_time, best_choice = time, choice
    return best_time, best_choice


def random_groups(rng, integer_values):
    groups = []
    for _ in range(int(rng.integers(1, 5))):
        size = int(rng.integers(1, 5))
        weights = rng.integers(-3, 12, size=size)
        values = rng.integers(0, 4, size=size).astype(float) if integer_values else rng.uniform(0, 1, size=size)
        groups.append(list(zip(weights.tolist(), values.tolist())))
    return groups


@pytest.mark.parametrize("integer_values", [True, False], ids=["ties", "floats"])
def test_kernel_equals_brute_force_on_small_instances(kernels, integer_values):
    rng = np.random.default_rng(5 if integer_values else 6)
    for _ in range(150):
        groups = random_groups(rng, integer_values)
        budget = int(rng.integers(-6, 35))
        weights, values, group_start = flat(groups)
        choice = np.empty(len(groups), dtype=np.int64)
        time = kernels.mck_min_time(weights, values, group_start, budget, choice)
        expected_time, expected_choice = brute_force(groups, budget)
        assert time == expected_time
        if expected_choice is None:
            assert choice.tolist() == [-1] * len(groups)
        else:
            assert tuple(choice.tolist()) == expected_choice


def test_kernel_edge_cases(kernels):
    choice = np.empty(0, dtype=np.int64)
    zeros = np.zeros(0, dtype=np.int64)
    assert kernels.mck_min_time(zeros, np.zeros(0), np.zeros(1, dtype=np.int64), 0, choice) == 0.0
    assert kernels.mck_min_time(zeros, np.zeros(0), np.zeros(1, dtype=np.int64), -1, choice) == math.inf
    # A group with no option cannot be planned.
    choice = np.full(2, 9, dtype=np.int64)
    weights, values, _ = flat([[(1, 1.0)]])
    assert kernels.mck_min_time(weights, values, np.array([0, 1, 1], dtype=np.int64), 10, choice) == math.inf
    assert choice.tolist() == [-1, -1]
    # An option whose time is NaN or inf is never chosen.
    choice = np.empty(1, dtype=np.int64)
    weights, values, group_start = flat([[(0, math.nan), (1, math.inf), (2, 3.0)]])
    assert kernels.mck_min_time(weights, values, group_start, 5, choice) == 3.0 and choice.tolist() == [2]
    # Huge weights far apart: no overflow, no table of that size.
    weights, values, group_start = flat([[(2**62, 1.0), (-(2**62), 2.0)], [(5, 0.5), (7, 0.25)]])
    choice = np.empty(2, dtype=np.int64)
    assert kernels.mck_min_time(weights, values, group_start, -(2**62) + 6, choice) == 2.5
    assert choice.tolist() == [1, 0]


def test_kernel_checks_lengths(kernels):
    weights, values, group_start = flat([[(1, 1.0), (2, 0.5)]])
    with pytest.raises(ValueError, match=r"values must have one entry per option \(2\); got 1"):
        kernels.mck_min_time(weights, values[:1], group_start, 3, np.empty(1, dtype=np.int64))
    with pytest.raises(ValueError, match=r"out_choice must have one entry per group \(1\); got 2"):
        kernels.mck_min_time(weights, values, group_start, 3, np.empty(2, dtype=np.int64))
    with pytest.raises(ValueError, match=r"group_start must rise from 0 to the number of options \(2\)"):
        kernels.mck_min_time(weights, values, np.array([0, 3], dtype=np.int64), 3, np.empty(1, dtype=np.int64))
    with pytest.raises(ValueError, match=r"group_start must rise from 0 to the number of options \(2\)"):
        kernels.mck_min_time(weights, values, np.array([0, 2, 1, 2], dtype=np.int64), 3,
                             np.empty(3, dtype=np.int64))
    with pytest.raises(ValueError, match="group_start must hold n_groups \\+ 1 offsets; got none"):
        kernels.mck_min_time(weights, values, np.zeros(0, dtype=np.int64), 3, np.empty(0, dtype=np.int64))


@pytest.mark.cython
def test_kernel_parity(ckernels, pykernels):
    rng = np.random.default_rng(8)
    for _ in range(5):
        groups = [list(zip(rng.integers(0, 300, size=8).tolist(), rng.uniform(0, 1, size=8).tolist()))
                  for _ in range(6)]
        weights, values, group_start = flat(groups)
        budget = int(rng.integers(0, 1500))
        results = []
        for module in (ckernels, pykernels):
            choice = np.empty(6, dtype=np.int64)
            results.append((module.mck_min_time(weights, values, group_start, budget, choice), choice.tolist()))
        assert results[0][0] == pytest.approx(results[1][0], rel=1e-12, abs=0.0)
        assert results[0][1] == results[1][1]


# --- plan_stage -------------------------------------------------------------------------------

def layer_options(rng, n_options):
    """A layer's options, least recompute first: memory falls, time rises."""
    memory = np.sort(rng.uniform(50 * MIB, 900 * MIB, size=n_options))[::-1]
    time = np.sort(rng.uniform(1e-3, 5e-3, size=n_options))
    return np.column_stack([memory, time])


def test_plan_equals_brute_force_and_never_exceeds_the_budget(backend):
    rng = np.random.default_rng(21)
    for _ in range(40):
        kinds = [layer_options(rng, int(rng.integers(1, 5))) for _ in range(2)]
        layers = [kinds[int(k)] for k in rng.integers(0, 2, size=int(rng.integers(1, 5)))]
        budget = float(rng.uniform(0, 900 * MIB * len(layers)))
        plan = plan_stage(layers, budget)
        # Brute force over the same rounding: memory up to whole MiB, the budget down.
        groups = [[(math.ceil(m / MIB), t) for m, t in options] for options in layers]
        expected_time, expected_choice = brute_force(groups, math.floor(budget / MIB))
        assert plan.time == expected_time
        if expected_choice is None:
            assert plan == StagePlan((), plan.memory_bytes, math.inf, False) and math.isnan(plan.memory_bytes)
            continue
        assert plan.feasible and plan.choice == expected_choice
        assert plan.memory_bytes == sum(layers[g][o][0] for g, o in enumerate(plan.choice))
        assert plan.memory_bytes <= budget


def test_a_budget_that_fits_the_plain_layers_recomputes_nothing(backend):
    rng = np.random.default_rng(3)
    layers = [layer_options(rng, 6) for _ in range(3)] * 2
    plain_buckets = sum(math.ceil(options[0, 0] / MIB) for options in layers)
    plan = plan_stage(layers, plain_buckets * MIB)
    assert plan.choice == (0,) * 6 and plan.feasible
    assert plan.time == sum(options[0, 1] for options in layers)
    # One bucket less and some layer must recompute.
    assert plan_stage(layers, plain_buckets * MIB - 1).choice != (0,) * 6
    # Whole-MiB memories: the budget of exactly their sum fits.
    whole = [[(512 * MIB, 1.0), (256 * MIB, 2.0)], [(128 * MIB, 1.0), (64 * MIB, 1.5)]]
    assert plan_stage(whole, 640 * MIB).choice == (0, 0)


def test_a_budget_below_the_lightest_plan_is_infeasible(backend):
    plan = plan_stage([[(3 * MIB, 1.0), (2 * MIB, 2.0)]] * 2, 4 * MIB - 1)
    assert not plan.feasible and plan.choice == () and plan.time == math.inf
    assert plan_stage([[(3 * MIB, 1.0), (2 * MIB, 2.0)]] * 2, 4 * MIB).choice == (1, 1)
    assert plan_stage([], 0.0) == StagePlan((), 0.0, 0.0, True)


def test_memory_is_rounded_up_to_whole_buckets(backend):
    # 1.5 MiB twice is 3 MiB, but each rounds up to 2: the plan needs 4 buckets.
    options = [[(1.5 * MIB, 1.0), (0.5 * MIB, 3.0)]] * 2
    assert plan_stage(options, 3 * MIB).choice == (1, 0)
    assert plan_stage(options, 4 * MIB).choice == (0, 0)
    assert plan_stage(options, 3 * MIB, bucket_bytes=MIB // 2).choice == (0, 0)


def test_useful_options_drop_only_what_an_earlier_option_beats():
    memory = [5.0, 4.0, 4.0, 3.0, 6.0, 3.0, 1.0]
    time = [1.0, 2.0, 2.0, 3.0, 1.0, 2.5, 9.0]
    # 2 equals 1; 4 is beaten by 0; 5 is better than 3 but comes later: both stay.
    assert useful_options(memory, time).tolist() == [0, 1, 3, 5, 6]


def test_dropping_options_changes_neither_time_nor_plan(backend, kernels):
    rng = np.random.default_rng(9)
    for _ in range(30):
        layers = [np.column_stack([rng.integers(1, 8, size=5) * MIB, rng.integers(1, 4, size=5).astype(float)])
                  for _ in range(3)]
        budget = int(rng.integers(3, 20)) * MIB
        weights, values, group_start = flat([[(int(m // MIB), t) for m, t in options] for options in layers])
        choice = np.empty(3, dtype=np.int64)
        time = kernels.mck_min_time(weights, values, group_start, budget // MIB, choice)
        plan = plan_stage(layers, budget)
        assert plan.time == time
        if plan.feasible:
            assert plan.choice == tuple(choice.tolist())


@pytest.mark.parametrize(
    "args, parameter",
    [
        (([[(1.0, 1.0)]], 1.0, 0), "bucket_bytes"),
        (([[(1.0, 1.0)]], math.inf), "budget_bytes"),
        (([[(1.0, 1.0)]], "1"), "budget_bytes"),
        ((5, 1.0), "options_per_layer"),
        (([[]], 1.0), r"options_per_layer\[0\]"),
        (([[(1.0, 1.0)], [(1.0, math.nan)]], 1.0), r"options_per_layer\[1\]"),
        (([[(1.0, 1.0, 1.0)]], 1.0), r"options_per_layer\[0\]"),
    ],
)
def test_bad_arguments_raise_spec_errors(args, parameter):
    with pytest.raises(SpecError, match=f"'{parameter}' parameter of plan_stage"):
        plan_stage(*args)
