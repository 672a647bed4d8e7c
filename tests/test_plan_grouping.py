"""`--group-by` end to end: rows never mix groups, the group column, manifest table,
report and verify, for every algorithm, both formats and modes, shuffle, windows,
workers and resume; and `--max-sequences-per-row` through `pack`."""

from __future__ import annotations

import json
import warnings
from collections import Counter

import numpy as np
import pytest
from helpers import load_rows, real_segments, write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st
from naive_grouping import group_hashes, length_table, real_tokens_of_row

from packcli.core.errors import PackcliError
from packcli.inspect.verify import verify_dir
from packcli.plan.grouping import (
    GroupIds,
    GroupTable,
    group_key,
    group_length_table,
    group_slices,
    merge_tables,
    row_token_hashes,
)
from packcli.write.shard_reader import read_group_column

ALGORITHMS = ["nf", "ff", "ffd", "bfd", "spfhp", "lpfhp"]
VALUES = ["web", "code", None, 7, True, 7.0, "7"]  # seven groups: JSON types never merge
WORDS_PER_GROUP = 20


def group_text(rng, group: int, words: int) -> str:
    """Words only this group uses (w<group*20> .. w<group*20+19>), so a token tells its group."""
    return " ".join(f"w{group * WORDS_PER_GROUP + k}" for k in rng.integers(0, WORDS_PER_GROUP, size=words))


def group_of_token(token: int) -> int:
    return (token - 4) // WORDS_PER_GROUP  # word ids are w<i> + 4; EOS (1) is handled by callers


@pytest.fixture
def grouped(tmp_path):
    rng = np.random.default_rng(3)
    records, expected = [], {}
    for _ in range(400):
        g = int(rng.integers(0, len(VALUES)))
        text = group_text(rng, g, int(rng.integers(1, 70)))
        records.append({"text": text, "source": VALUES[g]})
        expected.setdefault(g, []).append(text)
    return write_jsonl(tmp_path / "in.jsonl", records), records


def row_groups(out) -> np.ndarray:
    manifest = json.loads((out / "manifest.json").read_text())
    return np.concatenate(
        [np.concatenate(list(read_group_column(out / s["path"], manifest["format"]))) for s in manifest["shards"]]
    )


def assert_no_row_mixes(out, seq_len=None):
    rows, manifest = load_rows(out)
    groups = row_groups(out)
    table = {entry["id"]: entry["value"] for entry in manifest["groups"]}
    ids_by_value = {group_key(v): i for i, v in enumerate(VALUES)}
    for r in range(len(rows)):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
        tokens = rows.input_ids[r, : cu[int(rows.num_segments[r])]]
        words = {group_of_token(int(t)) for t in tokens if t != 1}
        assert words <= {ids_by_value[group_key(table[int(groups[r])])]}, f"row {r} mixes {words}"
    return rows, manifest, groups


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_rows_never_mix_groups_and_each_group_keeps_its_sequences(grouped, packed, word_tokenizer, algorithm):
    path, records = grouped
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64, "--algorithm", algorithm, "--group-by", "source")
    rows, manifest, groups = assert_no_row_mixes(out)
    assert manifest["group_by"] == "source" and manifest["format_version"] == 6
    # ids in order of first appearance, JSON types kept apart
    firsts = []
    for r in records:
        if group_key(r["source"]) not in [group_key(v) for v in firsts]:
            firsts.append(r["source"])
    assert [group_key(e["value"]) for e in manifest["groups"]] == [group_key(v) for v in firsts]
    segments = real_segments(rows)
    assert sum(e["sequences"] for e in manifest["groups"]) == len(segments)
    report = json.loads((out / "report.json").read_text())
    assert [e["rows"] for e in report["groups"]] == [int((groups == e["id"]).sum()) for e in report["groups"]]
    docs = Counter(group_key(r["source"]) for r in records)
    assert {group_key(e["value"]): e["documents"] for e in report["groups"]} == dict(docs)


