"""Concat mode's plan: rows are ranges of a joined stream, nothing kept per piece.

Plan row r of a stream is its tokens [r * seq_len, (r + 1) * seq_len) (the last row cut
at the stream's planned end). The pieces of a row (the parts of the segments it
overlaps) are found when the row is gathered, by binary search on the segments'
cumulative ends, so the plan holds one int64 per segment (those ends) and a few integers
per stream; there is no array per piece or per row order. With `--group-by` each group
is a stream of its own (its segments joined in input order, rows of group 0 first), and
each segment's place in the spill is kept beside its end. Shuffled rows are a seeded
bijection of each window's rows (permute.py), inverted per output row.

The pieces, rows and offsets are exactly those of cutting every stream at multiples of
`seq_len` (rows.cut_pieces with aligned=True), which is what plan.RowPlan held.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from packcli.plan.contract import Pieces, RowOrder
from packcli.plan.layouts import within
from packcli.plan.permute import RowPermutation


@dataclass
class StreamPlan:
    """Rows cut from one or more streams of segments (see the module docstring)."""

    seq_len: int
    ends: np.ndarray  # int64 per segment: its end in its stream (streams concatenated)
    stream_first: np.ndarray  # int64 [streams + 1]: where each stream's segments begin in `ends`
    stream_rows: np.ndarray  # int64 [streams + 1]: the plan row each stream's rows begin at
    stream_limit: np.ndarray  # int64 [streams]: tokens of each stream that its rows hold
    spill_start: np.ndarray | None = None  # int64 per segment: its first token in the spill; None: = stream
    source: np.ndarray | None = None  # int64 per segment: its index in the spill; None: = its index here
    window_ends: list[int] = field(default_factory=list)  # shuffled: plan rows where each window ends
    first_window: int = 0  # the window index of window_ends[0] (the shuffle's key)
    seed: int = 0
    shuffle: bool = False
    remainder_tokens: int = 0
    row_group: np.ndarray | None = None  # int32 per output row (--group-by)
    sparse: SparseEnds | None = None  # one stream whose ends are on disk (`ends` then empty)

    @property
    def n_rows(self) -> int:
        return int(self.stream_rows[-1])

    def row_order(self) -> RowOrder:
        """Nothing to work out: rows are found by search (RowPlan's takes an argsort)."""
        return None

    def placed_histogram(self) -> None:
        """None: a stream is cut into rows, not packed; it has no placed lengths to count."""
        return None

    def plan_rows_of(self, output_rows: np.ndarray) -> np.ndarray:
        """The plan row each output row comes from (the shuffle's inverse, window by window)."""
        return self._windowed(output_rows, forward=False)

    def output_rows_of(self, plan_rows: np.ndarray) -> np.ndarray:
        """The output row of each plan row (the shuffle, window by window)."""
        return self._windowed(plan_rows, forward=True)

    def _windowed(self, rows: np.ndarray, forward: bool) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        if not self.shuffle or not len(rows):
            return rows.copy()
        out = np.empty_like(rows)
        begin = 0
        for window, end in enumerate(self.window_ends, self.first_window):
            inside = (rows >= begin) & (rows < end)
            if inside.any():
                permutation = RowPermutation(end - begin, self.seed, window)
                mapped = permutation.forward if forward else permutation.inverse
                out[inside] = begin + mapped(rows[inside] - begin)
            begin = end
        return out

    def pieces(self, first: int, last: int, order: RowOrder = None) -> Pieces:
        """The pieces of output rows [first, last), read from the spill, by row then offset
        (`order` is row_order()'s: None)."""
        _, start, length, row, offset = self.pieces_with_source(first, last)
        return Pieces(start, length, row - first, offset)

    def pieces_with_source(self, first: int, last: int) -> tuple[np.ndarray, ...]:
        """(spill segment, spill start, length, output row, offset) of the pieces of output rows
        [first, last), by output row, then offset."""
        output_rows = np.arange(first, last, dtype=np.int64)
        plan_rows = self.plan_rows_of(output_rows)
        if self.sparse is not None:
            lo = plan_rows * self.seq_len
            hi = np.minimum(lo + self.seq_len, self.stream_limit[0])
            return self.sparse.pieces(lo, hi, output_rows)
        stream = np.searchsorted(self.stream_rows, plan_rows, side="right") - 1
        local = plan_rows - self.stream_rows[stream]
        lo = local * self.seq_len
        hi = np.minimum(lo + self.seq_len, self.stream_limit[stream])
        base = self.stream_first[stream]
        stream_ends = self.ends
        # within each stream, ends are increasing: search the stream's slice by offsetting
        # the query by its first segment (ends of earlier streams are searched past).
        first_seg = _search_in_streams(stream_ends, self.stream_first, stream, lo)
        last_seg = _search_in_streams(stream_ends, self.stream_first, stream, hi - 1)
        counts = last_seg - first_seg + 1
        owner = np.repeat(np.arange(len(output_rows)), counts)
        segment = first_seg[owner] + within(counts)
        seg_end = stream_ends[segment]
        is_first_of_stream = segment == base[owner]
        seg_begin = np.where(is_first_of_stream, 0, stream_ends[np.maximum(segment - 1, 0)])
        piece_begin = np.maximum(seg_begin, lo[owner])
        piece_end = np.minimum(seg_end, hi[owner])
        spill = piece_begin if self.spill_start is None else self.spill_start[segment] + (piece_begin - seg_begin)
        source = segment if self.source is None else self.source[segment]
        return source, spill, piece_end - piece_begin, output_rows[owner], piece_begin - lo[owner]

    def placement(self) -> dict[str, np.ndarray]:
        """Every piece as plan.RowPlan lists them (streams in order, each in stream order):
        `source` (spill segment), `row` (output row), `offset`, `length`. For the library,
        which returns it; O(pieces)."""
        source, _, length, row, offset = self.pieces_with_source(0, self.n_rows)
        order = np.lexsort((offset, self.plan_rows_of(row)))
        return {"source": source[order], "row": row[order], "offset": offset[order], "length": length[order]}


@dataclass
class SparseEnds:
    """The cumulative ends of one stream's segments with one in K held in memory (the end
    of each block of K segments) and the lengths read from disk for the blocks a set of
    rows needs: memory flat in the number of segments. `read(first, count)`: the lengths
    of segments [first, first + count)."""

    block_end: np.ndarray  # int64 per block of K segments: the end of its last segment
    n_segments: int
    k: int
    read: Callable[[int, int], np.ndarray]

    @staticmethod
    def build(batches: Iterable[np.ndarray], k: int, read: Callable[[int, int], np.ndarray]) -> SparseEnds:
        """From the lengths in order, a batch at a time (batch sizes multiples of k, but the last)."""
        ends, total, n = [], 0, 0
        for lengths in batches:
            cumulative = np.cumsum(lengths) + total
            ends.append(cumulative[k - 1 :: k].copy())  # copies: a view would keep the whole batch
            if len(lengths) % k:
                ends.append(cumulative[-1:].copy())
            total = int(cumulative[-1]) if len(cumulative) else total
            n += len(lengths)
        block_end = np.concatenate(ends) if ends else np.zeros(0, dtype=np.int64)
        return SparseEnds(block_end.astype(np.int64), n, k, read)

    def pieces(self, lo: np.ndarray, hi: np.ndarray, output_rows: np.ndarray) -> tuple[np.ndarray, ...]:
        """StreamPlan.pieces_with_source for rows holding tokens [lo, hi) of the stream."""
        k = self.k
        if not len(lo):
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty, empty, empty
        b_lo = np.searchsorted(self.block_end, lo, side="right")
        b_hi = np.searchsorted(self.block_end, hi - 1, side="right")
        spans = b_hi - b_lo + 1
        blocks = np.unique(np.repeat(b_lo, spans) + within(spans))
        ends_parts, index_parts = [], []
        for b in blocks.tolist():
            first = b * k
            lengths = self.read(first, min(k, self.n_segments - first))
            before = int(self.block_end[b - 1]) if b else 0
            ends_parts.append(np.cumsum(lengths) + before)
            index_parts.append(np.arange(first, first + len(lengths), dtype=np.int64))
        ends = np.concatenate(ends_parts)
        index = np.concatenate(index_parts)
        begins = np.empty_like(ends)
        begins[1:] = ends[:-1]
        starts_block = (index % k) == 0  # the first segment of a block starts where the block before ended
        begins[starts_block] = np.where(index[starts_block] == 0, 0, self.block_end[index[starts_block] // k - 1])
        first_seg = np.searchsorted(ends, lo, side="right")
        last_seg = np.searchsorted(ends, hi - 1, side="right")
        counts = last_seg - first_seg + 1
        owner = np.repeat(np.arange(len(lo)), counts)
        at = first_seg[owner] + within(counts)
        piece_begin = np.maximum(begins[at], lo[owner])
        piece_end = np.minimum(ends[at], hi[owner])
        return index[at], piece_begin, piece_end - piece_begin, output_rows[owner], piece_begin - lo[owner]


def sparse_stream_plan(
    ends: SparseEnds,
    tokens: int,
    seq_len: int,
    remainder: str,
    *,
    shuffle: bool = False,
    seed: int = 0,
) -> StreamPlan:
    """stream_plan of a whole input (one window, final) whose segment ends are `ends`."""
    full, rest = divmod(tokens, seq_len)
    n_rows = full + (1 if rest and remainder == "pad" else 0)
    return StreamPlan(
        seq_len=seq_len,
        ends=np.zeros(0, dtype=np.int64),
        stream_first=np.array([0, ends.n_segments], dtype=np.int64),
        stream_rows=np.array([0, n_rows], dtype=np.int64),
        stream_limit=np.array([min(tokens, n_rows * seq_len)], dtype=np.int64),
        window_ends=[n_rows],
        seed=seed,
        shuffle=shuffle,
        remainder_tokens=rest,
        sparse=ends,
    )


def _search_in_streams(ends: np.ndarray, stream_first: np.ndarray, stream: np.ndarray, token: np.ndarray) -> np.ndarray:
    """The segment of each stream holding its token `token` (the first whose end is past it)."""
    found = np.empty(len(token), dtype=np.int64)
    for s in np.unique(stream):
        mask = stream == s
        begin, end = int(stream_first[s]), int(stream_first[s + 1])
        found[mask] = begin + np.searchsorted(ends[begin:end], token[mask], side="right")
    return found


def stream_plan(
    lengths: np.ndarray,
    seq_len: int,
    final: bool,
    remainder: str,
    *,
    shuffle: bool = False,
    seed: int = 0,
    window: int = 0,
    window_ends: list[int] | None = None,
) -> StreamPlan:
    """One stream: the segments in spill order. `final=False` keeps only full rows (a
    window whose tail goes on into the next one); the last partial row is kept with
    remainder "pad". `window_ends`: plan rows where each shuffle window ends (default one
    window of every row, numbered `window`)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    full, rest = divmod(total, seq_len)
    n_rows = full + (1 if final and rest and remainder == "pad" else 0)
    return StreamPlan(
        seq_len=seq_len,
        ends=ends,
        stream_first=np.array([0, len(ends)], dtype=np.int64),
        stream_rows=np.array([0, n_rows], dtype=np.int64),
        stream_limit=np.array([min(total, n_rows * seq_len)], dtype=np.int64),
        window_ends=[n_rows] if window_ends is None else window_ends,
        first_window=window,
        seed=seed,
        shuffle=shuffle,
        remainder_tokens=rest if final else 0,
    )


def grouped_stream_plan(
    lengths: np.ndarray,
    seq_len: int,
    remainder: str,
    slices: list[tuple[int, np.ndarray]],
    *,
    shuffle: bool = False,
    seed: int = 0,
) -> StreamPlan:
    """Each group a stream of its own (`slices`: group id and its segments, in id order),
    its last partial row padded or dropped on its own; one shuffle over all rows."""
    lengths = np.asarray(lengths, dtype=np.int64)
    spill_starts = np.cumsum(lengths) - lengths
    ends_parts, spill_parts, firsts, rows, limits, row_groups = [], [], [0], [0], [], []
    remainder_tokens = 0
    for group, members in slices:
        own = lengths[members]
        ends = np.cumsum(own)
        total = int(ends[-1]) if len(ends) else 0
        full, rest = divmod(total, seq_len)
        n_rows = full + (1 if rest and remainder == "pad" else 0)
        ends_parts.append(ends)
        spill_parts.append(spill_starts[members])
        firsts.append(firsts[-1] + len(ends))
        rows.append(rows[-1] + n_rows)
        limits.append(min(total, n_rows * seq_len))
        row_groups.append(np.full(n_rows, group, dtype=np.int32))
        remainder_tokens += rest
    empty = np.zeros(0, dtype=np.int64)
    plan = StreamPlan(
        seq_len=seq_len,
        ends=np.concatenate(ends_parts) if ends_parts else empty,
        stream_first=np.array(firsts, dtype=np.int64),
        stream_rows=np.array(rows, dtype=np.int64),
        stream_limit=np.array(limits, dtype=np.int64),
        spill_start=np.concatenate(spill_parts) if spill_parts else empty,
        source=np.concatenate([members for _, members in slices]).astype(np.int64) if slices else empty,
        window_ends=[rows[-1]],
        seed=seed,
        shuffle=shuffle,
        remainder_tokens=remainder_tokens,
    )
    in_plan_order = np.concatenate(row_groups) if row_groups else np.zeros(0, dtype=np.int32)
    plan.row_group = np.empty_like(in_plan_order)
    plan.row_group[plan.output_rows_of(np.arange(plan.n_rows))] = in_plan_order
    return plan
