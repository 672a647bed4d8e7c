"""What every export shares: the packed rows streamed block by block with progress, and an
output directory that appears only when complete.

An export writes into a hidden sibling (`.OUT.packcli-tmp`) and renames it to OUT at the
end, so OUT never holds half an export. An existing OUT that is not empty is refused
unless `overwrite`; then it is moved aside, replaced, and removed.

On an object store there is no rename: OUT is built in a local temporary directory and
uploaded when complete, file by file, the files a reader opens first last (each export
says which), so an upload cut short leaves no OUT its reader takes for whole. A source on
an object store is fetched into a local temporary directory first.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import operator
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core import storage
from packcli.core.errors import PackcliError
from packcli.plan.rows import Rows
from packcli.write.columns import ids_dtype
from packcli.write.manifest import Manifest, load_manifest
from packcli.write.outdir import remove_path
from packcli.write.shard_reader import iter_output_rows_stored
from packcli.write.values import CHOSEN_COLUMN, PAIR_COLUMN, WEIGHT_COLUMN

_nbytes = operator.attrgetter("nbytes")
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22 if sys.platform == "linux" else None)
IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX")) if hasattr(os, "sysconf") else 1024

# (rows, real tokens, rows done, rows in all): the CLI's progress bar, or None
Progress = Callable[[int, int, int, int | None], None]


@dataclass
class Block:
    """A block of rows with where it sits: its shard's index in the manifest and its first row."""

    shard: int
    first_row: int
    rows: Rows
    real: np.ndarray  # real tokens per row


def read_source(out_dir: Path | str) -> Manifest:
    return load_manifest(Path(out_dir))


def refuse_pairs(manifest: Manifest, name: str, why: str) -> None:
    """An output of preference pairs cannot go to a format that keeps documents, not rows:
    said before anything is written."""
    if "pairs" in manifest:
        raise PackcliError(f"export {name}: an output of preference pairs cannot be exported, {why}")


def dropped_columns(manifest: Manifest, carried: tuple[str, ...] = ()) -> list[str]:
    """The export's note on the per-segment columns it does not carry (all but `carried`)."""
    left = [name for name in (PAIR_COLUMN, CHOSEN_COLUMN, WEIGHT_COLUMN) if name in manifest.get("columns", {})]
    left = [name for name in left if name not in carried]
    if not left:
        return []
    pairs = " (pairs stay two adjacent segments of a row, chosen first)" if PAIR_COLUMN in left else ""
    return [f"{', '.join(left)} not exported: this format's samples hold the row columns only{pairs}"]


def token_dtype(manifest: Manifest) -> np.dtype:
    """The dtype of input_ids in the npy format: uint16 where every id fits, else uint32."""
    return ids_dtype(manifest["tokenizer"].get("vocab_size"))


def blocks(out_dir: Path | str, manifest: Manifest, progress: Progress | None = None) -> Iterator[Block]:
    """Every row of a packed output, in order, a bounded block at a time, the columns in
    their stored dtype (npy: views of the memory-mapped files)."""
    total = manifest.get("totals", {}).get("rows")
    index = {entry["path"]: i for i, entry in enumerate(manifest["shards"])}
    done = 0
    for entry, rows in iter_output_rows_stored(out_dir, manifest):
        real = rows.real_lengths()
        yield Block(index[entry["path"]], done, rows, real)
        done += len(rows)
        if progress is not None:
            progress(len(rows), int(real.sum()), done, total)


def prefault(*arrays: np.ndarray) -> None:
    """Map the pages of memory-mapped arrays an export reads whole in one call each
    (MADV_POPULATE_READ): touched one by one, their page faults cost the kernel more than
    copying the bytes. Anything else (no map, another OS, an older kernel): nothing."""
    for array in arrays:
        _prefault(array)


def _prefault(array: np.ndarray) -> None:
    base: Any = array
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    if base is None or _MADV_POPULATE_READ is None or not array.size:
        return
    mapped = np.frombuffer(base, dtype=np.uint8)
    start = array.__array_interface__["data"][0] - mapped.__array_interface__["data"][0]
    del mapped  # the map must not stay exported: it is closed with its shard
    first = start - start % mmap.PAGESIZE
    with contextlib.suppress(OSError, ValueError):
        base.madvise(_MADV_POPULATE_READ, first, start + array.nbytes - first)


