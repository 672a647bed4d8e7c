"""`packcli export mds`: every row read back by streaming's own StreamingDataset; the byte layout
against MDSWriter and the references in naive_mds."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import tempfile

import numpy as np
import pytest
from helpers import load_rows, random_texts, write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st
from mds_reader import streaming_base
from mixed import mixed_output


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
    """The export's encoding against streaming's own MDSWriter.encode_sample, row by row, including
    rows with 256 or more cu_seqlens entries (a wider shape dtype)."""
    from packcli.export.base import blocks, read_source, token_dtype
    from packcli.export.mds import encode_block, mds_columns

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


@pytest.mark.parametrize("compression", [None, "zstd", "br", "gz", "snappy", "bz2"])
def test_shards_and_index_are_what_mds_writer_writes(tmp_path, packed, big_tokenizer, compression):
    """The whole output against streaming's own MDSWriter given the same samples one by
    one: shard cuts (a small size limit, so there are several), shard files and
    index.json. Compressed shards are compared decompressed (by streaming), and index.json
    without their compressed sizes: another build of a compression library may choose
    other bytes for the same data, and gzip's header holds MDSWriter's clock."""
    from packcli.export.base import read_source, token_dtype
    from packcli.export.mds import export_mds, mds_columns

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

    def files(root):
        out = {}
        for path in root.iterdir():
            data = path.read_bytes()
            if path.name == "index.json":
                index = json.loads(data)
                for shard in index["shards"]:
                    if shard["zip_data"] is not None:
                        shard["zip_data"]["bytes"] = None
                out[path.name] = index
            elif compression is None:
                out[path.name] = data
            else:
                out[path.name] = base.compression.decompress(compression, data)
        return out

    ours, theirs = files(tmp_path / "ours"), files(tmp_path / "theirs")
    assert len(theirs) > 4 and ours == theirs
    if compression is None:
        assert (tmp_path / "ours" / "index.json").read_bytes() == (tmp_path / "theirs" / "index.json").read_bytes()


def random_block(seed: int, rows: int, seq_len: int, max_width: int):
    """A block of `rows` random rows (cu_seqlens of 1..max_width entries each), as the export reads one."""
    from packcli.export.base import Block
    from packcli.plan.rows import Rows

    rng = np.random.default_rng(seed)
    widths = rng.integers(1, max_width + 1, size=rows)
    cu_offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
    rows_ = Rows(
        input_ids=rng.integers(0, 1 << 17, size=(rows, seq_len), dtype=np.int64).astype(np.int32),
        labels=rng.integers(-100, 1 << 17, size=(rows, seq_len), dtype=np.int32),
        position_ids=rng.integers(0, seq_len, size=(rows, seq_len), dtype=np.int32),
        cu_seqlens=rng.integers(0, seq_len + 1, size=int(cu_offsets[-1]), dtype=np.int32),
        cu_offsets=cu_offsets,
        num_segments=rng.integers(1, 9, size=rows, dtype=np.int32),
        max_seqlen=np.zeros(rows, dtype=np.int32),  # unused by the export
    )
    return Block(0, 0, rows_, np.full(rows, seq_len, dtype=np.int64))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(0, 6),
    seq_len=st.integers(1, 9),
    max_width=st.sampled_from([1, 4, 300]),
    wide=st.booleans(),
    data=st.data(),
)
def test_spans_and_parts_hold_each_sample_as_mds_lays_it_out(seed, rows, seq_len, max_width, wide, data):
    from naive_mds import naive_gather, naive_sample

    from packcli.export.mds import encode_block

    block = random_block(seed, rows, seq_len, max_width)
    dtype, fmt = (np.dtype(np.uint32), "I") if wide else (np.dtype(np.uint16), "H")
    encoded = encode_block(block, dtype)
    start = data.draw(st.integers(0, rows))
    stop = data.draw(st.integers(start, rows))
    r = block.rows
    expected = [
        naive_sample(
            r.input_ids[i].astype(dtype),
            fmt,
            r.labels[i],
            r.position_ids[i],
            r.cu_seqlens[r.cu_offsets[i] : r.cu_offsets[i + 1]],
            r.num_segments[i],
        )
        for i in range(start, stop)
    ]
    assert naive_gather(encoded.spans(start, stop)) == b"".join(expected)
    assert b"".join(encoded.parts(start, stop)) == b"".join(expected)
    assert encoded.sizes()[start:stop].tolist() == [len(sample) for sample in expected]


def spans_of(pieces: list[bytes]) -> tuple[np.ndarray, list[np.ndarray]]:
    arrays = [np.frombuffer(piece, dtype=np.uint8) for piece in pieces]
    spans = np.array([[a.ctypes.data, a.nbytes] for a in arrays], dtype=np.uint64).reshape(-1, 2)
    return spans, arrays  # the arrays keep the memory alive


@settings(max_examples=60, deadline=None)
@given(
    pieces=st.lists(st.binary(min_size=0, max_size=40), max_size=30),
    most=st.integers(1, 50),
    batch=st.integers(1, 7),
)
def test_write_spans_resumes_after_short_writes(pieces, most, batch):
    """A writev that writes at most `most` bytes a call (as a full disk or a signal can
    make it) and takes `batch` spans a call: the file still gets every span, in order."""
    from naive_mds import naive_gather

    from packcli.export import mds as export_mds

    def short_writev(fd, address, count):
        table = np.frombuffer(ctypes.string_at(address, 16 * count), dtype=np.uint64).reshape(-1, 2)
        return os.write(fd, naive_gather(table)[:most])

    spans, _alive = spans_of(pieces)
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryFile() as f:
        patch.setattr(export_mds, "_libc_writev", lambda: short_writev)
        patch.setattr(export_mds, "IOV_MAX", batch)
        export_mds.write_spans(f.fileno(), spans)
        f.seek(0)
        assert f.read() == b"".join(pieces)


def test_write_spans_writes_more_spans_than_one_writev_takes(tmp_path):
    from packcli.export.base import IOV_MAX
    from packcli.export.mds import write_spans

    rng = np.random.default_rng(5)
    pieces = [rng.bytes(int(n)) for n in rng.integers(0, 100, size=3 * IOV_MAX + 7)]
    spans, _alive = spans_of(pieces)
    with open(tmp_path / "out", "wb", buffering=0) as f:
        write_spans(f.fileno(), spans[::-1])
    assert (tmp_path / "out").read_bytes() == b"".join(reversed(pieces))


def test_write_spans_reports_the_system_error(tmp_path):
    from packcli.export.mds import write_spans

    spans, _alive = spans_of([b"abc"])
    (tmp_path / "ro").write_bytes(b"")
    with open(tmp_path / "ro", "rb") as f, pytest.raises(OSError) as raised:
        write_spans(f.fileno(), spans)
    assert raised.value.errno == errno.EBADF


def test_spans_refuse_rows_outside_the_block():
    from packcli.core.errors import PackcliError
    from packcli.export.mds import encode_block

    encoded = encode_block(random_block(1, 3, 4, 3), np.dtype(np.uint16))
    with pytest.raises(PackcliError, match="outside the block"):
        encoded.spans(2, 4)


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_a_mixed_output_exports_its_rows(tmp_path, cli, fmt):
    """Per-segment columns (a mixture's segment_source) are not among the MDS columns: every row reads back."""
    source = mixed_output(tmp_path / "mixed", fmt, multiple=4, seq_len=32).out
    summary = export(cli, source, tmp_path / "mds")
    samples = read_back(tmp_path / "mds", tmp_path)
    assert summary["rows"] == len(samples) and set(samples[0]) == {
        "input_ids",
        "labels",
        "position_ids",
        "cu_seqlens",
        "num_segments",
    }
    assert_same_rows(samples, source, np.uint16)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_pairs_and_weights_read_back_per_segment(tmp_path, packed, cli, word_tokenizer, compression):
    texts = random_texts(240, seed=6, max_words=30)
    records = [
        {"p": texts[3 * i], "c": texts[3 * i + 1], "r": texts[3 * i + 2] + " w2", "w": i % 4 / 2} for i in range(80)
    ]
    path = write_jsonl(tmp_path / "pairs.jsonl", records)
    fields = ("--prompt-field", "p", "--chosen-field", "c", "--rejected-field", "r", "--weight-field", "w")
    source = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 96, "--rows-per-shard", 16, *fields)
    summary = export(cli, source, tmp_path / "mds", *(["--compression", compression] if compression else []))
    assert summary["notes"] == []
    samples = read_back(tmp_path / "mds", tmp_path)
    assert_same_rows(samples, source, np.uint16)
    rows, _ = load_rows(source)
    seg = rows.seg_offsets
    for r, sample in enumerate(samples):
        for name, dtype in (("segment_pair", np.int32), ("segment_chosen", np.int32), ("segment_weight", np.float32)):
            assert sample[name].dtype == dtype
            assert sample[name].tolist() == rows.segment_columns[name][seg[r] : seg[r + 1]].tolist()