def test_parquet_and_npy_carry_the_same_groups(grouped, packed, word_tokenizer):
    path, _ = grouped
    outs = [
        packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64, "--group-by", "source", "--format", f)
        for f in ("parquet", "npy")
    ]
    assert (row_groups(outs[0]) == row_groups(outs[1])).all()
    assert (
        json.loads((outs[0] / "manifest.json").read_text())["groups"]
        == json.loads((outs[1] / "manifest.json").read_text())["groups"]
    )


def test_shuffle_windows_and_workers(grouped, packed, word_tokenizer):
    path, _ = grouped
    base = ("--tokenizer", word_tokenizer, "--seq-len", 64, "--group-by", "source", "--shuffle", "--seed", 5)
    one = packed(path, *base, "--workers", 1)
    two = packed(path, *base, "--workers", 2)
    assert (one / "shard-00000.parquet").read_bytes() == (two / "shard-00000.parquet").read_bytes()
    groups = row_groups(one)
    assert (np.diff(groups) != 0).sum() > len(VALUES)  # shuffled: groups interleave
    windows = packed(path, *base, "--buffer-size", 50)
    _, _, window_groups = assert_no_row_mixes(windows)
    assert len(window_groups) >= len(groups)


def test_concat_mode_makes_one_stream_per_group(grouped, packed, word_tokenizer):
    path, records = grouped
    opts = ("--tokenizer", word_tokenizer, "--seq-len", 32, "--mode", "concat", "--group-by", "source", "--no-shuffle")
    out = packed(path, *opts)  # plan order: each group's rows in stream order
    rows, manifest, groups = assert_no_row_mixes(out)
    for entry in manifest["groups"]:
        texts = [r["text"] for r in records if group_key(r["source"]) == group_key(entry["value"])]
        stream = [t for text in texts for t in [int(w[1:]) + 4 for w in text.split()] + [1]]
        real = rows.real_lengths()
        got = [t for r in np.flatnonzero(groups == entry["id"]) for t in rows.input_ids[r][: int(real[r])].tolist()]
        assert got == stream


def test_resume_gives_the_same_bytes(grouped, packed, word_tokenizer, tmp_path, cli):
    path, _ = grouped
    opts = ("--tokenizer", word_tokenizer, "--seq-len", 64, "--group-by", "source", "--rows-per-shard", 20)
    whole = packed(path, *opts)
    partial = tmp_path / "partial"
    packed(path, *opts, out=partial)
    (partial / "manifest.json").unlink()
    (partial / "shard-00003.parquet").unlink()
    packed(path, *opts, "--resume", out=partial)
    names = sorted(p.name for p in whole.glob("shard-*"))
    assert all((whole / n).read_bytes() == (partial / n).read_bytes() for n in names)


def test_null_is_a_group_missing_is_a_bad_record(tmp_path, packed, cli, word_tokenizer):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "w1 w2", "g": None}, {"text": "w3"}, {"text": "w4", "g": [1]}])
    result = cli(
        "pack", path, "-o", tmp_path / "fail", "--tokenizer", word_tokenizer, "--seq-len", 8, "--group-by", "g"
    )
    assert result.exit_code == 1 and "in.jsonl:2: missing field 'g'" in result.stderr
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 8, "--group-by", "g", "--on-bad-record", "skip")
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(e["value"], e["documents"]) for e in manifest["groups"]] == [(None, 1)]
    report = json.loads((out / "report.json").read_text())
    assert report["documents"]["skipped_by_reason"] == {"missing field": 1, "wrong type": 1}


def test_group_by_on_parquet_input(tmp_path, packed, word_tokenizer):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": ["w1 w2", "w3", "w4 w5 w6"], "lang": ["en", None, "en"]}), path)
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 16, "--group-by", "lang")
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(e["value"], e["documents"], e["rows"]) for e in manifest["groups"]] == [("en", 2, 1), (None, 1, 1)]


def test_verify_catches_a_row_in_the_wrong_group(grouped, packed, word_tokenizer):
    path, _ = grouped
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64, "--group-by", "source", "--format", "npy")
    group_file = out / "shard-00000" / "group.npy"
    groups = np.load(group_file)
    swap = int(np.argmax(groups != groups[0]))
    groups[0], groups[swap] = groups[swap], groups[0]  # counts of rows stay, tokens move
    np.save(group_file, groups)
    from packcli.inspect.verify import verify_groups

    manifest = json.loads((out / "manifest.json").read_text())
    with pytest.raises(PackcliError, match="group"):
        verify_groups(out, manifest)
    groups[0] = 99
    np.save(group_file, groups)
    with pytest.raises(PackcliError, match="shard-00000 row 0: group 99 is not in the manifest's table"):
        verify_groups(out, manifest)


