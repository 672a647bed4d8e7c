"""The packers' helpers: BFD's row count from a length histogram equals the kernel's."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.kernels import pack_lengths
from packcli.packing import _bfd_rows_from_histogram


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 64).flatmap(lambda cap: st.tuples(st.just(cap), st.lists(st.integers(1, cap), max_size=200))))
def test_bfd_rows_from_histogram_equal_the_kernel(case):
    capacity, lengths = case
    histogram = np.bincount(np.array(lengths, dtype=np.int64), minlength=capacity + 1)
    assert _bfd_rows_from_histogram(histogram, capacity) == pack_lengths(np.array(lengths, dtype=np.int64), capacity, "bfd").n_rows


def test_bfd_rows_from_histogram_large():
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(5.5, 0.8, size=200_000).astype(np.int64), 1, 2048)
    histogram = np.bincount(lengths, minlength=2049)
    assert _bfd_rows_from_histogram(histogram, 2048) == pack_lengths(lengths, 2048, "bfd").n_rows
