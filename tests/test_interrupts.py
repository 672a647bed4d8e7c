"""A signal at every boundary of a pack run, sent while the run is held there (no timing):
before the manifest, the run says the output is incomplete and leaves no temporary file;
from the manifest on, it says the output is complete, and verify agrees."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from helpers import random_texts, write_jsonl
from pausing import stop_at

from packcli.core.pause import POINTS
from packcli.inspect.verify import verify_dir

COMPLETE_FROM = POINTS.index("manifest.json")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    write_jsonl(path, [{"text": t} for t in random_texts(600, seed=3, max_words=30)])
    return path


def command(corpus: Path, out: Path, tokenizer: Path, *extra: str) -> list[str]:
    return [
        *(sys.executable, "-m", "packcli", "pack", str(corpus), "-o", str(out)),
        *("--tokenizer", str(tokenizer), "--seq-len", "64", "--rows-per-shard", "40", "--format", "npy"),
        *extra,
    ]


def leftovers(out: Path) -> list[str]:
    """Temporary files a stopped run must not leave: *.tmp, half-written shards, the write probe, the lock."""
    if not out.exists():
        return []
    return sorted(
        p.name
        for p in out.iterdir()
        if p.name.endswith(".tmp") or p.name.startswith((".shard-", ".packcli-write-test", ".packcli.lock"))
    )


def check_stopped(stopped, out: Path, point: str, code: int) -> None:
    assert stopped.returncode == code, stopped.stderr
    lines = stopped.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stopped.stderr, stopped.stderr
    assert leftovers(out) == []
    if POINTS.index(point) >= COMPLETE_FROM:
        assert "complete" in lines[0] and "incomplete" not in lines[0], lines[0]
        assert (out / "manifest.json").is_file()
        verify_dir(out)
    else:
        assert "interrupted by SIG" in lines[0] and "incomplete" in lines[0] and "--resume" in lines[0]
        assert not (out / "manifest.json").exists()


@pytest.mark.parametrize("point", [p for p in POINTS if p != "mid-shard"])
def test_sigint_at_every_boundary_tells_the_truth(tmp_path, corpus, word_tokenizer, point):
    out = tmp_path / "out"
    stopped = stop_at(command(corpus, out, word_tokenizer), point, signal.SIGINT, tmp_path)
    check_stopped(stopped, out, point, 130)


@pytest.mark.parametrize(
    "point", ["claimed", "written", "report.json-tmp", "manifest.json-tmp", "manifest.json", "done"]
)
def test_sigterm_tells_the_truth(tmp_path, corpus, word_tokenizer, point):
    out = tmp_path / "out"
    stopped = stop_at(command(corpus, out, word_tokenizer), point, signal.SIGTERM, tmp_path)
    check_stopped(stopped, out, point, 143)


@pytest.mark.parametrize("point", ["shard-done:2", "mid-shard"])
def test_windows_stopped_mid_run(tmp_path, corpus, word_tokenizer, point):
    """--buffer-size writes shards one after another: stopped after a shard or inside one."""
    out = tmp_path / "out"
    stopped = stop_at(command(corpus, out, word_tokenizer, "--buffer-size", "200"), point, signal.SIGINT, tmp_path)
    check_stopped(stopped, out, point.partition(":")[0], 130)
    assert (out / "shard-00000").is_dir()  # finished shards stay, for --resume
