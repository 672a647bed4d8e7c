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
import tarfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from packcli.errors import needs_extra
from packcli.export import Block, ExportDir, Progress, blocks, read_source, token_dtype

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

    def close(self) -> None:
        self.file.write(bytes(2 * tarfile.BLOCKSIZE))  # the end-of-archive marker
        self.file.close()


def _write_block(tar: _TarShard, block: Block, ids_dtype: np.dtype) -> None:
    rows = block.rows
    seq_len = rows.seq_len
    fixed = {
        "input_ids": (npy_header(ids_dtype, (seq_len,)), rows.input_ids.astype(ids_dtype, copy=False)),
        "labels": (npy_header(np.dtype(np.int32), (seq_len,)), rows.labels.astype(np.int32, copy=False)),
        "position_ids": (npy_header(np.dtype(np.int32), (seq_len,)), rows.position_ids.astype(np.int32, copy=False)),
    }
    segments_header = npy_header(np.dtype(np.int32), ())
    cu = rows.cu_seqlens.astype(np.int32, copy=False)
    offsets, counts = rows.cu_offsets.tolist(), rows.num_segments.astype(np.int32).tolist()
    cu_headers: dict[int, bytes] = {}
    for i in range(len(rows)):
        key = f"{block.first_row + i:0{KEY_DIGITS}d}"
        for name, (header, values) in fixed.items():
            tar.add(f"{key}.{name}.npy", header, values[i].data)
        width = offsets[i + 1] - offsets[i]
        if width not in cu_headers:
            cu_headers[width] = npy_header(np.dtype(np.int32), (width,))
        tar.add(f"{key}.cu_seqlens.npy", cu_headers[width], cu[offsets[i] : offsets[i + 1]].data)
        tar.add(f"{key}.num_segments.npy", segments_header, np.int32(counts[i]).tobytes())


def _prepare(directory: Path, tars: list[str]) -> None:
    """Energon's own index of the shards (`.nv-meta/`), every sample in the train split."""
    with needs_extra("energon", "packcli export energon needs megatron-energon"):
        from megatron.energon.flavors.webdataset.prepare import WebdatasetPreparator
    # Energon reports on stdout, which belongs to --json.
    with contextlib.redirect_stdout(io.StringIO()):
        WebdatasetPreparator.prepare_dataset(
            directory,
            tars,
            split_parts_ratio=[("train", 1.0), ("val", 0.0), ("test", 0.0)],
            shuffle_seed=None,
            workers=max(1, min(len(tars), os.cpu_count() or 1)),
        )
    (directory / ".nv-meta" / "dataset.yaml").write_text(DATASET_YAML, encoding="utf-8")


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
