"""A mixture's sources read: each source's documents split by side of the held-out
split, segmented side by side, and spilled with each segment's document ordinal
(write/sources.py), by the local engine in one part per side or by Ray tasks in one part
per piece of the input.

A document's side is a hash of its key (read/keys.py): --holdout-key's field, else its
--group-by group, else what it says. Ordinals count a side's documents in input order;
a part's are its own, from 0, and `Side` adds each part's base, so every engine numbers
the documents alike.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core.flow import Timer
from packcli.core.options import PackOptions
from packcli.engine.ingest import UNLEARNED_EXAMPLES, IngestCounts, TokenStream
from packcli.engine.job import Progress, bad_dict, make_segmenter
from packcli.plan.grouping import GroupTable
from packcli.read.checks import FieldKind
from packcli.read.keys import batch_hashes, held_out
from packcli.read.records import BadRecords, RecordBatch
from packcli.tokenize.sequences import SequenceBatch
from packcli.tokenize.setup import TokenSetup
from packcli.write import spill as spilling
from packcli.write.columns import ids_dtype
from packcli.write.manifest import BadRecordCounts
from packcli.write.sources import SourceChunk, SourceSpillWriter, read_source, segment_stream
from packcli.write.spill import Spill

TRAIN, VALIDATION = "train", "validation"


@dataclass
class Side:
    """One source's documents on one side of the split, once read: its spill parts in
    input order (each part's documents numbered from `bases[i]`; its group ids mapped
    through `remaps[i]` when parts keep tables of their own) and its tallies."""

    parts: list[Spill]
    bases: list[int]
    counts: IngestCounts
    documents: int  # records that became sequences
    kept: int  # of those, the documents left with a segment
    remaps: list[np.ndarray | None] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(part.tokens for part in self.parts)

    @property
    def sequences(self) -> int:
        return sum(part.sequences for part in self.parts)

    def stream(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(document ordinal, length) of every segment, a chunk at a time."""
        for part, base in zip(self.parts, self.bases):
            for documents, lengths in segment_stream(part):
                yield documents + base, lengths

    def chunks(self) -> Iterator[SourceChunk]:
        """The segments, a chunk at a time, ordinals and group ids made the whole side's."""
        for i, (part, base) in enumerate(zip(self.parts, self.bases)):
            remap = self.remaps[i] if i < len(self.remaps) else None
            for chunk in read_source(part):
                chunk.documents = chunk.documents + base
                if remap is not None and chunk.groups is not None:
                    chunk.groups = remap[chunk.groups]
                yield chunk
            part.close()

    def close(self) -> None:
        for part in self.parts:
            part.close()


@dataclass
class SourceRead:
    """One source, read: where from, its readers' tally, and its sides."""

    name: str
    kind: str
    paths: list[str]
    bad: BadRecordCounts
    sides: dict[str, Side]
    groups: dict[str, Any] | None = None  # --group-by: the table of every source read so far (to_dict)


@dataclass(frozen=True)
class SourcesToRead:
    """What the Ray engine reads of a mixture: each source (name, options, expanded paths,
    the tokenizer backend the driver chose for it), the sides of the split, and where the
    side spills go, for which run."""

    sources: list[tuple[str, PackOptions, list[str], str]]
    sides: tuple[str, ...]
    directory: Path
    run_id: str
    fingerprint: str | None


def side_dir(directory: Path, source: int, side: str, part: int | None = None) -> Path:
    """Where a source's side spill (or one part of it) goes."""
    name = f"{source:05d}-{side}" if part is None else f"{source:05d}-{part:05d}-{side}"
    return directory / name


def complete_sides(dirs: dict[str, Path], run_id: str) -> dict[str, Spill] | None:
    """The side spills in `dirs`, if every one is complete and made by this run."""
    found: dict[str, Spill] = {}
    for side, directory in dirs.items():
        spill = spilling.open_complete(directory, run_id)
        if spill is None:
            for other in found.values():
                other.close()
            return None
        found[side] = spill
    return found


def side_of_record(spill: Spill) -> Side:
    """A one-part Side from its spill's record."""
    meta = spill.meta
    return Side([spill], [0], IngestCounts(**meta["counts"]), int(meta["documents"]), int(meta["kept"]))


def key_fields(opts: PackOptions) -> dict[str, FieldKind]:
    """The field the held-out side is read from, where it is one of its own."""
    if opts.holdout is None or opts.holdout_key is None:
        return {}
    return {opts.holdout_key: "scalar"}


