"""The efficiency report (SPEC section 5): measured from rows, shown as a table or JSON.

Row metrics are kept as histograms over 0..seq_len, so min, median and mean are exact
while memory stays bounded whatever the number of rows. `pack` feeds the rows it
writes; `stats` feeds the rows it reads back from the shards: one code path for both.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from packcli.plan.rows import IGNORE_INDEX, Rows
from packcli.write.manifest import NoPacking, RowSummary


class RowStats:
    def __init__(self, seq_len: int):
        self.seq_len = seq_len
        self.fill = np.zeros(seq_len + 1, dtype=np.int64)
        self.segments_per_row = np.zeros(seq_len + 1, dtype=np.int64)
        self.segment_lengths = np.zeros(seq_len + 1, dtype=np.int64)
        self.label_tokens = 0

    def add(self, rows: Rows) -> None:
        real = rows.real_lengths()
        self.fill += np.bincount(real, minlength=self.seq_len + 1)
        self.segments_per_row += np.bincount(rows.num_segments, minlength=self.seq_len + 1)
        self.segment_lengths += np.bincount(_real_segment_lengths(rows), minlength=self.seq_len + 1)
        self.label_tokens += int((rows.labels != IGNORE_INDEX).sum())

    def merge(self, other: RowStats) -> None:
        """Add the figures of rows counted elsewhere (a shard written on another thread)."""
        self.fill += other.fill
        self.segments_per_row += other.segments_per_row
        self.segment_lengths += other.segment_lengths
        self.label_tokens += other.label_tokens

    @property
    def rows(self) -> int:
        return int(self.fill.sum())

    @property
    def real_tokens(self) -> int:
        return int((self.fill * np.arange(self.seq_len + 1)).sum())

    @property
    def sequences(self) -> int:
        return int(self.segment_lengths.sum())

    def summary(self) -> RowSummary:
        rows, real, seq_len = self.rows, self.real_tokens, self.seq_len
        capacity = rows * seq_len
        return {
            "seq_len": seq_len,
            "rows": rows,
            "sequences_packed": self.sequences,
            "real_tokens": real,
            "padding_tokens": capacity - real,
            "label_tokens": self.label_tokens,
            "efficiency": real / capacity if capacity else 0.0,
            "lower_bound_rows": math.ceil(real / seq_len),
            "sequences_per_row": {
                "mean": self.sequences / rows if rows else 0.0,
                "max": _max(self.segments_per_row),
            },
            "fill_per_row": {
                "min": _min(self.fill),
                "median": _median(self.fill),
                "mean": real / rows if rows else 0.0,
            },
            "sequence_length": {
                "min": _min(self.segment_lengths),
                "median": _median(self.segment_lengths),
                "max": _max(self.segment_lengths),
            },
        }

    def histograms(self) -> dict[str, np.ndarray]:
        return {
            "fill_per_row": self.fill,
            "sequences_per_row": self.segments_per_row,
            "sequence_length": self.segment_lengths,
        }

    @classmethod
    def from_histograms(cls, seq_len: int, histograms: dict[str, Any], label_tokens: int) -> RowStats:
        """The figures `histograms()` and `label_tokens` gave, back (sent from another process)."""
        stats = cls(seq_len)
        stats.fill = np.asarray(histograms["fill_per_row"], dtype=np.int64)
        stats.segments_per_row = np.asarray(histograms["sequences_per_row"], dtype=np.int64)
        stats.segment_lengths = np.asarray(histograms["sequence_length"], dtype=np.int64)
        stats.label_tokens = int(label_tokens)
        return stats


def _real_segment_lengths(rows: Rows) -> np.ndarray:
    """Real lengths of the real segments of every row (the padding segment left out; the
    pads after each segment too, with --pad-to-multiple-of)."""
    offsets = rows.cu_offsets
    within_row = np.ones(max(len(rows.cu_seqlens) - 1, 0), dtype=bool)
    within_row[offsets[1:-1] - 1] = False  # a diff across two rows is no segment
    cu = rows.cu_seqlens if rows.cu_seqlens_unpadded is None else rows.cu_seqlens_unpadded
    lengths = np.diff(cu.astype(np.int64))[within_row]
    segments = np.diff(offsets) - 1
    first = np.cumsum(segments) - segments
    row = np.repeat(np.arange(len(rows)), segments)
    index_in_row = np.arange(len(lengths)) - first[row]
    return lengths[index_in_row < rows.num_segments[row]]


def _min(hist: np.ndarray) -> int:
    nonzero = np.flatnonzero(hist)
    return int(nonzero[0]) if len(nonzero) else 0


def _max(hist: np.ndarray) -> int:
    nonzero = np.flatnonzero(hist)
    return int(nonzero[-1]) if len(nonzero) else 0


def _median(hist: np.ndarray) -> float:
    total = int(hist.sum())
    if total == 0:
        return 0.0
    cumulative = np.cumsum(hist)
    lower = int(np.searchsorted(cumulative, (total + 1) // 2))
    upper = int(np.searchsorted(cumulative, total // 2 + 1))
    return (lower + upper) / 2


def no_packing_baseline(sequence_rows: int, real_tokens: int, seq_len: int) -> NoPacking:
    """Every sequence padded to seq_len in rows of its own."""
    capacity = sequence_rows * seq_len
    return {"rows": sequence_rows, "efficiency": real_tokens / capacity if capacity else 0.0}
