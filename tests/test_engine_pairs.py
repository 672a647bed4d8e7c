"""Preference pairs and weights through `packcli pack`: every pair whole (two adjacent
segments of one row, chosen then rejected) in every layout, truncated only from its
prompt, bad pairs named by file and line, weights carried per segment, and --resume
after kill -9 byte-identical."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import load_rows, random_texts, report_of, word_ids, write_jsonl
from pausing import stop_at

from packcli.engine.ingest import IngestCounts
from packcli.engine.pairs import PairSegmenter, WeightedSegmenter
from packcli.inspect.verify import verify_dir
from packcli.tokenize.sequences import SequenceBatch
from packcli.write.values import SegmentValues

EOS = 1  # the word tokenizer's </s>
PAIR_FIELDS = ("--prompt-field", "prompt", "--chosen-field", "chosen", "--rejected-field", "rejected")


def pair_records(n: int, seed: int = 0, prompt_words: int = 30, answer_words: int = 12) -> list[dict]:
    texts = random_texts(3 * n, seed=seed, max_words=max(prompt_words, answer_words))
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        prompt = " ".join(texts[3 * i].split()[:prompt_words])
        chosen = " ".join(texts[3 * i + 1].split()[:answer_words])
        rejected = " ".join(texts[3 * i + 2].split()[:answer_words]) + " w199"  # never the chosen one
        records.append({"prompt": prompt, "chosen": chosen, "rejected": rejected, "w": float(rng.integers(1, 5)) / 4})
    return records


def pairs_in(rows) -> dict[int, tuple[tuple[list[int], list[int]], tuple[list[int], list[int]]]]:
    """Each pair of the rows by index: ((chosen ids, labels), (rejected ids, labels)), checked
    to be two adjacent segments of one row, chosen first."""
    found = {}
    unpadded = rows.cu_seqlens if rows.cu_seqlens_unpadded is None else rows.cu_seqlens_unpadded
    seg = rows.seg_offsets
    for r in range(len(rows)):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
        real = np.diff(unpadded[rows.cu_offsets[r] : rows.cu_offsets[r + 1]])
        pair = rows.segment_columns["segment_pair"][seg[r] : seg[r + 1]]
        chosen = rows.segment_columns["segment_chosen"][seg[r] : seg[r + 1]]
        assert len(pair) % 2 == 0 and (pair[0::2] == pair[1::2]).all() and (chosen[0::2] == 1).all()
        assert (chosen[1::2] == 0).all()
        sides = [
            (rows.input_ids[r, cu[k] : cu[k] + real[k]].tolist(), rows.labels[r, cu[k] : cu[k] + real[k]].tolist())
            for k in range(int(rows.num_segments[r]))
        ]
        for k in range(0, len(sides), 2):
            assert int(pair[k]) not in found
            found[int(pair[k])] = (sides[k], sides[k + 1])
    return found


def learned(side: tuple[list[int], list[int]]) -> list[int]:
    return [t for t, label in zip(*side) if label != -100]


LAYOUTS = [
    ("parquet", ()),
    ("npy", ("--algorithm", "nf")),
    ("npy", ("--algorithm", "spfhp", "--group-by", "g")),
    ("parquet", ("--pad-to-multiple-of", 8)),
    ("npy", ("--max-sequences-per-row", 4, "--algorithm", "ffd")),
    ("parquet", ("--mode", "concat", "--no-shuffle")),
    ("npy", ("--weight-field", "w")),
]


@pytest.mark.parametrize(("fmt", "options"), LAYOUTS, ids=[f"{f}-{' '.join(map(str, o)) or 'bfd'}" for f, o in LAYOUTS])
@pytest.mark.parametrize("input_format", ["jsonl", "parquet"])
def test_every_pair_is_whole_in_every_layout(tmp_path, packed, word_tokenizer, fmt, options, input_format):
    records = pair_records(120, seed=3)
    for i, record in enumerate(records):
        record["g"] = ["a", "b", "c"][i % 3]
    if input_format == "jsonl":
        path = write_jsonl(tmp_path / "pairs.jsonl", records)
    else:
        path = tmp_path / "pairs.parquet"
        pq.write_table(pa.table({k: [r[k] for r in records] for k in records[0]}), path, row_group_size=50)
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 128, "--format", fmt, *PAIR_FIELDS, *options)
    rows, manifest = load_rows(out)
    pairs = pairs_in(rows)
    assert sorted(pairs) == list(range(len(records))) and manifest["pairs"] == len(records)
    for i, record in enumerate(records):  # pair i is record i: no pair was cut or dropped
        (chosen, rejected) = pairs[i]
        prompt = word_ids(record["prompt"])
        assert chosen[0] == prompt + word_ids(record["chosen"]) + [EOS]
        assert rejected[0] == prompt + word_ids(record["rejected"]) + [EOS]
        assert learned(chosen) == word_ids(record["chosen"]) + [EOS] and learned(rejected)[-2:] == [199 + 4, EOS]
    report = report_of(out)
    assert report["pairs"] == {"pairs": 120, "identical_skipped": 0, "identical_examples": [], "overlong_dropped": 0}
    assert report["no_packing"]["rows"] == 120  # a pair alone in a row
    if "--max-sequences-per-row" in options:
        assert rows.num_segments.max() <= 4
    if "--mode" in options:  # next fit over the pairs in input order
        order = [int(p) for p in rows.segment_columns["segment_pair"][0::2]]
        assert order == sorted(order)
    if "--group-by" in options:
        for r, group in enumerate(manifest["groups"][g]["value"] for g in rows_group(out, fmt)):
            ids = rows.segment_columns["segment_pair"][rows.seg_offsets[r] : rows.seg_offsets[r + 1]]
            assert {records[int(i)]["g"] for i in ids} == {group}
    if "--weight-field" in options:
        weights = rows.segment_columns["segment_weight"]
        assert weights.dtype == np.float32
        assert weights.tolist() == [records[int(p)]["w"] for p in rows.segment_columns["segment_pair"]]


def rows_group(out, fmt) -> list[int]:
    from packcli.write.shard_reader import read_group_column

    manifest = json.loads((out / "manifest.json").read_text())
    return [
        int(g) for shard in manifest["shards"] for block in read_group_column(out / shard["path"], fmt) for g in block
    ]


def test_a_long_pair_loses_the_start_of_its_prompt_on_both_sides_alike(tmp_path, packed, word_tokenizer):
    long_prompt = " ".join(f"w{i % 50 + 10}" for i in range(90))
    records = [
        {
            "prompt": long_prompt,
            "chosen": "w1 w2 w3",
            "rejected": "w4 w5",
        },  # 94 + 93: cut 44 of each, the least that fits
        {"prompt": "w6", "chosen": " ".join(["w7"] * 80), "rejected": " ".join(["w8"] * 70)},  # never fits: dropped
        {"prompt": "w9 w10", "chosen": "w11", "rejected": "w12"},
    ]
    path = write_jsonl(tmp_path / "pairs.jsonl", records)
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 100, *PAIR_FIELDS)
    pairs = pairs_in(load_rows(out)[0])
    assert sorted(pairs) == [0, 1]  # the dropped pair takes no index
    chosen, rejected = pairs[0]
    assert (len(chosen[0]), len(rejected[0])) == (94 - 44, 93 - 44)
    kept_prompt = word_ids(long_prompt)[-(len(chosen[0]) - 4) :]
    assert chosen[0] == kept_prompt + word_ids("w1 w2 w3") + [EOS] and rejected[0] == kept_prompt + word_ids(
        "w4 w5"
    ) + [EOS]
    assert learned(chosen) == word_ids("w1 w2 w3") + [EOS]
    report = report_of(out)
    assert report["pairs"]["overlong_dropped"] == 1 and report["overlong"]["count"] == 2
    assert report["overlong"]["tokens_lost"] == 2 * 44 + (1 + 80 + 1) + (1 + 70 + 1)
    assert report["tokens_read"] == report["real_tokens"] + report["overlong"]["tokens_lost"]
    dropped = report_of(
        packed(path, "--tokenizer", word_tokenizer, "--seq-len", 100, *PAIR_FIELDS, "--overlong", "drop")
    )
    assert dropped["pairs"]["pairs"] == 1 and dropped["overlong"]["count"] == 2


def test_a_pair_longer_than_a_row_under_overlong_error_names_its_line(tmp_path, cli, word_tokenizer):
    records = pair_records(3)
    records[1]["prompt"] = " ".join(["w3"] * 200)
    path = write_jsonl(tmp_path / "pairs.jsonl", records)
    result = cli(
        "pack",
        path,
        "-o",
        tmp_path / "o",
        "--tokenizer",
        word_tokenizer,
        "--seq-len",
        100,
        *PAIR_FIELDS,
        "--overlong",
        "error",
    )
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {path}:2: pair has ") and "a pair is never split" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


BAD = [
    ({"chosen": ""}, "field 'chosen' is empty"),
    (
        {"rejected": [{"role": "assistant", "content": "x"}]},
        "'prompt' is a string, 'chosen' is a string, 'rejected' is a list of messages: give a pair's fields all "
        "as strings or all as message lists",
    ),
    ({"w": -1}, "field 'w' is -1, a negative weight"),
    ({"w": float("nan")}, "field 'w' is nan, not a finite number"),
    ({"w": "heavy"}, "field 'w' is a string, expected a non-negative number (a loss weight)"),
    ({"w": True}, "field 'w' is a boolean, expected a non-negative number (a loss weight)"),
    ({"w": None}, "field 'w' is null"),
]


@pytest.mark.parametrize(("change", "problem"), BAD, ids=[p.split(":")[0][:30] for _, p in BAD])
def test_a_bad_pair_or_weight_is_one_line_naming_file_and_line(tmp_path, cli, word_tokenizer, change, problem):
    records = pair_records(4)
    records[2].update(change)
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in records))
    options = ("--tokenizer", word_tokenizer, "--seq-len", 128, *PAIR_FIELDS, "--weight-field", "w")
    result = cli("pack", path, "-o", tmp_path / "o", *options)
    assert result.exit_code == 1
    assert result.stderr == f"error: {path}:3: {problem}\n"
    skipped = cli("pack", path, "-o", tmp_path / "s", *options, "--on-bad-record", "skip", "--json")
    assert skipped.exit_code == 0, skipped.stderr
    report = json.loads(skipped.stdout)
    assert report["documents"]["skipped"] == 1 and report["pairs"]["pairs"] == 3
    assert report["documents"]["skipped_examples"] == [f"{path}:3: {problem}"]


def test_prompts_that_differ_between_the_sides_name_the_line(tmp_path, cli):
    turn = {"role": "user", "content": "Hi?"}
    records = [
        {"c": [turn, {"role": "assistant", "content": "Hello."}], "r": [turn, {"role": "assistant", "content": "Go."}]},
        {
            "c": [turn, {"role": "assistant", "content": "Hello."}],
            "r": [{"role": "user", "content": "Yo?"}, {"role": "assistant", "content": "Go."}],
        },
    ]
    path = write_jsonl(tmp_path / "pairs.jsonl", records)
    result = cli(
        "pack",
        path,
        "-o",
        tmp_path / "o",
        "--tokenizer",
        "packcli:demo",
        "--seq-len",
        128,
        "--chosen-field",
        "c",
        "--rejected-field",
        "r",
    )
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: {path}:2: the prompt turns of 'c' and 'r' differ (turn 0): a pair's two sides share everything "
        "but their last turn\n"
    )


def test_chosen_equal_to_rejected_is_skipped_counted_and_said(tmp_path, cli, word_tokenizer):
    records = pair_records(5)
    records[1]["rejected"] = records[1]["chosen"]
    records[3]["rejected"] = records[3]["chosen"]
    path = write_jsonl(tmp_path / "pairs.jsonl", records)
    result = cli(
        "pack", path, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 128, *PAIR_FIELDS, "--json"
    )
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["pairs"]["identical_skipped"] == 2 and report["pairs"]["pairs"] == 3
    assert report["pairs"]["identical_examples"] == [f"{path}:2", f"{path}:4"]
    assert result.stderr == f"warning: skipped 2 pair(s) whose chosen and rejected are the same (first: {path}:2)\n"
    verify_dir(tmp_path / "o")


def test_weights_are_carried_defaulted_and_zero_drops_the_record(tmp_path, packed, cli, word_tokenizer):
    texts = random_texts(30, seed=4)
    records = [{"text": t, "w": [0.5, 2.0, 0][i % 3]} for i, t in enumerate(texts)]
    del records[4]["w"]
    path = write_jsonl(tmp_path / "w.jsonl", records)
    options = (
        "--tokenizer",
        word_tokenizer,
        "--seq-len",
        64,
        "--weight-field",
        "w",
        "--algorithm",
        "nf",
        "--no-shuffle",
    )
    missing = cli("pack", path, "-o", tmp_path / "bad", *options)
    assert missing.exit_code == 1 and missing.stderr.startswith(f"error: {path}:5: missing field 'w'")
    out = packed(path, *options, "--default-weight", "1.5", "--format", "npy")
    rows, manifest = load_rows(out)
    kept = [r for r in records if r.get("w", 1.5) != 0]
    assert manifest["columns"]["segment_weight"] == "float32"
    assert rows.segment_columns["segment_weight"].tolist() == [r.get("w", 1.5) for r in kept]
    report = report_of(out)
    assert report["documents"]["zero_weight"] == 10 and report["sequences_packed"] == 20
    assert report["weights"] == {
        "segments": 20,
        "min": 0.5,
        "mean": pytest.approx(sum(r.get("w", 1.5) for r in kept) / 20),
        "max": 2.0,
    }


def test_default_weight_fills_a_parquet_file_without_the_column(tmp_path, packed, word_tokenizer):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": random_texts(10, seed=1)}), path)
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64, "--weight-field", "w", "--default-weight", "2")
    rows, _ = load_rows(out)
    assert set(rows.segment_columns["segment_weight"].tolist()) == {2.0}


def pack_command(corpus, out, tokenizer, *extra) -> list[str]:
    return [
        sys.executable, "-m", "packcli", "pack", str(corpus), "-o", str(out), "--tokenizer", str(tokenizer),
        "--seq-len", "96", "--rows-per-shard", "40", "--format", "npy", *PAIR_FIELDS, "--weight-field", "w", *extra,
    ]  # fmt: skip


def shard_bytes(out) -> dict[str, bytes]:
    files = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.glob("shard-*/*"))}
    files["manifest.json"] = (out / "manifest.json").read_bytes()
    return files


@pytest.mark.parametrize("moment", ["spilled", "shard-done:3", "last-rows-read"])
def test_kill_9_then_resume_of_pairs_is_byte_identical(tmp_path, word_tokenizer, moment):
    corpus = write_jsonl(tmp_path / "pairs.jsonl", pair_records(1500, seed=9))
    whole = tmp_path / "whole"
    subprocess.run(pack_command(corpus, whole, word_tokenizer), check=True, capture_output=True)
    out = tmp_path / "out"
    killed = stop_at(pack_command(corpus, out, word_tokenizer), moment, signal.SIGKILL, tmp_path)
    assert killed.returncode == -signal.SIGKILL and not (out / "manifest.json").exists()
    resumed = subprocess.run(
        pack_command(corpus, out, word_tokenizer, "--resume", "--json"), capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["spill"]["reused"] is True
    verify_dir(out)
    assert shard_bytes(out) == shard_bytes(whole)


def test_in_concat_mode_every_piece_of_a_document_carries_its_weight(tmp_path, packed, word_tokenizer):
    texts = random_texts(40, seed=8, max_words=60)
    records = [{"text": t, "w": 0.25 * (1 + i % 7)} for i, t in enumerate(texts)]
    path = write_jsonl(tmp_path / "w.jsonl", records)
    out = packed(
        path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--mode", "concat", "--no-shuffle", "--weight-field", "w"
    )
    rows, _ = load_rows(out)
    stream = [t for text in texts for t in word_ids(text) + [EOS]]
    weight_of = np.repeat([r["w"] for r in records], [len(word_ids(t)) + 1 for t in texts])
    at = 0
    for r in range(len(rows)):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
        weights = rows.segment_columns["segment_weight"][rows.seg_offsets[r] : rows.seg_offsets[r + 1]]
        for k in range(int(rows.num_segments[r])):
            assert rows.input_ids[r, cu[k] : cu[k + 1]].tolist() == stream[at : at + cu[k + 1] - cu[k]]
            assert weights[k] == weight_of[at]  # the document the piece starts in
            at += int(cu[k + 1] - cu[k])


def _batch(lengths: list[int], weights: list[float], pairs: bool) -> SequenceBatch:
    """Sequences of `lengths` whose every token is learned (ids from 2), with weights."""
    tokens = np.arange(2, 2 + sum(lengths), dtype=np.int32)
    records = np.repeat(np.arange(len(lengths) // 2), 2) if pairs else None
    return SequenceBatch(
        tokens, np.array(lengths, dtype=np.int64), tokens.copy(), records=records, weights=np.array(weights)
    )


@pytest.mark.parametrize("pairs", [True, False])
def test_owners_number_the_input_whatever_records_of_weight_0_were_dropped(pairs):
    """A segment's owner is its sequence's (or pair's) index in the input, counting the
    dropped records of weight 0 too: the what-if's group ids and pack_sequences'
    placement are indexed by it."""
    kind = PairSegmenter if pairs else WeightedSegmenter
    segmenter = kind(64, "bin", "drop", None, IngestCounts(), track_owners=True)
    segmenter.values = SegmentValues(pairs, True)
    first = [4, 5, 4, 6, 3, 3] if pairs else [4, 5, 3]  # three units, the last of weight 0
    second = [5, 4, 3, 4] if pairs else [5, 3]  # two units, the first of weight 0
    segmenter(_batch(first, [1, 1, 2, 2, 0, 0] if pairs else [1, 2, 0], pairs), str)
    segmenter(_batch(second, [0, 0, 3, 3] if pairs else [0, 3], pairs), str)
    assert segmenter.owners is not None and segmenter.owners.tolist() == [0, 1, 4]
    assert np.concatenate(segmenter.values.weight).tolist() == [1, 2, 3]
