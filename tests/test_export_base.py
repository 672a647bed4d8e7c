"""What every export shares: OUT appears whole or not at all, a non-empty OUT needs
--overwrite, and progress counts every row."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import load_rows, random_texts, write_jsonl

from packcli.core.errors import PackcliError
from packcli.export.base import ExportDir, blocks, read_source, write_views
from packcli.export.nanotron import export_nanotron
from packcli.plan.rows import Rows


@pytest.fixture
def source(tmp_path, packed, word_tokenizer):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in random_texts(80, seed=8, max_words=30)])
    return packed(path, "--tokenizer", word_tokenizer, "--seq-len", 16, "--rows-per-shard", 20)


def hidden(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("kind", ["mds", "energon", "nanotron"])
def test_a_non_empty_out_needs_overwrite(tmp_path, source, cli, kind):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = cli("export", kind, source, out)
    assert result.exit_code == 1 and "is not empty; pass --overwrite" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    result = cli("export", kind, source, out, "--overwrite")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"ok: wrote {out} ({kind}, ")
    assert not (out / "keep.txt").exists() and any(out.iterdir())
    assert hidden(tmp_path) == []


def test_an_empty_out_is_used_and_a_file_is_refused(tmp_path, source, cli):
    (tmp_path / "empty").mkdir()
    assert cli("export", "nanotron", source, tmp_path / "empty").exit_code == 0
    assert list((tmp_path / "empty").glob("*.ds"))
    (tmp_path / "file").write_text("x")
    result = cli("export", "nanotron", source, tmp_path / "file", "--overwrite")
    assert result.exit_code == 1 and "exists and is not a directory" in result.stderr
    result = cli("export", "nanotron", source, tmp_path / "no" / "such" / "out")
    assert result.exit_code == 1 and "no such directory" in result.stderr


def test_a_failed_export_leaves_out_as_it_was(tmp_path, source):
    out = tmp_path / "out"
    export_nanotron(source, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (source / "shard-00001.parquet").write_bytes(b"not parquet")
    with pytest.raises(PackcliError, match="shard-00001.parquet: cannot read shard"):
        export_nanotron(source, out, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert hidden(tmp_path) == []


def test_a_leftover_temporary_directory_is_replaced(tmp_path, source):
    (tmp_path / ".out.packcli-tmp").mkdir()
    (tmp_path / ".out.packcli-tmp" / "stale.ds").write_bytes(b"\0\0")
    export_nanotron(source, tmp_path / "out")
    assert not (tmp_path / "out" / "stale.ds").exists() and hidden(tmp_path) == []


def test_progress_counts_every_row(source):
    rows, manifest = load_rows(source)
    calls = []
    summary = export_nanotron(source, source.parent / "nano", progress=lambda *args: calls.append(args))
    assert sum(c[0] for c in calls) == len(rows) and sum(c[1] for c in calls) == summary["real_tokens"]
    assert calls[-1][2:] == (len(rows), manifest["totals"]["rows"])


def test_export_dir_removes_its_work_when_the_body_fails(tmp_path):
    with pytest.raises(RuntimeError), ExportDir(tmp_path / "out", overwrite=False) as work:
        (work / "part").write_text("half")
        raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", ["npy", "parquet"])
def test_blocks_keep_the_stored_dtype_and_every_value(tmp_path, packed, word_tokenizer, fmt):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in random_texts(90, seed=3, max_words=30)])
    source = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 16, "--rows-per-shard", 20, "--format", fmt)
    manifest = read_source(source)
    got = list(blocks(source, manifest))
    assert {b.rows.input_ids.dtype for b in got} == {np.dtype(np.uint16 if fmt == "npy" else np.int32)}
    assert [b.first_row for b in got] == [20 * i for i in range(len(got))]
    rows, _ = load_rows(source)
    joined = Rows.concat([b.rows for b in got])
    for name in ("input_ids", "labels", "position_ids", "cu_seqlens", "cu_offsets", "num_segments"):
        assert np.array_equal(getattr(joined, name), getattr(rows, name)), name
    assert np.array_equal(np.concatenate([b.real for b in got]), rows.real_lengths())


def test_write_views_writes_every_byte_in_order(tmp_path):
    values = np.arange(3000 * 7, dtype=np.uint16).reshape(3000, 7)
    lengths = np.arange(3000) % 8
    with open(tmp_path / "f", "wb", buffering=0) as f:
        write_views(f.fileno(), [values[i, :n] for i, n in enumerate(lengths.tolist())])
    expected = values[np.arange(7)[None, :] < lengths[:, None]]
    assert np.fromfile(tmp_path / "f", dtype=np.uint16).tolist() == expected.tolist()


@pytest.mark.parametrize("text", [b"xyz", memoryview(b"xyz")])
def test_write_views_finishes_a_short_write(tmp_path, monkeypatch, text):
    import os

    views = [np.arange(5, dtype=np.int32), text, np.zeros(0, dtype=np.uint8), np.arange(3, dtype=np.uint16)]
    real_writev = os.writev
    monkeypatch.setattr(os, "writev", lambda fd, chunk: real_writev(fd, [memoryview(chunk[0]).cast("B")[:7]]))
    with open(tmp_path / "f", "wb", buffering=0) as f:
        write_views(f.fileno(), views)
    assert (tmp_path / "f").read_bytes() == b"".join(bytes(memoryview(v).cast("B")) for v in views)


def test_prefault_leaves_the_map_closable_and_the_values_as_they_are(tmp_path):
    """The pages of a memory-mapped slice are mapped ahead; the map is not left exported
    (its shard closes it), and arrays that are not mapped are left alone."""
    from packcli.export.base import prefault

    values = np.arange(50_000, dtype=np.int32).reshape(500, 100)
    np.save(tmp_path / "a.npy", values)
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    prefault(mapped[123:456], values[:3], np.zeros(0, dtype=np.int32))
    assert mapped[123:456].tolist() == values[123:456].tolist()
    mapped._mmap.close()  # raises BufferError while anything still exports the map


def test_formats_of_documents_refuse_pairs_and_the_others_say_what_they_leave_out(
    tmp_path, packed, cli, word_tokenizer
):
    texts = random_texts(60, seed=3, max_words=20)
    records = [{"p": texts[3 * i], "c": texts[3 * i + 1], "r": texts[3 * i + 2] + " w1", "w": 1.0} for i in range(20)]
    path = write_jsonl(tmp_path / "pairs.jsonl", records)
    fields = ("--prompt-field", "p", "--chosen-field", "c", "--rejected-field", "r")
    pairs = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 96, *fields)
    for name in ("megatron", "nanotron"):
        result = cli("export", name, pairs, tmp_path / name)
        assert result.exit_code == 1 and not (tmp_path / name).exists()
        assert result.stderr.startswith(f"error: export {name}: an output of preference pairs cannot be exported, as ")
    energon = cli("export", "energon", pairs, tmp_path / "energon", "--json")
    assert energon.exit_code == 0
    assert json.loads(energon.stdout)["notes"] == [
        "segment_pair, segment_chosen not exported: this format's samples hold the row columns only "
        "(pairs stay two adjacent segments of a row, chosen first)"
    ]
    weighted = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 96, "--text-field", "c", "--weight-field", "w")
    megatron = cli("export", "megatron", weighted, tmp_path / "mega", "--json")
    assert megatron.exit_code == 0
    assert (
        "segment_weight not exported: this format's samples hold the row columns only"
        in json.loads(megatron.stdout)["notes"]
    )
