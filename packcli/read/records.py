"""What readers hand on: RecordBatch (good records of one source, with their locations),
IdLists (an "ids" column as one flat array), BadRecords (what was skipped), and the
BatchBuilder that cuts records into batches bounded in count and in size."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

BATCH_BUDGET = 1 << 20  # a batch ends at this many characters of text or token ids (or at batch_size records)

Report = Callable[[str, str, str], None]  # (location, reason, problem): raises under "fail", counts under "skip"


@dataclass
class BadRecords:
    """Counts skipped records by reason and keeps the first few locations (10 by default).

    `records_seen` counts every record read, good or bad (blank JSONL lines are not records),
    so the report can say how many documents were read.
    """

    max_examples: int = 10
    counts: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    records_seen: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, location: str, reason: str, problem: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if len(self.examples) < self.max_examples:
            self.examples.append(f"{location}: {problem}")

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "by_reason": dict(self.counts), "examples": list(self.examples)}


@dataclass(eq=False)
class IdLists:
    """Token id lists in one flat integer array, so no Python object is made per token.

    Record i holds `values[offsets[i]:offsets[i + 1]]`; `ids[i]` is that slice (a view).
    In a RecordBatch, offsets[0] == 0 and offsets[-1] == len(values). Values keep the
    integer type they were stored in (int64 from JSON; a Parquet list<int32> stays int32,
    half the bytes to move), except uint64, which becomes int64.
    """

    values: np.ndarray  # any integer dtype but uint64
    offsets: np.ndarray  # int64, one more than there are records, non-decreasing

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"record {i} of {n}")
        i %= n
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    def slice(self, start: int, stop: int) -> IdLists:
        """Records start..stop-1, sharing this object's arrays."""
        return IdLists(self.values, self.offsets[start : stop + 1])

    @classmethod
    def concat(cls, parts: Sequence[IdLists | list[np.ndarray]]) -> IdLists:
        """One compact IdLists (a copy) from IdLists and lists of per-record arrays, in order.
        Always a copy: a view would keep the reader's whole Arrow batch alive in the queues
        between the threads, and Arrow's memory pool then holds more memory at its peak."""
        arrays: list[np.ndarray] = []
        lengths: list[np.ndarray] = []
        for part in parts:
            if isinstance(part, IdLists):
                arrays.append(part.values[part.offsets[0] : part.offsets[-1]])
                lengths.append(part.lengths)
            else:
                arrays.extend(part)
                lengths.append(np.fromiter(map(len, part), dtype=np.int64, count=len(part)))
        offsets = np.zeros(sum(map(len, lengths)) + 1, dtype=np.int64)
        if len(offsets) > 1:
            np.cumsum(np.concatenate(lengths), out=offsets[1:])
        values = np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
        if values.dtype == np.uint64 or values.dtype.kind not in "iu":
            values = values.astype(np.int64)
        return cls(values, offsets)


@dataclass
class RecordBatch:
    """Good records from one source, with where each came from so later errors can point back.

    `columns[name]` is a list of values, one per record, except for "ids" fields: an IdLists.
    """

    source: str
    kind: str  # "line" (JSON, 1-based) or "row" (Parquet and Arrow, 0-based)
    positions: np.ndarray
    columns: dict[str, Any]
    source_bytes: int = 0  # bytes of the source file consumed when this batch was cut (for progress)

    def __len__(self) -> int:
        return len(self.positions)

    def location(self, i: int) -> str:
        return format_location(self.source, self.kind, int(self.positions[i]))


def format_location(source: str, kind: str, position: int) -> str:
    return f"{source}:{position}" if kind == "line" else f"{source} row {position}"


class BatchBuilder:
    """Collects good records of one source, one at a time (JSON) or in runs (Parquet and
    Arrow, whose ids stay flat), and cuts them into batches of batch_size."""

    def __init__(self, source: str, kind: str, fields: Mapping[str, str], batch_size: int):
        self.source, self.kind, self.batch_size = source, kind, batch_size
        self.names = list(fields)
        self.kinds = dict(fields)
        self.ids_names = {name for name, k in fields.items() if k == "ids"}
        self.consumed: Callable[[], int] = lambda: 0
        self._reset()

    def _reset(self) -> None:
        self.count = 0
        self.size = 0  # characters of text and ids so far: a batch also ends at BATCH_BUDGET
        self.runs: list[tuple[np.ndarray, dict[str, Any]]] = []  # (positions, columns) in order
        self._positions: list[int] = []  # single records since the last run
        self._columns: dict[str, list[Any]] = {name: [] for name in self.names}

    def add(self, position: int, values: Sequence[Any]) -> None:
        self._positions.append(position)
        for name, value in zip(self.names, values):
            self._columns[name].append(value)
            self.size += _size(value, self.kinds[name])
        self.count += 1

    def extend(self, positions: np.ndarray, columns: Mapping[str, Any]) -> Iterator[RecordBatch]:
        """Add a run of good records (lists, or IdLists for ids), yielding each batch it fills."""
        done, total = 0, len(positions)
        sizes = sum(_sizes(columns[name], self.kinds[name]) for name in self.names)
        ends = np.cumsum(sizes)
        while done < total:
            before = int(ends[done - 1]) if done else 0
            fit = int(np.searchsorted(ends, before + BATCH_BUDGET - self.size, side="left")) + 1 - done
            take = max(1, min(total - done, self.batch_size - self.count, fit))
            self.size += int(ends[done + take - 1]) - before
            self._close_singles()
            part = {name: slice_rows(columns[name], done, done + take) for name in self.names}
            self.runs.append((positions[done : done + take], part))
            self.count += take
            done += take
            if self.full:
                yield self.take()

    def _close_singles(self) -> None:
        if self._positions:
            self.runs.append((np.asarray(self._positions, dtype=np.int64), self._columns))
            self._positions, self._columns = [], {name: [] for name in self.names}

    @property
    def full(self) -> bool:
        return self.count >= self.batch_size or self.size >= BATCH_BUDGET

    def rest(self) -> Iterator[RecordBatch]:
        """The last, partly filled batch of a source, if any records are left."""
        if self.count:
            yield self.take()

    def take(self) -> RecordBatch:
        """The records collected so far as one batch; call when `full` (or via `rest`)."""
        assert self.count, "no records to take"
        self._close_singles()
        positions = np.concatenate([p for p, _ in self.runs]) if len(self.runs) > 1 else self.runs[0][0]
        columns: dict[str, Any] = {}
        for name in self.names:
            parts = [c[name] for _, c in self.runs]
            if name in self.ids_names:
                columns[name] = IdLists.concat(parts)
            else:
                columns[name] = parts[0] if len(parts) == 1 else [v for part in parts for v in part]
        batch = RecordBatch(self.source, self.kind, positions, columns, self.consumed())
        self._reset()
        return batch


def _size(value: Any, kind: str) -> int:
    """What a record weighs in a batch: characters of text, or token ids."""
    if kind == "messages" or (kind == "text_or_messages" and type(value) is list):
        return sum(len(message["content"]) for message in value)
    if kind == "text_or_messages":
        return len(value)
    return len(value) if kind in ("text", "ids") else 0


def _sizes(column: Any, kind: str) -> np.ndarray:
    if isinstance(column, IdLists):
        return column.lengths
    return np.fromiter((_size(v, kind) for v in column), dtype=np.int64, count=len(column))


def slice_rows(column: Any, start: int, stop: int) -> Any:
    return column.slice(start, stop) if isinstance(column, IdLists) else column[start:stop]
