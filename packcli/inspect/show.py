"""`packcli show`: packed rows (or raw records, as pack would cut them) made ready to look at.

A `View` is one packed row, or one raw record as the segments `pack` would make of it:
its ids, labels and position ids, its segments (with the row's padding segment), a header
of figures and, for raw records, what pack would do to it (skip, drop, cut). Rendering
lives in show_render.py (terminal) and show_html.py (a page); `view_to_json` is the
`--json` form.

Only the rows shown are read: an npy shard's columns are memory-mapped (or, on an object
store, read by byte range), a Parquet shard reads the one row group that holds the row.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core import storage
from packcli.core.errors import PackcliError
from packcli.core.storage import MANIFEST_FILE, is_complete
from packcli.tokenize.tokenizer import bytes_to_unicode
from packcli.write.columns import SEGMENT_OFFSETS_FILE, SOURCE_COLUMN, is_segment_column
from packcli.write.manifest import Manifest
from packcli.write.values import CHOSEN_COLUMN, PAIR_COLUMN, WEIGHT_COLUMN

IGNORE_INDEX = -100
DEFAULT_RECORDS = 5  # raw input: records shown when no --row/--rows is given


@dataclass
class Segment:
    """A segment of a row: tokens [start, end); real tokens end at real_end (before the
    pads of --pad-to-multiple-of); `padding`: the row's last, all-padding segment;
    `source`: the mixture source it came from (its name in the manifest, else its index),
    None without one."""

    index: int
    start: int
    end: int
    real_end: int
    padding: bool = False
    source: str | int | None = None
    pair: int | None = None  # preference pairs: the pair's index (segment_pair)
    chosen: bool | None = None  # preference pairs: the chosen side (segment_chosen 1) or the rejected one
    weight: float | None = None  # --weight-field: segment_weight

    @property
    def side(self) -> str | None:
        """A pair's side as shown: "chosen" or "rejected" (None outside a pair)."""
        return None if self.chosen is None else ("chosen" if self.chosen else "rejected")

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass
class View:
    """One row (or raw record) as shown."""

    kind: str  # "row" or "record"
    header: dict[str, Any]
    input_ids: np.ndarray
    labels: np.ndarray
    position_ids: np.ndarray
    segments: list[Segment]
    notes: list[str] = field(default_factory=list)  # raw records: what pack would do with it

    @property
    def learned(self) -> np.ndarray:
        return self.labels != IGNORE_INDEX

    def learned_runs(self, segment: Segment) -> list[tuple[int, int]]:
        """[start, end) of each run of learned tokens inside a segment."""
        mask = self.learned[segment.start : segment.real_end]
        edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
        return [(segment.start + int(a), segment.start + int(b)) for a, b in zip(edges[::2], edges[1::2])]


# ----------------------------------------------------------------------------- the tokenizer's side


class Decoder:
    """Token ids to text over a `tokenizers.Tokenizer`: each token's own piece (special
    tokens as their text, byte-level pieces as the bytes they stand for) and whole spans."""

    def __init__(self, backend: Any, name: str):
        self.backend, self.name = backend, name
        self._pieces: dict[int, str] = {}
        added = backend.get_added_tokens_decoder()
        self.special = {int(i) for i, token in added.items() if token.special}
        self.added = {int(i): token.content for i, token in added.items()}
        serialized = backend.to_str()
        self.fingerprint = "sha256:" + hashlib.sha256(serialized.encode("utf-8")).hexdigest()  # tokenizing.fingerprint
        decoder = json.loads(serialized).get("decoder") or {}
        kinds = _decoder_kinds(decoder)
        self.byte_level = "ByteLevel" in kinds
        self.metaspace = next((d.get("replacement", "▁") for d in _decoders(decoder) if d["type"] == "Metaspace"), None)
        self._bytes = {char: byte for byte, char in bytes_to_unicode().items()} if self.byte_level else {}

    def piece(self, token: int) -> str:
        token = int(token)
        cached = self._pieces.get(token)
        if cached is None:
            cached = self._pieces[token] = self._piece(token)
        return cached

    def _piece(self, token: int) -> str:
        if token in self.added:
            return self.added[token]
        raw = self.backend.id_to_token(token)
        if raw is None:
            return f"<id {token}>"
        if self.byte_level and all(ch in self._bytes for ch in raw):
            return bytes(self._bytes[ch] for ch in raw).decode("utf-8", errors="backslashreplace")
        if self.metaspace is not None:
            if raw.startswith("<0x") and raw.endswith(">") and len(raw) == 6:  # a byte-fallback token
                return bytes([int(raw[3:5], 16)]).decode("utf-8", errors="backslashreplace")
            return raw.replace(self.metaspace, " ")
        text: str = self.backend.decode([token], skip_special_tokens=False)
        return text

    def pieces(self, tokens: np.ndarray | list[int]) -> list[str]:
        """Each token's text in a run of tokens, joined exactly the run's text where the
        tokenizer is byte-level: a character whose bytes span several tokens goes with the
        token that completes it (the ones before show nothing). Else each token's own piece."""
        if not self.byte_level:
            return [self.piece(t) for t in tokens]
        decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
        out = [decode(self._token_bytes(int(t))) for t in tokens]
        if out:
            out[-1] += decode(b"", final=True)
        return out

    def _token_bytes(self, token: int) -> bytes:
        if token in self.added:
            return self.added[token].encode("utf-8")
        raw = self.backend.id_to_token(token)
        if raw is None:
            return f"<id {token}>".encode()
        if all(ch in self._bytes for ch in raw):
            return bytes(self._bytes[ch] for ch in raw)
        return raw.encode("utf-8")

    def text(self, tokens: np.ndarray | list[int]) -> str:
        decoded: str = self.backend.decode([int(t) for t in tokens], skip_special_tokens=False)
        return decoded


