"""The real tokens of a packed output, chunk by chunk: the same segments and bytes as the
rows `packcli.write.shards` reads, whatever the chunk and block sizes, and damage named."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import load_rows, random_texts, real_segments, write_jsonl

from packcli.core.errors import PackcliError
from packcli.export import tokens as export_tokens
from packcli.export.tokens import token_blocks
from packcli.plan.rows import IGNORE_INDEX, real_token_mask
from packcli.write.manifest import load_manifest


def streamed(source, tmp_path, labels=False):
    """(segment lengths, row starts, real per row, written ids, written labels) over every block."""
    manifest = load_manifest(source)
    parts: dict[str, list] = {"lengths": [], "starts_row": [], "real": [], "mask": []}
    with open(tmp_path / "ids", "wb") as ids, open(tmp_path / "labels", "wb") as learned:
        for block in token_blocks(source, manifest, labels=labels):
            for chunk in block.chunks():
                parts["mask"].append(block.real_mask(chunk))
                block.write(ids.fileno(), chunk, chunk.ids.astype(np.int32))
                if labels:
                    block.write(learned.fileno(), chunk, chunk.labels.astype(np.int32))
            for name in ("lengths", "starts_row", "real"):
                parts[name].append(getattr(block.segments, name))
    joined = {name: np.concatenate(values) for name, values in parts.items()}
    read = [np.fromfile(tmp_path / name, dtype=np.int32) for name in ("ids", "labels")]
    return joined, *read


@pytest.mark.parametrize("fmt", ["parquet", "npy", "npy read"])
@pytest.mark.parametrize("pad", [[], ["--pad-to-multiple-of", 8]])
def test_small_chunks_and_blocks_give_every_real_token(tmp_path, packed, word_tokenizer, monkeypatch, fmt, pad):
    """npy rows are mapped a chunk at a time where the system reads a mapping in at once
    (Linux), else read into a buffer ("npy read")."""
    if fmt == "npy read":
        fmt = "npy"
        monkeypatch.setattr(export_tokens, "MAP_POPULATE", 0)
    records = [{"p": t, "c": " ".join(reversed(t.split()))} for t in random_texts(90, seed=3, max_words=20)]
    path = write_jsonl(tmp_path / "in.jsonl", records)
    options = ("--prompt-field", "p", "--completion-field", "c", "--rows-per-shard", 13, *pad)
    source = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--format", fmt, *options)
    monkeypatch.setattr(export_tokens, "READ_BLOCK_ROWS", 5)  # several blocks a shard
    monkeypatch.setattr(export_tokens, "CHUNK_BYTES", 3 * 32 * 2)  # three rows a chunk (npy)
    parts, ids, labels = streamed(source, tmp_path, labels=True)
    rows, _ = load_rows(source)
    mask = real_token_mask(rows)
    assert parts["mask"].tolist() == mask.tolist()  # where the real tokens are, chunk by chunk
    assert ids.tolist() == rows.input_ids[mask].tolist()
    assert labels.tolist() == rows.labels[mask].tolist()
    assert (labels == IGNORE_INDEX).any() and (labels != IGNORE_INDEX).any()
    segments = real_segments(rows)
    assert parts["lengths"].tolist() == [len(s) for s in segments]
    assert parts["starts_row"].sum() == len(rows) and parts["real"].tolist() == rows.real_lengths().tolist()


def test_headers_numpy_writes_are_read_too(tmp_path, packed, word_tokenizer):
    """A shard rewritten by numpy (npy format 2.0 here) reads as packcli's own."""
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in random_texts(30, seed=4, max_words=20)])
    source = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 16, "--format", "npy")
    before, ids_before, _ = streamed(source, tmp_path)
    for name in ("input_ids", "cu_seqlens"):
        npy = source / "shard-00000" / f"{name}.npy"
        values = np.load(npy)
        with open(npy, "wb") as f:
            np.lib.format.write_array(f, values, version=(2, 0))
    after, ids_after, _ = streamed(source, tmp_path)
    assert ids_after.tolist() == ids_before.tolist()
    assert after["lengths"].tolist() == before["lengths"].tolist()


@pytest.mark.parametrize("populate", [export_tokens.MAP_POPULATE, 0])
def test_damaged_npy_shards_are_named(tmp_path, packed, word_tokenizer, monkeypatch, populate):
    monkeypatch.setattr(export_tokens, "MAP_POPULATE", populate)
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in random_texts(30, seed=6, max_words=20)])
    source = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 16, "--format", "npy")
    ids = source / "shard-00000" / "input_ids.npy"
    ids.write_bytes(ids.read_bytes()[:-10])
    with pytest.raises(PackcliError, match=r"shard-00000: input_ids.npy is truncated"):
        streamed(source, tmp_path)
    ids.write_bytes(b"not npy")
    with pytest.raises(PackcliError, match=r"shard-00000: cannot read shard"):
        streamed(source, tmp_path)
    (source / "shard-00000" / "num_segments.npy").unlink()
    with pytest.raises(PackcliError, match=r"shard-00000: missing file\(s\) num_segments.npy"):
        streamed(source, tmp_path)


def test_spans_are_written_in_order_whether_they_touch_or_not(tmp_path):
    data = memoryview(bytes(range(256)) * 4)
    begins = np.array([0, 10, 30, 40, 40, 100, 500], dtype=np.int64)
    ends = np.array([10, 20, 40, 40, 60, 100, 1024], dtype=np.int64)  # touching, empty, apart
    with open(tmp_path / "out", "wb") as f:
        export_tokens.write_spans(f.fileno(), data, begins, ends)
    want = b"".join(bytes(data[b:e]) for b, e in zip(begins.tolist(), ends.tolist(), strict=True))
    assert (tmp_path / "out").read_bytes() == want and len(want) == 10 + 10 + 10 + 20 + 524
