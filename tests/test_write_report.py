"""Report figures from histograms equal the same figures computed row by row."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_write_shards import make_rows

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
