"""Rows gathered: a plan's pieces read from the spill block by block and laid into rows
by the row kernel, ready for the shard writers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from packcli.core.errors import PackcliError
from packcli.plan.contract import Plan, RowOrder
from packcli.plan.rows import RowBuffers, Rows, fill_rows
from packcli.write.spill import Block


class BlockReader(Protocol):
    """Where rows are gathered from: a spill, or the parts of one (the Ray engine)."""

    def read_block(self, starts: np.ndarray, lengths: np.ndarray) -> Block: ...


class PieceTags(Protocol):
    """Per-segment values of the pieces of a block (e.g. `segment_source`): one value per
    piece, the pieces exactly as `plan.pieces(first, last, order)` returned them for output
    rows [first, last) (`row_of` relative to `first_row`). Each placed piece becomes one
    segment of its row, so gather_rows orders them by (row, offset) into the rows'
    `segment_columns`."""

    def __call__(
        self,
        plan: Plan,
        first_row: int,
        starts: np.ndarray,
        lengths: np.ndarray,
        row_of: np.ndarray,
        offset: np.ndarray,
    ) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class SpillRanges:
    """PieceTags for plans whose piece starts are positions in a spill in input order
    (RowPlan, StreamPlan, a PatternPlan with its slot map): the value of a piece is the
    range of `bounds` its start falls in. `bounds`: the first spill token of each range
    (a source of a mixture), non-decreasing, the first at or before every start; a range
    with no tokens ties with the next and is never given."""

    name: str
    bounds: np.ndarray

    def __post_init__(self) -> None:
        bounds = np.asarray(self.bounds, dtype=np.int64)
        if not len(bounds) or (np.diff(bounds) < 0).any():
            raise PackcliError(f"{self.name}: range bounds must be non-empty and non-decreasing")
        object.__setattr__(self, "bounds", bounds)

    def __call__(
        self,
        plan: Plan,
        first_row: int,
        starts: np.ndarray,
        lengths: np.ndarray,
        row_of: np.ndarray,
        offset: np.ndarray,
    ) -> dict[str, np.ndarray]:
        starts = np.asarray(starts, dtype=np.int64)
        if len(starts) and int(starts.min()) < int(self.bounds[0]):
            raise PackcliError(f"{self.name}: a piece starts at {int(starts.min())}, before the first range")
        return {self.name: (np.searchsorted(self.bounds, starts, side="right") - 1).astype(np.int32)}


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
        starts, lengths, row_of, offset = plan.pieces(first, last, order)
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
            values = tags(plan, first, starts, lengths, row_of, offset)
            in_rows = np.lexsort((offset, row_of))  # a segment per piece, by row then offset
            rows.segment_columns = {name: np.asarray(v)[in_rows] for name, v in values.items()}
        yield rows
