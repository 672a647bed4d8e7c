"""`packcli verify` passes sound output and names the shard and row of each kind of damage."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import random_texts, write_jsonl
from mixed import mixed_output
from test_inspect_row_checks import first_inner_pad

from packcli.core.errors import PackcliError
from packcli.inspect.verify import check_rows, verify_dir
from packcli.write.shards import checksum


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
    _fix_checksum(out, shard)


def tamper_parquet(out, shard, column, edit):
    """The same for a list<int32> column of a Parquet shard; `edit` changes the row lists."""
    path = out / shard
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    edit(values)
    index = table.schema.get_field_index(column)
    pq.write_table(table.set_column(index, column, pa.array(values, type=pa.list_(pa.int32()))), path)
    _fix_checksum(out, shard)


def _fix_checksum(out, shard):
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["shards"]:
        if entry["path"] == shard:
            entry["checksum"] = checksum(out / shard)
    (out / "manifest.json").write_text(json.dumps(manifest))


def rewrite_manifest(out, change) -> None:
    manifest = json.loads((out / "manifest.json").read_text())
    change(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))


def expect_failure(out, *fragments):
    with pytest.raises(PackcliError) as info:
        verify_dir(out)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_sound_output_passes(output):
    summary = verify_dir(output())
    assert summary["shards"] >= 2 and summary["rows"] > 0 and summary["bytes"] > 0
    # plain Python numbers, so `verify --json` writes them, with the kernels compiled or not (make cov)
    assert type(summary["sequences"]) is int and type(summary["real_tokens"]) is int
    assert json.loads(json.dumps(summary)) == summary


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

    def edit(ids):
        ids[2][1] = 250 if ids[2][1] != 250 else 251  # inside a segment: its label no longer matches

    tamper_parquet(out, "shard-00000.parquet", "input_ids", edit)
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


# ----------------------------------------------------------------------------- more kinds


def test_cu_seqlens_not_starting_at_0(output):
    out = output()
    offsets = np.load(out / "shard-00001" / "cu_seqlens_offsets.npy")
    tamper_npy(out, "shard-00001", "cu_seqlens", lambda cu: cu.__setitem__(offsets[4], 1))
    expect_failure(out, "shard-00001 row 4", "cu_seqlens does not start at 0")


def test_flipped_label_in_parquet(output):
    out = output("parquet")

    def edit(labels):
        labels[6][-1] = 5 if labels[6][-1] != 5 else 6

    tamper_parquet(out, "shard-00001.parquet", "labels", edit)
    expect_failure(out, "shard-00001.parquet row 6", "label at position 31")


def test_truncated_npy_file(output):
    out = output()
    path = out / "shard-00002" / "labels.npy"
    path.write_bytes(path.read_bytes()[:-64])
    expect_failure(out, "shard-00002", "checksum does not match")


def test_manifest_that_lies_about_a_checksum(output):
    out = output()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["shards"][1]["checksum"] = "sha256:" + "0" * 64
    (out / "manifest.json").write_text(json.dumps(manifest))
    expect_failure(out, "shard-00001", "checksum does not match")


@pytest.mark.parametrize("key, words", [("sequences", "sequences"), ("real_tokens", "real tokens")])
def test_manifest_that_lies_about_sequences_or_tokens(output, key, words):
    out = output()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["shards"][2][key] += 3
    (out / "manifest.json").write_text(json.dumps(manifest))
    expect_failure(out, "shard-00002", f"{words}, the manifest says")


def test_uint32_ids_pass_and_out_of_vocabulary_is_caught(tmp_path, packed, big_tokenizer):
    texts = [" ".join(f"w{69_000 + i % 900}" for i in range(k)) for k in range(1, 40)]
    path = write_jsonl(tmp_path / "big.jsonl", [{"text": t} for t in texts])
    out = packed(path, "--tokenizer", big_tokenizer, "--seq-len", 64, "--format", "npy")
    assert np.load(out / "shard-00000" / "input_ids.npy").dtype == np.uint32
    row = 0

    def edit(ids):
        ids[row, 1] = 2**31 + 5  # beyond the vocabulary, and beyond int32

    tamper_npy(out, "shard-00000", "input_ids", edit)
    expect_failure(out, "shard-00000 row 0", "outside the vocabulary")


def test_verify_cli_summary_line(output, cli):
    out = output()
    result = cli("verify", out)
    line = result.stdout.strip()
    assert result.exit_code == 0 and "\n" not in line
    assert line.startswith(f"ok: {out}: ") and "B/s)" in line and "6 shard(s)" in line


@pytest.mark.parametrize("fmt", ["npy", "parquet"])
def test_shards_read_in_small_blocks_keep_row_numbers(output, monkeypatch, fmt):
    import packcli.inspect.shard_checks as shard_checks

    out = output(fmt)
    monkeypatch.setattr(shard_checks, "BLOCK_TOKENS", 3 * 32)  # blocks of 3 rows
    assert verify_dir(out)["rows"] == json.loads((out / "manifest.json").read_text())["totals"]["rows"]
    if fmt == "npy":
        tamper_npy(out, "shard-00001", "position_ids", lambda p: p.__setitem__((7, 0), 3))
        expect_failure(out, "shard-00001 row 7: position_ids do not restart", "position 0 is 3")
    else:
        path = out / "shard-00001.parquet"
        table = pq.read_table(path)
        positions = table.column("position_ids").to_pylist()
        positions[7][0] = 3
        pq.write_table(table.set_column(2, "position_ids", pa.array(positions, type=pa.list_(pa.int32()))), path)
        manifest = json.loads((out / "manifest.json").read_text())
        manifest["shards"][1]["checksum"] = checksum(path)
        (out / "manifest.json").write_text(json.dumps(manifest))
        expect_failure(out, "shard-00001.parquet row 7: position_ids do not restart")


@pytest.fixture
def padded(tmp_path, packed, word_tokenizer):
    def make(fmt):
        path = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in random_texts(60, seed=5)])
        options = ("--seq-len", 32, "--rows-per-shard", 10, "--format", fmt, "--pad-to-multiple-of", 8)
        return packed(path, "--tokenizer", word_tokenizer, *options)

    return make


def test_padded_output_is_checked(padded):
    out = padded("npy")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format_version"] == 6 and manifest["columns"]["cu_seqlens_unpadded"] == "int32"
    report = json.loads((out / "report.json").read_text())
    assert manifest["totals"]["real_tokens"] == report["real_tokens"] == report["tokens_read"]

    def lengthen_first_segment(a):
        a[1] += 8  # more real tokens than the padded segment holds

    tamper_npy(out, "shard-00000", "cu_seqlens_unpadded", lengthen_first_segment)
    expect_failure(out, "shard-00000 row 0", "cu_seqlens_unpadded does not fit --pad-to-multiple-of 8")


def test_padded_parquet_inner_pad_and_max_seqlen(padded):
    out = padded("parquet")

    table = pq.read_table(out / "shard-00000.parquet")
    columns = (table.column(c).to_pylist() for c in ("cu_seqlens", "cu_seqlens_unpadded", "num_segments"))
    row, position = next(
        (r, cu[k] + real[k + 1] - real[k])  # the first pad after segment k's real tokens
        for r, (cu, real, n) in enumerate(zip(*columns))
        for k in range(n)
        if real[k + 1] - real[k] < cu[k + 1] - cu[k]
    )
    pad = table.column("input_ids").to_pylist()[row][position]  # a label equal to its id, but on a pad
    tamper_parquet(out, "shard-00000.parquet", "labels", lambda rows: rows[row].__setitem__(position, pad))
    expect_failure(out, f"shard-00000.parquet row {row}: the pad at position {position}")
    out = padded("npy")
    tamper_npy(out, "shard-00001", "max_seqlen", lambda a: a.__setitem__(3, a[3] + 1))
    expect_failure(out, "shard-00001 row 3", "max_seqlen is")


def test_output_rules_give_check_rows_the_multiple_of_an_output(padded, output):
    from helpers import load_rows

    from packcli.inspect.verify import output_rules

    out = padded("parquet")
    rows, manifest = load_rows(out)
    rules = output_rules(manifest)
    assert rules["pad_to_multiple_of"] == 8 and rules["labels_follow_ids"] is True
    check_rows(rows, **rules)
    row, position = first_inner_pad(rows)
    rows.labels[row, position] = rows.input_ids[row, position]
    with pytest.raises(PackcliError, match=f"row {row}: the pad at position {position}"):
        check_rows(rows, **rules)
    plain_rows, plain_manifest = load_rows(output("npy"))
    assert output_rules(plain_manifest)["pad_to_multiple_of"] is None
    check_rows(plain_rows, **output_rules(plain_manifest))


# ----------------------------------------------------------------------------- per-segment columns


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
@pytest.mark.parametrize(
    "plan", [("bin", "bfd", 1), ("bin", "nf", 1), ("bin", "bfd", 4), ("concat", "bfd", 1)], ids=str
)
def test_a_mixed_output_passes(tmp_path, fmt, plan):
    mode, algorithm, multiple = plan
    mixed_output(
        tmp_path / "o", fmt, seq_len=24 if multiple == 1 else 32, mode=mode, algorithm=algorithm, multiple=multiple
    )
    summary = verify_dir(tmp_path / "o")
    assert summary["sources"] == 3 and summary["shards"] >= 3


@pytest.fixture
def mixed(tmp_path):
    return lambda fmt: mixed_output(tmp_path / fmt, fmt).out


def first_row_with(out, shard, at_least):
    """A row of an npy shard with at least `at_least` real segments."""
    return int(np.argmax(np.load(out / shard / "num_segments.npy") >= at_least))


def test_a_row_with_one_segment_entry_too_many_npy(mixed):
    out = mixed("npy")
    row = first_row_with(out, "shard-00001", 2)

    def edit(offsets):
        offsets[row + 1] -= 1  # the row loses an entry to the next

    tamper_npy(out, "shard-00001", "segment_offsets", edit)
    expect_failure(out, f"shard-00001 row {row}: segment_source has", "num_segments is")


def test_a_row_with_one_segment_entry_too_many_parquet(mixed):
    out = mixed("parquet")
    tamper_parquet(out, "shard-00000.parquet", "segment_source", lambda lists: lists[2].append(0))
    expect_failure(out, "shard-00000.parquet row 2: segment_source has", "num_segments is")


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
@pytest.mark.parametrize("value", [3, -1])
def test_a_source_out_of_range(mixed, fmt, value):
    out = mixed(fmt)
    if fmt == "npy":
        row = first_row_with(out, "shard-00002", 1)
        start = int(np.load(out / "shard-00002" / "segment_offsets.npy")[row])

        def edit(source):
            source[start] = value

        tamper_npy(out, "shard-00002", "segment_source", edit)
        expect_failure(out, f"shard-00002 row {row}: segment_source {value} is not one of the manifest's 3 sources")
    else:
        tamper_parquet(out, "shard-00002.parquet", "segment_source", lambda lists: lists[1].__setitem__(0, value))
        expect_failure(out, f"shard-00002.parquet row 1: segment_source {value} is not one of the manifest's 3 sources")


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_per_source_totals_that_disagree_with_the_manifest(mixed, fmt):
    out = mixed(fmt)

    def change(manifest):
        manifest["sources"][1]["tokens"]["out"] += 1

    rewrite_manifest(out, change)
    expect_failure(out, "manifest.json: source 1 ('code') lists", "tokens out, its segments in the shards hold")


def test_segments_moved_to_another_source_keep_the_count_but_not_the_totals(mixed):
    out = mixed("npy")

    def edit(source):
        source[source == 0] = 2

    tamper_npy(out, "shard-00000", "segment_source", edit)
    expect_failure(out, "manifest.json: source 0 ('web') lists")


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_a_shard_without_the_column_the_manifest_lists(mixed, fmt):
    out = mixed(fmt)
    shard = "shard-00001.parquet" if fmt == "parquet" else "shard-00001"
    if fmt == "parquet":
        pq.write_table(pq.read_table(out / shard).drop_columns(["segment_source"]), out / shard)
    else:
        (out / shard / "segment_source.npy").unlink()
    _fix_checksum(out, shard)
    expect_failure(out, f"{shard}: no segment_source column, but the manifest lists it")


def test_a_removed_segment_file_is_named_as_missing(mixed):
    out = mixed("npy")
    (out / "shard-00000" / "segment_offsets.npy").unlink()
    expect_failure(out, "shard-00000: segment_offsets.npy missing")


# ----------------------------------------------------------------------------- preference pairs


def test_every_pair_is_in_the_output_once():
    from packcli.inspect.verify import verify_pairs

    manifest = {"pairs": 3}
    block = (np.array([0, 2]), np.array([0, 4]))
    verify_pairs(
        manifest, [("shard-00000.parquet", [block]), ("shard-00001.parquet", [(np.array([1]), np.array([7]))])]
    )
    twice = [("shard-00000.parquet", [block]), ("shard-00001.parquet", [(np.array([2]), np.array([7]))])]
    with pytest.raises(PackcliError, match=r"^shard-00001.parquet row 7: pair 2 is in the output twice$"):
        verify_pairs(manifest, twice)
    with pytest.raises(PackcliError, match="lists 3 pairs, pair 1 is in no row"):
        verify_pairs(manifest, [("shard-00000.parquet", [block])])
    with pytest.raises(PackcliError, match="pair 5 is not one of the manifest's 3 pairs"):
        verify_pairs(manifest, [("shard-00000.parquet", [(np.array([5]), np.array([0]))])])
    with pytest.raises(PackcliError, match="lists no pairs, the shards have a segment_pair column"):
        verify_pairs({}, [("shard-00000.parquet", [block])])
