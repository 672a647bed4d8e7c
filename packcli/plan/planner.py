"""The plan: segment lengths in, the rows they make out (write/gather.py gathers them).

A plan is a plain value computed from the lengths alone, so any executor can compute it
and hand out ranges of rows to gather; every kind holds to contract.Plan, answering
`pieces(first, last)` (where each piece of output rows [first, last) is read, its
length, row and offset). Bin mode
with bfd, spfhp or lpfhp plans from the length histogram (patterns.py: row patterns
and a slot rule); the packers that decide per sequence keep a RowPlan (arrays per piece);
concat mode cuts the joined stream at multiples of `seq_len` (stream.py: nothing per
piece). Shuffling permutes whole rows by a seeded bijection (permute.py), by the seed and
window alone. Same lengths and settings, same plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from packcli.plan.contract import Pieces, Plan, RowOrder
from packcli.plan.grouping import group_slices
from packcli.plan.kernels.pack import plan_lengths
from packcli.plan.patterns import PATTERN_ALGORITHMS, PatternPlan, pattern_plan
from packcli.plan.permute import RowPermutation
from packcli.plan.rows import padded_lengths
from packcli.plan.settings import PlanSettings
from packcli.plan.strategy import Strategy, is_custom, place_custom
from packcli.plan.stream import StreamPlan, grouped_stream_plan, stream_plan


@dataclass
class RowPlan:
    """Where each placed piece goes, one entry per piece: the plan of the packers that
    decide per sequence (nf, ff, ffd, capped bfd, a user strategy) and of the library's
    windows. `piece_start` indexes the spill's tokens; `source` is the spill segment."""

    piece_start: np.ndarray  # int64
    piece_len: np.ndarray  # int64
    source: np.ndarray  # int64
    row: np.ndarray  # int64, the output row (after shuffling)
    offset: np.ndarray  # int64, inside the row
    n_rows: int
    seq_len: int
    multiple: int = 1  # --pad-to-multiple-of: each piece takes its length rounded up to it
    remainder_tokens: int = 0  # concat: tokens of the last, partial row (padded or dropped)
    row_group: np.ndarray | None = None  # int32 per output row: its --group-by group id

    def row_order(self) -> tuple[np.ndarray, np.ndarray]:
        """(pieces sorted by row, stable; their rows): what `pieces` searches."""
        order = np.argsort(self.row, kind="stable")
        return order, self.row[order]

    def placed_histogram(self) -> np.ndarray:
        """Pieces per placed length 0..seq_len: the room each took (what the report's window cost needs)."""
        seq_len = self.seq_len
        return np.bincount(padded_lengths(self.piece_len, self.multiple), minlength=seq_len + 1)[: seq_len + 1]

    def pieces(self, first: int, last: int, order: RowOrder = None) -> Pieces:
        """The pieces of output rows [first, last), read from the spill, by row."""
        pieces, sorted_rows = order if order is not None else self.row_order()
        lo, hi = np.searchsorted(sorted_rows, [first, last])
        pick = pieces[lo:hi]
        return Pieces(self.piece_start[pick], self.piece_len[pick], self.row[pick] - first, self.offset[pick])


if TYPE_CHECKING:
    # The kinds of plan, each held to contract.Plan: bin mode with bfd, spfhp or lpfhp plans
    # patterns from the histogram; other bin plans (nf, ff, ffd, a cap on bfd, a user
    # strategy, the library's windows) keep arrays per piece; concat cuts stream ranges.
    _KINDS: tuple[type[Plan], ...] = (RowPlan, PatternPlan, StreamPlan)


