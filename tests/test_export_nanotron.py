"""`packcli export nanotron`: every real token read back by datatrove's own datasets."""

from __future__ import annotations

import json

import numpy as np
import pytest
from datatrove.utils.dataset import DatatroveFileDataset, DatatroveFolderDataset
from helpers import load_rows, random_texts, real_segments, write_jsonl
from mixed import mixed_output

from packcli.plan.rows import real_token_mask


def export(cli, source, out, *options):
    result = cli("export", "nanotron", source, out, "--json", *options)
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


def real_columns(source):
    """input_ids, labels and position_ids of the real tokens, rows in order."""
    rows, _ = load_rows(source)
    mask = real_token_mask(rows)
    return rows.input_ids[mask], rows.labels[mask], rows.position_ids[mask]


def check_every_token(out, source, token_size):
    """The folder token by token (windows of one token), then each file as one window with
    the positions datatrove derives from its .ds.index."""
    ids, _, positions = real_columns(source)
    folder = DatatroveFolderDataset(str(out), seq_len=0, token_size=token_size)
    assert len(folder) == len(ids)
    assert [int(folder[i]["input_ids"][0]) for i in range(len(folder))] == ids.tolist()
    start = 0
    for path in sorted(out.glob("*.ds")):
        count = path.stat().st_size // token_size
        whole = DatatroveFileDataset(str(path), seq_len=count - 1, token_size=token_size, return_positions=True)[0]
        assert whole["input_ids"].tolist() == ids[start : start + count].tolist()
        assert whole["positions"].tolist() == positions[start : start + count].tolist()
        start += count
    assert start == len(ids)


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_every_token_reads_back(tmp_path, packed, cli, word_tokenizer, fmt):
    texts = random_texts(120, seed=5, max_words=40)
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    source = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--format", fmt, "--rows-per-shard", 25)
    out = tmp_path / "nano"
    summary = export(cli, source, out)
    rows, manifest = load_rows(source)
    segments = real_segments(rows)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"shard-{i:05d}.ds{suffix}" for i in range(len(manifest["shards"])) for suffix in ("", ".index")
    )
    ends = np.concatenate([np.fromfile(p, dtype="<u8") for p in sorted(out.glob("*.ds.index"))])
    assert len(ends) == summary["documents"] == len(segments)  # one document per segment
    assert summary["token_size"] == 2 and summary["real_tokens"] == sum(map(len, segments))
    check_every_token(out, source, 2)


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_pads_inside_rows_are_not_tokens(tmp_path, packed, cli, word_tokenizer, fmt):
    """--pad-to-multiple-of puts pads after every segment: the export keeps only real tokens,
    one document per real segment."""
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in random_texts(80, seed=8, max_words=30)])
    source = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--pad-to-multiple-of", 8, "--format", fmt)
    out = tmp_path / "nano"
    summary = export(cli, source, out)
    rows, _ = load_rows(source)
    assert rows.cu_seqlens_unpadded is not None and (rows.cu_seqlens != rows.cu_seqlens_unpadded).any()
    lengths = np.diff(np.concatenate([[0], np.fromfile(next(out.glob("*.ds.index")), dtype="<u8")]))
    assert lengths.tolist() == [len(segment) for segment in real_segments(rows)]
    assert summary["real_tokens"] == int(real_token_mask(rows).sum())
    check_every_token(out, source, 2)


def test_concat_mode_documents_are_segments(tmp_path, packed, cli, word_tokenizer):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in random_texts(60, seed=6, max_words=30)])
    source = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 8, "--mode", "concat", "--rows-per-shard", 30)
    export(cli, source, tmp_path / "nano")
    check_every_token(tmp_path / "nano", source, 2)


def test_sft_loss_mask_with_a_large_vocabulary(tmp_path, packed, cli, big_tokenizer):
    records = [
        {"p": t, "c": " ".join(reversed(t.split()))} for t in random_texts(40, seed=7, max_words=12, vocab=69_990)
    ]
    path = write_jsonl(tmp_path / "in.jsonl", records)
    source = packed(
        path, "--tokenizer", big_tokenizer, "--seq-len", 24, "--prompt-field", "p", "--completion-field", "c"
    )
    out = tmp_path / "nano"
    summary = export(cli, source, out)
    assert summary["token_size"] == 4
    check_every_token(out, source, 4)
    ids, labels, _ = real_columns(source)
    assert ids.max() > 65535
    loss = np.concatenate([np.fromfile(p, dtype=np.uint8) for p in sorted(out.glob("*.ds.loss"))])
    assert loss.tolist() == (labels != -100).astype(np.uint8).tolist()
    assert 0 < loss.sum() < len(loss)


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_a_mixed_output_exports_its_real_tokens(tmp_path, cli, fmt):
    """Per-segment columns (a mixture's segment_source) are left out: the real tokens and their loss mask read back."""
    source = mixed_output(tmp_path / "mixed", fmt, multiple=4, seq_len=32).out
    out = tmp_path / "nano"
    summary = export(cli, source, out)
    segments = real_segments(load_rows(source)[0])
    assert summary["documents"] == len(segments) and summary["real_tokens"] == sum(map(len, segments))
    check_every_token(out, source, 2)
    _, labels, _ = real_columns(source)
    loss = np.concatenate([np.fromfile(p, dtype=np.uint8) for p in sorted(out.glob("*.ds.loss"))])
    assert loss.tolist() == (labels != -100).astype(np.uint8).tolist()
