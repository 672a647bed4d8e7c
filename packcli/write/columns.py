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


SOURCE_COLUMN = "segment_source"  # --mix: int32 per segment, its index in the manifest's `sources`


SEGMENT_PREFIX = "segment_"  # per-segment columns (format 5): one entry per real segment of a row


SEGMENT_OFFSETS_FILE = "segment_offsets.npy"  # npy: int64 [rows + 1], shared by every per-segment column


def is_segment_column(name: str) -> bool:
    """Whether a column (or an npy file's stem) holds one entry per real segment."""
    return name.startswith(SEGMENT_PREFIX) and name != SEGMENT_OFFSETS_FILE[:-4]


def segment_dtype(values: np.ndarray) -> np.dtype:
    """The stored dtype of a per-segment column: float32 for floating values, else int32."""
    return np.dtype(np.float32) if np.asarray(values).dtype.kind == "f" else np.dtype(np.int32)


NPY_HEADER_BYTES = 128


READ_BLOCK_ROWS = 4096


def shard_name(index: int, fmt: str) -> str:
    return f"shard-{index:05d}.parquet" if fmt == "parquet" else f"shard-{index:05d}"


def ids_dtype(vocab_size: int | None) -> np.dtype:
    """uint16 where every id fits; uint32 otherwise, or when the vocabulary is unknown."""
    return np.dtype(np.uint16) if vocab_size is not None and vocab_size <= 65536 else np.dtype(np.uint32)


def npy_shard_files(
    unpadded: bool, grouped: bool, max_seqlen: bool = True, segment_columns: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """Every file a finished npy shard holds: 7, 8 with --pad-to-multiple-of, +1 with
    --group-by (`max_seqlen`: False for outputs of formats 1 and 2, which lack it), and
    with per-segment columns one file each and segment_offsets.npy."""
    optional = dict(zip(("max_seqlen", "cu_seqlens_unpadded"), OPTIONAL_NPY_FILES))
    return (
        *NPY_FILES,
        *((optional["max_seqlen"],) if max_seqlen else ()),
        *((optional["cu_seqlens_unpadded"],) if unpadded else ()),
        *((GROUP_FILE,) if grouped else ()),
        *((SEGMENT_OFFSETS_FILE,) if segment_columns else ()),
        *(f"{name}.npy" for name in segment_columns),
    )
