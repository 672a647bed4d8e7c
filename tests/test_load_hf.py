"""packcli.load.hf: packed rows as `datasets.Dataset`s, in memory and from `packcli pack` output."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import load_rows, random_texts, write_jsonl
from mixed import mixed_output

import packcli
from packcli.core.errors import PackcliError
from packcli.inspect.verify import check_rows
from packcli.load import hf
from packcli.plan.rows import Rows

datasets = pytest.importorskip("datasets")


def dataset_rows(ds) -> Rows:
    """Rows back from a Dataset built with cu_seqlens=True."""
    cu = [np.asarray(c, dtype=np.int32) for c in ds["cu_seqlens"]]
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in cu])]).astype(np.int64)
    columns = {name: np.asarray(ds[name], dtype=np.int32).reshape(len(ds), -1) for name in hf.TRAIN_COLUMNS}
    return Rows(
        columns["input_ids"],
        columns["labels"],
        columns["position_ids"],
        np.concatenate(cu) if cu else np.zeros(0, np.int32),
        offsets,
        np.asarray(ds["num_segments"], np.int32),
    )


def assert_same_rows(a: Rows, b: Rows):
    for name in ("input_ids", "labels", "position_ids", "cu_seqlens", "cu_offsets", "num_segments"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_pack_dataset_equals_pack_sequences_and_holds_the_invariants():
    rng = np.random.default_rng(0)
    sequences = [rng.integers(3, 300, size=int(n)).tolist() for n in rng.integers(1, 70, size=80)]
    for options in ({}, {"algorithm": "nf"}, {"mode": "concat"}, {"overlong": "truncate", "algorithm": "ffd"}):
        ds = hf.pack_dataset(sequences, 48, pad_id=0, cu_seqlens=True, **options)
        lib = packcli.pack_sequences(sequences, 48, pad_id=0, **options)
        rows = dataset_rows(ds)
        assert_same_rows(rows, lib.rows)
        check_rows(rows, seq_len=48, pad_id=0, vocab_size=300)
    assert hf.pack_dataset(sequences, 48).column_names == ["input_ids", "labels", "position_ids"]


def test_pack_dataset_from_a_tokenized_dataset_with_labels_and_eos():
    source = datasets.Dataset.from_dict(
        {
            "input_ids": [[5, 6, 7], [8, 9]],
            "labels": [[-100, -100, 7], [-100, 9]],
            "text": ["a", "b"],
        }
    )
    ds = hf.pack_dataset(source, 8, eos_id=1, pad_id=0, algorithm="nf", attention_mask=True)
    assert ds[0] == {
        "input_ids": [5, 6, 7, 1, 8, 9, 1, 0],
        "labels": [-100, -100, 7, 1, -100, 9, 1, -100],
        "position_ids": [0, 1, 2, 3, 0, 1, 2, 0],
        "attention_mask": [1, 1, 1, 1, 1, 1, 1, 0],
    }
    check_rows(
        dataset_rows(hf.pack_dataset(source, 8, eos_id=1, cu_seqlens=True)),
        seq_len=8,
        pad_id=0,
        labels_follow_ids=False,
    )
    # a tokenizer's output (a dict) works the same
    assert hf.pack_dataset({"input_ids": [[5, 6, 7]]}, 4)[0]["input_ids"] == [5, 6, 7, 0]


def test_pack_dataset_errors():
    with pytest.raises(PackcliError, match="no 'input_ids' column"):
        hf.pack_dataset({"ids": [[1]]}, 4)
    with pytest.raises(PackcliError, match="tokenize first"):
        hf.pack_dataset("some text", 4)
    with pytest.raises(PackcliError, match="algorithm must be one of"):
        hf.pack_dataset([[1]], 4, algorithm="magic")


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_load_equals_the_shards(tmp_path, packed, word_tokenizer, fmt):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in random_texts(80, seed=6, max_words=50)])
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 40, "--format", fmt, "--rows-per-shard", 9)
    rows, manifest = load_rows(out)
    ds = hf.load(out, cu_seqlens=True, attention_mask=True, cache_dir=str(tmp_path / "cache"))
    assert len(ds) == len(rows) and str(ds.data.schema.field("input_ids").type) == "list<item: int32>"
    assert_same_rows(dataset_rows(ds), rows)
    check_rows(dataset_rows(ds), seq_len=40, pad_id=manifest["tokenizer"]["pad_id"], vocab_size=300)
    real = rows.real_lengths()
    mask = np.asarray(ds["attention_mask"])
    assert (mask.sum(axis=1) == real).all() and (mask[:, :1] == 1).all()
    assert hf.load(out, cache_dir=str(tmp_path / "cache")).column_names == ["input_ids", "labels", "position_ids"]


def test_load_needs_a_finished_output(tmp_path):
    with pytest.raises(PackcliError, match="no manifest.json"):
        hf.load(tmp_path)


def test_padded_output_loads_with_its_boundary_columns(tmp_path, packed, word_tokenizer):
    from packcli.load.torch import collate_rows

    path = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in random_texts(40, seed=8)])
    for fmt in ("parquet", "npy"):
        options = ("--seq-len", 64, "--pad-to-multiple-of", 8, "--format", fmt)
        out = packed(path, "--tokenizer", word_tokenizer, *options)
        report = json.loads((out / "report.json").read_text())
        dataset = hf.load(out, cu_seqlens=True, attention_mask=True)
        assert {"max_seqlen", "cu_seqlens_unpadded"} <= set(dataset.column_names)
        assert sum(map(sum, dataset["attention_mask"])) == report["real_tokens"]
        batch = collate_rows([dataset[i] for i in range(len(dataset))])
        assert int(batch.attention_mask.sum()) == report["real_tokens"]
        assert batch.max_seqlen == max(dataset["max_seqlen"])


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_load_keeps_the_segment_source_column(tmp_path, fmt):
    from packcli.load.torch import collate_rows

    out = mixed_output(tmp_path / "o", fmt).out
    rows, _ = load_rows(out)
    offsets = rows.seg_offsets
    want = [rows.segment_columns["segment_source"][offsets[r] : offsets[r + 1]].tolist() for r in range(len(rows))]
    for cu_seqlens in (False, True):
        ds = hf.load(out, cu_seqlens=cu_seqlens, cache_dir=str(tmp_path / "cache"))
        assert "segment_source" in ds.column_names and ds["segment_source"] == want
        assert str(ds.data.schema.field("segment_source").type) == "list<item: int32>"
    ds = hf.load(out, cache_dir=str(tmp_path / "cache"))  # no num_segments: each row's list gives the count
    batch = collate_rows([ds[i] for i in range(len(ds))])
    assert batch.segment_source.tolist() == rows.segment_columns["segment_source"].tolist()
    assert int((batch.token_source >= 0).sum()) == int(rows.real_lengths().sum())
    assert "segment_source" not in hf.collator([ds[0], ds[1]])  # the model's inputs only
