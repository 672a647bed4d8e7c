"""engine/mixture.py: a mixture packed end to end. Sources are token ids from ranges of
their own, so that every segment's tokens say which source it came from, whatever the
plan and the reader; each document's first id is its own, so copies can be counted."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers import load_rows, real_segments, write_jsonl

from packcli.inspect.verify import verify_dir

SPAN = 100_000  # source s holds ids [s * SPAN + 10, (s + 1) * SPAN)
IDS = ("--ids-field", "ids", "--no-eos", "--pad-id", "0")


def documents(source: int, n: int, low: int, high: int, seed: int, groups: int = 3) -> list[dict]:
    """n documents of source `source`: ids from its range, the first one the document's own."""
    rng = np.random.default_rng(seed)
    base = source * SPAN + 10
    out = []
    for d in range(n):
        length = int(rng.integers(low, high + 1))
        rest = rng.integers(base + 50_000, base + SPAN - 10, size=length - 1).tolist()
        out.append({"ids": [base + d, *rest], "g": int(d % groups), "id": f"{source}-{d}"})
    return out


def write_mix(tmp_path: Path, body: str, sources: dict[str, list[dict]]) -> Path:
    for name, records in sources.items():
        write_jsonl(tmp_path / f"{name}.jsonl", records)
    path = tmp_path / "mix.toml"
    path.write_text(body, encoding="utf-8")
    return path


def source_of(token: int) -> int:
    return token // SPAN


def check_sources(out: Path) -> tuple[list[list[int]], np.ndarray]:
    """Every real segment's tokens come from the source its segment_source names, and the
    per-source real tokens are the report's tokens.out; the segments and their sources."""
    rows, manifest = load_rows(out)
    segments = real_segments(rows)
    named = rows.segment_columns["segment_source"]
    assert len(named) == len(segments)
    tokens = np.zeros(len(manifest["sources"]), dtype=np.int64)
    for segment, source in zip(segments, named.tolist()):
        assert {source_of(t) for t in segment} == {source}
        tokens[source] += len(segment)
    report = json.loads((out / "report.json").read_text())
    assert [s["tokens"]["out"] for s in report["sources"]] == tokens.tolist()
    assert [s["name"] for s in manifest["sources"]] == [s["name"] for s in report["sources"]]
    return segments, named


MIX = """\
seed = 11
target_tokens = {target}
[[source]]
name = "big"
paths = ["big.jsonl"]
weight = 0.5
[[source]]
name = "mid"
paths = ["mid.jsonl"]
weight = 0.3
[[source]]
name = "small"
paths = ["small.jsonl"]
weight = 0.2
"""


def three_sources(low: int, high: int) -> dict[str, list[dict]]:
    return {
        "big": documents(0, 4000, low, high, 1),
        "mid": documents(1, 300, low, high, 2),
        "small": documents(2, 40, low, high, 3),
    }


@pytest.mark.parametrize(
    ("lengths", "extra"),
    [
        ((4, 24), ()),  # short: the plan from the histogram, the spill written by length
        ((60, 250), ()),  # long: the slot map
        ((4, 24), ("--algorithm", "ffd")),  # a plan per sequence
        ((4, 24), ("--algorithm", "nf", "--format", "npy")),
        ((4, 24), ("--algorithm", "lpfhp", "--pad-to-multiple-of", "8")),
        ((4, 24), ("--group-by", "g")),  # groups: the sorted copy by (group, length)
        ((60, 250), ("--group-by", "g", "--algorithm", "spfhp")),
        ((4, 300), ("--mode", "concat")),
        ((4, 300), ("--mode", "concat", "--group-by", "g", "--format", "npy")),
    ],
)
def test_every_segment_is_tagged_with_its_source(packed, tmp_path, lengths, extra):
    sources = three_sources(*lengths)
    target = 60_000
    mix = write_mix(tmp_path, MIX.format(target=target), sources)
    out = packed([], "--mix", mix, "--seq-len", "256", *IDS, *extra)
    segments, _ = check_sources(out)
    report = json.loads((out / "report.json").read_text())
    shares = [s["achieved_share"] for s in report["sources"]]
    for share, weight in zip(shares, (0.5, 0.3, 0.2)):
        assert abs(share - weight) < 0.005
    assert abs(report["real_tokens"] - target) < 300
    if "concat" not in extra:  # each document is one segment, whole: copies are counted by first id
        copies = Counter(segment[0] for segment in segments)
        takes = {s["name"]: s for s in report["sources"]}
        small = [c for first, c in copies.items() if source_of(first) == 2]
        assert sum(small) == takes["small"]["documents"]["taken"]
        assert len(small) == takes["small"]["documents"]["taken"] - takes["small"]["documents"]["repeated"]
        assert max(small) - min(small) <= 1  # whole epochs for all, a seeded part once more
        assert takes["small"]["epochs"] > 2 and takes["big"]["epochs"] < 1


