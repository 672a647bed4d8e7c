"""The columns and files of a shard, and their names: what the writers write and every
reader (verify, stats, the loaders, the exports) looks for."""

from __future__ import annotations

import numpy as np

ROW_COLUMNS = ("input_ids", "labels", "position_ids")


NPY_FILES = (
    "input_ids.npy",
    "labels.npy",
    "position_ids.npy",
    "cu_seqlens.npy",
    "cu_seqlens_offsets.npy",
    "num_segments.npy",
)


GROUP_COLUMN = "group"  # --group-by: int32 group id of each row (the manifest's `groups` table)


GROUP_FILE = "group.npy"


OPTIONAL_NPY_FILES = ("max_seqlen.npy", "cu_seqlens_unpadded.npy")  # format 3; the second with --pad-to-multiple-of


NPY_HEADER_BYTES = 128


READ_BLOCK_ROWS = 4096


def shard_name(index: int, fmt: str) -> str:
    return f"shard-{index:05d}.parquet" if fmt == "parquet" else f"shard-{index:05d}"


def ids_dtype(vocab_size: int | None) -> np.dtype:
    """uint16 where every id fits; uint32 otherwise, or when the vocabulary is unknown."""
    return np.dtype(np.uint16) if vocab_size is not None and vocab_size <= 65536 else np.dtype(np.uint32)


def npy_shard_files(unpadded: bool, grouped: bool, max_seqlen: bool = True) -> tuple[str, ...]:
    """Every file a finished npy shard holds: 7, 8 with --pad-to-multiple-of, +1 with
    --group-by (`max_seqlen`: False for outputs of formats 1 and 2, which lack it)."""
    optional = dict(zip(("max_seqlen", "cu_seqlens_unpadded"), OPTIONAL_NPY_FILES))
    return (
        *NPY_FILES,
        *((optional["max_seqlen"],) if max_seqlen else ()),
        *((optional["cu_seqlens_unpadded"],) if unpadded else ()),
        *((GROUP_FILE,) if grouped else ()),
    )
