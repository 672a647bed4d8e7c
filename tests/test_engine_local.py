"""`packcli pack` end to end: what goes in comes out, laid out by the conventions."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import numpy as np
import pyarrow.parquet as pq
import pytest
import zstandard
from helpers import load_rows, random_texts, real_segments, word_ids, write_jsonl

from packcli.plan.kernels.pack import pack_lengths

EOS = 1  # `</s>` in the word tokenizer


def expected_pieces(texts, seq_len, eos=True, bos=None):
    """Reference for bin mode: every document's ids (+EOS) cut into pieces of seq_len."""
    pieces = []
    for text in texts:
        ids = ([bos] if bos is not None else []) + word_ids(text) + ([EOS] if eos else [])
        pieces += [ids[i : i + seq_len] for i in range(0, len(ids), seq_len)]
    return pieces


def stream(texts, eos=True):
    return [t for text in texts for t in word_ids(text) + ([EOS] if eos else [])]


@pytest.fixture
def corpus(tmp_path):
    texts = random_texts(300, seed=1, max_words=80)
    return texts, write_jsonl(tmp_path / "in" / "data.jsonl", [{"text": t, "id": i} for i, t in enumerate(texts)])


@pytest.mark.parametrize("algorithm", ["bfd", "nf", "ffd", "ff", "spfhp", "lpfhp"])
def test_bin_mode_loses_and_duplicates_nothing(corpus, packed, word_tokenizer, algorithm):
    texts, path = corpus
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64, "--algorithm", algorithm)
    rows, manifest = load_rows(out)
    assert Counter(map(tuple, real_segments(rows))) == Counter(map(tuple, expected_pieces(texts, 64)))
    assert manifest["algorithm"] == algorithm and manifest["mode"] == "bin"


def test_nf_keeps_document_order(corpus, packed, word_tokenizer):
    texts, path = corpus
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64, "--algorithm", "nf", "--no-shuffle")
    rows, _ = load_rows(out)
    assert real_segments(rows) == expected_pieces(texts, 64)


def test_bfd_beats_nf_and_reports_efficiency(corpus, packed, word_tokenizer, cli):
    _, path = corpus
    reports = {}
    for algorithm in ("nf", "bfd"):
        out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 128, "--algorithm", algorithm)
        reports[algorithm] = json.loads((out / "report.json").read_text())
    assert reports["bfd"]["rows"] <= reports["nf"]["rows"]
    bfd = reports["bfd"]
    assert bfd["rows"] >= bfd["lower_bound_rows"] == -(-bfd["real_tokens"] // 128)
    assert bfd["efficiency"] == pytest.approx(bfd["real_tokens"] / (bfd["rows"] * 128))
    assert bfd["efficiency"] > bfd["no_packing"]["efficiency"]


@pytest.mark.parametrize("remainder", ["pad", "drop"])
def test_concat_mode_token_stream_equals_input(corpus, packed, word_tokenizer, remainder):
    texts, path = corpus
    out = packed(
        path,
        "--tokenizer",
        word_tokenizer,
        "--seq-len",
        100,
        "--mode",
        "concat",
        "--remainder",
        remainder,
        "--no-shuffle",
    )
    rows, manifest = load_rows(out)
    got = [t for seg in real_segments(rows) for t in seg]
    want = stream(texts)
    report = json.loads((out / "report.json").read_text())
    tail = len(want) % 100
    assert report["remainder"] == {"policy": remainder, "tokens": tail}
    if remainder == "drop":
        want = want[: len(want) - tail]
        assert (rows.num_segments > 0).all() and rows.real_lengths().min() == 100
    assert got == want
    assert manifest["algorithm"] is None


def test_concat_mode_segments_follow_documents(tmp_path, packed, word_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "w1 w2 w3"}, {"text": "w4 w5"}, {"text": "w6"}])
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 4, "--mode", "concat", "--no-shuffle")
    rows, _ = load_rows(out)
    # stream: 5 6 7 EOS | 8 9 EOS 10 | EOS + padding
    assert rows.input_ids.tolist() == [[5, 6, 7, 1], [8, 9, 1, 10], [1, 1, 1, 1]]
    assert rows.labels.tolist() == [[-100, 6, 7, 1], [-100, 9, 1, -100], [-100, -100, -100, -100]]
    assert rows.position_ids.tolist() == [[0, 1, 2, 3], [0, 1, 2, 0], [0, 0, 1, 2]]
    assert rows.cu_seqlens.tolist() == [0, 4, 0, 3, 4, 0, 1, 4]
    assert rows.num_segments.tolist() == [1, 2, 1]


