"""The plan's contract (packcli/plan/contract.py): every kind of plan answers it, and the
pieces of any range of rows are the whole plan's pieces of those rows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.plan.contract import Pieces, Plan
from packcli.plan.patterns import PatternPlan
from packcli.plan.planner import PlanSettings, RowPlan, plan_rows
from packcli.plan.stream import StreamPlan

KINDS = {
    RowPlan: {"mode": "bin", "algorithm": "ffd"},  # placed one sequence at a time
    PatternPlan: {"mode": "bin", "algorithm": "bfd"},  # from the histogram
    StreamPlan: {"mode": "concat"},
}


def _pieces(plan: Plan, first: int, last: int) -> list[tuple[int, ...]]:
    """(start, length, output row, offset) of every piece of rows [first, last), sorted."""
    got = plan.pieces(first, last, plan.row_order())
    assert isinstance(got, Pieces)
    return sorted(zip(got.start.tolist(), got.length.tolist(), (got.row + first).tolist(), got.offset.tolist()))


@pytest.mark.parametrize("kind", list(KINDS), ids=lambda k: k.__name__)
@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 24), min_size=1, max_size=80),
    cut=st.integers(0, 10**6),
    shuffle=st.booleans(),
    multiple=st.sampled_from([1, 4]),
)
def test_every_kind_answers_the_contract(kind, lengths, cut, shuffle, multiple):
    seq_len = 24
    options = KINDS[kind]
    if options["mode"] == "concat":
        multiple = 1  # --pad-to-multiple-of is bin mode's
    settings_ = PlanSettings(seq_len, shuffle=shuffle, seed=5, multiple=multiple, **options)
    array = np.array(lengths, dtype=np.int64)
    plan = plan_rows(array, settings_)
    assert type(plan) is kind and isinstance(plan, Plan)
    whole = _pieces(plan, 0, plan.n_rows)
    middle = cut % (plan.n_rows + 1)
    assert sorted(_pieces(plan, 0, middle) + _pieces(plan, middle, plan.n_rows)) == whole
    placed = plan.placed_histogram()
    if kind is StreamPlan:
        assert placed is None  # rows cut from the stream: every token, the last row padded
        assert sum(piece[1] for piece in whole) == array.sum() and plan.remainder_tokens == array.sum() % seq_len
    else:  # bin mode: every sequence placed once, in the room of its length rounded up
        assert sorted(piece[1] for piece in whole) == sorted(lengths)
        rounded = -(-array // multiple) * multiple
        assert placed.tolist() == np.bincount(rounded, minlength=seq_len + 1).tolist()
    for _, length, row, offset in whole:
        assert 0 <= row < plan.n_rows and offset >= 0 and offset + length <= seq_len
