"""A --group-by output's per-group token hash the obvious way, with Python integers: the
reference packcli/plan/grouping.py's kernels must match exactly.

A group's hash is the sum, modulo 2^64, of splitmix64's finaliser (the golden-ratio step
first) over each of its real tokens. A row's real tokens are, for each real segment k
(k < num_segments), the first (unpadded end - unpadded start) tokens from the segment's
start in cu_seqlens: the pads --pad-to-multiple-of puts after them and the row's padding
segment are not read tokens."""

from __future__ import annotations

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def token_mix(token: int) -> int:
    z = (token + GOLDEN) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def real_tokens_of_row(ids, cu, unpadded, num_segments) -> list[int]:
    """ids: one row; cu / unpadded: its cu_seqlens and cu_seqlens_unpadded (or None)."""
    real = cu if unpadded is None else unpadded
    tokens: list[int] = []
    for k in range(num_segments):
        tokens += [int(t) for t in ids[cu[k] : cu[k] + real[k + 1] - real[k]]]
    return tokens


def group_hashes(rows_tokens: list[list[int]], row_group: list[int], n_groups: int) -> list[int]:
    """rows_tokens: each row's real tokens; the hash of each group's tokens."""
    hashes = [0] * n_groups
    for tokens, group in zip(rows_tokens, row_group):
        for token in tokens:
            hashes[group] = (hashes[group] + token_mix(token)) & MASK
    return hashes


def length_table(groups, placed, seq_len):
    """table[g][L]: the segments of group id g (a row per id up to the largest) of placed
    length L."""
    table = [[0] * (seq_len + 1) for _ in range(max(groups, default=-1) + 1)]
    for g, n in zip(groups, placed):
        table[g][n] += 1
    return table
