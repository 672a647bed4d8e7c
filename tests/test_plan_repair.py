"""The repair pass on a plan from counts (packcli/plan/repair.py): it saves the rows the
pass saves on the whole placement; its rows put in place of the ones it was given and the
repaired rows' order, as the naive loops in tests/naive_slots.py make them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_slots import by_row_and_offset as naive_by_row_and_offset
from naive_slots import layouts
from naive_slots import replace_rows as naive_replace_rows
from test_plan_layouts import grouped_runs

from packcli.core.errors import PackcliError
from packcli.plan.kernels.pack import pack_lengths, plan_lengths
from packcli.plan.layouts import Patterns, offsets_of, patterns_from_runs
from packcli.plan.patterns import pattern_plan
from packcli.plan.repair import by_row_and_offset, replace_rows


def test_the_repair_runs_on_patterns_and_saves_rows():
    """Uniform lengths at 2048: the repair pass saves rows, here from the pooled rows
    expanded out of the patterns, exactly as many as on the whole placement."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 2049, 5_000)
    unrepaired = pack_lengths(lengths, 2048, "spfhp").n_rows
    repaired = plan_lengths(lengths, 2048, "spfhp").n_rows
    assert repaired < unrepaired
    assert pattern_plan(lengths, 2048, "spfhp").n_rows == repaired


@st.composite
def replacements(draw):
    """A grouped plan's patterns, the rows to replace (increasing), and new rows: each
    replaced row takes one of them or is dropped."""
    runs, n_rows, starts = draw(grouped_runs())
    p = patterns_from_runs(runs, n_rows, np.array(starts, dtype=np.int64))
    row_ids = sorted(draw(st.sets(st.integers(0, max(n_rows - 1, 0)), max_size=12))) if n_rows else []
    shapes = [(2,), (3, 1), (1, 1, 1), (4,), ()]
    new_layouts = [draw(st.sampled_from(shapes)) for _ in range(draw(st.integers(0, 6)))]
    new_row = [draw(st.integers(-1, len(new_layouts) - 1)) for _ in row_ids]
    new = Patterns(
        np.arange(len(new_layouts) + 1, dtype=np.int64),
        offsets_of(np.array([len(lay) for lay in new_layouts], dtype=np.int64)),
        np.array([n for lay in new_layouts for n in lay], dtype=np.int64),
        np.array([sum(lay[:i]) for lay in new_layouts for i in range(len(lay))], dtype=np.int64),
    )
    return p, starts, row_ids, new_row, new


@settings(max_examples=200, deadline=None)
@given(replacements())
def test_replaced_rows_are_the_naive_rows(data):
    """Any rows of a grouped plan replaced by new rows or dropped, in one pass: the rows
    and patterns the naive loop makes row by row, none joined across a group's start."""
    p, starts, row_ids, new_row, new = data
    got = replace_rows(p, np.array(row_ids, dtype=np.int64), np.array(new_row, dtype=np.int64), new, np.array(starts))
    want = naive_replace_rows(layouts(p), row_ids, new_row, layouts(new), set(starts))
    assert [a.tolist() for a in (got.row_start, got.slot_offsets, got.slot_len, got.slot_pos)] == list(want)


def test_replaced_rows_must_be_increasing_and_in_the_plan():
    p = Patterns(*(np.array(a, dtype=np.int64) for a in ([0, 3], [0, 1], [4], [0])))
    one = Patterns(*(np.array(a, dtype=np.int64) for a in ([0, 1], [0, 1], [2], [0])))
    for rows, new in (([1, 1], [0, 0]), ([3], [0]), ([0], [1]), ([0], [-2])):
        with pytest.raises(PackcliError, match="increasing rows"):
            replace_rows(p, np.array(rows), np.array(new), one, np.zeros(1))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.data())
def test_rows_then_offsets_order_the_repaired_sequences(n_rows, data):
    """Sequences in any order, no two of a row at one offset: by row then offset, as the
    naive sort orders them, with each row's count."""
    cells = data.draw(st.sets(st.tuples(st.integers(0, n_rows - 1), st.integers(0, 50)), max_size=40))
    cells = data.draw(st.permutations(sorted(cells)))
    row = np.array([r for r, _ in cells], dtype=np.int32)
    offset = np.array([o for _, o in cells], dtype=np.int32)
    order, sizes = by_row_and_offset(row, offset, n_rows)
    want_order, want_sizes = naive_by_row_and_offset(row.tolist(), offset.tolist(), n_rows)
    assert order.tolist() == want_order and sizes.tolist() == want_sizes