def test_verify_catches_a_wrong_table(grouped, packed, word_tokenizer):
    path, _ = grouped
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64, "--group-by", "source")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["groups"][1]["sequences"] += 1
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PackcliError, match=r"group 1 .* sequences"):
        verify_dir(out)


def test_max_sequences_per_row_through_pack(grouped, packed, word_tokenizer):
    path, _ = grouped
    for algorithm in ALGORITHMS:
        out = packed(
            path,
            "--tokenizer",
            word_tokenizer,
            "--seq-len",
            256,
            "--algorithm",
            algorithm,
            "--max-sequences-per-row",
            2,
            "--group-by",
            "source",
        )
        rows, _, _ = assert_no_row_mixes(out)
        assert rows.num_segments.max() <= 2
        cap = json.loads((out / "report.json").read_text())["max_sequences_per_row"]
        assert (
            cap["cap"] == 2 and cap["rows"] == len(rows) and cap["extra_rows"] == cap["rows"] - cap["uncapped_rows"] > 0
        )


@pytest.mark.parametrize(
    "options, message",
    [
        (("--mode", "concat", "--max-sequences-per-row", 2), "--max-sequences-per-row applies to bin mode"),
        (("--mode", "concat", "--group-by", "g", "--buffer-size", 4), "drop --buffer-size"),
        (("--group-by", "text"), "the one tokenized"),
        (("--max-sequences-per-row", 0), "--max-sequences-per-row must be at least 1"),
    ],
)
def test_usage_errors(tmp_path, cli, word_tokenizer, options, message):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "w1", "g": 1}])
    result = cli("pack", path, "-o", tmp_path / "out", "--tokenizer", word_tokenizer, "--seq-len", 8, *options)
    assert result.exit_code == 2 and message in result.stderr


def test_group_ids_and_slices():
    table = GroupTable("g")
    assert table.ids_of(["a", 1, 1.0, True, None, "a", "1"]).tolist() == [0, 1, 2, 3, 4, 0, 5]
    assert table.documents == [2, 1, 1, 1, 1, 1]
    again = GroupTable.from_dict(json.loads(json.dumps(table.to_dict())))
    assert again.ids_of([None, "1"]).tolist() == [4, 5]
    slices = [(g, m.tolist()) for g, m in group_slices(np.array([2, 0, 2, 1, 0], dtype=np.int32))]
    assert slices == [(0, [1, 4]), (1, [3]), (2, [0, 2])]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 12)), max_size=100))
def test_the_group_length_table_counts_each_group_and_placed_length(pairs):
    groups, placed = [g for g, _ in pairs], [n for _, n in pairs]
    table = group_length_table(np.array(groups, dtype=np.int32), np.array(placed), 12)
    rows = max(groups, default=-1) + 1
    assert table.shape == (rows, 13)
    assert table.tolist() == length_table(groups, placed, 12)


def test_the_group_length_table_refuses_what_it_cannot_count():
    with pytest.raises(PackcliError, match="2 group ids for 3 lengths"):
        group_length_table(np.array([0, 1]), np.array([1, 2, 3]), 4)
    with pytest.raises(PackcliError, match=r"placed lengths in \[0, 4\]"):
        group_length_table(np.array([0, 1]), np.array([1, 5]), 4)
    with pytest.raises(PackcliError, match="group ids must be >= 0"):
        group_length_table(np.array([0, -1]), np.array([1, 2]), 4)


