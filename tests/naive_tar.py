"""A slow, obviously correct reference for the energon export's tar members."""

from __future__ import annotations

import io
import tarfile

import numpy as np

COLUMNS = ("input_ids", "labels", "position_ids", "cu_seqlens", "num_segments")


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def naive_members(rows, first_row: int, ids_dtype) -> bytes:
    """Each row's five `.npy` members, written by tarfile (mode 644, owner 0, time 0, ustar),
    without the end-of-archive marker."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for r in range(len(rows)):
            cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
            values = [
                np.asarray(rows.input_ids[r], dtype=np.dtype(ids_dtype).newbyteorder("<")),
                np.asarray(rows.labels[r], dtype="<i4"),
                np.asarray(rows.position_ids[r], dtype="<i4"),
                np.asarray(cu, dtype="<i4"),
                np.asarray(rows.num_segments[r], dtype="<i4"),
            ]
            for column, value in zip(COLUMNS, values, strict=True):
                data = npy_bytes(value)
                info = tarfile.TarInfo(f"{first_row + r:010d}.{column}.npy")
                info.mode, info.size = 0o644, len(data)
                tar.addfile(info, io.BytesIO(data))
        end = buffer.tell()
    return buffer.getvalue()[:end]
