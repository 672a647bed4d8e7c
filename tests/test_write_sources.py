"""write/sources.py: a source spill read back in chunks is what was written, segment by
segment, with each segment's document and group."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packcli.write.sources import SourceSpillWriter, read_source, segment_stream


def written(tmp_path, lengths, masked, grouped, appends=3):
    rng = np.random.default_rng(len(lengths))
    lengths = np.asarray(lengths, dtype=np.int64)
    tokens = rng.integers(0, 300, size=int(lengths.sum())).astype(np.uint16)
    learned = rng.random(len(tokens)) < 0.5 if masked else None
    documents = np.cumsum(rng.random(len(lengths)) < 0.6)  # consecutive segments share documents
    groups = rng.integers(0, 4, size=len(lengths)).astype(np.int32) if grouped else None
    writer = SourceSpillWriter(tmp_path / "spill", np.dtype(np.uint16), masked, grouped)
    cuts = np.linspace(0, len(lengths), appends + 1).astype(int)
    ends = np.concatenate([[0], np.cumsum(lengths)])
    for a, b in zip(cuts[:-1], cuts[1:]):
        t0, t1 = ends[a], ends[b]
        writer.append(
            tokens[t0:t1],
            lengths[a:b],
            None if learned is None else learned[t0:t1],
            documents[a:b],
            None if groups is None else groups[a:b],
        )
    spill = writer.finish({"run_id": "x"})
    return spill, tokens, lengths, learned, documents, groups


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=80),
    masked=st.booleans(),
    grouped=st.booleans(),
    chunk=st.integers(1, 100),
)
def test_chunks_join_into_what_was_written(tmp_path_factory, lengths, masked, grouped, chunk):
    tmp_path = tmp_path_factory.mktemp("source")
    spill, tokens, lengths, learned, documents, groups = written(tmp_path, lengths, masked, grouped)
    try:
        chunks = list(read_source(spill, chunk_tokens=chunk))
    finally:
        spill.close()
    assert all(len(c.lengths) >= 1 for c in chunks)
    assert np.array_equal(np.concatenate([c.tokens for c in chunks]), tokens)
    assert np.array_equal(np.concatenate([c.lengths for c in chunks]), lengths)
    assert np.array_equal(np.concatenate([c.documents for c in chunks]), documents)
    if masked:
        assert np.array_equal(np.concatenate([c.learned for c in chunks]), learned)
    else:
        assert all(c.learned is None for c in chunks)
    if grouped:
        assert np.array_equal(np.concatenate([c.groups for c in chunks]), groups)
    else:
        assert all(c.groups is None for c in chunks)
    stream = list(segment_stream(spill))
    assert np.array_equal(np.concatenate([d for d, _ in stream]), documents)
    assert np.array_equal(np.concatenate([n for _, n in stream]), lengths)


def test_select_keeps_whole_segments_in_order(tmp_path):
    spill, tokens, lengths, learned, documents, _ = written(tmp_path, [3, 1, 4, 1, 5, 9, 2, 6], True, False, 2)
    (chunk,) = list(read_source(spill))
    spill.close()
    keep = np.array([True, False, False, True, True, False, False, True])
    part = chunk.select(keep)
    ends = np.concatenate([[0], np.cumsum(lengths)])
    want = np.concatenate([tokens[ends[i] : ends[i + 1]] for i in np.flatnonzero(keep)])
    want_learned = np.concatenate([learned[ends[i] : ends[i + 1]] for i in np.flatnonzero(keep)])
    assert np.array_equal(part.tokens, want) and np.array_equal(part.learned, want_learned)
    assert part.lengths.tolist() == [3, 1, 5, 6]
    assert part.documents.tolist() == documents[keep].tolist()
