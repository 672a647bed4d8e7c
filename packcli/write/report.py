"""The efficiency report (SPEC section 5): measured from rows, shown as a table or JSON.

Row metrics are kept as histograms over 0..seq_len, so min, median and mean are exact
while memory stays bounded whatever the number of rows. `pack` feeds the rows it
writes; `stats` feeds the rows it reads back from the shards: one code path for both.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from packcli.core.errors import PackcliError
from packcli.plan.rows import IGNORE_INDEX, Rows, segment_table
from packcli.write.columns import SOURCE_COLUMN
from packcli.write.manifest import NoPacking, RowSummary, WeightSummary
from packcli.write.values import CHOSEN_COLUMN, WEIGHT_COLUMN

SOURCE_FIGURES = ("segments", "real_tokens", "learned_tokens")  # the columns of RowStats.per_source()


class RowStats:
    def __init__(self, seq_len: int):
        self.seq_len = seq_len
        self.fill = np.zeros(seq_len + 1, dtype=np.int64)
        self.segments_per_row = np.zeros(seq_len + 1, dtype=np.int64)
        self.segment_lengths = np.zeros(seq_len + 1, dtype=np.int64)
        self.label_tokens = 0
        self.sources = np.zeros((0, len(SOURCE_FIGURES)), dtype=np.int64)  # per source: SOURCE_FIGURES
        self.pairs = 0  # preference pairs: segments with segment_chosen 1
        self.weights = WeightFigures()  # segment_weight over the segments that have one

    def add(self, rows: Rows) -> None:
        real = rows.real_lengths()
        self.fill += np.bincount(real, minlength=self.seq_len + 1)
        self.segments_per_row += np.bincount(rows.num_segments, minlength=self.seq_len + 1)
        self.segment_lengths += np.bincount(_real_segment_lengths(rows), minlength=self.seq_len + 1)
        learned = rows.labels != IGNORE_INDEX
        self.label_tokens += int(np.count_nonzero(learned))
        if SOURCE_COLUMN in rows.segment_columns:
            self._add_sources(source_figures(rows, rows.segment_columns[SOURCE_COLUMN], learned))
        if CHOSEN_COLUMN in rows.segment_columns:
            self.pairs += int(np.count_nonzero(rows.segment_columns[CHOSEN_COLUMN] == 1))
        if WEIGHT_COLUMN in rows.segment_columns:
            self.weights.add(rows.segment_columns[WEIGHT_COLUMN])

    def _add_sources(self, counts: np.ndarray) -> None:
        if len(counts) > len(self.sources):
            grown = np.zeros((len(counts), len(SOURCE_FIGURES)), dtype=np.int64)
            grown[: len(self.sources)] = self.sources
            self.sources = grown
        self.sources[: len(counts)] += counts

    def merge(self, other: RowStats) -> None:
        """Add the figures of rows counted elsewhere (a shard written on another thread)."""
        self.fill += other.fill
        self.segments_per_row += other.segments_per_row
        self.segment_lengths += other.segment_lengths
        self.label_tokens += other.label_tokens
        self._add_sources(other.sources)
        self.pairs += other.pairs
        self.weights.merge(other.weights)

    def per_source(self, sources: int | None = None) -> np.ndarray:
        """int64 [sources, 3]: per `segment_source` value, its segments, real tokens (padding
        and the pads of --pad-to-multiple-of excluded) and learned tokens (label not -100):
        the `tokens.out` and `tokens.learned` of a mixture's sources. `sources`: the number of
        sources (those with no segment get zeros); default: up to the largest seen."""
        n = len(self.sources) if sources is None else sources
        if n < len(self.sources):
            raise PackcliError(f"segment_source {len(self.sources) - 1} is outside the {n} sources")
        out = np.zeros((n, len(SOURCE_FIGURES)), dtype=np.int64)
        out[: len(self.sources)] = self.sources
        return out

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
    def from_histograms(
        cls, seq_len: int, histograms: dict[str, Any], label_tokens: int, sources: Any = None
    ) -> RowStats:
        """The figures `histograms()`, `label_tokens` and `per_source()` gave, back (sent
        from another process)."""
        stats = cls(seq_len)
        stats.fill = np.asarray(histograms["fill_per_row"], dtype=np.int64)
        stats.segments_per_row = np.asarray(histograms["sequences_per_row"], dtype=np.int64)
        stats.segment_lengths = np.asarray(histograms["sequence_length"], dtype=np.int64)
        stats.label_tokens = int(label_tokens)
        if sources is not None:
            stats._add_sources(np.asarray(sources, dtype=np.int64).reshape(-1, len(SOURCE_FIGURES)))
        return stats


class WeightFigures:
    """Segments with a weight, and their weights' sum, least and greatest."""

    def __init__(self) -> None:
        self.segments, self.total, self.least, self.most = 0, 0.0, float("inf"), float("-inf")

    def add(self, weights: np.ndarray) -> None:
        if len(weights):
            self.segments += len(weights)
            self.total += float(np.sum(weights, dtype=np.float64))
            self.least = min(self.least, float(np.min(weights)))
            self.most = max(self.most, float(np.max(weights)))

    def merge(self, other: WeightFigures) -> None:
        self.segments += other.segments
        self.total += other.total
        self.least, self.most = min(self.least, other.least), max(self.most, other.most)

    def summary(self) -> WeightSummary | None:
        """min, mean and max over the segments (None: no segment has a weight)."""
        if not self.segments:
            return None
        return {"segments": self.segments, "min": self.least, "mean": self.total / self.segments, "max": self.most}


def source_figures(rows: Rows, source: np.ndarray, learned: np.ndarray | None = None) -> np.ndarray:
    """int64 [max source + 1, 3]: segments, real tokens and learned tokens per value of a
    per-segment source column (one entry per real segment, as Rows keeps it). `learned`:
    the rows' labels != -100, when the caller has it."""
    source = np.asarray(source, dtype=np.int64)
    entry_row, _, segment, is_real = segment_table(rows.cu_offsets, rows.num_segments)
    if len(source) != int(np.count_nonzero(is_real)):
        raise PackcliError(f"internal: {len(source)} sources for {int(np.count_nonzero(is_real))} segments")
    if not len(source):
        return np.zeros((0, len(SOURCE_FIGURES)), dtype=np.int64)
    if int(source.min()) < 0:
        raise PackcliError(f"segment_source {int(source.min())} is negative")
    if learned is None:
        learned = rows.labels != IGNORE_INDEX
    cu = np.asarray(rows.cu_seqlens, dtype=np.int64)
    unpadded = cu if rows.cu_seqlens_unpadded is None else np.asarray(rows.cu_seqlens_unpadded, dtype=np.int64)
    starts = entry_row[segment] * rows.seq_len + cu[segment]  # every segment, padding too: they tile the rows
    per_segment = np.add.reduceat(learned.reshape(-1), starts, dtype=np.int64)
    real = unpadded[segment + 1] - unpadded[segment]
    n = int(source.max()) + 1
    out = np.empty((n, len(SOURCE_FIGURES)), dtype=np.int64)
    out[:, 0] = np.bincount(source, minlength=n)
    out[:, 1] = np.bincount(source, weights=real[is_real], minlength=n)
    out[:, 2] = np.bincount(source, weights=per_segment[is_real], minlength=n)
    return out


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
