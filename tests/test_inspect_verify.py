"""`packcli verify` passes sound output and names the shard and row of each kind of damage."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import random_texts, write_jsonl
from mixed import mixed_output
from test_write_shards import make_rows

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


def test_first_bad_row_wins_whatever_the_kind():
    rows = make_rows(40, vocab=300)
    row = int(np.flatnonzero(rows.num_segments[10:] > 0)[0]) + 10
    rows.position_ids[row + 5, 0] = 1  # a later row, a check that comes first
    rows.labels[row, 0] = 9  # first token of a segment must be -100
    with pytest.raises(PackcliError, match=f"^row {row}: label at position 0 .the first token of a segment."):
        check_rows(rows, seq_len=16, pad_id=3, vocab_size=300)


def test_row_numbers_across_check_blocks(monkeypatch):
    import packcli.inspect.verify as verify

    monkeypatch.setattr(verify, "CHECK_BLOCK_ROWS", 7)
    rows = make_rows(50, vocab=300)
    check_rows(rows, seq_len=16, pad_id=3, vocab_size=300)
    rows.position_ids[23, 15] += 5
    with pytest.raises(PackcliError, match="^s row 123: position_ids do not restart"):
        check_rows(rows, seq_len=16, pad_id=3, vocab_size=300, where="s row", first_row=100)


def test_any_damaged_label_or_position_is_named_with_its_row():
    """Random single-cell damage: the kernel flags the row and the message names the damage."""
    rng = np.random.default_rng(0)
    clean = make_rows(60, seq_len=24, vocab=300, seed=4)
    for trial in range(150):
        rows = make_rows(60, seq_len=24, vocab=300, seed=4)
        row, col = int(rng.integers(60)), int(rng.integers(24))
        column = rows.labels if trial % 2 else rows.position_ids
        column[row, col] += int(rng.choice([-1, 1, 7, 1000]))
        with pytest.raises(PackcliError) as info:
            check_rows(rows, seq_len=24, pad_id=3, vocab_size=300)
        message = str(info.value)
        assert message.startswith(f"row {row}: "), message
        assert f"position {col}" in message and "could not name" not in message, message
    check_rows(clean, seq_len=24, pad_id=3, vocab_size=300)


def test_sft_labels_may_be_masked_inside_a_segment():
    rows = make_rows(20, vocab=300)
    first_lengths = rows.cu_seqlens[rows.cu_offsets[:-1] + 1]
    r = int(np.flatnonzero((rows.num_segments > 0) & (first_lengths > 1))[0])
    rows.labels[r, 1] = -100  # a prompt token
    check_rows(rows, seq_len=16, pad_id=3, labels_follow_ids=False)
    with pytest.raises(PackcliError, match=f"row {r}: label at position 1 is -100"):
        check_rows(rows, seq_len=16, pad_id=3, labels_follow_ids=True)
    rows.labels[r, 1] = 299 if rows.input_ids[r, 1] != 299 else 298
    with pytest.raises(PackcliError, match=f"row {r}: label at position 1"):
        check_rows(rows, seq_len=16, pad_id=3, labels_follow_ids=False)


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
    import packcli.inspect.verify as verify

    out = output(fmt)
    monkeypatch.setattr(verify, "BLOCK_TOKENS", 3 * 32)  # blocks of 3 rows
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


def test_check_rows_takes_the_multiple_and_checks_padded_segments():
    import packcli

    sequences = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14], [15]]
    rows = packcli.pack_sequences(sequences, 16, pad_id=0, pad_to_multiple_of=4, shuffle=False).rows
    check_rows(rows, seq_len=16, pad_id=0, vocab_size=300, pad_to_multiple_of=4)  # plain-text labels hold
    with pytest.raises(PackcliError, match="cu_seqlens_unpadded does not fit --pad-to-multiple-of 8"):
        check_rows(rows, seq_len=16, pad_id=0, pad_to_multiple_of=8)
    row, position = _first_inner_pad(rows)
    rows.input_ids[row, position] = 7
    check_rows(rows, seq_len=16, pad_id=0, labels_follow_ids=False)  # without the multiple a pad is a masked token
    with pytest.raises(PackcliError, match=rf"^row {row}: the pad at position {position} is not pad id 0"):
        check_rows(rows, seq_len=16, pad_id=0, pad_to_multiple_of=4)
    bare = packcli.pack_sequences(sequences, 16, pad_id=0).rows
    with pytest.raises(PackcliError, match="cu_seqlens_unpadded is missing"):
        check_rows(bare, seq_len=16, pad_id=0, pad_to_multiple_of=4)


def _first_inner_pad(rows) -> tuple[int, int]:
    for r in range(len(rows)):
        lo, hi = rows.cu_offsets[r], rows.cu_offsets[r + 1]
        cu, real = rows.cu_seqlens[lo:hi], rows.cu_seqlens_unpadded[lo:hi]
        for k in range(int(rows.num_segments[r])):
            if real[k + 1] - real[k] < cu[k + 1] - cu[k]:
                return r, int(cu[k] + real[k + 1] - real[k])
    raise AssertionError("no inner pad")


def test_output_rules_give_check_rows_the_multiple_of_an_output(padded, output):
    from helpers import load_rows

    from packcli.inspect.verify import output_rules

    out = padded("parquet")
    rows, manifest = load_rows(out)
    rules = output_rules(manifest)
    assert rules["pad_to_multiple_of"] == 8 and rules["labels_follow_ids"] is True
    check_rows(rows, **rules)
    row, position = _first_inner_pad(rows)
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


def test_check_rows_knows_the_number_of_sources():
    rows = make_rows(6, seed=1, vocab=300)
    count = int(rows.num_segments.sum())
    rows.segment_columns = {"segment_source": np.full(count, 2, dtype=np.int32)}
    check_rows(rows, seq_len=16, pad_id=3, sources=3)
    with pytest.raises(PackcliError, match="segment_source 2 is not one of the manifest's 2 sources"):
        check_rows(rows, seq_len=16, pad_id=3, sources=2)
    rows.segment_columns = {"segment_source": np.zeros(count + 1, dtype=np.int32)}
    with pytest.raises(PackcliError, match="entries for"):
        check_rows(rows, seq_len=16, pad_id=3)


# ----------------------------------------------------------------------------- preference pairs and weights


def pair_rows():
    import packcli

    rng = np.random.default_rng(2)
    chosen = [rng.integers(3, 90, size=int(rng.integers(2, 9))).tolist() for _ in range(12)]
    rejected = [c[:1] + rng.integers(3, 90, size=int(rng.integers(1, 6))).tolist() for c in chosen]
    packed = packcli.pack_pairs(chosen, rejected, 32, sample_weights=[1.0] * 12, pad_id=0, shuffle=False)
    return packed.rows


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda c: c["segment_chosen"].__setitem__(slice(0, 2), [0, 1]), "first segment has segment_chosen 0, not 1"),
        (lambda c: c["segment_pair"].__setitem__(1, 99), r"pair \d+ is followed by pair 99"),
        (lambda c: c["segment_weight"].__setitem__(1, 0.5), "two sides have weights 1.0 and 0.5"),
        (lambda c: c["segment_weight"].__setitem__(slice(0, 2), -1.0), "segment_weight -1.0 is not a finite number"),
        (lambda c: c.pop("segment_chosen"), "segment_pair without segment_chosen"),
    ],
)
def test_pairs_must_be_whole_and_matched(tamper, message):
    rows = pair_rows()
    check_rows(rows, seq_len=32, pad_id=0, labels_follow_ids=False)
    rows.segment_columns = {name: values.copy() for name, values in rows.segment_columns.items()}
    tamper(rows.segment_columns)
    with pytest.raises(PackcliError, match=message) as raised:
        check_rows(rows, seq_len=32, pad_id=0, labels_follow_ids=False)
    assert str(raised.value).startswith("row 0: ")


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
