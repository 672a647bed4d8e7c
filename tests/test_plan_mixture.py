"""plan/mixture.py: the take of each source, against tests/naive_mixture.py and by its
promises (exact shares where whole documents allow, a rule not a list)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_mixture import closest_prefix as naive_closest
from naive_mixture import prefix_tokens as naive_prefix

from packcli.core.errors import PackcliError
from packcli.core.mixture import MixSpec, SourceSpec
from packcli.plan import mixture
from packcli.plan.mixture import SourceTotals, closest_prefix, permutation, prefix_tokens, resolve


def stream_of(documents: np.ndarray, lengths: np.ndarray, chunk: int = 7):
    """The (ordinal, length) stream of a source, `chunk` segments at a time."""

    def stream():
        for first in range(0, len(documents), chunk):
            yield documents[first : first + chunk], lengths[first : first + chunk]

    return stream


def segments(tokens_per_document: list[int], pieces: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Each document as `pieces` segments (the last takes the rest), in ordinal order;
    a document of 0 tokens has no segment."""
    documents, lengths = [], []
    for d, tokens in enumerate(tokens_per_document):
        if tokens == 0:
            continue
        own = [tokens // pieces] * (pieces - 1) + [tokens - tokens // pieces * (pieces - 1)]
        for length in own:
            if length:
                documents.append(d)
                lengths.append(length)
    return np.array(documents, dtype=np.int64), np.array(lengths, dtype=np.int64)


def by_rank(tokens_per_document: list[int], seed: int, source: int) -> list[int]:
    order = permutation(len(tokens_per_document), seed, source)
    rank = order.forward(np.arange(len(tokens_per_document)))
    out = [0] * len(tokens_per_document)
    for d, r in enumerate(rank.tolist()):
        out[r] = tokens_per_document[d]
    return out


documents_strategy = st.lists(st.integers(0, 50), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(tokens=documents_strategy, pieces=st.integers(1, 3), seed=st.integers(0, 2**32), data=st.data())
def test_closest_prefix_matches_every_k_tried(tokens, pieces, seed, data):
    documents, lengths = segments(tokens, pieces)
    target = data.draw(st.floats(0, sum(tokens) + 10, allow_nan=False))
    order = permutation(len(tokens), seed, 3)
    got = closest_prefix(stream_of(documents, lengths), order, target)
    want = naive_closest(by_rank(tokens, seed, 3), target)
    # k may differ only across documents with no segment (their tokens are 0): the tokens may not
    assert got[1] == want[1]
    assert naive_prefix(by_rank(tokens, seed, 3), got[0]) == got[1]
    assert got[0] <= want[0] or naive_prefix(by_rank(tokens, seed, 3), want[0]) == got[1]


def test_closest_prefix_with_many_rank_buckets(monkeypatch):
    """Fewer buckets than documents: the second pass searches inside one bucket."""
    monkeypatch.setattr(mixture, "RANK_BUCKETS", 8)
    rng = np.random.default_rng(5)
    tokens = rng.integers(1, 100, size=1000).tolist()
    documents, lengths = segments(tokens, 2)
    order = permutation(len(tokens), 11, 0)
    ranked = by_rank(tokens, 11, 0)
    for target in (0.0, 1.0, 12_345.5, sum(tokens) / 3, sum(tokens) - 1, sum(tokens) * 2.0):
        got = closest_prefix(stream_of(documents, lengths, 64), order, target)
        assert got == naive_closest(ranked, target)


@given(tokens=documents_strategy, seed=st.integers(0, 2**32), k_fraction=st.floats(0, 1))
def test_prefix_tokens_matches_reference(tokens, seed, k_fraction):
    documents, lengths = segments(tokens, 2)
    k = round(k_fraction * len(tokens))
    order = permutation(len(tokens), seed, 1)
    assert prefix_tokens(stream_of(documents, lengths), order, k) == naive_prefix(by_rank(tokens, seed, 1), k)


def source(name, weight=None, epochs=None):
    return SourceSpec(name, (f"{name}.jsonl",), {}, weight, epochs)


def resolved(spec: MixSpec, tokens: list[list[int]], seed: int = 0):
    streams = [stream_of(*segments(t)) for t in tokens]
    totals = [SourceTotals(len(t), sum(t)) for t in tokens]
    return resolve(spec, totals, streams, seed)


def corpus(n: int, seed: int, low: int = 20, high: int = 400) -> list[int]:
    return np.random.default_rng(seed).integers(low, high, size=n).tolist()


def test_weights_are_met_within_half_a_point():
    """Three sources of very different sizes: the large one is sampled down, the small
    one repeated; each share within 0.5 percentage points of its weight."""
    tokens = [corpus(20_000, 1), corpus(2_000, 2), corpus(150, 3)]
    spec = MixSpec((source("web", 0.5), source("code", 0.3), source("math", 0.2)), target_tokens=3_000_000)
    takes = resolved(spec, tokens)
    total = sum(t.tokens for t in takes)
    assert abs(total - 3_000_000) < 3 * 400
    for take, weight in zip(takes, (0.5, 0.3, 0.2)):
        assert abs(take.tokens / total - weight) < 0.005
        assert abs(take.tokens - take.target_tokens) <= 400  # at most one document off
    assert takes[0].full == 0 and takes[0].partial > 0  # sampled down
    assert takes[2].full >= 10  # repeated


def test_without_target_no_weighted_source_repeats():
    tokens = [corpus(500, 4), corpus(100, 5)]
    takes = resolved(MixSpec((source("a", 0.5), source("b", 0.5))), tokens)
    assert max(t.epochs for t in takes) <= 1.0 + 1e-12
    # the binding source is taken whole, the other sampled to the same tokens
    assert sorted(t.full for t in takes) == [0, 1]
    assert abs(takes[0].tokens - takes[1].tokens) <= 400


def test_weights_are_relative():
    tokens = [corpus(1000, 6), corpus(1000, 7)]
    a = resolved(MixSpec((source("a", 7), source("b", 3)), target_tokens=100_000), tokens)
    b = resolved(MixSpec((source("a", 0.7), source("b", 0.3)), target_tokens=100_000), tokens)
    assert [(t.full, t.partial) for t in a] == [(t.full, t.partial) for t in b]


def test_fixed_epochs_take_whole_rounds_and_a_seeded_fraction():
    tokens = [corpus(1000, 8)]
    (take,) = resolved(MixSpec((source("a", epochs=2.5),)), tokens)
    assert (take.full, take.partial) == (2, 500)
    copies = take.copies(np.arange(1000))
    assert np.bincount(copies).tolist() == [0, 0, 500, 500]
    (tenth,) = resolved(MixSpec((source("a", epochs=0.1),)), tokens)
    assert (tenth.full, tenth.partial) == (0, 100)
    assert tenth.copies(np.arange(1000)).sum() == 100
    (default,) = resolved(MixSpec((source("a"),)), tokens)
    assert (default.full, default.partial) == (1, 0)


def test_epoch_sources_take_their_part_of_the_target_first():
    tokens = [corpus(1000, 9), corpus(300, 10), corpus(3000, 11)]
    spec = MixSpec((source("big", 3), source("small", epochs=2), source("other", 1)), target_tokens=800_000)
    takes = resolved(spec, tokens)
    assert takes[1].tokens == 2 * sum(tokens[1])
    left = 800_000 - takes[1].tokens
    assert abs(takes[0].tokens - 0.75 * left) <= 400 and abs(takes[2].tokens - 0.25 * left) <= 400


def test_the_rule_depends_on_seed_and_source_only():
    tokens = corpus(1000, 12)
    one = resolved(MixSpec((source("a", epochs=0.5),)), [tokens], seed=3)[0]
    two = resolved(MixSpec((source("a", epochs=0.5),)), [tokens], seed=3)[0]
    other = resolved(MixSpec((source("a", epochs=0.5),)), [tokens], seed=4)[0]
    docs = np.arange(1000)
    assert np.array_equal(one.taken(docs, 0), two.taken(docs, 0))
    assert not np.array_equal(one.taken(docs, 0), other.taken(docs, 0))
    # a document's fate does not depend on which others are asked about with it
    assert np.array_equal(one.taken(docs[::-1], 0)[::-1], one.taken(docs, 0))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (MixSpec((source("a", 1), source("b", epochs=50))), "'b' asks for 50.000 epochs, more than max_epochs 4"),
        (MixSpec((source("a", 1),), target_tokens=10**9), "'a' needs"),
        (MixSpec((source("a", 0), source("b", 0))), "the weights add up to 0"),
        (MixSpec((source("a", 1), source("b", epochs=3)), target_tokens=1000), "nothing is left"),
    ],
)
def test_impossible_mixtures_are_refused(spec, message):
    spec = MixSpec(spec.sources, target_tokens=spec.target_tokens, max_epochs=4, origin="mix.toml")
    with pytest.raises(PackcliError, match=message):
        resolved(spec, [corpus(100, 13), corpus(100, 14)][: len(spec.sources)])


def test_a_source_with_no_documents_is_named():
    spec = MixSpec((source("a", 1), source("empty", 1)))
    streams = [stream_of(*segments([5, 6])), stream_of(*segments([]))]
    with pytest.raises(PackcliError, match="source 'empty': no documents to pack in empty.jsonl"):
        resolve(spec, [SourceTotals(2, 11), SourceTotals(0, 0)], streams, 0)
