"""`packcli show` on packed outputs: what is shown is what the shards hold.

The learned text of every segment is the completion (SFT) or the assistant turns (chat)
of the record it came from, decoded with the bundled tokenizer; the boundaries shown are
the row's cu_seqlens; --json gives back the columns exactly; colour only when asked for
or on a terminal."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from helpers import load_rows, write_jsonl

from packcli.inspect.verify import verify_dir

EOS = "<|endoftext|>"
IM_END = "<|im_end|>"


def gsm_records(n: int = 40) -> list[dict]:
    """GSM8K-shaped prompt/completion pairs: reasoning lines, then '#### answer'."""
    records = []
    for i in range(n):
        a, b = 3 * i + 1, i % 7 + 2
        question = f"Natalia sold {a} clips in April and {b} times as many in May. How many clips in all?"
        answer = f"In May she sold {a} * {b} = {a * b} clips.\nIn all she sold {a} + {a * b} = {a + a * b}.\n#### {a + a * b}"
        records.append({"question": question, "answer": answer})
    return records


def chat_records(n: int = 24) -> list[dict]:
    """ChatML-style conversations, some with two assistant turns and indented lines."""
    records = []
    for i in range(n):
        messages = [
            {"role": "system", "content": "You answer briefly."},
            {"role": "user", "content": f"Question {i}: name a prime."},
            {"role": "assistant", "content": f"{[2, 3, 5, 7, 11][i % 5]} is prime.\n  (checked)"},
        ]
        if i % 3 == 0:
            messages += [
                {"role": "user", "content": f"And another for {i}?"},
                {"role": "assistant", "content": f"Then {[13, 17, 19][i % 3]}."},
            ]
        records.append({"messages": messages})
    return records


@pytest.fixture
def show_json(cli):
    def run(*args) -> list[dict]:
        result = cli("show", *args, "--json")
        assert result.exit_code == 0, result.output + result.stderr
        assert "--tokenizer" in args or "--ids-field" in args or result.stderr == "", result.stderr
        return json.loads(result.stdout)

    return run


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_learned_text_of_every_segment_is_its_completion(tmp_path, packed, show_json, fmt):
    records = gsm_records()
    path = write_jsonl(tmp_path / "gsm.jsonl", records)
    out = packed(
        path, "--tokenizer", "packcli:demo", "--prompt-field", "question", "--completion-field", "answer",
        "--seq-len", 160, "--format", fmt,
    )  # fmt: skip
    answers = {r["question"]: r["answer"] for r in records}
    shown = show_json(out, "--rows", "0:")
    seen = []
    for row in shown:
        for segment in row["segments"]:
            if segment["padding"]:
                assert segment["learned"] == []
                continue
            prompt = "".join(row["pieces"][segment["start"] : segment["learned"][0]["start"]])
            assert len(segment["learned"]) == 1
            assert segment["learned"][0]["text"] == answers[prompt] + EOS
            assert segment["learned"][0]["end"] == segment["real_end"]
            seen.append(prompt)
    assert sorted(seen) == sorted(answers)


def test_learned_text_of_every_chat_segment_is_its_assistant_turns(tmp_path, packed, show_json):
    records = chat_records()
    path = write_jsonl(tmp_path / "chat.jsonl", records)
    out = packed(path, "--tokenizer", "packcli:demo", "--messages-field", "messages", "--seq-len", 256)
    by_user = {r["messages"][1]["content"]: r["messages"] for r in records}
    count = 0
    for row in show_json(out, "--rows", "0:"):
        for segment in row["segments"]:
            if segment["padding"]:
                continue
            text = "".join(row["pieces"][segment["start"] : segment["real_end"]])
            user = re.search(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", text).group(1)
            turns = [m["content"] + IM_END for m in by_user[user] if m["role"] == "assistant"]
            assert [run["text"] for run in segment["learned"]] == turns
            count += 1
    assert count == len(records)


def test_boundaries_shown_are_cu_seqlens(tmp_path, packed, cli, show_json):
    path = write_jsonl(tmp_path / "gsm.jsonl", gsm_records(30))
    out = packed(
        path, "--tokenizer", "packcli:demo", "--prompt-field", "question", "--completion-field", "answer",
        "--seq-len", 128, "--pad-to-multiple-of", 8, "--no-shuffle",
    )  # fmt: skip
    rows, _ = load_rows(out)
    shown = show_json(out, "--rows", "0:")
    assert len(shown) == len(rows)
    text = cli("show", out, "--rows", "0:", "--color", "never").stdout
    blocks = text.split("\nrow ")
    for r, row in enumerate(shown):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]].tolist()
        assert row["cu_seqlens"] == cu
        assert [s["start"] for s in row["segments"]] == cu[:-1]
        unpadded = rows.cu_seqlens_unpadded[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
        real = np.diff(unpadded)[: rows.num_segments[r]].tolist()
        assert [s["real_end"] - s["start"] for s in row["segments"] if not s["padding"]] == real
        markers = [int(n.replace(",", "")) for n in re.findall(r"\[seg \d+ · ([\d,]+)\]", blocks[r])]
        assert markers == real
        assert row["segments"][-1]["padding"] == (rows.num_segments[r] < len(cu) - 1)


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_json_round_trips_the_rows(tmp_path, packed, show_json, fmt, demo):
    path = write_jsonl(tmp_path / "chat.jsonl", chat_records(12))
    out = packed(path, "--tokenizer", "packcli:demo", "--messages-field", "messages", "--seq-len", 200, "--format", fmt)
    rows, manifest = load_rows(out)
    shown = show_json(out, "--rows", "0:")
    for r, row in enumerate(shown):
        again = json.loads(json.dumps(row))
        assert again == row
        assert row["row"] == r and row["seq_len"] == manifest["seq_len"]
        assert row["input_ids"] == rows.input_ids[r].tolist()
        assert row["labels"] == rows.labels[r].tolist()
        assert row["position_ids"] == rows.position_ids[r].tolist()
        assert row["max_seqlen"] == int(rows.max_seqlen[r])
        assert row["segments"][-1]["end"] == manifest["seq_len"]
        assert row["learned_tokens"] == int((rows.labels[r] != -100).sum())
        assert row["real_tokens"] == int(rows.real_lengths()[r])
        # pieces joined are the decoded text, segment by segment
        for segment in row["segments"]:
            ids = row["input_ids"][segment["start"] : segment["real_end"]]
            assert "".join(row["pieces"][segment["start"] : segment["real_end"]]) == demo.decode(ids)


def test_rows_are_picked_by_row_range_and_seeded_random(tmp_path, packed, show_json, cli):
    path = write_jsonl(tmp_path / "gsm.jsonl", gsm_records(60))
    out = packed(
        path, "--tokenizer", "packcli:demo", "--prompt-field", "question", "--completion-field", "answer",
        "--seq-len", 64, "--rows-per-shard", 7,
    )  # fmt: skip
    rows, manifest = load_rows(out)
    assert len(manifest["shards"]) > 2
    last = len(rows) - 1
    one = show_json(out, "--row", last)
    assert [r["row"] for r in one] == [last]
    assert one[0]["shard"] == manifest["shards"][-1]["path"]
    assert one[0]["input_ids"] == rows.input_ids[last].tolist()
    assert [r["row"] for r in show_json(out, "--rows", "5:9")] == [5, 6, 7, 8]
    picked = [r["row"] for r in show_json(out, "--random", 4, "--seed", 3)]
    assert picked == [r["row"] for r in show_json(out, "--random", 4, "--seed", 3)]
    assert len(set(picked)) == 4 and picked == sorted(picked)
    for r in show_json(out, "--random", 4, "--seed", 3):
        assert r["input_ids"] == rows.input_ids[r["row"]].tolist()
    result = cli("show", out, "--row", len(rows))
    assert result.exit_code == 2 and "out of range" in result.stderr
    result = cli("show", out, "--row", 1, "--rows", "1:2")
    assert result.exit_code == 2
    result = cli("show", out, "--prompt-field", "question")
    assert result.exit_code == 2 and "raw input only" in result.stderr


def test_colour_only_when_asked_and_plain_marks_learned_text(tmp_path, packed, cli):
    path = write_jsonl(tmp_path / "gsm.jsonl", gsm_records(4))
    out = packed(
        path, "--tokenizer", "packcli:demo", "--prompt-field", "question", "--completion-field", "answer",
        "--seq-len", 256, "--no-shuffle",
    )  # fmt: skip
    plain = cli("show", out).stdout
    assert "\x1b[" not in plain
    assert "«In May" in plain and EOS + "»" in plain
    assert "↵" in plain and "[pad ×" in plain
    assert "row 0  shard-00000.parquet row 0" in plain
    coloured = cli("show", out, "--color", "always").stdout
    assert "\x1b[" in coloured and "«" not in coloured
    assert cli("show", out, "--color", "sometimes").exit_code == 2
    assert cli("show", out, "--no-color").stdout == plain
    assert cli("show", out, "--no-color", "--color", "always").exit_code == 2


def test_tokens_view_lists_each_token_with_position_and_label(tmp_path, packed, cli, show_json):
    path = write_jsonl(tmp_path / "gsm.jsonl", gsm_records(2))
    out = packed(
        path, "--tokenizer", "packcli:demo", "--prompt-field", "question", "--completion-field", "answer",
        "--seq-len", 128, "--no-shuffle",
    )  # fmt: skip
    row = show_json(out)[0]
    lines = cli("show", out, "--tokens").stdout.splitlines()
    cells = [line.split() for line in lines if re.match(r"\s+\d+\s+\d+\s", line)]
    real = [i for s in row["segments"] if not s["padding"] for i in range(s["start"], s["real_end"])]
    assert len(cells) == len(real)
    for cell, i in zip(cells, real):
        assert (int(cell[0]), int(cell[1]), int(cell[-1])) == (
            row["position_ids"][i],
            row["input_ids"][i],
            row["labels"][i],
        )
    markers = [line for line in lines if re.match(r"seg \d+ +[\d,]+ tokens$", line.strip())]
    assert len(markers) == row["num_segments"]
    assert any("pad ×" in line for line in lines)


def test_without_a_tokenizer_ids_are_shown(tmp_path, packed, cli, show_json):
    path = write_jsonl(tmp_path / "ids.jsonl", [{"ids": list(range(5, 5 + n))} for n in (3, 9, 4)])
    out = packed(path, "--ids-field", "ids", "--eos-token", "1", "--pad-id", "0", "--seq-len", 16, "--no-shuffle")
    row = show_json(out)[0]
    assert row["pieces"] is None and row["segments"][0]["learned"][0]["text"] is None
    text = cli("show", out, "--color", "never").stdout
    assert "[seg 1 · 5]5 «6 7 8 1 »" in text and "give --tokenizer" in text
    with_tok = show_json(out, "--tokenizer", "packcli:demo")
    assert with_tok[0]["pieces"] is not None


def test_group_shown_in_the_header(tmp_path, packed, cli, show_json):
    records = [{**r, "lang": "en" if i % 2 else "de"} for i, r in enumerate(gsm_records(10))]
    path = write_jsonl(tmp_path / "g.jsonl", records)
    out = packed(
        path, "--tokenizer", "packcli:demo", "--prompt-field", "question", "--completion-field", "answer",
        "--seq-len", 256, "--group-by", "lang", "--format", "npy",
    )  # fmt: skip
    groups = {r["group"] for r in show_json(out, "--rows", "0:")}
    assert groups == {"en", "de"}
    assert "group 'de'" in cli("show", out, "--rows", "0:").stdout


def test_show_reads_a_remote_output(s3_server, tmp_path, cli, show_json):
    path = write_jsonl(tmp_path / "gsm.jsonl", gsm_records(20))
    for fmt in ("parquet", "npy"):
        url = f"s3://corpus/show-{fmt}"
        args = ("--tokenizer", "packcli:demo", "--prompt-field", "question", "--completion-field", "answer")
        result = cli("pack", path, *args, "--seq-len", 96, "--format", fmt, "-o", url, "--rows-per-shard", 3)
        assert result.exit_code == 0, result.stderr
        local = tmp_path / f"local-{fmt}"
        result = cli("pack", path, *args, "--seq-len", 96, "--format", fmt, "-o", local, "--rows-per-shard", 3)
        verify_dir(local)
        assert cli("verify", url).exit_code == 0
        shown = show_json(url, "--rows", "2:8")
        assert shown == show_json(local, "--rows", "2:8") and len(shown) == 6
        assert {r["shard"] for r in shown} >= {"shard-00001" + (".parquet" if fmt == "parquet" else "")}


def test_help_renders(cli):
    result = cli("show", "--help")
    assert result.exit_code == 0
    for flag in ("--row", "--rows", "--random", "--tokens", "--color", "--json", "--html", "--prompt-field"):
        assert flag in result.stdout
    assert "show" in cli("--help").stdout


# ----------------------------------------------------------------------------- raw input


def written_segments(out) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(ids, labels) of every real segment of an output, sorted."""
    rows, _ = load_rows(out)
    found = []
    for r in range(len(rows)):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
        for k in range(int(rows.num_segments[r])):
            span = slice(int(cu[k]), int(cu[k + 1]))
            found.append((tuple(rows.input_ids[r, span].tolist()), tuple(rows.labels[r, span].tolist())))
    return sorted(found)


