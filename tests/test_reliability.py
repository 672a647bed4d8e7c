"""Bad input, bad settings, signals, kill -9 and --resume: never half-written, never silent."""

from __future__ import annotations

import errno
import gzip
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import bucket_reads, random_texts, write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pausing import stop_at

from packcli.core.errors import Interrupted
from packcli.inspect.verify import verify_dir
from packcli.write import by_length
from packcli.write.by_length import SORTED_LEARNED_FILE, SORTED_TOKENS_FILE


def assert_incomplete(out: Path) -> None:
    assert not (out / "manifest.json").exists()
    if out.exists():
        assert not [p.name for p in out.iterdir() if p.name.startswith(".shard-")]


def one_line(result, code=1) -> str:
    assert result.exit_code == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


JSONL_BAD = [
    (b'{"text": "w1"}\n{"text": "w2"\n', "bad.jsonl:2", "malformed JSON"),
    (b'{"text": "w1"}\n["w2"]\n', "bad.jsonl:2", "expected a JSON object"),
    (b'{"text": "w1"}\n{"body": "w2"}\n', "bad.jsonl:2", "missing field 'text'"),
    (b'{"text": null}\n', "bad.jsonl:1", "is null"),
    (b'{"text": 5}\n', "bad.jsonl:1", "expected a string"),
    (b'{"text": ["w1"]}\n', "bad.jsonl:1", "expected a string"),
    (b'{"text": ""}\n', "bad.jsonl:1", "empty"),
    (b'{"text": "w1 \xff"}\n', "bad.jsonl:1", "invalid UTF-8"),
]


@pytest.mark.parametrize("content, where, problem", JSONL_BAD)
def test_bad_jsonl_records(tmp_path, cli, word_tokenizer, content, where, problem):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    out = tmp_path / "o"
    line = one_line(cli("pack", path, "-o", out, "--tokenizer", word_tokenizer, "--seq-len", 8))
    assert where in line and problem in line
    assert_incomplete(out)
    skipped = cli(
        "pack",
        path,
        "-o",
        tmp_path / "s",
        "--tokenizer",
        word_tokenizer,
        "--seq-len",
        8,
        "--on-bad-record",
        "skip",
        "--json",
    )
    if skipped.exit_code == 0:
        documents = json.loads(skipped.stdout)["documents"]
        assert documents["skipped"] == 1 and where in documents["skipped_examples"][0]
    else:  # the file held nothing good at all
        assert "no documents to pack" in one_line(skipped)


PARQUET_BAD = [
    (pa.table({"text": ["w1", None]}), "bad.parquet row 1", "is null"),
    (pa.table({"text": ["w1", ""]}), "bad.parquet row 1", "empty"),
    (pa.table({"text": [1, 2]}), "bad.parquet", "int64"),
    (pa.table({"body": ["w1"]}), "bad.parquet", "no column 'text'"),
]


@pytest.mark.parametrize("table, where, problem", PARQUET_BAD)
def test_bad_parquet_records(tmp_path, cli, word_tokenizer, table, where, problem):
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    out = tmp_path / "o"
    line = one_line(cli("pack", path, "-o", out, "--tokenizer", word_tokenizer, "--seq-len", 8))
    assert where in line and problem in line, line
    assert_incomplete(out)


def test_truncated_gzip_and_empty_file(tmp_path, cli, word_tokenizer):
    data = gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in random_texts(2000)).encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    out = tmp_path / "o"
    line = one_line(cli("pack", path, "-o", out, "--tokenizer", word_tokenizer, "--seq-len", 64))
    assert "cut.jsonl.gz:" in line and "truncated" in line
    assert_incomplete(out)
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"text": pa.array([], type=pa.string())}), empty)
    assert "no documents" in one_line(
        cli("pack", empty, "-o", tmp_path / "e", "--tokenizer", word_tokenizer, "--seq-len", 8)
    )


def test_unwritable_output(tmp_path, cli, word_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "w1"}])
    line = one_line(cli("pack", path, "-o", path / "sub", "--tokenizer", word_tokenizer, "--seq-len", 8))
    assert "cannot write to output directory" in line


