"""Report figures from histograms equal the same figures computed row by row."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mixed import gather_mixture
from test_write_shards import make_rows

from packcli.core.errors import PackcliError
from packcli.write.report import RowStats, _median


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(0, 1000))
def test_row_stats_match_direct_computation(n_rows, seed):
    rows = make_rows(n_rows, seed=seed)
    stats = RowStats(16)
    stats.add(rows.slice(0, n_rows // 2))
    stats.add(rows.slice(n_rows // 2, n_rows))
    summary = stats.summary()

    fills, lengths, per_row = [], [], []
    for r in range(n_rows):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]].tolist()
        real = cu[: int(rows.num_segments[r]) + 1]
        fills.append(real[-1])
        lengths += [b - a for a, b in zip(real, real[1:])]
        per_row.append(len(real) - 1)
    assert summary["rows"] == n_rows
    assert summary["real_tokens"] == sum(fills)
    assert summary["padding_tokens"] == 16 * n_rows - sum(fills)
    assert summary["sequences_packed"] == len(lengths)
    assert summary["label_tokens"] == int((rows.labels != -100).sum())
    assert summary["fill_per_row"]["min"] == min(fills)
    assert summary["fill_per_row"]["median"] == float(np.median(fills))
    assert summary["sequences_per_row"]["max"] == max(per_row)
    assert summary["lower_bound_rows"] == -(-sum(fills) // 16)
    if lengths:
        assert summary["sequence_length"]["median"] == float(np.median(lengths))
        assert summary["sequence_length"]["max"] == max(lengths)


@given(st.lists(st.integers(0, 20), min_size=1, max_size=50))
def test_median_of_histogram(values):
    hist = np.bincount(values, minlength=21)
    assert _median(hist) == float(np.median(values))


def test_stats_sent_as_histograms_merge_to_the_same_summary():
    """Shard tasks of the Ray engine send their figures as plain lists; merged back they
    give the summary of counting every row in one place."""
    rows = make_rows(30, seed=5)
    whole = RowStats(16)
    whole.add(rows)
    merged = RowStats(16)
    for start, stop in [(0, 11), (11, 30)]:
        part = RowStats(16)
        part.add(rows.slice(start, stop))
        sent = {name: hist.tolist() for name, hist in part.histograms().items()}
        merged.merge(RowStats.from_histograms(16, sent, part.label_tokens))
    assert merged.summary() == whole.summary()
    assert merged.summary()["label_tokens"] > 0


def naive_per_source(blocks) -> np.ndarray:
    """Segments, real tokens and learned tokens per segment_source, row by row."""
    out = np.zeros((3, 3), dtype=np.int64)
    for rows in blocks:
        unpadded = rows.cu_seqlens if rows.cu_seqlens_unpadded is None else rows.cu_seqlens_unpadded
        source = rows.segment_columns["segment_source"].tolist()
        k = 0
        for r in range(len(rows)):
            cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]].tolist()
            real = unpadded[rows.cu_offsets[r] : rows.cu_offsets[r + 1]].tolist()
            for j in range(int(rows.num_segments[r])):
                out[source[k]] += [1, real[j + 1] - real[j], int((rows.labels[r, cu[j] : cu[j + 1]] != -100).sum())]
                k += 1
    return out


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from([("bin", "bfd", 1), ("bin", "ffd", 1), ("bin", "bfd", 4), ("concat", "bfd", 1)]),
    st.integers(0, 1000),
)
def test_per_source_figures_match_counting_segment_by_segment(plan, seed):
    mode, algorithm, multiple = plan
    mixture = gather_mixture(24 if multiple == 1 else 32, (9, 5, 7), mode, algorithm, multiple, seed)
    whole, merged = RowStats(mixture.blocks[0].seq_len), RowStats(mixture.blocks[0].seq_len)
    for block in mixture.blocks:
        whole.add(block)
        part = RowStats(block.seq_len)  # a shard counted on another thread
        part.add(block)
        merged.merge(part)
    want = naive_per_source(mixture.blocks)
    assert whole.per_source().tolist() == want.tolist() == merged.per_source().tolist()
    assert int(want[:, 1].sum()) == whole.real_tokens and int(want[:, 2].sum()) == whole.label_tokens
    assert int(want[:, 0].sum()) == whole.sequences
    if mode == "bin":  # every sequence whole, so each source's real tokens are all it had
        assert want[:, 1].tolist() == mixture.tokens_in


def test_per_source_covers_sources_without_segments_and_travels_as_lists():
    mixture = gather_mixture(counts=(4, 0, 3))
    stats = RowStats(24)
    for block in mixture.blocks:
        stats.add(block)
    figures = stats.per_source(4)
    assert figures.shape == (4, 3) and figures[1].tolist() == [0, 0, 0] and figures[3].tolist() == [0, 0, 0]
    sent = RowStats.from_histograms(24, stats.histograms(), stats.label_tokens, stats.per_source().tolist())
    assert sent.per_source(4).tolist() == figures.tolist()
    with pytest.raises(PackcliError, match="outside the 2 sources"):
        stats.per_source(2)


def test_rows_without_segment_source_count_no_source():
    stats = RowStats(16)
    stats.add(make_rows(10))
    assert stats.per_source().shape == (0, 3)
