"""PairPlan: every pair placed whole, its two segments next to each other in one row, rows
within capacity; concat places pairs by next fit in input order; the cap counts a pair
as two."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.core.errors import PackcliError
from packcli.plan.pairs import placed_lengths, plan_pairs, uncapped_pair_rows
from packcli.plan.planner import plan_rows
from packcli.plan.settings import PlanSettings


def pair_lengths(draw_sizes: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    first = np.array([a for a, _ in draw_sizes], dtype=np.int64)
    return first, first + np.array([b for _, b in draw_sizes], dtype=np.int64)


def check_whole(plan, first: np.ndarray, lengths: np.ndarray, seq_len: int, multiple: int) -> None:
    """Independently of the planner: every pair's two pieces lie in one row, the rejected
    one right after the chosen one's room, and the pieces of a row do not overlap nor pass
    seq_len."""
    pieces = plan.pieces(0, plan.n_rows)
    n = len(first)
    starts = np.cumsum(lengths) - lengths
    assert len(pieces.start) == 2 * n
    chosen_at = {int(s): k for k, s in enumerate(pieces.start[:n])}
    assert sorted(chosen_at) == sorted(starts.tolist())
    for k in range(n):
        i = int(np.searchsorted(starts, pieces.start[k]))
        assert pieces.length[k] == first[i] and pieces.length[n + k] == lengths[i] - first[i]
        assert pieces.start[n + k] == starts[i] + first[i] and pieces.row[n + k] == pieces.row[k]
        room = -(-int(first[i]) // multiple) * multiple
        assert pieces.offset[n + k] == pieces.offset[k] + room
    for row in range(plan.n_rows):
        mine = np.flatnonzero(pieces.row == row)
        spans = sorted(
            (int(pieces.offset[j]), int(pieces.offset[j] + -(-pieces.length[j] // multiple) * multiple)) for j in mine
        )
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])) and (not spans or spans[-1][1] <= seq_len)


sizes = st.lists(st.tuples(st.integers(1, 30), st.integers(1, 30)), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(
    sizes=sizes,
    algorithm=st.sampled_from(["nf", "ff", "ffd", "bfd", "spfhp", "lpfhp"]),
    multiple=st.sampled_from([1, 4]),
    shuffle=st.booleans(),
)
def test_every_pair_lands_whole_in_one_row(sizes, algorithm, multiple, shuffle):
    first, lengths = pair_lengths(sizes)
    seq_len = 64
    plan = plan_pairs(first, lengths, PlanSettings(seq_len, algorithm=algorithm, multiple=multiple, shuffle=shuffle))
    check_whole(plan, first, lengths, seq_len, multiple)
    room = placed_lengths(first, lengths, multiple)
    assert plan.n_rows == plan_rows(room, PlanSettings(seq_len, algorithm=algorithm)).n_rows  # as segments of that room
    assert plan.placed_histogram().sum() == len(first)


@settings(max_examples=40, deadline=None)
@given(sizes=sizes)
def test_concat_is_next_fit_over_pairs_in_input_order(sizes):
    first, lengths = pair_lengths(sizes)
    plan = plan_pairs(first, lengths, PlanSettings(64, mode="concat", shuffle=False))
    check_whole(plan, first, lengths, 64, 1)
    expected_row, used = [], 0  # next fit, by hand
    row = 0
    for length in lengths.tolist():
        if used + length > 64:
            row, used = row + 1, 0
        expected_row.append(row)
        used += length
    assert plan.row.tolist() == expected_row and plan.n_rows == row + 1


def test_a_cap_counts_a_pair_as_two():
    first, lengths = np.ones(12, dtype=np.int64), np.full(12, 2, dtype=np.int64)
    capped = plan_pairs(first, lengths, PlanSettings(64, max_per_row=5))
    assert np.bincount(capped.row).max() == 2 and capped.n_rows == 6  # 5 sequences: 2 pairs
    assert uncapped_pair_rows(first, lengths, PlanSettings(64, max_per_row=5), None) == 1


def test_groups_never_share_a_row():
    first, lengths = np.full(9, 3, dtype=np.int64), np.full(9, 7, dtype=np.int64)
    groups = np.array([0, 1, 2] * 3, dtype=np.int32)
    plan = plan_pairs(first, lengths, PlanSettings(64), groups)
    assert plan.row_group is not None and (plan.row_group[plan.row] == groups).all()


def test_a_pair_of_an_empty_side_is_refused():
    with pytest.raises(PackcliError, match="two segments of at least one token"):
        plan_pairs(np.array([3]), np.array([3]), PlanSettings(64))
