"""Tests for packcli.plan.kernels.histogram internals: Graphcore's cap on sequences per row,
the group table's retry and the radix sort; the packers themselves are tested through
pack_lengths in tests/test_plan_kernels_pack.py."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.plan.kernels.histogram import _histogram_kernel, _histogram_strategies, _radix_order
from packcli.plan.kernels.pack import PackedLengths
from packcli.plan.kernels.runs import _length_counts
from tests.kernel_checks import as_tuple, assert_valid, lengths_and_capacity
from tests.naive import histogram_packer


@settings(max_examples=100, deadline=None)
@given(lengths_and_capacity, st.integers(1, 4))
def test_histogram_cap_on_sequences_per_row(case, max_per_row):
    lengths, capacity = case
    array = np.asarray(lengths, dtype=np.int64)
    for longest_first in (False, True):
        row = np.empty(len(lengths), dtype=np.int32)
        offset = np.empty(len(lengths), dtype=np.int32)
        n_rows = _histogram_kernel(array, capacity, longest_first, max_per_row, row, offset)
        placement = PackedLengths(row=row, offset=offset, n_rows=int(n_rows))
        assert_valid(placement, lengths, capacity)
        assert as_tuple(placement) == histogram_packer(lengths, capacity, longest_first, max_per_row)
        if lengths:
            assert np.bincount(row).max() <= max_per_row


def test_histogram_strategies_report_a_full_table():
    # The kernel retries with a bigger table when the strategies need more groups.
    lengths = np.array([7, 5, 2, 2, 9, 1, 1, 3], dtype=np.int64)
    counts = _length_counts(lengths, 10)
    for longest_first in (False, True):
        _, n_groups, n_rows = _histogram_strategies(counts, 10, longest_first, 0, 100)
        assert n_groups > 1
        assert _histogram_strategies(counts, 10, longest_first, 0, n_groups)[1:] == (n_groups, n_rows)
        assert _histogram_strategies(counts, 10, longest_first, 0, n_groups - 1)[1] == -1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**40), max_size=300))
def test_radix_order_sorts_like_a_stable_argsort(keys):
    """How the histogram packers put their live groups in row order."""
    array = np.array(keys, dtype=np.int64)
    assert _radix_order(array).tolist() == np.argsort(array, kind="stable").tolist()
