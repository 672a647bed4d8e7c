"""Sequences in, blocks of rows out: the two packing modes, shared by the CLI and the library.

Output depends only on the sequences and the settings, never on how the sequences
arrive: bin mode packs windows of exactly `buffer_size` sequences, concat mode cuts one
token stream at multiples of `seq_len`, and row shuffles use fixed-size windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from packcli.choices import MODES, OVERLONG_POLICIES, REMAINDER_POLICIES
from packcli.errors import PackcliError
from packcli.kernels import bfd_rows_from_counts, pack_lengths
from packcli.rows import IGNORE_INDEX, Rows, build_rows, cut_pieces
from packcli.sequences import SequenceBatch

CONCAT_SHUFFLE_TOKENS = 1 << 24
ROW_BLOCK_TOKENS = 1 << 20  # rows are built (and written, on another thread) this many tokens at a time: one Parquet row group


@dataclass
class PackSettings:
    seq_len: int
    pad_id: int
    mode: str = "bin"
    algorithm: str = "bfd"
    overlong: str = "split"
    remainder: str = "pad"
    buffer_size: int = 100_000
    shuffle: bool = False
    seed: int = 0


@dataclass
class Counters:
    """What the report says about sequences before they became rows."""

    sequences_in: int = 0
    unpacked_rows: int = 0  # rows if every sequence were padded to seq_len on its own
    overlong: int = 0
    overlong_tokens_lost: int = 0
    no_labels_dropped: int = 0
    remainder_tokens: int = 0
    windows: int = 0
    length_histogram: np.ndarray | None = None  # packed sequence lengths, 0..seq_len: bounded memory

    def count_lengths(self, lengths: np.ndarray, seq_len: int) -> None:
        if self.length_histogram is None:
            self.length_histogram = np.zeros(seq_len + 1, dtype=np.int64)
        self.length_histogram += np.bincount(lengths, minlength=seq_len + 1)[: seq_len + 1]


@dataclass
class Placement:
    """Where each packed piece went: row, offset, length, and the input sequence it came from."""

    sequence: list = field(default_factory=list)
    row: list = field(default_factory=list)
    offset: list = field(default_factory=list)
    length: list = field(default_factory=list)

    def add(self, sequence, row, offset, length) -> None:
        for target, values in zip((self.sequence, self.row, self.offset, self.length), (sequence, row, offset, length)):
            target.append(np.asarray(values, dtype=np.int64))

    def arrays(self) -> dict[str, np.ndarray]:
        names = ("sequence", "row", "offset", "length")
        return {
            name: np.concatenate(values) if values else np.zeros(0, dtype=np.int64)
            for name, values in zip(names, (self.sequence, self.row, self.offset, self.length))
        }


def make_packer(settings: PackSettings, counters: Counters, placement: Placement | None = None):
    cls = BinPacker if settings.mode == "bin" else ConcatPacker
    return cls(settings, counters, placement)


class BinPacker:
    """Packs windows of exactly `buffer_size` sequences with the chosen kernel."""

    def __init__(self, settings: PackSettings, counters: Counters, placement: Placement | None):
        self.s, self.counters, self.placement = settings, counters, placement
        self.chunks: list[tuple] = []  # (tokens, labels, starts, lengths, sequence ids)
        self.buffered = 0
        self.rows_out = 0

    def add(self, batch: SequenceBatch, location):
        """Yields the Rows of every window this batch completes."""
        seq_len = self.s.seq_len
        lengths = batch.lengths
        starts = np.cumsum(lengths) - lengths
        ids = np.arange(len(lengths), dtype=np.int64) + self.counters.sequences_in
        self.counters.sequences_in += len(lengths)
        long = lengths > seq_len
        if long.any():
            self.counters.overlong += int(long.sum())
            policy = self.s.overlong
            if policy == "error":
                first = int(np.argmax(long))
                raise PackcliError(
                    f"{location(first)}: sequence has {int(lengths[first]):,} tokens, more than "
                    f"--seq-len {seq_len:,} (--overlong error; use split, truncate or drop)"
                )
            if policy == "split":
                starts, lengths, owner = cut_pieces(starts, lengths, seq_len, aligned=False)
                ids = ids[owner]
            elif policy == "truncate":
                self.counters.overlong_tokens_lost += int((lengths[long] - seq_len).sum())
                lengths = np.minimum(lengths, seq_len)
                if batch.labels is not None:
                    keep = ~long | _has_labels(batch.labels, starts, lengths)
                    self.counters.no_labels_dropped += int((~keep).sum())
                    self.counters.overlong_tokens_lost += int(lengths[~keep].sum())
                    starts, lengths, ids = starts[keep], lengths[keep], ids[keep]
            else:
                self.counters.overlong_tokens_lost += int(lengths[long].sum())
                starts, lengths, ids = starts[~long], lengths[~long], ids[~long]
        self.counters.unpacked_rows += len(lengths)
        yield from self._buffer(batch.tokens, batch.labels, starts, lengths, ids)

    def _buffer(self, tokens, labels, starts, lengths, ids):
        size = self.s.buffer_size
        while len(lengths):
            take = min(len(lengths), size - self.buffered)
            self.chunks.append((tokens, labels, starts[:take], lengths[:take], ids[:take]))
            self.buffered += take
            starts, lengths, ids = starts[take:], lengths[take:], ids[take:]
            if self.buffered == size:
                yield from self._pack_window()

    def finish(self):
        if self.buffered:
            yield from self._pack_window()

    def _pack_window(self):
        tokens, labels, starts, lengths, ids = _gather(self.chunks)
        self.chunks, self.buffered = [], 0
        placed = pack_lengths(lengths, self.s.seq_len, algorithm=self.s.algorithm, seed=self.s.seed)
        row_of = placed.row.astype(np.int64)  # rows_out is added below: no int32 wrap
        if self.s.shuffle:
            row_of = window_rng(self.s.seed, self.counters.windows).permutation(placed.n_rows)[row_of]
        self.counters.windows += 1
        self.counters.count_lengths(lengths, self.s.seq_len)
        if self.placement is not None:
            self.placement.add(ids, row_of + self.rows_out, placed.offset, lengths)
        self.rows_out += placed.n_rows
        order = np.argsort(row_of, kind="stable")
        sorted_rows = row_of[order]
        block = max(1, ROW_BLOCK_TOKENS // self.s.seq_len)
        for first in range(0, placed.n_rows, block):
            last = min(first + block, placed.n_rows)
            pick = order[np.searchsorted(sorted_rows, first) : np.searchsorted(sorted_rows, last)]
            yield build_rows(
                tokens, labels, starts[pick], lengths[pick], row_of[pick] - first, placed.offset[pick],
                last - first, self.s.seq_len, self.s.pad_id,
            )


def _has_labels(labels, starts, lengths) -> np.ndarray:
    """Whether each span keeps a learned token once its first token (a segment start) is masked."""
    learned = np.concatenate([[0], np.cumsum(labels != IGNORE_INDEX)])
    return (learned[starts + lengths] - learned[starts + 1]) > 0


def _gather(chunks):
    """One flat token (and label) array for a window, with starts rebased into it."""
    tokens, labels, starts, lengths, ids, base = [], [], [], [], [], 0
    for chunk_tokens, chunk_labels, chunk_starts, chunk_lengths, chunk_ids in chunks:
        lo = int(chunk_starts.min())
        hi = int((chunk_starts + chunk_lengths).max())
        tokens.append(chunk_tokens[lo:hi])
        if chunk_labels is not None:
            labels.append(chunk_labels[lo:hi])
        starts.append(chunk_starts - lo + base)
        lengths.append(chunk_lengths)
        ids.append(chunk_ids)
        base += hi - lo
    return (
        np.concatenate(tokens),
        np.concatenate(labels) if labels else None,
        np.concatenate(starts),
        np.concatenate(lengths),
        np.concatenate(ids),
    )


def window_rng(seed: int, window: int):
    return np.random.default_rng([seed, window])


class ConcatPacker:
    """Joins sequences into one stream and cuts it into rows of exactly seq_len."""

    def __init__(self, settings: PackSettings, counters: Counters, placement: Placement | None):
        self.s, self.counters, self.placement = settings, counters, placement
        self.pending_tokens = np.zeros(0, dtype=np.int32)
        self.pending_labels = None
        self.pending_lengths = np.zeros(0, dtype=np.int64)
        self.pending_ids = np.zeros(0, dtype=np.int64)
        self.rows_out = 0
        shuffle_rows = max(1, min(settings.buffer_size, CONCAT_SHUFFLE_TOKENS // settings.seq_len))
        self.shuffler = RowShuffler(shuffle_rows, settings.seed) if settings.shuffle else None

    def add(self, batch: SequenceBatch, location):
        seq_len = self.s.seq_len
        lengths = batch.lengths
        ids = np.arange(len(lengths), dtype=np.int64) + self.counters.sequences_in
        self.counters.sequences_in += len(lengths)
        self.counters.overlong += int((lengths > seq_len).sum())
        self.counters.unpacked_rows += int(np.ceil(lengths / seq_len).sum())
        tokens = np.concatenate([self.pending_tokens, batch.tokens])
        labels = None
        if batch.labels is not None:
            pending = self.pending_labels if self.pending_labels is not None else self.pending_tokens
            labels = np.concatenate([pending, batch.labels])
        lengths = np.concatenate([self.pending_lengths, lengths])
        ids = np.concatenate([self.pending_ids, ids])
        full_rows = len(tokens) // seq_len
        rows, rest = self._cut(tokens, labels, lengths, ids, full_rows)
        cut = full_rows * seq_len
        self.pending_tokens = tokens[cut:]
        self.pending_labels = labels[cut:] if labels is not None else None
        self.pending_lengths, self.pending_ids = rest
        if rows is not None:
            yield from self._emit(rows)

    def _cut(self, tokens, labels, lengths, ids, n_rows):
        seq_len = self.s.seq_len
        starts = np.cumsum(lengths) - lengths
        piece_start, piece_len, owner = cut_pieces(starts, lengths, seq_len, aligned=True)
        emit = piece_start < n_rows * seq_len
        rows = None
        if n_rows:
            s, n = piece_start[emit], piece_len[emit]
            if self.placement is not None:
                self.placement.add(ids[owner[emit]], s // seq_len + self.rows_out, s % seq_len, n)
            rows = build_rows(tokens, labels, s, n, s // seq_len, s % seq_len, n_rows, seq_len, self.s.pad_id)
            self.rows_out += n_rows
        return rows, (piece_len[~emit], ids[owner[~emit]])

    def _emit(self, rows):
        if self.shuffler is None:
            yield rows
        else:
            yield from self.shuffler.add(rows)

    def finish(self):
        self.counters.remainder_tokens = len(self.pending_tokens)
        if len(self.pending_tokens) and self.s.remainder == "pad":
            rows, _ = self._cut(self.pending_tokens, self.pending_labels, self.pending_lengths, self.pending_ids, 1)
            yield from self._emit(rows)
        if self.shuffler is not None:
            yield from self.shuffler.finish()


class RowShuffler:
    """Permutes rows within consecutive windows of a fixed number of rows."""

    def __init__(self, window_rows: int, seed: int):
        self.window_rows, self.seed = window_rows, seed
        self.blocks, self.count, self.windows = [], 0, 0

    def add(self, rows: Rows):
        self.blocks.append(rows)
        self.count += len(rows)
        while self.count >= self.window_rows:
            block = Rows.concat(self.blocks)
            window, rest = block.slice(0, self.window_rows), block.slice(self.window_rows, len(block))
            self.blocks, self.count = ([rest] if len(rest) else []), len(rest)
            yield self._permute(window)

    def finish(self):
        if self.count:
            block = Rows.concat(self.blocks)
            self.blocks, self.count = [], 0
            yield self._permute(block)

    def _permute(self, rows: Rows) -> Rows:
        order = window_rng(self.seed, self.windows).permutation(len(rows))
        self.windows += 1
        return rows.take(order)


def one_window_bfd_rows(counters: Counters, settings: PackSettings) -> int:
    """Rows best-fit decreasing needs with every sequence in one window: what the windows
    cost. BFD's row count depends only on the multiset of lengths, so the histogram the
    run keeps (bounded memory) is enough."""
    if counters.length_histogram is None:
        return 0
    return bfd_rows_from_counts(counters.length_histogram, settings.seq_len)
