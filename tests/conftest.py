"""Shared fixtures: tokenizers built in the test (no downloads), corpora, a CLI runner,
and `packed(...)`, which runs `packcli pack` and checks the output with the same
invariant checker `packcli verify` uses before a test looks at it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ["COLUMNS"] = "100"  # Rich output stable whatever the terminal

from packcli.cli import app
from packcli.tokenizing import BUNDLED_DIR

WORDS = [f"w{i}" for i in range(200)]


def _word_level_tokenizer(
    path: Path, vocab_size: int, *, eos: bool = True, pad: bool = False, bos: bool = False
) -> Path:
    """A whitespace word-level tokenizer: every id is predictable from the text."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["[UNK]", "</s>", "<s>", "<pad>"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    for i in range(vocab_size - len(specials)):
        vocab[f"w{i}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    kwargs = {"unk_token": "[UNK]"}
    if eos:
        kwargs["eos_token"] = "</s>"
    if pad:
        kwargs["pad_token"] = "<pad>"
    if bos:
        kwargs["bos_token"] = "<s>"
    PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs).save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def word_tokenizer(tmp_path_factory) -> Path:
    """Vocabulary of 300: ids fit in uint16. EOS is `</s>` (id 1), no pad (falls back to EOS)."""
    return _word_level_tokenizer(tmp_path_factory.mktemp("tok") / "word", 300)


@pytest.fixture(scope="session")
def big_tokenizer(tmp_path_factory) -> Path:
    """Vocabulary of 70,000: more than uint16 holds, so npy input_ids must be uint32."""
    return _word_level_tokenizer(tmp_path_factory.mktemp("tok") / "big", 70_000, pad=True)


@pytest.fixture(scope="session")
def no_eos_tokenizer(tmp_path_factory) -> Path:
    return _word_level_tokenizer(tmp_path_factory.mktemp("tok") / "noeos", 300, eos=False)


@pytest.fixture(scope="session")
def bos_tokenizer(tmp_path_factory) -> Path:
    return _word_level_tokenizer(tmp_path_factory.mktemp("tok") / "bos", 300, bos=True)


@pytest.fixture(scope="session")
def demo_tokenizer() -> Path:
    return BUNDLED_DIR


def random_texts(n: int, seed: int = 0, max_words: int = 60, vocab: int = 200) -> list[str]:
    """Documents of 1..max_words words from the word tokenizer's vocabulary."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_words + 1, size=n)
    return [" ".join(f"w{w}" for w in rng.integers(0, vocab, size=k)) for k in lengths]


def word_ids(text: str) -> list[int]:
    """What the word tokenizer gives for a text (ids of w<i> are i + 4)."""
    return [int(w[1:]) + 4 for w in text.split()]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    return path


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args, input=None):
        return runner.invoke(app, [str(a) for a in args], input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def packed(cli, tmp_path):
    """Run `packcli pack` (expecting success) and check the output like `packcli verify`."""
    from packcli.verify import verify_dir

    counter = {"n": 0}

    def run(inputs, *options, out: Path | None = None) -> Path:
        if out is None:
            counter["n"] += 1
            out = tmp_path / f"out{counter['n']}"
        inputs = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        result = cli("pack", *inputs, "-o", out, *options)
        assert result.exit_code == 0, result.output + result.stderr
        verify_dir(out)
        return out

    return run


def load_rows(out: Path):
    """All rows of an output directory, concatenated, plus its manifest."""
    from packcli.rows import Rows
    from packcli.shards import iter_output_rows, load_manifest

    manifest = load_manifest(out)
    blocks = [rows for _, rows in iter_output_rows(out, manifest)]
    return Rows.concat(blocks), manifest


def real_segments(rows) -> list[list[int]]:
    """The token lists of every real segment, row by row (padding left out)."""
    segments = []
    for r in range(len(rows)):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
        for k in range(int(rows.num_segments[r])):
            segments.append(rows.input_ids[r, cu[k] : cu[k + 1]].tolist())
    return segments
