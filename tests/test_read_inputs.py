"""Tests for packcli.read.inputs: files, directories, globs, stdin and save_to_disk datasets
turned into the exact list of files to read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from packcli.core.errors import PackcliError
from packcli.read.inputs import SUPPORTED_SUFFIXES, expand_inputs
from tests.input_files import read_all


def test_directory_is_expanded_recursively_sorted_and_filtered(tmp_path):
    root = tmp_path / "corpus"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / ".hidden").mkdir()
    for name in [
        "b.jsonl",
        "a.parquet",
        "sub/c.jsonl.zst",
        "sub/deeper/d.jsonl.gz",
        "notes.txt",
        "x.json",
        "y.arrow",
        "z.json.gz",
        ".hidden/e.jsonl",
        ".f.jsonl",
        "UPPER.JSONL",
        "state.json",
    ]:
        (root / name).write_bytes(b"")
    got = expand_inputs([str(root)])
    assert got == [
        str(root / n)
        for n in [
            "UPPER.JSONL",
            "a.parquet",
            "b.jsonl",
            "state.json",
            "sub/c.jsonl.zst",
            "sub/deeper/d.jsonl.gz",
            "x.json",
            "y.arrow",
            "z.json.gz",
        ]
    ]


def test_glob_is_expanded_sorted_and_filtered(tmp_path):
    for name in ["s10.jsonl", "s02.jsonl", "s01.parquet", "s03.txt"]:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "sdir.jsonl").mkdir()  # a directory whose name looks like a file is not matched
    got = expand_inputs([str(tmp_path / "s*")])
    assert got == [str(tmp_path / n) for n in ["s01.parquet", "s02.jsonl", "s10.jsonl"]]


def test_recursive_glob(tmp_path):
    (tmp_path / "x" / "y").mkdir(parents=True)
    (tmp_path / "x" / "y" / "deep.jsonl").write_bytes(b"")
    (tmp_path / "top.jsonl").write_bytes(b"")
    assert expand_inputs([str(tmp_path / "**" / "*.jsonl")]) == [
        str(tmp_path / "top.jsonl"),
        str(tmp_path / "x" / "y" / "deep.jsonl"),
    ]


def test_inputs_keep_their_order_duplicates_and_stdin(tmp_path):
    b = tmp_path / "b.jsonl"
    a = tmp_path / "a.parquet"
    b.write_bytes(b"")
    a.write_bytes(b"")
    assert expand_inputs([str(b), "-", str(a), str(b)]) == [str(b), "-", str(a), str(b)]


def test_literal_file_name_with_glob_characters(tmp_path):
    path = tmp_path / "shard[1].jsonl"
    path.write_bytes(b"")
    assert expand_inputs([str(path)]) == [str(path)]


def test_relative_paths_stay_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("d").mkdir()
    Path("d/x.jsonl").write_bytes(b"")
    assert expand_inputs(["d", "d/*.jsonl"]) == [os.path.join("d", "x.jsonl"), "d/x.jsonl"]


@pytest.mark.parametrize(
    "make,given,expected",
    [
        (None, "missing.jsonl", "missing.jsonl: no such file or directory"),
        (None, "nothing*.jsonl", "nothing*.jsonl: pattern matches no"),
        (
            "data.csv",
            "data.csv",
            "data.csv: unsupported file type (supported: .jsonl, .jsonl.gz, .jsonl.zst, .json, "
            ".json.gz, .json.zst, .parquet, .arrow)",
        ),
        ("only.txt", "only.*", "only.*: pattern matches no .jsonl"),
        ("emptydir/", "emptydir", "emptydir: directory has no .jsonl"),
    ],
)
def test_expand_inputs_errors(tmp_path, monkeypatch, make, given, expected):
    monkeypatch.chdir(tmp_path)
    if make and make.endswith("/"):
        Path(make).mkdir()
    elif make:
        Path(make).write_bytes(b"")
    with pytest.raises(PackcliError) as caught:
        expand_inputs([given])
    assert str(caught.value).startswith(expected)


def test_expand_inputs_needs_at_least_one_input():
    with pytest.raises(PackcliError):
        expand_inputs([])


def test_supported_suffixes_are_the_documented_ones():
    assert SUPPORTED_SUFFIXES == (
        ".jsonl",
        ".jsonl.gz",
        ".jsonl.zst",
        ".json",
        ".json.gz",
        ".json.zst",
        ".parquet",
        ".arrow",
    )
    docs = (Path(__file__).parent.parent / "docs" / "commands.md").read_text()
    input_row = next(line for line in docs.splitlines() if line.startswith("| `INPUT...`"))
    assert all(f"`{suffix}`" in input_row for suffix in SUPPORTED_SUFFIXES)


def save_to_disk(path: Path, records: dict, num_shards: int = 1) -> Path:
    import datasets

    datasets.disable_progress_bars()
    datasets.Dataset.from_dict(records).save_to_disk(str(path), num_shards=num_shards)
    return path


def test_save_to_disk_directory_is_read_in_state_order(tmp_path):
    texts = [f"doc {i}" for i in range(10)]
    saved = save_to_disk(tmp_path / "ds", {"text": texts, "ids": [[i] * (i + 1) for i in range(10)]}, num_shards=3)
    state = json.loads((saved / "state.json").read_text())
    state["_data_files"].reverse()  # the order of state.json, not of the names, is the dataset's order
    (saved / "state.json").write_text(json.dumps(state))
    paths = expand_inputs([str(saved)])
    assert paths == [str(saved / entry["filename"]) for entry in state["_data_files"]]
    got = read_all(paths, {"text": "text", "ids": "ids"})
    shard_texts = [texts[7:], texts[4:7], texts[:4]]
    assert [r["text"] for _, r in got] == [t for shard in shard_texts for t in shard]
    assert got[0][0] == f"{saved / state['_data_files'][0]['filename']} row 0"


def test_save_to_disk_inside_a_folder_counts_as_its_data_files(tmp_path):
    save_to_disk(tmp_path / "corpus" / "b_ds", {"text": ["x"]})
    for name in ["a.jsonl", "c.json", "b.parquet"]:
        (tmp_path / "corpus" / name).write_bytes(b"")
    got = expand_inputs([str(tmp_path / "corpus")])
    names = [os.path.relpath(p, tmp_path / "corpus") for p in got]
    assert names == ["a.jsonl", "b.parquet", os.path.join("b_ds", "data-00000-of-00001.arrow"), "c.json"]


def test_save_to_disk_metadata_is_never_data(tmp_path):
    saved = save_to_disk(tmp_path / "ds", {"text": ["x"]})
    assert expand_inputs([str(saved / "*")]) == [str(saved / "data-00000-of-00001.arrow")]
    with pytest.raises(PackcliError) as caught:
        expand_inputs([str(saved / "state.json")])
    assert (
        str(caught.value)
        == f"{saved / 'state.json'}: metadata of a datasets save_to_disk directory; give the directory ({saved})"
    )


def test_dataset_dict_directory_is_refused_naming_its_splits(tmp_path):
    import datasets

    datasets.disable_progress_bars()
    split = datasets.Dataset.from_dict({"text": ["x"]})
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "dd"))
    for where in [tmp_path / "dd", tmp_path]:
        with pytest.raises(PackcliError) as caught:
            expand_inputs([str(where)])
        dd = tmp_path / "dd"
        assert (
            str(caught.value)
            == f"{dd}: a datasets DatasetDict; give one split as input ({dd / 'train'}, {dd / 'test'})"
        )
    assert expand_inputs([str(tmp_path / "dd" / "train")]) == [
        str(tmp_path / "dd" / "train" / "data-00000-of-00001.arrow")
    ]


def test_missing_data_file_of_a_dataset(tmp_path):
    saved = save_to_disk(tmp_path / "ds", {"text": ["x"]})
    (saved / "data-00000-of-00001.arrow").unlink()
    with pytest.raises(PackcliError, match="data-00000-of-00001.arrow: listed in .*state.json but missing"):
        expand_inputs([str(saved)])
