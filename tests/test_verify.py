"""`packcli verify` passes sound output and names the shard and row of each kind of damage."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import random_texts, write_jsonl
from packcli.errors import PackcliError
from packcli.shards import checksum
from packcli.verify import check_rows, verify_dir
from test_shards import make_rows


@pytest.fixture
def output(tmp_path, packed, word_tokenizer):
    def make(fmt="npy"):
        path = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in random_texts(60, seed=5)])
        return packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--rows-per-shard", 10, "--format", fmt)

    return make


def tamper_npy(out, shard, column, edit):
    """Change one npy column and fix the manifest's checksum, so only the invariant can catch it."""
    path = out / shard / f"{column}.npy"
    array = np.load(path)
    edit(array)
    np.save(path, array)
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["shards"]:
        if entry["path"] == shard:
            entry["checksum"] = checksum(out / shard)
    (out / "manifest.json").write_text(json.dumps(manifest))


def expect_failure(out, *fragments):
    with pytest.raises(PackcliError) as info:
        verify_dir(out)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_sound_output_passes(output):
    summary = verify_dir(output())
    assert summary["shards"] >= 2 and summary["rows"] > 0 and summary["bytes"] > 0


def test_flipped_label(output):
    out = output()

    def edit(labels):
        labels[3, 5] = labels[3, 5] + 1 if labels[3, 5] != -100 else 7

    tamper_npy(out, "shard-00001", "labels", edit)
    expect_failure(out, "shard-00001 row 3", "label at position 5")


def test_position_that_does_not_restart(output):
    out = output()
    shard, row, second_start = next(
        (shard.name, r, int(cu[offsets[r] + 1]))
        for shard in sorted(out.glob("shard-*"))
        for cu, offsets in [(np.load(shard / "cu_seqlens.npy"), np.load(shard / "cu_seqlens_offsets.npy"))]
        for r in range(len(offsets) - 1)
        if offsets[r + 1] - offsets[r] > 2
    )

    def edit(positions):
        positions[row, second_start] = positions[row, second_start - 1] + 1

    tamper_npy(out, shard, "position_ids", edit)
    expect_failure(out, f"{shard} row {row}", "position_ids do not restart")


def test_cu_seqlens_not_ending_at_seq_len(output):
    out = output()

    def edit(cu):
        cu[-1] = 31

    tamper_npy(out, "shard-00002", "cu_seqlens", edit)
    expect_failure(out, "shard-00002 row", "not at seq_len 32")


def test_truncated_shard_file(output):
    out = output("parquet")
    path = out / "shard-00001.parquet"
    path.write_bytes(path.read_bytes()[:-100])
    expect_failure(out, "shard-00001.parquet", "checksum does not match")


def test_altered_file_with_a_lying_checksum_is_still_caught(output):
    out = output("parquet")
    path = out / "shard-00000.parquet"
    table = pq.read_table(path)
    ids = table.column("input_ids").to_pylist()
    ids[2][1] = 250 if ids[2][1] != 250 else 251  # inside a segment: its label no longer matches
    table = table.set_column(0, "input_ids", pa.array(ids, type=pa.list_(pa.int32())))
    pq.write_table(table, path)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["shards"][0]["checksum"] = checksum(path)
    (out / "manifest.json").write_text(json.dumps(manifest))
    expect_failure(out, "shard-00000.parquet row 2", "label at position 1")


def test_missing_shard(output):
    out = output()
    import shutil

    shutil.rmtree(out / "shard-00001")
    expect_failure(out, "shard-00001", "missing")


def test_manifest_that_lies_about_rows(output):
    out = output()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["shards"][0]["rows"] += 1
    (out / "manifest.json").write_text(json.dumps(manifest))
    expect_failure(out, "shard-00000", "the manifest says 11")


def test_manifest_that_lies_about_totals(output):
    out = output()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["totals"]["real_tokens"] -= 1
    (out / "manifest.json").write_text(json.dumps(manifest))
    expect_failure(out, "manifest.json", "real tokens")


def test_shard_not_in_the_manifest(output):
    out = output()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["shards"].pop()
    manifest.pop("totals")
    (out / "manifest.json").write_text(json.dumps(manifest))
    expect_failure(out, "not listed in the manifest")


def test_no_manifest_means_incomplete(output):
    out = output()
    (out / "manifest.json").unlink()
    expect_failure(out, "no manifest.json")


def test_verify_cli_exit_codes(output, cli):
    out = output()
    assert cli("verify", out).exit_code == 0
    tamper_npy(out, "shard-00000", "input_ids", lambda ids: ids.__setitem__((0, -1), 299))
    result = cli("verify", out)
    assert result.exit_code == 1 and result.stderr.startswith("error: shard-00000 row 0")


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda r: r.labels.__setitem__((1, 0), 5), "the first token of a segment"),
        (lambda r: r.num_segments.__setitem__(0, r.num_segments[0] + 2), "num_segments"),
        (lambda r: r.cu_seqlens.__setitem__(1, 0), "strictly increasing"),
    ],
)
def test_check_rows_names_each_kind_of_damage(damage, message):
    rows = make_rows(6, vocab=300)
    check_rows(rows, seq_len=16, pad_id=3, vocab_size=300)
    damage(rows)
    with pytest.raises(PackcliError, match=message):
        check_rows(rows, seq_len=16, pad_id=3, vocab_size=300)


def test_padding_must_hold_the_pad_id():
    rows = make_rows(50, vocab=300)
    padded = np.flatnonzero(rows.real_lengths() < 16)
    row = int(padded[0])
    rows.input_ids[row, -1] = 4
    with pytest.raises(PackcliError, match=f"row {row}: padding holds token 4"):
        check_rows(rows, seq_len=16, pad_id=3)


def test_token_outside_vocabulary():
    rows = make_rows(4, vocab=300)
    rows.input_ids[1, 0] = 300
    rows.labels[1, 0] = -100
    with pytest.raises(PackcliError, match="row 1: token id 300 outside the vocabulary"):
        check_rows(rows, seq_len=16, pad_id=3, vocab_size=300)
