"""The Ray engine's write side without a cluster: the parts' sorted copies read as one
(PartedSortedCopy) give what the sorted copy of the whole input gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.engine.ray_write import PartedSortedCopy, part_histogram
from packcli.plan.buckets import Buckets
from packcli.write.by_length import sort_spill
from packcli.write.spill import SpillWriter


@settings(max_examples=40, deadline=None)
@given(
    parts=st.lists(st.lists(st.integers(1, 12), max_size=40), min_size=1, max_size=4),
    masked=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_sorted_parts_read_as_the_sorted_whole(tmp_path_factory, parts, masked, seed):
    """Pieces placed in the parts' own sorted copies (joined end to end) by the ranks of
    the whole input's sorted file: the same tokens and learned bits as from the whole one."""
    seq_len = 12
    rng = np.random.default_rng(seed)
    root = tmp_path_factory.mktemp("parts")
    lengths = [np.array(p, dtype=np.int64) for p in parts]
    tokens = [rng.integers(1, 60_000, int(p.sum())).astype(np.uint16) for p in lengths]
    learned = [rng.random(len(t)) < 0.5 if masked else None for t in tokens]

    def spilled(name, t, n, f):
        writer = SpillWriter(root / name, np.dtype(np.uint16), masked)
        writer.append(t, n, f)
        return writer.finish({})

    whole_spill = spilled(
        "whole",
        np.concatenate(tokens),
        np.concatenate(lengths),
        np.concatenate(learned) if masked else None,
    )
    counts = np.bincount(np.concatenate(lengths), minlength=seq_len + 1)
    buckets = Buckets.from_histograms([counts], seq_len)
    whole = sort_spill(whole_spill, buckets, seq_len, 1)
    dirs = []
    for i, (t, n, f) in enumerate(zip(tokens, lengths, learned)):
        spill = spilled(f"part-{i}", t, n, f)
        sort_spill(spill, Buckets.from_histograms([part_histogram(root / f"part-{i}", seq_len)], seq_len), seq_len, 1)
        spill.close()
        dirs.append(str(root / f"part-{i}"))
    part_counts = np.array([part_histogram(Path(d), seq_len)[buckets.length] for d in dirs]).reshape(len(dirs), -1)
    reader = PartedSortedCopy(dirs, buckets, part_counts)
    total = int(buckets.rank[-1])
    ranks = rng.permutation(total)[: rng.integers(0, total + 1)]
    starts = buckets.starts(ranks)
    sizes = buckets.length[np.searchsorted(buckets.rank, ranks, side="right") - 1]
    bucket = np.searchsorted(buckets.rank, ranks, side="right") - 1
    joined = reader.where.positions(bucket, ranks - buckets.rank[bucket])  # the parts' copies end to end
    a, b = whole.read_block(starts, sizes), reader.read_block(joined, sizes)
    for k in range(len(ranks)):
        n = int(sizes[k])
        assert (
            b.tokens[b.token_at[k] : b.token_at[k] + n].tolist() == a.tokens[a.token_at[k] : a.token_at[k] + n].tolist()
        )
        if masked:
            bits_a = np.unpackbits(a.learned, bitorder="little")[a.bit_at[k] : a.bit_at[k] + n]
            bits_b = np.unpackbits(b.learned, bitorder="little")[b.bit_at[k] : b.bit_at[k] + n]
            assert bits_a.tolist() == bits_b.tolist()
    reader.close()
    whole.close()
    whole_spill.close()
