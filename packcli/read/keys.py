"""A record's key for the held-out split: a 64-bit hash of one field, or of what the record
says (its text, prompt and completion, messages or token ids).

The hash depends on the key's value alone (blake2b of a canonical encoding, under a fixed
tag), never on the file, the record's position, the seed or the packcli version, so a
document stays on its side of the split when files are added, renamed or reordered.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from packcli.read.records import RecordBatch

TAG = b"packcli-holdout/1\0"
TWO_64 = 1 << 64


def key_bytes(value: Any) -> bytes:
    """The canonical bytes of one key value: text as UTF-8, token ids as little-endian
    int64, anything else (numbers, booleans, null, messages) as JSON with sorted keys."""
    if isinstance(value, str):
        return b"s" + value.encode("utf-8")
    if isinstance(value, np.ndarray):
        return b"i" + np.ascontiguousarray(value, dtype="<i8").tobytes()
    return b"j" + orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def hash_key(parts: Sequence[Any]) -> int:
    """The 64-bit hash of a key made of one or more values (a record's prompt and
    completion are two), each length-prefixed so that no two keys share their bytes."""
    h = hashlib.blake2b(TAG, digest_size=8)
    for part in parts:
        data = key_bytes(part)
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return int.from_bytes(h.digest(), "little")


def batch_hashes(batch: RecordBatch, fields: Sequence[str]) -> np.ndarray:
    """uint64: the hash of each record's key, made of these columns of the batch."""
    columns = [batch.columns[name] for name in fields]
    out = np.empty(len(batch), dtype=np.uint64)
    for i in range(len(batch)):
        out[i] = hash_key([column[i] for column in columns])
    return out


def held_out(hashes: np.ndarray, fraction: float) -> np.ndarray:
    """Whether each key falls on the held-out side: its hash below `fraction` of 2^64."""
    threshold = min(TWO_64 - 1, int(fraction * TWO_64))
    return np.asarray(hashes, dtype=np.uint64) < np.uint64(threshold)
