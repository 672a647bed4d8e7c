"""Slots found by bucket (packcli/plan/buckets.py): the sorted copy's layout, and a
bucket split over parts against the naive walk of tests/naive_slots.py."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_slots import part_position

from packcli.plan.buckets import BucketParts, Buckets


@settings(max_examples=100, deadline=None)
@given(
    counts=st.integers(1, 4).flatmap(
        lambda buckets: st.lists(
            st.lists(st.integers(0, 5), min_size=buckets, max_size=buckets), min_size=1, max_size=5
        )
    ),
    shuffled=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_bucket_parts_place_every_rank_as_the_naive_walk(counts, shuffled, seed):
    """Each (bucket, rank) found in its part, empty parts passed over, the ranks asked for
    in order (each bucket's last part tried first) or not."""
    table = np.array(counts, dtype=np.int64)
    n_buckets = table.shape[1]
    length = np.arange(1, n_buckets + 1, dtype=np.int64) * 3
    total = table.sum(axis=0)
    buckets = Buckets(
        np.arange(n_buckets, dtype=np.int64),
        length,
        np.concatenate([[0], np.cumsum(total)]),
        np.concatenate([[0], np.cumsum(total * length)]),
    )
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 10_000, table.shape).astype(np.int64)
    asked = [(b, k) for b in range(n_buckets) for k in range(int(total[b]))]
    if shuffled:
        asked = [asked[i] for i in rng.permutation(len(asked))]
    bucket = np.array([b for b, _ in asked], dtype=np.int64)
    local = np.array([k for _, k in asked], dtype=np.int64)
    got = BucketParts(buckets, table, base).positions(bucket, local)
    want = [part_position(table.tolist(), base.tolist(), length.tolist(), b, k) for b, k in asked]
    assert got.tolist() == want