def test_bin_row_layout_by_hand(tmp_path, packed, word_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "w1 w2 w3"}, {"text": "w4"}, {"text": "w5 w6 w7 w8 w9"}])
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 6, "--algorithm", "nf", "--no-shuffle")
    rows, _ = load_rows(out)
    assert rows.input_ids.tolist() == [[5, 6, 7, 1, 8, 1], [9, 10, 11, 12, 13, 1]]
    assert rows.labels.tolist() == [[-100, 6, 7, 1, -100, 1], [-100, 10, 11, 12, 13, 1]]
    assert rows.position_ids.tolist() == [[0, 1, 2, 3, 0, 1], [0, 1, 2, 3, 4, 5]]
    assert rows.cu_seqlens.tolist() == [0, 4, 6, 0, 6]


def test_overlong_policies(tmp_path, packed, word_tokenizer, cli):
    texts = ["w1 w2 w3 w4 w5 w6 w7 w8 w9 w10", "w11 w12"]  # 11 and 3 tokens with EOS
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in texts])
    options = ("--tokenizer", word_tokenizer, "--seq-len", 4, "--algorithm", "nf", "--no-shuffle")

    out = packed(path, *options, "--overlong", "split")
    rows, _ = load_rows(out)
    assert real_segments(rows) == expected_pieces(texts, 4)
    report = json.loads((out / "report.json").read_text())
    assert report["overlong"] == {"policy": "split", "count": 1, "tokens_lost": 0, "dropped_without_labels": 0}

    out = packed(path, *options, "--overlong", "truncate")
    rows, _ = load_rows(out)
    assert real_segments(rows) == [[5, 6, 7, 8], [15, 16, EOS]]
    assert json.loads((out / "report.json").read_text())["overlong"]["tokens_lost"] == 7

    out = packed(path, *options, "--overlong", "drop")
    rows, _ = load_rows(out)
    assert real_segments(rows) == [[15, 16, EOS]]
    assert json.loads((out / "report.json").read_text())["overlong"]["tokens_lost"] == 11

    result = cli("pack", path, "-o", tmp_path / "err", *options, "--overlong", "error")
    assert result.exit_code == 1
    assert "d.jsonl:1: sequence has 11 tokens, more than --seq-len 4" in result.stderr
    assert not (tmp_path / "err" / "manifest.json").exists()


def test_bos_eos_and_pad_options(tmp_path, packed, bos_tokenizer, word_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "w1 w2"}, {"text": "w3"}])
    base = ("--seq-len", 8, "--algorithm", "nf")
    # The word tokenizer adds no BOS by itself, so by default there is none.
    rows, manifest = load_rows(packed(path, "--tokenizer", bos_tokenizer, *base))
    assert real_segments(rows) == [[5, 6, EOS], [7, EOS]] and manifest["options"]["bos"] is False
    rows, _ = load_rows(packed(path, "--tokenizer", bos_tokenizer, *base, "--bos"))
    assert real_segments(rows) == [[2, 5, 6, EOS], [2, 7, EOS]]
    rows, _ = load_rows(packed(path, "--tokenizer", word_tokenizer, *base, "--no-eos", "--pad-id", 3))
    assert real_segments(rows) == [[5, 6], [7]]
    assert rows.input_ids[0, 3:].tolist() == [3] * 5
    rows, manifest = load_rows(packed(path, "--tokenizer", word_tokenizer, *base, "--eos-token", "<s>"))
    assert real_segments(rows) == [[5, 6, 2], [7, 2]]
    # pad falls back to the EOS in use, the one --eos-token named
    assert manifest["tokenizer"]["eos_id"] == 2 and manifest["tokenizer"]["pad_id"] == 2


