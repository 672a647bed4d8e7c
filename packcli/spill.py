"""The token spill: every segment's tokens on disk, so memory holds a few bytes per sequence.

Read+tokenize appends segments (the pieces the planner places, after `--overlong`) in
input order: tokens in the output's id dtype and, where labels are masked, one bit per
token saying whether it is learned (a label is always its token or -100, so one bit
says it all). Only the lengths stay in memory; the planner needs nothing else, and rows
are then gathered from the memory-mapped files.

A spill is complete when `complete.json` exists (written last, atomically); `--resume`
reuses a complete spill whose run identity matches and skips reading and tokenizing.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from packcli.errors import PackcliError

TOKENS_FILE = "tokens.bin"
LEARNED_FILE = "learned.bin"
LENGTHS_FILE = "lengths.npy"
COMPLETE_FILE = "complete.json"
RELEASE_BYTES = 1 << 24  # mapped spill pages are dropped from this process after this many bytes are gathered


class SpillWriter:
    """Appends segments to a spill directory; `finish` makes it complete."""

    def __init__(self, directory: Path, token_dtype: np.dtype, masked: bool):
        self.directory = Path(directory)
        self.token_dtype, self.masked = np.dtype(token_dtype), masked
        remove_spill(self.directory)
        self.directory.mkdir(parents=True)
        self._tokens = open(self.directory / TOKENS_FILE, "wb")
        self._learned = open(self.directory / LEARNED_FILE, "wb") if masked else None
        self._carry = np.zeros(0, dtype=bool)  # learned flags that do not fill a byte yet
        self._lengths: list[np.ndarray] = []
        self.tokens = 0
        self.sequences = 0

    def append(self, tokens: np.ndarray, lengths: np.ndarray, learned: np.ndarray | None) -> None:
        """`learned`: one flag per token (required exactly when the spill is masked)."""
        self._tokens.write(np.ascontiguousarray(tokens, dtype=self.token_dtype).data)
        if self._learned is not None:
            flags = np.concatenate([self._carry, np.asarray(learned, dtype=bool)])
            whole = len(flags) - len(flags) % 8
            self._learned.write(np.packbits(flags[:whole], bitorder="little").data)
            self._carry = flags[whole:]
        self._lengths.append(np.asarray(lengths, dtype=np.int64))
        self.tokens += len(tokens)
        self.sequences += len(lengths)

    def finish(self, meta: dict) -> Spill:
        """Flush, record the lengths and `meta`, and mark the spill complete."""
        if self._learned is not None and len(self._carry):
            self._learned.write(np.packbits(self._carry, bitorder="little").data)
        for f in (self._tokens, self._learned):
            if f is not None:
                f.flush()
                os.fsync(f.fileno())
                f.close()
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, dtype=np.int64)
        self._lengths = [lengths]
        np.save(self.directory / LENGTHS_FILE, lengths)
        record = {
            "token_dtype": self.token_dtype.str,
            "masked": self.masked,
            "tokens": self.tokens,
            "sequences": self.sequences,
            **meta,
        }
        tmp = self.directory / (COMPLETE_FILE + ".tmp")
        tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
        os.replace(tmp, self.directory / COMPLETE_FILE)
        return Spill.open(self.directory, lengths=lengths)

    def abort(self) -> None:
        for f in (self._tokens, self._learned):
            if f is not None and not f.closed:
                f.close()


@dataclass
class Spill:
    """A complete spill: tokens and learned bits mapped from disk, lengths in memory."""

    tokens: np.ndarray
    learned: np.ndarray | None  # packed bits, little bit order
    lengths: np.ndarray  # int64, one per segment, in input order
    meta: dict = field(default_factory=dict)
    _maps: list = field(default_factory=list)
    _gathered: int = 0

    @property
    def masked(self) -> bool:
        return self.learned is not None

    def starts(self) -> np.ndarray:
        starts = np.empty(len(self.lengths), dtype=np.int64)
        if len(starts):
            starts[0] = 0
            np.cumsum(self.lengths[:-1], out=starts[1:])
        return starts

    @property
    def nbytes(self) -> int:
        return int(self.tokens.nbytes + (self.learned.nbytes if self.learned is not None else 0) + self.lengths.nbytes)

    def gathered(self, tokens: int) -> None:
        """Count tokens read from the maps; past RELEASE_BYTES the mapped pages are dropped
        from this process (they stay in the page cache), so RSS does not grow with the spill."""
        self._gathered += tokens * self.tokens.itemsize
        if self._gathered >= RELEASE_BYTES:
            self._gathered = 0
            for m in self._maps:
                m.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        self.tokens = self.learned = None  # type: ignore[assignment]
        maps, self._maps = self._maps, []
        for m in maps:
            try:
                m.close()
            except BufferError:  # an array over it is still alive somewhere; the GC closes it
                pass

    @staticmethod
    def open(directory: Path, lengths: np.ndarray | None = None) -> Spill:
        directory = Path(directory)
        meta = json.loads((directory / COMPLETE_FILE).read_text(encoding="utf-8"))
        maps: list = []
        tokens = _map(directory / TOKENS_FILE, np.dtype(meta["token_dtype"]), maps)
        learned = _map(directory / LEARNED_FILE, np.dtype(np.uint8), maps) if meta["masked"] else None
        if lengths is None:
            lengths = np.load(directory / LENGTHS_FILE)
        if len(tokens) != meta["tokens"] or len(lengths) != meta["sequences"] or int(lengths.sum()) != meta["tokens"]:
            raise PackcliError(f"{directory}: the token spill does not match its record; remove it and run again")
        return Spill(tokens, learned, lengths, meta, maps)

    @staticmethod
    def in_memory(tokens: np.ndarray, lengths: np.ndarray, learned: np.ndarray | None) -> Spill:
        """The same interface over arrays (the Python API packs without touching disk)."""
        bits = None if learned is None else np.packbits(np.asarray(learned, dtype=bool), bitorder="little")
        return Spill(np.ascontiguousarray(tokens), bits, np.asarray(lengths, dtype=np.int64))


def _map(path: Path, dtype: np.dtype, maps: list) -> np.ndarray:
    size = path.stat().st_size
    if size == 0:
        return np.zeros(0, dtype=dtype)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    maps.append(m)
    return np.frombuffer(m, dtype=dtype, count=size // dtype.itemsize)


def open_complete(directory: Path, run_id: str) -> Spill | None:
    """The spill in `directory` if it is complete and was made by the same run, else None."""
    record = Path(directory) / COMPLETE_FILE
    try:
        meta = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if meta.get("run_id") != run_id:
        return None
    try:
        return Spill.open(directory)
    except (OSError, ValueError, KeyError, PackcliError):
        return None


def spill_size(directory: Path) -> int:
    directory = Path(directory)
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file()) if directory.is_dir() else 0


def remove_spill(directory: Path) -> None:
    if Path(directory).is_dir():
        shutil.rmtree(directory, ignore_errors=True)
