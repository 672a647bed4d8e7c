"""manifest.json: one reader for every consumer, which refuses a newer format with what to
do and reads format 1 as it is; the builders keep the documented key order."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import random_texts, write_jsonl
from mixed import mixed_output

from packcli.core.errors import PackcliError
from packcli.export.megatron import export_megatron
from packcli.inspect.stats import stats_dir
from packcli.inspect.verify import verify_dir
from packcli.load import hf
from packcli.load.torch import PackedDataset
from packcli.write.manifest import FORMAT_VERSION, load_manifest
from packcli.write.shards import checksum

MANIFEST_KEYS = [
    "format_version",
    "packcli_version",
    "mode",
    "algorithm",
    "plan",
    "seq_len",
    "format",
    "labels",
    "options",
    "tokenizer",
    "columns",
    "totals",
    "shards",
    "group_by",
]

# Every reader of an output, each with one call.
READERS = {
    "verify": verify_dir,
    "stats": stats_dir,
    "hf.load": hf.load,
    "torch_data.PackedDataset": PackedDataset,
    "export megatron": lambda out: export_megatron(out, out.parent / "mega"),
    "load_manifest": load_manifest,
}


@pytest.fixture(params=["parquet", "npy"])
def output(request, tmp_path, packed, word_tokenizer):
    texts = random_texts(40, seed=5, max_words=30)
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    return packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--format", request.param)


def rewrite_manifest(out, change) -> None:
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest, indent=2) + "\n")


def test_pack_writes_the_current_format_in_the_documented_key_order(output):
    manifest = json.loads((output / "manifest.json").read_text())
    assert list(manifest) == MANIFEST_KEYS
    assert manifest["format_version"] == FORMAT_VERSION == 6


@pytest.mark.parametrize("reader", READERS, ids=list(READERS))
def test_a_newer_format_is_refused_by_every_reader_with_what_to_do(output, reader):
    rewrite_manifest(output, lambda m: m.update(format_version=99))
    with pytest.raises(PackcliError) as raised:
        READERS[reader](output)
    assert str(raised.value) == f"{output}: written by a newer packcli (format 99); upgrade packcli"
    if reader == "export megatron":
        assert not (output.parent / "mega.bin").exists()  # refused before anything is written


@pytest.mark.parametrize("command", [["verify"], ["stats"], ["export", "megatron"]])
def test_the_cli_says_so_in_one_line(output, cli, command):
    rewrite_manifest(output, lambda m: m.update(format_version=99))
    extra = [output.parent / "mega"] if command[0] == "export" else []
    result = cli(*command, output, *extra)
    assert result.exit_code == 1
    assert result.stderr == f"error: {output}: written by a newer packcli (format 99); upgrade packcli\n"


def test_format_1_reads_as_it_is(output):
    """Format 1 had no `plan`; its files and columns are those of format 2."""
    rows = verify_dir(output)["rows"]

    def to_format_1(manifest):
        manifest["format_version"] = 1
        del manifest["plan"]

    rewrite_manifest(output, to_format_1)
    assert verify_dir(output)["rows"] == rows
    assert stats_dir(output)["rows"] == rows
    assert len(hf.load(output)) == rows
    assert len(PackedDataset(output)) == rows
    assert export_megatron(output, output.parent / "mega")["tokens"] == stats_dir(output)["real_tokens"]


def test_format_3_reads_verifies_and_exports_as_it_is(output):
    """Format 3 differs from 4 only in the shuffled order of its rows."""
    rows = verify_dir(output)["rows"]
    rewrite_manifest(output, lambda m: m.update(format_version=3))
    assert verify_dir(output)["rows"] == rows
    assert stats_dir(output)["rows"] == rows
    assert len(hf.load(output)) == rows
    assert len(PackedDataset(output)) == rows
    assert export_megatron(output, output.parent / "mega")["tokens"] == stats_dir(output)["real_tokens"]


def test_format_4_reads_verifies_and_exports_as_it_is(output):
    """Format 5 only added per-segment columns and `sources`, which an output without a
    mixture does not have: its files are those of format 4."""
    rows = verify_dir(output)["rows"]
    rewrite_manifest(output, lambda m: m.update(format_version=4))
    assert verify_dir(output)["rows"] == rows
    assert stats_dir(output)["rows"] == rows
    assert len(hf.load(output)) == rows
    assert len(PackedDataset(output)) == rows
    assert export_megatron(output, output.parent / "mega")["tokens"] == stats_dir(output)["real_tokens"]


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
@pytest.mark.parametrize("reader", READERS, ids=list(READERS))
def test_every_reader_reads_a_mixture(tmp_path, fmt, reader):
    """Format 5's per-segment columns and `sources`, read by every reader of an output."""
    out = mixed_output(tmp_path / "mixed", fmt).out
    manifest = load_manifest(out)
    assert manifest["format_version"] == FORMAT_VERSION and [s["name"] for s in manifest["sources"]] == [
        "web",
        "code",
        "chat",
    ]
    assert READERS[reader](out)


def test_format_2_without_max_seqlen_reads_as_it_is(output):
    """Format 2 had no max_seqlen column: readers compute it from cu_seqlens."""
    rows = verify_dir(output)["rows"]
    shard = output / "shard-00000.parquet"
    if shard.exists():
        table = pq.read_table(shard)
        pq.write_table(table.drop_columns(["max_seqlen"]), shard)
    else:
        shard = output / "shard-00000"
        (shard / "max_seqlen.npy").unlink()

    def to_format_2(manifest):
        manifest["format_version"] = 2
        del manifest["columns"]["max_seqlen"]
        manifest["shards"][0]["checksum"] = checksum(shard)

    rewrite_manifest(output, to_format_2)
    assert verify_dir(output)["rows"] == rows
    assert stats_dir(output)["rows"] == rows
    assert len(hf.load(output)) == rows
    dataset = PackedDataset(output)
    item = dataset[0]
    assert item["max_seqlen"] == int(np.diff(item["cu_seqlens"].numpy()).max())


@pytest.mark.parametrize(
    ("version", "message"),
    [(None, "missing format_version"), (0, "unknown format_version 0"), ("2", "unknown format_version '2'")],
)
def test_a_format_version_that_is_no_version_is_named(output, version, message):
    def change(manifest):
        if version is None:
            del manifest["format_version"]
        else:
            manifest["format_version"] = version

    rewrite_manifest(output, change)
    with pytest.raises(PackcliError, match=f"manifest.json: {message}$"):
        load_manifest(output)


def test_an_unfinished_or_foreign_directory(tmp_path):
    with pytest.raises(PackcliError, match="no such directory"):
        load_manifest(tmp_path / "absent")
    with pytest.raises(PackcliError, match="no manifest.json, so this is not a complete packcli output"):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(PackcliError, match="not a packcli manifest"):
        load_manifest(tmp_path)