def plan_rows(lengths: np.ndarray, settings: PlanSettings, groups: np.ndarray | None = None) -> Plan:
    """The whole plan at once. `groups`: one group id per segment (--group-by), or None."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if settings.mode == "bin":
        if from_counts(settings.algorithm, settings.max_per_row):
            if settings.buffer_size is None:
                return _plan_patterns(lengths, settings, 0, groups)
            return _windows_of_patterns(lengths, settings, groups)
        starts = np.cumsum(lengths) - lengths
        return _plan_bin(starts, lengths, settings, groups=groups)
    if groups is not None:
        return _plan_concat_grouped(lengths, settings, groups)
    n_rows = stream_plan(lengths, settings.seq_len, True, settings.remainder).n_rows
    ends = _concat_window_ends(lengths, settings, n_rows)
    return stream_plan(
        lengths,
        settings.seq_len,
        True,
        settings.remainder,
        shuffle=settings.shuffle,
        seed=settings.seed,
        window_ends=ends,
    )


def _concat_window_ends(lengths: np.ndarray, s: PlanSettings, n_rows: int) -> list[int]:
    """Where the rows of each window end, as `packcli pack` writes them: a window closes
    after exactly `window` segments, with the full rows of the stream so far; the last
    window takes the rest."""
    if s.buffer_size is None:
        return [n_rows]
    closed = np.cumsum(lengths)[s.buffer_size - 1 :: s.buffer_size] // s.seq_len
    return [*closed.tolist(), n_rows]  # the last window may be empty: permuting it is a no-op


def _plan_bin(
    starts: np.ndarray, lengths: np.ndarray, s: PlanSettings, first_window: int = 0, groups: np.ndarray | None = None
) -> RowPlan:
    rows, offsets, row_groups, base = [], [], [], 0
    for window, (row_of, offset, n_rows, row_group) in enumerate(_placed_windows(lengths, s, groups), first_window):
        if s.shuffle:
            row_of, row_group = _shuffled(row_of, row_group, n_rows, s.seed, window)
        rows.append(row_of + base)
        offsets.append(offset)
        if row_group is not None:
            row_groups.append(row_group)
        base += n_rows
    empty = np.zeros(0, dtype=np.int64)
    return RowPlan(
        piece_start=starts,
        piece_len=lengths,
        source=np.arange(len(lengths), dtype=np.int64),
        row=np.concatenate(rows) if rows else empty,
        offset=np.concatenate(offsets) if offsets else empty,
        n_rows=base,
        seq_len=s.seq_len,
        multiple=s.multiple,
        row_group=None if groups is None else _joined_groups(row_groups),
    )


def _placed_windows(
    lengths: np.ndarray, s: PlanSettings, groups: np.ndarray | None
) -> Iterator[tuple[np.ndarray, np.ndarray, int, np.ndarray | None]]:
    """`place` on each window of `--buffer-size` segments (one window without it)."""
    size = s.buffer_size or max(1, len(lengths))
    for first in range(0, len(lengths), size):
        part = None if groups is None else groups[first : first + size]
        yield place(padded_lengths(lengths[first : first + size], s.multiple), s, part)


def _shuffled(
    row: np.ndarray, row_group: np.ndarray | None, n_rows: int, seed: int, window: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """A window's rows renumbered by its seeded bijection; each row's group moves with it."""
    permutation = RowPermutation(n_rows, seed, window).table()
    if row_group is not None:
        moved = np.empty_like(row_group)
        moved[permutation] = row_group
        row_group = moved
    return permutation[row], row_group


def _joined_groups(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, dtype=np.int32)


def place(
    lengths: np.ndarray, s: PlanSettings, groups: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None]:
    """(row, offset, rows, group of each row or None) of one window: a user strategy, the
    chosen packer over all segments, or the packer over each group on its own (rows of
    group 0 first, then group 1, ...)."""
    if is_custom(s.algorithm):
        return place_custom(s.algorithm, lengths, s.seq_len, groups, s.max_per_row)
    algorithm = str(s.algorithm)
    if groups is None:
        placed = plan_lengths(lengths, s.seq_len, algorithm, s.seed, s.max_per_row)
        return placed.row.astype(np.int64), placed.offset.astype(np.int64), placed.n_rows, None
    row = np.empty(len(lengths), dtype=np.int64)
    offset = np.empty(len(lengths), dtype=np.int64)
    row_group, base = [], 0
    for group, members in group_slices(groups):
        placed = plan_lengths(lengths[members], s.seq_len, algorithm, s.seed, s.max_per_row)
        row[members] = placed.row + base  # int64 + int32: no wrap
        offset[members] = placed.offset
        row_group.append(np.full(placed.n_rows, group, dtype=np.int32))
        base += placed.n_rows
    return row, offset, base, _joined_groups(row_group)


def uncapped_rows(lengths: np.ndarray, settings: PlanSettings, groups: np.ndarray | None = None) -> int:
    """Rows the plan of these lengths needs without --max-sequences-per-row: what the cap
    costs is reported against it (planning alone is cheap). 0 for a user strategy."""
    if is_custom(settings.algorithm):
        return 0
    s = PlanSettings(**{**settings.__dict__, "max_per_row": None})
    return sum(n_rows for _, _, n_rows, _ in _placed_windows(np.asarray(lengths, dtype=np.int64), s, groups))


def plan_window(
    lengths: np.ndarray,
    settings: PlanSettings,
    window: int,
    final: bool,
    groups: np.ndarray | None = None,
    by_bucket: bool = False,
) -> Plan:
    """Window number `window` of a run that spills and writes window by window. In concat
    mode a window that is not the last plans only its full rows: the caller carries the
    tail on. `groups`: the window's group id per segment (--group-by; concat only with one
    window). `by_bucket`: a plan from counts finds its slots by bucket (in the spill's
    sorted copy: patterns.pattern_plan), not through a slot map."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if settings.mode == "concat":
        if groups is not None:
            return _plan_concat_grouped(lengths, settings, groups)
        s = settings
        return stream_plan(lengths, s.seq_len, final, s.remainder, shuffle=s.shuffle, seed=s.seed, window=window)
    if from_counts(settings.algorithm, settings.max_per_row):
        return _plan_patterns(lengths, settings, window, groups, by_bucket)
    starts = np.cumsum(lengths) - lengths
    return _plan_bin(starts, lengths, PlanSettings(**{**settings.__dict__, "buffer_size": None}), window, groups)


