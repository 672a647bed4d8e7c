"""Rows gathered: a plan's pieces read from the spill block by block and laid into rows
by the row kernel, ready for the shard writers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from packcli.core.errors import PackcliError
from packcli.plan.contract import Pieces, Plan, RowOrder
from packcli.plan.rows import RowBuffers, Rows, fill_rows
from packcli.write.spill import Block


class BlockReader(Protocol):
    """Where rows are gathered from: a spill, or the parts of one (the Ray engine)."""

    def read_block(self, starts: np.ndarray, lengths: np.ndarray) -> Block: ...


class PieceTags(Protocol):
    """Per-segment values of the pieces of a block (e.g. `segment_source`): one value per
    piece, the pieces exactly as `plan.pieces(first_row, last_row, order)` returned them.
    Each placed piece becomes one segment of its row, so gather_rows orders them by (row,
    offset) into the rows' `segment_columns`."""

    def __call__(self, plan: Plan, first_row: int, last_row: int, pieces: Pieces) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class SpillRanges:
    """PieceTags for plans whose piece starts are positions in a spill in input order
    (RowPlan, StreamPlan): the value of a piece is the range of `bounds` its start falls
    in. `bounds`: the first spill token of each range (a source of a mixture),
    non-decreasing, the first at or before every start; a range with no tokens ties with
    the next and is never given."""

    name: str
    bounds: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", _ranges(self.name, self.bounds))

    def __call__(self, plan: Plan, first_row: int, last_row: int, pieces: Pieces) -> dict[str, np.ndarray]:
        return {self.name: _range_of(self.name, self.bounds, np.asarray(pieces.start, dtype=np.int64))}


@dataclass(frozen=True)
class RankRanges:
    """PieceTags for a plan of row patterns, whatever its slots are read from (the spill
    through its slot map, its sorted copy, its chunks written by length, the Ray parts): a
    slot's rank says which sequence of its (group, placed length) bucket it takes, in
    input order (PatternPlan.ranks), and where a spill holds one range's segments, then
    the next range's, each bucket's ranks are cut into cells in that order. `bounds`: the
    first rank of each non-empty cell, buckets in the plan's rank order (increasing);
    `values`: each cell's value (its range)."""

    name: str
    bounds: np.ndarray
    values: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", _ranges(self.name, self.bounds))
        object.__setattr__(self, "values", np.asarray(self.values, dtype=np.int32))

    @staticmethod
    def from_cells(name: str, counts: np.ndarray, values: np.ndarray) -> RankRanges:
        """The tagger of cells in the plan's rank order, `counts[i]` sequences of value
        `values[i]` each (empty cells are left out)."""
        counts = np.asarray(counts, dtype=np.int64)
        keep = counts > 0
        counts, values = counts[keep], np.asarray(values)[keep]
        bounds = np.zeros(max(1, len(counts)), dtype=np.int64)
        np.cumsum(counts[:-1], out=bounds[1 : len(counts)])
        return RankRanges(name, bounds, values if len(values) else np.zeros(1, dtype=np.int32))

    def __call__(self, plan: Plan, first_row: int, last_row: int, pieces: Pieces) -> dict[str, np.ndarray]:
        ranks = getattr(plan, "ranks", None)
        if ranks is None:
            raise PackcliError(f"internal: {self.name} by rank needs a plan of row patterns, not {type(plan).__name__}")
        cell = _range_of(self.name, self.bounds, np.asarray(ranks(first_row, last_row), dtype=np.int64))
        found: np.ndarray = self.values[cell]
        return {self.name: found}


def _ranges(name: str, bounds: np.ndarray) -> np.ndarray:
    bounds = np.asarray(bounds, dtype=np.int64)
    if not len(bounds) or (np.diff(bounds) < 0).any():
        raise PackcliError(f"{name}: range bounds must be non-empty and non-decreasing")
    return bounds


def _range_of(name: str, bounds: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The range of `bounds` each position falls in (int32)."""
    if len(at) and int(at.min()) < int(bounds[0]):
        raise PackcliError(f"{name}: a piece starts at {int(at.min())}, before the first range")
    found: np.ndarray = (np.searchsorted(bounds, at, side="right") - 1).astype(np.int32)
    return found


ROW_BLOCK_TOKENS = 1 << 19  # rows are built (and written, on another thread) this many tokens at a time


def gather_rows(
    spill: BlockReader,
    plan: Plan,
    seq_len: int,
    pad_id: int,
    first_row: int = 0,
    multiple: int = 1,
    end_row: int | None = None,
    order: RowOrder = None,
    buffers: RowBuffers | None = None,
    tags: PieceTags | None = None,
) -> Iterator[Rows]:
    """Rows in output order, built from the spill block by block (memory: one block).
    `order`: plan.row_order(), when the caller has it already. `buffers`: each block is
    built in these, over the one before (see RowBuffers). `tags`: the rows' per-segment
    columns, from the plan's pieces."""
    block = max(1, ROW_BLOCK_TOKENS // seq_len)
    end = plan.n_rows if end_row is None else end_row
    if order is None:
        order = plan.row_order()
    for first in range(first_row, end, block):
        last = min(first + block, end)
        pieces = plan.pieces(first, last, order)
        starts, lengths, row_of, offset = pieces
        data = spill.read_block(starts, lengths)
        rows = fill_rows(
            data.tokens,
            data.token_at,
            data.learned,
            data.bit_at,
            lengths,
            row_of,
            offset,
            last - first,
            seq_len,
            pad_id,
            multiple,
            buffers,
        )
        if tags is not None:
            values = tags(plan, first, last, pieces)
            in_rows = np.lexsort((offset, row_of))  # a segment per piece, by row then offset
            rows.segment_columns = {name: np.asarray(v)[in_rows] for name, v in values.items()}
        yield rows
