"""Input readers: JSON Lines, JSON arrays, Parquet, Arrow IPC and stdin, streamed in batches.

Public API:

    SUPPORTED_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json", ".json.gz", ".json.zst",
                          ".parquet", ".arrow")

    def expand_inputs(inputs: Sequence[str]) -> list[str]
    class BadRecords  # counts skipped records by reason, keeps the first few locations
    @dataclass class IdLists: values, offsets  # an "ids" column: every record's ids in one array
    @dataclass class RecordBatch: source, kind ("line"|"row"), positions, columns
    def read_batches(paths, fields, *, batch_size=1024, on_bad_record="fail", bad=None)
        -> Iterator[RecordBatch]

One small reader per format (`_read_jsonl`, `_read_json`, `_read_parquet`, `_read_arrow`)
sits behind `read_batches`; all check records with the same per-kind validators, so a
record is judged the same way whatever file it came from. Parquet and Arrow share one
columnar path. An "ids" column is an `IdLists`: one flat int64 array and offsets (Parquet
and Arrow fill it from Arrow's buffers, without a Python int per token).
"""

from __future__ import annotations

import contextlib
import glob
import gzip
import io
import json
import os
import re
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import orjson
import zstandard

from packcli.errors import PackcliError

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
JSON_SUFFIXES = (".json", ".json.gz", ".json.zst")
SUPPORTED_SUFFIXES = (*JSONL_SUFFIXES, *JSON_SUFFIXES, ".parquet", ".arrow")
FieldKind = Literal["text", "ids", "messages", "any"]
FIELD_KINDS = ("text", "ids", "messages", "any")
ON_BAD_RECORD_CHOICES = ("fail", "skip")
STDIN = "-"
STDIN_NAME = "<stdin>"
DATASET_STATE = "state.json"  # these two make a directory a `datasets.save_to_disk` dataset
DATASET_INFO = "dataset_info.json"
DATASET_DICT = "dataset_dict.json"  # a DatasetDict: one save_to_disk dataset per split

_GLOB_CHARS = frozenset("*?[")
_INT64_MAX = np.iinfo(np.int64).max
_MAX_DETAIL = 160  # long library messages would bury the location in the one-line error
_MAX_KEYS_SHOWN = 10
_READ_CHUNK = 1 << 20
BATCH_BUDGET = 1 << 20  # a batch ends at this many characters of text or token ids (or at batch_size records)


# ----------------------------------------------------------------------------- inputs


def _supported(path: str) -> bool:
    return path.lower().endswith(SUPPORTED_SUFFIXES)


def _supported_list() -> str:
    return ", ".join(SUPPORTED_SUFFIXES)


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _is_dataset(directory: str) -> bool:
    """save_to_disk writes both files; a folder of data that happens to hold a state.json is not a dataset."""
    return all(os.path.isfile(os.path.join(directory, name)) for name in (DATASET_STATE, DATASET_INFO))


def _is_dataset_dict(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, DATASET_DICT))


def _is_dataset_metadata(path: str) -> bool:
    """The JSON files save_to_disk writes next to its data: never records."""
    directory, name = os.path.split(path)
    directory = directory or "."
    if name == DATASET_DICT:
        return True
    return name in (DATASET_STATE, DATASET_INFO) and _is_dataset(directory)


def _dataset_files(directory: str) -> list[str]:
    """The Arrow files of a save_to_disk directory, in the order its state.json gives."""
    state_path = os.path.join(directory, DATASET_STATE)
    try:
        with open(state_path, "rb") as f:
            names = [entry["filename"] for entry in json.load(f)["_data_files"]]
    except OSError as e:
        raise PackcliError(f"{state_path}: cannot open ({e.strerror or _one_line(e)})") from None
    except (ValueError, KeyError, TypeError):
        raise PackcliError(f"{state_path}: not a datasets state.json (no '_data_files' list of file names)") from None
    paths = []
    for name in names:
        path = os.path.join(directory, str(name))
        if not os.path.isfile(path):
            raise PackcliError(f"{path}: listed in {state_path} but missing")
        paths.append(path)
    return paths


def _dataset_dict_refused(directory: str) -> PackcliError:
    """A DatasetDict holds several splits; reading them all into one output is rarely meant."""
    try:
        with open(os.path.join(directory, DATASET_DICT), "rb") as f:
            splits = [str(s) for s in json.load(f)["splits"]]
    except (OSError, ValueError, KeyError, TypeError):
        splits = []
    choices = ", ".join(os.path.join(directory, s) for s in splits) or "a split's directory"
    return PackcliError(f"{directory}: a datasets DatasetDict; give one split as input ({choices})")


def _files_in_directory(directory: str) -> list[str]:
    """Hidden files and folders are left out, as a shell glob would leave them out. A
    save_to_disk dataset inside counts as its data files, at its place in the sorted order."""
    if _is_dataset_dict(directory):
        raise _dataset_dict_refused(directory)
    if _is_dataset(directory):
        return _dataset_files(directory)
    found: list[tuple[str, list[str]]] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not _is_hidden(d)]
        for name in list(dirs):
            sub = os.path.join(root, name)
            if _is_dataset_dict(sub):
                raise _dataset_dict_refused(sub)
            if _is_dataset(sub):
                found.append((sub + os.sep, _dataset_files(sub)))
                dirs.remove(name)
        found.extend(
            (path, [path])
            for path in (os.path.join(root, name) for name in files if not _is_hidden(name) and _supported(name))
        )
    return [path for _, paths in sorted(found) for path in paths]


