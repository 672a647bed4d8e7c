"""A mixture's source spills: each source's segments once, with the document each came from.

A mixture reads and tokenizes every source once, into a spill of its own (in input
order, never by length), and writes beside it the ordinal of each segment's document
(`documents.bin`, int64) and, with --group-by, its group id (`groups.bin`, int32). The
training output's spill is then made from these by taking each document as many times as
the mixture's rule says (plan/mixture.py): whole documents, their segments in order,
read here a chunk at a time so that memory holds one chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from packcli.write.spill import LEARNED_FILE, TOKENS_FILE, Spill, SpillWriter

DOCUMENTS_FILE = "documents.bin"  # int64 per segment: the ordinal of its document in its source (and side)
GROUPS_FILE = "groups.bin"  # int32 per segment, with --group-by
READ_TOKENS = 1 << 22  # tokens of a source spill read at a time


@dataclass
class SourceChunk:
    """Consecutive segments of a source spill: their tokens, lengths, learned flags (None:
    every token learned), document ordinals and group ids (None without --group-by)."""

    tokens: np.ndarray
    lengths: np.ndarray
    learned: np.ndarray | None
    documents: np.ndarray
    groups: np.ndarray | None

    def select(self, keep: np.ndarray) -> SourceChunk:
        """The segments where `keep` is true, in order."""
        tokens_kept = np.repeat(keep, self.lengths)
        return SourceChunk(
            self.tokens[tokens_kept],
            self.lengths[keep],
            None if self.learned is None else self.learned[tokens_kept],
            self.documents[keep],
            None if self.groups is None else self.groups[keep],
        )


class SourceSpillWriter:
    """A source's spill in input order, with each segment's document ordinal (and group)."""

    def __init__(self, directory: Path, token_dtype: np.dtype, masked: bool, grouped: bool, durable: bool = False):
        """`durable`: fsynced whatever the boot (a spill another machine may read)."""
        self.directory = Path(directory)
        self.spill = SpillWriter(self.directory, token_dtype, masked, durable)
        self._documents: BinaryIO = open(self.directory / DOCUMENTS_FILE, "wb")
        self._groups: BinaryIO | None = open(self.directory / GROUPS_FILE, "wb") if grouped else None

    def append(
        self,
        tokens: np.ndarray,
        lengths: np.ndarray,
        learned: np.ndarray | None,
        documents: np.ndarray,
        groups: np.ndarray | None = None,
    ) -> None:
        """Segments of consecutive documents; `documents`: each segment's ordinal."""
        self.spill.append(tokens, lengths, learned)
        self._documents.write(np.ascontiguousarray(documents, dtype=np.int64).data)
        if self._groups is not None:
            assert groups is not None  # a grouped spill has a group per segment
            self._groups.write(np.ascontiguousarray(groups, dtype=np.int32).data)

    def finish(self, meta: dict[str, Any]) -> Spill:
        for f in (self._documents, self._groups):
            if f is not None:
                f.close()
        return self.spill.finish(meta)

    def abort(self) -> None:
        for f in (self._documents, self._groups):
            if f is not None and not f.closed:
                f.close()
        self.spill.abort()


def read_source(spill: Spill, chunk_tokens: int = READ_TOKENS) -> Iterator[SourceChunk]:
    """The segments of a source spill in order, about `chunk_tokens` tokens at a time (at
    least one segment), read front to back from its files."""
    assert spill.directory is not None
    directory = spill.directory
    grouped = (directory / GROUPS_FILE).is_file()
    carry = np.zeros(0, dtype=bool)  # learned flags read past the last chunk (a byte holds 8)
    with ExitStack() as files:
        tokens_file = files.enter_context(open(directory / TOKENS_FILE, "rb"))
        learned_file = files.enter_context(open(directory / LEARNED_FILE, "rb")) if spill.masked else None
        documents_file = files.enter_context(open(directory / DOCUMENTS_FILE, "rb"))
        groups_file = files.enter_context(open(directory / GROUPS_FILE, "rb")) if grouped else None
        for lengths in _length_runs(spill, chunk_tokens):
            count, total = len(lengths), int(lengths.sum())
            tokens = np.fromfile(tokens_file, dtype=spill.token_dtype, count=total)
            learned = None
            if learned_file is not None:
                need = total - len(carry)
                more = np.fromfile(learned_file, dtype=np.uint8, count=max(0, -(-need // 8)))
                bits = np.concatenate([carry, np.unpackbits(more, bitorder="little").astype(bool)])
                learned, carry = bits[:total], bits[total:]
            documents = np.fromfile(documents_file, dtype=np.int64, count=count)
            groups = None if groups_file is None else np.fromfile(groups_file, dtype=np.int32, count=count)
            yield SourceChunk(tokens, lengths, learned, documents, groups)


def segment_stream(spill: Spill) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(document ordinal, length) of every segment, a chunk at a time, without the tokens."""
    assert spill.directory is not None
    with open(spill.directory / DOCUMENTS_FILE, "rb") as documents_file:
        for lengths in spill.length_batches(1 << 20):
            yield np.fromfile(documents_file, dtype=np.int64, count=len(lengths)), lengths


def _length_runs(spill: Spill, chunk_tokens: int) -> Iterator[np.ndarray]:
    """The spill's lengths cut into runs of about `chunk_tokens` tokens each."""
    held: list[np.ndarray] = []
    held_tokens = 0
    for lengths in spill.length_batches(1 << 16):
        while len(lengths):
            ends = np.cumsum(lengths)
            take = int(np.searchsorted(ends, chunk_tokens - held_tokens, side="left")) + 1
            take = min(take, len(lengths))
            held.append(lengths[:take])
            held_tokens += int(ends[take - 1])
            lengths = lengths[take:]
            if held_tokens >= chunk_tokens:
                yield np.concatenate(held)
                held, held_tokens = [], 0
    if held:
        yield np.concatenate(held)
