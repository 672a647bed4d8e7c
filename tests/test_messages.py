"""Messages that name what they are about and never mislead: a Hub name refused at once
when the Hub cannot be reached, chat roles judged like ShareGPT's, skipped and unlearned
records named in the summary, tokenizer files named with what is wrong with them, verify
naming a missing file, and no advice that the next command would refuse."""

from __future__ import annotations

import json
import socket

import pytest
from helpers import write_jsonl

from packcli.inspect.verify import verify_dir


def one_line(result, code=1) -> str:
    assert result.exit_code == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture
def text(tmp_path):
    return write_jsonl(tmp_path / "d.jsonl", [{"text": "w1 w2"}, {"text": "w3"}])


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on: connecting to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("name", ["qwen_tok", "someone/some-model"])
def test_a_hub_name_with_the_hub_unreachable_is_refused_at_once(cli, text, tmp_path, monkeypatch, closed_port, name):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.chdir(tmp_path)
    line = one_line(cli("pack", text, "-o", tmp_path / "o", "--tokenizer", name, "--seq-len", 8))
    assert f"tokenizer {name!r} is not a local path" in line
    assert f"127.0.0.1:{closed_port}) is unreachable" in line and f"pass ./{name}" in line
    assert not (tmp_path / "o" / "manifest.json").exists()


def test_a_hub_name_behind_an_unreachable_proxy(cli, text, tmp_path, monkeypatch, closed_port):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{closed_port}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    line = one_line(cli("pack", text, "-o", tmp_path / "o", "--tokenizer", "qwen_tok", "--seq-len", 8))
    assert "not a local path" in line and "unreachable" in line


def test_a_hub_name_offline_and_not_cached(cli, text, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    line = one_line(cli("pack", text, "-o", tmp_path / "o", "--tokenizer", "qwen_tok", "--seq-len", 8))
    assert "not a local path" in line and "HF_HUB_OFFLINE is set" in line and "./qwen_tok" in line


def chat(role: str) -> dict:
    return {"messages": [{"role": "user", "content": "hello"}, {"role": role, "content": "hi there"}]}


@pytest.mark.parametrize("role", ["narrator", "asistant"])
def test_an_unknown_chat_role_is_a_bad_record(cli, tmp_path, role):
    path = write_jsonl(tmp_path / "chat.jsonl", [chat("assistant"), chat(role), chat("assistant")])
    args = ["pack", path, "--messages-field", "messages", "--tokenizer", "packcli:demo", "--seq-len", 64]
    line = one_line(cli(*args, "-o", tmp_path / "o"))
    assert "chat.jsonl:2" in line and repr(role) in line and "system, user, assistant, tool" in line
    skipped = cli(*args, "-o", tmp_path / "s", "--on-bad-record", "skip")
    assert skipped.exit_code == 0, skipped.stderr
    assert "documents skipped" in skipped.stdout and "chat.jsonl:2" in skipped.stdout
    verify_dir(tmp_path / "s")
    report = json.loads((tmp_path / "s" / "report.json").read_text())
    assert report["documents"]["skipped_by_reason"] == {"unknown role": 1}


def test_a_sharegpt_speaker_and_a_role_are_judged_alike(cli, tmp_path):
    records = [
        {"messages": [{"from": "human", "value": "hello"}, {"from": "narrator", "value": "hi"}]},
        {"messages": [{"role": "user", "content": "hello"}, {"role": "narrator", "content": "hi"}]},
    ]
    path = write_jsonl(tmp_path / "chat.jsonl", records)
    result = cli(
        *("pack", path, "--messages-field", "messages", "--tokenizer", "packcli:demo", "--seq-len", 64),
        *("-o", tmp_path / "o", "--on-bad-record", "skip", "--json"),
    )
    assert "no documents to pack in" in one_line(result) and "chat.jsonl" in result.stderr


def test_a_conversation_with_nothing_to_learn_is_named_in_the_summary(cli, tmp_path):
    records = [
        chat("assistant"),
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]},
    ]
    path = write_jsonl(tmp_path / "chat.jsonl", records)
    result = cli(
        *("pack", path, "--messages-field", "messages", "--tokenizer", "packcli:demo", "--seq-len", 64),
        *("-o", tmp_path / "o"),
    )
    assert result.exit_code == 0, result.stderr
    assert "unlearned (dropped)" in result.stdout and "chat.jsonl:2" in result.stdout
    verify_dir(tmp_path / "o")
    unlearned = json.loads((tmp_path / "o" / "report.json").read_text())["unlearned"]
    assert unlearned["examples"] == [f"{path}:2"]


