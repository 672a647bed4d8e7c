"""Survey: BPE encoders that claim to beat tiktoken, on identical ids and speed.

    pip install --target /tmp/encoders riptoken gigatoken kitoken quicktok bpe-openai
    python scripts/survey_encoders.py --tokenizer bench-out/qwen-tokenizer --extra /tmp/encoders

Every candidate gets the same vocabulary: packcli's tiktoken conversion of the tokenizer
(ranks, pattern) where it takes ranks, else the tokenizer.json itself. On each corpus
(code: this repository's sources; prose: ../shared/data; multilingual and adversarial:
generated here) it reports how many documents get exactly the Hugging Face tokenizer's
ids (`encode_batch_fast`, special-token strings as text, as packcli encodes by default)
and the CPU seconds of encoding every document one by one on one thread (best of
--repeats; CPU time, so the figure holds on a shared machine), as a ratio to tiktoken.
The candidates' packages are never a dependency of packcli: --extra is appended to
sys.path for this script alone.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import unicodedata
from pathlib import Path

os.environ["RAYON_NUM_THREADS"] = "1"  # one thread for everyone: per-document cost, not parallelism
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def corpora(data: Path) -> dict[str, list[str]]:
    code = [
        p.read_text(encoding="utf-8") for d in ("packcli", "tests", "scripts") for p in sorted((ROOT / d).glob("*.py"))
    ]
    prose = []
    gsm8k = data / "gsm8k_train.jsonl"
    if gsm8k.is_file():
        for line in gsm8k.read_text(encoding="utf-8").splitlines()[:3000]:
            record = json.loads(line)
            prose.append(record["question"] + "\n" + record["answer"])
    chat = data / "fastchat_dummy_conversation.json"
    if chat.is_file():
        prose += ["\n".join(t["value"] for t in c["conversations"]) for c in json.loads(chat.read_text())]
    rng = random.Random(0)
    scripts = [
        (0x4E00, 0x9FFF),
        (0x0400, 0x04FF),
        (0x0600, 0x06FF),
        (0x0900, 0x097F),
        (0xAC00, 0xD7A3),
        (0x3040, 0x30FF),
    ]
    scripts += [(0x0370, 0x03FF), (0x0E00, 0x0E7F), (0x10A0, 0x10FF), (0x0590, 0x05FF)]
    multilingual = []
    for _ in range(400):
        words = []
        for _ in range(rng.randint(20, 200)):
            lo, hi = rng.choice(scripts)
            word = "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8)))
            words.append(word if rng.random() > 0.2 else word + rng.choice([",", ".", "!", "?", "،", "。"]))
        multilingual.append(" ".join(words))
    return {"code": code, "prose": prose, "multilingual": multilingual, "adversarial": adversarial(rng)}


def adversarial(rng: random.Random) -> list[str]:
    """Long runs of one character, unusual Unicode, whitespace runs, special-token strings."""
    texts = [
        c * n
        for c in ("a", " ", "\n", "!", "9", "é", "日", "\u200b", "😀", "\t", "'", "ß")
        for n in (1, 7, 1000, 20_000)
    ]
    texts += ["ab" * 10_000, "a " * 10_000, " \n" * 5000, "1.2" * 5000, "'s" * 3000, "\r\n" * 4000]
    assigned = [chr(c) for c in range(0x20, 0x30000) if unicodedata.category(chr(c)) not in ("Cn", "Cs", "Co")]
    for _ in range(300):
        texts.append("".join(rng.choice(assigned) for _ in range(rng.randint(1, 300))))
    texts += [
        "e\u0301\u0301\u0301" * 500,
        "👨‍👩‍👧‍👦" * 300,
        "\U0001d518\U0001d52b" * 500,
        "\ufeff\u00a0\u3000\u2028\u0085" * 400,
    ]
    texts += ["x<|endoftext|>y <|im_start|>user\nhi<|im_end|>", "<|endoftext|>" * 100]
    return texts


def candidates(tokenizer_dir: Path, conversion, workdir: Path) -> dict:
    """name -> (encode one text -> list of ids) or the reason it cannot take this tokenizer."""
    import numpy as np

    from packcli.tokenize.bpe_convert import build_encoding

    tokenizer_json = str(tokenizer_dir / "tokenizer.json")
    to_id = conversion.rank_to_id
    encoding = build_encoding(conversion)
    out: dict = {}
    if to_id is None:
        out["tiktoken"] = encoding.encode_ordinary
    else:
        out["tiktoken"] = lambda text: to_id[np.asarray(encoding.encode_ordinary(text))].tolist()
    attempts = {
        "riptoken": lambda: _riptoken(conversion),
        "gigatoken": lambda: _gigatoken(tokenizer_json),
        "gigatoken, ranks + qwen2 scheme": lambda: _gigatoken_ranks(conversion, workdir, "qwen2"),
        "kitoken": lambda: _kitoken(tokenizer_json),
        "quicktok": lambda: _quicktok(tokenizer_json, workdir),
        "bpe-openai": _bpe_openai,
    }
    for name, attempt in attempts.items():
        try:
            out[name] = attempt()
        except Exception as exc:  # a candidate that refuses the tokenizer: its reason goes in the table
            out[name] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ''}"
    return out


def _riptoken(conversion):
    import riptoken

    core = riptoken.CoreBPE(conversion.mergeable_ranks, {}, conversion.pattern)
    return core.encode_ordinary


def _gigatoken(path: str):
    import gigatoken

    tok = gigatoken.Tokenizer.from_json(Path(path).read_text(encoding="utf-8"))
    return lambda text: tok.encode(text).tolist()


def _gigatoken_ranks(conversion, workdir: Path, scheme: str):
    """gigatoken from the converted ranks, without special tokens (so their strings are
    text, as packcli encodes by default); it has no general regex, only named schemes."""
    import base64

    import gigatoken

    path = workdir / "ranks.tiktoken"
    ranks = sorted(conversion.mergeable_ranks.items(), key=lambda item: item[1])
    path.write_text("".join(f"{base64.b64encode(token).decode()} {rank}\n" for token, rank in ranks))
    tok = gigatoken.Tokenizer.from_tiktoken(path, pretokenizer=scheme, special_tokens={})
    return lambda text: tok.encode(text).tolist()


def _kitoken(path: str):
    import kitoken

    tok = kitoken.Kitoken.from_tokenizers_file(path)
    return lambda text: tok.encode(text, False)


def _quicktok(path: str, workdir: Path):
    import quicktok

    data = workdir / "quicktok"
    quicktok.import_tokenizer(path, "survey", data_dir=str(data))
    tok = quicktok.get_encoding("survey", str(data))
    return tok.encode_ordinary


def _bpe_openai():
    import bpe_openai

    names = bpe_openai.list_encoding_names()
    raise RuntimeError(f"only its bundled encodings ({', '.join(names)}); no constructor for another vocabulary")


def measure(encode, texts: list[str], want: list[list[int]], repeats: int) -> tuple[int, float]:
    same = 0
    for text, ids in zip(texts, want):
        try:
            same += list(encode(text)) == ids
        except Exception:
            pass
    best = float("inf")
    for _ in range(repeats):
        start = cpu()
        for text in texts:
            try:
                encode(text)
            except Exception:
                pass
        best = min(best, cpu() - start)
    return same, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default=str(ROOT / "bench-out" / "qwen-tokenizer"))
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--extra", help="a pip --target directory holding the candidates")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.extra:
        sys.path.append(args.extra)
    from packcli.tokenize.bpe_convert import load_or_convert
    from packcli.tokenize.cache import Store
    from packcli.tokenize.tokenizer import encode_texts, load_tokenizer

    tokenizer = load_tokenizer(args.tokenizer)
    conversion = load_or_convert(tokenizer, Store.default())
    assert not isinstance(conversion, str), conversion
    texts = corpora(Path(args.data))
    with tempfile.TemporaryDirectory() as tmp:
        encoders = candidates(Path(args.tokenizer), conversion, Path(tmp))
        print(
            f"# tokenizer {args.tokenizer}; one thread; CPU seconds, best of {args.repeats}; ratio = tiktoken / candidate"
        )
        print("| encoder | " + " | ".join(f"{name} ({len(docs)} docs)" for name, docs in texts.items()) + " |")
        print("|---|" + "---|" * len(texts))
        wants = {}
        for name, docs in texts.items():
            flat, lengths = encode_texts(tokenizer, docs)
            ends = lengths.cumsum()
            wants[name] = [flat[e - n : e].tolist() for e, n in zip(ends, lengths)]
        base = {name: measure(encoders["tiktoken"], docs, wants[name], args.repeats)[1] for name, docs in texts.items()}
        for encoder_name, encode in encoders.items():
            if isinstance(encode, str):
                print(f"| {encoder_name} | not run: {encode} |" + " |" * (len(texts) - 1))
                continue
            cells = []
            for name, docs in texts.items():
                same, seconds = measure(encode, docs, wants[name], args.repeats)
                cells.append(f"{same}/{len(docs)} same, {seconds:.2f} s, {base[name] / seconds:.2f}x")
            print(f"| {encoder_name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
