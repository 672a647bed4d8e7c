"""Plain helpers the tests share (fixtures live in conftest.py): tiny tokenizers built
offline, corpora of predictable words, JSONL files, and reading packed output back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def word_level_tokenizer(
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
