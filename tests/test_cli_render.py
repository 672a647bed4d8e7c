"""Layout only: charts fit 80 columns whatever the figures, sizes read as people write them."""

from __future__ import annotations

import json

import numpy as np

from packcli.cli.render import human_bytes, render_chart, sparkline, verify_line
from packcli.export.base import summary_line
from packcli.inspect.stats import distribution


def test_charts_fit_80_columns_at_the_largest_seq_len():
    from rich.console import Console

    seq_len = 1 << 20
    hist = np.zeros(seq_len + 1, dtype=np.int64)
    hist[[1, 5000, 500_000, seq_len - 1, seq_len]] = [1, 123_456_789, 3, 7, 2_000_000_000]
    console = Console(width=80, record=True)
    console.print(render_chart("real tokens per row", distribution("fill_per_row", hist), 80))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any("1,048,576" in line for line in lines) and any("<0.1%" in line for line in lines)


def test_sparkline_scales_to_the_peak_and_leaves_empty_bins_blank():
    bins = [{"from": i, "to": i, "count": c} for i, c in enumerate([0, 1, 4, 8, 0, 2])]
    line = sparkline(bins)
    assert len(line) == len(bins)
    assert line[0] == " " and line[4] == " "
    assert line[3] == "█" and line[1] == "▁"
    assert sparkline([{"from": 1, "to": 1, "count": 0}]) == ""


def test_human_bytes_has_three_significant_digits():
    cases = {
        0: "0 B",
        999: "999 B",
        999.6: "1.00 kB",
        1234: "1.23 kB",
        12_345: "12.3 kB",
        123_456: "123 kB",
        999_499: "999 kB",
        999_500: "1.00 MB",
        45_600_000_000: "45.6 GB",
    }
    assert {size: human_bytes(size) for size in cases} == cases


def test_summary_lines():
    verified = {"shards": 2, "rows": 1234, "sequences": 5678, "real_tokens": 1_000_000, "bytes": 3_000_000_000}
    assert verify_line("out", {**verified, "seconds": 0.5}) == (
        "ok: out: 2 shard(s), 1,234 rows, 5,678 sequences, 1,000,000 real tokens (3.00 GB checked at 6.00 GB/s)"
    )
    assert verify_line("out", {**verified, "seconds": 0.0}).endswith("(3.00 GB checked in under 1 ms)")
    exported = {"format": "megatron", "bin": "m.bin", "idx": "m.idx", "documents": 12_345, "tokens": 6_789_000}
    exported["dtype"] = "uint16"
    assert summary_line(exported) == "ok: wrote m.bin and m.idx: 12,345 documents, 6,789,000 tokens (uint16)"


def test_the_pack_table_shows_the_cap_cost_and_the_first_groups():
    from rich.console import Console

    from packcli.cli.render import render_table

    groups = [
        {"id": i, "value": v, "documents": 3, "sequences": 4, "rows": 2, "real_tokens": 10, "efficiency": 0.625}
        for i, v in enumerate(["web", None, 7] + [f"g{k}" for k in range(10)])
    ]
    report = {
        "seq_len": 8,
        "sequences_packed": 52,
        "rows": 26,
        "lower_bound_rows": 17,
        "real_tokens": 130,
        "padding_tokens": 78,
        "label_tokens": 100,
        "efficiency": 0.625,
        "sequences_per_row": {"mean": 2.0, "max": 2},
        "fill_per_row": {"min": 2, "median": 5.0},
        "max_sequences_per_row": {"cap": 2, "rows": 26, "uncapped_rows": 20, "extra_rows": 6},
        "groups": groups,
    }
    console = Console(width=100, record=True)
    console.print(render_table(report, "packed"))
    text = console.export_text()
    assert "max sequences per row 2" in text and "26 rows (+6 rows vs 20 uncapped)" in text
    assert 'group "web"' in text and "group null" in text and "group 7" in text
    assert "3 more groups (--json lists them all)" in text and 'group "g7"' not in text
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if "│ groups " in line)
    assert header < next(i for i, line in enumerate(lines) if 'group "web"' in line)


def test_pack_and_stats_show_the_unlearned_segments_by_cause(tmp_path, cli, packed):
    from helpers import write_jsonl

    prompt = list(range(10, 38))  # 28 prompt tokens, then a completion of 2: split at 8, 3 pieces learn nothing
    records = [
        {"ids": prompt + [40, 41], "labels": [-100] * 28 + [40, 41]},
        {"ids": [3, 4, 9], "labels": [-100, -100, 9]},
        {"ids": [6], "labels": [-100]},  # nothing to learn at all
    ]
    path = write_jsonl(tmp_path / "sft.jsonl", records)
    options = ("--ids-field", "ids", "--labels-field", "labels", "--pad-id", "0", "--seq-len", 8)
    out = tmp_path / "out"
    result = cli("pack", path, "-o", out, *options, "--overlong", "split", "--no-eos")
    assert result.exit_code == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    causes = report["unlearned"]["by_cause"]
    assert causes["split_pieces"] == {"sequences": 3, "tokens": 24} and causes["no_labels"] == {
        "sequences": 1,
        "tokens": 1,
    }
    for text in (result.stdout, cli("stats", out).stdout):
        assert "unlearned (dropped)" in text and "4 sequences, 25 tokens" in text
        assert "split pieces" in text and "3 sequences, 24 tokens" in text
        assert "no labels" in text and "1 sequences, 1 tokens" in text
        assert "truncated" not in text
    from rich.console import Console

    from packcli.cli.render import render_table

    console = Console(width=80, record=True)
    console.print(render_table(report, "packed"))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    unlearned = next(i for i, line in enumerate(lines) if "unlearned (dropped)" in line)
    assert "no labels" in lines[unlearned + 1] and "split pieces" in lines[unlearned + 2]
    kept = packed(path, *options, "--overlong", "split", "--no-eos", "--keep-unlearned")
    assert "unlearned (kept)" in cli("stats", kept).stdout
    text_only = packed(path, "--ids-field", "ids", "--pad-id", "0", "--no-eos", "--seq-len", 8)
    assert "unlearned" not in cli("stats", text_only).stdout
