"""Every command (```sh) and Python (```python) block of README.md and docs/ runs, as written.

Blocks are collected from the Markdown each run, so the test follows the docs as they are
edited. The blocks of one `##` section run in order in a directory of their own that holds
the files the docs name (`./tok`, `data/*.jsonl`, `corpus/`, `gsm8k.jsonl`, `./model`...,
built by `docs_world` below), so a command sees what an earlier one in its section wrote.
Shell blocks run under `bash -euo pipefail` with `packcli` and `python` being this
checkout's; Python blocks run as scripts. Nothing in a block is rewritten.

A block that cannot run here says so visibly: the line before its fence is
`<!-- not run: REASON -->`. A block with no language whose lines look like commands or
Python must be given one, so that nothing escapes the rule unlabelled.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import random_texts, write_jsonl
from mixed import mixed_output

ROOT = Path(__file__).resolve().parent.parent
RUN_LANGUAGES = {"sh": "sh", "bash": "sh", "shell": "sh", "console": "sh", "python": "python", "py": "python"}
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<info>[^`\s]*)")
LOOKS_RUNNABLE = re.compile(
    r"^\s*(\$ |packcli [a-z]+ |python3? (-[cm] |\S+\.py)|(\S*/)?pip3? install |make [a-z]|import \w+\s*$|from [\w.]+ import )"
)
BLOCK_TIMEOUT = 600  # seconds: only a hung block reaches it


@dataclass
class Block:
    file: str
    line: int  # of the opening fence, 1-based
    section: str
    language: str  # "sh", "python", or the info string of a block that is neither
    body: str
    not_run: str | None  # the reason given in the marker, if any

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    name = str(path.relative_to(ROOT))
    found, section, i = [], "top", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        match = FENCE.match(line)
        if not match:
            i += 1
            continue
        fence, indent = match["fence"], len(match["indent"])
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        body = "\n".join(text[indent:] if text[:indent].isspace() else text for text in lines[i + 1 : end])
        marker = NOT_RUN.match(lines[i - 1].strip()) if i > 0 else None
        info = match["info"].lower()
        found.append(
            Block(name, i + 1, section, RUN_LANGUAGES.get(info, info), body + "\n", marker and marker["reason"])
        )
        i = end + 1
    return found


ALL_BLOCKS = [block for path in doc_files() for block in blocks_of(path)]
RUNNABLE = [b for b in ALL_BLOCKS if b.language in ("sh", "python")]


def sections() -> list[tuple[str, str, list[Block]]]:
    grouped: dict[tuple[str, str], list[Block]] = {}
    for block in RUNNABLE:
        if block.not_run is None:
            grouped.setdefault((block.file, block.section), []).append(block)
    return [(file, section, blocks) for (file, section), blocks in grouped.items()]


SECTIONS = sections()


def test_every_command_or_python_block_runs_or_says_why_not():
    """The rule itself: labelled blocks run unless marked with a reason; unlabelled ones hold no command."""
    assert len(RUNNABLE) >= 20  # the collector found the docs' blocks
    unlabelled = [
        b.where
        for b in ALL_BLOCKS
        if b.language == "" and any(LOOKS_RUNNABLE.match(line) for line in b.body.splitlines())
    ]
    assert unlabelled == [], "blocks that look like commands or Python need ```sh or ```python"
    markers = []
    for path in doc_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("<!--") and "not run" in line:
                following = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
                ok = NOT_RUN.match(line.strip()) and following and following["info"].lower() in RUN_LANGUAGES
                markers.append((f"{path.relative_to(ROOT)}:{i + 1}", bool(ok)))
    assert all(ok for _, ok in markers), [where for where, ok in markers if not ok]
    ran = {id(b) for _, _, blocks in SECTIONS for b in blocks}
    assert all(id(b) in ran or b.not_run for b in RUNNABLE)


# ----------------------------------------------------------------------------- the docs' world


def compress(source: Path, target: Path) -> None:
    import zstandard

    target.write_bytes(zstandard.ZstdCompressor().compress(source.read_bytes()))


def tiny_model(path: Path, vocab_size: int) -> None:
    """A Llama small enough to train a step on the CPU, at the `./model` the docs load."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=8192,
    )
    LlamaForCausalLM(config).save_pretrained(path)


