"""Rows as patterns (packcli/plan/layouts.py): the packers' runs made row patterns hold
the rows of the packers' own placement; several groups' runs at once make each group's
patterns, as tests/naive_slots.py lays them out slot by slot."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_slots import layouts, patterns_of_runs

from packcli.plan import layouts as layouts_module
from packcli.plan.kernels.pack import pack_lengths
from packcli.plan.layouts import joined, patterns_from_runs, runs_from_counts

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


@st.composite
def grouped_runs(draw):
    """The runs of a few groups' lengths, each group's rows after the ones before: (runs,
    rows, the row where each group starts)."""
    capacity = draw(st.integers(1, 120))
    algorithm = draw(st.sampled_from(ALGORITHMS))
    cap = 0 if algorithm == "bfd" else draw(st.sampled_from([0, 0, 2, 5]))
    groups = draw(st.lists(st.lists(st.integers(1, capacity), min_size=1, max_size=80), max_size=5))
    tables, starts, rows = [], [], 0
    for lengths in groups:
        runs, n_rows = runs_from_counts(np.bincount(lengths, minlength=capacity + 1), capacity, algorithm, cap)
        runs[:, 1] += rows
        tables.append(runs)
        starts.append(rows)
        rows += n_rows
    return (np.concatenate(tables) if tables else np.zeros((0, 6), dtype=np.int64)), rows, starts


@settings(max_examples=150, deadline=None)
@given(grouped_runs(), st.booleans())
def test_patterns_of_several_groups_are_the_naive_patterns(data, by_sorting):
    """Every group's runs made patterns at once: the rows the runs make slot by slot, no
    pattern across a group's first row; each group's the patterns its runs alone make.
    `by_sorting`: the bounds between patterns found by sorting, as for plans of far more
    rows than runs, rather than by marking the rows."""
    runs, n_rows, starts = data
    marked = layouts_module.MARK_ROWS_PER_BOUND
    layouts_module.MARK_ROWS_PER_BOUND = 0 if by_sorting else marked
    try:
        got = patterns_from_runs(runs, n_rows, np.array(starts, dtype=np.int64))
    finally:
        layouts_module.MARK_ROWS_PER_BOUND = marked
    want = patterns_of_runs(runs.tolist(), n_rows, set(starts))
    assert [a.tolist() for a in (got.row_start, got.slot_offsets, got.slot_len, got.slot_pos)] == list(want)
    alone = []
    for k, first in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else n_rows
        own = runs[(runs[:, 1] >= first) & (runs[:, 1] < end)].copy()
        own[:, 1] -= first
        alone.append(patterns_from_runs(own, end - first))
    together = joined(alone)
    for name in ("row_start", "slot_offsets", "slot_len", "slot_pos"):
        assert getattr(got, name).tolist() == getattr(together, name).tolist()


def test_runs_outside_their_rows_are_refused():
    from packcli.core.errors import PackcliError

    run = np.array([[3, 2, 1, 2, 0, 1]], dtype=np.int64)  # rows 2 and 3 of a plan of 3 rows
    with pytest.raises(PackcliError, match=r"runs must lie in rows \[0, 3\)"):
        patterns_from_runs(run, 3)
    with pytest.raises(PackcliError, match=r"part starts must be rows in \[0, 4\]"):
        patterns_from_runs(run, 4, np.array([5]))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=12), st.integers(0, 1000), st.data())
def test_the_run_table_lists_each_lengths_runs_in_order(per_length, first_row, data):
    """Runs of each length, kept by the packer at run_begin[L]..run_end[L] of a table
    (the lengths' blocks in any order), as rows of the run table, as the naive loop lists
    them."""
    from naive_slots import run_table

    from packcli.plan.layouts import _run_table

    n = sum(per_length)
    columns = st.lists(st.integers(0, 2**31 - 1), min_size=5, max_size=5)
    runs = np.array(data.draw(st.lists(columns, min_size=n, max_size=n)), dtype=np.int32).reshape(n, 5)
    begin = np.zeros(len(per_length), dtype=np.int64)
    end = np.zeros(len(per_length), dtype=np.int64)
    at = 0
    for length in data.draw(st.permutations(range(len(per_length)))):
        begin[length], end[length] = at, at + per_length[length]
        at += per_length[length]
    got = _run_table(begin, end, runs, first_row)
    assert got.dtype == np.int64
    assert got.tolist() == run_table(begin.tolist(), end.tolist(), runs.tolist(), first_row)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 2), st.integers(0, 1)), max_size=10), st.data())
def test_a_layout_is_the_one_before_it_slot_for_slot(slots, data):
    """The test by which a layout joins the pattern before it (laying runs out, replacing
    rows): slots begin..end - 1 against prev..begin - 1, as the naive comparison of lists."""
    from naive_slots import same_layout

    from packcli.plan.layouts import _same_layout

    prev = data.draw(st.integers(0, len(slots)))
    begin = data.draw(st.integers(prev, len(slots)))
    end = data.draw(st.integers(begin, len(slots)))
    slot_len = np.array([n for n, _ in slots], dtype=np.int64)
    slot_pos = np.array([p for _, p in slots], dtype=np.int64)
    got = _same_layout(slot_len, slot_pos, prev, begin, end)
    assert got == same_layout(slot_len.tolist(), slot_pos.tolist(), prev, begin, end)