def _given_file(given: str) -> str:
    if not _supported(given):
        raise PackcliError(f"{given}: unsupported file type (supported: {_supported_list()})")
    if _is_dataset_metadata(given):
        directory = os.path.dirname(given) or "."
        raise PackcliError(f"{given}: metadata of a datasets save_to_disk directory; give the directory ({directory})")
    return given


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """Turn what the user typed into the exact list of files to read, failing early on typos."""
    if not inputs:
        raise PackcliError("no inputs given")
    paths: list[str] = []
    for given in inputs:
        if given == STDIN:
            paths.append(given)
        elif os.path.isdir(given):
            found = _files_in_directory(given)
            if not found:
                raise PackcliError(f"{given}: directory has no {_supported_list()} files")
            paths.extend(found)
        elif os.path.isfile(given):  # checked before globbing: 'shard[1].jsonl' may be a real name
            paths.append(_given_file(given))
        elif _GLOB_CHARS & set(given):
            found = sorted(
                p
                for p in glob.glob(given, recursive=True)
                if os.path.isfile(p) and _supported(p) and not _is_dataset_metadata(p)
            )
            if not found:
                raise PackcliError(f"{given}: pattern matches no {_supported_list()} files")
            paths.extend(found)
        elif os.path.exists(given):
            raise PackcliError(f"{given}: not a regular file or directory")
        else:
            raise PackcliError(f"{given}: no such file or directory")
    return paths


# ----------------------------------------------------------------------------- results


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

    def to_dict(self) -> dict:
        return {"total": self.total, "by_reason": dict(self.counts), "examples": list(self.examples)}


@dataclass(eq=False)
class IdLists:
    """Token id lists in one flat int64 array, so no Python object is made per token.

    Record i holds `values[offsets[i]:offsets[i + 1]]`; `ids[i]` is that slice (a view).
    In a RecordBatch, offsets[0] == 0 and offsets[-1] == len(values).
    """

    values: np.ndarray  # int64
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
        """One compact IdLists (a copy) from IdLists and lists of per-record arrays, in order."""
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
        values = np.concatenate(arrays).astype(np.int64, copy=False) if arrays else np.zeros(0, np.int64)
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
        return _location(self.source, self.kind, int(self.positions[i]))


def _location(source: str, kind: str, position: int) -> str:
    return f"{source}:{position}" if kind == "line" else f"{source} row {position}"


class _BatchBuilder:
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
        self._columns: dict[str, list] = {name: [] for name in self.names}

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
            part = {name: _rows(columns[name], done, done + take) for name in self.names}
            self.runs.append((positions[done : done + take], part))
            self.count += take
            done += take
            if self.full:
                yield self.take()  # type: ignore[misc]

    def _close_singles(self) -> None:
        if self._positions:
            self.runs.append((np.asarray(self._positions, dtype=np.int64), self._columns))
            self._positions, self._columns = [], {name: [] for name in self.names}

    @property
    def full(self) -> bool:
        return self.count >= self.batch_size or self.size >= BATCH_BUDGET

    def take(self) -> RecordBatch | None:
        if not self.count:
            return None
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
    if kind == "messages":
        return sum(len(message["content"]) for message in value)
    return len(value) if kind in ("text", "ids") else 0


def _sizes(column: Any, kind: str) -> np.ndarray:
    if isinstance(column, IdLists):
        return column.lengths
    return np.fromiter((_size(v, kind) for v in column), dtype=np.int64, count=len(column))


def _rows(column: Any, start: int, stop: int) -> Any:
    return column.slice(start, stop) if isinstance(column, IdLists) else column[start:stop]


# ----------------------------------------------------------------------------- validation


class _Bad(Exception):
    """A record that cannot be used: `reason` is the stable count key, `problem` the detail."""

    def __init__(self, reason: str, problem: str):
        super().__init__(problem)
        self.reason, self.problem = reason, problem


def _one_line(text: object) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= _MAX_DETAIL else line[: _MAX_DETAIL - 3] + "..."


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def _key_list(keys: Sequence[Any]) -> str:
    shown = ", ".join(_one_line(repr(k))[:40] for k in list(keys)[:_MAX_KEYS_SHOWN])
    more = len(keys) - _MAX_KEYS_SHOWN
    return shown + (f", ... ({more} more)" if more > 0 else "") if keys else "none"


def _wrong_type(what: str, value: Any, expected: str) -> _Bad:
    if value is None:
        return _Bad("wrong type", f"{what} is null")
    return _Bad("wrong type", f"{what} is {_describe(value)}, expected {expected}")


def _as_text(value: Any, name: str) -> str:
    if type(value) is str:
        if value:
            return value
        raise _Bad("empty text", f"field {name!r} is empty")
    raise _wrong_type(f"field {name!r}", value, "a string")