def test_tables_of_parts_merge_into_the_table_of_the_whole():
    """Parts read on their own, merged in input order: the ids, documents and token hashes
    of one table over the whole input (--engine ray)."""
    rng = np.random.default_rng(4)
    values = [["b", 2, None, "b"], [], [None, "a", 2, 2.0], ["c", "b"]]
    whole = GroupTable("g")
    parts = []
    for part_values in values:
        part = GroupTable("g")
        lengths = rng.integers(1, 6, size=len(part_values))
        tokens = rng.integers(0, 1 << 20, size=int(lengths.sum()))
        for table in (whole, part):
            table.add_tokens(tokens, lengths, table.ids_of(part_values))
        parts.append(part)
    merged, remaps = merge_tables(parts)
    assert merged.values == whole.values == ["b", 2, None, "a", 2.0, "c"]
    assert merged.documents == whole.documents and merged.hashes.tolist() == whole.hashes.tolist()
    assert [r.tolist() for r in remaps] == [[0, 1, 2], [], [2, 3, 1, 4], [5, 0]]


def test_resume_reuses_the_spill_with_its_group_ids(grouped, packed, cli, word_tokenizer, tmp_path, monkeypatch):
    from packcli.write import shards

    path, _ = grouped
    opts = ("--tokenizer", word_tokenizer, "--seq-len", 64, "--group-by", "source", "--rows-per-shard", 20, "--shuffle")
    whole = packed(path, *opts)
    close = shards.ShardWriter._close_shard

    def fail_after_two(self):
        if self.first_shard + len(self.shards) == 2:  # shard 2, written alone or beside another
            raise PackcliError("stopped on purpose")
        close(self)

    monkeypatch.setattr(shards.ShardWriter, "_close_shard", fail_after_two)
    out = tmp_path / "stopped"
    assert cli("pack", path, "-o", out, *opts).exit_code == 1
    monkeypatch.setattr(shards.ShardWriter, "_close_shard", close)
    assert (out / ".packcli-spill" / "groups.npy").is_file()
    result = cli("pack", path, "-o", out, *opts, "--resume", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["spill"]["reused"] is True
    verify_dir(out)
    for name in sorted(p.name for p in whole.glob("shard-*")) + ["manifest.json"]:
        assert (whole / name).read_bytes() == (out / name).read_bytes(), name


def test_concat_drop_pads_nothing_and_hashes_nothing(grouped, packed, word_tokenizer):
    path, _ = grouped
    out = packed(
        path,
        "--tokenizer",
        word_tokenizer,
        "--seq-len",
        32,
        "--mode",
        "concat",
        "--group-by",
        "source",
        "--remainder",
        "drop",
    )
    rows, manifest, _ = assert_no_row_mixes(out)
    assert (rows.real_lengths() == 32).all()
    assert all(entry["token_hash"] is None for entry in manifest["groups"])
    report = json.loads((out / "report.json").read_text())
    assert 0 < report["remainder"]["tokens"] < 32 * len(VALUES)  # each group drops its own tail


@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 12)), max_size=30))
def test_group_ids_are_handed_out_in_the_order_they_came(steps):
    """Appends of `a` ids and takes of up to `t` of those held, against one flat list."""
    ids, expected, counter = GroupIds(), [], 0
    for appended, asked in steps:
        ids.append(np.arange(counter, counter + appended, dtype=np.int32))
        expected += list(range(counter, counter + appended))
        counter += appended
        n = min(asked, len(expected))
        taken = ids.take(n)
        assert taken.dtype == np.int32 and taken.tolist() == expected[:n]
        expected = expected[n:]
        assert ids.held == len(expected)
    with pytest.raises(PackcliError, match="group ids asked for"):
        ids.take(len(expected) + 1)


# ------------------------------------------------ the token hash of rows with --pad-to-multiple-of