def from_counts(algorithm: str | Strategy, max_per_row: int | None) -> bool:
    """Whether bin mode plans from counts (patterns.py: row patterns from the length
    histogram) with this packer and --max-sequences-per-row: bfd, spfhp and lpfhp decide
    from the counts of each length alone; capped bfd places one sequence at a time."""
    if is_custom(algorithm) or str(algorithm) not in PATTERN_ALGORITHMS:
        return False
    return max_per_row is None or algorithm != "bfd"


def _windows_of_patterns(lengths: np.ndarray, s: PlanSettings, groups: np.ndarray | None) -> RowPlan:
    """The library's `buffer_size`: each window planned as `pack` plans it (its own
    patterns and shuffle), laid out as one RowPlan (the library holds everything anyway)."""
    size = s.buffer_size or max(1, len(lengths))
    starts = np.cumsum(lengths) - lengths
    parts: list[dict[str, np.ndarray]] = []
    row_groups, base = [], 0
    for window, first in enumerate(range(0, len(lengths), size)):
        own = lengths[first : first + size]
        plan = _plan_patterns(own, s, window, None if groups is None else groups[first : first + size])
        placed = plan.placement(np.cumsum(own) - own)
        parts.append({"source": placed["source"] + first, "row": placed["row"] + base, "offset": placed["offset"]})
        if plan.row_group is not None:
            row_groups.append(plan.row_group)
        base += plan.n_rows
    empty = np.zeros(0, dtype=np.int64)
    column = {k: np.concatenate([p[k] for p in parts]) if parts else empty for k in ("source", "row", "offset")}
    return RowPlan(
        piece_start=starts[column["source"]],
        piece_len=lengths[column["source"]],
        source=column["source"],
        row=column["row"],
        offset=column["offset"],
        n_rows=base,
        seq_len=s.seq_len,
        multiple=s.multiple,
        row_group=None if groups is None else _joined_groups(row_groups),
    )


def _plan_patterns(
    lengths: np.ndarray, s: PlanSettings, window: int, groups: np.ndarray | None, by_bucket: bool = False
) -> PatternPlan:
    algorithm = str(s.algorithm)
    return pattern_plan(
        lengths,
        s.seq_len,
        algorithm,
        multiple=s.multiple,
        cap=s.max_per_row,
        groups=groups,
        shuffle=s.shuffle,
        seed=s.seed,
        window=window,
        by_bucket=by_bucket,
    )


def _plan_concat_grouped(lengths: np.ndarray, s: PlanSettings, groups: np.ndarray) -> StreamPlan:
    """Concat mode, each group its own stream: its segments joined in input order and cut
    into rows, its last partial row padded or dropped on its own."""
    slices = list(group_slices(groups))
    return grouped_stream_plan(lengths, s.seq_len, s.remainder, slices, shuffle=s.shuffle, seed=s.seed)
