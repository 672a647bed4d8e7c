"""`packcli stats`: figures recomputed from the shards equal the ones counted here by hand;
the raw-input what-if equals packing done here; charts fit an 80-column terminal."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
from helpers import load_rows, random_texts, write_jsonl
from mixed import mixed_output
from test_write_report import naive_per_source

from packcli.cli.render import render_compare, render_stats, render_what_if
from packcli.engine.local import PackOptions
from packcli.inspect.stats import stats_dir
from packcli.inspect.what_if import WhatIfOptions, apply_overlong, pad_to_longest_tokens, stats_raw, what_if
from packcli.plan.kernels.pack import ALGORITHMS, pack_lengths


@pytest.fixture
def corpus(tmp_path):
    texts = random_texts(120, seed=11, max_words=50)
    return write_jsonl(tmp_path / "in" / "d.jsonl", [{"text": t} for t in texts]), texts


def raw_options(paths, seq_lens, **input_options) -> WhatIfOptions:
    """stats' options on raw input: pack's input options (seq_len and output unused)."""
    return WhatIfOptions(PackOptions(inputs=[str(p) for p in paths], output="", seq_len=0, **input_options), seq_lens)


def by_hand(out):
    """Efficiency figures counted row by row in plain Python."""
    rows, manifest = load_rows(out)
    seq_len = manifest["seq_len"]
    fills, per_row, lengths = [], [], []
    for r in range(len(rows)):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]].tolist()
        k = int(rows.num_segments[r])
        per_row.append(k)
        lengths += [cu[i + 1] - cu[i] for i in range(k)]
        fills.append(cu[k])
    real = sum(fills)
    return {
        "rows": len(rows),
        "sequences_packed": len(lengths),
        "real_tokens": real,
        "padding_tokens": len(rows) * seq_len - real,
        "label_tokens": int((rows.labels != -100).sum()),
        "efficiency": real / (len(rows) * seq_len),
        "lower_bound_rows": math.ceil(real / seq_len),
        "sequences_per_row": {"mean": len(lengths) / len(rows), "max": max(per_row)},
        "fill_per_row": {"min": min(fills), "median": float(np.median(fills)), "mean": real / len(rows)},
        "sequence_length": {"min": min(lengths), "median": float(np.median(lengths)), "max": max(lengths)},
        "no_packing": {"rows": len(lengths), "efficiency": real / (len(lengths) * seq_len)},
        "fills": fills,
        "per_row": per_row,
        "lengths": lengths,
    }


@pytest.mark.parametrize(
    "options", [("--format", "npy"), ("--mode", "concat", "--rows-per-shard", "3"), ("--algorithm", "nf")]
)
def test_stats_on_output_equals_figures_counted_by_hand(packed, corpus, word_tokenizer, options):
    path, _ = corpus
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 48, *options)
    report = stats_dir(out)
    expected = by_hand(out)
    for key in (
        "rows",
        "sequences_packed",
        "real_tokens",
        "padding_tokens",
        "label_tokens",
        "efficiency",
        "lower_bound_rows",
        "sequences_per_row",
        "fill_per_row",
        "sequence_length",
        "no_packing",
    ):
        assert report[key] == pytest.approx(expected[key]), key
    # Every distribution adds up to its population, and the bins tile their range.
    dist = report["distributions"]
    assert sum(b["count"] for b in dist["fill_per_row"]) == expected["rows"]
    assert sum(b["count"] for b in dist["sequences_per_row"]) == expected["rows"]
    assert sum(b["count"] for b in dist["sequence_length"]) == expected["sequences_packed"]
    for bins in dist.values():
        assert all(a["to"] + 1 == b["from"] for a, b in zip(bins, bins[1:]))
    fills = np.array(expected["fills"])
    for b in dist["fill_per_row"]:
        assert b["count"] == int(((fills >= b["from"]) & (fills <= b["to"])).sum())
    assert dist["fill_per_row"][-1]["to"] == 48
    assert dist["sequence_length"][-1]["to"] == max(expected["lengths"])


def test_stats_cli_json_and_charts_fit_80_columns(packed, corpus, word_tokenizer, cli):
    from rich.console import Console

    path, _ = corpus
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64)
    report = json.loads(cli("stats", out, "--json").stdout)
    assert report["efficiency"] == pytest.approx(by_hand(out)["efficiency"])
    console = Console(width=80, record=True, force_terminal=False)
    render_stats(console, str(out), report)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    for title in ("real tokens per row", "sequences per row", "sequence length"):
        assert title in text
    assert "█" in text and "%" in text
    result = cli("stats", out)
    assert result.exit_code == 0 and "efficiency" in result.stdout and "sequences per row" in result.stdout


def test_several_dirs_side_by_side(packed, corpus, word_tokenizer, cli):
    from rich.console import Console

    path, _ = corpus
    a = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64)
    b = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--algorithm", "nf", "--format", "npy")
    both = json.loads(cli("stats", a, b, "--json").stdout)
    assert both[str(a)]["rows"] == stats_dir(a)["rows"] and both[str(b)]["rows"] == stats_dir(b)["rows"]
    console = Console(width=80, record=True)
    render_compare(console, ["out1", "out2"], [both[str(a)], both[str(b)]])
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    efficiency_line = next(line for line in text.splitlines() if "efficiency" in line)
    assert (
        f"{both[str(a)]['efficiency']:.2%}" in efficiency_line
        and f"{both[str(b)]['efficiency']:.2%}" in efficiency_line
    )
    result = cli("stats", a, b)
    assert result.exit_code == 0 and str(a) in result.stdout and "bin nf" in result.stdout


# ----------------------------------------------------------------------------- raw input


def test_what_if_equals_packing_done_here():
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 257, size=500).astype(np.int64)
    lengths[[10, 20]] = [700, 256]  # one sequence over seq_len 256, split into 3 pieces; one exactly 256
    result = what_if(lengths, 256, batch_size=4, buffer_size=200)
    pieces = np.concatenate([lengths[:10], [256, 256, 188], lengths[11:]])
    real = int(lengths.sum())
    assert result["sequences"] == len(pieces) and result["real_tokens"] == real
    methods = {m["method"]: m for m in result["methods"]}
    for algorithm in ALGORITHMS:  # windows of 200 sequences, as pack packs them
        rows = sum(pack_lengths(pieces[s : s + 200], 256, algorithm).n_rows for s in range(0, len(pieces), 200))
        assert methods[algorithm]["rows"] == rows
        assert methods[algorithm]["efficiency"] == pytest.approx(real / (rows * 256))
        assert methods[algorithm]["speedup_vs_pad_to_seq_len"] == pytest.approx(len(pieces) / rows)
        assert methods[algorithm]["seconds"] >= 0
    batches = [pieces[i : i + 4] for i in range(0, len(pieces), 4)]
    longest = sum(len(b) * int(b.max()) for b in batches)
    assert methods["pad to longest/4"]["tokens_processed"] == longest
    assert methods["pad to longest/4"]["efficiency"] == pytest.approx(real / longest)
    assert methods["pad to seq_len"]["efficiency"] == pytest.approx(real / (len(pieces) * 256))
    assert methods["bfd"]["speedup_vs_pad_to_longest"] == pytest.approx(longest / (methods["bfd"]["rows"] * 256))
    assert methods["concat"]["rows"] == math.ceil(real / 256) == methods["lower bound"]["rows"]


def test_overlong_policies_and_baselines():
    lengths = np.array([5, 12, 3, 9], dtype=np.int64)
    assert apply_overlong(lengths, 4, "split")[0].tolist() == [4, 1, 4, 4, 4, 3, 4, 4, 1]
    assert apply_overlong(lengths, 4, "truncate")[0].tolist() == [4, 4, 3, 4]
    assert apply_overlong(lengths, 4, "truncate")[1] == 1 + 8 + 5
    assert apply_overlong(lengths, 4, "drop") == (pytest.approx(np.array([3])), 26)
    assert pad_to_longest_tokens(lengths, 3) == 3 * 12 + 9 and pad_to_longest_tokens(lengths, 1) == 29
    from packcli.core.errors import PackcliError

    with pytest.raises(PackcliError, match="a.jsonl:2: document has 12 tokens, more than --seq-len 4"):
        what_if(lengths, 4, overlong="error", first_longer=("a.jsonl:2", 12))


def test_stats_raw_matches_pack_and_writes_nothing(tmp_path, corpus, word_tokenizer, packed):
    path, texts = corpus
    before = sorted(p.name for p in tmp_path.rglob("*"))
    options = raw_options([path], [32, 64], tokenizer=str(word_tokenizer))
    report = stats_raw(options)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    lengths = [len(t.split()) + 1 for t in texts]  # one token per word, plus EOS
    assert report["documents"]["read"] == len(texts) and report["tokens"] == sum(lengths)
    assert report["sequence_length"]["max"] == max(lengths)
    assert [r["seq_len"] for r in report["what_if"]] == [32, 64]
    for result in report["what_if"]:
        out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", result["seq_len"])
        packed_report = json.loads((out / "report.json").read_text())
        bfd = next(m for m in result["methods"] if m["method"] == "bfd")
        assert bfd["rows"] == packed_report["rows"] and bfd["efficiency"] == pytest.approx(packed_report["efficiency"])
        no_packing = next(m for m in result["methods"] if m["method"] == "pad to seq_len")
        assert no_packing["efficiency"] == pytest.approx(packed_report["no_packing"]["efficiency"])
        assert result["overlong"]["count"] == packed_report["overlong"]["count"]


def test_stats_raw_cli_table_json_and_80_columns(tmp_path, corpus, word_tokenizer, cli):
    from rich.console import Console

    path, _ = corpus
    result = cli(
        "stats", path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--seq-len", 128, "--batch-size", 4, "--json"
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert [r["seq_len"] for r in report["what_if"]] == [32, 128]
    assert {m["method"] for m in report["what_if"][0]["methods"]} >= {*ALGORITHMS, "pad to seq_len", "pad to longest/4"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # nothing written
    report["_lengths"] = None
    console = Console(width=80, record=True)
    render_what_if(console, report)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "what if --seq-len 32" in text and "what if --seq-len 128" in text and "bfd (default)" in text
    table = cli("stats", path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--no-eos")
    assert table.exit_code == 0 and "speed-up" in table.stdout and "with EOS" not in table.stdout


def test_stats_usage_errors(tmp_path, corpus, word_tokenizer, packed, cli):
    path, _ = corpus
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32)
    mixed = cli("stats", out, path, "--tokenizer", word_tokenizer, "--seq-len", 32)
    assert mixed.exit_code == 2 and "not both" in mixed.stderr
    assert cli("stats", out, "--seq-len", 32).exit_code == 2
    assert "--tokenizer is required" in cli("stats", path, "--seq-len", 32).stderr
    given = cli("stats", out, "--text-field", "body", "--no-eos")
    assert given.exit_code == 2 and "--text-field, --eos: for raw input only" in given.stderr
    no_seq = cli("stats", path, "--tokenizer", word_tokenizer)
    assert no_seq.exit_code == 2 and "--seq-len" in no_seq.stderr
    bad = cli("stats", path, "--tokenizer", word_tokenizer, "--seq-len", 0)
    assert bad.exit_code == 2 and "--seq-len must be between" in bad.stderr
    hint = cli("stats", path)
    assert hint.exit_code == 1 and "pass --tokenizer and --seq-len" in hint.stderr
    too_long = cli("stats", path, "--tokenizer", word_tokenizer, "--seq-len", 8, "--overlong", "error")
    assert too_long.exit_code == 1 and f"{path}:" in too_long.stderr and "more than --seq-len 8" in too_long.stderr


def test_plot_needs_matplotlib(tmp_path, corpus, word_tokenizer, packed, cli, monkeypatch):
    path, _ = corpus
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    for args in ([out], [path, "--tokenizer", word_tokenizer, "--seq-len", 32]):
        result = cli("stats", *args, "--plot", tmp_path / "p.png")
        assert result.exit_code == 1
        assert result.stderr == "error: --plot needs matplotlib: pip install 'packcli[plot]'\n"
    assert not (tmp_path / "p.png").exists()


def test_plot_writes_png(tmp_path, corpus, word_tokenizer, packed, cli):
    pytest.importorskip("matplotlib")
    path, _ = corpus
    a = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 32)
    b = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64)
    for name, args in (
        ("one", [a]),
        ("two", [a, b]),
        ("raw", [path, "--tokenizer", word_tokenizer, "--seq-len", 32, "--seq-len", 64]),
    ):
        image = tmp_path / f"{name}.png"
        result = cli("stats", *args, "--plot", image)
        assert result.exit_code == 0, result.stderr
        assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and image.stat().st_size > 10_000


def stats_and_pack(cli, packed, path, seq_len, *options):
    """stats' what-if for one --seq-len, and the report of pack run with the same options."""
    result = cli("stats", path, "--seq-len", seq_len, *options, "--json")
    assert result.exit_code == 0, result.stderr
    what = json.loads(result.stdout)["what_if"][0]
    report = json.loads((packed(path, "--seq-len", seq_len, *options) / "report.json").read_text())
    return what, report


