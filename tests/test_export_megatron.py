"""`packcli export megatron`: the .bin/.idx pair read back by an independent reader."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from helpers import load_rows, random_texts, real_segments, word_ids, write_jsonl
from megatron_reader import read_megatron
from mixed import mixed_output

from packcli.export import megatron
from packcli.export import tokens as export_tokens

EOS, BOS = 1, 2


def export(cli, out, prefix, *options):
    result = cli("export", "megatron", out, prefix, "--json", *options)
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout), result.stderr


def as_lists(data):
    return [s.tolist() for s in data.sequences]


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_bin_mode_one_document_per_segment(tmp_path, packed, cli, word_tokenizer, fmt):
    texts = random_texts(150, seed=1, max_words=40)
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--format", fmt, "--rows-per-shard", 20)
    summary, _ = export(cli, out, tmp_path / "mega")
    data = read_megatron(tmp_path / "mega")
    rows, _ = load_rows(out)
    segments = real_segments(rows)
    assert as_lists(data) == segments  # same order, split pieces are documents of their own
    assert data.dtype_code == 8 and summary["dtype"] == "uint16"  # vocabulary of 300
    assert data.lengths.tolist() == [len(s) for s in segments]
    assert data.pointers.tolist() == (np.cumsum([0] + [2 * len(s) for s in segments[:-1]])).tolist()
    assert data.document_index.tolist() == list(range(len(segments) + 1))
    assert summary["documents"] == len(segments) and summary["tokens"] == sum(map(len, segments))
    whole = Counter(tuple(word_ids(t) + [EOS]) for t in texts if len(t.split()) + 1 <= 32)
    assert not whole - Counter(map(tuple, as_lists(data)))  # every document that fits a row is there
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_pads_after_segments_are_left_out(tmp_path, packed, cli, word_tokenizer, fmt):
    """--pad-to-multiple-of puts pads after every segment: only the real tokens are written."""
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in random_texts(80, seed=9, max_words=30)])
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--pad-to-multiple-of", 8, "--format", fmt)
    summary, _ = export(cli, out, tmp_path / "mega")
    rows, _ = load_rows(out)
    assert (rows.cu_seqlens != rows.cu_seqlens_unpadded).any()
    assert as_lists(read_megatron(tmp_path / "mega")) == real_segments(rows)
    assert summary["tokens"] == sum(map(len, real_segments(rows)))


def test_concat_mode_documents_are_rebuilt(tmp_path, packed, cli, word_tokenizer):
    texts = random_texts(120, seed=2, max_words=50)
    texts += ["w1 w2 w3 w4 w5 w6 w7"] * 3  # 8 tokens with EOS: ends exactly at a row end
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    for fmt in ("parquet", "npy"):
        out = packed(
            path,
            "--tokenizer",
            word_tokenizer,
            "--seq-len",
            8,
            "--mode",
            "concat",
            "--format",
            fmt,
            "--rows-per-shard",
            7,
            "--no-shuffle",  # documents are rebuilt across rows in stream order
        )
        summary, stderr = export(cli, out, tmp_path / f"mega-{fmt}")
        data = read_megatron(tmp_path / f"mega-{fmt}")
        assert as_lists(data) == [word_ids(t) + [EOS] for t in texts]
        assert summary["rule"] == "eos" and stderr == ""


def test_documents_across_blocks_and_a_long_index(tmp_path, packed, cli, word_tokenizer, monkeypatch):
    """Documents that go on across read blocks are joined, and the .idx written in pieces
    reads as one."""
    texts = random_texts(100, seed=12, max_words=50)
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    options = ("--mode", "concat", "--no-shuffle", "--format", "npy", "--rows-per-shard", 9)
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 8, *options)
    monkeypatch.setattr(export_tokens, "READ_BLOCK_ROWS", 2)
    monkeypatch.setattr(megatron, "INDEX_STEP", 3)
    summary, _ = export(cli, out, tmp_path / "mega")
    data = read_megatron(tmp_path / "mega")
    assert as_lists(data) == [word_ids(t) + [EOS] for t in texts]
    assert data.document_index.tolist() == list(range(len(texts) + 1)) and summary["documents"] == len(texts)
    assert data.pointers.tolist() == np.cumsum([0] + [2 * (len(t.split()) + 1) for t in texts[:-1]]).tolist()


def test_concat_mode_with_bos_and_no_eos(tmp_path, packed, cli, bos_tokenizer):
    texts = random_texts(60, seed=3, max_words=30)
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    options = ("--mode", "concat", "--bos", "--no-eos", "--no-shuffle")
    out = packed(path, "--tokenizer", bos_tokenizer, "--seq-len", 8, *options)
    summary, _ = export(cli, out, tmp_path / "mega")
    assert summary["rule"] == "bos"
    assert as_lists(read_megatron(tmp_path / "mega")) == [[BOS] + word_ids(t) for t in texts]


def test_concat_mode_without_boundary_tokens_exports_segments(tmp_path, packed, cli, word_tokenizer):
    texts = random_texts(40, seed=4, max_words=30)
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    for options in (["--no-eos", "--no-shuffle"], []):  # no boundary token; rows shuffled (the default)
        out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 8, "--mode", "concat", *options)
        summary, stderr = export(cli, out, tmp_path / "mega")
        assert summary["rule"] == "segment" and "note: " in stderr
        assert as_lists(read_megatron(tmp_path / "mega")) == real_segments(load_rows(out)[0])


def test_large_vocabulary_is_int32(tmp_path, packed, cli, big_tokenizer):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in random_texts(30, seed=5, vocab=69_990)])
    out = packed(path, "--tokenizer", big_tokenizer, "--seq-len", 16, "--format", "npy")
    summary, _ = export(cli, out, tmp_path / "mega")
    data = read_megatron(tmp_path / "mega")
    assert data.dtype_code == 4 and summary["dtype"] == "int32"
    assert as_lists(data) == real_segments(load_rows(out)[0])
    assert max(max(s) for s in as_lists(data)) > 65535
    result = cli("export", "megatron", out, tmp_path / "small", "--dtype", "uint16")
    assert result.exit_code == 1 and "does not fit uint16" in result.stderr
    assert not list(tmp_path.glob("small*"))  # nothing half-written is left


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_uint16_checks_the_real_tokens_where_pads_follow_segments(tmp_path, packed, cli, big_tokenizer, fmt):
    """With --pad-to-multiple-of a row's real tokens are not its first real-count ones: the
    dtype check looks at the real tokens themselves. One past the row's real count that
    does not fit is refused (not wrapped); pads that do not fit are not written, so they pass."""
    texts = ["w1 w2 w3 w4 w5", "w6 w7 w8 w9 w10 w11", "w1 w2 w3 w4 w5 w69990"]  # the big id lands at position 21
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    opts = ("--tokenizer", big_tokenizer, "--seq-len", 32, "--pad-to-multiple-of", 8, "--format", fmt, "--no-shuffle")
    out = packed(path, *opts, out=tmp_path / "big")
    rows, _ = load_rows(out)
    assert rows.real_lengths().tolist() == [20] and int(np.argmax(rows.input_ids[0] > 65535)) >= 20
    result = cli("export", "megatron", out, tmp_path / "small", "--dtype", "uint16")
    assert result.exit_code == 1 and "token id 69994 does not fit uint16" in result.stderr
    assert not list(tmp_path.glob("small*"))
    path = write_jsonl(tmp_path / "small.jsonl", [{"text": t} for t in texts[:2] + ["w1 w2 w3 w4 w5 w6"]])
    out = packed(path, *opts, "--pad-id", 69_000, out=tmp_path / "big-pad")
    rows, _ = load_rows(out)
    assert (rows.input_ids[0, : rows.real_lengths()[0]] == 69_000).any()  # pads among the first real-count ids
    summary, _ = export(cli, out, tmp_path / "mega", "--dtype", "uint16")
    data = read_megatron(tmp_path / "mega")
    assert data.dtype_code == 8 and summary["dtype"] == "uint16" and as_lists(data) == real_segments(rows)


def test_sft_output_notes_lost_labels(tmp_path, packed, cli, word_tokenizer):
    path = write_jsonl(tmp_path / "in.jsonl", [{"p": "w1 w2", "c": "w3 w4"}] * 5)
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 16, "--prompt-field", "p", "--completion-field", "c")
    _, stderr = export(cli, out, tmp_path / "mega")
    assert "labels are not exported" in stderr
    assert as_lists(read_megatron(tmp_path / "mega")) == [word_ids("w1 w2 w3 w4") + [EOS]] * 5


def test_errors(tmp_path, cli):
    result = cli("export", "megatron", tmp_path / "nothing", tmp_path / "mega")
    assert result.exit_code == 1 and result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    (tmp_path / "empty").mkdir()
    result = cli("export", "megatron", tmp_path / "empty", tmp_path / "mega")
    assert result.exit_code == 1 and "no manifest.json" in result.stderr
    result = cli("export", "megatron", tmp_path / "empty", tmp_path / "mega", "--dtype", "float16")
    assert result.exit_code == 2 and "dtype must be one of" in result.stderr


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_a_mixed_output_exports_its_segments(tmp_path, cli, fmt):
    """Per-segment columns (a mixture's segment_source) are not Megatron's: the documents are the segments."""
    source = mixed_output(tmp_path / "mixed", fmt, multiple=4, seq_len=32).out
    summary, _ = export(cli, source, tmp_path / "mega")
    segments = real_segments(load_rows(source)[0])
    assert as_lists(read_megatron(tmp_path / "mega")) == segments and summary["documents"] == len(segments)