def test_disk_full_mid_run(tmp_path, cli, word_tokenizer, monkeypatch):
    from packcli.write import shards

    path = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in random_texts(400)])
    real_write = shards._NpyFile.write
    calls = {"n": 0}

    def fill_up(self, block):
        calls["n"] += 1
        if calls["n"] > 20:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(self, block)

    monkeypatch.setattr(shards._NpyFile, "write", fill_up)
    out = tmp_path / "o"
    line = one_line(
        cli(
            "pack",
            path,
            "-o",
            out,
            "--tokenizer",
            word_tokenizer,
            "--seq-len",
            32,
            "--format",
            "npy",
            "--rows-per-shard",
            10,
            "--buffer-size",
            20,
        )
    )
    assert "No space left on device" in line and str(out) in line
    assert_incomplete(out)
    assert (out / "shard-00000").is_dir()  # finished shards stay, for --resume


def test_pad_id_that_collides_with_the_data(tmp_path, cli, word_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "w1 w2"}, {"text": "w3 w7"}])
    line = one_line(
        cli("pack", path, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 8, "--pad-id", 11)
    )
    assert "d.jsonl:2" in line and "--pad-id 11 occurs in the data" in line
    ok = cli("pack", path, "-o", tmp_path / "o2", "--tokenizer", word_tokenizer, "--seq-len", 8, "--pad-id", 1)
    assert ok.exit_code == 0  # the EOS id as pad is the usual choice, not a collision


# ------------------------------------------------------------------ interrupted runs and --resume


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory) -> Path:
    """Large enough that a run writes many shards (9 of 300 rows at seq_len 128) over
    several windows (3 of 5,000 sequences): stops come from pause points, not timing."""
    path = tmp_path_factory.mktemp("big") / "big.jsonl"
    write_jsonl(path, [{"text": t} for t in random_texts(15_000, seed=9, max_words=40)])
    return path


def pack_command(corpus, out, tokenizer, *extra) -> list[str]:
    return [
        sys.executable,
        "-m",
        "packcli",
        "pack",
        str(corpus),
        "-o",
        str(out),
        "--tokenizer",
        str(tokenizer),
        "--seq-len",
        "128",
        "--rows-per-shard",
        "300",
        "--buffer-size",
        "5000",
        "--format",
        "npy",
        *extra,
    ]


def start_and_stop(command, out: Path, point: str, sig) -> subprocess.CompletedProcess:
    """Run packcli, hold it at `point` (packcli/pause.py) and send it `sig` there."""
    return stop_at(command, point, sig, out.parent)


SAFETY_TIMEOUT = 300  # seconds: only a hung thread reaches it, however loaded the machine
AFTER_FIRST_SHARD = "shard-done"
IN_THE_MIDDLE_OF_A_SHARD = "mid-shard:3"  # three blocks into shards, one at least finished


def shard_bytes(out: Path) -> dict[str, bytes]:
    files = {}
    for shard in sorted(out.glob("shard-*")):
        for f in sorted(shard.iterdir()):
            files[f"{shard.name}/{f.name}"] = f.read_bytes()
    files["manifest.json"] = (out / "manifest.json").read_bytes()
    return files