def _random_rows(draw_lengths, seq_len: int, multiple: int, rng):
    """Rows of real segments (lengths from draw_lengths), each padded to the multiple, then
    a padding segment; the pads hold ids no real token has (they must not be hashed)."""
    ids = np.full((len(draw_lengths), seq_len), 999_999, dtype=np.int32)
    cu, unpadded, offsets, num_segments = [], [], [0], []
    for r, lengths in enumerate(draw_lengths):
        at, real, row_cu, row_un = 0, 0, [0], [0]
        for length in lengths:
            padded = -(-length // multiple) * multiple
            if at + padded > seq_len:
                break
            ids[r, at : at + length] = rng.integers(0, 50_000, size=length)
            at, real = at + padded, real + length
            row_cu.append(at)
            row_un.append(real)
        num_segments.append(len(row_cu) - 1)
        if at < seq_len:
            row_cu.append(seq_len)
            row_un.append(real + seq_len - at)
        cu += row_cu
        unpadded += row_un
        offsets.append(len(cu))
    return (
        ids,
        np.array(cu, dtype=np.int32),
        np.array(offsets, dtype=np.int64),
        np.array(num_segments, dtype=np.int32),
        np.array(unpadded, dtype=np.int32),
    )


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 20), max_size=5), max_size=8),
    st.sampled_from([1, 2, 4, 8]),
    st.integers(0, 3),
    st.integers(0, 2**32 - 1),
)
def test_row_token_hashes_match_the_naive_hash_of_real_tokens(row_lengths, multiple, n_groups_extra, seed):
    rng = np.random.default_rng(seed)
    seq_len = 32
    ids, cu, offsets, num_segments, unpadded = _random_rows(row_lengths, seq_len, multiple, rng)
    n_groups = 1 + n_groups_extra
    row_group = rng.integers(0, n_groups, size=len(ids)).astype(np.int32)
    for with_unpadded in (True, False) if multiple == 1 else (True,):
        hashes = np.zeros(n_groups, dtype=np.uint64)
        # a block whose offsets start past other rows' entries, as blocks of a shard may
        junk = 3
        with warnings.catch_warnings():  # the sums wrap silently, compiled or not (verify prints no warning)
            warnings.simplefilter("error")
            row_token_hashes(
                ids,
                np.concatenate([np.full(junk, 7, np.int32), cu]),
                offsets + junk,
                num_segments,
                row_group,
                hashes,
                np.concatenate([np.full(junk, 7, np.int32), unpadded]) if with_unpadded else None,
            )
        rows_tokens = [
            real_tokens_of_row(ids[r], cu[offsets[r] : offsets[r + 1]], unpadded[offsets[r] : offsets[r + 1]], n)
            for r, n in enumerate(num_segments.tolist())
        ]
        assert [int(h) for h in hashes] == group_hashes(rows_tokens, row_group.tolist(), n_groups)
        assert all(999_999 not in tokens for tokens in rows_tokens)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(0, 2)), min_size=1, max_size=30),
    st.sampled_from([2, 4, 8]),
)
def test_the_hash_of_rows_is_the_hash_read_with_a_pad_multiple(sequences, multiple):
    """What the writer records at read time (GroupTable.add_tokens) is what verify
    recomputes from the rows, split pieces and pads after each segment included."""
    import packcli

    tokens = [list(range(100 + i, 100 + i + length)) for i, (length, _) in enumerate(sequences)]
    groups = [["a", "b", None][g] for _, g in sequences]
    packed = packcli.pack_sequences(tokens, 32, pad_id=0, groups=groups, pad_to_multiple_of=multiple)
    rows, table = packed.rows, packed.report["groups"]
    hashes = np.zeros(len(table), dtype=np.uint64)
    row_token_hashes(
        rows.input_ids,
        rows.cu_seqlens,
        rows.cu_offsets,
        rows.num_segments,
        packed.row_group,
        hashes,
        rows.cu_seqlens_unpadded,
    )
    assert [f"{int(h):016x}" for h in hashes] == [entry["token_hash"] for entry in table]


def test_row_token_hashes_refuse_offsets_that_leave_the_row():
    ids = np.ones((1, 8), dtype=np.int32)
    args = (np.array([0, 4, 8], np.int32), np.array([0, 3], np.int64), np.array([3], np.int32))
    with pytest.raises(PackcliError, match="do not hold num_segments"):
        row_token_hashes(ids, *args, np.zeros(1, np.int32), np.zeros(1, np.uint64))
    cu = np.array([0, 4, 8], np.int32)
    with pytest.raises(PackcliError, match="do not lie inside its row"):
        row_token_hashes(
            ids,
            cu,
            np.array([0, 3], np.int64),
            np.array([1], np.int32),
            np.zeros(1, np.int32),
            np.zeros(1, np.uint64),
            np.array([0, 9, 10], np.int32),
        )
    with pytest.raises(PackcliError, match="group has no hash"):
        row_token_hashes(
            ids, cu, np.array([0, 3], np.int64), np.array([1], np.int32), np.ones(1, np.int32), np.zeros(1, np.uint64)
        )


