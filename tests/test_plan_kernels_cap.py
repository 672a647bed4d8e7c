"""Tests for the capped packers (packcli.plan.kernels.cap through pack_lengths): exact agreement
with tests/naive_cap.py on fixed and Hypothesis inputs, and the cap itself."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.core.errors import PackcliError
from packcli.plan.kernels.pack import ALGORITHMS, pack_lengths
from tests.kernel_checks import as_tuple, assert_valid, lengths_and_capacity
from tests.naive import REFERENCES
from tests.naive_cap import CAPPED_REFERENCES

FIXED = [
    # (algorithm, lengths, capacity, cap, rows, offsets, n_rows)
    ("nf", [1, 1, 1, 1, 1], 10, 2, [0, 0, 1, 1, 2], [0, 1, 0, 1, 0], 3),
    ("ff", [4, 1, 1, 6], 10, 2, [0, 0, 1, 1], [0, 4, 0, 1], 2),
    ("ffd", [4, 1, 1, 6], 10, 2, [0, 1, 1, 0], [6, 0, 1, 0], 2),
    # bfd: [6, 2] and [5, 1] are closed by the cap, so the last 1 opens a third row.
    ("bfd", [6, 5, 2, 1, 1], 10, 2, [0, 1, 0, 1, 2], [0, 0, 6, 5, 0], 3),
    ("bfd", [3, 3, 3, 3], 12, 3, [0, 0, 0, 1], [0, 3, 6, 0], 2),
]


@pytest.mark.parametrize("algorithm, lengths, capacity, cap, rows, offsets, n_rows", FIXED)
def test_fixed_cases(algorithm, lengths, capacity, cap, rows, offsets, n_rows):
    placement = pack_lengths(lengths, capacity, algorithm, max_sequences_per_row=cap)
    assert as_tuple(placement) == (rows, offsets, n_rows)
    assert CAPPED_REFERENCES[algorithm](lengths, capacity, cap) == (rows, offsets, n_rows)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=60, deadline=None)
@given(case=lengths_and_capacity, cap=st.integers(1, 8))
def test_matches_the_capped_reference(algorithm, case, cap):
    lengths, capacity = case
    placement = pack_lengths(np.array(lengths, dtype=np.int64), capacity, algorithm, max_sequences_per_row=cap)
    assert as_tuple(placement) == tuple(CAPPED_REFERENCES[algorithm](lengths, capacity, cap))
    assert_valid(placement, lengths, capacity)
    if lengths:
        assert np.bincount(placement.row).max() <= cap


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=30, deadline=None)
@given(case=lengths_and_capacity)
def test_a_cap_that_never_binds_changes_nothing(algorithm, case):
    lengths, capacity = case
    capped = pack_lengths(lengths, capacity, algorithm, max_sequences_per_row=max(1, len(lengths)))
    assert as_tuple(capped) == tuple(REFERENCES[algorithm](lengths, capacity))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_large_input_respects_the_cap(algorithm):
    lengths = np.random.default_rng(0).integers(1, 200, size=20_000)
    placement = pack_lengths(lengths, 2048, algorithm, max_sequences_per_row=5)
    assert np.bincount(placement.row).max() <= 5
    fills = np.bincount(placement.row, weights=lengths)
    assert fills.max() <= 2048
    assert placement.n_rows >= -(-len(lengths) // 5)


@pytest.mark.parametrize("cap", [0, -1, 1.5, True])
def test_bad_caps_are_refused(cap):
    with pytest.raises(PackcliError, match="max_sequences_per_row"):
        pack_lengths([1, 2], 4, "bfd", max_sequences_per_row=cap)
