"""Tests for packcli.read.records: batches bounded in count and size, never mixing sources;
IdLists; BadRecords."""

from __future__ import annotations

import numpy as np
import pytest

from packcli.read.batches import read_batches
from packcli.read.records import BadRecords, IdLists, RecordBatch
from tests.input_files import JSONL_SUFFIXES, TEXT, read_skipping, write_jsonl, write_parquet


@pytest.mark.parametrize("suffix", JSONL_SUFFIXES + (".parquet",))
def test_batch_size_two_over_five_records(tmp_path, suffix):
    texts = [f"t{i}" for i in range(5)]
    if suffix == ".parquet":
        path = write_parquet(tmp_path / "five.parquet", {"text": texts}, row_group_size=3)
    else:
        path = write_jsonl(tmp_path / f"five{suffix}", [{"text": t} for t in texts])
    batches = list(read_batches([str(path)], TEXT, batch_size=2))
    assert [len(b) for b in batches] == [2, 2, 1]
    assert [t for b in batches for t in b.columns["text"]] == texts
    assert all(isinstance(b, RecordBatch) and b.positions.dtype == np.int64 for b in batches)
    first = 1 if suffix != ".parquet" else 0
    assert [p for b in batches for p in b.positions.tolist()] == list(range(first, first + 5))


def test_batches_never_mix_sources(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [{"text": "a"}] * 3)
    b = write_parquet(tmp_path / "b.parquet", {"text": ["b"] * 3})
    batches = list(read_batches([str(a), str(b)], TEXT, batch_size=2))
    assert [(x.source, x.kind, len(x)) for x in batches] == [
        (str(a), "line", 2),
        (str(a), "line", 1),
        (str(b), "row", 2),
        (str(b), "row", 1),
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_batches_fill_up_with_good_records_around_bad_ones(tmp_path, fmt):
    texts = ["a", None, "b", "", "c", "d", None, "e"]
    if fmt == "parquet":
        path = write_parquet(tmp_path / "mixed.parquet", {"text": texts})
    else:
        path = write_jsonl(tmp_path / "mixed.jsonl", [{"text": t} for t in texts])
    bad = BadRecords()
    batches = list(read_batches([str(path)], TEXT, batch_size=2, on_bad_record="skip", bad=bad))
    assert [b.columns["text"] for b in batches] == [["a", "b"], ["c", "d"], ["e"]]
    assert bad.counts == {"wrong type": 2, "empty text": 1}
    assert bad.records_seen == 8


def test_examples_are_capped_but_counts_are_not(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", ["{oops"] * 25 + [{"text": "fine"}])
    got, bad = read_skipping([path])
    assert len(got) == 1
    assert bad.counts == {"malformed JSON": 25}
    assert len(bad.examples) == 10
    assert bad.examples[9].startswith(f"{path}:10: malformed JSON")


def test_ids_column_is_flat(tmp_path):
    path = write_jsonl(tmp_path / "ids.jsonl", [{"ids": [1, 2, 3]}, {"ids": [4]}, {"ids": [5, 6]}])
    [batch] = read_batches([str(path)], {"ids": "ids"})
    ids = batch.columns["ids"]
    assert isinstance(ids, IdLists) and len(ids) == 3
    assert ids.values.tolist() == [1, 2, 3, 4, 5, 6] and ids.offsets.tolist() == [0, 3, 4, 6]
    assert ids.lengths.tolist() == [3, 1, 2] and ids[-1].tolist() == [5, 6]
    with pytest.raises(IndexError):
        ids[3]
