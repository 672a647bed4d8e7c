"""Concat mode's plan (packcli/plan/stream.py): rows found by search in the stream, against
the piece-by-piece reference in tests/naive_stream.py."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_stream import concat_rows, grouped_concat_rows

from packcli.plan.grouping import group_slices
from packcli.plan.planner import PlanSettings, plan_rows, plan_window
from packcli.plan.stream import StreamPlan, grouped_stream_plan, stream_plan


def as_tuples(plan: StreamPlan, first: int = 0, last: int | None = None) -> list[tuple[int, ...]]:
    end = plan.n_rows if last is None else last
    columns = plan.pieces_with_source(first, end)
    return sorted(zip(*(c.tolist() for c in columns)))


lengths_st = st.lists(st.integers(1, 40), min_size=0, max_size=60)


@settings(max_examples=150, deadline=None)
@given(
    lengths_st, st.integers(1, 17), st.booleans(), st.sampled_from(["pad", "drop"]), st.booleans(), st.integers(0, 9)
)
def test_one_stream_matches_the_reference(lengths, seq_len, final, remainder, shuffle, window):
    plan = stream_plan(
        np.array(lengths, dtype=np.int64), seq_len, final, remainder, shuffle=shuffle, seed=7, window=window
    )
    expected, n_rows = concat_rows(lengths, seq_len, final, remainder, shuffle, 7, window)
    assert plan.n_rows == n_rows
    assert as_tuples(plan) == expected
    total = sum(lengths)
    assert plan.remainder_tokens == (total % seq_len if final else 0)


@settings(max_examples=100, deadline=None)
@given(lengths_st, st.integers(1, 17), st.integers(0, 30), st.integers(0, 30))
def test_any_range_of_output_rows_is_the_same_pieces(lengths, seq_len, a, b):
    plan = stream_plan(np.array(lengths, dtype=np.int64), seq_len, True, "pad", shuffle=True, seed=3)
    first, last = sorted((min(a, plan.n_rows), min(b, plan.n_rows)))
    whole = as_tuples(plan)
    assert as_tuples(plan, first, last) == [p for p in whole if first <= p[3] < last]
    _, length, row, offset = plan.pieces(first, last)
    assert (row >= 0).all() and (row < max(last - first, 1)).all() and (offset + length <= seq_len).all()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 30), st.integers(0, 3)), max_size=50),
    st.integers(1, 13),
    st.sampled_from(["pad", "drop"]),
    st.booleans(),
)
def test_grouped_streams_match_the_reference(segments, seq_len, remainder, shuffle):
    lengths = [n for n, _ in segments]
    # dense ids in order of first appearance, as grouping gives them
    seen: dict[int, int] = {}
    groups = [seen.setdefault(g, len(seen)) for _, g in segments]
    array = np.array(groups, dtype=np.int32)
    plan = grouped_stream_plan(
        np.array(lengths, dtype=np.int64), seq_len, remainder, list(group_slices(array)), shuffle=shuffle, seed=5
    )
    expected, n_rows = grouped_concat_rows(lengths, groups, seq_len, remainder, shuffle, 5)
    assert plan.n_rows == n_rows
    assert as_tuples(plan) == expected
    assert plan.row_group is not None and len(plan.row_group) == n_rows
    for source, _, _, row, _ in expected:
        assert plan.row_group[row] == groups[source]


@settings(max_examples=60, deadline=None)
@given(lengths_st, st.integers(1, 17), st.integers(1, 7), st.sampled_from(["pad", "drop"]))
def test_windows_of_the_library_permute_within_each_window(lengths, seq_len, window, remainder):
    """pack_sequences(buffer_size=K) in concat mode: the stream as one, rows permuted inside
    the rows each window closed."""
    s = PlanSettings(seq_len, "concat", remainder=remainder, buffer_size=window, shuffle=True, seed=2)
    plan = plan_rows(np.array(lengths, dtype=np.int64), s)
    assert isinstance(plan, StreamPlan)
    n_rows = plan.n_rows
    closed = (np.cumsum(lengths)[window - 1 :: window] // seq_len).tolist() if lengths else []
    expected, _ = concat_rows(lengths, seq_len, True, remainder, True, 2, 0, [*closed, n_rows])
    assert as_tuples(plan) == expected


def test_plan_window_keys_the_shuffle_by_the_window_index():
    lengths = np.arange(1, 40, dtype=np.int64)
    s = PlanSettings(8, "concat", shuffle=True, seed=1)
    second = plan_window(lengths, s, 2, False)
    assert isinstance(second, StreamPlan)
    assert as_tuples(second) == concat_rows(lengths.tolist(), 8, False, "pad", True, 1, 2)[0]
    assert second.remainder_tokens == 0 and second.n_rows == int(lengths.sum()) // 8


def test_the_plan_holds_one_integer_per_segment_and_nothing_per_piece():
    lengths = np.full(1000, 3, dtype=np.int64)
    plan = stream_plan(lengths, 2, True, "pad", shuffle=True)
    per_segment = [a for a in (plan.ends, plan.spill_start, plan.source) if a is not None]
    assert sum(a.nbytes for a in per_segment) == 8 * len(lengths)
    assert plan.row_order() is None and plan.n_rows == 1500


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(1, 40), min_size=0, max_size=80),
    st.integers(1, 17),
    st.sampled_from(["pad", "drop"]),
    st.booleans(),
    st.sampled_from([1, 2, 3, 8]),
    st.sampled_from([1, 5, 64]),
    st.data(),
)
def test_ends_on_disk_give_the_pieces_of_ends_in_memory(lengths, seq_len, remainder, shuffle, k, chunk, data):
    """SparseEnds (one end in k held, the lengths read per block of rows) against
    stream_plan's ends in memory, on any range of output rows."""
    from packcli.plan.stream import SparseEnds, sparse_stream_plan

    array = np.array(lengths, dtype=np.int64)
    reads = []

    def read(first, count):
        reads.append(count)
        return array[first : first + count]

    chunks = [array[i : i + chunk * k] for i in range(0, len(array), chunk * k)]
    ends = SparseEnds.build(chunks, k, read)
    sparse = sparse_stream_plan(ends, int(array.sum()), seq_len, remainder, shuffle=shuffle, seed=7)
    whole = stream_plan(array, seq_len, True, remainder, shuffle=shuffle, seed=7)
    assert sparse.n_rows == whole.n_rows and sparse.remainder_tokens == whole.remainder_tokens
    first = data.draw(st.integers(0, whole.n_rows))
    last = data.draw(st.integers(first, whole.n_rows))
    assert as_tuples(sparse, first, last) == as_tuples(whole, first, last)
    assert all(count <= k for count in reads)  # never more than a block of lengths at a time
