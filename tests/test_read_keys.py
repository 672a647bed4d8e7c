"""read/keys.py: a record's held-out side depends on its key alone."""

from __future__ import annotations

import numpy as np

from packcli.read.keys import batch_hashes, hash_key, held_out, key_bytes
from packcli.read.records import IdLists, RecordBatch


def batch(columns, source="a.jsonl"):
    n = len(next(iter(columns.values())))
    return RecordBatch(source, "line", np.arange(1, n + 1), columns)


def test_a_key_hashes_the_same_wherever_the_record_is():
    one = batch({"text": ["alpha", "beta", "gamma"]})
    two = batch({"text": ["zeta", "gamma", "alpha"]}, source="other.jsonl")
    first, second = batch_hashes(one, ["text"]), batch_hashes(two, ["text"])
    assert first[0] == second[2] and first[2] == second[1]
    assert len(set(first.tolist())) == 3


def test_kinds_of_values_never_share_bytes():
    assert key_bytes("1") != key_bytes(1) != key_bytes(np.array([1]))
    assert hash_key(["ab", "c"]) != hash_key(["a", "bc"])  # the parts are length-prefixed
    messages = [{"role": "user", "content": "hi"}]
    assert hash_key([messages]) == hash_key([[{"content": "hi", "role": "user"}]])  # keys sorted


def test_token_ids_hash_by_value_whatever_their_dtype():
    ids = IdLists(np.array([5, 6, 7, 5, 6], dtype=np.int32), np.array([0, 3, 5]))
    same = IdLists(np.array([9, 5, 6, 7], dtype=np.int64), np.array([0, 1, 4]))
    assert batch_hashes(batch({"ids": ids}), ["ids"])[0] == batch_hashes(batch({"ids": same}), ["ids"])[1]


def test_the_held_out_fraction_is_the_share_of_hashes_below_it():
    hashes = np.array([hash_key([i]) for i in range(20_000)], dtype=np.uint64)
    for fraction in (0.01, 0.1, 0.5):
        assert abs(held_out(hashes, fraction).mean() - fraction) < 0.01
    # a larger fraction holds out a superset: the split only grows
    assert not (held_out(hashes, 0.1) & ~held_out(hashes, 0.2)).any()
    assert held_out(hashes, 1.0).all() and not held_out(hashes, 0.0).any()
