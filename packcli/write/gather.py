"""Rows gathered: a plan's pieces read from the spill block by block and laid into rows
by the row kernel, ready for the shard writers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np

from packcli.plan.contract import Plan, RowOrder
from packcli.plan.rows import RowBuffers, Rows, fill_rows
from packcli.write.spill import Block


class BlockReader(Protocol):
    """Where rows are gathered from: a spill, or the parts of one (the Ray engine)."""

    def read_block(self, starts: np.ndarray, lengths: np.ndarray) -> Block: ...


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
) -> Iterator[Rows]:
    """Rows in output order, built from the spill block by block (memory: one block).
    `order`: plan.row_order(), when the caller has it already. `buffers`: each block is
    built in these, over the one before (see RowBuffers)."""
    block = max(1, ROW_BLOCK_TOKENS // seq_len)
    end = plan.n_rows if end_row is None else end_row
    if order is None:
        order = plan.row_order()
    for first in range(first_row, end, block):
        last = min(first + block, end)
        starts, lengths, row_of, offset = plan.pieces(first, last, order)
        data = spill.read_block(starts, lengths)
        yield fill_rows(
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
