"""Every file README.md and docs/ name is in the repository: a doc that points at a moved or
deleted file fails here, not in a reader's hands."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Dated records (docs/benchmarks/) quote the files and commands of the commit they measured,
# which later commits may move or remove: they are history, not pointers.
DOCS = sorted([ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md") if p.parent.name != "benchmarks")])
# a path-like token ending in a source or doc suffix; URLs and absolute or outside paths are not the repository's
# files of other projects that the docs quote by name (Hugging Face's and Megatron-LM's scripts, typer's source)
ELSEWHERE = {"run_clm.py", "preprocess_data.py", "pretrain_gpt.py", "typer/_coercion.py"}
TOKEN = re.compile(r"(?<![\w./:-])((?:[\w-]+/)*[\w.-]+\.(?:py|md))\b")


def tracked() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True
    )
    return listed.stdout.split() if listed.returncode == 0 else [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")]


def unresolved(doc: Path, files: list[str]) -> list[str]:
    """The names in `doc` that no file of the repository answers to: a path from the doc's
    folder or the root, or the tail of one (`core/choices.py`, `naive.py`)."""
    text = doc.read_text(encoding="utf-8")
    text = re.sub(r"https?://\S+", "", text)
    missing = []
    for name in sorted(set(TOKEN.findall(text))):
        if name in ELSEWHERE or (doc.parent / name).exists() or (ROOT / name).exists():
            continue
        if any(f == name or f.endswith("/" + name) for f in files):
            continue
        missing.append(name)
    return missing


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_file_exists(doc):
    assert unresolved(doc, tracked()) == []


def test_a_moved_file_is_caught(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("see `packcli/kernels_fit.py`, [format](formats.md), core/choices.py and https://x.org/a.py\n")
    assert unresolved(doc, ["packcli/core/choices.py", "docs/format.md"]) == ["formats.md", "packcli/kernels_fit.py"]
