"""A spill's per-segment values: saved beside it and read back whole, and the rows'
columns found from where each piece starts in a spill in input order."""

from __future__ import annotations

import numpy as np
import pytest

from packcli.core.errors import PackcliError
from packcli.plan.contract import Pieces
from packcli.write.gather import SpillRanges
from packcli.write.values import ComposedTags, PairSides, SegmentValues, SegmentWeights, SpillValues


def test_values_are_saved_and_read_back_in_parts(tmp_path):
    parts = []
    for k, (first, weight) in enumerate([([3, 1], [0.5, 2.0]), ([4], [1.0])]):
        values = SegmentValues(pairs=True, weighted=True)
        values.append(np.array(first), np.array(weight))
        directory = tmp_path / f"part{k}"
        directory.mkdir()
        values.save(directory)
        parts.append(directory)
    found = SpillValues.load(parts, [2, 1], pairs=True, weighted=True)
    assert found.first is not None and found.first.tolist() == [3, 1, 4]
    assert found.weight is not None and found.weight.dtype == np.float32 and found.weight.tolist() == [0.5, 2.0, 1.0]
    with pytest.raises(PackcliError, match=r"2 values for 3 segments; start again with --overwrite"):
        SpillValues.load(parts[:1], [3], pairs=True, weighted=False)


def pieces(starts: list[int], lengths: list[int]) -> Pieces:
    n = len(starts)
    return Pieces(np.array(starts), np.array(lengths), np.zeros(n, np.int64), np.zeros(n, np.int64))


def test_a_piece_is_a_pairs_chosen_side_where_its_segment_starts():
    lengths = np.array([5, 3, 4])  # three pairs: chosen lengths 2, 1, 3
    tags = SpillValues(np.array([2, 1, 3]), np.array([0.5, 1.0, 2.0], np.float32)).tags(lengths)
    assert isinstance(tags, ComposedTags)
    got = tags(None, 0, 1, pieces([8, 5, 0, 6, 2, 11], [3, 1, 2, 2, 3, 1]))  # any order
    assert got["segment_pair"].tolist() == [2, 1, 0, 1, 0, 2]
    assert got["segment_chosen"].tolist() == [1, 1, 1, 0, 0, 0]
    assert got["segment_weight"].tolist() == [2.0, 1.0, 0.5, 1.0, 0.5, 2.0]


def test_a_piece_of_a_document_takes_its_documents_weight():
    weights = SegmentWeights(np.array([0, 10, 25]), np.array([0.5, 1.5, 3.0], np.float32))
    assert weights(None, 0, 1, pieces([0, 7, 10, 24, 30], [7, 3, 14, 1, 4]))["segment_weight"].tolist() == [
        0.5, 0.5, 1.5, 1.5, 3.0,
    ]  # fmt: skip
    assert PairSides(np.array([0, 4]))(None, 0, 1, pieces([4, 6], [2, 1]))["segment_chosen"].tolist() == [1, 0]


def test_two_taggers_of_one_column_are_refused():
    ranges = SpillRanges("segment_weight", np.array([0]))
    composed = ComposedTags((ranges, SegmentWeights(np.array([0]), np.array([1.0], np.float32))))
    with pytest.raises(PackcliError, match="two taggers give segment_weight"):
        composed(None, 0, 1, pieces([0], [1]))