def _decoders(decoder: dict) -> list[dict]:
    if not decoder:
        return []
    if decoder.get("type") == "Sequence":
        return [d for inner in decoder.get("decoders", []) for d in _decoders(inner)]
    return [decoder]


def _decoder_kinds(decoder: dict) -> set[str]:
    return {d.get("type", "") for d in _decoders(decoder)}


def load_decoder(spec: str) -> Decoder:
    from packcli.tokenize.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(spec)
    return Decoder(tokenizer.backend_tokenizer, spec)


def output_decoder(manifest: Manifest, given: str | None, warn) -> Decoder | None:
    """--tokenizer when given, else the manifest's when it can be found here (the bundled
    one or a local path; a Hub name only from the local cache), else None: ids are shown."""
    recorded = manifest["tokenizer"].get("name_or_path")
    if given is not None:
        decoder = load_decoder(given)
        wanted = manifest["tokenizer"].get("fingerprint")
        if wanted and decoder.fingerprint != wanted:
            warn(f"--tokenizer {given} is not the tokenizer this output was packed with ({recorded})")
        return decoder
    if not recorded:
        return None
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    saved = {k: os.environ.get(k) for k in offline}
    os.environ.update(offline)
    try:
        decoder = load_decoder(recorded)
    except PackcliError as exc:
        warn(f"the output's tokenizer {recorded} cannot be loaded here ({exc}); showing ids (give --tokenizer)")
        return None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    wanted = manifest["tokenizer"].get("fingerprint")
    if wanted and decoder.fingerprint != wanted:
        warn(f"the tokenizer at {recorded} is not the one this output was packed with (its files changed)")
    return decoder


# ----------------------------------------------------------------------------- packed rows


def parse_selection(row: int | None, rows: str | None, random: int | None, total: int, seed: int = 0) -> list[int]:
    """The row indices that --row, --rows A:B or --random K pick out of `total` rows (row 0 by default)."""
    given = [flag for flag, value in (("--row", row), ("--rows", rows), ("--random", random)) if value is not None]
    if len(given) > 1:
        raise PackcliError(f"{' and '.join(given)}: give one way to pick rows", usage=True)
    if random is not None:
        if random < 1:
            raise PackcliError(f"--random must be at least 1, not {random}", usage=True)
        picked = np.random.default_rng(seed).choice(total, size=min(random, total), replace=False)
        return sorted(int(i) for i in picked)
    if rows is not None:
        start, stop = parse_range(rows)
        stop = total if stop is None else min(stop, total)
        if start >= total or start >= stop:
            raise PackcliError(f"--rows {rows}: no rows there (the output has {total:,} rows)", usage=True)
        return list(range(start, stop))
    index = 0 if row is None else row
    if not 0 <= index < total:
        raise PackcliError(
            f"--row {index}: out of range (the output has {total:,} rows: 0 to {total - 1:,})", usage=True
        )
    return [index]


def parse_range(text: str) -> tuple[int, int | None]:
    """'A:B' (either side may be left out) as (A, B or None)."""
    head, sep, tail = text.partition(":")
    try:
        if not sep:
            raise ValueError
        start = int(head) if head.strip() else 0
        stop = int(tail) if tail.strip() else None
    except ValueError:
        raise PackcliError(f"--rows takes A:B (from row A to before row B), not {text!r}", usage=True) from None
    if start < 0 or (stop is not None and stop < 0):
        raise PackcliError(f"--rows {text}: row numbers are 0 or more", usage=True)
    return start, stop


