"""`--group-by FIELD`: the value of FIELD in each record becomes a dense group id.

Ids are given in order of first appearance in the input, which is read in order whatever
the number of workers, so the same input always gives the same ids. A value is any JSON
scalar; null (or a Parquet null) is a group of its own, and values of different JSON
types never merge (1, 1.0, true and "1" are four groups). A record without the field is
a bad record (`--on-bad-record`). Segments carry their group id (int32, 4 bytes each)
next to their lengths; the planner packs each group on its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.jit import kernel, njit
from packcli.core.storage import load_per_segment


class GroupEntry(TypedDict):
    """One --group-by group: its id (the `group` column's value), the field's value, and
    what it holds (documents read; sequences, rows and real tokens as written)."""

    id: int
    value: Any
    documents: int
    sequences: int
    rows: int
    real_tokens: int
    efficiency: float
    token_hash: str | None  # of the group's tokens as read (grouping.row_token_hashes); None: not all are in rows


GROUP_IDS_FILE = "groups.npy"  # in the spill directory, beside its lengths
MAX_GROUPS = (1 << 31) - 1


def group_key(value: Any) -> tuple[str, Any]:
    """A key that keeps JSON types apart (Python has 1 == 1.0 == True)."""
    if value is None:
        return ("null", None)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, str):
        return ("str", value)
    raise PackcliError(f"--group-by value {value!r} is not a JSON scalar")


class GroupTable:
    """Group ids in order of first appearance, with each group's value and documents."""

    def __init__(self, field: str):
        self.field = field
        self.ids: dict[tuple[str, Any], int] = {}
        self.values: list[Any] = []
        self.documents: list[int] = []
        self.hashes = np.zeros(0, dtype=np.uint64)  # per group: token_hash of its tokens, as read

    def ids_of(self, values: list[Any]) -> np.ndarray:
        """The group id of each record's value (int32), counting the documents."""
        out = np.empty(len(values), dtype=np.int32)
        for i, value in enumerate(values):
            out[i] = self.add(value, 1)
        return out

    def add(self, value: Any, documents: int) -> int:
        """The id of `value` (a new one at first appearance), with `documents` more of it."""
        key = group_key(value)
        group = self.ids.get(key)
        if group is None:
            if len(self.ids) >= MAX_GROUPS:
                raise PackcliError(f"--group-by {self.field}: more than {MAX_GROUPS:,} distinct values")
            group = self.ids[key] = len(self.values)
            self.values.append(value)
            self.documents.append(0)
        self.documents[group] += documents
        return group

    def add_tokens(self, tokens: np.ndarray, lengths: np.ndarray, segment_groups: np.ndarray) -> None:
        """Fold the segments' tokens into their groups' hashes (what `verify` recomputes from rows)."""
        if len(self.hashes) < len(self.values):
            self.hashes = np.concatenate([self.hashes, np.zeros(len(self.values) - len(self.hashes), np.uint64)])
        token_groups = np.repeat(np.asarray(segment_groups, dtype=np.int64), lengths)
        _add_token_hashes(np.ascontiguousarray(tokens), token_groups, self.hashes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "values": list(self.values),
            "documents": list(self.documents),
            "hashes": [int(h) for h in self.hashes],
        }

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> GroupTable:
        table = cls(record["field"])
        for value, documents in zip(record["values"], record["documents"]):
            table.add(value, int(documents))
        table.hashes = np.array(record.get("hashes", []), dtype=np.uint64)
        return table


def merge_tables(tables: list[GroupTable]) -> tuple[GroupTable, list[np.ndarray]]:
    """Tables of consecutive parts of the input, in input order, as one: the ids a single
    table over the whole input gives (first appearance), and per part the map from its ids
    to those. Documents add up; token hashes add up (mod 2^64) as they do token by token."""
    merged = GroupTable(tables[0].field if tables else "")
    remaps = []
    for table in tables:
        remap = np.empty(len(table.values), dtype=np.int32)
        for local, value in enumerate(table.values):
            remap[local] = merged.add(value, table.documents[local])
        hashes = np.zeros(len(merged.values), dtype=np.uint64)
        hashes[: len(merged.hashes)] = merged.hashes
        np.add.at(hashes, remap[: len(table.hashes)], table.hashes)
        merged.hashes = hashes
        remaps.append(remap)
    return merged, remaps


class GroupIds:
    """Group ids of segments as they are made, handed out in input order (all at once, or
    window by window so that memory stays bounded)."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []
        self.held = 0

    def append(self, ids: np.ndarray) -> None:
        if len(ids):
            self.parts.append(np.asarray(ids, dtype=np.int32))
            self.held += len(ids)

    def take(self, n: int) -> np.ndarray:
        """The next n ids (the first n not taken yet)."""
        if self.held < n:
            raise PackcliError(f"internal: {n} group ids asked for, {self.held} held")
        taken: list[np.ndarray] = []
        wanted = n
        while wanted:  # whole parts from the front, the last one split: the rest is not copied
            part = self.parts[0]
            if len(part) <= wanted:
                taken.append(self.parts.pop(0))
                wanted -= len(part)
            else:
                taken.append(part[:wanted])
                self.parts[0] = part[wanted:]
                wanted = 0
        self.held -= n
        if len(taken) == 1:
            return taken[0]
        return np.concatenate(taken) if taken else np.zeros(0, dtype=np.int32)


def group_slices(groups: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(group id, indices of its segments in input order), by increasing id."""
    groups = np.ascontiguousarray(groups, dtype=np.int32)
    if not len(groups):
        return
    order, ends = _counting_order(groups, int(groups.max()) + 1)
    begin = 0
    for group, end in enumerate(ends.tolist()):
        if end > begin:
            yield group, order[begin:end]
        begin = end


def group_length_table(groups: np.ndarray, placed: np.ndarray, seq_len: int) -> np.ndarray:
    """Sequences of each (group, placed length): table[g, L] counts the segments of group
    id g (a row per id up to the largest) of placed length L in [0, seq_len]. One count
    over the segments for every group together: the plan from counts needs each group's
    histogram."""
    groups = np.asarray(groups)
    groups = np.ascontiguousarray(groups, dtype=np.int32 if groups.dtype == np.int32 else np.int64)
    placed = np.ascontiguousarray(placed, dtype=np.int64)
    if groups.shape != placed.shape or groups.ndim != 1:
        raise PackcliError(f"{len(groups)} group ids for {len(placed)} lengths")
    width = seq_len + 1
    if not len(groups):
        return np.zeros((0, width), dtype=np.int64)
    if groups.min() < 0 or placed.min() < 0 or placed.max() > seq_len:
        raise PackcliError(f"group ids must be >= 0 and placed lengths in [0, {seq_len}]")
    table: np.ndarray = kernel(_length_table, len(groups))(groups, placed, int(groups.max()) + 1, width)
    return table


@njit(cache=True)
def _length_table(groups, placed, n_groups, width):
    """One pass: table[g, L] += 1 for each segment."""
    table = np.zeros((n_groups, width), dtype=np.int64)
    for i in range(groups.shape[0]):
        table[groups[i], placed[i]] += 1
    return table


@njit(cache=True)
def _counting_order(groups, n_groups):
    """A stable counting sort of segment indices by group: one pass to count, one to place."""
    ends = np.zeros(n_groups, dtype=np.int64)
    for i in range(groups.shape[0]):
        ends[groups[i]] += 1
    for g in range(1, n_groups):
        ends[g] += ends[g - 1]
    cursor = np.empty(n_groups, dtype=np.int64)
    cursor[0] = 0
    cursor[1:] = ends[:-1]
    order = np.empty(groups.shape[0], dtype=np.int64)
    for i in range(groups.shape[0]):
        g = groups[i]
        order[cursor[g]] = i
        cursor[g] += 1
    return order, ends


@njit(cache=True, inline="always")
def _mix(token):
    """splitmix64's finaliser: a token id to 64 well-mixed bits."""
    z = np.uint64(token) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def _add_token_hashes(tokens, token_groups, hashes):
    for i in range(tokens.shape[0]):
        hashes[token_groups[i]] += _mix(tokens[i])


@njit(cache=True, nogil=True)
def _add_row_hashes(ids, cu, real_cu, offsets, num_segments, row_group, hashes):
    for r in range(ids.shape[0]):
        g = row_group[r]
        first = offsets[r]
        for k in range(num_segments[r]):
            start = cu[first + k]
            for j in range(start, start + real_cu[first + k + 1] - real_cu[first + k]):
                hashes[g] += _mix(ids[r, j])


def row_token_hashes(
    ids: np.ndarray,
    cu_seqlens: np.ndarray,
    cu_offsets: np.ndarray,
    num_segments: np.ndarray,
    row_group: np.ndarray,
    hashes: np.ndarray,
    cu_seqlens_unpadded: np.ndarray | None = None,
) -> None:
    """Add the real tokens of rows to their groups' hashes: of each real segment k of row r
    (k < num_segments[r]), the tokens from its start cu_seqlens[k] on, as many as its real
    length (cu_seqlens_unpadded[k+1] - cu_seqlens_unpadded[k] with --pad-to-multiple-of,
    else the segment's length). The pads after a segment's real tokens and the padding
    segment are left out, so these are exactly the tokens read for the row's segments.

    A group's token_hash is the sum (mod 2^64) of a mix of each of its tokens: it does not
    depend on order or on how tokens are cut into segments and rows, so the rows of a group
    give the hash of the tokens read for it unless a row mixes groups. Raises PackcliError
    if the offsets do not describe the rows (a damaged output must not be read past)."""
    ids = np.asarray(ids)
    n_rows, seq_len = ids.shape if ids.ndim == 2 else (-1, -1)
    offsets = np.asarray(cu_offsets, dtype=np.int64)
    segments = np.asarray(num_segments, dtype=np.int64)
    groups = np.asarray(row_group, dtype=np.int64)
    if n_rows < 0 or len(offsets) != n_rows + 1 or len(segments) != n_rows or len(groups) != n_rows:
        raise PackcliError("row token hashes: ids, cu_seqlens offsets, num_segments and groups disagree on the rows")
    if n_rows == 0:
        return
    base = int(offsets[0])
    if base < 0:
        raise PackcliError("row token hashes: cu_seqlens do not hold num_segments segments per row")
    offsets = offsets - base
    cu = np.asarray(cu_seqlens, dtype=np.int64)[base : base + int(offsets[-1])]
    real_cu = cu if cu_seqlens_unpadded is None else np.asarray(cu_seqlens_unpadded, dtype=np.int64)[base:][: len(cu)]
    entries = np.diff(offsets)
    if len(cu) != offsets[-1] or len(real_cu) != len(cu) or (entries < segments + 1).any() or (segments < 0).any():
        raise PackcliError("row token hashes: cu_seqlens do not hold num_segments segments per row")
    if ((groups < 0) | (groups >= len(hashes))).any():
        raise PackcliError("row token hashes: a row's group has no hash")
    if hashes.dtype != np.uint64:
        raise PackcliError("row token hashes: the hashes must be uint64")
    # every real segment's tokens lie in its row: start >= 0, real length >= 0, end <= seq_len
    k = np.arange(len(cu)) - np.repeat(offsets[:-1], entries)  # each entry's index in its row
    starts = np.flatnonzero(k < np.repeat(segments, entries))  # the entries that start a real segment
    real = real_cu[starts + 1] - real_cu[starts]
    if len(starts) and ((cu[starts] < 0) | (real < 0) | (cu[starts] + real > seq_len)).any():
        raise PackcliError("row token hashes: a segment's real tokens do not lie inside its row")
    work = n_rows + int(real.sum())
    with np.errstate(over="ignore"):  # the sums wrap mod 2^64 by design (small work runs the Python twin)
        kernel(_add_row_hashes, work)(ids, cu, real_cu, offsets, segments, groups, hashes)


def group_counts(row_group: np.ndarray, num_segments: np.ndarray, real: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group: rows, sequences and real tokens of a block of rows ([n_groups, 3] int64)."""
    out = np.zeros((n_groups, 3), dtype=np.int64)
    if len(row_group):
        out[:, 0] = np.bincount(row_group, minlength=n_groups)[:n_groups]
        out[:, 1] = np.bincount(row_group, weights=num_segments, minlength=n_groups)[:n_groups]
        out[:, 2] = np.bincount(row_group, weights=real, minlength=n_groups)[:n_groups]
    return out


def group_entries(table: GroupTable, counts: np.ndarray, seq_len: int, hashed: bool = True) -> list[GroupEntry]:
    """The manifest's and report's group table: one entry per group id. `hashed`: False
    where rows do not hold every token read (concat with --remainder drop)."""
    entries: list[GroupEntry] = []
    for group, value in enumerate(table.values):
        rows, sequences, real = (int(x) for x in counts[group]) if group < len(counts) else (0, 0, 0)
        entries.append(
            {
                "id": group,
                "value": value,
                "documents": table.documents[group],
                "sequences": sequences,
                "rows": rows,
                "real_tokens": real,
                "efficiency": real / (rows * seq_len) if rows else 0.0,
                "token_hash": f"{int(table.hashes[group]):016x}" if hashed and group < len(table.hashes) else None,
            }
        )
    return entries


def save_group_ids(directory: Path, ids: np.ndarray) -> None:
    """Beside the spill's lengths, before it is marked complete (--resume reads them back)."""
    np.save(Path(directory) / GROUP_IDS_FILE, np.asarray(ids, dtype=np.int32))


def load_group_ids(directory: Path, n_segments: int) -> np.ndarray:
    ids: np.ndarray = load_per_segment(Path(directory) / GROUP_IDS_FILE, n_segments, "group ids")
    return ids
