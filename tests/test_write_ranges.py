"""Positioned reads of many pieces (packcli/write/ranges.py): pieces merged into runs as
the naive walk of tests/naive_slots.py merges them, each read back whole."""

from __future__ import annotations

import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_slots import runs_in_order

from packcli.write.ranges import Ranges


@settings(max_examples=80, deadline=None)
@given(
    pieces=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 30)), min_size=1, max_size=40),
    gap=st.sampled_from([0, 3, 64]),
)
def test_pieces_read_in_runs_come_back_whole(tmp_path_factory, pieces, gap):
    """Pieces in any order, overlapping or apart: each comes back as its own tokens."""
    data = np.arange(1000, 1230, dtype=np.uint16)
    path = tmp_path_factory.mktemp("runs") / "tokens.bin"
    path.write_bytes(data.tobytes())
    starts = np.array([s for s, _ in pieces], dtype=np.int64)
    lengths = np.array([n for _, n in pieces], dtype=np.int64)
    ranges = Ranges.in_order(starts, lengths, gap)
    want_ranges, want_group = runs_in_order(starts.tolist(), lengths.tolist(), gap)
    assert list(zip(ranges.start.tolist(), ranges.end.tolist())) == want_ranges
    assert ranges.group.tolist() == want_group
    fd = os.open(path, os.O_RDONLY)
    try:
        tokens, offsets = ranges.read_fd(fd, np.dtype(np.uint16), ranges.start, ranges.end)
    finally:
        os.close(fd)
    at = ranges.per_piece(offsets - ranges.start)
    for start, length, where in zip(starts.tolist(), lengths.tolist(), at.tolist()):
        assert tokens[where : where + length].tolist() == data[start : start + length].tolist()
    assert len(ranges.start) <= len(pieces)


def test_consecutive_pieces_are_one_read():
    def reads(starts, lengths, gap):
        ranges = Ranges.in_order(np.array(starts), np.array(lengths), gap)
        return list(zip(ranges.start.tolist(), ranges.end.tolist()))

    assert reads([0, 5, 9], [5, 4, 11], 0) == [(0, 20)]
    assert reads([0, 30], [5, 5], 64) == [(0, 35)]
    assert reads([0, 30], [5, 5], 3) == [(0, 5), (30, 35)]
    assert reads([30, 0], [5, 5], 64) == [(30, 35), (0, 5)]  # backwards: a read of its own
