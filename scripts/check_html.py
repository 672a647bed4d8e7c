"""Check a `packcli show --html` page in a real browser (headless Chromium).

    python scripts/check_html.py PAGE.html --expect SHOW.json [--screenshot PAGE.png]

SHOW.json is `packcli show ... --json` for the same rows. Chromium loads the page (scripts
run), its DOM is dumped (`--dump-dom`) and checked: every segment of every row is there with
its bounds, and every run of learned tokens is there with its bounds and, where the JSON has
it, its decoded text. `--screenshot` also saves what the browser draws. Exit 0 when all is
there, 1 naming the first thing missing, 2 when no Chromium is installed
(`apt-get install -y chromium` on Debian and Ubuntu).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars")


def find_browser(given: str | None) -> str | None:
    if given:
        return given
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def run_browser(browser: str, *args: str, timeout: float = 120) -> str:
    with tempfile.TemporaryDirectory(prefix="check-html-") as profile:
        done = subprocess.run(
            [browser, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"error: {browser} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return done.stdout


class _Dom(HTMLParser):
    """Segments (.seg) and learned runs (.learn) of a dumped DOM, with their text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, dict[str, str], list[str]]] = []
        self.segments: dict[tuple[int, int], dict[str, str]] = {}
        self.learned: dict[tuple[int, int], tuple[int, str]] = {}  # (row, start) -> (end, text)
        self.row: int | None = None
        self.toggle = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        classes = found.get("class", "").split()
        if tag == "input" and found.get("id") == "only":
            self.toggle = True
        if "row" in classes:
            self.row = int(found["data-row"])
        if "seg" in classes:
            self.segments[(int(found["data-row"]), int(found["data-seg"]))] = found
        if tag in ("input", "meta", "br", "img", "link"):
            return
        self.stack.append((tag, {**found, "_classes": " ".join(classes)}, []))

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            open_tag, attrs, texts = self.stack.pop()
            text = "".join(texts)
            if self.stack:
                self.stack[-1][2].append(text)
            if "learn" in attrs["_classes"].split() and self.row is not None:
                self.learned[(self.row, int(attrs["data-start"]))] = (int(attrs["data-end"]), text)
            if open_tag == tag:
                return

    def handle_data(self, data: str) -> None:
        if self.stack:
            self.stack[-1][2].append(data)


def check(dom_text: str, expected: list[dict]) -> tuple[int, int]:
    """(segments, learned runs) found; SystemExit(1) at the first missing or different one."""
    dom = _Dom()
    dom.feed(dom_text)
    dom.close()
    if not dom.toggle:
        raise SystemExit("error: the page's controls are missing from the DOM")
    segments = learned = 0
    for entry in expected:
        if entry.get("kind") not in ("row", "record"):
            continue
        number = entry["row"] if entry["kind"] == "row" else entry["record"]
        for segment in entry["segments"]:
            found = dom.segments.get((number, segment["index"]))
            if found is None:
                raise SystemExit(f"error: {entry['kind']} {number} segment {segment['index']} is not in the DOM")
            bounds = tuple(int(found[f"data-{k}"]) for k in ("start", "end", "real-end"))
            if bounds != (segment["start"], segment["end"], segment["real_end"]):
                raise SystemExit(f"error: {entry['kind']} {number} segment {segment['index']}: DOM bounds {bounds}")
            segments += 1
            for run in segment["learned"]:
                got = dom.learned.get((number, run["start"]))
                if got is None or got[0] != run["end"]:
                    raise SystemExit(
                        f"error: {entry['kind']} {number}: learned tokens {run['start']}:{run['end']} missing"
                    )
                if run["text"] is not None and got[1] != run["text"]:
                    raise SystemExit(
                        f"error: {entry['kind']} {number}: learned text {got[1]!r} in the DOM, {run['text']!r} expected"
                    )
                learned += 1
    extra = len(dom.segments) - segments
    if extra:
        raise SystemExit(f"error: {extra} segment(s) in the DOM that the JSON does not have")
    return segments, learned


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("--expect", type=Path, required=True, help="packcli show --json of the same rows")
    parser.add_argument("--screenshot", type=Path, help="also save a PNG of the page")
    parser.add_argument("--size", default="1280,1600", help="browser window WIDTH,HEIGHT for the screenshot")
    parser.add_argument("--browser", help="the Chromium binary (default: found on PATH)")
    args = parser.parse_args(argv)
    browser = find_browser(args.browser)
    if browser is None:
        print("error: no Chromium found; install it: apt-get install -y chromium", file=sys.stderr)
        return 2
    url = args.page.resolve().as_uri()
    expected = json.loads(args.expect.read_text(encoding="utf-8"))
    segments, learned = check(run_browser(browser, "--dump-dom", url), expected)
    if args.screenshot:
        args.screenshot.unlink(missing_ok=True)
        run_browser(browser, f"--window-size={args.size}", f"--screenshot={args.screenshot.resolve()}", url)
        if not args.screenshot.is_file() or args.screenshot.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
            raise SystemExit(f"error: {browser} wrote no PNG screenshot to {args.screenshot}")
    print(
        f"ok: {args.page}: {segments} segments and {learned} learned spans in the DOM"
        + (f"; screenshot {args.screenshot}" if args.screenshot else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
