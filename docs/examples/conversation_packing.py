"""A packing strategy for `packcli pack --algorithm conversation_packing:pack`.

Each record is one turn of a conversation, with the conversation's id in a field, and
`--group-by` that field: no row then holds turns of two conversations. Inside a
conversation this strategy keeps the turns in their order and fills rows one after the
other (next fit), so a model sees a conversation's turns together and in sequence; the
built-in packers would reorder them by length.

    packcli pack turns.jsonl -o out --tokenizer packcli:demo --seq-len 2048 \\
        --group-by conversation_id --algorithm conversation_packing:pack

packcli imports the module from the current directory (or an installed package), calls
`pack(lengths, capacity, groups)` and checks the rows before writing anything.
"""

from __future__ import annotations

import numpy as np


def pack(lengths: np.ndarray, capacity: int, groups: np.ndarray | None) -> list[np.ndarray]:
    """Rows as lists of sequence indices: each conversation's turns in order, next fit."""
    if groups is None:
        groups = np.zeros(len(lengths), dtype=np.int32)
    rows: list[list[int]] = []
    for group in np.unique(groups):
        fill = capacity  # forces a new row for the conversation's first turn
        for i in np.flatnonzero(groups == group).tolist():
            if fill + int(lengths[i]) > capacity:
                rows.append([])
                fill = 0
            rows[-1].append(i)
            fill += int(lengths[i])
    return [np.array(row, dtype=np.int64) for row in rows]
