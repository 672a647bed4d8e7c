"""The plan: segment lengths in, the row and offset of every segment out.

A plan is a plain value computed from the lengths alone (a few bytes per segment), so
any executor can compute it and hand out ranges of rows to gather. Bin mode packs all
segments at once with the chosen kernel (or in windows of `--buffer-size` segments);
concat mode cuts the joined stream at multiples of `seq_len`. Shuffling permutes whole
rows, by the seed alone. Same lengths and settings, same plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from packcli.kernels import plan_lengths
from packcli.rows import Rows, cut_pieces, fill_rows

if TYPE_CHECKING:
    from packcli.spill import Spill

ROW_BLOCK_TOKENS = 1 << 20  # rows are built (and written, on another thread) this many tokens at a time


@dataclass(frozen=True)
class PlanSettings:
    seq_len: int
    mode: str = "bin"
    algorithm: str = "bfd"
    remainder: str = "pad"
    window: int | None = None  # --buffer-size: segments per window; None plans them all at once
    shuffle: bool = False
    seed: int = 0


@dataclass
class RowPlan:
    """Where each placed piece goes. `piece_start` indexes the spill's tokens; `source` is
    the spill segment the piece comes from (concat pieces are parts of segments)."""

    piece_start: np.ndarray  # int64
    piece_len: np.ndarray  # int64
    source: np.ndarray  # int64
    row: np.ndarray  # int64, the output row (after shuffling)
    offset: np.ndarray  # int64, inside the row
    n_rows: int
    remainder_tokens: int = 0  # concat: tokens of the last, partial row (padded or dropped)

    def row_blocks(self, block_rows: int, first_row: int = 0) -> Iterator[tuple[int, int, np.ndarray]]:
        """(first row, end row, indices of the pieces in those rows) for consecutive blocks."""
        order = np.argsort(self.row, kind="stable")
        sorted_rows = self.row[order]
        for first in range(first_row, self.n_rows, block_rows):
            last = min(first + block_rows, self.n_rows)
            lo, hi = np.searchsorted(sorted_rows, [first, last])
            yield first, last, order[lo:hi]


def window_rng(seed: int, window: int) -> np.random.Generator:
    return np.random.default_rng([seed, window])


def plan_rows(lengths: np.ndarray, settings: PlanSettings) -> RowPlan:
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    if settings.mode == "bin":
        return _plan_bin(starts, lengths, settings)
    plan = _plan_concat(starts, lengths, PlanSettings(**{**settings.__dict__, "shuffle": False}), final=True)
    if settings.shuffle:
        plan.row = _permute_within(plan.row, _concat_window_ends(lengths, settings, plan.n_rows), settings.seed)
    return plan


def _concat_window_ends(lengths: np.ndarray, s: PlanSettings, n_rows: int) -> list[int]:
    """Where the rows of each window end, as `packcli pack` writes them: a window closes
    after exactly `window` segments, with the full rows of the stream so far; the last
    window takes the rest."""
    if s.window is None:
        return [n_rows]
    closed = np.cumsum(lengths)[s.window - 1 :: s.window] // s.seq_len
    return [*closed.tolist(), n_rows]  # the last window may be empty: permuting it is a no-op


def _permute_within(row: np.ndarray, window_ends: list[int], seed: int, first_window: int = 0) -> np.ndarray:
    """Rows permuted inside each window (window w: rows up to window_ends[w]) by its own rng."""
    mapping = np.arange(window_ends[-1], dtype=np.int64)
    begin = 0
    for window, end in enumerate(window_ends, first_window):
        mapping[begin:end] = begin + window_rng(seed, window).permutation(end - begin)
        begin = end
    permuted: np.ndarray = mapping[row]
    return permuted


def _plan_bin(starts: np.ndarray, lengths: np.ndarray, s: PlanSettings, first_window: int = 0) -> RowPlan:
    size = s.window or max(1, len(lengths))
    rows, offsets, base = [], [], 0
    for window, first in enumerate(range(0, len(lengths), size), first_window):
        placed = plan_lengths(lengths[first : first + size], s.seq_len, algorithm=s.algorithm, seed=s.seed)
        row_of = placed.row.astype(np.int64)  # the base is added below: no int32 wrap
        if s.shuffle:
            row_of = window_rng(s.seed, window).permutation(placed.n_rows)[row_of]
        rows.append(row_of + base)
        offsets.append(placed.offset.astype(np.int64))
        base += placed.n_rows
    empty = np.zeros(0, dtype=np.int64)
    return RowPlan(
        piece_start=starts,
        piece_len=lengths,
        source=np.arange(len(lengths), dtype=np.int64),
        row=np.concatenate(rows) if rows else empty,
        offset=np.concatenate(offsets) if offsets else empty,
        n_rows=base,
    )


def _plan_concat(starts: np.ndarray, lengths: np.ndarray, s: PlanSettings, final: bool, window: int = 0) -> RowPlan:
    """Rows of exactly seq_len cut from the joined stream. `final=False` plans only the full
    rows (a window whose tail goes on into the next one)."""
    seq_len = s.seq_len
    total = int(lengths.sum())
    full = total // seq_len
    remainder = total - full * seq_len
    piece_start, piece_len, source = cut_pieces(starts, lengths, seq_len, aligned=True)
    keep_partial = final and remainder and s.remainder == "pad"
    n_rows = full + (1 if keep_partial else 0)
    if n_rows * seq_len < total:
        kept = piece_start < full * seq_len
        piece_start, piece_len, source = piece_start[kept], piece_len[kept], source[kept]
    row = piece_start // seq_len
    if s.shuffle:
        row = _permute_within(row, [n_rows], s.seed, window)
    return RowPlan(piece_start, piece_len, source, row, piece_start % seq_len, n_rows, remainder if final else 0)


def plan_window(lengths: np.ndarray, settings: PlanSettings, index: int, final: bool) -> RowPlan:
    """Window `index` of a run that spills and writes window by window. In concat mode a
    window that is not the last plans only its full rows: the caller carries the tail on."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    if settings.mode == "concat":
        return _plan_concat(starts, lengths, settings, final, index)
    return _plan_bin(starts, lengths, PlanSettings(**{**settings.__dict__, "window": None}), index)


def gather_rows(spill: Spill, plan: RowPlan, seq_len: int, pad_id: int, first_row: int = 0) -> Iterator[Rows]:
    """Rows in output order, built from the spill block by block (memory: one block)."""
    block = max(1, ROW_BLOCK_TOKENS // seq_len)
    for first, last, pick in plan.row_blocks(block, first_row):
        lengths = plan.piece_len[pick]
        data = spill.read_block(plan.piece_start[pick], lengths)
        yield fill_rows(
            data.tokens,
            data.token_at,
            data.learned,
            data.bit_at,
            lengths,
            plan.row[pick] - first,
            plan.offset[pick],
            last - first,
            seq_len,
            pad_id,
        )