def test_shares_of_text_sft_and_chat_sources_in_one_mix(packed, tmp_path, chatml_tokenizer):
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    rng = np.random.default_rng(4)

    def text(n):
        return " ".join(words[i] for i in rng.integers(0, len(words), size=n))

    write_jsonl(tmp_path / "web.jsonl", [{"text": text(int(rng.integers(5, 60)))} for _ in range(400)])
    write_jsonl(tmp_path / "sft.jsonl", [{"q": text(8), "a": text(12)} for _ in range(60)])
    chats = [
        {"messages": [{"role": "user", "content": text(6)}, {"role": "assistant", "content": text(9)}]}
        for _ in range(30)
    ]
    write_jsonl(tmp_path / "chat.jsonl", chats)
    template = chatml_tokenizer / "chatml.jinja"
    mix = tmp_path / "mix.toml"
    mix.write_text(
        f"""\
[[source]]
name = "web"
paths = ["web.jsonl"]
weight = 2
[[source]]
name = "sft"
paths = ["sft.jsonl"]
prompt_field = "q"
completion_field = "a"
weight = 1
[[source]]
name = "chat"
paths = ["chat.jsonl"]
messages_field = "messages"
chat_template = "{template}"
epochs = 2
""",
        encoding="utf-8",
    )
    out = packed([], "--mix", mix, "--tokenizer", chatml_tokenizer, "--seq-len", "128")
    report = json.loads((out / "report.json").read_text())
    web, sft, chat = report["sources"]
    assert (web["input"], sft["input"], chat["input"]) == ("text", "prompt", "chat")
    assert chat["epochs"] == 2.0 and chat["documents"]["taken"] == 60 and chat["documents"]["repeated"] == 30
    weighted = web["tokens"]["out"] + sft["tokens"]["out"]
    assert abs(web["tokens"]["out"] / weighted - 2 / 3) < 0.01
    assert web["weight"] == 2 and web["target_share"] is not None and chat["target_share"] is None
    # prompts and user turns are not learned; every web token but each segment's first is
    assert web["tokens"]["learned"] > 0.95 * web["tokens"]["out"]
    assert sft["tokens"]["learned"] < sft["tokens"]["out"] * 0.8
    assert chat["tokens"]["learned"] < chat["tokens"]["out"] * 0.8


def test_the_same_mixture_gives_the_same_bytes_with_any_workers(packed, tmp_path, word_tokenizer):
    from helpers import random_texts

    write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in random_texts(300, seed=1, max_words=40)])
    write_jsonl(tmp_path / "b.jsonl", [{"text": t} for t in random_texts(50, seed=2, max_words=40)])
    args = ("--source", "a=" + str(tmp_path / "a.jsonl"), "--source", "b=" + str(tmp_path / "b.jsonl"))
    args += ("--weight", "a=0.7", "--weight", "b=0.3", "--tokenizer", word_tokenizer, "--seq-len", "64")
    one = packed([], *args, "--workers", "1")
    two = packed([], *args, "--workers", "2")
    assert _shard_bytes(one) == _shard_bytes(two)
    assert (
        json.loads((one / "manifest.json").read_text())["shards"]
        == json.loads((two / "manifest.json").read_text())["shards"]
    )


def _shard_bytes(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if (p.is_file() and p.name.startswith("shard")) or p.parent.name.startswith("shard")
    }


def test_copies_are_an_epoch_of_their_source_apart_in_a_stream(packed, tmp_path):
    """Concat mode without shuffle keeps the stream's order: a document's copies are a
    whole epoch of its source apart, never next to each other."""
    sources = {"one": documents(0, 20, 30, 60, 5), "two": documents(1, 200, 30, 60, 6)}
    mix = write_mix(
        tmp_path,
        '[[source]]\nname = "one"\npaths = ["one.jsonl"]\nepochs = 3\n'
        '[[source]]\nname = "two"\npaths = ["two.jsonl"]\nepochs = 0.5\n',
        sources,
    )
    out = packed([], "--mix", mix, "--seq-len", "64", "--mode", "concat", "--no-shuffle", *IDS)
    rows, _ = load_rows(out)
    stream = rows.input_ids[rows.input_ids != 0]
    firsts = [i for i, t in enumerate(stream.tolist()) if source_of(t) == 0 and t < 50_000]
    tokens_of_one = sum(len(d["ids"]) for d in sources["one"])
    by_document: dict[int, list[int]] = {}
    for at in firsts:
        by_document.setdefault(int(stream[at]), []).append(at)
    assert all(len(at) == 3 for at in by_document.values()) and len(by_document) == 20
    for at in by_document.values():
        assert np.diff(at).tolist() == [tokens_of_one, tokens_of_one]
    two = [t for t in stream.tolist() if source_of(t) == 1 and t % SPAN < 50_000]
    assert len(two) == 100 and len(set(two)) == 100  # a seeded half, each once


