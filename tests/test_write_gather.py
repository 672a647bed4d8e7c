"""gather_rows' per-segment columns: each placed piece is one segment, tagged by a
PieceTags; SpillRanges tags a piece by the range of the spill its start falls in."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from packcli.core.errors import PackcliError
from packcli.inspect.verify import check_rows
from packcli.plan.contract import Pieces
from packcli.plan.planner import plan_rows
from packcli.plan.rows import Rows
from packcli.plan.settings import PlanSettings
from packcli.write.gather import SpillRanges, gather_rows
from packcli.write.spill import Spill

PLANS = [  # (mode, algorithm): a PatternPlan, RowPlans, a StreamPlan
    ("bin", "bfd"),
    ("bin", "ffd"),
    ("bin", "nf"),
    ("concat", "bfd"),
]


def spill_of_sources(sources: list[list[int]]) -> tuple[Spill, np.ndarray, np.ndarray]:
    """An in-memory spill of every source's sequences one source after another, each token
    1000 * its source + a count (so a token names its source); with the sources' bounds."""
    lengths = np.array([n for source in sources for n in source], dtype=np.int64)
    tokens, bounds, at = [], [], 0
    for index, source in enumerate(sources):
        bounds.append(at)
        total = sum(source)
        tokens.append(1000 * index + np.arange(total) % 997)
        at += total
    flat = np.concatenate(tokens).astype(np.int32) if tokens else np.zeros(0, dtype=np.int32)
    return Spill.in_memory(flat, lengths, None), lengths, np.array(bounds, dtype=np.int64)


@st.composite
def mixtures(draw):
    seq_len = draw(st.integers(4, 24))
    sources = draw(st.lists(st.lists(st.integers(1, seq_len), max_size=12), min_size=1, max_size=4))
    mode, algorithm = draw(st.sampled_from(PLANS))
    multiple = draw(st.sampled_from([1, 2, 4])) if mode == "bin" else 1
    return seq_len, sources, mode, algorithm, multiple, draw(st.integers(0, 3))


@settings(max_examples=120, deadline=None)
@given(mixtures())
def test_every_segment_is_tagged_with_the_source_of_its_tokens(case):
    seq_len, sources, mode, algorithm, multiple, seed = case
    assume(any(sources))
    spill, lengths, bounds = spill_of_sources(sources)
    settings_ = PlanSettings(seq_len * multiple, mode, algorithm, shuffle=True, seed=seed, multiple=multiple)
    plan = plan_rows(lengths, settings_)
    tags = SpillRanges("segment_source", bounds)
    blocks = list(gather_rows(spill, plan, seq_len * multiple, 0, multiple=multiple, tags=tags))
    rows = Rows.concat(blocks)
    check_rows(rows, seq_len=seq_len * multiple, pad_id=0, pad_to_multiple_of=multiple if multiple > 1 else None)
    source = rows.segment_columns["segment_source"]
    assert source.dtype == np.int32 and len(source) == int(rows.num_segments.sum())
    unpadded = rows.cu_seqlens if rows.cu_seqlens_unpadded is None else rows.cu_seqlens_unpadded
    k = 0
    per_source = np.zeros(len(sources), dtype=np.int64)
    for r in range(len(rows)):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
        real = np.diff(unpadded[rows.cu_offsets[r] : rows.cu_offsets[r + 1]])
        for j in range(int(rows.num_segments[r])):
            tokens = rows.input_ids[r, cu[j] : cu[j] + real[j]]
            assert set((tokens // 1000).tolist()) == {int(source[k])}, (r, j)
            per_source[source[k]] += real[j]
            k += 1
    if mode == "bin":  # every sequence whole: each source's tokens all come back under its index
        assert per_source.tolist() == [sum(s) for s in sources]


def test_without_tags_rows_have_no_segment_columns():
    spill, lengths, _ = spill_of_sources([[3, 5], [2]])
    plan = plan_rows(lengths, PlanSettings(8))
    assert all(rows.segment_columns == {} for rows in gather_rows(spill, plan, 8, 0))


def test_a_tagger_sees_the_pieces_of_each_block_as_the_plan_gives_them(monkeypatch):
    import packcli.write.gather as gather

    monkeypatch.setattr(gather, "ROW_BLOCK_TOKENS", 16)  # two rows of 8 per block
    spill, lengths, _ = spill_of_sources([[3, 5, 7, 2, 6, 8, 1, 4]])
    plan = plan_rows(lengths, PlanSettings(8, shuffle=True, seed=1))
    seen = []

    def tags(plan_, first_row, last_row, pieces):
        assert plan_ is plan and last_row == min(first_row + 2, plan.n_rows)
        want = plan.pieces(first_row, last_row)
        assert all(np.array_equal(a, b) for a, b in zip(pieces, want))
        seen.append(first_row)
        return {"segment_start": pieces.start}  # the spill start of each segment, laid out by row then offset

    rows = Rows.concat(list(gather_rows(spill, plan, 8, 0, tags=tags)))
    assert seen == list(range(0, plan.n_rows, 2))
    segment_start = rows.segment_columns["segment_start"]
    k = 0
    for r in range(len(rows)):
        for j in range(int(rows.num_segments[r])):
            at = int(rows.cu_seqlens[rows.cu_offsets[r] + j])
            assert rows.input_ids[r, at] == segment_start[k] % 997  # the spill token at that start
            k += 1
    assert sorted(segment_start.tolist()) == np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()


def test_spill_ranges_values():
    tags = SpillRanges("segment_source", np.array([0, 10, 10, 25]))
    got = tags(None, 0, 1, Pieces(np.array([0, 9, 10, 24, 25, 99]), None, None, None))  # type: ignore[arg-type]
    assert got["segment_source"].tolist() == [0, 0, 2, 2, 3, 3]  # source 1 is empty: never given
    assert got["segment_source"].dtype == np.int32


@pytest.mark.parametrize("bounds", [[], [0, 5, 3]], ids=["empty", "decreasing"])
def test_spill_ranges_refuse_bounds_that_are_no_ranges(bounds):
    with pytest.raises(PackcliError, match="non-empty and non-decreasing"):
        SpillRanges("segment_source", np.array(bounds, dtype=np.int64))


def test_spill_ranges_refuse_a_start_before_the_first_range():
    with pytest.raises(PackcliError, match="before the first range"):
        SpillRanges("segment_source", np.array([5, 9]))(None, 0, 1, Pieces(np.array([7, 4]), None, None, None))  # type: ignore[arg-type]