class OutputSource:
    """A packed output, local or on an object store, opened for reading single rows."""

    def __init__(self, path: str):
        self.path = path
        self.remote = storage.RemoteDir(path) if storage.is_remote(path) else None
        if self.remote is not None:
            if not is_complete(self.remote):
                raise storage.incomplete_output(self.remote)
            from packcli.write.manifest import checked_manifest

            where = f"{self.remote}/{MANIFEST_FILE}"
            self.manifest: Manifest = checked_manifest(self.remote.read_json(MANIFEST_FILE), where, str(self.remote))
        else:
            from packcli.write.manifest import load_manifest

            self.manifest = load_manifest(storage.local_path(path))
        starts = np.cumsum([0] + [int(s["rows"]) for s in self.manifest["shards"]])
        self.shard_starts = starts
        self.total_rows = int(starts[-1])

    def locate(self, index: int) -> tuple[int, int]:
        """(shard number, row inside that shard) of a global row index."""
        shard = int(np.searchsorted(self.shard_starts, index, side="right")) - 1
        return shard, index - int(self.shard_starts[shard])

    def open(self, name: str):
        if self.remote is not None:
            return self.remote.fs.open(f"{self.remote.root}/{name}", "rb")
        return open(Path(storage.local_path(self.path)) / name, "rb")

    def local(self, name: str) -> Path | None:
        return None if self.remote is not None else Path(storage.local_path(self.path)) / name


def read_views(source: OutputSource, indices: list[int]) -> Iterator[View]:
    """The rows at these global indices, each read alone from its shard."""
    manifest = source.manifest
    groups = {int(g["id"]): g["value"] for g in manifest.get("groups") or []}
    names = [entry["name"] for entry in manifest.get("sources") or []]
    segment_columns = [name for name in manifest.get("columns", {}) if is_segment_column(name)]
    for index in indices:
        shard_number, inner = source.locate(index)
        shard = manifest["shards"][shard_number]
        try:
            if manifest["format"] == "parquet":
                columns = _parquet_row(source, shard["path"], inner)
            else:
                columns = _npy_row(source, shard["path"], inner, segment_columns)
        except PackcliError:
            raise
        except Exception as exc:
            raise PackcliError(f"{shard['path']}: cannot read row {inner} ({type(exc).__name__}: {exc})") from exc
        header = {"row": index, "shard": shard["path"], "shard_row": inner}
        if "group" in columns:
            header["group"] = groups.get(int(columns["group"]), int(columns["group"]))
        yield row_view(columns, manifest["seq_len"], header, names)


ROW_FIELDS = ("input_ids", "labels", "position_ids", "cu_seqlens", "num_segments", "max_seqlen", "cu_seqlens_unpadded")


def _parquet_row(source: OutputSource, name: str, row: int) -> dict[str, Any]:
    import pyarrow.parquet as pq

    with source.open(name) as handle:
        parquet = pq.ParquetFile(handle)
        names = parquet.schema_arrow.names
        columns = [c for c in names if c in (*ROW_FIELDS, "group") or is_segment_column(c)]
        meta = parquet.metadata
        first = 0
        for group in range(meta.num_row_groups):
            n = meta.row_group(group).num_rows
            if row < first + n:
                table = parquet.read_row_group(group, columns=columns).slice(row - first, 1)
                return {c: table.column(c)[0].as_py() for c in columns}
            first += n
    raise PackcliError(f"{name}: has no row {row}")


def _npy_row(source: OutputSource, name: str, row: int, segment_columns: Sequence[str] = ()) -> dict[str, Any]:
    """One row's columns from an npy shard; `segment_columns`: the per-segment columns the manifest lists."""
    out: dict[str, Any] = {}
    offsets = _npy_slice(source, f"{name}/cu_seqlens_offsets.npy", row, row + 2)
    lo, hi = int(offsets[0]), int(offsets[1])
    for column in ("input_ids", "labels", "position_ids"):
        out[column] = _npy_slice(source, f"{name}/{column}.npy", row, row + 1)[0]
    out["cu_seqlens"] = _npy_slice(source, f"{name}/cu_seqlens.npy", lo, hi)
    out["num_segments"] = int(_npy_slice(source, f"{name}/num_segments.npy", row, row + 1)[0])
    for optional, lo_hi in (
        ("max_seqlen", (row, row + 1)),
        ("group", (row, row + 1)),
        ("cu_seqlens_unpadded", (lo, hi)),
    ):
        try:
            values = _npy_slice(source, f"{name}/{optional}.npy", *lo_hi)
        except FileNotFoundError:
            continue
        out[optional] = values if optional == "cu_seqlens_unpadded" else int(values[0])
    if segment_columns:
        bounds = _npy_slice(source, f"{name}/{SEGMENT_OFFSETS_FILE}", row, row + 2)
        for column in segment_columns:
            out[column] = _npy_slice(source, f"{name}/{column}.npy", int(bounds[0]), int(bounds[1]))
    return out