def assert_same_sequences(what, report):
    bfd = next(m for m in what["methods"] if m["method"] == "bfd")
    assert bfd["rows"] == report["rows"]
    assert what["sequences"] == report["sequences_packed"] and what["real_tokens"] == report["real_tokens"]
    assert what["overlong"]["count"] == report["overlong"]["count"]
    assert what["overlong"]["tokens_lost"] == report["overlong"]["tokens_lost"]
    assert what["unlearned"] == report["unlearned"]


def test_stats_raw_prompt_completion_truncates_and_drops_as_pack(tmp_path, cli, packed, word_tokenizer):
    records = [{"q": " ".join(["w5"] * k), "a": " ".join(["w7"] * (k % 4 + 1))} for k in range(1, 40)]
    path = write_jsonl(tmp_path / "sft.jsonl", records)
    options = ("--tokenizer", word_tokenizer, "--prompt-field", "q", "--completion-field", "a")
    what, report = stats_and_pack(cli, packed, path, 24, *options)
    assert what["overlong"]["policy"] == "truncate"  # pack's default for SFT, not split
    assert what["overlong"]["dropped_without_labels"] == report["overlong"]["dropped_without_labels"] == 0
    assert_same_sequences(what, report)
    what, report = stats_and_pack(cli, packed, path, 24, *options, "--truncation-side", "right")
    assert what["overlong"]["dropped_without_labels"] == report["overlong"]["dropped_without_labels"] > 0
    assert_same_sequences(what, report)
    long_enough, _ = stats_and_pack(cli, packed, path, 64, *options)
    lengths = [len(r["q"].split()) + len(r["a"].split()) + 1 for r in records]
    assert long_enough["real_tokens"] == sum(lengths) and long_enough["overlong"]["count"] == 0


