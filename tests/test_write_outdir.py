"""The output directory: one run at a time, stale locks taken over, nothing damaged."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import random_texts, write_jsonl

from packcli.core.errors import PackcliError
from packcli.write.outdir import LOCK_FILE, OutputLock

HOLD_LOCK = (
    "import sys; from pathlib import Path; from packcli.write.outdir import OutputLock; "
    "OutputLock(Path(sys.argv[1])).acquire(); print('locked', flush=True); sys.stdin.read()"
)  # holds the lock until the test kills it (stdin never ends): however long the test takes


def test_a_second_run_into_a_directory_in_use_fails_at_once(tmp_path, cli, packed, word_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in random_texts(50)])
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        for extra in ((), ("--overwrite",), ("--resume",)):
            result = cli("pack", path, "-o", out, "--tokenizer", word_tokenizer, "--seq-len", 32, *extra)
            assert result.exit_code == 1
            lines = result.stderr.strip().splitlines()
            assert (
                len(lines) == 1 and "is in use by another packcli run" in lines[0] and f"pid {holder.pid}" in lines[0]
            )
        after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != LOCK_FILE}
        assert after == before  # the first run's output is untouched, even with --overwrite
    finally:
        holder.kill()
        holder.wait()
    # The holder died without cleaning up: its lock file stays, and is taken over.
    assert (out / LOCK_FILE).exists()
    again = cli("pack", path, "-o", out, "--tokenizer", word_tokenizer, "--seq-len", 32, "--overwrite")
    assert again.exit_code == 0, again.stderr
    assert not (out / LOCK_FILE).exists()
    assert json.loads((out / "manifest.json").read_text())["totals"]["rows"] > 0


def test_lock_in_process(tmp_path):
    first = OutputLock(tmp_path).acquire()
    with pytest.raises(PackcliError, match="in use"):
        OutputLock(tmp_path).acquire()
    first.release()
    assert not (tmp_path / LOCK_FILE).exists()
    (tmp_path / LOCK_FILE).write_text("999999999\n")  # a stale lock: a pid, no flock held
    second = OutputLock(tmp_path).acquire()
    assert (tmp_path / LOCK_FILE).read_text().strip() != "999999999"
    second.release()


def test_concat_windows_give_the_rows_of_one_plan(tmp_path, packed, word_tokenizer):
    """Windows carry the stream's tail into the next: without shuffling, the rows are the
    same whatever the window."""
    from helpers import load_rows

    path = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in random_texts(400)])
    options = ("--tokenizer", word_tokenizer, "--seq-len", 50, "--mode", "concat", "--no-shuffle")
    whole, _ = load_rows(packed(path, *options))
    for size in (1, 7, 64, 399, 400, 1000):
        windowed, _ = load_rows(packed(path, *options, "--buffer-size", size))
        for name in ("input_ids", "labels", "position_ids", "cu_seqlens", "cu_offsets", "num_segments"):
            assert getattr(windowed, name).tolist() == getattr(whole, name).tolist(), (size, name)


def test_resume_refuses_without_a_readable_run_record(tmp_path):
    from packcli.write.outdir import RUN_FILE, check_resumable, run_identity, save_run

    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "one two"}])
    identity = run_identity({"seq_len": 8}, [str(path)], "tok", "1.0")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(PackcliError, match=f"cannot resume: {out} holds no record of an interrupted packcli run"):
        check_resumable(out, identity)
    (out / RUN_FILE).write_text("{not json")
    with pytest.raises(PackcliError, match=f"cannot resume: {out / RUN_FILE} is unreadable"):
        check_resumable(out, identity)
    save_run(out, identity)
    check_resumable(out, identity)  # the same job: no refusal
    with pytest.raises(PackcliError, match="refusing to resume"):
        check_resumable(out, run_identity({"seq_len": 16}, [str(path)], "tok", "1.0"))
    stdin = run_identity({"seq_len": 8}, ["-"], "tok", "1.0")
    with pytest.raises(PackcliError, match="cannot check input read from stdin"):
        check_resumable(out, stdin)
