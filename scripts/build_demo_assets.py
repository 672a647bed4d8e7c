"""Build the bundled demo tokenizer and sample corpus from this repository's own files.

Both are committed so that `make demo` and the tests run offline. The tokenizer is a
small byte-level BPE (GPT-2 style, no BOS added on encode, no pad token: pad falls back
to EOS) with a ChatML template; the corpus is one JSONL document per source/doc file.
Run from the repository root: `make assets` rebuilds both. `--corpus-only` rebuilds only
the corpus and keeps the committed tokenizer: retraining it on changed files changes its
merges, hence every id it gives and every demo output.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "packcli" / "assets"
VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["<|endoftext|>", "<|startoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}{{ '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def corpus_files() -> list[Path]:
    """Our own prose and code, in a stable order, excluding generated assets."""
    patterns = ["README.md", "docs/*.md", "packcli/**/*.py", "scripts/*.py", "tests/*.py", "Makefile"]
    files: list[Path] = []
    for pattern in patterns:
        files.extend(sorted(p for p in ROOT.glob(pattern) if p.is_file()))
    return files


def build_corpus(files: list[Path]) -> Path:
    out = ASSETS / "demo.jsonl"
    with out.open("w", encoding="utf-8") as f:
        for path in files:
            text = path.read_text(encoding="utf-8")
            if text.strip():
                record = {"text": text, "path": str(path.relative_to(ROOT))}
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return out


def build_tokenizer(files: list[Path]) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([str(p) for p in files], trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|endoftext|>",
        bos_token="<|startoftext|>",
        chat_template=CHATML_TEMPLATE,
    )
    out = ASSETS / "tokenizer"
    wrapped.save_pretrained(str(out))
    # Name the class that transformers 4.x knows too, so older installs load it the same.
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus-only", action="store_true", help="keep the committed tokenizer")
    args = parser.parse_args()
    ASSETS.mkdir(parents=True, exist_ok=True)
    files = corpus_files()
    if not args.corpus_only:
        tok_dir = build_tokenizer(files)
        size = sum(p.stat().st_size for p in tok_dir.iterdir())
        print(f"tokenizer: {tok_dir.relative_to(ROOT)} ({size // 1024} KiB)")
    corpus = build_corpus(files)
    print(f"corpus: {corpus.relative_to(ROOT)} ({corpus.stat().st_size // 1024} KiB, {len(files)} files)")


if __name__ == "__main__":
    main()