def _as_ids(value: Any, name: str) -> np.ndarray:
    if type(value) is not list:
        raise _wrong_type(f"field {name!r}", value, "a list of integers")
    if not value:
        raise _Bad("empty field", f"field {name!r} is an empty list")
    if set(map(type, value)) != {int}:  # bool and float would be silently converted by numpy
        i, item = next((i, x) for i, x in enumerate(value) if type(x) is not int)
        raise _wrong_type(f"field {name!r} item {i}", item, "an integer")
    try:
        return np.array(value, dtype=np.int64)
    except OverflowError:
        i = next(i for i, x in enumerate(value) if not -_INT64_MAX - 1 <= x <= _INT64_MAX)
        raise _Bad("wrong type", f"field {name!r} item {i} does not fit in int64") from None


SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
}


def _as_messages(value: Any, name: str) -> list:
    """Turns as {"role", "content"}; ShareGPT's {"from", "value"} is mapped to them."""
    if type(value) is not list:
        raise _wrong_type(f"field {name!r}", value, "a list of messages")
    if not value:
        raise _Bad("empty field", f"field {name!r} is an empty list")
    normalized = []
    for i, message in enumerate(value):
        if type(message) is not dict:
            raise _wrong_type(f"field {name!r} item {i}", message, "an object with 'role' and 'content'")
        if "role" not in message and "from" in message and "value" in message:
            message = _from_sharegpt(message, name, i)
        for key in ("role", "content"):
            if key not in message:
                raise _Bad(
                    "missing field",
                    f"field {name!r} item {i} has no {key!r} (keys present: {_key_list(list(message))})",
                )
            if type(message[key]) is not str:
                raise _wrong_type(f"field {name!r} item {i} {key!r}", message[key], "a string")
        normalized.append(message)
    return normalized


def _from_sharegpt(message: dict, name: str, i: int) -> dict:
    speaker = message["from"]
    role = SHAREGPT_ROLES.get(speaker) if type(speaker) is str else None
    if role is None:
        raise _Bad(
            "wrong type", f"field {name!r} item {i} 'from' is {speaker!r}, not one of {', '.join(SHAREGPT_ROLES)}"
        )
    return {"role": role, "content": message["value"]}


def _as_any(value: Any, name: str) -> Any:
    if value is None:
        raise _wrong_type(f"field {name!r}", value, "a value")
    return value


_VALIDATORS: dict[str, Callable[[Any, str], Any]] = {
    "text": _as_text,
    "ids": _as_ids,
    "messages": _as_messages,
    "any": _as_any,
}


def _check_encodable(value: Any, name: str, kind: str) -> None:
    """json.loads accepts "\\ud800"; such text would only blow up later, in the tokenizer."""
    strings = [value] if kind == "text" else [message[key] for message in value for key in ("role", "content")]
    for string in strings:
        if string.isascii():  # the common case, and free: a flag on the str
            continue
        try:
            string.encode("utf-8")
        except UnicodeEncodeError as e:
            raise _Bad(
                "invalid UTF-8",
                f"field {name!r} holds an unpaired surrogate ({string[e.start]!r}), not valid text",
            ) from None


# ----------------------------------------------------------------------------- JSON Lines


class _BrokenStream(Exception):
    """The compressed stream under a JSONL file ended early or is corrupt."""

    def __init__(self, reason: str, problem: str):
        super().__init__(problem)
        self.reason, self.problem = reason, problem


class _ZstdRaw(io.RawIOBase):
    """zstandard's stream_reader ends quietly on a cut-off file; this one notices.

    Decompresses frame after frame (several frames, unknown content sizes are fine) and raises
    EOFError when the input ends inside a frame.
    """

    def __init__(self, compressed: io.BufferedIOBase):
        self._compressed = compressed
        self._dctx = zstandard.ZstdDecompressor()
        self._frame = None  # decompressor of the frame in progress, None between frames
        self._pending = b""
        self._offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while self._offset >= len(self._pending):
            chunk = self._compressed.read(_READ_CHUNK)
            if not chunk:
                if self._frame is not None:
                    raise EOFError("compressed stream ended before the end of its last frame")
                return 0
            self._pending, self._offset = self._decompress(chunk), 0
        n = min(len(buffer), len(self._pending) - self._offset)
        buffer[:n] = self._pending[self._offset : self._offset + n]
        self._offset += n
        return n

    def _decompress(self, data: bytes) -> bytes:
        out = []
        while data:
            if self._frame is None:
                self._frame = self._dctx.decompressobj()
            out.append(self._frame.decompress(data))
            if self._frame.eof:
                data, self._frame = self._frame.unused_data, None
            else:
                data = b""
        return b"".join(out)


def _open_jsonl(path: str, closing: contextlib.ExitStack) -> tuple[Any, str | None, Any]:
    """Binary stream of the decompressed lines, the compression's name for messages, and the
    file underneath (whose position tells how much of the input is done)."""
    if path == STDIN:
        return sys.stdin.buffer, None, None  # not ours to close
    try:
        raw = closing.enter_context(open(path, "rb"))
    except OSError as e:
        raise PackcliError(f"{path}: cannot open ({e.strerror or _one_line(e)})") from None
    lowered = path.lower()
    if lowered.endswith(".gz"):
        return closing.enter_context(gzip.GzipFile(fileobj=raw, mode="rb")), "gzip", raw
    if lowered.endswith(".zst"):
        return closing.enter_context(io.BufferedReader(_ZstdRaw(raw), buffer_size=_READ_CHUNK)), "zstd", raw
    return raw, None, raw


