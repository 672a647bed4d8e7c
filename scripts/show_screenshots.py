"""Make docs/images/show-terminal.png and docs/images/show-page.png, the pictures of
docs/show.md, from two small corpora made here (GSM8K-style prompt/completion pairs and
ChatML chats) packed with the bundled tokenizer. Needs headless Chromium (as
scripts/check_html.py does): it draws the page, and the terminal view recorded by Rich as SVG.

    python scripts/show_screenshots.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_html import find_browser, run_browser

CHATS = [
    ("Convert 3 km to metres.", "3 km is 3 * 1000 = 3000 metres.", "And 250 cm?", "250 cm is 2.5 metres."),
    ("Name a prime above 10.", "11 is prime: its only divisors are 1 and 11.", None, None),
    ("Write a haiku about packing.", "Tokens side by side\n  no padding left in the row\n  the GPU hums", None, None),
    ("What is 7 squared?", "7 * 7 = 49.", "And 8 squared?", "8 * 8 = 64."),
]


def chat_records(n: int) -> list[dict]:
    records = []
    for i in range(n):
        q, a, q2, a2 = CHATS[i % len(CHATS)]
        messages = [
            {"role": "system", "content": "You are a careful assistant."},
            {"role": "user", "content": q},
            {"role": "assistant", "content": a},
        ]
        if q2:
            messages += [{"role": "user", "content": q2}, {"role": "assistant", "content": a2}]
        records.append({"messages": messages})
    return records


def packcli(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "packcli", *args], capture_output=True, text=True, check=False, cwd=cwd
    )
    if done.returncode:
        raise SystemExit(f"packcli {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    args = parser.parse_args()
    browser = find_browser(None)
    if browser is None:
        print("error: no Chromium found; install it: apt-get install -y chromium", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="show-shots-") as tmp_dir:
        tmp = Path(tmp_dir)
        corpus = tmp / "chat.jsonl"
        corpus.write_text("".join(json.dumps(r) + "\n" for r in chat_records(12)), encoding="utf-8")
        out = tmp / "chat-out"
        packcli("pack", "chat.jsonl", "-o", "chat-out", "--tokenizer", "packcli:demo", "--messages-field", "messages",
                "--seq-len", "256", "--no-shuffle", cwd=tmp)  # fmt: skip

        # The terminal view, recorded by Rich as SVG, drawn by the browser.
        from rich.console import Console

        from packcli.cli import show_render
        from packcli.inspect import show

        source = show.OutputSource(str(out))
        decoder = show.output_decoder(source.manifest, None, print)
        console = Console(record=True, width=104, force_terminal=True, color_system="truecolor", file=io.StringIO())
        show_render.print_views(console, show.read_views(source, [0]), decoder, tokens=False)
        svg = console.export_svg(title="packcli show chat-out --row 0")
        svg = re.sub(r"@font-face \{.*?\}", "", svg, flags=re.S)  # no web font: the browser's monospace
        width, height = (float(v) for v in re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg).groups())
        (tmp / "terminal.svg").write_text(svg, encoding="utf-8")
        page = tmp / "terminal.html"
        page.write_text(f'<html><body style="margin:0"><img src="terminal.svg" width="{width:.0f}"></body></html>')
        run_browser(browser, f"--window-size={width:.0f},{height:.0f}",
                    f"--screenshot={(args.out / 'show-terminal.png').resolve()}", page.as_uri())  # fmt: skip

        # The page: stats on top, then rows.
        html = tmp / "show.html"
        packcli("show", "chat-out", "--rows", "0:2", "--html", str(html), cwd=tmp)
        run_browser(browser, "--window-size=1280,1500", f"--screenshot={(args.out / 'show-page.png').resolve()}",
                    html.as_uri())  # fmt: skip
    print(f"wrote {args.out / 'show-terminal.png'} and {args.out / 'show-page.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
