"""Parquet's RLE/bit-packed hybrid written and read the slow, obvious way, one value at a
time, for checking packcli.read.parquet_pages's kernels (levels, and dictionary indices of up
to 32 bits)."""

from __future__ import annotations


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_hybrid(levels: list[int], bit_width: int, runs: list[tuple[bool, int]]) -> bytes:
    """`levels` as the runs given: (True, n) is an RLE run of the next n values (which must
    all be equal), (False, g) a bit-packed run of the next 8*g values (the last group padded
    with zeros). The runs must cover the levels."""
    out = bytearray()
    at = 0
    for rle, size in runs:
        if rle:
            assert len(set(levels[at : at + size])) == 1
            out += _varint(size << 1) + levels[at].to_bytes((bit_width + 7) // 8, "little")
            at += size
            continue
        group = levels[at : at + 8 * size]
        group += [0] * (8 * size - len(group))
        bits = [(value >> b) & 1 for value in group for b in range(bit_width)]
        out += _varint((size << 1) | 1)
        out += bytes(sum(bit << k for k, bit in enumerate(bits[i : i + 8])) for i in range(0, len(bits), 8))
        at += 8 * size
    assert at >= len(levels)
    return bytes(out)


def decode_hybrid(data: bytes, bit_width: int, count: int) -> list[int]:
    """The first `count` values of the runs in `data`."""
    values: list[int] = []
    pos = 0
    while len(values) < count:
        header = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            header |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        if header & 1 == 0:
            width = (bit_width + 7) // 8
            values += [int.from_bytes(data[pos : pos + width], "little")] * (header >> 1)
            pos += width
        elif bit_width == 0:  # groups of 8 values of no bits: zeros
            values += [0] * (8 * (header >> 1))
        else:
            size = (header >> 1) * bit_width
            bits = [(data[pos + i // 8] >> (i % 8)) & 1 for i in range(size * 8)]
            values += [
                sum(bits[v * bit_width + b] << b for b in range(bit_width)) for v in range(len(bits) // bit_width)
            ]
            pos += size
    return values[:count]
