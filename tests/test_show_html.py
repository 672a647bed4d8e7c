"""`packcli show --html` and `packcli stats --html`: self-contained pages, checked in a real
browser by scripts/check_html.py (headless Chromium: `make test` installs it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_jsonl
from test_show import SFT, chat_records, gsm_records

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "scripts" / "check_html.py"


def self_contained(text: str) -> None:
    """Nothing the page would fetch: no URL, no external script, style sheet, image or font."""
    assert not re.search(r"https?://|\bsrc=|<link|@import|url\(", text)
    assert text.count("<style>") == 1


def show_page(cli, tmp_path: Path, name: str, *args) -> tuple[Path, Path]:
    page, expected = tmp_path / f"{name}.html", tmp_path / f"{name}.json"
    result = cli("show", *args, "--html", page, "--json")
    assert result.exit_code == 0, result.output + result.stderr
    expected.write_text(result.stdout)
    return page, expected


def in_browser(page: Path, expected: Path, screenshot: Path | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, str(CHECK), str(page), "--expect", str(expected)]
    if screenshot is not None:
        args += ["--screenshot", str(screenshot)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode != 2, f"{done.stderr.strip()} (make test installs Chromium: apt-get install -y chromium)"
    return done


@pytest.fixture
def gsm_out(tmp_path, packed):
    path = write_jsonl(tmp_path / "gsm.jsonl", gsm_records(30))
    return packed(path, *SFT, "--seq-len", 128, "--format", "npy", "--pad-to-multiple-of", 4)


def test_show_page_is_self_contained_with_the_stats_on_top(cli, tmp_path, gsm_out):
    page, expected = show_page(cli, tmp_path, "gsm", gsm_out, "--rows", "0:3")
    text = page.read_text()
    self_contained(text)
    assert text.index('id="stats"') < text.index('id="rows"')
    assert text.count("<svg") == 3
    rows = json.loads(expected.read_text())
    for row in rows:
        assert f'id="row-{row["row"]}"' in text
        for s in row["segments"]:
            assert f'data-row="{row["row"]}" data-seg="{s["index"]}" data-start="{s["start"]}"' in text
    first = rows[0]
    i = first["segments"][0]["learned"][0]["start"]
    tooltip = f'title="id {first["input_ids"][i]} · position {first["position_ids"][i]} · label {first["labels"][i]}"'
    assert tooltip in text


def test_every_segment_and_learned_span_is_in_the_browser_dom(cli, tmp_path, gsm_out, packed):
    page, expected = show_page(cli, tmp_path, "gsm", gsm_out, "--rows", "0:")
    shot = tmp_path / "gsm.png"
    done = in_browser(page, expected, shot)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"ok: {page}: ")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    chat = write_jsonl(tmp_path / "chat.jsonl", chat_records(10))
    chat_out = packed(chat, "--tokenizer", "packcli:demo", "--messages-field", "messages", "--seq-len", 256)
    page, expected = show_page(cli, tmp_path, "chat", chat_out, "--rows", "0:")
    done = in_browser(page, expected)
    assert done.returncode == 0, done.stdout + done.stderr
    learned = sum(len(s["learned"]) for r in json.loads(expected.read_text()) for s in r["segments"])
    assert learned == sum(1 + (i % 3 == 0) for i in range(10))  # each assistant turn
    assert f"and {learned} learned spans" in done.stdout
    raw = ("--tokenizer", "packcli:demo", "--messages-field", "messages", "--seq-len", 60)
    page, expected = show_page(cli, tmp_path, "raw", chat, *raw)
    done = in_browser(page, expected)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_browser_check_finds_a_missing_learned_span(cli, tmp_path, gsm_out):
    page, expected = show_page(cli, tmp_path, "gsm", gsm_out)
    page.write_text(page.read_text().replace('class="learn"', 'class="other"', 1))
    done = in_browser(page, expected)
    assert done.returncode == 1 and "learned tokens" in done.stderr


def test_stats_page(cli, tmp_path, gsm_out):
    page = tmp_path / "stats.html"
    result = cli("stats", gsm_out, "--html", page)
    assert result.exit_code == 0, result.stderr
    text = page.read_text()
    self_contained(text)
    assert text.count("<svg") == 3 and "efficiency" in text and 'id="rows"' not in text
    report = json.loads(cli("stats", gsm_out, "--json").stdout)
    assert f"{report['efficiency']:.2%}" in text
    both = tmp_path / "both.html"
    assert cli("stats", gsm_out, gsm_out, "--html", both).exit_code == 0
    assert both.read_text().count("<svg") == 6
