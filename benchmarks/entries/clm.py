"""The `datasets` recipes a `pack` of the same corpus is measured against.

    python clm.py run_clm|trl TOKENIZER_DIR CORPUS.jsonl OUT CACHE --seq-len 2048 [--num-proc 2]

run_clm: transformers' examples/pytorch/language-modeling/run_clm.py preprocessing as
written there (load_dataset("json"), map(tokenize), map(group_texts) with block_size =
seq_len, save_to_disk). trl: the same tokenizing map, then trl.pack_dataset(strategy="bfd")
and save_to_disk. A fresh datasets cache directory each run; the save is counted. Needs
datasets, transformers and TRL (the `bench` extra).
"""

from __future__ import annotations

import argparse
import os
import time
from itertools import chain

import _common


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", choices=("run_clm", "trl"))
    parser.add_argument("tokenizer")
    parser.add_argument("corpus")
    parser.add_argument("out")
    parser.add_argument("cache")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--num-proc", type=int, default=2)
    args = parser.parse_args()
    os.environ.update(HF_DATASETS_CACHE=args.cache, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import datasets
        from transformers import AutoTokenizer

        if args.recipe == "trl":
            from trl import pack_dataset
    except Exception as error:
        _common.not_applicable(f"{type(error).__name__}: {error}".splitlines()[0])
    datasets.utils.logging.disable_progress_bar()
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    raw = datasets.load_dataset("json", data_files=args.corpus, split="train", cache_dir=args.cache)
    block = args.seq_len
    if args.recipe == "run_clm":

        def tokenize(examples):
            return tokenizer(examples["text"])

        def group_texts(examples):
            joined = {k: list(chain(*examples[k])) for k in examples}
            total = len(joined[next(iter(examples))]) // block * block
            result = {k: [t[i : i + block] for i in range(0, total, block)] for k, t in joined.items()}
            result["labels"] = result["input_ids"].copy()
            return result

        tokenized = raw.map(tokenize, batched=True, num_proc=args.num_proc, remove_columns=["text"])
        packed = tokenized.map(group_texts, batched=True, num_proc=args.num_proc)
    else:

        def tokenize(examples):
            return {"input_ids": tokenizer(examples["text"], add_special_tokens=False)["input_ids"]}

        tokenized = raw.map(tokenize, batched=True, num_proc=args.num_proc, remove_columns=["text"])
        packed = pack_dataset(tokenized, seq_length=block, strategy="bfd")
    packed.save_to_disk(args.out)
    _common.emit({"rows": len(packed), "work_s": time.perf_counter() - started})


if __name__ == "__main__":
    main()