def write_views(fd: int, views: list[Any]) -> None:
    """Every view's bytes (C-contiguous arrays, bytes) to the file, in order, in a few
    `writev` calls: the kernel gathers them, so the rows' bytes are copied once (into the
    file), not joined first."""
    for start in range(0, len(views), IOV_MAX):
        chunk = views[start : start + IOV_MAX]
        written = os.writev(fd, chunk)
        try:
            if written == sum(map(_nbytes, chunk)):  # arrays and memoryviews: the common case, summed in C
                continue
        except AttributeError:  # bytes among them
            pass
        sizes = [v.nbytes if isinstance(v, np.ndarray | memoryview) else len(v) for v in chunk]
        if written == sum(sizes):
            continue
        for view, size in zip(chunk, sizes, strict=True):  # a short write: the rest one by one
            if written >= size:
                written -= size
                continue
            rest = memoryview(view).cast("B")[written:]
            written = 0
            while rest.nbytes:
                rest = rest[os.write(fd, rest) :]


Export = Callable[..., dict[str, Any]]


def fetching_source(export: Export) -> Export:
    """`export(source, out, ...)` with a source on an object store fetched to a local
    temporary directory for the export (and removed after); a local source as it is."""

    @functools.wraps(export)
    def run(source: Path | str, out: Path | str, **options: Any) -> dict[str, Any]:
        with storage.fetched_output(str(source)) as local:
            return export(local, out, **options)

    return run


class ExportDir:
    """OUT written under a temporary name and renamed when the `with` body completes; on an
    object store, built locally and uploaded when the body completes, the files `last`
    ranks highest at the end (a relative path -> its rank; 0 for most)."""

    def __init__(self, out: Path | str, overwrite: bool, last: Callable[[str], int] = lambda name: 0):
        self.remote = storage.RemoteDir(str(out)) if storage.is_remote(str(out)) else None
        self.out = Path(out)
        self.overwrite = overwrite
        self.last = last
        self.tmp = self.out.parent / f".{self.out.name}.packcli-tmp"

    def __enter__(self) -> Path:
        if self.remote is not None:
            if self.remote.names() and not self.overwrite:
                raise PackcliError(f"output {self.remote} is not empty; pass --overwrite to replace it")
            self.tmp = Path(tempfile.mkdtemp(prefix="packcli-export-")) / "out"
            self.tmp.mkdir()
            return self.tmp
        if self.out.exists() and not self.out.is_dir():
            raise PackcliError(f"output {self.out} exists and is not a directory")
        if self.out.is_dir() and any(self.out.iterdir()) and not self.overwrite:
            raise PackcliError(f"output directory {self.out} is not empty; pass --overwrite to replace it")
        if not self.out.parent.is_dir():
            raise PackcliError(f"{self.out.parent}: no such directory")
        remove_path(self.tmp)  # left by an export that was killed
        try:
            self.tmp.mkdir()
        except OSError as exc:
            raise PackcliError(f"cannot write to {self.out.parent}: {exc.strerror or exc}") from exc
        return self.tmp

    def __exit__(self, kind, value, traceback) -> None:
        if self.remote is not None:
            try:
                if kind is None:
                    self._upload(self.remote)
            finally:
                shutil.rmtree(self.tmp.parent, ignore_errors=True)
            return
        if kind is not None:
            remove_path(self.tmp)
            return
        old = self.out.parent / f".{self.out.name}.packcli-old"
        if self.out.exists():
            remove_path(old)
            os.replace(self.out, old)
        os.replace(self.tmp, self.out)
        remove_path(old)

    def _upload(self, remote: storage.RemoteDir) -> None:
        """The old OUT's objects removed (only with --overwrite, after the export succeeded),
        then every file, in the order `last` gives."""
        for name in remote.names():
            remote.remove(name)
        files = [path.relative_to(self.tmp).as_posix() for path in self.tmp.rglob("*") if path.is_file()]
        for name in sorted(files, key=lambda name: (self.last(name), name)):
            remote.put(self.tmp / name, name)


def summary_line(summary: dict[str, Any]) -> str:
    """An export's one line on success."""
    if summary["format"] == "megatron":
        return (
            f"ok: wrote {summary['bin']} and {summary['idx']}: {summary['documents']:,} documents, "
            f"{summary['tokens']:,} tokens ({summary['dtype']})"
        )
    what = f"{summary['rows']:,} rows" if "rows" in summary else f"{summary['documents']:,} documents"
    return (
        f"ok: wrote {summary['out']} ({summary['format']}, {summary['files']} file(s)): "
        f"{what}, {summary['real_tokens']:,} real tokens"
    )
