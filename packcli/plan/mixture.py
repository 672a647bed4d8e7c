"""A mixture resolved: how many times each source's documents are taken, as a rule.

Every source is read and tokenized once; then each source's tokens per epoch (`tokens`,
its segments' real tokens) and documents (`documents`) decide the take:

- a source with `epochs` E takes every document floor(E) times, and the documents of
  the first round(frac(E) * documents) ranks of its permutation once more;
- the weighted sources share the tokens the target leaves after the sources with epochs
  (`target_tokens` minus theirs); without a target, the largest share that repeats no
  weighted source. Weights are relative: source s gets w_s / sum(w) of that share. Its
  target t_s becomes floor(t_s / tokens) whole epochs and, for the rest, the prefix of its
  permutation whose tokens come closest to what is left (whole documents: the difference
  is at most one document's tokens, and is reported).

A source's permutation is a seeded bijection of its document ordinals (permute.py, keyed
by the mixture's seed and the source's index), so which documents the partial epoch
takes is a pure function of (seed, source, ordinal): nothing per document is kept, and
every engine, worker count and resumed run takes the same ones. The prefix closest to a
target is found in two passes over the source's (ordinal, length) stream: tokens per
bucket of ranks, then the one bucket where the target falls, sorted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from packcli.core.errors import PackcliError
from packcli.core.mixture import MixSpec
from packcli.plan.permute import RowPermutation

MIX_WINDOW = 1 << 40  # the permutation's window key: source i uses MIX_WINDOW + i (rows use 0, 1, ...)
RANK_BUCKETS = 1 << 16  # buckets of ranks in the first pass of closest_prefix

# (document ordinal, length) of each segment of a source, in chunks; called again for each pass
SegmentStream = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]


@dataclass(frozen=True)
class SourceTotals:
    """What a source holds once read: one epoch of it."""

    documents: int  # documents on the training side (records that became sequences)
    tokens: int  # real tokens of their segments


@dataclass(frozen=True)
class Take:
    """How much of one source a mixture takes: `full` whole epochs, then the documents of
    ranks [0, partial) of its permutation once more."""

    index: int
    documents: int
    tokens_per_epoch: int
    full: int
    partial: int
    partial_tokens: int
    seed: int
    target_tokens: float | None = None  # weighted sources: the tokens their weight asks for

    @property
    def tokens(self) -> int:
        """Real tokens this source puts in the output."""
        return self.full * self.tokens_per_epoch + self.partial_tokens

    @property
    def epochs(self) -> float:
        """Tokens taken per token of one epoch (documents per document for an empty source)."""
        if self.tokens_per_epoch:
            return self.tokens / self.tokens_per_epoch
        return self.full + (self.partial / self.documents if self.documents else 0.0)

    @property
    def rounds(self) -> int:
        """Epochs that take any document: the whole ones, and the partial one if any."""
        return self.full + (1 if self.partial else 0)

    def permutation(self) -> RowPermutation:
        return permutation(self.documents, self.seed, self.index)

    def taken(self, documents: np.ndarray, epoch: int) -> np.ndarray:
        """Whether each document (its ordinal) is taken in round `epoch` (0-based)."""
        documents = np.asarray(documents, dtype=np.int64)
        if epoch < self.full:
            return np.ones(len(documents), dtype=bool)
        if epoch > self.full or not self.partial:
            return np.zeros(len(documents), dtype=bool)
        return self.permutation().forward(documents) < self.partial

    def copies(self, documents: np.ndarray) -> np.ndarray:
        """How many times each document is taken."""
        extra = self.taken(documents, self.full).astype(np.int64)
        return extra + self.full


def permutation(documents: int, seed: int, source: int) -> RowPermutation:
    """The seeded order of a source's documents the partial epoch takes a prefix of."""
    return RowPermutation(documents, seed, MIX_WINDOW + source)


def resolve(spec: MixSpec, totals: list[SourceTotals], streams: list[SegmentStream], seed: int) -> list[Take]:
    """Every source's take (see the module docstring). `streams[i]` gives source i's
    (ordinal, length) per segment; it is read only for a source with a partial epoch.
    `seed`: the mixture's own, else the run's --seed."""
    if len(totals) != len(spec.sources) or len(streams) != len(spec.sources):
        raise PackcliError("internal: a total and a stream per source")
    for source, total in zip(spec.sources, totals):
        if total.documents == 0 or total.tokens == 0:
            raise PackcliError(f"source {source.name!r}: no documents to pack in {_paths(source.paths)}")
    takes: list[Take | None] = [None] * len(totals)
    fixed_tokens = 0
    for i, (source, total) in enumerate(zip(spec.sources, totals)):
        epochs = source.fixed_epochs
        if epochs is None:
            continue
        _check_epochs(spec, source.name, epochs, "asks for")
        full = math.floor(epochs)
        partial = min(total.documents, round((epochs - full) * total.documents))
        if partial == total.documents:  # rounded up to a whole epoch
            full, partial = full + 1, 0
        order = permutation(total.documents, seed, i)
        partial_tokens = prefix_tokens(streams[i], order, partial) if partial else 0
        take = Take(i, total.documents, total.tokens, full, partial, partial_tokens, seed)
        takes[i] = take
        fixed_tokens += take.tokens
    weighted = [(i, float(s.weight)) for i, s in enumerate(spec.sources) if s.weight is not None]
    if weighted:
        shares = _weighted_shares(spec, totals, weighted, fixed_tokens)
        for i, target in shares.items():
            takes[i] = _weighted_take(spec, i, totals[i], streams[i], target, seed)
    resolved = [t for t in takes if t is not None]
    assert len(resolved) == len(takes)
    return resolved


