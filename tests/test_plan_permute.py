"""The shuffled row order (packcli/plan/permute.py) against the one-row-at-a-time reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_permute import output_row

from packcli.core.errors import PackcliError
from packcli.plan.permute import RowPermutation, half_bits


@pytest.mark.parametrize("rows", [0, 1, 2, 3, 4, 5, 17, 64, 65, 1000, 4097])
def test_small_domains_are_permuted_exactly_as_the_reference(rows):
    permutation = RowPermutation(rows, seed=3, window=1)
    forward = permutation.table()
    assert forward.tolist() == [output_row(r, rows, 3, 1) for r in range(rows)]
    assert sorted(forward.tolist()) == list(range(rows))
    np.testing.assert_array_equal(permutation.inverse(forward), np.arange(rows))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.integers(-(2**70), 2**70), st.integers(0, 2**40), st.data())
def test_it_is_a_bijection_and_the_inverse_undoes_it(rows, seed, window, data):
    permutation = RowPermutation(rows, seed, window)
    forward = permutation.table()
    assert np.array_equal(np.sort(forward), np.arange(rows))
    np.testing.assert_array_equal(permutation.inverse(forward), np.arange(rows))
    picked = data.draw(st.lists(st.integers(0, rows - 1), max_size=20))
    assert permutation.forward(picked).tolist() == [output_row(r, rows, seed, window) for r in picked]


@settings(max_examples=50, deadline=None)
@given(st.integers(2**20, 2**40), st.integers(0, 2**32), st.lists(st.integers(0, 2**62), min_size=1, max_size=30))
def test_rows_of_a_huge_domain_are_evaluated_alone(rows, seed, picks):
    """No table: a row of a trillion-row window is computed by itself, and comes back."""
    permutation = RowPermutation(rows, seed)
    plan_rows = np.array([p % rows for p in picks], dtype=np.int64)
    out = permutation.forward(plan_rows)
    assert out.tolist() == [output_row(int(r), rows, seed) for r in plan_rows]
    np.testing.assert_array_equal(permutation.inverse(out), plan_rows)


def test_seed_and_window_each_change_the_order_and_nothing_else_does():
    base = RowPermutation(1000, seed=0, window=0).table()
    assert not np.array_equal(base, RowPermutation(1000, seed=1, window=0).table())
    assert not np.array_equal(base, RowPermutation(1000, seed=0, window=1).table())
    np.testing.assert_array_equal(base, RowPermutation(1000, seed=0, window=0).table())


def test_the_order_is_not_a_curriculum():
    """Row index against plan row: no rank correlation left (a random order's is ~1/sqrt(rows))."""
    rows = 20_000
    forward = RowPermutation(rows, seed=0).table()
    assert abs(np.corrcoef(np.arange(rows), forward)[0, 1]) < 0.03
    moved = np.abs(forward - np.arange(rows))
    assert moved.mean() > rows / 4  # a uniform permutation moves a row rows/3 on average


def test_half_bits_is_the_fewest_that_cover_the_rows():
    for rows in range(0, 300):
        b = half_bits(rows)
        assert 4**b >= rows and (b == 1 or 4 ** (b - 1) < rows)


def test_rows_outside_the_domain_are_refused():
    with pytest.raises(PackcliError, match=r"rows must be in \[0, 5\)"):
        RowPermutation(5, 0).forward([5])
