"""What every plan answers, whatever its kind: the contract the engines and the gather hold to.

Three kinds satisfy it: RowPlan (planner.py: arrays per placed piece), PatternPlan
(patterns.py: row patterns and the slot rule) and StreamPlan (stream.py: rows cut from
joined streams). A plan is a plain value computed from the lengths alone; its rows are
found by range (`pieces(first, last)`), so any executor can hand out ranges of rows to
gather. The gather and the engines need nothing else of a plan: only the readers that
place a PatternPlan's slots (write/by_length.py, the Ray engine's parts) look at where
they are found (its `lookup`), and only the library lists the pieces each kind keeps.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

# What a plan searches to find a range of rows' pieces, worked out once and kept by the
# caller for every range: RowPlan's pieces sorted by row; None for the kinds that find
# them by arithmetic (PatternPlan, StreamPlan).
RowOrder = tuple[np.ndarray, np.ndarray] | None


class Pieces(NamedTuple):
    """The pieces of a range of output rows: where each is read, how many real tokens it
    has, and where it goes (its row, counted from the range's first, and its offset in
    the row). Any order: the row kernel places each piece by its row and offset."""

    start: np.ndarray  # int64: its first token where its reader reads it (a spill, its sorted copy or parts)
    length: np.ndarray  # int64: real tokens
    row: np.ndarray  # int64: output row - the range's first row
    offset: np.ndarray  # int64: position in the row


@runtime_checkable
class Plan(Protocol):
    """A plan of rows (see the module docstring)."""

    row_group: np.ndarray | None  # int32 per output row: its --group-by group id (None without --group-by)
    remainder_tokens: int  # concat: tokens of the last, partial row (padded or dropped); 0 in bin mode

    @property
    def n_rows(self) -> int:
        """Output rows."""
        ...

    def row_order(self) -> RowOrder:
        """What `pieces` searches, worked out once for any number of ranges."""
        ...

    def pieces(self, first: int, last: int, order: RowOrder = None) -> Pieces:
        """The pieces of output rows [first, last). `order`: row_order()'s (None: the kinds
        that need one work it out here)."""
        ...

    def placed_histogram(self) -> np.ndarray | None:
        """Pieces per placed length 0..seq_len (the room each takes in its row), for the
        report's window cost; None where rows are cut from a stream, not packed."""
        ...
