"""`packcli export energon`: every row read back through Megatron-Energon's own loader."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sqlite3
import uuid
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from helpers import load_rows, random_texts, write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st
from megatron.energon import (
    Cooker,
    CrudeSample,
    DefaultTaskEncoder,
    WorkerConfig,
    get_loader,
    get_train_dataset,
    stateless,
)
from megatron.energon.eyaml import load_yaml
from mixed import mixed_output

COLUMNS = ("input_ids", "labels", "position_ids", "cu_seqlens", "num_segments")


@stateless
def cook(sample: CrudeSample) -> dict:
    """The crude sample's parts by column name, with its key."""
    return {"key": sample["__key__"], **{name: sample[f"{name}.npy"] for name in COLUMNS}}


class RowsEncoder(DefaultTaskEncoder):
    cookers = (Cooker(cook),)


def read_back(out) -> list[dict]:
    """One epoch of the train split, as energon's loader yields it (as tensors), in key (row) order."""
    dataset = get_train_dataset(
        str(out),
        split_part="train",
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=RowsEncoder(),
        repeat=False,
    )
    samples = [
        {name: value if name == "key" else value.numpy() for name, value in s.items()} for s in get_loader(dataset)
    ]
    return sorted(samples, key=lambda sample: sample["key"])


def export(cli, source, out, *options):
    result = cli("export", "energon", source, out, "--json", *options)
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


