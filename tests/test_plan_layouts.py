"""Rows as patterns (packcli/plan/layouts.py): the packers' runs made row patterns hold
the rows of the packers' own placement."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_slots import layouts

from packcli.plan.kernels.pack import pack_lengths
from packcli.plan.layouts import patterns_from_runs, runs_from_counts

ALGORITHMS = ["bfd", "spfhp", "lpfhp"]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 300), st.lists(st.integers(1, 300), max_size=200), st.sampled_from(ALGORITHMS))
def test_patterns_are_the_packers_rows(capacity, raw, algorithm):
    """Before the repair: each row of the patterns holds the lengths the packer's own
    placement puts in that row."""
    lengths = np.array([min(n, capacity) for n in raw], dtype=np.int64)
    counts = np.bincount(lengths, minlength=capacity + 1)
    runs, n_rows = runs_from_counts(counts, capacity, algorithm)
    patterns = patterns_from_runs(runs, n_rows)
    packed = pack_lengths(lengths, capacity, algorithm)
    assert n_rows == packed.n_rows
    expected = [sorted(lengths[packed.row == r].tolist()) for r in range(n_rows)]
    assert [sorted(n for _, n in layout) for layout in layouts(patterns)] == expected
