"""A mixture's take, the slow way: whole arrays of documents, every k tried, so that
packcli/plan/mixture.py's streaming passes can be compared with it."""

from __future__ import annotations


def closest_prefix(tokens_by_rank: list[int], target: float) -> tuple[int, int]:
    """Every k in [0, n], its prefix's tokens; the k closest to target, the smallest on a tie."""
    best_k, best_sum, best_gap = 0, 0, abs(target)
    total = 0
    for k, tokens in enumerate(tokens_by_rank, start=1):
        total += tokens
        gap = abs(total - target)
        if gap < best_gap:
            best_k, best_sum, best_gap = k, total, gap
    return best_k, best_sum


def prefix_tokens(tokens_by_rank: list[int], k: int) -> int:
    return sum(tokens_by_rank[:k])