@pytest.fixture(scope="module")
def uninterrupted(big_corpus, word_tokenizer, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("full") / "out"
    subprocess.run(pack_command(big_corpus, out, word_tokenizer), check=True, capture_output=True)
    verify_dir(out)
    return out


@pytest.mark.parametrize("moment", [AFTER_FIRST_SHARD, IN_THE_MIDDLE_OF_A_SHARD])
def test_kill_9_then_resume_is_byte_identical(tmp_path, big_corpus, word_tokenizer, uninterrupted, moment):
    out = tmp_path / "out"
    killed = start_and_stop(pack_command(big_corpus, out, word_tokenizer), out, moment, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    assert not (out / "manifest.json").exists()
    if moment == IN_THE_MIDDLE_OF_A_SHARD:
        assert any(p.name.startswith(".shard-") for p in out.iterdir())
    finished_before = len(list(out.glob("shard-*")))
    resumed = subprocess.run(pack_command(big_corpus, out, word_tokenizer, "--resume"), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    verify_dir(out)
    assert shard_bytes(out) == shard_bytes(uninterrupted)
    assert finished_before >= 1


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signals_stop_cleanly(tmp_path, big_corpus, word_tokenizer, sig, code):
    """After the first shard (tests/test_interrupts.py stops a run at every other point)."""
    out = tmp_path / "out"
    stopped = start_and_stop(pack_command(big_corpus, out, word_tokenizer), out, AFTER_FIRST_SHARD, sig)
    assert stopped.returncode == code, stopped.stderr
    lines = stopped.stderr.strip().splitlines()
    assert len(lines) == 1 and "interrupted by SIG" in lines[0] and "--resume" in lines[0]
    assert_incomplete(out)


def test_a_signal_as_a_thread_starts_leaves_the_new_thread_whole(monkeypatch):
    """SIGTERM's Interrupted raised just as `Thread.start` has started the thread (where a
    signal handler can run) goes by Thread.start's `except Exception`, which would undo a
    start that the new thread then finishes, with a KeyError traceback on stderr."""
    real_start = threading._start_new_thread
    unraisable: list = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)

    def start_then_signal(function, args):
        real_start(function, args)
        raise Interrupted("SIGTERM", 15)

    monkeypatch.setattr(threading, "_start_new_thread", start_then_signal)
    done = threading.Event()
    thread = threading.Thread(target=done.set)
    with pytest.raises(Interrupted):
        thread.start()
    monkeypatch.setattr(threading, "_start_new_thread", real_start)
    assert done.wait(SAFETY_TIMEOUT)  # the thread runs at once; the bound is for a hang only
    thread.join(SAFETY_TIMEOUT)
    assert unraisable == []
    assert thread not in threading._limbo.values() and not thread.is_alive()


def test_resume_refuses_other_options_or_inputs(tmp_path, big_corpus, word_tokenizer):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(big_corpus.read_bytes())
    out = tmp_path / "out"
    start_and_stop(pack_command(corpus, out, word_tokenizer), out, AFTER_FIRST_SHARD, signal.SIGKILL)

    def resume_with(command):
        refused = subprocess.run(command, capture_output=True, text=True)
        assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
        return refused.stderr

    other = pack_command(corpus, out, word_tokenizer, "--resume")
    other[other.index("--seq-len") + 1] = "256"
    assert "refusing to resume: --seq-len (256 vs 128)" in resume_with(other)
    renamed = tmp_path / "renamed.jsonl"
    renamed.write_bytes(corpus.read_bytes())
    assert "the list of input files differs" in resume_with(pack_command(renamed, out, word_tokenizer, "--resume"))
    data = bytearray(corpus.read_bytes())  # same size, one word changed near the end
    at = data.rindex(b"w1")
    data[at : at + 2] = b"w2"
    corpus.write_bytes(bytes(data))
    assert f"input {corpus} (changed since)" in resume_with(pack_command(corpus, out, word_tokenizer, "--resume"))
    assert not (out / "manifest.json").exists()


def test_resume_of_a_finished_run_changes_nothing(tmp_path, cli, word_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in random_texts(30)])
    args = ("pack", path, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 32)
    assert cli(*args).exit_code == 0
    before = (tmp_path / "o" / "manifest.json").read_bytes()
    again = cli(*args, "--resume", "--json")
    assert again.exit_code == 0 and "already complete" in again.stderr
    assert json.loads(again.stdout)["rows"] > 0
    assert (tmp_path / "o" / "manifest.json").read_bytes() == before
    fresh = cli("pack", path, "-o", tmp_path / "new", "--tokenizer", word_tokenizer, "--seq-len", 32, "--resume")
    assert fresh.exit_code == 0  # --resume on a new directory simply starts
    assert cli(*args, "--resume", "--overwrite").exit_code == 2


# ------------------------------------------------------------------ fuzz: never a traceback

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)
records = st.one_of(
    st.binary(max_size=40),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"text": json_values}).map(lambda v: json.dumps(v).encode()),
    st.text(alphabet="w0123456789 ", min_size=1, max_size=30).map(lambda t: json.dumps({"text": t}).encode()),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(records, min_size=1, max_size=6), skip=st.booleans())