def test_a_held_out_document_stays_on_its_side_when_data_is_added(packed, tmp_path):
    first = documents(0, 400, 5, 30, 7)
    added = documents(0, 800, 5, 30, 8)[400:]
    write_jsonl(tmp_path / "a.jsonl", first)
    write_jsonl(tmp_path / "later" / "b.jsonl", added)
    base = ("--holdout", "0.2", "--seq-len", "64", *IDS)
    one = tmp_path / "one"
    packed([], "--source", f"web={tmp_path / 'a.jsonl'}", *base, out=one)
    two = tmp_path / "two"
    packed(
        [],
        "--source",
        f"web={tmp_path / 'later' / 'b.jsonl'}",
        "--source",
        f"web={tmp_path / 'a.jsonl'}",
        *base,
        out=two,
    )
    for out in (one, two):
        verify_dir(out / "train")
        verify_dir(out / "validation")

    def firsts(out: Path) -> set[int]:
        rows, _ = load_rows(out)
        return {segment[0] for segment in real_segments(rows)}

    held_one, held_two = firsts(one / "validation"), firsts(two / "validation")
    assert held_one == held_two & {d["ids"][0] for d in first}  # the first run's split, unchanged
    assert not firsts(one / "train") & held_one and not firsts(two / "train") & held_two  # nothing leaks
    assert 0.12 < len(held_two) / 800 < 0.28
    report = json.loads((one / "validation" / "report.json").read_text())
    (web,) = report["sources"]
    assert web["documents"]["held_out"] == len(held_one) == web["documents"]["taken"]
    assert web["documents"]["repeated"] == 0 and report["mixture"]["split"] == "validation"


def test_with_group_by_a_whole_group_goes_to_one_side(packed, tmp_path):
    records = documents(0, 600, 5, 30, 9, groups=40)
    write_jsonl(tmp_path / "a.jsonl", records)
    out = packed(
        [],
        "--source",
        f"web={tmp_path / 'a.jsonl'}",
        "--epochs",
        "web=2",
        "--holdout",
        "0.25",
        "--group-by",
        "g",
        "--seq-len",
        "64",
        *IDS,
    )
    group_of = {d["ids"][0]: d["g"] for d in records}

    def groups(side: str) -> set[int]:
        rows, _ = load_rows(out / side)
        return {group_of[segment[0]] for segment in real_segments(rows)}

    train, held = groups("train"), groups("validation")
    assert held and train and not train & held and train | held == set(range(40))


def test_a_holdout_key_field_chooses_the_side(packed, tmp_path):
    records = documents(0, 300, 5, 30, 10)
    same_ids = [dict(r, ids=[r["ids"][0] + 1000, *r["ids"][1:]]) for r in records]  # other content, same "id"
    write_jsonl(tmp_path / "a.jsonl", records)
    write_jsonl(tmp_path / "b.jsonl", same_ids)
    sides = []
    for name in ("a", "b"):
        out = packed(
            [],
            "--source",
            f"s={tmp_path / name}.jsonl",
            "--holdout",
            "0.3",
            "--holdout-key",
            "id",
            "--seq-len",
            "64",
            *IDS,
            out=tmp_path / f"out-{name}",
        )
        rows, _ = load_rows(out / "validation")
        sides.append({(segment[0] - 10) % 1000 for segment in real_segments(rows)})
    assert sides[0] == sides[1]