def _position_of(raw_file, size: int) -> Callable[[], int]:
    """How far into its file the reader is; the whole file once it is closed."""

    def position() -> int:
        try:
            return raw_file.tell()
        except (ValueError, OSError):
            return size

    return position


@contextlib.contextmanager
def _stream_errors(compression: str | None, source: str) -> Iterator[None]:
    """Decompression failures become _BrokenStream; I/O errors are fatal."""
    try:
        yield
    except EOFError:
        raise _BrokenStream("truncated stream", f"truncated {compression} stream") from None
    except (gzip.BadGzipFile, zlib.error, zstandard.ZstdError) as e:
        raise _BrokenStream("corrupt stream", f"corrupt {compression} stream ({_one_line(e)})") from None
    except OSError as e:
        raise PackcliError(f"{source}: read error ({e.strerror or _one_line(e)})") from None


def _lines(stream, compression: str | None, source: str) -> Iterator[bytes]:
    with _stream_errors(compression, source):
        yield from stream


def _where(raw: bytes, offset: int, first_line: int | None) -> str:
    """'column C' of a byte offset in a record; 'line L column C' when a record of a JSON
    array spans lines and the offset is past its first line."""
    newline = raw.rfind(b"\n", 0, offset)
    if first_line is None or newline < 0:
        return f"column {offset + 1}"
    line = first_line + raw.count(b"\n", 0, offset)
    return f"line {line} column {offset - newline}"


def _malformed(text: str, first_line: int | None = None) -> _Bad:
    """Parse again, off the hot path, to turn the parser's complaint into a one-line problem."""
    try:
        json.loads(text)
    except RecursionError:
        return _Bad("malformed JSON", "malformed JSON (nested too deeply)")
    except json.JSONDecodeError as e:
        message = _one_line(e.msg.removesuffix(" at"))  # json says "Invalid control character at"
        where = f"column {e.colno}"
        if first_line is not None and e.lineno > 1:
            where = f"line {first_line + e.lineno - 1} {where}"
        return _Bad("malformed JSON", f"malformed JSON ({message} at {where})")
    except ValueError as e:  # e.g. an integer with more digits than Python converts
        return _Bad("malformed JSON", f"malformed JSON ({_one_line(e)})")
    return _Bad("malformed JSON", "malformed JSON")