def test_stats_raw_messages_as_pack(tmp_path, cli, packed):
    conversations = [
        [{"role": "user", "content": "hi " * k}, {"role": "assistant", "content": "hello " * (k % 3 + 1)}]
        for k in range(1, 25)
    ]
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": c} for c in conversations])
    options = ("--tokenizer", "packcli:demo", "--messages-field", "messages", "--train-on", "assistant,user")
    what, report = stats_and_pack(cli, packed, path, 256, *options)
    assert_same_sequences(what, report)
    assert what["sequences"] == len(conversations)
    short, short_report = stats_and_pack(cli, packed, path, 32, *options, "--overlong", "drop")
    assert_same_sequences(short, short_report)
    assert 0 < short["overlong"]["count"] < len(conversations)


def test_stats_raw_token_ids_without_tokenizer(tmp_path, cli, packed):
    rng = np.random.default_rng(5)
    records = [{"ids": rng.integers(3, 90, size=k).tolist()} for k in rng.integers(1, 40, size=60)]
    for record in records:
        record["labels"] = [-100] * (len(record["ids"]) // 2) + record["ids"][len(record["ids"]) // 2 :]
    path = write_jsonl(tmp_path / "ids.jsonl", records)
    options = ("--ids-field", "ids", "--labels-field", "labels", "--eos-token", "2", "--pad-id", "0")
    what, report = stats_and_pack(cli, packed, path, 16, *options)
    assert_same_sequences(what, report)
    plain, _ = stats_and_pack(cli, packed, path, 64, "--ids-field", "ids", "--eos-token", "2", "--pad-id", "0")
    assert plain["real_tokens"] == sum(len(r["ids"]) + 1 for r in records)
    table = cli("stats", path, "--seq-len", 64, "--ids-field", "ids", "--eos-token", "2", "--pad-id", "0")
    assert table.exit_code == 0 and "(token ids, with EOS;" in table.stdout
    no_pad = cli("stats", path, "--seq-len", 64, "--ids-field", "ids", "--no-eos")
    assert no_pad.exit_code == 1 and "--pad-id" in no_pad.stderr


def test_stats_raw_workers_and_backend_do_not_change_lengths(tmp_path, corpus, word_tokenizer):
    path, texts = corpus
    expected = [len(t.split()) + 1 for t in texts]
    for options in (
        {"workers": 2, "tokenizer_backend": "hf"},
        {"workers": 1},
        {"workers": 2, "tokenizer_backend": "auto"},
    ):
        report = stats_raw(raw_options([path], [64], tokenizer=str(word_tokenizer), **options))
        assert report["tokens"] == sum(expected) and report["sequence_length"]["max"] == max(expected), options


def test_what_if_per_group_and_with_a_cap(tmp_path, cli, word_tokenizer):
    import json as _json

    records = [{"text": " ".join(["w1"] * (1 + i % 9)), "g": ["x", "y", None][i % 3]} for i in range(60)]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(_json.dumps(r) + "\n" for r in records))
    result = cli(
        "stats",
        path,
        "--tokenizer",
        word_tokenizer,
        "--seq-len",
        16,
        "--group-by",
        "g",
        "--max-sequences-per-row",
        2,
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    what_if = _json.loads(result.stdout)["what_if"][0]
    groups = what_if["groups"]
    assert [(g["value"], g["documents"], g["sequences"]) for g in groups] == [
        ("x", 20, 20),
        ("y", 20, 20),
        (None, 20, 20),
    ]
    methods = {m["method"]: m for m in what_if["methods"]}
    for algorithm in ("nf", "ff", "ffd", "bfd", "spfhp", "lpfhp"):
        assert methods[algorithm]["rows"] == sum(g["rows"][algorithm] for g in groups)
        assert methods[algorithm]["rows"] >= 30  # 60 sequences, at most 2 a row
        assert methods[algorithm]["uncapped_rows"] <= methods[algorithm]["rows"]
    tokens = [sum(2 + i % 9 for i in range(60) if i % 3 == k) for k in range(3)]
    assert [g["real_tokens"] for g in groups] == tokens
    assert methods["concat"]["rows"] == sum(-(-t // 16) for t in tokens)


def test_stats_on_a_grouped_output_measures_each_group(tmp_path, packed, word_tokenizer):
    import json as _json

    from packcli.inspect.stats import stats_dir

    records = [{"text": " ".join(["w2"] * (1 + i % 7)), "g": ["x", "y"][i % 2]} for i in range(40)]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(_json.dumps(r) + "\n" for r in records))
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 16, "--group-by", "g", "--format", "npy")
    report = stats_dir(str(out))
    manifest = _json.loads((out / "manifest.json").read_text())
    keys = ("id", "value", "documents", "sequences", "rows", "real_tokens", "efficiency")
    assert report["groups"] == [{k: entry[k] for k in keys} for entry in manifest["groups"]]
    assert sum(g["rows"] for g in report["groups"]) == report["rows"]


def test_stats_raw_pads_to_a_multiple_as_pack(tmp_path, corpus, cli, packed, word_tokenizer):
    path, texts = corpus
    options = ("--tokenizer", word_tokenizer, "--pad-to-multiple-of", 8)
    what, report = stats_and_pack(cli, packed, path, 64, *options)
    assert_same_sequences(what, report)
    assert what["pad_to_multiple_of"] == 8 and what["real_tokens"] == sum(len(t.split()) + 1 for t in texts)
    bfd = next(m for m in what["methods"] if m["method"] == "bfd")
    assert bfd["efficiency"] == pytest.approx(report["efficiency"])  # real tokens, not the pads
    pieces = apply_overlong(np.array([len(t.split()) + 1 for t in texts]), 64, "split")[0]
    assert bfd["rows"] == pack_lengths(-(-pieces // 8) * 8, 64, "bfd").n_rows
    assert bfd["rows"] > next(m for m in what_if(pieces, 64)["methods"] if m["method"] == "bfd")["rows"]
    table = cli("stats", path, "--seq-len", 64, *options)
    assert table.exit_code == 0 and "each padded to a multiple of 8" in table.stdout
    refused = cli("stats", path, "--seq-len", 60, *options)
    assert refused.exit_code == 2 and "--seq-len 60 is not a multiple of --pad-to-multiple-of 8" in refused.stderr


@pytest.mark.parametrize("multiple", [None, 4])
def test_stats_raw_drops_unlearned_split_pieces_as_pack(tmp_path, cli, packed, multiple):
    rng = np.random.default_rng(8)
    records = []
    for k in rng.integers(1, 60, size=50):
        ids = rng.integers(3, 90, size=int(k)).tolist()
        learned = int(rng.integers(0, 4))  # some learn nothing at all; most only their last tokens
        records.append({"ids": ids, "labels": [-100] * (len(ids) - learned) + ids[len(ids) - learned :]})
    path = write_jsonl(tmp_path / "ids.jsonl", records)
    options = ["--ids-field", "ids", "--labels-field", "labels", "--eos-token", "2", "--pad-id", "0"]
    options += ["--overlong", "split", "--no-eos"] + ([] if multiple is None else ["--pad-to-multiple-of", multiple])
    what, report = stats_and_pack(cli, packed, path, 16, *options)
    assert_same_sequences(what, report)
    causes = report["unlearned"]["by_cause"]
    assert causes["split_pieces"]["sequences"] > 0 and causes["no_labels"]["sequences"] > 0
    kept, kept_report = stats_and_pack(cli, packed, path, 16, *options, "--keep-unlearned")
    assert_same_sequences(kept, kept_report)
    assert kept["sequences"] > what["sequences"] and kept["unlearned"]["policy"] == "keep"


def tokens_that_left(report) -> int:
    """What pack's report says left the output: cut or dropped by --overlong, segments with
    nothing to learn (when dropped), a concat remainder (when dropped)."""
    left = report["overlong"]["tokens_lost"]
    left += report["unlearned"]["tokens"] if report["unlearned"]["policy"] == "drop" else 0
    remainder = report.get("remainder")
    return left + (remainder["tokens"] if remainder and remainder["policy"] == "drop" else 0)


@pytest.mark.parametrize(
    "kind, options",
    [
        ("sft", ("--overlong", "split")),
        ("sft", ("--overlong", "truncate", "--truncation-side", "right")),
        ("sft", ("--overlong", "drop")),
        ("chat", ("--overlong", "split")),
        ("chat", ("--overlong", "truncate")),
        ("sft", ("--mode", "concat", "--remainder", "drop")),
        ("chat", ("--mode", "concat")),
    ],
)
def test_every_token_that_leaves_is_counted_by_pack_and_the_what_if(
    tmp_path, cli, packed, word_tokenizer, kind, options
):
    if kind == "sft":
        records = [{"q": " ".join(["w5"] * (3 * k)), "a": " ".join(["w7"] * (k % 5 + 1))} for k in range(1, 30)]
        fields = ("--tokenizer", word_tokenizer, "--prompt-field", "q", "--completion-field", "a")
    else:
        records = [
            {"messages": [{"role": "user", "content": "hi " * (7 * k)}, {"role": "assistant", "content": "ok " * k}]}
            for k in range(1, 20)
        ] + [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]}]
        fields = ("--tokenizer", "packcli:demo", "--messages-field", "messages")
    path = write_jsonl(tmp_path / f"{kind}.jsonl", records)
    report = json.loads((packed(path, *fields, "--seq-len", 32, *options) / "report.json").read_text())
    assert report["tokens_read"] == report["real_tokens"] + tokens_that_left(report)
    if report["mode"] == "bin":
        assert report["unlearned"]["tokens"] > 0 or report["overlong"]["tokens_lost"] > 0
        what = json.loads(cli("stats", path, *fields, "--seq-len", 32, *options, "--json").stdout)
        result = what["what_if"][0]
        assert what["tokens"] == report["tokens_read"]
        assert result["real_tokens"] == report["real_tokens"]
        assert result["overlong"]["tokens_lost"] + result["unlearned"]["tokens"] == tokens_that_left(report)


# ----------------------------------------------------------------------------- a mixture's sources


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_stats_of_a_mixture_measure_each_source_again(tmp_path, cli, fmt):
    out = mixed_output(tmp_path / "o", fmt, multiple=4, seq_len=32).out
    manifest = json.loads((out / "manifest.json").read_text())
    listed = [dict(source["tokens"]) for source in manifest["sources"]]
    for source in manifest["sources"]:  # what the manifest says of tokens is not what stats shows
        source["tokens"]["out"] = source["tokens"]["learned"] = 0
    (out / "manifest.json").write_text(json.dumps(manifest))
    want = naive_per_source([load_rows(out)[0]])
    report = json.loads(cli("stats", out, "--json").stdout)
    assert [s["name"] for s in report["sources"]] == ["web", "code", "chat"]
    assert [s["tokens"]["out"] for s in report["sources"]] == want[:, 1].tolist() == [t["out"] for t in listed]
    assert [s["tokens"]["learned"] for s in report["sources"]] == want[:, 2].tolist() == [t["learned"] for t in listed]
    assert [s["tokens"]["in"] for s in report["sources"]] == [t["in"] for t in listed]
    assert report["sources"][0]["documents"] == manifest["sources"][0]["documents"]
    assert sum(want[:, 1]) == report["real_tokens"]


def test_the_stats_table_of_a_mixture(tmp_path, cli):
    from rich.console import Console

    out = mixed_output(tmp_path / "o").out
    report = stats_dir(out)
    result = cli("stats", out)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100  # COLUMNS=100 (conftest)
    assert "sources" in result.stdout and "source documents" in result.stdout
    for source in report["sources"]:
        row = next(line for line in lines if f"│ {source['name']} " in line and "%" in line)
        tokens = source["tokens"]
        for cell in (
            f"{source['weight']:g}",
            f"{source['achieved_share']:.1%}",
            f"{tokens['in']:,}",
            f"{tokens['out']:,}",
        ):
            assert cell in row, (cell, row)
        docs = next(line for line in lines if f"│ {source['name']} " in line and "%" not in line)
        assert f"{source['documents']['read']:,}" in docs and f"{source['documents']['taken']:,}" in docs
    console = Console(width=80, record=True)
    render_stats(console, str(out), report)
    assert max(len(line) for line in console.export_text().splitlines()) <= 80


def test_the_stats_page_of_a_mixture_shows_its_sources(tmp_path, cli):
    out = mixed_output(tmp_path / "o", "npy").out
    page = tmp_path / "stats.html"
    assert cli("stats", out, "--html", page).exit_code == 0
    text = page.read_text()
    report = stats_dir(out)
    assert '<table class="sources">' in text and "<th>documents taken (repeats)</th>" in text
    for source in report["sources"]:
        assert f'<td class="name">{source["name"]}</td>' in text and f"<td>{source['tokens']['learned']:,}</td>" in text


def test_an_output_without_sources_has_no_source_table(packed, corpus, word_tokenizer, cli):
    path, _ = corpus
    out = packed(path, "--tokenizer", word_tokenizer, "--seq-len", 64)
    assert "sources" not in json.loads(cli("stats", out, "--json").stdout)
    assert "source documents" not in cli("stats", out).stdout


# ----------------------------------------------------------------------------- preference pairs and weights


def pair_corpus(tmp_path, n: int = 80):
    texts = random_texts(3 * n, seed=12, max_words=50)
    records = [
        {"p": texts[3 * i], "c": texts[3 * i + 1], "r": texts[3 * i + 2] + " w3", "w": 1 + i % 3} for i in range(n)
    ]
    return write_jsonl(tmp_path / "pairs.jsonl", records)


PAIRS = ("--prompt-field", "p", "--chosen-field", "c", "--rejected-field", "r")


@pytest.mark.parametrize("extra", [(), ("--pad-to-multiple-of", 8), ("--max-sequences-per-row", 4)])
def test_what_if_on_raw_pairs_places_them_as_pack(tmp_path, cli, packed, word_tokenizer, extra):
    path = pair_corpus(tmp_path)
    options = ("--tokenizer", word_tokenizer, *PAIRS, *extra)
    result = cli("stats", path, "--seq-len", 96, *options, "--json")
    assert result.exit_code == 0, result.stderr
    what = json.loads(result.stdout)["what_if"][0]
    report = json.loads((packed(path, "--seq-len", 96, *options) / "report.json").read_text())
    bfd = next(m for m in what["methods"] if m["method"] == "bfd")
    assert what["pairs"] == report["pairs"]["pairs"] and bfd["rows"] == report["rows"]
    assert what["real_tokens"] == report["real_tokens"] and what["overlong"]["count"] == report["overlong"]["count"]
    if not extra:  # concat takes neither option
        concat = next(m for m in what["methods"] if m["kind"] == "concat")
        by_concat = json.loads(
            (packed(path, "--seq-len", 96, *options, "--mode", "concat") / "report.json").read_text()
        )
        assert concat["rows"] == by_concat["rows"] and by_concat["remainder"]["tokens"] == 0
    table = cli("stats", path, "--seq-len", 96, *options)
    assert f"{what['sequences']:,} pairs, each placed whole" in table.stdout and "never cut" in table.stdout


def test_stats_counts_pairs_and_weights(tmp_path, packed, cli, word_tokenizer):
    out = packed(pair_corpus(tmp_path), "--tokenizer", word_tokenizer, "--seq-len", 128, *PAIRS, "--weight-field", "w")
    report = stats_dir(str(out))
    rows, _ = load_rows(out)
    assert report["pairs"]["pairs"] == 80 == report["sequences_packed"] // 2
    assert report["pairs"]["pairs_per_row"]["max"] == int(rows.num_segments.max()) // 2
    assert report["no_packing"]["rows"] == 80  # a pair alone in a row
    assert report["weights"] == {
        "segments": 160,
        "min": 1.0,
        "mean": pytest.approx((27 * 1 + 27 * 2 + 26 * 3) / 80),
        "max": 3.0,
    }
    table = cli("stats", out)
    assert "pairs per row" in table.stdout and "segment weights" in table.stdout
