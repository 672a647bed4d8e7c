"""cli/pack_command.py: pack's report printed as a table titled with the output, one per
output of --holdout (train, then validation), or as one JSON report."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import random_texts, report_of, write_jsonl

from packcli.inspect.verify import verify_dir


def test_holdout_prints_a_table_per_output_and_json_one_report(cli, tmp_path, word_tokenizer, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short output path: the table's title is not wrapped
    corpus = write_jsonl(tmp_path / "d.jsonl", [{"text": text} for text in random_texts(80, seed=2, max_words=20)])
    args = ("pack", "--source", f"web={corpus}", "--holdout", "0.25", "--tokenizer", word_tokenizer, "--seq-len", 32)
    out = Path("out")
    shown = cli(*args, "-o", f"{out}/")
    assert shown.exit_code == 0 and shown.stderr == "", shown.stderr
    for side in ("train", "validation"):
        verify_dir(out / side)
    titles = [line.strip() for line in shown.stdout.splitlines() if line.strip().startswith("packed into")]
    assert titles == ["packed into out/train", "packed into out/validation"]
    again = cli(*args, "-o", out, "--resume", "--json")  # finished: the same reports again
    assert again.exit_code == 0, again.stderr
    report = json.loads(again.stdout)
    assert sorted(report["splits"]) == ["train", "validation"]
    assert report["splits"]["train"]["rows"] == report_of(out / "train")["rows"]


def test_a_plain_run_prints_one_table_titled_with_the_output(cli, tmp_path, word_tokenizer, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short output path: the table's title is not wrapped
    corpus = write_jsonl(tmp_path / "d.jsonl", [{"text": text} for text in random_texts(30, seed=4)])
    out = Path("plain")
    result = cli("pack", corpus, "-o", out, "--tokenizer", word_tokenizer, "--seq-len", 64)
    assert result.exit_code == 0 and result.stderr == "", result.stderr
    verify_dir(out)
    lines = result.stdout.splitlines()
    assert lines[0].strip() == f"packed into {out}" and "efficiency" in result.stdout
    assert json.loads(cli("stats", out, "--json").stdout)["rows"] == report_of(out)["rows"]