def _parse_slowly(raw: bytes, first_line: int | None = None) -> Any:
    """The stdlib's json, for what orjson refused: it accepts a little more (NaN, Infinity,
    an escaped lone surrogate) and its complaints say where the problem is."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        where = _where(raw, e.start, first_line)
        raise _Bad("invalid UTF-8", f"invalid UTF-8 (byte 0x{raw[e.start]:02x} at {where})") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise _malformed(text.rstrip("\r\n"), first_line) from None  # without the newline the message is clearer


def _parse_line(raw: bytes, line_no: int, checks, first_line: int | None = None) -> list[Any]:
    """A record is what json.loads accepts. orjson reads the records it also accepts about
    twice as fast (171k lines of Python source: 1.6 s of CPU against 3.2 s). `first_line`
    is given for a record of a JSON array, which may span lines."""
    if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):  # editors on Windows add a BOM
        raw = raw[3:]
    try:
        record = orjson.loads(raw)  # checks UTF-8 and refuses lone surrogates itself
        check_surrogates = False
    except orjson.JSONDecodeError:
        record = _parse_slowly(raw, first_line)
        check_surrogates = True
    if type(record) is not dict:
        raise _Bad("not an object", f"record is {_describe(record)}, expected a JSON object")
    values = []
    for name, kind, validate in checks:
        if name not in record:
            raise _Bad("missing field", f"missing field {name!r} (fields present: {_key_list(list(record))})")
        value = validate(record[name], name)
        if check_surrogates and kind in ("text", "messages"):
            _check_encodable(value, name, kind)
        values.append(value)
    return values


def _read_jsonl(path: str, checks, builder: _BatchBuilder, report, bad: BadRecords) -> Iterator[RecordBatch]:
    with contextlib.ExitStack() as closing:
        stream, compression, raw_file = _open_jsonl(path, closing)
        if raw_file is not None:
            builder.consumed = _position_of(raw_file, os.path.getsize(path))
        yield from _read_lines(_lines(stream, compression, builder.source), checks, builder, report, bad)
    last = builder.take()
    if last is not None:
        yield last


def _read_lines(
    lines: Iterable[bytes], checks, builder: _BatchBuilder, report, bad: BadRecords
) -> Iterator[RecordBatch]:
    """Good records of JSON Lines, whatever file or stream the lines come from."""
    source = builder.source
    line_no = 0
    try:
        for line_no, raw in enumerate(lines, 1):
            if raw.isspace():  # blank lines are common in real files and not records
                continue
            bad.records_seen += 1
            try:
                values = _parse_line(raw, line_no, checks)
            except _Bad as b:
                report(f"{source}:{line_no}", b.reason, b.problem)
                continue
            builder.add(line_no, values)
            if builder.full:
                yield builder.take()  # type: ignore[misc]
    except _BrokenStream as broken:
        bad.records_seen += 1
        report(f"{source}:{line_no + 1}", broken.reason, broken.problem)


# ----------------------------------------------------------------------------- JSON arrays

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STRUCTURE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}"]', re.DOTALL)  # a lone '"': string not ended yet
_SPACE = re.compile(rb"[ \t\r\n]*")
_SCALAR = re.compile(rb'[^ \t\r\n,:\[\]{}"]*')
_CLOSES = {ord("{"): ord("}"), ord("["): ord("]")}
_BOM = b"\xef\xbb\xbf"


class _BrokenArray(Exception):
    """The file stops being one JSON array: no way to tell where the next record starts."""

    def __init__(self, line: int, problem: str):
        super().__init__(problem)
        self.line, self.problem = line, f"malformed JSON array ({problem})"


class _ArrayScanner:
    """Cuts a JSON array into the bytes of its elements without parsing them, so each record
    is parsed alone, by the rules of a JSON Lines record, and the file is never held whole.
    Strings are skipped by a regular expression and brackets counted, so a record costs a
    few steps per string and bracket, none per number. Tracks the line each element starts on.
    """

    def __init__(self, read: Callable[[int], bytes], prefix: bytes):
        self.read = read
        self.buf = bytearray(prefix)
        self.eof = False
        self.broken_stream: _BrokenStream | None = None  # raised once the data before it is used
        self.line = 1
        self.counted = 0  # lines are counted up to here
        self.line_start = 0  # where the line of `counted` starts (negative once compacted away)

    def more(self, start: int) -> bool:
        """Read on; as much again as the element in progress, so a huge one costs linear time.
        Where the stream breaks, what came before it is scanned first."""
        if self.broken_stream is not None:
            raise self.broken_stream
        if self.eof:
            return False
        wanted, before = max(_READ_CHUNK, len(self.buf) - start), len(self.buf)
        try:
            while len(self.buf) - before < wanted:
                chunk = self.read(wanted - (len(self.buf) - before))
                if not chunk:
                    self.eof = True
                    break
                self.buf += chunk
        except _BrokenStream as broken:
            if len(self.buf) == before:
                raise
            self.broken_stream = broken
        return len(self.buf) > before

    def line_of(self, pos: int) -> int:
        newline = self.buf.rfind(b"\n", self.counted, pos)
        if newline >= 0:
            self.line += self.buf.count(b"\n", self.counted, pos)
            self.line_start = newline + 1
        self.counted = pos
        return self.line

    def broken(self, pos: int, problem: str) -> _BrokenArray:
        return _BrokenArray(self.line_of(min(pos, len(self.buf))), problem)

    def found(self, pos: int) -> str:
        if pos >= len(self.buf):
            return "the end of the file"
        return repr(chr(self.buf[pos])) if self.buf[pos] < 128 else f"byte 0x{self.buf[pos]:02x}"

    def skip_space(self, pos: int) -> int:
        while True:
            end = _SPACE.match(self.buf, pos).end()  # type: ignore[union-attr]
            if end < len(self.buf) or not self.more(pos):
                return end
            pos = end

    def elements(self) -> Iterator[tuple[int, int, bytes]]:
        """(line, column, bytes) of each element; the caller checked that '[' comes first."""
        pos = self.skip_space(self.skip_space(0) + 1)
        if pos < len(self.buf) and self.buf[pos] == ord("]"):
            return self.after_array(pos + 1)
        while True:
            if pos >= _READ_CHUNK:  # drop what is done, at most once a chunk: amortised O(1) a byte
                self.line_of(pos)
                del self.buf[:pos]
                self.counted -= pos
                self.line_start -= pos
                pos = 0
            end = self.element_end(pos)
            line = self.line_of(pos)
            yield line, pos - self.line_start, bytes(self.buf[pos:end])
            pos = self.skip_space(end)
            if pos < len(self.buf) and self.buf[pos] == ord(","):
                pos = self.skip_space(pos + 1)
                if pos < len(self.buf) and self.buf[pos] == ord("]"):
                    raise self.broken(pos, "a ',' before the closing ']'")
            elif pos < len(self.buf) and self.buf[pos] == ord("]"):
                return self.after_array(pos + 1)
            else:
                raise self.broken(pos, f"expected ',' or ']' after a record, found {self.found(pos)}")

    def after_array(self, pos: int) -> None:
        pos = self.skip_space(pos)
        if pos < len(self.buf):
            raise self.broken(pos, f"{self.found(pos)} after the closing ']'")

    def element_end(self, start: int) -> int:
        if start >= len(self.buf):
            raise self.broken(start, "the file ends inside the array")
        first = self.buf[start]
        if first in _CLOSES:
            return self.bracketed_end(start)
        pattern = _STRING if first == ord('"') else _SCALAR
        while True:
            match = pattern.match(self.buf, start)
            if (match is not None and match.end() < len(self.buf)) or not self.more(start):
                break
        if match is None:
            raise self.broken(start, "a string that never ends")
        if match.end() == start:
            raise self.broken(start, f"expected a record, found {self.found(start)}")
        return match.end()

    def bracketed_end(self, start: int) -> int:
        stack: list[int] = []
        pos = start
        while True:
            match = _STRUCTURE.search(self.buf, pos)
            if match is None or (match.end() - match.start() == 1 and self.buf[match.start()] == ord('"')):
                pos = len(self.buf) if match is None else match.start()
                if not self.more(start):
                    what = "the file ends inside a record" if match is None else "a string that never ends"
                    raise self.broken(pos, what)
                continue
            pos = match.end()
            char = self.buf[match.start()]
            if char in _CLOSES:
                stack.append(_CLOSES[char])
            elif char != ord('"'):
                if not stack or stack.pop() != char:
                    raise self.broken(match.start(), f"{chr(char)!r} does not close the bracket before it")
                if not stack:
                    return pos


def _read_json(path: str, checks, builder: _BatchBuilder, report, bad: BadRecords) -> Iterator[RecordBatch]:
    """A JSON array of records, or JSON Lines under a .json name (as `datasets` reads them)."""
    source = builder.source
    with contextlib.ExitStack() as closing:
        stream, compression, raw_file = _open_jsonl(path, closing)
        builder.consumed = _position_of(raw_file, os.path.getsize(path))

        read_some = getattr(stream, "read1", stream.read)  # no more than one step of decompression

        def read(n: int) -> bytes:
            with _stream_errors(compression, source):
                return read_some(n)

        scanner = None
        try:
            prefix = read(_READ_CHUNK)
            while prefix.removeprefix(_BOM).isspace() and (chunk := read(_READ_CHUNK)):
                prefix += chunk
            if not prefix.removeprefix(_BOM).lstrip().startswith(b"["):
                lines = _prefixed_lines(prefix, _lines(stream, compression, source))
                yield from _read_lines(lines, checks, builder, report, bad)
            else:
                scanner = _ArrayScanner(read, prefix.removeprefix(_BOM))
                yield from _read_array(scanner, checks, builder, report, bad)
        except _BrokenStream as broken:
            bad.records_seen += 1
            line = scanner.line_of(len(scanner.buf)) if scanner is not None else 1
            report(f"{source}:{line}", broken.reason, broken.problem)
    last = builder.take()
    if last is not None:
        yield last


def _read_array(
    scanner: _ArrayScanner, checks, builder: _BatchBuilder, report, bad: BadRecords
) -> Iterator[RecordBatch]:
    """Each record is judged as a JSON Lines record is; where the array itself breaks, the
    rest of the file cannot be cut into records, so it counts as one bad record (the last)."""
    source = builder.source
    try:
        for line, column, raw in scanner.elements():
            bad.records_seen += 1
            try:
                values = _parse_line(b" " * column + raw, line, checks, first_line=line)  # columns as in the file
            except _Bad as b:
                report(f"{source}:{line}", b.reason, b.problem)
                continue
            builder.add(line, values)
            if builder.full:
                yield builder.take()  # type: ignore[misc]
    except _BrokenArray as broken:
        bad.records_seen += 1
        report(f"{source}:{broken.line}", "malformed JSON", broken.problem)


def _prefixed_lines(prefix: bytes, lines: Iterator[bytes]) -> Iterator[bytes]:
    """The lines of a stream whose first bytes were read already (to see what the file holds)."""
    start = 0
    while (end := prefix.find(b"\n", start)) >= 0:
        yield prefix[start : end + 1]
        start = end + 1
    rest = prefix[start:]
    for line in lines:
        if rest:
            line, rest = rest + line, b""
        yield line
    if rest:
        yield rest


# ----------------------------------------------------------------------------- Parquet and Arrow


def _is_string_type(t) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_list_type(t) -> bool:
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _has_string_fields(struct, names: tuple[str, str]) -> bool:
    present = {struct.field(i).name: struct.field(i).type for i in range(struct.num_fields)}
    return all(name in present and _is_string_type(present[name]) for name in names)


def _column_type_ok(t, kind: str) -> bool:
    import pyarrow as pa

    if kind == "text":
        return _is_string_type(t)
    if kind == "ids":
        return _is_list_type(t) and pa.types.is_integer(t.value_type)
    if kind == "messages":
        if not (_is_list_type(t) and pa.types.is_struct(t.value_type)):
            return False
        return _has_string_fields(t.value_type, ("role", "content")) or _has_string_fields(
            t.value_type, ("from", "value")
        )
    return True


_EXPECTED_COLUMN_TYPE = {
    "text": "a string",
    "ids": "a list of integers",
    "messages": "a list of structs with string 'role' and 'content' (or 'from' and 'value')",
}


def _check_columns(path: str, schema, fields: Mapping[str, str]) -> None:
    """Column problems affect every row, so they are fatal whatever --on-bad-record says."""
    for name, kind in fields.items():
        index = schema.get_field_index(name)
        if index < 0:
            raise PackcliError(f"{path}: no column {name!r} (columns: {_key_list(schema.names)})")
        column_type = schema.field(index).type
        if not _column_type_ok(column_type, kind):
            expected = _EXPECTED_COLUMN_TYPE[kind]
            raise PackcliError(f"{path}: column {name!r} has type {_one_line(column_type)}, expected {expected}")


def _checked(validate, value: Any, name: str) -> Any:
    try:
        return validate(value, name)
    except _Bad as b:
        return b


def _python_values(column) -> list[Any]:
    """Arrow happily stores invalid UTF-8 in a string column; find out row by row which."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        values = []
        for i in range(len(column)):
            try:
                values.append(column[i].as_py())
            except UnicodeDecodeError as e:
                values.append(_Bad("invalid UTF-8", f"invalid UTF-8 (byte 0x{e.object[e.start]:02x})"))
        return values


