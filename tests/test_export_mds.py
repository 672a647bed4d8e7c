"""`packcli export mds`: every row read back by streaming's own StreamingDataset."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import load_rows, random_texts, write_jsonl

from packcli.export_mds import streaming_base


def export(cli, source, out, *options):
    result = cli("export", "mds", source, out, "--json", *options)
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


def read_back(out, tmp_path):
    """Every sample as StreamingDataset gives it, in order (a fresh cache per read)."""
    base = streaming_base()
    base.util.clean_stale_shared_memory()
    dataset = base.StreamingDataset(local=str(out), batch_size=1, shuffle=False)
    try:
        return [dataset[i] for i in range(len(dataset))]
    finally:
        del dataset
        base.util.clean_stale_shared_memory()


def assert_same_rows(samples, out_dir, ids_dtype):
    rows, _ = load_rows(out_dir)
    assert len(samples) == len(rows)
    for r, sample in enumerate(samples):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
        assert sample["input_ids"].dtype == ids_dtype and sample["input_ids"].tolist() == rows.input_ids[r].tolist()
        assert sample["labels"].dtype == np.int32 and sample["labels"].tolist() == rows.labels[r].tolist()
        assert sample["position_ids"].dtype == np.int32
        assert sample["position_ids"].tolist() == rows.position_ids[r].tolist()
        assert sample["cu_seqlens"].dtype == np.int32 and sample["cu_seqlens"].tolist() == cu.tolist()
        assert sample["num_segments"] == rows.num_segments[r]


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_every_row_reads_back(tmp_path, packed, cli, word_tokenizer, fmt):
    texts = random_texts(150, seed=1, max_words=40)
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    source = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--format", fmt, "--rows-per-shard", 20)
    summary = export(cli, source, tmp_path / "mds")
    assert json.loads((tmp_path / "mds" / "index.json").read_text())["shards"]
    samples = read_back(tmp_path / "mds", tmp_path)
    assert summary["rows"] == len(samples) == load_rows(source)[1]["totals"]["rows"]
    assert_same_rows(samples, source, np.uint16)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_compressed_sft_rows_with_a_large_vocabulary(tmp_path, packed, cli, big_tokenizer):
    records = [
        {"p": t, "c": " ".join(reversed(t.split()))} for t in random_texts(60, seed=2, max_words=12, vocab=69_990)
    ]
    path = write_jsonl(tmp_path / "in.jsonl", records)
    source = packed(
        path, "--tokenizer", big_tokenizer, "--seq-len", 24, "--prompt-field", "p", "--completion-field", "c"
    )
    summary = export(cli, source, tmp_path / "mds", "--compression", "zstd")
    index = json.loads((tmp_path / "mds" / "index.json").read_text())
    assert {shard["compression"] for shard in index["shards"]} == {"zstd"}
    assert all((tmp_path / "mds" / shard["zip_data"]["basename"]).is_file() for shard in index["shards"])
    samples = read_back(tmp_path / "mds", tmp_path)
    assert summary["rows"] == len(samples)
    assert_same_rows(samples, source, np.uint32)
    assert any((s["labels"][s["labels"] != -100] > 65535).any() for s in samples)
    assert any(((s["labels"] == -100) & (s["position_ids"] > 0)).any() for s in samples)  # prompt masks kept


def test_bad_compression_is_a_usage_error(tmp_path, packed, cli, word_tokenizer):
    source = packed(
        write_jsonl(tmp_path / "in.jsonl", [{"text": "w1 w2"}]), "--tokenizer", word_tokenizer, "--seq-len", 8
    )
    result = cli("export", "mds", source, tmp_path / "mds", "--compression", "lzma")
    assert result.exit_code == 2 and "compression must be one of" in result.stderr
    assert not (tmp_path / "mds").exists()


def test_rows_are_encoded_as_mds_writer_encodes_them(tmp_path, packed, word_tokenizer):
    """The export's direct encoding against MDSWriter.encode_sample, row by row, including
    rows with 256 or more cu_seqlens entries (a wider shape dtype)."""
    from packcli.export import blocks, read_source, token_dtype
    from packcli.export_mds import encode_block, mds_columns

    texts = ["w1"] * 600 + random_texts(100, seed=9, max_words=20)
    source = packed(
        write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts]),
        "--tokenizer",
        word_tokenizer,
        "--seq-len",
        1024,
    )
    manifest = read_source(source)
    writer = streaming_base().MDSWriter(out=str(tmp_path / "mds"), columns=mds_columns(manifest), progress_bar=False)
    widths = []
    for block in blocks(source, manifest):
        rows = block.rows
        encoded = encode_block(block, token_dtype(manifest))
        assert len(encoded.sizes()) == len(rows)
        for i in range(len(rows)):
            lo, hi = rows.cu_offsets[i], rows.cu_offsets[i + 1]
            sample = {
                "input_ids": rows.input_ids[i].astype(np.uint16),
                "labels": rows.labels[i],
                "position_ids": rows.position_ids[i],
                "cu_seqlens": rows.cu_seqlens[lo:hi],
                "num_segments": int(rows.num_segments[i]),
            }
            assert encoded.sample(i) == writer.encode_sample(sample)
            widths.append(hi - lo)
    writer.finish()
    assert max(widths) >= 256 and min(widths) < 256


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_shards_and_index_are_the_bytes_mds_writer_writes(tmp_path, packed, big_tokenizer, compression):
    """The whole output against MDSWriter given the same samples one by one: shard cuts
    (a small size limit, so there are several), shard files and index.json."""
    from packcli.export import read_source, token_dtype
    from packcli.export_mds import export_mds, mds_columns

    records = [
        {"p": t, "c": " ".join(reversed(t.split()))} for t in random_texts(60, seed=4, max_words=20, vocab=69_990)
    ]
    source = packed(
        write_jsonl(tmp_path / "in.jsonl", records),
        "--tokenizer",
        big_tokenizer,
        "--seq-len",
        64,
        "--prompt-field",
        "p",
        "--completion-field",
        "c",
        "--rows-per-shard",
        7,
    )
    manifest = read_source(source)
    limit = 4000
    export_mds(source, tmp_path / "ours", compression=compression, size_limit=limit)
    rows, _ = load_rows(source)
    columns = mds_columns(manifest)
    base = streaming_base()
    with base.MDSWriter(
        out=str(tmp_path / "theirs"), columns=columns, compression=compression, size_limit=limit, progress_bar=False
    ) as writer:
        for r in range(len(rows)):
            lo, hi = rows.cu_offsets[r], rows.cu_offsets[r + 1]
            writer.write(
                {
                    "input_ids": rows.input_ids[r].astype(token_dtype(manifest)),
                    "labels": rows.labels[r],
                    "position_ids": rows.position_ids[r],
                    "cu_seqlens": rows.cu_seqlens[lo:hi],
                    "num_segments": int(rows.num_segments[r]),
                }
            )
    ours = {p.name: p.read_bytes() for p in (tmp_path / "ours").iterdir()}
    theirs = {p.name: p.read_bytes() for p in (tmp_path / "theirs").iterdir()}
    assert len(theirs) > 4 and ours == theirs