def assert_same_rows(samples, source, ids_dtype):
    rows, _ = load_rows(source)
    assert [s["key"] for s in samples] == [f"{r:010d}" for r in range(len(rows))]
    for r, sample in enumerate(samples):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
        assert sample["input_ids"].dtype == ids_dtype and sample["input_ids"].tolist() == rows.input_ids[r].tolist()
        assert sample["labels"].tolist() == rows.labels[r].tolist()
        assert sample["position_ids"].tolist() == rows.position_ids[r].tolist()
        assert sample["cu_seqlens"].dtype == np.int32 and sample["cu_seqlens"].tolist() == cu.tolist()
        assert int(sample["num_segments"]) == rows.num_segments[r]


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")
def test_every_row_reads_back(tmp_path, packed, cli, word_tokenizer, fmt):
    texts = random_texts(120, seed=3, max_words=40)
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    source = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--format", fmt, "--rows-per-shard", 25)
    out = tmp_path / "energon"
    summary = export(cli, source, out)
    tars = sorted(p.name for p in out.glob("*.tar"))
    assert summary["files"] == len(tars) == len(load_rows(source)[1]["shards"]) > 1
    meta = out / ".nv-meta"
    assert load_yaml((meta / "dataset.yaml").read_bytes()) == {
        "__module__": "megatron.energon",
        "__class__": "CrudeWebdataset",
    }
    splits = load_yaml((meta / "split.yaml").read_bytes())["split_parts"]
    assert splits["val"] == splits["test"] == []
    counts = json.loads((meta / ".info.json").read_text())["shard_counts"]
    assert sorted(counts) == tars and sum(counts.values()) == summary["rows"]
    assert_same_rows(read_back(out), source, np.uint16)


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")
def test_sft_rows_with_a_large_vocabulary(tmp_path, packed, cli, big_tokenizer):
    records = [
        {"p": t, "c": " ".join(reversed(t.split()))} for t in random_texts(40, seed=4, max_words=12, vocab=69_990)
    ]
    path = write_jsonl(tmp_path / "in.jsonl", records)
    source = packed(
        path, "--tokenizer", big_tokenizer, "--seq-len", 24, "--prompt-field", "p", "--completion-field", "c"
    )
    export(cli, source, tmp_path / "energon")
    samples = read_back(tmp_path / "energon")
    assert_same_rows(samples, source, np.uint32)
    assert any(((s["labels"] == -100) & (s["position_ids"] > 0)).any() for s in samples)  # prompt masks kept


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def sqlite_content(path: Path):
    """Schema (whitespace aside) and every table's rows (sorted: energon's own row order
    follows its workers)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        names = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        schema = sorted(
            (
                kind,
                name,
                table,
                sql and " ".join(sql.replace("(", " ( ").replace(")", " ) ").replace(",", " , ").split()),
            )
            for kind, name, table, sql in db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")
        )
        return schema, {n: sorted(db.execute(f"SELECT * FROM {n}").fetchall(), key=repr) for n in names}


def prepare_with_energon(directory: Path) -> None:
    """Energon's own preparation of the tars in `directory` (what `energon prepare` runs),
    every sample in the train split."""
    from megatron.energon.epathlib import EPath
    from megatron.energon.flavors.webdataset.prepare import WebdatasetPreparator

    tars = sorted(p.name for p in directory.glob("*.tar"))
    with contextlib.redirect_stdout(io.StringIO()):
        WebdatasetPreparator.prepare_dataset(
            EPath(directory),
            tars,
            split_parts_ratio=[("train", 1.0), ("val", 0.0), ("test", 0.0)],
            shuffle_seed=None,
            workers=1,
        )


@pytest.mark.parametrize("rows_per_shard", [7, 20, 1000])
def test_index_is_what_energon_preparation_writes(tmp_path, packed, word_tokenizer, rows_per_shard):
    """The `.nv-meta/` and `.tar.idx` files the export writes against those energon's own
    preparation writes for a copy of its tars: the same files; index.sqlite with the same
    schema and rows; .info.json the same but for the energon release it names; only
    index.uuid differs (energon draws it at random)."""
    from packcli.export.energon import ENERGON_VERSION, export_energon

    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in random_texts(90, seed=12, max_words=30)])
    source = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 16, "--rows-per-shard", rows_per_shard)
    export_energon(source, tmp_path / "ours")
    (tmp_path / "theirs").mkdir()
    for tar in (tmp_path / "ours").glob("*.tar"):
        shutil.copyfile(tar, tmp_path / "theirs" / tar.name)
    prepare_with_energon(tmp_path / "theirs")
    (tmp_path / "theirs" / ".nv-meta" / "dataset.yaml").write_text(
        (tmp_path / "ours" / ".nv-meta" / "dataset.yaml").read_text()
    )
    ours, theirs = tree(tmp_path / "ours"), tree(tmp_path / "theirs")
    assert len([name for name in ours if name.endswith(".tar.idx")]) == len(load_rows(source)[1]["shards"])
    assert sorted(ours) == sorted(theirs)
    differ = {name for name in ours if ours[name] != theirs[name]}
    assert differ <= {".nv-meta/index.uuid", ".nv-meta/index.sqlite", ".nv-meta/.info.json"}
    meta = ".nv-meta/index.sqlite"
    assert sqlite_content(tmp_path / "ours" / meta) == sqlite_content(tmp_path / "theirs" / meta)
    info, their_info = (json.loads(files[".nv-meta/.info.json"]) for files in (ours, theirs))
    assert info.pop("energon_version") == ENERGON_VERSION
    their_info.pop("energon_version")
    assert info == their_info
    assert str(uuid.UUID(ours[".nv-meta/index.uuid"].decode())) == ours[".nv-meta/index.uuid"].decode()


@pytest.mark.parametrize(
    "numbers",
    [[], [0], [0, 1], [0, 2], [0, 1, 2, 4, 5, 9, 10, 11], [3, 4, 7], [8, 9, 10, 11], [99998, 99999, 100000, 100001]],
)
def test_split_parts_are_what_energon_collapses(numbers):
    """split.yaml's brace ranges against energon's own collapse of the same tar names."""
    from megatron.energon.bracecollapse import collapse
    from megatron.energon.flavors.webdataset import prepare

    from packcli.export.energon import brace_ranges, split_yaml

    names = [f"shard-{n:05d}.tar" for n in numbers]
    assert brace_ranges(names) == collapse(names, keep_order=True)
    expected = {"split_parts": {"train": collapse(names, keep_order=True), "val": [], "test": []}, "exclude": []}
    assert load_yaml(split_yaml(names).encode()) == expected
    if names:
        assert split_yaml(names) == prepare.yaml.dump(expected, sort_keys=False)  # energon's own yaml


def test_index_bytes_depend_only_on_the_input(tmp_path, packed, word_tokenizer):
    """Two exports of one output are byte for byte the same, index.sqlite and index.uuid
    included; another output gets another index.uuid."""
    from packcli.export.energon import export_energon

    sources = []
    for seed in (5, 6):
        path = write_jsonl(tmp_path / f"in{seed}.jsonl", [{"text": t} for t in random_texts(60, seed=seed)])
        sources.append(packed(path, "--tokenizer", word_tokenizer, "--seq-len", 16, "--rows-per-shard", 15))
    for name, source in (("a", sources[0]), ("b", sources[0]), ("c", sources[1])):
        export_energon(source, tmp_path / name)
    a, b, c = (tree(tmp_path / name) for name in "abc")
    assert a == b
    assert a[".nv-meta/index.uuid"] != c[".nv-meta/index.uuid"]


def test_a_failed_export_stops_its_index_thread(tmp_path, packed, word_tokenizer):
    """A shard that cannot be read half-way: the error, no OUT, and the index's thread ended."""
    import threading

    from packcli.core.errors import PackcliError
    from packcli.export.energon import export_energon

    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in random_texts(60, seed=7)])
    source = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 16, "--rows-per-shard", 10, "--format", "parquet")
    (source / "shard-00002.parquet").write_bytes(b"not parquet")
    with pytest.raises(PackcliError, match="shard-00002.parquet"):
        export_energon(source, tmp_path / "out")
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert not [t for t in threading.enumerate() if t.name == "packcli-energon-index"]