def test_bos_follows_a_tokenizer_that_adds_it(tmp_path, packed):
    """Llama-style tokenizers put BOS first themselves; packcli does the same by default."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "</s>": 1, "<s>": 2, "a": 3, "b": 4}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 2)])
    directory = tmp_path / "llamaish"
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="[UNK]").save_pretrained(
        directory
    )
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "a b"}])
    rows, manifest = load_rows(packed(path, "--tokenizer", directory, "--seq-len", 8))
    assert real_segments(rows) == [[2, 3, 4, 1]] and manifest["options"]["bos"] is True


def test_npy_matches_parquet_and_uses_uint16(corpus, packed, word_tokenizer):
    _, path = corpus
    options = ("--tokenizer", word_tokenizer, "--seq-len", 64, "--rows-per-shard", 7)
    parquet_rows, _ = load_rows(packed(path, *options))
    out = packed(path, *options, "--format", "npy")
    npy_rows, manifest = load_rows(out)
    for name in ("input_ids", "labels", "position_ids", "cu_seqlens", "cu_offsets", "num_segments"):
        np.testing.assert_array_equal(getattr(parquet_rows, name), getattr(npy_rows, name))
    first = out / "shard-00000"
    ids = np.load(first / "input_ids.npy", mmap_mode="r")
    assert ids.dtype == np.uint16 and ids.shape == (7, 64)
    assert np.load(first / "labels.npy", mmap_mode="r").dtype == np.int32
    assert np.load(first / "cu_seqlens_offsets.npy", mmap_mode="r").dtype == np.int64
    assert np.load(first / "cu_seqlens_offsets.npy").shape == (8,)
    assert len(manifest["shards"]) == -(-len(npy_rows) // 7)
    assert all(s["rows"] == 7 for s in manifest["shards"][:-1])


def test_big_vocabulary_needs_uint32(tmp_path, packed, big_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "w69000 w5 w65600"}, {"text": "w1"}])
    out = packed(path, "--tokenizer", big_tokenizer, "--seq-len", 16, "--format", "npy")
    ids = np.load(out / "shard-00000" / "input_ids.npy", mmap_mode="r")
    assert ids.dtype == np.uint32
    assert 69004 in ids and 65604 in ids
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer"]["vocab_size"] == 70_000 and manifest["tokenizer"]["pad_id"] == 3


def test_parquet_round_trip_with_pyarrow_and_datasets(corpus, packed, word_tokenizer):
    datasets = pytest.importorskip("datasets")
    _, path = corpus
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64)
    rows, _ = load_rows(out)
    table = pq.read_table(out / "shard-00000.parquet")
    assert [str(t) for t in table.schema.types[:4]] == ["list<element: int32>"] * 4
    assert table.column("input_ids").to_pylist() == rows.input_ids.tolist()
    dataset = datasets.load_dataset("parquet", data_files=str(out / "shard-*.parquet"), split="train")
    assert dataset["labels"] == rows.labels.tolist()
    assert dataset["cu_seqlens"][0] == rows.cu_seqlens[: rows.cu_offsets[1]].tolist()


def test_same_options_give_identical_bytes(corpus, packed, word_tokenizer):
    _, path = corpus
    options = ("--tokenizer", word_tokenizer, "--seq-len", 64, "--shuffle", "--seed", 7, "--buffer-size", 50)
    first = packed(path, *options, "--workers", 1)
    second = packed(path, *options, "--workers", 2)
    for name in ("shard-00000.parquet", "manifest.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    other_seed = packed(path, *options[:-4], "--seed", 8, "--buffer-size", 50)
    assert (first / "shard-00000.parquet").read_bytes() != (other_seed / "shard-00000.parquet").read_bytes()


def test_shuffle_reorders_rows_only(corpus, packed, word_tokenizer):
    _, path = corpus
    options = ("--tokenizer", word_tokenizer, "--seq-len", 64)
    plain, _ = load_rows(packed(path, *options, "--no-shuffle"))
    shuffled, _ = load_rows(packed(path, *options))  # shuffled by default
    assert plain.input_ids.tolist() != shuffled.input_ids.tolist()
    assert sorted(plain.input_ids.tolist()) == sorted(shuffled.input_ids.tolist())


def test_concat_shuffle_keeps_every_row(corpus, packed, word_tokenizer):
    _, path = corpus
    options = ("--tokenizer", word_tokenizer, "--seq-len", 50, "--mode", "concat")
    plain, _ = load_rows(packed(path, *options, "--no-shuffle"))
    shuffled, _ = load_rows(packed(path, *options, "--shuffle", "--buffer-size", 16))
    assert plain.input_ids.tolist() != shuffled.input_ids.tolist()
    assert sorted(plain.input_ids.tolist()) == sorted(shuffled.input_ids.tolist())


def test_buffer_windows_are_reported(corpus, packed, word_tokenizer):
    texts, path = corpus
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64, "--buffer-size", 40)
    rows, _ = load_rows(out)
    assert Counter(map(tuple, real_segments(rows))) == Counter(map(tuple, expected_pieces(texts, 64)))
    buffer = json.loads((out / "report.json").read_text())["buffer"]
    assert buffer["size"] == 40 and buffer["windows"] == -(-len(expected_pieces(texts, 64)) // 40)
    # bfd alone over all the lengths (the report's figure has no repair pass)
    one_plan = pack_lengths([len(p) for p in expected_pieces(texts, 64)], 64, "bfd").n_rows
    assert buffer["bfd_rows_in_one_window"] == one_plan
    assert buffer["extra_rows"] == len(rows) - one_plan


def test_every_input_kind_in_order(tmp_path, packed, word_tokenizer, cli):
    texts = random_texts(40, seed=3)
    parts = [texts[0:10], texts[10:20], texts[20:30], texts[30:40]]
    tmp_path = tmp_path / "src"
    write_jsonl(tmp_path / "plain.jsonl", [{"text": t} for t in parts[0]])
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in parts[1])
    with open(tmp_path / "c.jsonl.zst", "wb") as f:
        f.write(zstandard.ZstdCompressor().compress("".join(json.dumps({"text": t}) + "\n" for t in parts[2]).encode()))
    import pyarrow as pa

    pq.write_table(pa.table({"text": parts[3]}), tmp_path / "d.parquet")
    options = ("--tokenizer", word_tokenizer, "--seq-len", 2048, "--mode", "concat")
    inputs = [tmp_path / "plain.jsonl", tmp_path / "b.jsonl.gz", tmp_path / "c.jsonl.zst", tmp_path / "d.parquet"]
    rows, _ = load_rows(packed(inputs, *options))
    assert [t for s in real_segments(rows) for t in s] == stream(texts)
    # The same files as a glob (sorted: b, c, d, plain) and as a directory.
    in_glob_order = parts[1] + parts[2] + parts[3] + parts[0]
    rows, _ = load_rows(packed(str(tmp_path / "*.*"), *options))
    assert [t for s in real_segments(rows) for t in s] == stream(in_glob_order)
    rows, _ = load_rows(packed(tmp_path, *options))
    assert [t for s in real_segments(rows) for t in s] == stream(in_glob_order)


def test_stdin(tmp_path, cli, word_tokenizer):
    data = "".join(json.dumps({"text": t}) + "\n" for t in ["w1 w2", "w3"])
    result = cli("pack", "-", "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 8, "--json", input=data)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["documents"]["read"] == 2 and report["real_tokens"] == 5


def test_json_report_has_the_spec_fields(corpus, cli, tmp_path, word_tokenizer):
    _, path = corpus
    result = cli("pack", path, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 64, "--json")
    report = json.loads(result.stdout)
    for key in (
        "documents",
        "sequences_packed",
        "overlong",
        "rows",
        "seq_len",
        "real_tokens",
        "padding_tokens",
        "efficiency",
        "lower_bound_rows",
        "sequences_per_row",
        "fill_per_row",
        "label_tokens",
        "no_packing",
        "timings",
        "tokens_per_second",
    ):
        assert key in report, key
    assert set(report["timings"]) == {"read", "tokenize", "spill", "plan", "write", "total"}
    on_disk = json.loads((tmp_path / "o" / "report.json").read_text())
    assert on_disk["rows"] == report["rows"] and on_disk["real_tokens"] == report["real_tokens"]
    assert report["padding_tokens"] == report["rows"] * 64 - report["real_tokens"]
    assert report["label_tokens"] == report["real_tokens"] - report["sequences_packed"]


def test_bundled_demo_runs(packed, cli, tmp_path):
    from packcli.tokenize.tokenizer import BUNDLED_DIR

    corpus = BUNDLED_DIR.parent / "demo.jsonl"
    out = packed(corpus, "--tokenizer", "packcli:demo", "--seq-len", 512)
    result = cli("stats", out)
    assert result.exit_code == 0 and "efficiency" in result.stdout


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_shards_written_at_once_are_those_written_one_by_one(corpus, packed, word_tokenizer, monkeypatch, fmt):
    """A whole plan's shards are written two at a time; the bytes, checksums and report are
    those of the streaming path, which writes one shard at a time (SHARD_THREADS 1)."""
    from packcli.engine import local as pipeline

    _, path = corpus
    options = ("--tokenizer", word_tokenizer, "--seq-len", 64, "--rows-per-shard", 5, "--format", fmt)
    together = packed(path, *options)
    monkeypatch.setattr(pipeline, "SHARD_THREADS", 1)
    alone = packed(path, *options)
    manifests = [json.loads((out / "manifest.json").read_text()) for out in (together, alone)]
    assert len(manifests[0]["shards"]) > 4
    assert manifests[0]["shards"] == manifests[1]["shards"]
    reports = [json.loads((out / "report.json").read_text()) for out in (together, alone)]
    for report in reports:
        report.pop("timings"), report.pop("tokens_per_second", None), report.pop("total_seconds", None)
    assert reports[0] == reports[1]
    for shard in manifests[0]["shards"]:
        first, second = together / shard["path"], alone / shard["path"]
        files = sorted(p.name for p in first.iterdir()) if first.is_dir() else [""]
        for name in files:
            assert (first / name if name else first).read_bytes() == (second / name if name else second).read_bytes()