def _without_absent_keys(conversation: Any) -> Any:
    """A struct column with both role/content and from/value fields (ShareGPT and OpenAI
    turns in one table) holds nulls where a JSON object would have no such key: drop the
    null fields of the shape a turn does not use."""
    if type(conversation) is not list:
        return conversation
    out = []
    for m in conversation:
        if type(m) is dict:
            unused = ("role", "content") if m.get("role") is None and m.get("from") is not None else ("from", "value")
            m = {k: v for k, v in m.items() if not (k in unused and v is None)}
        out.append(m)
    return out


def _column_values(column, name: str, kind: str) -> list[Any]:
    """One value per row, or the row's _Bad: the validators of JSON records, row by row."""
    validate = _VALIDATORS[kind]
    values = _python_values(column)
    if kind == "messages":
        struct = column.type.value_type
        if struct.get_field_index("role") >= 0 and struct.get_field_index("from") >= 0:
            values = [v if isinstance(v, _Bad) else _without_absent_keys(v) for v in values]
    return [v if isinstance(v, _Bad) else _checked(validate, v, name) for v in values]


def _arrow_id_lists(column, name: str) -> tuple[IdLists, dict[int, _Bad]]:
    """A list<int> column's ids straight from Arrow buffers to one flat int64 array (sliced
    arrays and nulls allowed), and the rows that cannot be used, by row, with the problem
    the JSON path would name for them."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(column.type):
        column = column.cast(pa.list_(column.type.value_type))
    offsets = column.offsets.to_numpy().astype(np.int64)
    low, high = int(offsets[0]), int(offsets[-1])
    flat = column.values.slice(low, high - low)
    offsets -= low
    problems: dict[int, _Bad] = {}
    if column.null_count:
        for row in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)):
            problems[int(row)] = _Bad("wrong type", f"field {name!r} is null")
    for row in np.flatnonzero(offsets[1:] == offsets[:-1]):
        problems.setdefault(int(row), _Bad("empty field", f"field {name!r} is an empty list"))
    numbers = (
        flat.fill_null(0).to_numpy(zero_copy_only=False) if flat.null_count else flat.to_numpy(zero_copy_only=False)
    )
    null_items = flat.is_null().to_numpy(zero_copy_only=False) if flat.null_count else None
    huge = numbers > _INT64_MAX if numbers.dtype == np.uint64 else None
    for mask, problem in ((null_items, "is null"), (huge, "does not fit in int64")):
        if mask is None or not mask.any():
            continue
        where = np.flatnonzero(mask)
        rows = np.searchsorted(offsets, where, side="right") - 1
        rows, first = np.unique(rows, return_index=True)
        for row, at in zip(rows.tolist(), where[first].tolist()):
            problems.setdefault(row, _Bad("wrong type", f"field {name!r} item {at - offsets[row]} {problem}"))
    return IdLists(numbers.astype(np.int64, copy=False), offsets), problems


def _columnar_rows(
    batch, fields: Mapping[str, str], builder: _BatchBuilder, report, first_row: int
) -> Iterator[RecordBatch]:
    """The good rows of one Arrow record batch, in runs between the bad ones; a row's problem
    is that of its first field (in `fields` order) that has one."""
    columns: dict[str, Any] = {}
    problems: dict[int, _Bad] = {}
    for name, kind in fields.items():
        if kind == "ids":
            columns[name], found = _arrow_id_lists(batch.column(name), name)
        else:
            columns[name] = _column_values(batch.column(name), name, kind)
            found = {i: v for i, v in enumerate(columns[name]) if isinstance(v, _Bad)}
        for row, problem in found.items():
            problems.setdefault(row, problem)
    start = 0
    for row in [*sorted(problems), batch.num_rows]:
        if row > start:
            positions = np.arange(first_row + start, first_row + row, dtype=np.int64)
            yield from builder.extend(positions, {name: _rows(c, start, row) for name, c in columns.items()})
        if row < batch.num_rows:
            problem = problems[row]
            report(_location(builder.source, "row", first_row + row), problem.reason, problem.problem)
        start = row + 1


def _read_columnar(path: str, label: str, schema, batches, fields, builder: _BatchBuilder, report, bad: BadRecords):
    """Parquet and Arrow alike: Arrow record batches of at most batch_size rows."""
    import pyarrow as pa

    _check_columns(path, schema, fields)
    row = 0
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            break
        except (pa.ArrowException, OSError) as e:
            raise PackcliError(f"{path}: cannot read {label} file near row {row} ({_one_line(e)})") from None
        bad.records_seen += batch.num_rows
        yield from _columnar_rows(batch, fields, builder, report, row)
        row += batch.num_rows
    last = builder.take()
    if last is not None:
        yield last


def _read_parquet(path: str, fields: Mapping[str, str], builder: _BatchBuilder, report, bad: BadRecords):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(
            path, pre_buffer=False
        )  # pre-buffering keeps every row group read: memory would grow with the file
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, FileNotFoundError) or not os.path.exists(path):
            raise PackcliError(f"{path}: cannot open (No such file or directory)") from None
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            return  # an empty file simply holds no records
        raise PackcliError(f"{path}: cannot read Parquet file ({_one_line(e)})") from None
    try:
        size, total_rows = os.path.getsize(path), max(1, parquet.metadata.num_rows)
        batches = parquet.iter_batches(
            batch_size=_parquet_batch_rows(parquet, builder.batch_size), columns=list(fields)
        )
        done = [0]

        def counted():
            for batch in batches:
                yield batch
                done[0] += batch.num_rows

        builder.consumed = lambda: size * done[0] // total_rows
        yield from _read_columnar(path, "Parquet", parquet.schema_arrow, counted(), fields, builder, report, bad)
    finally:
        close = getattr(parquet, "close", None)
        if close is not None:
            close()


def _parquet_batch_rows(parquet, batch_size: int) -> int:
    """Rows per Arrow batch, so that long documents do not make a batch of hundreds of MB."""
    meta = parquet.metadata
    if meta.num_rows == 0:
        return batch_size
    row_bytes = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)) / meta.num_rows
    return int(max(1, min(batch_size, 4 * BATCH_BUDGET // max(row_bytes, 1))))


def _read_arrow(path: str, fields: Mapping[str, str], builder: _BatchBuilder, report, bad: BadRecords):
    """Arrow IPC, the stream format `datasets.save_to_disk` writes or the file format, memory-mapped."""
    import pyarrow as pa

    try:
        size = os.path.getsize(path)
        source = pa.memory_map(path) if size else None
    except (pa.ArrowException, OSError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else _one_line(e)
        raise PackcliError(f"{path}: cannot open ({reason})") from None
    if source is None:
        return  # an empty file simply holds no records
    with source:
        try:
            is_file_format = source.read(6) == b"ARROW1"
            source.seek(0)
            reader = pa.ipc.open_file(source) if is_file_format else pa.ipc.open_stream(source)
        except (pa.ArrowException, OSError) as e:
            raise PackcliError(f"{path}: cannot read Arrow file ({_one_line(e)})") from None
        done = [0]
        if is_file_format:
            whole = (reader.get_batch(i) for i in range(reader.num_record_batches))
            builder.consumed = lambda: size * done[0] // max(1, reader.num_record_batches)
        else:
            whole = iter(reader)
            builder.consumed = source.tell
        batches = _sliced(whole, builder.batch_size, done)
        yield from _read_columnar(path, "Arrow", reader.schema, batches, fields, builder, report, bad)


def _sliced(batches, size: int, done: list[int] | None) -> Iterator:
    """Record batches cut to at most `size` rows (zero-copy), so no batch is turned into
    Python objects whole, however large the writer made it."""
    for batch in batches:
        for start in range(0, batch.num_rows, size):
            yield batch.slice(start, size)
        if done is not None:
            done[0] += 1


# ----------------------------------------------------------------------------- entry point


def read_batches(
    paths: Sequence[str],
    fields: Mapping[str, FieldKind],
    *,
    batch_size: int = 1024,
    on_bad_record: str = "fail",
    bad: BadRecords | None = None,
) -> Iterator[RecordBatch]:
    """Stream good records from each path in order, in batches that never mix two sources.

    Under "fail" the first bad record raises PackcliError("<location>: <problem>"); under
    "skip" it is counted in `bad` and reading goes on. `bad.records_seen` counts all records.
    """
    if on_bad_record not in ON_BAD_RECORD_CHOICES:
        choices = ", ".join(ON_BAD_RECORD_CHOICES)
        raise PackcliError(f"--on-bad-record must be one of {choices}, not {on_bad_record!r}")
    if batch_size < 1:
        raise PackcliError(f"batch size must be at least 1, not {batch_size}")
    for name, kind in fields.items():
        if kind not in FIELD_KINDS:
            raise PackcliError(f"field {name!r}: unknown kind {kind!r} (kinds: {', '.join(FIELD_KINDS)})")
    return _read_all(list(paths), dict(fields), batch_size, on_bad_record, bad if bad is not None else BadRecords())


def _read_all(
    paths: list[str], fields: dict[str, str], batch_size: int, on_bad_record: str, bad: BadRecords
) -> Iterator[RecordBatch]:
    """The generator behind read_batches, kept apart so bad options fail at the call, not later."""

    def report(location: str, reason: str, problem: str) -> None:
        if on_bad_record == "fail":
            raise PackcliError(f"{location}: {problem}")
        bad.add(location, reason, problem)

    checks = [(name, kind, _VALIDATORS[kind]) for name, kind in fields.items()]
    for path in paths:
        lowered = path.lower()
        if path == STDIN or lowered.endswith(JSONL_SUFFIXES):
            source = STDIN_NAME if path == STDIN else path
            yield from _read_jsonl(path, checks, _BatchBuilder(source, "line", fields, batch_size), report, bad)
        elif lowered.endswith(JSON_SUFFIXES):
            yield from _read_json(path, checks, _BatchBuilder(path, "line", fields, batch_size), report, bad)
        elif lowered.endswith(".parquet"):
            yield from _read_parquet(path, fields, _BatchBuilder(path, "row", fields, batch_size), report, bad)
        elif lowered.endswith(".arrow"):
            yield from _read_arrow(path, fields, _BatchBuilder(path, "row", fields, batch_size), report, bad)
        else:
            raise PackcliError(f"{path}: unsupported file type (supported: {_supported_list()})")
