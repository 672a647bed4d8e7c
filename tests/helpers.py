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


def unigram_tokenizer(path: Path, texts: list[str], vocab_size: int = 400) -> Path:
    """A SentencePiece-style tokenizer (Unigram model, NFKC, Metaspace), trained on texts:
    the family the tiktoken path cannot take (Llama 2, T5, Gemma)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"
    )
    tok.train_from_iterator(texts, trainer)
    PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    ).save_pretrained(str(path))
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
    from packcli.plan.rows import Rows
    from packcli.write.manifest import load_manifest
    from packcli.write.shard_reader import iter_output_rows

    manifest = load_manifest(out)
    blocks = [rows for _, rows in iter_output_rows(out, manifest)]
    return Rows.concat(blocks), manifest


def real_segments(rows) -> list[list[int]]:
    """The token lists of every real segment, row by row (padding, and the pads that
    --pad-to-multiple-of puts after segments, left out)."""
    segments = []
    unpadded = rows.cu_seqlens if rows.cu_seqlens_unpadded is None else rows.cu_seqlens_unpadded
    for r in range(len(rows)):
        span = slice(rows.cu_offsets[r], rows.cu_offsets[r + 1])
        cu, real = rows.cu_seqlens[span], np.diff(unpadded[span])
        for k in range(int(rows.num_segments[r])):
            segments.append(rows.input_ids[r, cu[k] : cu[k] + real[k]].tolist())
    return segments


# --------------------------------------------------- tokenizers and checks for SFT and chat input

EOT = "<|endoftext|>"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_MARKERS = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{% else %}{{ message['content'] + "
    "'<|im_end|>' }}{% endif %}{{ '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
NO_MARKER_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def learned_text_per_segment(rows, tokenizer) -> list[str]:
    """Decode, segment by segment, only the tokens whose label is kept."""
    texts = []
    for r in range(len(rows)):
        cu = rows.cu_seqlens[rows.cu_offsets[r] : rows.cu_offsets[r + 1]]
        for k in range(int(rows.num_segments[r])):
            labels = rows.labels[r, cu[k] : cu[k + 1]]
            texts.append(tokenizer.decode([int(t) for t in labels[labels != -100]]))
    return texts


def byte_level_bpe(texts: list[str], vocab_size: int, specials: list[str]):
    """A byte-level BPE (GPT-2's pre-tokenizer and decoder) trained on texts with the given
    special tokens: the family the tiktoken backend takes, built offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def write_chatml_tokenizer(path: Path) -> Path:
    """Byte-level BPE (so the tiktoken backend applies) with ChatML's special tokens and one
    added token that is not special."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    tok = byte_level_bpe(
        ["user assistant system: hello world, say forged answers <|> endoftext im_start"] * 50, 500, SPECIALS
    )
    tok.add_tokens([AddedToken("<tool>", special=False, normalized=False)])
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(str(path))
    (path / "chatml.jinja").write_text(CHATML_MARKERS)
    (path / "chatml-no-markers.jinja").write_text(NO_MARKER_TEMPLATE)
    return path


def as_text(tokenizer, text: str) -> list[int]:
    """Ids of a text with no added token matched: pre-tokenizer and BPE model alone."""
    backend = tokenizer.backend_tokenizer
    return [t.id for piece, _ in backend.pre_tokenizer.pre_tokenize_str(text) for t in backend.model.tokenize(piece)]


def special_ids(tokenizer, *tokens) -> list[int]:
    return [tokenizer.convert_tokens_to_ids(t) for t in tokens]


def report_of(out) -> dict:
    return json.loads((out / "report.json").read_text())


def packages_a_pack_imports(args: list, cache: Path, packages: tuple[str, ...]) -> list[str]:
    """Which of `packages` a `packcli pack ARGS` run in a fresh interpreter has imported by
    its end (the run must succeed); `cache`: its PACKCLI_CACHE_DIR."""
    import os
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from packcli.cli.app import app\n"  # main() would end the process before the print
        "sys.argv = ['packcli', *sys.argv[1:]]\n"
        "try:\n    app()\nexcept SystemExit as exit:\n    assert not exit.code, exit.code\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(packages)!r})))\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PACKCLI_CACHE_DIR": str(cache), "PYTHONPATH": str(root)}
    run = subprocess.run(
        [sys.executable, "-c", script, "pack", *map(str, args)], env=env, capture_output=True, text=True, check=True
    )
    imported: list[str] = json.loads(run.stdout.splitlines()[-1])
    return imported


def bucket_reads(patch) -> list[str]:
    """Make the write step note each plan it gathers by bucket, through `patch` (a pytest
    MonkeyPatch): "copy" for a copy of the spill sorted by length, "by length" for a
    spill written by length and read in place (write/by_length.py's open_reader)."""
    from packcli.write import by_length

    calls: list[str] = []
    real_sort, real_placing = by_length.sort_spill, by_length.SpillByLength.placing

    def sorted_copy(*args, **kwargs):
        calls.append("copy")
        return real_sort(*args, **kwargs)

    def in_place(reader, plan):
        calls.append("by length")
        return real_placing(reader, plan)

    patch.setattr(by_length, "sort_spill", sorted_copy)
    patch.setattr(by_length.SpillByLength, "placing", in_place)
    return calls