@pytest.fixture(scope="module")
def docs_world(tmp_path_factory) -> Path:
    """The files the docs' commands name, built once; each section runs in a copy."""
    from packcli.tokenize.tokenizer import BUNDLED_DIR, load_tokenizer

    world = tmp_path_factory.mktemp("docs-world")
    shutil.copytree(BUNDLED_DIR, world / "tok")
    texts = random_texts(400, seed=5, max_words=40)
    words = [t.replace("w", "word ") for t in texts]  # plain English-ish text for the demo tokenizer
    # data/*.jsonl: two rows at --seq-len 4096, a batch of more than one row for the readers
    # and the Trainer, whose steps cost the more the more rows a batch holds
    write_jsonl(world / "data" / "part-0.jsonl", [{"text": t} for t in words[:50]])
    write_jsonl(world / "data" / "part-1.jsonl", [{"text": t} for t in words[150:200]])
    compress(world / "data" / "part-1.jsonl", world / "data" / "part-2.jsonl.zst")
    (world / "data" / "part-1.jsonl").rename(world / "data" / "part-1b.jsonl")
    write_jsonl(world / "corpus" / "a.jsonl", [{"text": t} for t in words[:200]])
    write_jsonl(world / "corpus" / "b.jsonl", [{"text": t} for t in words[200:]])
    write_jsonl(world / "notes.jsonl", [{"text": t} for t in words[:50]])
    compress(world / "notes.jsonl", world / "dump.jsonl.zst")
    write_jsonl(world / "b.jsonl", [{"content": t} for t in words[50:80]])
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"content": words[80:120]}), world / "a.parquet")
    qa = [{"question": f"What is {i} plus {i}?", "answer": f"{i} plus {i} is {2 * i}."} for i in range(60)]
    write_jsonl(world / "gsm8k.jsonl", qa)
    write_jsonl(world / "data.jsonl", [{"prompt": r["question"], "answer": r["answer"]} for r in qa])
    chats = [
        {"messages": [{"role": "user", "content": r["question"]}, {"role": "assistant", "content": r["answer"]}]}
        for r in qa
    ]
    write_jsonl(world / "chats.jsonl", chats)
    prefs = [
        {
            "prompt": r["question"],
            "chosen": r["answer"],
            "rejected": f"{i} plus {i} is {2 * i + 1}.",
            "weight": 1 + i % 2,
        }
        for i, r in enumerate(qa)
    ]
    write_jsonl(world / "prefs.jsonl", prefs)  # preference pairs (docs/sft.md, docs/training.md)
    write_jsonl(
        world / "prefs-chat.jsonl",
        [
            {
                "chosen": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["chosen"]}],
                "rejected": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["rejected"]}],
            }
            for r in prefs
        ],
    )
    shutil.copytree(
        ROOT / "docs" / "examples", world / "docs" / "examples", ignore=shutil.ignore_patterns("out", "packed")
    )
    tiny_model(world / "model", len(load_tokenizer(str(BUNDLED_DIR))))
    mixed_output(world / "mixture", "npy")  # the shards and manifest of a mixture (docs/training.md)
    (world / "mix.toml").write_text(  # the README's mixture
        '[[source]]\nname = "web"\npaths = ["corpus"]\nweight = 0.7\n'
        '[[source]]\nname = "notes"\npaths = ["notes.jsonl"]\nweight = 0.3\n',
        encoding="utf-8",
    )
    bin_dir = world / ".bin"
    bin_dir.mkdir()
    shims = [("packcli", f'"{sys.executable}" -m packcli'), ("python", f'"{sys.executable}"')]
    if shutil.which("zstdcat") is None:  # the zstd tools are not installed: the same decompression, in Python
        unzstd = "import sys, zstandard; zstandard.ZstdDecompressor().copy_stream(open(sys.argv[1], 'rb'), sys.stdout.buffer)"
        shims.append(("zstdcat", f'"{sys.executable}" -c "{unzstd}"'))
    for name, target in shims:
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {target} "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return world


def environment(world: Path, here: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{world / '.bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", COLUMNS="100", TOKENIZERS_PARALLELISM="false")
    # torch's kernels on one thread: the suite runs a test file on every core, where a
    # second thread would only wait for a core that is busy
    env["OMP_NUM_THREADS"] = "1"
    env["HF_HOME"] = str(here / ".hf-home")
    env["PACKCLI_CACHE_DIR"] = str(here / ".packcli-cache")
    return env


def run_block(block: Block, here: Path, env: dict[str, str]) -> None:
    if block.language == "sh":
        command = ["bash", "-euo", "pipefail", "-c", block.body]
    else:
        script = here / f".block-{block.line}.py"
        script.write_text(block.body, encoding="utf-8")
        command = [sys.executable, str(script)]
    result = subprocess.run(command, cwd=here, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
    assert result.returncode == 0, (
        f"{block.where} failed:\n{block.body}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )


@pytest.mark.parametrize("file, section, blocks", SECTIONS, ids=[f"{file}::{section}" for file, section, _ in SECTIONS])
def test_docs_blocks_run(tmp_path, docs_world, file, section, blocks):
    here = tmp_path / "world"
    shutil.copytree(docs_world, here, symlinks=True)
    env = environment(docs_world, here)
    for block in blocks:
        run_block(block, here, env)