def test_fuzz_records_never_crash(tmp_path_factory, cli, word_tokenizer, lines, skip):
    directory = tmp_path_factory.mktemp("fuzz")
    path = directory / "fuzz.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n")
    options = ["--on-bad-record", "skip"] if skip else []
    result = cli("pack", path, "-o", directory / "o", "--tokenizer", word_tokenizer, "--seq-len", 16, *options)
    assert result.exit_code in (0, 1)
    if result.exit_code == 1:
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
        assert_incomplete(directory / "o")
    else:
        verify_dir(directory / "o")


def test_kill_9_with_one_plan_then_resume_reuses_the_spill(tmp_path, big_corpus, word_tokenizer):
    def command(out, *extra):
        return [
            part
            for part in pack_command(big_corpus, out, word_tokenizer, *extra)
            if part not in ("--buffer-size", "5000")
        ]

    whole = tmp_path / "whole"
    subprocess.run(command(whole), check=True, capture_output=True)
    out = tmp_path / "out"
    # The last moment the spill is whole: every shard's rows read, the last shards unfinished.
    killed = start_and_stop(command(out), out, "last-rows-read", signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    assert (out / ".packcli-spill" / "complete.json").is_file()
    assert not (out / "manifest.json").exists()
    resumed = subprocess.run(command(out, "--resume", "--json"), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["spill"]["reused"] is True
    verify_dir(out)
    assert shard_bytes(out) == shard_bytes(whole)


# ------------------------------------------------------------------ kill -9 and --resume of short sequences

SHORT_OPTIONS = {
    "bin": (),
    "bin-group-by": ("--group-by", "g"),
    "bin-max-sequences": ("--algorithm", "spfhp", "--max-sequences-per-row", "12"),
    "bin-pad-multiple": ("--pad-to-multiple-of", "4"),
    "concat-group-by": ("--mode", "concat", "--group-by", "g"),
    "concat": ("--mode", "concat"),
}
# Killed after a shard of the one plan, or inside a shard of a window (`mid-shard` is a
# point of the windowed writer; concat with --group-by plans the whole input at once).
SHORT_KILLS = [(name, AFTER_FIRST_SHARD) for name in SHORT_OPTIONS if name != "concat"] + [
    (name, "mid-shard") for name in SHORT_OPTIONS if name != "concat-group-by"
]
SHORT_WINDOW = ("--buffer-size", "2000")


@pytest.fixture(scope="module")
def short_corpus(tmp_path_factory) -> Path:
    """Records of 1..8 words (5.5 tokens with EOS on average): a row of 128 holds about 23,
    so bin mode gathers from the spill sorted by length (engine/local.py `_by_bucket`). The
    same words as a prompt and a completion too, and a group."""
    path = tmp_path_factory.mktemp("short") / "short.jsonl"
    words = [t.split() for t in random_texts(8000, seed=4, max_words=8)]
    records = [
        {"text": " ".join(w), "q": w[0], "a": " ".join(w[1:]) or "w7", "g": ("web", "code", "books")[i % 5 % 3]}
        for i, w in enumerate(words)
    ]
    write_jsonl(path, records)
    return path


def short_options(tokenizer, *extra) -> list[str]:
    return ["--tokenizer", str(tokenizer), "--seq-len", "128", "--rows-per-shard", "40", "--format", "npy", *extra]


def short_command(corpus, out, tokenizer, *extra) -> list[str]:
    return [sys.executable, "-m", "packcli", "pack", str(corpus), "-o", str(out), *short_options(tokenizer, *extra)]


@pytest.fixture(scope="module")
def short_uninterrupted(short_corpus, word_tokenizer, tmp_path_factory):
    """The output of an uninterrupted run with these options (made once, in this process),
    which asserts that bin mode went through the sorted spill and concat did not."""
    from typer.testing import CliRunner

    from packcli.cli.app import app

    made: dict[tuple[str, ...], Path] = {}

    def output(options: tuple[str, ...]) -> Path:
        if options not in made:
            out = tmp_path_factory.mktemp("short-whole") / "out"
            with pytest.MonkeyPatch.context() as patch:
                by_bucket = bucket_reads(patch)
                args = ["pack", str(short_corpus), "-o", str(out), *short_options(word_tokenizer, *options)]
                result = CliRunner().invoke(app, args, catch_exceptions=False)
            assert result.exit_code == 0, result.output + result.stderr
            assert bool(by_bucket) == ("concat" not in options)
            verify_dir(out)
            made[options] = out
        return made[options]

    return output


@pytest.mark.parametrize("name, moment", SHORT_KILLS)
def test_kill_9_then_resume_of_short_sequences_is_byte_identical(
    tmp_path, packed, short_corpus, word_tokenizer, short_uninterrupted, name, moment
):
    """Bin mode through the sorted spill (with groups, a cap, a pad multiple), and concat."""
    options = SHORT_OPTIONS[name] + (SHORT_WINDOW if moment == "mid-shard" else ())
    whole = short_uninterrupted(options)
    out = tmp_path / "out"
    killed = start_and_stop(short_command(short_corpus, out, word_tokenizer, *options), out, moment, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    assert not (out / "manifest.json").exists() and list(out.glob("shard-*"))
    if moment == "mid-shard":
        assert any(p.name.startswith(".shard-") for p in out.iterdir())
    packed(short_corpus, *short_options(word_tokenizer, *options, "--resume"), out=out)
    assert shard_bytes(out) == shard_bytes(whole)


PROMPTS = ("--prompt-field", "q", "--completion-field", "a")


@pytest.mark.parametrize("name", ["bin", "prompt-group-by-pad-multiple"])
def test_kill_9_after_the_spill_then_resume_sorts_it_again(
    tmp_path, cli, short_corpus, word_tokenizer, short_uninterrupted, name, monkeypatch
):
    """Killed once the spill is complete, before or while it is copied sorted by length:
    --resume reuses the spill and never takes a by-length copy it finds (here one cut short:
    of its full size, as the copy is sized first, and garbage in it) for the finished one;
    nor, with prompts (learned flags), the copy of the flags. Plain bin mode spills by
    length, which is read in place: there the resumed run is made to copy it (its chunks'
    table taken as too large), so that it meets the planted copy too."""
    multiple = 1 if name == "bin" else 4
    options = () if name == "bin" else (*PROMPTS, "--group-by", "g", "--pad-to-multiple-of", str(multiple))
    whole = short_uninterrupted(options)
    out = tmp_path / "out"
    killed = start_and_stop(short_command(short_corpus, out, word_tokenizer, *options), out, "spilled", signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    spill = out / ".packcli-spill"
    assert (spill / "complete.json").is_file() and not list(out.glob("shard-*"))
    assert not (spill / SORTED_TOKENS_FILE).exists() and not (spill / SORTED_LEARNED_FILE).exists()
    placed = int((-(-np.load(spill / "lengths.npy") // multiple) * multiple).sum())
    record = json.loads((spill / "complete.json").read_text())
    (spill / SORTED_TOKENS_FILE).write_bytes(b"\xff" * placed * np.dtype(record["token_dtype"]).itemsize)
    if name != "bin":
        assert record["masked"]
        (spill / SORTED_LEARNED_FILE).write_bytes(b"\x01\x00\x00" * (placed // 3) + b"\x01" * (placed % 3))
    monkeypatch.setattr(by_length, "CHUNK_TABLE_CELLS", 0)
    reads = bucket_reads(monkeypatch)
    resumed = cli("pack", short_corpus, "-o", out, *short_options(word_tokenizer, *options, "--resume", "--json"))
    assert resumed.exit_code == 0, resumed.stderr
    assert json.loads(resumed.stdout)["spill"]["reused"] is True
    assert reads == ["copy"]  # through the sorted copy, which was made again
    verify_dir(out)
    assert shard_bytes(out) == shard_bytes(whole)
