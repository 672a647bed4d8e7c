"""packcli's own Parquet shards read page by page for `verify` (read/parquet_pages.py's
decoder, without Arrow's list assembly), with the checks and messages of the shard reader."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core.errors import PackcliError
from packcli.plan.rows import Rows
from packcli.read.parquet_pages import Column, PageError, column_leaves, plain_layout, read_row_groups
from packcli.write.columns import ROW_COLUMNS, is_segment_column
from packcli.write.shard_reader import check_segment_counts


@dataclass(frozen=True)
class ShardPages:
    """A Parquet shard laid out as this module reads, with the columns it holds."""

    path: Path
    metadata: Any  # pyarrow.parquet.FileMetaData
    columns: list[str]

    @classmethod
    def of(cls, path: Path) -> ShardPages | None:
        """None when the file is laid out otherwise, or its metadata does not load (pyarrow
        then names the damage)."""
        import pyarrow.parquet as pq

        try:
            metadata = pq.read_metadata(str(path))
        except Exception:
            return None

        leaves = column_leaves(metadata.schema)
        names = set(leaves)
        columns = [*ROW_COLUMNS, "cu_seqlens", "num_segments"]
        columns += [name for name in ("max_seqlen", "cu_seqlens_unpadded") if name in names]
        segments = [name for name in leaves if is_segment_column(name)]
        if segments and not _every_row_has_segments(metadata, leaves):
            return None  # an empty list decodes only through pyarrow
        columns += segments
        if any(metadata.schema.column(leaves[name]).physical_type != "INT32" for name in columns if name in leaves):
            return None  # packcli writes int32; verify leaves anything else to pyarrow's casts
        return cls(path, metadata, columns) if plain_layout(metadata, columns) else None

    def rows(self, seq_len: int) -> Iterator[Rows]:
        """One block per row group, as `shard_reader.read_shard` gives them, with the same checks
        and messages."""
        try:
            yield from _rows_of_groups(self.path, seq_len, read_row_groups(self.path, self.metadata, self.columns))
        except PageError as exc:
            raise PackcliError(f"{self.path.name}: cannot read shard ({exc})") from exc


def _every_row_has_segments(metadata: Any, leaves: dict[str, int]) -> bool:
    """Whether num_segments' statistics show at least one segment in every row: then no
    per-segment list is empty (which this module's decoder refuses as a null)."""
    if "num_segments" not in leaves:
        return False
    for g in range(metadata.num_row_groups):
        stats = metadata.row_group(g).column(leaves["num_segments"]).statistics
        if stats is None or not stats.has_min_max or stats.min < 1:
            return False
    return True


def _rows_of_groups(path: Path, seq_len: int, groups: Iterator[tuple[int, dict[str, Column]]]) -> Iterator[Rows]:

    first_row = 0
    for n, decoded in groups:
        fixed = {}
        for name in ROW_COLUMNS:
            widths = np.diff(decoded[name].rows)
            if (widths != seq_len).any():
                bad = int(np.argmax(widths != seq_len))
                raise PackcliError(
                    f"{path.name} row {first_row + bad}: {name} has {widths[bad]} tokens, not seq_len {seq_len}"
                )
            fixed[name] = decoded[name].values.reshape(n, seq_len)
        cu, unpadded = decoded["cu_seqlens"], decoded.get("cu_seqlens_unpadded")
        if unpadded is not None and not np.array_equal(np.diff(unpadded.rows), np.diff(cu.rows)):
            bad = int(np.argmax(np.diff(unpadded.rows) != np.diff(cu.rows)))
            raise PackcliError(
                f"{path.name} row {first_row + bad}: cu_seqlens_unpadded and cu_seqlens differ in length"
            )
        longest = decoded.get("max_seqlen")
        num_segments = decoded["num_segments"].values
        segments = {}
        for name, column in decoded.items():
            if is_segment_column(name):
                check_segment_counts(f"{path.name} row", name, np.diff(column.rows), num_segments, first_row)
                segments[name] = column.values
        yield Rows(
            fixed["input_ids"],
            fixed["labels"],
            fixed["position_ids"],
            cu.values,
            cu.rows,
            num_segments,
            None if longest is None else longest.values,
            None if unpadded is None else unpadded.values,
            segments,
        )
        first_row += n
