"""`packcli export energon`: WebDataset tar shards prepared for Megatron-Energon.

One sample per packed row, keyed by its row number, with one `.npy` part per column
(`<key>.input_ids.npy`, `<key>.labels.npy`, `<key>.position_ids.npy`,
`<key>.cu_seqlens.npy`, `<key>.num_segments.npy`), one tar per packed shard. The
`.nv-meta/` index is written by energon's own preparation (what `energon prepare` runs),
with every sample in the train split and a `dataset.yaml` for `CrudeWebdataset`: a task
encoder's cooker turns the crude samples into whatever the model takes.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
import tarfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from packcli.errors import PackcliError, needs_extra
from packcli.export import Block, ExportDir, Progress, blocks, read_source, token_dtype, write_views

COLUMNS = ("input_ids", "labels", "position_ids", "cu_seqlens", "num_segments")
DATASET_YAML = "__module__: megatron.energon\n__class__: CrudeWebdataset\n"
KEY_DIGITS = 10


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The .npy version 1.0 header `np.save` writes, built once per shape instead of per array."""
    header = f"{{'descr': {dtype.str!r}, 'fortran_order': False, 'shape': {shape!r}, }}"
    size = 10 + len(header) + 1
    header += " " * (-size % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1")


def _header_template() -> bytearray:
    """A ustar member header as tarfile writes it (mode 644, owner 0, time 0), with an
    empty name, and its size and checksum fields to be filled in."""
    info = tarfile.TarInfo("")
    info.mode = 0o644
    header = bytearray(info.tobuf(tarfile.USTAR_FORMAT))
    header[148:156] = b" " * 8  # the checksum is summed with its own field as spaces
    return header


class _TarShard:
    """A ustar tar written member by member; headers are filled from one template
    (tarfile builds each field in Python, at several times the cost of the data)."""

    def __init__(self, path: Path):
        self.file: BinaryIO = open(path, "wb")
        self.template = _header_template()

    def add(self, name: str, *parts: bytes | memoryview) -> None:
        encoded = name.encode("ascii")
        if len(encoded) > 100:
            raise ValueError(f"tar member name too long: {name}")
        size = sum(memoryview(p).nbytes for p in parts)
        header = self.template.copy()
        header[: len(encoded)] = encoded
        header[124:136] = b"%011o\0" % size
        header[148:156] = b"%06o\0 " % sum(header)
        self.file.write(header)
        for part in parts:
            self.file.write(part)
        padding = -size % tarfile.BLOCKSIZE
        if padding:
            self.file.write(bytes(padding))

    def member_headers(self, first_row: int, sizes: np.ndarray) -> np.ndarray:
        """The headers `add` writes for members `<key>.<column>.npy` of rows
        first_row, first_row + 1, ... with the given sizes ([rows, columns]), all at once."""
        n = len(sizes)
        headers = np.empty((n, len(COLUMNS), tarfile.BLOCKSIZE), dtype=np.uint8)
        headers[:] = np.frombuffer(bytes(self.template), dtype=np.uint8)
        keys = np.arange(first_row, first_row + n, dtype=np.int64)
        headers[:, :, :KEY_DIGITS] = (keys[:, None] // 10 ** np.arange(KEY_DIGITS - 1, -1, -1) % 10 + ord("0"))[
            :, None, :
        ]
        for c, column in enumerate(COLUMNS):
            suffix = np.frombuffer(f".{column}.npy".encode("ascii"), dtype=np.uint8)
            headers[:, c, KEY_DIGITS : KEY_DIGITS + len(suffix)] = suffix
        headers[:, :, 124:135] = _octal_digits(sizes, 11)
        headers[:, :, 135] = 0
        checksums = headers.sum(axis=2, dtype=np.int64)  # the checksum field holds spaces
        headers[:, :, 148:154] = _octal_digits(checksums, 6)
        headers[:, :, 154] = 0
        headers[:, :, 155] = ord(" ")
        return headers

    def write(self, views: list[Any]) -> None:
        self.file.flush()
        write_views(self.file.fileno(), views)

    def close(self) -> None:
        self.file.write(bytes(2 * tarfile.BLOCKSIZE))  # the end-of-archive marker
        self.file.close()


def _write_block(tar: _TarShard, block: Block, ids_dtype: np.dtype) -> None:
    """The block's rows as tar members, five per row, in one gathered write: the member
    headers are built for the whole block at once, the data written from the columns."""
    rows = block.rows
    n, seq_len = len(rows), rows.seq_len
    if block.first_row + n > 10**KEY_DIGITS:
        raise PackcliError(f"energon sample keys have {KEY_DIGITS} digits: an output of more than 10^{KEY_DIGITS} rows")
    int32 = np.dtype("<i4")
    fixed = [
        (npy_header(ids_dtype, (seq_len,)), np.ascontiguousarray(rows.input_ids, dtype=ids_dtype.newbyteorder("<"))),
        (npy_header(int32, (seq_len,)), np.ascontiguousarray(rows.labels, dtype=int32)),
        (npy_header(int32, (seq_len,)), np.ascontiguousarray(rows.position_ids, dtype=int32)),
    ]
    segments_header = npy_header(int32, ())
    counts = rows.num_segments.astype(int32)
    cu = np.ascontiguousarray(rows.cu_seqlens, dtype=int32)
    offsets = rows.cu_offsets - rows.cu_offsets[0]
    widths = np.diff(offsets)
    cu_headers = {int(w): npy_header(int32, (int(w),)) for w in np.unique(widths)}
    sizes = np.empty((n, len(COLUMNS)), dtype=np.int64)
    for c, (header, values) in enumerate(fixed):
        sizes[:, c] = len(header) + values[0].nbytes if n else 0
    sizes[:, 3] = np.array([len(cu_headers[int(w)]) for w in widths.tolist()], dtype=np.int64) + 4 * widths
    sizes[:, 4] = len(segments_header) + 4
    headers = tar.member_headers(block.first_row, sizes)
    zeros = bytes(tarfile.BLOCKSIZE)
    pads = (-sizes % tarfile.BLOCKSIZE).tolist()
    bounds, width_list = offsets.tolist(), widths.tolist()
    views: list[Any] = []
    for i in range(n):
        for c, (header, values) in enumerate(fixed):
            views += (headers[i, c], header, values[i], zeros[: pads[i][c]])
        views += (headers[i, 3], cu_headers[width_list[i]], cu[bounds[i] : bounds[i + 1]], zeros[: pads[i][3]])
        views += (headers[i, 4], segments_header, counts[i : i + 1], zeros[: pads[i][4]])
    tar.write(views)


def _octal_digits(values: np.ndarray, digits: int) -> np.ndarray:
    """ASCII octal digits of each value, zero-padded: `b"%0*o" % value` for a whole array."""
    shifts = 3 * np.arange(digits - 1, -1, -1)
    return (((values[..., None] >> shifts) & 7) + ord("0")).astype(np.uint8)


def _prepare(directory: Path, tars: list[str]) -> None:
    """Energon's own index of the shards (`.nv-meta/`), every sample in the train split."""
    with needs_extra("energon", "packcli export energon needs megatron-energon"):
        from megatron.energon.flavors.webdataset.prepare import WebdatasetPreparator

    class Preparator(WebdatasetPreparator):
        """Energon's preparation with its tar scan replaced by `scan_tar_items`, which
        yields the same index items (tested against energon's own) at a fraction of the cost."""

        _preprocess_tar = staticmethod(scan_tar_items)

    # Energon reports on stdout, which belongs to --json.
    with contextlib.redirect_stdout(io.StringIO()):
        Preparator.prepare_dataset(
            directory,
            tars,
            split_parts_ratio=[("train", 1.0), ("val", 0.0), ("test", 0.0)],
            shuffle_seed=None,
            workers=max(1, min(len(tars), os.cpu_count() or 1)),
        )
    (directory / ".nv-meta" / "dataset.yaml").write_text(DATASET_YAML, encoding="utf-8")


def _ustar_members(path: Any) -> list[tuple[int, str, int]] | None:
    """(header offset, name, size) of every member of a plain ustar tar as `_TarShard`
    writes it; None for anything else (long names, links, other formats, damage)."""
    members: list[tuple[int, str, int]] = []
    with open(str(path), "rb") as f:
        offset = 0
        while True:
            f.seek(offset)
            header = f.read(tarfile.BLOCKSIZE)
            if len(header) < tarfile.BLOCKSIZE:
                return None
            if header == bytes(tarfile.BLOCKSIZE):
                return members
            if header[257:265] != b"ustar\x0000" or header[156:157] not in (b"0", b"\0") or header[345:346] != b"\0":
                return None
            try:
                checksum = int(header[148:156].strip(b"\0 ") or b"-1", 8)
                size = int(header[124:136].strip(b"\0 ") or b"0", 8)
            except ValueError:
                return None
            if checksum != sum(header[:148]) + 256 + sum(header[156:]):
                return None
            members.append((offset, header[:100].split(b"\0", 1)[0].decode("utf-8"), size))
            offset += tarfile.BLOCKSIZE + size + (-size % tarfile.BLOCKSIZE)


def scan_tar_items(path: str, shard_to_idx: dict, parent_path: Any, max_parts: int, media_filter: Any = None):
    """`WebdatasetPreparator._preprocess_tar` for the tars this export writes: the same
    items (samples, parts, shard info) and the same `.tar.idx`, from the member headers
    alone. Energon's own reads every member through `tarfile`, most of the export's time;
    any tar it does not recognise (and media filters) goes to energon's own."""
    with needs_extra("energon", "packcli export energon needs megatron-energon"):
        from megatron.energon.flavors.webdataset.config import skip_meta_re, split_name_re
        from megatron.energon.flavors.webdataset.itar import TarIndexWriter
        from megatron.energon.flavors.webdataset.prepare import (
            IndexSample,
            IndexSamplePart,
            IndexShardInfo,
            WebdatasetPreparator,
        )
        from megatron.energon.flavors.webdataset.structs import ShardInfo

    shard_info = ShardInfo(name=path, path=parent_path / path, count=0)
    members = _ustar_members(shard_info.path) if media_filter is None else None
    if members is None:
        yield from WebdatasetPreparator._preprocess_tar(path, shard_to_idx, parent_path, max_parts, media_filter)
        return
    tar_id, count = shard_to_idx[path], 0
    parts: set[str] = set()
    sample: dict[str, Any] | None = None
    end = members[-1][0] + tarfile.BLOCKSIZE + members[-1][2] + (-members[-1][2] % tarfile.BLOCKSIZE) if members else 0
    starts: list[int] = []  # the .tar.idx: each sample's offset, then the end
    with TarIndexWriter(shard_info.path) as index:
        for offset, name, size in members:
            match = None if skip_meta_re.match(name) else split_name_re.match(name)
            if match is None:
                continue
            base_name, part_name = match.group(1), match.group(2)
            if len(parts) < max_parts:
                parts.add(part_name)
            if sample is None or sample["sample_key"] != base_name:
                starts.append(offset)
                if sample is not None:
                    yield IndexSample(**sample, byte_size=offset - sample["byte_offset"])
                sample = {"tar_file_id": tar_id, "sample_key": base_name, "sample_index": count, "byte_offset": offset}
                count += 1
            yield IndexSamplePart(
                tar_file_id=tar_id,
                sample_index=count - 1,
                part_name=part_name,
                content_byte_offset=offset + tarfile.BLOCKSIZE,
                content_byte_size=size,
            )
        shard_info.count = count
        starts.append(end)
        index.itar.write(struct.pack(f"{len(starts)}Q", *starts))  # as `index.append` writes each
        if sample is not None:
            yield IndexSample(**sample, byte_size=end - sample["byte_offset"])
    yield IndexShardInfo(shard_info=shard_info, parts=parts)


def export_energon(
    source: Path | str, out: Path | str, *, overwrite: bool = False, progress: Progress | None = None
) -> dict[str, Any]:
    """Write OUT/shard-NNNNN.tar and OUT/.nv-meta/; returns a summary."""
    manifest = read_source(source)
    ids_dtype = token_dtype(manifest)
    rows = tokens = 0
    tars: list[str] = []
    current: _TarShard | None = None
    last_shard = -1
    with ExportDir(out, overwrite) as tmp:
        try:
            for block in blocks(source, manifest, progress):
                if current is None or block.shard != last_shard:
                    if current is not None:
                        current.close()
                    tars.append(f"shard-{block.shard:05d}.tar")
                    current, last_shard = _TarShard(tmp / tars[-1]), block.shard
                _write_block(current, block, ids_dtype)
                rows += len(block.rows)
                tokens += int(block.real.sum())
        finally:
            if current is not None:
                current.close()
        _prepare(tmp, tars)
    return {"format": "energon", "out": str(out), "rows": rows, "real_tokens": tokens, "files": len(tars), "notes": []}
