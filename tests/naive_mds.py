"""Slow, obviously correct references for the MDS export's byte layout in packcli/export_mds.py."""

from __future__ import annotations

import ctypes
import struct

SHAPE_FORMATS = ((1 << 8, "B"), (1 << 16, "H"), (1 << 32, "I"), (1 << 64, "Q"))  # streaming's shape codes 0..3


def naive_sample(ids, ids_format, labels, positions, cu, num_segments) -> bytes:
    """One MDS sample for packcli's columns, field by field as MDSReader decodes it: the
    size of cu_seqlens (the only variable-size column), then the columns in name order."""
    code = next(k for k, (limit, _) in enumerate(SHAPE_FORMATS) if len(cu) < limit)
    cu_bytes = struct.pack(f"<B{SHAPE_FORMATS[code][1]}", 4 | code, len(cu)) + b"".join(
        struct.pack("<i", int(v)) for v in cu
    )
    out = struct.pack("<I", len(cu_bytes)) + cu_bytes
    out += b"".join(struct.pack(f"<{ids_format}", int(v)) for v in ids)
    out += b"".join(struct.pack("<i", int(v)) for v in labels)
    out += struct.pack("<q", int(num_segments))
    out += b"".join(struct.pack("<i", int(v)) for v in positions)
    return out


def naive_gather(spans) -> bytes:
    """The bytes at each (address, length), one span at a time."""
    return b"".join(ctypes.string_at(int(address), int(length)) for address, length in spans)
