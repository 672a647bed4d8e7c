"""An independent reader of Megatron-LM's IndexedDataset pair, written from the format
description (megatron/core/datasets/indexed_dataset.py), not from packcli.export.megatron.

PREFIX.idx, little endian:
    9 bytes  magic b"MMIDIDX\\x00\\x00"
    u64      version (1)
    u8       dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16
    u64      S, the number of sequences
    u64      D, the number of document-index entries (documents + 1)
    int32[S] sequence lengths (elements)
    int64[S] sequence pointers (byte offsets into PREFIX.bin)
    int64[D] document index: sequence indices, starting at 0 and ending at S
PREFIX.bin: the sequences' elements, back to back.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}


@dataclass
class MegatronData:
    dtype_code: int
    dtype: np.dtype
    lengths: np.ndarray
    pointers: np.ndarray
    document_index: np.ndarray
    sequences: list[np.ndarray]


def read_megatron(prefix) -> MegatronData:
    with open(f"{prefix}.idx", "rb") as f:
        index = f.read()
    assert index[:9] == b"MMIDIDX\x00\x00", "bad magic"
    (version,) = struct.unpack_from("<Q", index, 9)
    assert version == 1, version
    (code,) = struct.unpack_from("<B", index, 17)
    sequence_count, document_count = struct.unpack_from("<QQ", index, 18)
    offset = 34
    lengths = np.frombuffer(index, dtype="<i4", count=sequence_count, offset=offset)
    offset += 4 * sequence_count
    pointers = np.frombuffer(index, dtype="<i8", count=sequence_count, offset=offset)
    offset += 8 * sequence_count
    document_index = np.frombuffer(index, dtype="<i8", count=document_count, offset=offset)
    offset += 8 * document_count
    assert offset == len(index), f"{len(index) - offset} trailing bytes in the .idx"
    assert document_index[0] == 0 and document_index[-1] == sequence_count
    dtype = np.dtype(CODES[code]).newbyteorder("<")
    with open(f"{prefix}.bin", "rb") as f:
        data = f.read()
    sequences = [np.frombuffer(data, dtype=dtype, count=int(n), offset=int(p)) for n, p in zip(lengths, pointers)]
    expected_end = int(pointers[-1]) + int(lengths[-1]) * dtype.itemsize if sequence_count else 0
    assert expected_end == len(data), "the .bin holds bytes no sequence points to"
    return MegatronData(code, dtype, lengths, pointers, document_index, sequences)
