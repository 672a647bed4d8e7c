"""The fewest rows whole preference pairs could fit in, from a packed output of pairs.

    python pair_bound.py OUT SEQ_LEN

OUT is a Parquet output of `pack --chosen-field ... --rejected-field ...`: each row's
first `num_segments` segments (`cu_seqlens`) are pairs, chosen then rejected, the two
sides of a pair next to each other with the same `segment_pair`. A pair's length is its
two sides' real tokens; no packing that keeps pairs whole takes fewer rows than the larger
of ceil(tokens / SEQ_LEN) and Martello and Toth's L2 bound on those lengths. Figures:
`pair_count`, `pair_tokens`, `pair_lb_rows`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import _common
import numpy as np


def row_segments(column, counts: np.ndarray) -> np.ndarray:
    """The lengths of each row's first `counts[r]` segments of a `cu_seqlens` column, in order."""
    column = column.combine_chunks()
    offsets = column.offsets.to_numpy().astype(np.int64)
    values = column.values.to_numpy().astype(np.int64)
    lengths = np.diff(values)  # across row ends too; only each row's own are taken
    within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return lengths[np.repeat(offsets[:-1], counts) + within]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("seq_len", type=int)
    args = parser.parse_args()
    martello_toth_l2 = _common.find("martello_toth_l2", *_common.KERNELS)
    import pyarrow.parquet as pq

    shards = json.loads((args.out / "manifest.json").read_text())["shards"]
    units = []
    for shard in shards:
        table = pq.read_table(args.out / shard["path"], columns=["cu_seqlens", "num_segments", "segment_pair"])
        counts = table.column("num_segments").to_numpy().astype(np.int64)
        sides = row_segments(table.column("cu_seqlens"), counts)
        owner = table.column("segment_pair").combine_chunks().values.to_numpy()
        if (counts % 2).any() or len(owner) != len(sides) or not np.array_equal(owner[0::2], owner[1::2]):
            sys.exit(f"{shard['path']}: segments that are not whole pairs")
        units.append(sides[0::2] + sides[1::2])
    pairs = np.concatenate(units) if units else np.zeros(0, dtype=np.int64)
    tokens = int(pairs.sum())
    bound = max(-(-tokens // args.seq_len), int(martello_toth_l2(pairs, args.seq_len)))
    _common.emit({"pair_count": len(pairs), "pair_tokens": tokens, "pair_lb_rows": bound})


if __name__ == "__main__":
    main()
