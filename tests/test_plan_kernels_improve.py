"""Tests for packcli.plan.kernels.pack.improve_rows and plan_lengths: a hand-checked case, exact
agreement with tests/naive_improve.py, and the placement contract under any budget."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.core.errors import PackcliError
from packcli.plan.kernels.pack import (
    ALGORITHMS,
    IMPROVED_ALGORITHMS,
    PackedLengths,
    improve_rows,
    lower_bound_rows,
    pack_lengths,
    plan_lengths,
)
from tests.kernel_checks import as_tuple, assert_valid, lengths_and_capacity
from tests.naive_improve import improve_rows as naive_improve_rows

UNLIMITED = 1 << 60


def reference(lengths, placed: PackedLengths, capacity: int):
    return naive_improve_rows(list(lengths), placed.row.tolist(), placed.offset.tolist(), placed.n_rows, capacity)


def test_bfd_rows_are_refilled_exactly():
    # bfd: [4, 4] (room 2), [3, 3, 3] (room 1), [3] (room 7): all three have room and form
    # the pool. Row one: the first 4, then room 6, reached by two 3s (a chunk of 2 copies,
    # the lowest-indexed). Row two: the other 4 and the last two 3s. The third row goes.
    lengths = [4, 4, 3, 3, 3, 3]
    placed = pack_lengths(lengths, 10, "bfd")
    assert placed.n_rows == 3
    improved = improve_rows(lengths, placed, 10)
    assert as_tuple(improved) == ([0, 1, 0, 0, 1, 1], [0, 0, 4, 7, 4, 7], 2)
    assert as_tuple(plan_lengths(lengths, 10)) == as_tuple(improved)


def test_full_rows_of_short_sequences_join_a_later_round():
    # bfd: [7] (room 1), [3, 4] (room 1), [2, 2, 3, 1] (full), [2] (room 6). The rows with
    # room cannot be packed in fewer: 7 finds no 1 among them. The second round adds the
    # full row: [7, 1], [4, 2, 2], [3, 3, 2], and the last pool row goes.
    lengths = [2, 3, 7, 2, 4, 2, 3, 1]
    placed = pack_lengths(lengths, 8, "bfd")
    assert as_tuple(placed)[0] == [2, 1, 0, 2, 1, 3, 2, 2]
    improved = improve_rows(lengths, placed, 8)
    assert as_tuple(improved) == ([1, 2, 0, 1, 1, 2, 2, 0], [0, 0, 0, 2, 4, 3, 5, 7], 3)
    assert as_tuple(improved) == reference(lengths, placed, 8)


def test_rows_at_the_bound_are_returned_unchanged():
    lengths = [6, 4, 5, 5, 7, 3]
    placed = pack_lengths(lengths, 10, "bfd")
    assert placed.n_rows == lower_bound_rows(lengths, 10)
    assert as_tuple(improve_rows(lengths, placed, 10)) == as_tuple(placed)


def test_no_gain_returns_the_packer_rows():
    # Three 6s need three rows whatever happens; nothing may move.
    lengths = [6, 6, 6, 1, 1]
    placed = pack_lengths(lengths, 10, "nf")
    assert as_tuple(improve_rows(lengths, placed, 10)) == as_tuple(placed)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_matches_reference_on_random_inputs(algorithm):
    rng = np.random.default_rng(17)
    for _ in range(60):
        capacity = int(rng.integers(5, 48))
        n = int(rng.integers(0, 70))
        if rng.random() < 0.5:
            lengths = rng.integers(1, capacity + 1, n)
        else:
            lengths = np.minimum(capacity, rng.lognormal(1.5, 0.8, n).astype(np.int64) + 1)
        placed = pack_lengths(lengths, capacity, algorithm)
        improved = improve_rows(lengths, placed, capacity, budget=UNLIMITED)
        assert as_tuple(improved) == reference(lengths.tolist(), placed, capacity)
        assert_valid(improved, lengths, capacity)


@settings(max_examples=150, deadline=None)
@given(lengths_and_capacity, st.sampled_from(ALGORITHMS))
def test_hypothesis_matches_reference(case, algorithm):
    lengths, capacity = case
    placed = pack_lengths(lengths, capacity, algorithm)
    improved = improve_rows(lengths, placed, capacity, budget=UNLIMITED)
    assert as_tuple(improved) == reference(lengths, placed, capacity)
    assert_valid(improved, lengths, capacity)
    assert improved.n_rows <= placed.n_rows


@settings(max_examples=100, deadline=None)
@given(lengths_and_capacity, st.integers(0, 400), st.sampled_from(("nf", "ff")))
def test_any_budget_gives_a_valid_deterministic_placement(case, budget, algorithm):
    # nf and ff leave rows to save on most inputs, the decreasing packers on few.
    lengths, capacity = case
    placed = pack_lengths(lengths, capacity, algorithm)
    improved = improve_rows(lengths, placed, capacity, budget=budget)
    assert_valid(improved, lengths, capacity)
    assert placed.n_rows >= improved.n_rows >= lower_bound_rows(lengths, capacity)
    assert as_tuple(improve_rows(lengths, placed, capacity, budget=budget)) == as_tuple(improved)
    if improved.n_rows == placed.n_rows:
        assert as_tuple(improved) == as_tuple(placed)


def test_budget_zero_changes_nothing():
    lengths = [4, 4, 3, 3, 3, 3]
    placed = pack_lengths(lengths, 10, "bfd")
    assert as_tuple(improve_rows(lengths, placed, 10, budget=0)) == as_tuple(placed)


def test_plan_lengths_repairs_only_the_improved_algorithms():
    lengths = [4, 4, 3, 3, 3, 3]  # every packer needs 3 rows of 10; 2 suffice
    for algorithm in ALGORITHMS:
        placed = pack_lengths(lengths, 10, algorithm)
        planned = plan_lengths(lengths, 10, algorithm)
        assert_valid(planned, lengths, 10)
        if algorithm in IMPROVED_ALGORITHMS:
            assert placed.n_rows == 3 and planned.n_rows == 2
            assert as_tuple(planned) == as_tuple(improve_rows(lengths, placed, 10))
        else:
            assert as_tuple(planned) == as_tuple(placed)
    assert plan_lengths([4, 4, 3, 3, 3, 3], 10, "nf").n_rows == 3  # nf's rows [4, 4], [3, 3, 3], [3] stay


def test_input_is_checked():
    placed = pack_lengths([3, 4], 10, "bfd")
    with pytest.raises(PackcliError, match="row and offset"):
        improve_rows([3, 4, 5], placed, 10)
    with pytest.raises(PackcliError, match="rows must be in"):
        improve_rows([3, 4], PackedLengths(np.array([0, 2], dtype=np.int32), placed.offset, 2), 10)
    with pytest.raises(PackcliError, match="every row"):
        improve_rows([6, 6], PackedLengths(np.array([0, 0], dtype=np.int32), np.array([0, 6], dtype=np.int32), 1), 10)
    with pytest.raises(PackcliError, match="more than the capacity"):
        improve_rows([30, 4], placed, 10)
    empty = improve_rows([], PackedLengths(np.zeros(0, np.int32), np.zeros(0, np.int32), 0), 10)
    assert as_tuple(empty) == ([], [], 0)
