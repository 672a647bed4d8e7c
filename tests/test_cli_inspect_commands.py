"""cli/inspect_commands.py: stats, show and verify tell packed outputs from raw input (a
--holdout's DIR standing for its two outputs), refuse a mix of the two and raw-input
options given with packed outputs, and print what the inspect package measured."""

from __future__ import annotations

import re

import pytest
from helpers import random_texts, write_jsonl

from packcli.cli.inspect_commands import is_raw_input, with_splits
from packcli.core.errors import PackcliError


@pytest.fixture
def corpus(tmp_path):
    return write_jsonl(tmp_path / "d.jsonl", [{"text": text} for text in random_texts(60, seed=5, max_words=20)])


@pytest.fixture
def holdout_dir(packed, corpus, word_tokenizer):
    return packed([], "--source", f"web={corpus}", "--holdout", "0.3", "--tokenizer", word_tokenizer, "--seq-len", 32)


def test_a_holdout_dir_stands_for_its_outputs_and_other_paths_stay(packed, corpus, holdout_dir, word_tokenizer):
    plain = packed(corpus, "--tokenizer", word_tokenizer, "--seq-len", 32)
    paths = [str(holdout_dir), str(plain), str(corpus), "s3://bucket/out"]
    assert with_splits(paths) == [str(holdout_dir / "train"), str(holdout_dir / "validation"), *paths[1:]]
    assert with_splits([str(holdout_dir / "train")]) == [str(holdout_dir / "train")]


def test_raw_input_is_what_the_raw_input_options_say(packed, corpus, word_tokenizer):
    out = str(packed(corpus, "--tokenizer", word_tokenizer, "--seq-len", 32))
    assert is_raw_input([str(corpus)], ["tokenizer", "seq_len"]) is True
    assert is_raw_input([str(corpus)], []) is False  # fails later, on the path, with a hint
    assert is_raw_input([out], []) is False
    with pytest.raises(PackcliError, match=f"{re.escape(str(corpus))} is not a packed output but .* is: show takes"):
        is_raw_input([out, str(corpus)], [], command="show")
    with pytest.raises(PackcliError, match="^--seq-len, --text-field: for raw input only") as refused:
        is_raw_input([out], ["seq_len", "text_field"])
    assert refused.value.usage


def test_verify_prints_human_sizes_and_speeds(cli, packed, tmp_path, word_tokenizer, monkeypatch):
    from packcli.cli.render import human_bytes
    from packcli.inspect import verify

    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "w1 w2 w3"}] * 5)
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 8)
    result = cli("verify", out)
    assert result.exit_code == 0, result.stderr
    size = sum(f.stat().st_size for f in out.rglob("shard-*") if f.is_file())
    checked = re.search(r"\((\S+ \S+) checked (at (\S+) (\S+)/s|in under 1 ms)\)$", result.stdout.strip())
    assert checked and checked.group(1) == human_bytes(size) and "0.0 " not in result.stdout
    if checked.group(3):
        assert float(checked.group(3)) > 0 and checked.group(4) in ("B", "kB", "MB", "GB")
    summary = {"shards": 1, "rows": 3, "sequences": 5, "real_tokens": 20}
    for size, seconds, expected in (
        (12_345, 0.0, "12.3 kB checked in under 1 ms"),
        (3_000_000_000, 0.5, "3.00 GB checked at 6.00 GB/s"),
        (999_600, 2.0, "1.00 MB checked at 500 kB/s"),
    ):
        monkeypatch.setattr(verify, "verify_dir", lambda _, s=size, t=seconds: {**summary, "bytes": s, "seconds": t})
        line = cli("verify", out).stdout.strip()
        assert line.endswith(f"({expected})"), line


def test_stats_and_verify_on_something_that_is_no_output(cli, tmp_path):
    for args, message in (
        (("verify", tmp_path), "no manifest.json"),
        (("stats", tmp_path / "missing"), "no such directory"),
    ):
        result = cli(*args)
        assert result.exit_code == 1, result.stdout + result.stderr
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ") and message in result.stderr
