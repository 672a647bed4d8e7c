"""JSON Lines records, plain or gzip/zstd compressed, from files or stdin; and the parsing of
one JSON record, which JSON arrays share."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

import orjson
import zstandard

from packcli.core import storage
from packcli.core.errors import PackcliError
from packcli.read.checks import OPTIONAL_KINDS, Check, RecordProblem, check_encodable, describe, key_list, one_line
from packcli.read.inputs import STDIN
from packcli.read.records import BadRecords, BatchBuilder, RecordBatch, Report

READ_CHUNK = 1 << 20
BinaryStream = BinaryIO | io.BufferedIOBase  # a file, stdin's buffer, or a decompressor over a file


class BrokenStream(Exception):
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
        self._frame: zstandard.ZstdDecompressionObj | None = (
            None  # decompressor of the frame in progress, None between frames
        )
        self._pending = b""
        self._offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._offset >= len(self._pending):
            chunk = self._compressed.read(READ_CHUNK)
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
        out: list[bytes] = []
        while data:
            if self._frame is None:
                self._frame = self._dctx.decompressobj()
            out.append(self._frame.decompress(data))
            if self._frame.eof:
                data, self._frame = self._frame.unused_data, None
            else:
                data = b""
        return b"".join(out)


def open_stream(path: str, closing: contextlib.ExitStack) -> tuple[BinaryStream, str | None, BinaryIO | None]:
    """Binary stream of the decompressed lines, the compression's name for messages, and the
    file underneath (whose position tells how much of the input is done)."""
    if path == STDIN:
        return sys.stdin.buffer, None, None  # not ours to close
    try:
        raw = closing.enter_context(storage.open_input(path))
    except OSError as e:
        raise PackcliError(f"{path}: cannot open ({e.strerror or one_line(e)})") from None
    lowered = path.lower()
    if lowered.endswith(".gz"):
        return closing.enter_context(gzip.GzipFile(fileobj=raw, mode="rb")), "gzip", raw
    if lowered.endswith(".zst"):
        return closing.enter_context(io.BufferedReader(_ZstdRaw(raw), buffer_size=READ_CHUNK)), "zstd", raw
    return raw, None, raw


def position_of(raw_file: BinaryIO, size: int) -> Callable[[], int]:
    """How far into its file the reader is; the whole file once it is closed."""

    def position() -> int:
        try:
            return raw_file.tell()
        except (ValueError, OSError):
            return size

    return position


@contextlib.contextmanager
def stream_errors(compression: str | None, source: str) -> Iterator[None]:
    """Decompression failures become BrokenStream; I/O errors are fatal."""
    try:
        yield
    except EOFError:
        raise BrokenStream("truncated stream", f"truncated {compression} stream") from None
    except (gzip.BadGzipFile, zlib.error, zstandard.ZstdError) as e:
        raise BrokenStream("corrupt stream", f"corrupt {compression} stream ({one_line(e)})") from None
    except OSError as e:
        raise PackcliError(f"{source}: read error ({e.strerror or one_line(e)})") from None


def stream_lines(stream: BinaryStream, compression: str | None, source: str) -> Iterator[bytes]:
    with stream_errors(compression, source):
        yield from stream


def _where(raw: bytes, offset: int, first_line: int | None) -> str:
    """'column C' of a byte offset in a record; 'line L column C' when a record of a JSON
    array spans lines and the offset is past its first line."""
    newline = raw.rfind(b"\n", 0, offset)
    if first_line is None or newline < 0:
        return f"column {offset + 1}"
    line = first_line + raw.count(b"\n", 0, offset)
    return f"line {line} column {offset - newline}"


def _malformed(text: str, first_line: int | None = None) -> RecordProblem:
    """Parse again, off the hot path, to turn the parser's complaint into a one-line problem."""
    try:
        json.loads(text)
    except RecursionError:
        return RecordProblem("malformed JSON", "malformed JSON (nested too deeply)")
    except json.JSONDecodeError as e:
        message = one_line(e.msg.removesuffix(" at"))  # json says "Invalid control character at"
        where = f"column {e.colno}"
        if first_line is not None and e.lineno > 1:
            where = f"line {first_line + e.lineno - 1} {where}"
        return RecordProblem("malformed JSON", f"malformed JSON ({message} at {where})")
    except ValueError as e:  # e.g. an integer with more digits than Python converts
        return RecordProblem("malformed JSON", f"malformed JSON ({one_line(e)})")
    return RecordProblem("malformed JSON", "malformed JSON")


def _parse_slowly(raw: bytes, first_line: int | None = None) -> Any:
    """The stdlib's json, for what orjson refused: it accepts a little more (NaN, Infinity,
    an escaped lone surrogate) and its complaints say where the problem is."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        where = _where(raw, e.start, first_line)
        raise RecordProblem("invalid UTF-8", f"invalid UTF-8 (byte 0x{raw[e.start]:02x} at {where})") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise _malformed(text.rstrip("\r\n"), first_line) from None  # without the newline the message is clearer


def parse_record(raw: bytes, line_no: int, checks: list[Check], first_line: int | None = None) -> list[Any]:
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
        raise RecordProblem("not an object", f"record is {describe(record)}, expected a JSON object")
    values: list[Any] = []
    for name, kind, validate in checks:
        if name not in record:
            if kind in OPTIONAL_KINDS:
                values.append(None)
                continue
            raise RecordProblem("missing field", f"missing field {name!r} (fields present: {key_list(list(record))})")
        value = validate(record[name], name)
        if check_surrogates and kind in ("text", "messages", "text_or_messages"):
            check_encodable(value, name, kind)
        values.append(value)
    return values


def read_record_jsonl(
    path: str,
    checks: list[Check],
    builder: BatchBuilder,
    report: Report,
    bad: BadRecords,
    section: tuple[int, ...] | None = None,
) -> Iterator[RecordBatch]:
    """The whole file, or (plain JSON Lines only) the section (start byte, end byte, number
    of the line at start) of it, whose bounds are line starts."""
    with contextlib.ExitStack() as closing:
        stream, compression, raw_file = open_stream(path, closing)
        if raw_file is not None:
            builder.consumed = position_of(raw_file, storage.size(path))
        lines = stream_lines(stream, compression, builder.source)
        first_line = 1
        if section is not None and raw_file is not None and compression is None:
            start, end, first_line = section
            raw_file.seek(start)
            lines = _bytes_of_lines(lines, end - start)
        yield from read_lines(lines, checks, builder, report, bad, first_line)
    yield from builder.rest()


def _bytes_of_lines(lines: Iterable[bytes], size: int) -> Iterator[bytes]:
    """The lines that make up the next `size` bytes."""
    for line in lines:
        if size <= 0:
            return
        size -= len(line)
        yield line


def read_lines(
    lines: Iterable[bytes],
    checks: list[Check],
    builder: BatchBuilder,
    report: Report,
    bad: BadRecords,
    first_line: int = 1,
) -> Iterator[RecordBatch]:
    """Good records of JSON Lines, whatever file or stream the lines come from."""
    source = builder.source
    line_no = first_line - 1
    try:
        for line_no, raw in enumerate(lines, first_line):
            if raw.isspace():  # blank lines are common in real files and not records
                continue
            bad.records_seen += 1
            try:
                values = parse_record(raw, line_no, checks)
            except RecordProblem as b:
                report(f"{source}:{line_no}", b.reason, b.problem)
                continue
            builder.add(line_no, values)
            if builder.full:
                yield builder.take()
    except BrokenStream as broken:
        bad.records_seen += 1
        report(f"{source}:{line_no + 1}", broken.reason, broken.problem)
