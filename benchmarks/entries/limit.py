"""The tokenizer alone: Hugging Face `encode_batch_fast` over a JSONL corpus, the limit a
`pack` of the same corpus is measured against.

    python limit.py TOKENIZER.json CORPUS.jsonl

The corpus is read and parsed first; `encode_s` times the encode loop alone (batches of
1,024 texts, every core unless RAYON_NUM_THREADS says otherwise), which favours the
limit: loading (`load_s`) and reading (`read_s`) are not in it. Needs `tokenizers` only.
"""

from __future__ import annotations

import json
import sys
import time

import _common


def main() -> None:
    from tokenizers import Tokenizer

    tokenizer, corpus = sys.argv[1], sys.argv[2]
    started = time.perf_counter()
    backend = Tokenizer.from_file(tokenizer)
    loaded = time.perf_counter()
    with open(corpus, encoding="utf-8") as lines:
        texts = [json.loads(line)["text"] for line in lines if line.strip()]
    batches = [texts[i : i + 1024] for i in range(0, len(texts), 1024)]
    read = time.perf_counter()
    tokens = sum(sum(map(len, backend.encode_batch_fast(b, add_special_tokens=False))) for b in batches)
    done = time.perf_counter()
    _common.emit({"tokens": tokens, "load_s": loaded - started, "read_s": read - loaded, "encode_s": done - read})


if __name__ == "__main__":
    main()