@pytest.mark.parametrize("fmt", ["npy", "parquet"])
def test_group_by_with_a_pad_multiple_passes_verify(grouped, packed, word_tokenizer, fmt):
    """Each real segment is followed by pads inside its row: the group hash covers the real
    tokens only, wherever they lie in the row (the `packed` fixture runs verify)."""
    path, records = grouped
    opts = ("--tokenizer", word_tokenizer, "--seq-len", 64, "--group-by", "source", "--format", fmt)
    out = packed(path, *opts, "--pad-to-multiple-of", 8)
    rows, manifest, groups = assert_no_row_mixes(out)
    inner = (np.diff(rows.cu_seqlens) != np.diff(rows.cu_seqlens_unpadded)).sum()
    assert inner > 0 and (rows.num_segments > 1).sum() > 0  # pads between real segments of a row
    assert manifest["options"]["pad_to_multiple_of"] == 8
    for entry in manifest["groups"]:
        want = [
            int(w[1:]) + 4
            for r in records
            if group_key(r["source"]) == group_key(entry["value"])
            for w in r["text"].split()
        ]
        members = np.flatnonzero(groups == entry["id"])
        got = [t for segment in real_segments(rows.take(members)) for t in segment if t != 1]
        assert Counter(got) == Counter(want)  # the rows hold exactly the group's tokens, EOS aside
    unpadded = packed(path, *opts)
    assert [{k: e[k] for k in ("value", "sequences", "real_tokens", "token_hash")} for e in manifest["groups"]] == [
        {k: e[k] for k in ("value", "sequences", "real_tokens", "token_hash")}
        for e in json.loads((unpadded / "manifest.json").read_text())["groups"]
    ]


@pytest.mark.parametrize("fmt", ["npy", "parquet"])
def test_verify_catches_one_altered_token_in_a_padded_grouped_output(grouped, packed, word_tokenizer, fmt):
    """The last real token of a row with pads between its segments (one a hash of the row's
    first real-length tokens would leave out), changed in input_ids and labels alike so that
    the rows stay sound: the shard's checksum names the shard, and with the checksum made to
    agree, the group's token hash names the group."""
    from test_inspect_verify import tamper_npy, tamper_parquet

    path, _ = grouped
    opts = ("--tokenizer", word_tokenizer, "--seq-len", 64, "--group-by", "source", "--format", fmt)
    out = packed(path, *opts, "--pad-to-multiple-of", 8, "--rows-per-shard", 40)
    rows, manifest = load_rows(out)
    cu, un, offsets = rows.cu_seqlens, rows.cu_seqlens_unpadded, rows.cu_offsets
    row = next(  # in the second shard, pads after the row's first segment
        r for r in range(40, len(rows)) if rows.num_segments[r] > 1 and cu[offsets[r] + 1] != un[offsets[r] + 1]
    )
    last = offsets[row] + int(rows.num_segments[row]) - 1
    position = int(cu[last] + un[last + 1] - un[last] - 1)
    assert position >= un[offsets[row] + rows.num_segments[row]]  # past the row's count of real tokens
    group = int(row_groups(out)[row])
    shard, local = manifest["shards"][1]["path"], row - 40
    value = 5 if rows.input_ids[row, position] != 5 else 6

    def edit(array):
        array[local][position] = value

    tamper = tamper_npy if fmt == "npy" else tamper_parquet
    for column in ("input_ids", "labels"):
        tamper(out, shard, column, edit)  # and the manifest's checksum made to agree
    with pytest.raises(PackcliError, match=rf"^group {group} \(.*\): the tokens of its rows are not the tokens read"):
        verify_dir(out)
    (out / "manifest.json").write_text(json.dumps(manifest))  # the checksum written with the shard
    with pytest.raises(PackcliError, match=rf"^{shard}: .*checksum"):
        verify_dir(out)
