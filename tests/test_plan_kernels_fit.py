"""Tests for packcli.plan.kernels.fit internals; the packers themselves are tested through
pack_lengths in tests/test_plan_kernels_pack.py."""

from __future__ import annotations

import numpy as np

from packcli.plan.kernels.fit import _bfd_runs
from packcli.plan.kernels.runs import _length_counts
from tests.naive import best_fit_decreasing


def test_bfd_plan_reports_a_full_table():
    # Like the histogram packers, bfd retries with a bigger runs table when it is full.
    lengths = np.array([7, 5, 2, 2, 9, 1, 1, 3, 3, 3], dtype=np.int64)
    counts = _length_counts(lengths, 10)
    _, end, _, n_rows = _bfd_runs(counts, 10, 100)
    n_runs = int(end.max())
    assert n_runs > 1 and n_rows == best_fit_decreasing(lengths.tolist(), 10)[2]
    assert _bfd_runs(counts, 10, n_runs)[3] == n_rows
    assert _bfd_runs(counts, 10, n_runs - 1)[3] == -1
