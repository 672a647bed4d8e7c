"""Row layout kernels against slow, obviously correct references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_layout import naive_cut_pieces, naive_rows

from packcli.core.errors import PackcliError
from packcli.inspect.verify import check_rows
from packcli.plan.kernels.pack import pack_lengths
from packcli.plan.rows import RowBuffers, Rows, build_rows, cut_pieces, fill_rows


def place_in_order(lengths, seq_len):
    """Next-fit placement, enough to exercise the layout kernel."""
    row_of, offset_of, row, used = [], [], 0, 0
    for n in lengths:
        if used + n > seq_len:
            row, used = row + 1, 0
        row_of.append(row)
        offset_of.append(used)
        used += n
    return np.array(row_of), np.array(offset_of), (row + 1 if lengths else 0)


@st.composite
def placed_sequences(draw):
    seq_len = draw(st.integers(1, 24))
    lengths = draw(st.lists(st.integers(1, seq_len), min_size=0, max_size=30))
    total = sum(lengths)
    tokens = np.array(draw(st.lists(st.integers(0, 99), min_size=total, max_size=total)), dtype=np.int32)
    with_labels = draw(st.booleans())
    labels = None
    if with_labels:
        mask = np.array(draw(st.lists(st.booleans(), min_size=total, max_size=total)), dtype=bool)
        labels = np.where(mask, tokens, -100).astype(np.int32)
    return seq_len, lengths, tokens, labels


@settings(max_examples=150, deadline=None)
@given(placed_sequences(), st.integers(0, 5))
def test_build_rows_matches_reference(case, pad_id):
    seq_len, lengths, tokens, labels = case
    starts = np.cumsum([0] + lengths[:-1]) if lengths else np.zeros(0, dtype=np.int64)
    row_of, offset_of, n_rows = place_in_order(lengths, seq_len)
    rows = build_rows(tokens, labels, starts, lengths, row_of, offset_of, n_rows, seq_len, pad_id)
    want = naive_rows(tokens, labels, starts, lengths, row_of, offset_of, n_rows, seq_len, pad_id)
    for name in ("input_ids", "labels", "position_ids", "num_segments"):
        assert getattr(rows, name).tolist() == want[name], name
    assert [rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]].tolist() for r in range(n_rows)] == want[
        "cu_seqlens"
    ]
    check_rows(rows, seq_len=seq_len, pad_id=pad_id, labels_follow_ids=labels is None)


@settings(max_examples=150, deadline=None)
@given(placed_sequences(), st.randoms(use_true_random=False))
def test_pieces_in_any_order_give_the_same_rows(case, rng):
    # The kernel lays each row out in offset order, whatever order the pieces come in
    # (bfd places the longest first; a block's pieces come in plan order).
    seq_len, lengths, tokens, labels = case
    starts = np.cumsum([0] + lengths[:-1]) if lengths else np.zeros(0, dtype=np.int64)
    placed = pack_lengths(np.asarray(lengths, dtype=np.int64), seq_len, "bfd")
    order = list(range(len(lengths)))
    rng.shuffle(order)
    pick = np.asarray(order, dtype=np.int64)
    lengths_arr = np.asarray(lengths, dtype=np.int64)
    rows = build_rows(
        tokens,
        labels,
        np.asarray(starts, dtype=np.int64)[pick] if lengths else starts,
        lengths_arr[pick],
        placed.row[pick],
        placed.offset[pick],
        placed.n_rows,
        seq_len,
        0,
    )
    want = naive_rows(tokens, labels, starts, lengths, placed.row, placed.offset, placed.n_rows, seq_len, 0)
    for name in ("input_ids", "labels", "position_ids", "num_segments"):
        assert getattr(rows, name).tolist() == want[name], name
    assert [rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]].tolist() for r in range(placed.n_rows)] == (
        want["cu_seqlens"]
    )


ROW_FIELDS = ("input_ids", "labels", "position_ids", "cu_seqlens", "cu_offsets", "num_segments", "max_seqlen")


def assert_same_rows(got: Rows, want: Rows) -> None:
    for name in (*ROW_FIELDS, "cu_seqlens_unpadded"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None and b is None) or a.tolist() == b.tolist(), name


@settings(max_examples=150, deadline=None)
@given(placed_sequences(), st.integers(1, 3), st.randoms(use_true_random=False))
def test_rows_built_in_reused_buffers_are_the_same(case, multiple, rng):
    # Buffers hold the block before (here: garbage); bfd's rows hold pieces out of offset
    # order, and with padding every piece takes a multiple of `multiple` cells.
    seq_len, lengths, tokens, labels = case
    starts = np.cumsum([0] + lengths[:-1]) if lengths else np.zeros(0, dtype=np.int64)
    width = seq_len * multiple
    placed = pack_lengths(-(-np.asarray(lengths, dtype=np.int64) // multiple) * multiple, width, "bfd")
    bits = None if labels is None else np.packbits(labels != -100, bitorder="little")
    order = np.asarray(rng.sample(range(len(lengths)), len(lengths)), dtype=np.int64)
    args = (tokens, starts[order], bits, starts[order], np.asarray(lengths)[order])
    rest = (placed.row[order], placed.offset[order], placed.n_rows, width, 7, multiple)
    buffers = RowBuffers()
    for array in buffers.take(placed.n_rows + 2, width, 2):
        array[...] = rng.randrange(-5, 5)
    assert_same_rows(fill_rows(*args, *rest, buffers=buffers), fill_rows(*args, *rest))


def test_rows_with_a_gap_in_reused_buffers_are_the_same():
    # Offsets that leave a gap in a row are not what the planners give: the fill is kept.
    tokens = np.arange(10, 20, dtype=np.int32)
    args = (tokens, [0, 3], None, [0, 3], [3, 2], [0, 0], [0, 4], 1, 8, 0)
    buffers = RowBuffers()
    for array in buffers.take(1, 8, 2):
        array[...] = 99
    got = fill_rows(*args, buffers=buffers)
    assert got.input_ids.tolist() == [[10, 11, 12, 0, 13, 14, 0, 0]]
    assert_same_rows(got, fill_rows(*args))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(1, 50), max_size=20),
    st.integers(1, 12),
    st.booleans(),
)
def test_cut_pieces_matches_reference(lengths, width, aligned):
    starts = np.cumsum([0] + lengths[:-1]) if lengths else []
    got = cut_pieces(starts, lengths, width, aligned)
    want = naive_cut_pieces(list(starts), lengths, width, aligned)
    assert [a.tolist() for a in got] == [list(w) for w in want]


def test_fixed_row_layout():
    tokens = np.arange(10, 20, dtype=np.int32)
    rows = build_rows(tokens, None, [0, 3, 5], [3, 2, 5], [0, 0, 1], [0, 3, 0], 2, 6, 0)
    assert rows.input_ids.tolist() == [[10, 11, 12, 13, 14, 0], [15, 16, 17, 18, 19, 0]]
    assert rows.labels.tolist() == [[-100, 11, 12, -100, 14, -100], [-100, 16, 17, 18, 19, -100]]
    assert rows.position_ids.tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 4, 0]]
    assert rows.cu_seqlens.tolist() == [0, 3, 5, 6, 0, 5, 6]
    assert rows.cu_offsets.tolist() == [0, 4, 7]
    assert rows.num_segments.tolist() == [2, 1]
    assert rows.real_lengths().tolist() == [5, 5]


def test_padded_row_layout():
    """--pad-to-multiple-of 4: each segment's pads keep pad id and -100 and count positions on;
    cu_seqlens are the padded offsets, cu_seqlens_unpadded the real lengths (the final
    padding segment counts as its own length)."""
    tokens = np.arange(10, 20, dtype=np.int32)
    rows = build_rows(tokens, None, [0, 3, 5], [3, 2, 5], [0, 0, 1], [0, 4, 0], 2, 12, 0, multiple=4)
    assert rows.input_ids[0].tolist() == [10, 11, 12, 0, 13, 14, 0, 0, 0, 0, 0, 0]
    assert rows.labels[0].tolist() == [-100, 11, 12, -100, -100, 14] + [-100] * 6
    assert rows.position_ids[0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
    assert rows.cu_seqlens.tolist() == [0, 4, 8, 12, 0, 8, 12]
    assert rows.cu_seqlens_unpadded.tolist() == [0, 3, 5, 9, 0, 5, 9]
    assert rows.max_seqlen.tolist() == [4, 8] and rows.num_segments.tolist() == [2, 1]
    assert rows.real_lengths().tolist() == [5, 5]
    again = Rows.concat([rows.slice(0, 1), rows.slice(1, 2)]).take(np.array([1, 0]))
    assert again.cu_seqlens_unpadded.tolist() == [0, 5, 9, 0, 3, 5, 9] and again.max_seqlen.tolist() == [8, 4]


def test_max_seqlen_is_the_longest_segment_padding_included():
    rows = _sample_rows()
    for r in range(len(rows)):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
        assert rows.max_seqlen[r] == np.diff(cu).max()
    bare = Rows(rows.input_ids, rows.labels, rows.position_ids, rows.cu_seqlens, rows.cu_offsets, rows.num_segments)
    assert bare.max_seqlen.tolist() == rows.max_seqlen.tolist() and bare.cu_seqlens_unpadded is None


def _sample_rows() -> Rows:
    tokens = np.arange(1, 31, dtype=np.int32)
    lengths = [4, 2, 6, 1, 3, 5, 6, 3]
    starts = np.cumsum([0] + lengths[:-1])
    row_of, offset_of, n_rows = place_in_order(lengths, 6)
    return build_rows(tokens, None, starts, lengths, row_of, offset_of, n_rows, 6, 0)


def test_slice_take_and_concat_agree():
    rows = _sample_rows()
    n = len(rows)
    parts = [rows.slice(0, 2), rows.slice(2, 3), rows.slice(3, n)]
    joined = Rows.concat(parts)
    order = np.arange(n)[::-1].copy()
    reversed_rows = rows.take(order)
    for name in ("input_ids", "cu_seqlens", "cu_offsets", "num_segments"):
        assert getattr(joined, name).tolist() == getattr(rows, name).tolist()
    for r in range(n):
        a = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]].tolist()
        b_index = n - 1 - r
        b = reversed_rows.cu_seqlens[reversed_rows.cu_offsets[b_index] : reversed_rows.cu_offsets[b_index + 1]].tolist()
        assert a == b
    check_rows(reversed_rows, seq_len=6, pad_id=0)


def per_row(rows: Rows, name: str) -> list[list]:
    """A per-segment column as one list per row."""
    offsets = rows.seg_offsets
    return [rows.segment_columns[name][offsets[r] : offsets[r + 1]].tolist() for r in range(len(rows))]


@settings(max_examples=150, deadline=None)
@given(placed_sequences(), st.randoms(use_true_random=False))
def test_segment_columns_follow_their_rows_through_slice_take_and_concat(case, rng):
    seq_len, lengths, tokens, labels = case
    starts = np.cumsum([0] + lengths[:-1]) if lengths else np.zeros(0, dtype=np.int64)
    row_of, offset_of, n_rows = place_in_order(lengths, seq_len)
    rows = build_rows(tokens, labels, starts, lengths, row_of, offset_of, n_rows, seq_len, 0)
    # each sequence's index, in row then offset order (place_in_order's order): one per real segment
    rows.segment_columns = {"segment_source": np.arange(len(lengths), dtype=np.int32) % 3}
    rows.segment_columns["segment_index"] = np.arange(len(lengths), dtype=np.int32)
    want = [[i for i in range(len(lengths)) if row_of[i] == r] for r in range(n_rows)]
    assert rows.seg_offsets.tolist() == [0, *np.cumsum(rows.num_segments).tolist()]
    assert per_row(rows, "segment_index") == want
    cut = rng.randint(0, n_rows)
    assert per_row(rows.slice(cut, n_rows), "segment_index") == want[cut:]
    joined = Rows.concat([rows.slice(0, cut), rows.slice(cut, n_rows)])
    assert per_row(joined, "segment_index") == want and per_row(joined, "segment_source") == per_row(
        rows, "segment_source"
    )
    repeats = rng.choices(range(n_rows), k=2) if n_rows else []  # a selection may repeat rows
    order = np.asarray(rng.sample(range(n_rows), n_rows) + repeats, dtype=np.int64)
    assert per_row(rows.take(order), "segment_index") == [want[r] for r in order]


def test_rows_without_segment_columns_stay_without():
    rows = _sample_rows()
    assert rows.segment_columns == {}
    for got in (rows.slice(1, 3), rows.take(np.array([2, 0])), Rows.concat([rows.slice(0, 1), rows.slice(1, 2)])):
        assert got.segment_columns == {}


def test_blocks_with_different_segment_columns_are_not_joined():
    rows = _sample_rows()
    tagged = rows.slice(0, 2)
    tagged.segment_columns = {"segment_source": np.zeros(int(tagged.num_segments.sum()), dtype=np.int32)}
    with pytest.raises(PackcliError, match="different segment columns"):
        Rows.concat([tagged, rows.slice(2, 3)])