def random_rows(seed: int, n: int, seq_len: int, most_segments: int):
    """Rows with random values and cu_seqlens of 2 to `most_segments` + 1 entries each."""
    from packcli.plan.rows import Rows

    rng = np.random.default_rng(seed)
    widths = rng.integers(2, most_segments + 2, size=n)
    offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
    return Rows(
        input_ids=rng.integers(0, 60_000, size=(n, seq_len)).astype(np.uint16),
        labels=rng.integers(-100, 60_000, size=(n, seq_len)).astype(np.int32),
        position_ids=rng.integers(0, seq_len, size=(n, seq_len)).astype(np.int32),
        cu_seqlens=np.sort(rng.integers(0, seq_len, size=int(offsets[-1]))).astype(np.int32),
        cu_offsets=offsets,
        num_segments=rng.integers(1, 9, size=n).astype(np.int32),
    )


@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    seq_len=st.sampled_from([1, 3, 16, 200]),
    most_segments=st.sampled_from([1, 5, 130, 400]),
    first_row=st.integers(0, 10**10 - 81),
)
@settings(max_examples=60, deadline=None)
def test_tar_members_are_what_tarfile_writes(tmp_path_factory, seed, n, seq_len, most_segments, first_row):
    """Two blocks' members in one tar, laid out a run of equal-sized rows at a time
    (cu_seqlens of different member sizes split the runs; a small buffer splits them
    further; the bytes rows of one shape share stay in the buffer from run to run and
    from block to block), against tarfile writing each row's np.save bytes."""
    from naive_tar import naive_members

    from packcli.export import energon as module
    from packcli.export.base import Block

    first, second = random_rows(seed, n, seq_len, most_segments), random_rows(seed + 1, n, seq_len, most_segments)
    path = tmp_path_factory.mktemp("tar") / "shard.tar"
    tar = module._TarShard(path, 0)
    tar.buffer = np.empty(1 << 14, dtype=np.uint8)  # smaller than some rows: the buffer grows
    with mock.patch.object(module, "CHUNK_BYTES", 1 << 15):
        module._write_block(tar, Block(0, first_row, first, np.zeros(n, dtype=np.int64)), np.dtype(np.uint16), None)
        module._write_block(
            tar, Block(0, first_row + n, second, np.zeros(n, dtype=np.int64)), np.dtype(np.uint16), None
        )
    tar.file.close()
    expected = naive_members(first, first_row, np.uint16) + naive_members(second, first_row + n, np.uint16)
    assert path.read_bytes() == expected


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")
def test_a_mixed_output_exports_its_rows(tmp_path, cli, fmt):
    """Per-segment columns (a mixture's segment_source) are not among the parts: every row reads back."""
    source = mixed_output(tmp_path / "mixed", fmt, multiple=4, seq_len=32).out
    summary = export(cli, source, tmp_path / "energon")
    samples = read_back(tmp_path / "energon")
    assert summary["rows"] == len(samples)
    assert_same_rows(samples, source, np.uint16)
