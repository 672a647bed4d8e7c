"""The benchmarks' inputs, made from the real corpora and kept under bench-out/inputs/.

The documents are the shared corpora's (GSM8K question and answer, the FastChat
conversations' turns joined) and the Python source files of NumPy and pyarrow, which
give long documents. A larger input repeats them in a fixed shuffled order until it
holds the tokens asked for. Token ids come from the same documents encoded once with the
benchmark's tokenizer and cut into sequences of the lengths a benchmark asks for.
Preference pairs are GSM8K's records, the answer chosen and a perturbed copy of it
rejected. Every input is written once per size and tokenizer and reused by later runs;
nothing is copied into the repository.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent.parent / "shared" / "data"  # /work/shared/data beside the worktrees
BUNDLED = "packcli:demo"
BATCH = 1024


@dataclass(frozen=True)
class Corpus:
    """An input file and what it holds."""

    path: Path
    tokens: int
    documents: int


class Inputs:
    """Builds and caches the inputs for one tokenizer and one data directory."""

    def __init__(self, data: Path, tokenizer: str, home: Path, python_chars: int = 4_000_000):
        self.data, self.tokenizer, self.home = data, tokenizer, home
        self.python_chars = python_chars
        key = hashlib.sha1(f"{data.resolve()}|{tokenizer}|{python_chars}".encode()).hexdigest()[:10]
        self.dir = home / key
        self.dir.mkdir(parents=True, exist_ok=True)
        self._documents: list[str] | None = None
        self.chat_end = 0  # the documents before it are GSM8K's and FastChat's
        self._counts: list[int] | None = None

    # ------------------------------------------------------------------ documents

    def gsm8k(self, split: str = "train") -> Path:
        path = self.data / f"gsm8k_{split}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: the benchmarks read the shared corpora (or --data DIR)")
        return path

    def documents(self) -> list[str]:
        """GSM8K, FastChat and Python sources, as plain texts."""
        if self._documents is None:
            docs = self.gsm8k_texts()
            chat = self.data / "fastchat_dummy_conversation.json"
            if chat.is_file():
                for conversation in json.loads(chat.read_text(encoding="utf-8")):
                    docs.append("\n".join(turn["value"] for turn in conversation["conversations"]))
            self.chat_end = len(docs)
            docs += python_sources(self.python_chars)
            self._documents = docs
        return self._documents

    def gsm8k_records(self) -> list[dict[str, str]]:
        """GSM8K train's records (`question`, `answer`), in order."""
        return [json.loads(line) for line in self.gsm8k().read_text(encoding="utf-8").splitlines() if line.strip()]

    def gsm8k_texts(self) -> list[str]:
        return [row["question"] + "\n" + row["answer"] for row in self.gsm8k_records()]

    def tokenizer_file(self) -> Path:
        if self.tokenizer == BUNDLED:
            return ROOT / "packcli" / "assets" / "tokenizer" / "tokenizer.json"
        path = Path(self.tokenizer)
        return path / "tokenizer.json" if path.is_dir() else path

    def encode(self, texts: list[str]) -> list[list[int]]:
        from tokenizers import Tokenizer

        backend = Tokenizer.from_file(str(self.tokenizer_file()))
        ids: list[list[int]] = []
        for i in range(0, len(texts), BATCH):
            ids += [e.ids for e in backend.encode_batch_fast(texts[i : i + BATCH], add_special_tokens=False)]
        return ids

    def counts(self) -> list[int]:
        if self._counts is None:
            cached = self.dir / "counts.json"
            if cached.is_file():
                self._counts = json.loads(cached.read_text())
            else:
                self._counts = [len(ids) for ids in self.encode(self.documents())]
                cached.write_text(json.dumps(self._counts))
        return self._counts

    # ------------------------------------------------------------------ text

    def text(self, tokens: int) -> Corpus:
        """JSONL of `{"text"}` records holding at least `tokens` tokens: the documents in a
        fixed shuffled order, repeated."""
        path = self.dir / f"text-{tokens}.jsonl"
        meta = path.with_suffix(".json")
        if meta.is_file() and path.is_file():
            return Corpus(path, **json.loads(meta.read_text()))
        docs, counts = self.documents(), self.counts()
        order = list(range(len(docs)))
        random.Random(0).shuffle(order)
        written = n_docs = 0
        with open(path.with_suffix(".partial"), "w", encoding="utf-8") as out:
            while written < tokens:
                for i in order:
                    out.write(json.dumps({"text": docs[i]}, ensure_ascii=False) + "\n")
                    written, n_docs = written + counts[i], n_docs + 1
                    if written >= tokens:
                        break
        path.with_suffix(".partial").rename(path)
        meta.write_text(json.dumps({"tokens": written, "documents": n_docs}))
        return Corpus(path, written, n_docs)

    def gsm8k_repeated(self, copies: int) -> Corpus:
        """GSM8K train, `copies` times over (prompt/completion records as they are)."""
        path = self.dir / f"gsm8k-x{copies}.jsonl"
        source = self.gsm8k()
        if not path.is_file():
            path.write_text(source.read_text(encoding="utf-8") * copies, encoding="utf-8")
        lines = sum(1 for line in source.open(encoding="utf-8") if line.strip())
        return Corpus(path, 0, lines * copies)

    def pairs(self, records: int) -> tuple[Corpus, Corpus]:
        """GSM8K train as `records` preference pairs (`prompt` the question, `chosen` the
        answer, `rejected` the answer perturbed, see `perturbed`), the records taken in
        order and repeated, each copy's rejected answer perturbed afresh; and the same
        texts as SFT records, two per pair (prompt + chosen, prompt + rejected)."""
        import numpy as np

        pairs, sft = self.dir / f"pairs-{records}.jsonl", self.dir / f"pairs-sft-{records}.jsonl"
        if not (pairs.is_file() and sft.is_file()):
            rng = np.random.default_rng(0)  # one seed: the cached files are named without one
            rows = self.gsm8k_records()
            with open(pairs.with_suffix(".partial"), "w", encoding="utf-8") as p, open(sft, "w", encoding="utf-8") as s:
                for i in range(records):
                    row = rows[i % len(rows)]
                    rejected = perturbed(row["answer"], rng)
                    p.write(
                        json.dumps({"prompt": row["question"], "chosen": row["answer"], "rejected": rejected}) + "\n"
                    )
                    for completion in (row["answer"], rejected):
                        s.write(json.dumps({"prompt": row["question"], "completion": completion}) + "\n")
            pairs.with_suffix(".partial").rename(pairs)
        return Corpus(pairs, 0, records), Corpus(sft, 0, 2 * records)

    def five_documents(self) -> Path:
        """Five short documents of different scripts: a run whose time is start-up."""
        path = self.dir / "five.jsonl"
        texts = [
            "The quick brown fox jumps over the lazy dog. " * 20,
            "def f(x):\n    return x * 2\n" * 30,
            "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
            "日本語のテキスト、中文文本。한국어 텍스트 " * 10,
            "A short one.",
        ]
        path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
        return path

    def texts(self, kind: str) -> Path:
        """JSONL of `{"text"}` records: the GSM8K documents, or the Python sources."""
        path = self.dir / f"texts-{kind}.jsonl"
        if not path.is_file():
            docs = self.gsm8k_texts() if kind == "gsm8k" else python_sources(self.python_chars)
            path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in docs), encoding="utf-8")
        return path

    def sources(self, big_tokens: int) -> list[Corpus]:
        """Three plain-text sources of very different sizes for a mixture: the shuffled
        documents (`big_tokens`), GSM8K's, and forty Python sources; each Corpus with its
        tokens and documents (EOS left out)."""
        small_path = self.dir / "sources-python-40.jsonl"
        if not small_path.is_file():
            docs = python_sources(self.python_chars)[:40]
            small_path.write_text(
                "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in docs), encoding="utf-8"
            )
        out = [self.text(big_tokens)]
        for path in (self.texts("gsm8k"), small_path):
            meta = path.with_suffix(".tokens.json")
            if not meta.is_file():
                texts = [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").split("\n") if line]
                meta.write_text(json.dumps({"tokens": sum(map(len, self.encode(texts))), "documents": len(texts)}))
            out.append(Corpus(path, **json.loads(meta.read_text())))
        return out

    def gsm8k_lengths(self) -> Path:
        """The GSM8K train documents' token counts, as .npy."""
        import numpy as np

        path = self.dir / "gsm8k-lengths.npy"
        if not path.is_file():
            np.save(path, np.array(self.counts()[: len(self.gsm8k_texts())], dtype=np.int64))
        return path

    def segment_lengths(self, seq_len: int) -> Path:
        """The segments bin mode packs from the GSM8K and FastChat documents at `seq_len`:
        each document's tokens and its EOS, a longer one cut into pieces of `seq_len`."""
        import numpy as np

        path = self.dir / f"segments-{seq_len}.npy"
        if not path.is_file():
            self.documents()
            counts = np.array(self.counts()[: self.chat_end], dtype=np.int64) + 1
            whole, rest = np.divmod(counts, seq_len)
            pieces = np.concatenate([np.repeat(seq_len, int(whole.sum())), rest[rest > 0]])
            np.save(path, pieces.astype(np.int64))
        return path

    # ------------------------------------------------------------------ ids

    def stream(self):
        """Every document's ids, one after the other (the real ids the id inputs are cut from)."""
        import numpy as np

        cached = self.dir / "stream.npy"
        if cached.is_file():
            return np.load(cached)
        flat = np.fromiter(
            (i for ids in self.encode(self.documents()) for i in ids), dtype=np.int32, count=sum(self.counts())
        )
        np.save(cached, flat)
        return flat

    def eos(self) -> int:
        """An id above every id of the stream, so EOS and padding never occur in the data."""
        return int(self.stream().max()) + 1

    def ids(self, name: str, tokens: int, mean: float, row_group: int = 1024, seed: int = 0) -> tuple[Corpus, Corpus]:
        """Parquet files with one `ids` list<int32> column: sequences of lognormal lengths
        (sigma 1, the given mean) cut from the real ids, repeated, at `tokens` tokens ("4N")
        and the first quarter of the same sequences ("N")."""
        return tuple(  # type: ignore[return-value]
            self._ids(f"{name}-{mean:g}-{tokens}-{part}", target, mean, row_group, seed)
            for part, target in (("full", tokens), ("quarter", tokens // 4))
        )

    def documents_ids(self, tokens: int, length: int = 2047) -> Corpus:
        """The same number of tokens as documents of `length` ids each (one row each, with EOS)."""
        return self._ids(f"documents-{tokens}", tokens, float(length), 1024, 1, fixed=True)

    def _ids(self, name: str, tokens: int, mean: float, row_group: int, seed: int, fixed: bool = False) -> Corpus:
        import math

        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.dir / f"ids-{name}.parquet"
        meta = path.with_suffix(".json")
        if meta.is_file() and path.is_file():
            return Corpus(path, **json.loads(meta.read_text()))
        stream = self.stream()
        rng = np.random.default_rng(seed)
        schema = pa.schema([("ids", pa.list_(pa.int32()))])
        written = sequences = 0
        at = 0
        with pq.ParquetWriter(path.with_suffix(".partial"), schema, compression="zstd") as writer:
            while written < tokens:
                if fixed:
                    lengths = np.full(row_group, int(mean), dtype=np.int64)
                else:
                    lengths = rng.lognormal(math.log(mean) - 0.5, 1.0, row_group).astype(np.int64)
                lengths = np.maximum(1, lengths)
                keep = int(np.searchsorted(np.cumsum(lengths), tokens - written, side="left")) + 1
                lengths = lengths[:keep]
                offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
                np.cumsum(lengths, out=offsets[1:])
                take = np.arange(at, at + int(offsets[-1])) % len(stream)
                at = int(take[-1]) + 1
                column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(stream[take]))
                writer.write_table(pa.table({"ids": column}, schema=schema))
                written += int(offsets[-1])
                sequences += len(lengths)
        path.with_suffix(".partial").rename(path)
        meta.write_text(json.dumps({"tokens": written, "documents": sequences}))
        return Corpus(path, written, sequences)


NUMBER = re.compile(r"\d+")


def perturbed(answer: str, rng) -> str:
    """A GSM8K answer made wrong: one number of its working changed and its final answer
    off by one (or a digit appended), so it never equals the answer it came from."""
    working, _, final = answer.rpartition("#### ")
    numbers = list(NUMBER.finditer(working))
    if numbers:
        hit = numbers[int(rng.integers(len(numbers)))]
        working = working[: hit.start()] + str(int(hit.group()) + int(rng.integers(1, 9))) + working[hit.end() :]
    final = final.strip()
    digits = final.replace(",", "")
    wrong = str(int(digits) + 1) if digits.lstrip("-").isdigit() else final + "0"
    return f"{working}#### {wrong}"


def python_sources(budget: int) -> list[str]:
    """Python files of NumPy's and pyarrow's sources, in name order, up to `budget`
    characters: long real documents beside the short ones of the corpora."""
    import numpy
    import pyarrow

    texts, used = [], 0
    paths = [p for m in (numpy, pyarrow) for p in sorted(Path(m.__file__).resolve().parent.rglob("*.py"))]
    for path in paths:
        if used >= budget:
            break
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if 200 <= len(text) <= 200_000 and "\x00" not in text:
            texts.append(text)
            used += len(text)
    return texts