def _weighted_shares(
    spec: MixSpec, totals: list[SourceTotals], weighted: list[tuple[int, float]], fixed_tokens: int
) -> dict[int, float]:
    """Each weighted source's target tokens."""
    weight_sum = sum(w for _, w in weighted)
    if weight_sum <= 0:
        raise PackcliError(f"{spec.origin}: the weights add up to 0; give at least one source a positive weight")
    left: float
    if spec.target_tokens is not None:
        left = spec.target_tokens - fixed_tokens
        if left <= 0:
            raise PackcliError(
                f"{spec.origin}: the sources with epochs take {fixed_tokens:,} tokens, as many as target_tokens "
                f"{spec.target_tokens:,} or more: nothing is left for the weighted sources"
            )
    else:  # the largest share that repeats no weighted source
        left = min(totals[i].tokens * weight_sum / w for i, w in weighted if w)
    return {i: left * w / weight_sum for i, w in weighted}


def _weighted_take(
    spec: MixSpec, index: int, total: SourceTotals, stream: SegmentStream, target: float, seed: int
) -> Take:
    source = spec.sources[index]
    _check_epochs(spec, source.name, target / total.tokens, "needs")
    full = math.floor(target / total.tokens)
    rest = target - full * total.tokens
    partial, partial_tokens = 0, 0
    if rest > 0:
        order = permutation(total.documents, seed, index)
        partial, partial_tokens = closest_prefix(stream, order, rest)
    if partial == total.documents:  # the whole permutation: one more whole epoch
        full, partial, partial_tokens = full + 1, 0, 0
    return Take(index, total.documents, total.tokens, full, partial, partial_tokens, seed, target_tokens=target)


def _check_epochs(spec: MixSpec, name: str, epochs: float, verb: str) -> None:
    if spec.max_epochs is not None and epochs > spec.max_epochs + 1e-9:
        raise PackcliError(
            f"{spec.origin}: source {name!r} {verb} {epochs:.3f} epochs, more than max_epochs {spec.max_epochs:g}"
        )


def prefix_tokens(stream: SegmentStream, order: RowPermutation, k: int) -> int:
    """Tokens of the documents of ranks [0, k)."""
    total = 0
    for documents, lengths in stream():
        if len(documents):
            total += int(np.asarray(lengths, dtype=np.int64)[order.forward(documents) < k].sum())
    return total


def closest_prefix(stream: SegmentStream, order: RowPermutation, target: float) -> tuple[int, int]:
    """(k, tokens of ranks [0, k)): the k whose prefix of the permutation holds the number
    of tokens closest to `target` (the smaller k on a tie)."""
    n = order.rows
    if target <= 0 or n == 0:
        return 0, 0
    buckets = min(n, RANK_BUCKETS)
    per_bucket = np.zeros(buckets, dtype=np.int64)
    for documents, lengths in stream():
        if len(documents):
            rank = order.forward(documents)
            np.add.at(per_bucket, rank * buckets // n, np.asarray(lengths, dtype=np.int64))
    before = np.zeros(buckets + 1, dtype=np.int64)
    np.cumsum(per_bucket, out=before[1:])
    j = int(np.searchsorted(before, target, side="right")) - 1  # the last bucket starting at or below target
    if j >= buckets:
        return n, int(before[-1])
    ranks: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    for documents, lengths in stream():
        if len(documents):
            rank = order.forward(documents)
            inside = rank * buckets // n == j
            ranks.append(rank[inside])
            sizes.append(np.asarray(lengths, dtype=np.int64)[inside])
    rank = np.concatenate(ranks) if ranks else np.zeros(0, dtype=np.int64)
    length = np.concatenate(sizes) if sizes else np.zeros(0, dtype=np.int64)
    present, where = np.unique(rank, return_inverse=True)
    per_document = np.bincount(where, weights=length, minlength=len(present)).astype(np.int64)
    first_rank = -(-j * n // buckets)  # the bucket's first rank: the least r with r * buckets // n == j
    ks = np.concatenate([[first_rank], present + 1])
    sums = int(before[j]) + np.concatenate([[0], np.cumsum(per_document)])
    best = int(np.argmin(np.abs(sums - target)))  # argmin takes the first: the smaller k on a tie
    return int(ks[best]), int(sums[best])


def _paths(paths: tuple[str, ...], shown: int = 3) -> str:
    if len(paths) <= shown:
        return ", ".join(paths)
    return f"{', '.join(paths[:shown])}, ... ({len(paths):,} paths)"
