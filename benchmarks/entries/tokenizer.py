"""One of packcli's encoders over a corpus, timed in the process: Hugging Face's (as the
`hf` backend calls it) or packcli's tiktoken path.

    python tokenizer.py TOKENIZER CORPUS.jsonl --encoder hf|tiktoken [--rounds 3] [--cache DIR]

Figures: `encode_s` (the least wall time of --rounds passes over the corpus in batches of
1,024 texts; both encoders use every core), `tokens`; for tiktoken, `make_encoder_s`
(building the encoder with the start-up cache in --cache: the conversion and its identity
check when the cache is empty, as in the first run) and `identical` (1 when its ids equal
Hugging Face's over the whole corpus).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import _common

TOKENIZER = ("packcli.tokenize.tokenizer", "packcli.tokenizing")
FASTBPE = ("packcli.tokenize.fastbpe", "packcli.fastbpe")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tokenizer")
    parser.add_argument("corpus")
    parser.add_argument("--encoder", choices=("hf", "tiktoken"), default="hf")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache", help="the encoder's start-up cache (default: an empty one)")
    args = parser.parse_args()
    import time

    import numpy as np

    load_tokenizer = _common.find("load_tokenizer", *TOKENIZER)
    encode_texts = _common.find("encode_texts", *TOKENIZER)
    with open(args.corpus, encoding="utf-8") as lines:
        texts = [json.loads(line)["text"] for line in lines if line.strip()]
    batches = [texts[i : i + 1024] for i in range(0, len(texts), 1024)]
    tokenizer = load_tokenizer(args.tokenizer)
    figures = {}
    if args.encoder == "hf":
        encode = lambda batch: encode_texts(tokenizer, batch)  # noqa: E731
    else:
        make_encoder = _common.find("make_encoder", *FASTBPE)
        with tempfile.TemporaryDirectory() as empty:
            started = time.perf_counter()
            encoder = make_encoder(tokenizer, "tiktoken", cache_dir=Path(args.cache or empty))
            figures["make_encoder_s"] = time.perf_counter() - started
        encode = encoder.encode_batch
    seconds, out = _common.best_wall(lambda: [encode(batch) for batch in batches], args.rounds)
    figures.update(encode_s=seconds, tokens=int(sum(len(ids) for ids, _ in out)))
    if args.encoder != "hf":
        reference = [encode_texts(tokenizer, batch) for batch in batches]
        figures["identical"] = all(
            np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(reference, out)
        )
    _common.emit(figures)


if __name__ == "__main__":
    main()