def test_the_summary_names_the_first_skipped_records(cli, tmp_path, word_tokenizer):
    lines = [json.dumps({"text": "w1"})] + ['{"text": 5}'] * 4 + ["not json"]
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = cli(
        "pack", path, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 8, "--on-bad-record", "skip"
    )
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "documents skipped" in out
    for line in (2, 3, 4):
        assert f"d.jsonl:{line}" in out
    assert "expected a string" in out and "2 more" in out
    verify_dir(tmp_path / "o")


@pytest.mark.parametrize("content", [b"", b"\n\n"])
def test_an_empty_input_file_is_named(cli, tmp_path, word_tokenizer, content):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)
    line = one_line(cli("pack", path, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 8))
    assert "no documents to pack in" in line and str(path) in line
    stats = one_line(cli("stats", path, "--tokenizer", word_tokenizer, "--seq-len", 8))
    assert str(path) in stats


def test_tokenizer_files_are_named_with_what_is_wrong(cli, text, tmp_path, word_tokenizer):
    def error(tokenizer) -> str:
        return one_line(cli("pack", text, "-o", tmp_path / "o", "--tokenizer", tokenizer, "--seq-len", 8))

    empty_json = tmp_path / "t1"
    empty_json.mkdir()
    (empty_json / "tokenizer.json").write_text("{}")
    line = error(empty_json)
    assert f"{empty_json / 'tokenizer.json'} has no 'model'" in line and "'added_tokens'" not in line
    assert "has no 'model'" in error(empty_json / "tokenizer.json")
    nothing = tmp_path / "t2"
    nothing.mkdir()
    (nothing / "config.json").write_text("{}")
    line = error(nothing)
    assert f"tokenizer directory {nothing} has no tokenizer.json" in line and "config.json" in line
    config = word_tokenizer / "tokenizer_config.json"
    line = error(config)
    assert f"{config} is a tokenizer_config.json, not a tokenizer" in line
    broken = tmp_path / "t3"
    broken.mkdir()
    (broken / "tokenizer.json").write_text('{"model": ')
    assert f"tokenizer file {broken / 'tokenizer.json'} is not valid JSON" in error(broken)


def test_verify_names_a_missing_npy_file(cli, packed, text, word_tokenizer):
    out = packed(text, "--tokenizer", word_tokenizer, "--seq-len", 8, "--format", "npy")
    (out / "shard-00000" / "labels.npy").unlink()
    line = one_line(cli("verify", out))
    assert "shard-00000: labels.npy missing" in line


def test_foreign_files_are_refused_without_advice_that_fails(cli, text, tmp_path, word_tokenizer):
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = ("pack", text, "-o", out, "--tokenizer", word_tokenizer, "--seq-len", 8)
    first = one_line(cli(*args))
    assert "notes.txt" in first and "not even with --overwrite" in first and "pass --overwrite" not in first
    assert "notes.txt" in one_line(cli(*args, "--overwrite"))
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("extra, count", [((), 7), (("--pad-to-multiple-of", "4"), 8), (("--group-by", "g"), 8)])
def test_an_npy_shard_holds_the_files_a_resume_waits_for(packed, tmp_path, word_tokenizer, extra, count):
    """What a remote --resume checks before it keeps an uploaded npy shard, and what commands.md says."""
    from packcli.write.columns import npy_shard_files

    data = write_jsonl(tmp_path / "g.jsonl", [{"text": "w1 w2 w3", "g": i % 2} for i in range(6)])
    out = packed(data, "--tokenizer", word_tokenizer, "--seq-len", 8, "--format", "npy", *extra)
    files = npy_shard_files("--pad-to-multiple-of" in extra, "--group-by" in extra)
    assert len(files) == count
    assert sorted(p.name for p in (out / "shard-00000").iterdir()) == sorted(files)
