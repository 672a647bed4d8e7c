"""Where the slot rule finds its sequences by bucket, with nothing kept per sequence.

A bucket is the sequences of one (--group-by group, placed length), in input order.
Buckets is the sorted copy's layout (write/by_length.py): each bucket's sequences in
records of its placed length, so the sequence of a rank is found by arithmetic.
BucketParts is the same buckets split over parts in order (the chunks of a spill
written by length, or the Ray engine's sorted copies of its spill parts): a rank is
found in the part whose running count of its bucket passes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from packcli.core.jit import kernel, njit


@dataclass
class Buckets:
    """The sorted copy's layout: bucket b holds the sequences of ranks
    [rank[b], rank[b + 1]) in records of `length[b]` tokens from token `token[b]`;
    `key[b]` = group position * (seq_len + 1) + placed length (increasing)."""

    key: np.ndarray  # int64 [B]
    length: np.ndarray  # int64 [B]
    rank: np.ndarray  # int64 [B + 1]
    token: np.ndarray  # int64 [B + 1]

    @staticmethod
    def from_histograms(histograms: list[np.ndarray], seq_len: int) -> Buckets:
        """Buckets of the groups' histograms (sequences per placed length 0..seq_len), in
        the order the plan counts ranks: group by group, lengths increasing."""
        width = seq_len + 1
        table = np.zeros((len(histograms), width), dtype=np.int64)
        for position, counts_g in enumerate(histograms):
            counts_g = np.asarray(counts_g, dtype=np.int64)
            table[position, : len(counts_g)] = counts_g
        key = np.flatnonzero(table)  # position * width + length, increasing
        length = key % width
        count = table.ravel()[key]
        rank = np.zeros(len(key) + 1, dtype=np.int64)
        np.cumsum(count, out=rank[1:])
        token = np.zeros(len(key) + 1, dtype=np.int64)
        np.cumsum(count * length, out=token[1:])
        return Buckets(key.astype(np.int64), length.astype(np.int64), rank, token)

    def starts(self, rank: np.ndarray) -> np.ndarray:
        """Where the sequences of these ranks start in the sorted copy (in tokens)."""
        b = np.searchsorted(self.rank, rank, side="right") - 1
        return self.token[b] + (rank - self.rank[b]) * self.length[b]


class BucketParts:
    """Where rank r of bucket b lies when each bucket's sequences are split over parts in
    order, part p holding `counts[p, b]` of them (in input order), laid out from
    `base[p, b]` in records of the bucket's length: a place in the sorted copy (Buckets)
    becomes a place in the parts' joined coordinates. The parts are the chunks of a spill
    written by length, or the Ray engine's sorted copies. A record (one slot) lies in one
    part."""

    def __init__(self, buckets: Buckets, counts: np.ndarray, base: np.ndarray):
        self.buckets = buckets
        self.counts = np.ascontiguousarray(counts, dtype=np.int64)
        self.base = np.ascontiguousarray(base, dtype=np.int64)
        parts, n_buckets = self.counts.shape
        # per bucket (rows), each part's first rank in it and, last, the bucket's size
        self.first = np.zeros((n_buckets, parts + 1), dtype=np.int64)
        np.cumsum(self.counts.T, axis=1, out=self.first[:, 1:])

    @staticmethod
    def end_to_end(buckets: Buckets, counts: np.ndarray) -> BucketParts:
        """Parts laid out one after another, each by bucket (a bucket it lacks takes no
        room): the chunks of a spill written by length, or the Ray parts' copies joined."""
        counts = np.asarray(counts, dtype=np.int64)
        sizes = counts * buckets.length[None, :]
        base = np.cumsum(sizes).reshape(sizes.shape) - sizes  # cell by cell, part after part
        return BucketParts(buckets, counts, base)

    def positions(self, bucket: np.ndarray, local: np.ndarray) -> np.ndarray:
        """Where the records of these (bucket, rank within the bucket) start."""
        work = len(local) + len(self.buckets.length)
        return kernel(_part_positions, work)(bucket, local, self.first, self.base, self.buckets.length)


@njit(cache=True, nogil=True)
def _part_positions(bucket, local, first, base, length):
    """BucketParts.positions. A bucket's ranks come in runs (the copies of one length in a
    row, and without --shuffle the same slot in consecutive rows), so each bucket's last
    part is tried before a search."""
    last_part = np.zeros(first.shape[0], dtype=np.int64)
    out = np.empty(len(local), dtype=np.int64)
    parts = first.shape[1] - 1
    for i in range(len(local)):
        b, r = bucket[i], local[i]
        p = last_part[b]
        if not (first[b, p] <= r < first[b, p + 1]):
            lo, hi = 0, parts - 1  # the last part whose first rank is <= r: empty parts are passed over
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if first[b, mid] <= r:
                    lo = mid
                else:
                    hi = mid - 1
            p = lo
            last_part[b] = p
        out[i] = base[p, b] + (r - first[b, p]) * length[b]
    return out