def test_resume_after_a_kill_gives_the_same_bytes(packed, tmp_path, cli):
    import signal
    import sys

    from pausing import stop_at

    sources = three_sources(4, 24)
    mix = write_mix(tmp_path, MIX.format(target=40_000), sources)
    args = ["--mix", str(mix), "--seq-len", "256", *IDS, "--holdout", "0.1", "--rows-per-shard", "20"]
    whole = tmp_path / "whole"
    result = cli("pack", "-o", whole, *args)
    assert result.exit_code == 0, result.stderr
    for point in ("source-spilled:2", "spilled", "shard-done:2"):
        out = tmp_path / f"killed-{point.replace(':', '-')}"
        command = [sys.executable, "-m", "packcli", "pack", "-o", str(out), *args]
        stop_at(command, point, signal.SIGKILL, tmp_path)
        assert not (out / "train" / "manifest.json").exists()
        result = cli("pack", "-o", out, *args, "--resume")
        assert result.exit_code == 0, result.stderr
        for side in ("train", "validation"):
            verify_dir(out / side)
            assert _shard_bytes(out / side) == _shard_bytes(whole / side), (point, side)
            assert (
                json.loads((out / side / "report.json").read_text())["sources"]
                == json.loads((whole / side / "report.json").read_text())["sources"]
            )
        assert not (out / ".packcli-spill-sources").exists()


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (
            '[[source]]\nname = "a"\npaths = ["a.jsonl"]\nweight = -1\n',
            2,
            "mix.toml:4: source 'a': weight must be at least 0",
        ),
        ('[[source]]\nname = "a"\npaths = ["a.jsonl"]\nweight = 1\nepochs = 2\n', 2, "weight and epochs exclude"),
        ('[[source]]\nname = "a"\npaths = ["a.jsonl"]\nids_feild = "x"\n', 2, "mix.toml:4: unknown key 'ids_feild'"),
        ('[[source]]\nname = "a"\npaths = ["a.jsonl"\n', 2, "mix.toml:3:"),
        (
            '[[source]]\nname = "a"\npaths = ["a.jsonl"]\n[[source]]\nname = "a"\npaths = ["e.jsonl"]\n',
            2,
            "mix.toml:5: two sources are named 'a'",
        ),
        (
            '[[source]]\nname = "a"\npaths = ["a.jsonl"]\n[[source]]\nname = "e"\npaths = ["e.jsonl"]\n',
            1,
            "source 'e': no documents to pack in",
        ),
        (
            'max_epochs = 2\ntarget_tokens = 100000\n[[source]]\nname = "a"\npaths = ["a.jsonl"]\nweight = 1\n',
            1,
            "more than max_epochs 2",
        ),
    ],
)
def test_a_bad_mixture_is_one_line_and_writes_nothing(cli, tmp_path, body, code, message):
    write_jsonl(tmp_path / "a.jsonl", documents(0, 30, 5, 20, 11))
    (tmp_path / "e.jsonl").write_text("")
    mix = tmp_path / "mix.toml"
    mix.write_text(body, encoding="utf-8")
    out = tmp_path / "out"
    result = cli("pack", "--mix", mix, "-o", out, "--seq-len", "64", *IDS)
    assert result.exit_code == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr, result.stderr
    assert not list(out.rglob("manifest.json")) if out.exists() else True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--holdout", "1.5"), "--holdout must be a fraction between 0 and 1"),
        (("--holdout", "0"), "--holdout must be a fraction between 0 and 1"),
        (("--holdout", "x"), "--holdout must be a number"),
        (("--holdout-key", "id"), "--holdout-key goes with --holdout"),
        (("--weight", "a=1"), "--weight and --epochs go with --source"),
        (("--mix", "m.toml", "--source", "a=a.jsonl"), "--mix and --source/--weight/--epochs exclude each other"),
        (("--source", "a=a.jsonl", "--buffer-size", "10"), "--buffer-size does not apply to a mixture"),
    ],
)
def test_bad_mixture_options_are_usage_errors(cli, tmp_path, args, message):
    write_jsonl(tmp_path / "a.jsonl", documents(0, 5, 5, 20, 12))
    inputs = () if any(a in args for a in ("--mix", "--source")) else (tmp_path / "a.jsonl",)
    result = cli("pack", *inputs, "-o", tmp_path / "out", "--seq-len", "64", *IDS, *args)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert not (tmp_path / "out").exists()


def test_the_holdout_directory_is_verified_compared_and_named(packed, cli, tmp_path):
    write_jsonl(tmp_path / "a.jsonl", documents(0, 200, 5, 30, 13))
    out = packed([], "--source", f"web={tmp_path / 'a.jsonl'}", "--holdout", "0.3", "--seq-len", "64", *IDS)
    verified = cli("verify", out)
    assert verified.exit_code == 0 and verified.stdout.count("ok: ") == 2
    assert f"{out}/train" in verified.stdout and f"{out}/validation" in verified.stdout
    stats = json.loads(cli("stats", out, "--json").stdout)
    assert sorted(stats) == sorted([str(out / "train"), str(out / "validation")])
    shown = cli("show", out)
    assert shown.exit_code == 2 and "holds the outputs of --holdout" in shown.stderr
    report = json.loads(
        cli(
            "pack",
            "-o",
            out,
            "--source",
            f"web={tmp_path / 'a.jsonl'}",
            "--holdout",
            "0.3",
            "--seq-len",
            "64",
            *IDS,
            "--resume",
            "--json",
        ).stdout
    )
    assert sorted(report["splits"]) == ["train", "validation"]  # finished: the same reports again