class SourceReader:
    """One source (or one part of it) read into its side spills: each batch's sequences
    split by side, each side segmented on its own (so its counts are its own), each
    segment written with its document's ordinal on that side."""

    def __init__(
        self,
        opts: PackOptions,
        setup: TokenSetup,
        dirs: dict[str, Path],
        run_id: str,
        groups: GroupTable | None,
        timer: Timer,
        durable: bool = False,
    ):
        self.opts, self.setup, self.run_id, self.timer = opts, setup, run_id, timer
        self.groups = groups
        masked = setup.builder.labels != "text"
        dtype = ids_dtype(setup.vocab_size)
        grouped = groups is not None
        self.writers = {
            side: SourceSpillWriter(directory, dtype, masked, grouped, durable) for side, directory in dirs.items()
        }
        self.segmenters = {side: make_segmenter(opts, setup, IngestCounts(), groups) for side in dirs}
        self.documents = dict.fromkeys(dirs, 0)
        self.kept = dict.fromkeys(dirs, 0)

    def read(self, stream: TokenStream, bad: BadRecords, progress: Progress | None = None) -> dict[str, Spill]:
        """Every batch of `stream` into the side spills; the complete spills, their
        records holding the counts, the readers' tally and the documents."""
        try:
            for batch, sequences in stream:
                with self.timer.stage("spill"):
                    self._batch(batch, sequences)
                if progress is not None:
                    progress(len(sequences.lengths), int(sequences.lengths.sum()), 0, None)
            spills = {}
            for side, writer in self.writers.items():
                meta: dict[str, Any] = {
                    "run_id": self.run_id,
                    "counts": self.segmenters[side].counts.to_dict(),
                    "bad": bad_dict(bad),
                    "documents": self.documents[side],
                    "kept": self.kept[side],
                    "timings": dict(self.timer.seconds),
                }
                if self.groups is not None:
                    meta["groups"] = self.groups.to_dict()
                spills[side] = writer.finish(meta)
            return spills
        except BaseException:
            for writer in self.writers.values():
                writer.abort()
            raise
        finally:
            stream.close()

    def _batch(self, batch: RecordBatch, sequences: SequenceBatch) -> None:
        for side, members in self._sides_of(batch, len(sequences.lengths)):
            if not len(members):
                continue
            own = _take_sequences(sequences, members)
            values = None
            if self.groups is not None:
                column = batch.columns[self.groups.field]
                values = [column[i] for i in members.tolist()]
            segmenter = self.segmenters[side]
            tokens, lengths, learned = segmenter(own, functools.partial(_located, batch, members), values)
            owners = segmenter.batch_owners
            ids = None if self.groups is None else segmenter.group_ids.take(len(lengths))
            self.writers[side].append(tokens, lengths, learned, self.documents[side] + owners, ids)
            self.documents[side] += len(members)
            self.kept[side] += int((np.diff(owners) != 0).sum()) + 1 if len(owners) else 0

    def _sides_of(self, batch: RecordBatch, n: int) -> list[tuple[str, np.ndarray]]:
        """The sequences of the batch on each side, by index, in order."""
        everyone = np.arange(n, dtype=np.int64)
        if self.opts.holdout is None:
            return [(TRAIN, everyone)]
        out = held_out(batch_hashes(batch, self._key_columns()), self.opts.holdout)
        return [(TRAIN, everyone[~out]), (VALIDATION, everyone[out])]

    def _key_columns(self) -> list[str]:
        """What a document's side is a hash of: --holdout-key's field, else its group
        (--group-by: a group stays on one side), else what it says."""
        if self.opts.holdout_key is not None:
            return [self.opts.holdout_key]
        if self.opts.group_by is not None:
            return [self.opts.group_by]
        return list(self.setup.builder.fields)


def _located(batch: RecordBatch, members: np.ndarray, j: int) -> str:
    """Where sequence j of a side's part of a batch came from."""
    return batch.location(int(members[j]))


def _take_sequences(batch: SequenceBatch, members: np.ndarray) -> SequenceBatch:
    """The sequences `members` of a batch, in order."""
    if len(members) == len(batch.lengths):
        return batch
    tokens = np.repeat(np.isin(np.arange(len(batch.lengths)), members), batch.lengths)
    return SequenceBatch(
        batch.tokens[tokens], batch.lengths[members], None if batch.labels is None else batch.labels[tokens], 0
    )


def merged_counts(parts: list[IngestCounts]) -> IngestCounts:
    """Tallies of consecutive parts as one: numbers added, examples in order as one keeps them."""
    total = IngestCounts()
    for counts in parts:
        for key, value in counts.to_dict().items():
            if isinstance(value, list):
                getattr(total, key).extend(value[: max(0, UNLEARNED_EXAMPLES - len(getattr(total, key)))])
            else:
                setattr(total, key, getattr(total, key) + int(value))
    return total


def merged_bad(parts: list[BadRecordCounts]) -> BadRecordCounts:
    """Readers' tallies of consecutive parts as one (the first examples kept)."""
    merged: BadRecordCounts = {"read": 0, "skipped": 0, "by_reason": {}, "examples": []}
    for bad in parts:
        merged["read"] += int(bad["read"])
        merged["skipped"] += int(bad["skipped"])
        for reason, count in bad["by_reason"].items():
            merged["by_reason"][reason] = merged["by_reason"].get(reason, 0) + int(count)
        merged["examples"].extend(bad["examples"])
    merged["examples"] = merged["examples"][: BadRecords.max_examples]
    return merged
