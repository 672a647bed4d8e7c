"""JSON arrays of records, cut into elements without parsing them (each element is then
parsed as a JSON Lines record is), and JSON Lines under a .json name."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator

from packcli.core import storage
from packcli.read.checks import Check, RecordProblem
from packcli.read.jsonl import (
    READ_CHUNK,
    BrokenStream,
    open_stream,
    parse_record,
    position_of,
    read_lines,
    stream_errors,
    stream_lines,
)
from packcli.read.records import BadRecords, BatchBuilder, RecordBatch, Report

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
        self.broken_stream: BrokenStream | None = None  # raised once the data before it is used
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
        wanted, before = max(READ_CHUNK, len(self.buf) - start), len(self.buf)
        try:
            while len(self.buf) - before < wanted:
                chunk = self.read(wanted - (len(self.buf) - before))
                if not chunk:
                    self.eof = True
                    break
                self.buf += chunk
        except BrokenStream as broken:
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
            space = _SPACE.match(self.buf, pos)
            end = space.end() if space is not None else pos  # never None: the pattern matches ''
            if end < len(self.buf) or not self.more(pos):
                return end
            pos = end

    def elements(self) -> Iterator[tuple[int, int, bytes]]:
        """(line, column, bytes) of each element; the caller checked that '[' comes first."""
        pos = self.skip_space(self.skip_space(0) + 1)
        if pos < len(self.buf) and self.buf[pos] == ord("]"):
            return self.after_array(pos + 1)
        while True:
            if pos >= READ_CHUNK:  # drop what is done, at most once a chunk: amortised O(1) a byte
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


def read_record_json(
    path: str, checks: list[Check], builder: BatchBuilder, report: Report, bad: BadRecords
) -> Iterator[RecordBatch]:
    """A JSON array of records, or JSON Lines under a .json name (as `datasets` reads them)."""
    source = builder.source
    with contextlib.ExitStack() as closing:
        stream, compression, raw_file = open_stream(path, closing)
        assert raw_file is not None  # stdin is read as JSON Lines, never here
        builder.consumed = position_of(raw_file, storage.size(path))

        read_some = getattr(stream, "read1", stream.read)  # no more than one step of decompression

        def read(n: int) -> bytes:
            with stream_errors(compression, source):
                return read_some(n)

        scanner: _ArrayScanner | None = None
        try:
            prefix = read(READ_CHUNK)
            while prefix.removeprefix(_BOM).isspace() and (chunk := read(READ_CHUNK)):
                prefix += chunk
            if not prefix.removeprefix(_BOM).lstrip().startswith(b"["):
                lines = _prefixed_lines(prefix, stream_lines(stream, compression, source))
                yield from read_lines(lines, checks, builder, report, bad)
            else:
                scanner = _ArrayScanner(read, prefix.removeprefix(_BOM))
                yield from _read_array(scanner, checks, builder, report, bad)
        except BrokenStream as broken:
            bad.records_seen += 1
            line = scanner.line_of(len(scanner.buf)) if scanner is not None else 1
            report(f"{source}:{line}", broken.reason, broken.problem)
    yield from builder.rest()


def _read_array(
    scanner: _ArrayScanner, checks: list[Check], builder: BatchBuilder, report: Report, bad: BadRecords
) -> Iterator[RecordBatch]:
    """Each record is judged as a JSON Lines record is; where the array itself breaks, the
    rest of the file cannot be cut into records, so it counts as one bad record (the last)."""
    source = builder.source
    try:
        for line, column, raw in scanner.elements():
            bad.records_seen += 1
            try:
                values = parse_record(b" " * column + raw, line, checks, first_line=line)  # columns as in the file
            except RecordProblem as b:
                report(f"{source}:{line}", b.reason, b.problem)
                continue
            builder.add(line, values)
            if builder.full:
                yield builder.take()
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