def shown_segments(records: list[dict]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    found = []
    for record in records:
        if record["kind"] != "record" or not record["written"]:
            continue
        for s in record["segments"]:
            span = slice(s["start"], s["end"])
            found.append((tuple(record["input_ids"][span]), tuple(record["labels"][span])))
            assert record["position_ids"][span] == list(range(s["end"] - s["start"]))
    return sorted(found)


SFT = ("--tokenizer", "packcli:demo", "--prompt-field", "question", "--completion-field", "answer")


@pytest.mark.parametrize(
    "options",
    [
        ("--seq-len", 64),  # truncate, left: the completions are kept
        ("--seq-len", 64, "--truncation-side", "right"),
        ("--seq-len", 24, "--overlong", "split"),
        ("--seq-len", 24, "--overlong", "split", "--keep-unlearned"),
        ("--seq-len", 96, "--overlong", "drop"),
    ],
)
def test_raw_view_is_what_pack_writes_sft(tmp_path, packed, show_json, options):
    records = gsm_records(12)
    records[3]["answer"] = ""  # a bad record: an empty completion
    records[5] = {"question": "no answer field"}  # a bad record
    records[7]["question"] = records[7]["question"] * 3  # long prompt
    path = write_jsonl(tmp_path / "gsm.jsonl", records)
    common = (*SFT, "--on-bad-record", "skip", *options)
    out = packed(path, *common)
    shown = show_json(path, *common, "--rows", "0:")
    assert shown_segments(shown) == written_segments(out)
    bad = [r for r in shown if r["kind"] == "bad_record"]
    assert [r["location"] for r in bad] == [f"{path}:4", f"{path}:6"]
    assert all(r["pack"] == "skipped by pack" for r in bad)
    assert [r["record"] for r in shown if r["kind"] == "record"] == list(range(10))
    long = next(r for r in shown if r.get("location") == f"{path}:8")
    assert long["tokens"] > options[1] and long["notes"]


def test_raw_view_is_what_pack_writes_chat(tmp_path, packed, show_json, cli):
    records = chat_records(9)
    records[4] = {"messages": [{"role": "user", "content": "only a question"}]}  # no assistant turn
    path = write_jsonl(tmp_path / "chat.jsonl", records)
    common = ("--tokenizer", "packcli:demo", "--messages-field", "messages", "--seq-len", 64)
    out = packed(path, *common)
    shown = show_json(path, *common, "--rows", "0:")
    assert shown_segments(shown) == written_segments(out)
    by_user = {r["messages"][1]["content"]: r["messages"] for r in records if len(r["messages"]) > 1}
    for record in shown:
        if not record["written"]:
            assert record["location"] == f"{path}:5" and "dropped" in record["notes"][0]
            continue
        for s in record["segments"]:
            text = "".join(record["pieces"][s["start"] : s["end"]])
            user = re.search(r"user\n(.*?)<\|im_end\|>", text)
            if user is None:  # truncated from the left: only assistant turns are certain
                continue
            turns = [m["content"] + IM_END for m in by_user[user.group(1)] if m["role"] == "assistant"]
            assert [run["text"] for run in s["learned"]] == turns
    text = cli("show", path, *common, "--row", 0, "--color", "never").stdout
    assert text.startswith(f"record 0  {path}:1")
    assert "truncated to 64 tokens" in text or "segment" in text


def test_raw_view_notes_a_record_pack_would_stop_at(tmp_path, cli, show_json):
    records = gsm_records(3)
    records[1] = {"question": 3}
    path = write_jsonl(tmp_path / "gsm.jsonl", records)
    shown = show_json(path, *SFT, "--rows", "0:")
    assert [r["kind"] for r in shown] == ["record", "record", "bad_record"]
    assert "pack stops here" in shown[-1]["pack"]
    long = show_json(path, *SFT, "--seq-len", 8, "--overlong", "error", "--row", 0)
    assert not long[0]["written"] and "pack stops here" in long[0]["notes"][0]
    result = cli("show", path, *SFT, "--random", 2)
    assert result.exit_code == 2


def test_learned_only_shows_the_learned_text_alone(tmp_path, packed, cli):
    path = write_jsonl(tmp_path / "chat.jsonl", chat_records(3))
    out = packed(path, "--tokenizer", "packcli:demo", "--messages-field", "messages", "--seq-len", 256)
    text = cli("show", out, "--learned-only", "--color", "never").stdout
    assert "is prime." in text and "(checked)" in text
    assert "system" not in text and "name a prime" not in text and "«" not in text
    assert text.count("…") >= 3


def test_show_takes_every_input_option_of_pack_defined_alike():
    import typer

    from packcli.cli.app import app
    from packcli.cli.options import INPUT_OPTIONS

    commands = typer.main.get_command(app).commands
    pack = {p.name: p for p in commands["pack"].params}
    show = {p.name: p for p in commands["show"].params}
    for name in INPUT_OPTIONS:
        a, b = pack[name], show[name]
        assert (a.opts, a.secondary_opts, a.default, a.help, a.metavar, a.rich_help_panel) == (
            b.opts,
            b.secondary_opts,
            b.default,
            b.help,
            b.metavar,
            b.rich_help_panel,
        ), name


def test_no_colour_and_unfinished_outputs(tmp_path, packed, cli, monkeypatch):
    path = write_jsonl(tmp_path / "gsm.jsonl", gsm_records(3))
    out = packed(path, *SFT, "--seq-len", 256)
    monkeypatch.setenv("NO_COLOR", "1")
    plain = cli("show", out).stdout
    assert "\x1b[" not in plain and "«" in plain
    (out / "manifest.json").unlink()
    result = cli("show", out)
    assert result.exit_code == 1 and "not a complete packcli output" in result.stderr
    result = cli("stats", out, "--html", tmp_path / "s.html", "--tokenizer", "packcli:demo", "--seq-len", 64)
    assert result.exit_code == 2


def test_whitespace_is_made_visible():
    from packcli.cli.show_render import cell_text, visible

    assert visible("a\n  b\tc\r", False) == ("a↵\n··b→c␍", False)
    assert visible("  x", True) == ("··x", False)
    assert visible("  x", False) == ("  x", False)
    assert visible("\n", False) == ("↵\n", True)
    assert visible("\x00", False)[0] == "\\x00"
    assert cell_text(" the\n") == "·the↵"


def test_pieces_of_other_tokenizer_families(tmp_path, word_tokenizer):
    from helpers import unigram_tokenizer

    from packcli.inspect.show import load_decoder
    from packcli.tokenize.tokenizer import load_tokenizer

    texts = ["the cat sat on the mat", "a dog ran far away", "packing rows of tokens"] * 20
    spm = load_decoder(str(unigram_tokenizer(tmp_path / "spm", texts, vocab_size=60)))
    ids = load_tokenizer(str(tmp_path / "spm")).encode("the cat sat", add_special_tokens=False)
    pieces = [spm.piece(i) for i in ids]
    assert "▁" not in "".join(pieces) and "".join(pieces).strip() == spm.text(ids) == "the cat sat"
    words = load_decoder(str(word_tokenizer))
    assert [words.piece(i) for i in (4, 5, 1)] == ["w0", "w1", "</s>"] and 1 in words.special
    demo = load_decoder("packcli:demo")
    ids = load_tokenizer("packcli:demo").encode("naïve café →", add_special_tokens=False)
    pieces = demo.pieces(ids)
    assert "".join(pieces) == "naïve café →" == demo.text(ids)
    split = pieces.index("ï")  # its two bytes are two tokens: the character goes with the second
    assert pieces[split - 1] == "" and demo.piece(ids[split - 1]) == "\\xc3"


def test_a_tokenizer_other_than_the_outputs_is_named(tmp_path, packed, cli, word_tokenizer):
    import shutil

    tok = shutil.copytree(word_tokenizer, tmp_path / "tok")
    path = write_jsonl(tmp_path / "t.jsonl", [{"text": "w1 w2 w3"}, {"text": "w4 w5"}])
    out = packed(path, "--tokenizer", tok, "--seq-len", 16)
    result = cli("show", out, "--json")
    assert result.stderr == "" and json.loads(result.stdout)[0]["pieces"][:3] == ["w1", "w2", "w3"]
    result = cli("show", out, "--json", "--tokenizer", "packcli:demo")
    assert "is not the tokenizer this output was packed with" in result.stderr
    shutil.rmtree(tok)
    result = cli("show", out, "--json")
    assert result.exit_code == 0 and "cannot be loaded here" in result.stderr
    assert json.loads(result.stdout)[0]["pieces"] is None


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_each_segment_is_named_by_its_source(tmp_path, cli, show_json, fmt):
    from mixed import SOURCES, mixed_output

    mixed = mixed_output(tmp_path / "o", fmt, multiple=4, seq_len=32)  # ids shown: markers start their lines
    names = [name for name, _, _ in SOURCES]
    came_from: dict[tuple, set] = {}
    for index, sequences in enumerate(mixed.sequences):
        for tokens in sequences:
            came_from.setdefault(tuple(tokens), set()).add(names[index])
    shown = show_json(mixed.out, "--rows", "0:")
    text = cli("show", mixed.out, "--rows", "0:", "--color", "never").stdout
    blocks = text.split("\nrow ")
    page = tmp_path / "rows.html"
    assert cli("show", mixed.out, "--rows", "0:", "--html", page).exit_code == 0
    html = page.read_text()
    seen = set()
    for row, block in zip(shown, blocks, strict=True):
        real = [s for s in row["segments"] if not s["padding"]]
        for segment in real:
            assert segment["source"] in came_from[tuple(row["input_ids"][segment["start"] : segment["real_end"]])]
            seen.add(segment["source"])
            attrs = f'data-row="{row["row"]}" data-seg="{segment["index"]}" data-start="{segment["start"]}"'
            assert (
                f'{attrs} data-end="{segment["end"]}" data-real-end="{segment["real_end"]}" data-source="{segment["source"]}"'
                in html
            )
        assert all(s["source"] is None for s in row["segments"] if s["padding"])
        markers = re.findall(r"\[seg \d+ · [\d,]+ · (\w+)\]", block)
        assert markers == [s["source"] for s in real]
    assert seen == set(names)
    tokens = cli("show", mixed.out, "--row", 0, "--tokens").stdout
    first = next(s for s in shown[0]["segments"] if not s["padding"])
    assert f"{first['real_end'] - first['start']:,} tokens · {first['source']}" in tokens


def test_segments_of_an_output_without_sources_have_no_source_key(tmp_path, packed, show_json):
    path = write_jsonl(tmp_path / "ids.jsonl", [{"ids": list(range(5, 5 + n))} for n in (3, 9, 4)])
    out = packed(path, "--ids-field", "ids", "--eos-token", "1", "--pad-id", "0", "--seq-len", 16)
    assert all("source" not in s for row in show_json(out, "--rows", "0:") for s in row["segments"])


# ----------------------------------------------------------------------------- preference pairs

PAIR_FIELDS = ("--prompt-field", "q", "--chosen-field", "good", "--rejected-field", "bad")


def pair_records() -> list[dict]:
    return [
        {"q": f"Question {i}: name a prime.", "good": f"{[2, 3, 5][i % 3]} is prime.", "bad": "Nine.", "w": 0.5 + i % 2}
        for i in range(12)
    ]


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_a_pair_is_shown_labelled_side_by_side(tmp_path, packed, cli, show_json, demo, fmt):
    records = pair_records()
    path = write_jsonl(tmp_path / "pairs.jsonl", records)
    out = packed(
        path, "--tokenizer", "packcli:demo", "--seq-len", 64, "--format", fmt, *PAIR_FIELDS, "--weight-field", "w"
    )
    views = show_json(out, "--rows", "0:100")
    seen = set()
    for view in views:
        real = [s for s in view["segments"] if not s["padding"]]
        assert view["pairs"] == len(real) // 2
        for chosen, rejected in zip(real[0::2], real[1::2]):
            assert (chosen["side"], rejected["side"]) == ("chosen", "rejected") and chosen["pair"] == rejected["pair"]
            record = records[chosen["pair"]]
            assert chosen["weight"] == rejected["weight"] == record["w"]
            assert [r["text"] for r in chosen["learned"]] == [record["good"] + demo.eos_token]
            seen.add(chosen["pair"])
    assert seen == set(range(12))
    shown = cli("show", out, "--row", 0, "--color", "never")
    assert re.search(r"seg 0 · \d+ · pair \d+ chosen · weight (0\.5|1\.5)", shown.stdout)
    assert (
        re.search(r"seg 1 · \d+ · pair \d+ rejected", shown.stdout) and " pairs · " in shown.stdout
    ) or " pair · " in shown.stdout
    tokens = cli("show", out, "--row", 0, "--tokens", "--color", "never")
    assert "pair" in tokens.stdout and "chosen" in tokens.stdout


def test_raw_pairs_are_shown_as_pack_would_cut_them(tmp_path, show_json):
    records = pair_records()[:3]
    records[1]["bad"] = records[1]["good"]  # the same on both sides
    records[2]["q"] = " ".join(["long"] * 200)
    path = write_jsonl(tmp_path / "pairs.jsonl", records)
    views = show_json(path, "--tokenizer", "packcli:demo", "--seq-len", 64, *PAIR_FIELDS, "--rows", "0:3")
    assert [v["written"] for v in views] == [True, False, True]
    assert [s["side"] for s in views[0]["segments"]] == ["chosen", "rejected"]
    assert views[1]["notes"] == ["skipped and counted: the pair's chosen and rejected are the same"]
    assert (
        views[2]["notes"][0].startswith("truncated: ")
        and "cut from the start of both sides' prompt" in views[2]["notes"][0]
    )
    assert sum(s["end"] - s["start"] for s in views[2]["segments"]) <= 64