def _npy_slice(source: OutputSource, name: str, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of an .npy file: from its memory map locally, by byte range remotely."""
    local = source.local(name)
    if local is not None:
        if not local.is_file():
            raise FileNotFoundError(name)
        return np.array(np.load(local, mmap_mode="r")[start:stop])  # not shards.map_npy: it loads pyarrow
    if source.remote is None or not source.remote.exists(name):
        raise FileNotFoundError(name)
    with source.open(name) as f:
        version = np.lib.format.read_magic(f)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = reader(f)
        row_items = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        stop = min(stop, shape[0])
        f.seek(f.tell() + start * row_items * dtype.itemsize)
        data = f.read((stop - start) * row_items * dtype.itemsize)
    return np.frombuffer(data, dtype=dtype).reshape((stop - start, *shape[1:]))


def row_view(
    columns: dict[str, Any], seq_len: int, header: dict[str, Any], source_names: list[str] | None = None
) -> View:
    """A View of one packed row from its columns (lists or arrays). `source_names`: the
    manifest's source names, which `segment_source` values index."""
    ids = np.asarray(columns["input_ids"], dtype=np.int64)
    labels = np.asarray(columns["labels"], dtype=np.int64)
    positions = np.asarray(columns["position_ids"], dtype=np.int64)
    cu = [int(c) for c in columns["cu_seqlens"]]
    unpadded = columns.get("cu_seqlens_unpadded")
    num_segments = int(columns["num_segments"])
    sources = columns.get(SOURCE_COLUMN)
    pairs, sides, weights = (columns.get(name) for name in (PAIR_COLUMN, CHOSEN_COLUMN, WEIGHT_COLUMN))
    names = source_names or []
    segments = []
    for k in range(len(cu) - 1):
        start, end = cu[k], cu[k + 1]
        real = end - start if unpadded is None else int(unpadded[k + 1]) - int(unpadded[k])
        padding = k >= num_segments
        named: str | int | None = None
        if sources is not None and not padding and k < len(sources):
            value = int(sources[k])
            named = names[value] if 0 <= value < len(names) else value
        segment = Segment(k, start, end, start if padding else start + real, padding, named)
        if not padding:
            segment.pair = _entry(pairs, k, int)
            segment.chosen = _entry(sides, k, lambda v: bool(int(v)))
            segment.weight = _entry(weights, k, float)
        segments.append(segment)
    real_tokens = sum(s.real_end - s.start for s in segments)
    lengths = np.diff(cu)
    max_seqlen = columns.get("max_seqlen")
    full = {
        **header,
        "num_segments": num_segments,
        "real_tokens": real_tokens,
        "learned_tokens": int((labels != IGNORE_INDEX).sum()),
        "fill": real_tokens / seq_len if seq_len else 0.0,
        "max_seqlen": int(max_seqlen) if max_seqlen is not None else int(lengths.max(initial=0)),
        "seq_len": seq_len,
    }
    if pairs is not None:
        full["pairs"] = sum(1 for segment in segments if segment.chosen)
    return View("row", full, ids, labels, positions, segments)


def _entry(values: Any, k: int, kind: Any) -> Any:
    """Segment k's entry of a per-segment column (None when the row has no such column)."""
    return None if values is None or k >= len(values) else kind(values[k])


# ----------------------------------------------------------------------------- JSON


def view_to_json(view: View, decoder: Decoder | None) -> dict[str, Any]:
    """A view for scripts: the columns, each token's piece, the segments with their learned text."""
    ids = view.input_ids.tolist()
    sourced = any(s.source is not None for s in view.segments)
    paired = any(s.pair is not None for s in view.segments)
    weighted = any(s.weight is not None for s in view.segments)
    out: dict[str, Any] = {
        "kind": view.kind,
        **view.header,
        "input_ids": ids,
        "labels": view.labels.tolist(),
        "position_ids": view.position_ids.tolist(),
        "cu_seqlens": [s.start for s in view.segments] + ([view.segments[-1].end] if view.segments else []),
        "pieces": decoder.pieces(ids) if decoder is not None else None,
        "segments": [
            {
                "index": s.index,
                "start": s.start,
                "end": s.end,
                "real_end": s.real_end,
                "padding": s.padding,
                **({"source": s.source} if sourced else {}),
                **({"pair": s.pair, "side": s.side} if paired else {}),
                **({"weight": s.weight} if weighted else {}),
                "learned": [
                    {
                        "start": a,
                        "end": b,
                        "text": decoder.text(view.input_ids[a:b]) if decoder is not None else None,
                    }
                    for a, b in view.learned_runs(s)
                ],
            }
            for s in view.segments
        ],
    }
    if view.kind == "record":
        out["notes"] = view.notes
    return out
