"""A byte-identical fast path for byte-level BPE tokenizers, through `tiktoken`.

`make_encoder(tokenizer, backend, sample_texts)` returns an object with
`encode_batch(texts) -> (flat int32 ids, int64 lengths)`, the same contract as
`packcli.tokenize.tokenizer.encode_texts` (no special tokens added; special-token strings in the
text are ordinary text unless `parse_special_tokens`, and added tokens that are not special
are matched exactly as the Hugging Face tokenizer matches them).

The `tiktoken` backend is used only when the tokenizer converts *and* the converted
encoding gives the same ids as the tokenizer on the sample of the input and on a fixed
set of hard strings (see `hard_strings`). Under `auto`, gigatoken (the `packcli[fast]`
extra) encodes the same ranks first where its scheme is the tokenizer's exact pattern,
under the same check (`GigatokenEncoder`). Anything else stays on the Hugging Face
tokenizer (`hf`), with the reason in `Encoder.reason`.

The encoders are in `packcli.tokenize.bpe_encoders`; here is the choice among them and
the identity check. The conversion and its cache are in `packcli.tokenize.bpe_convert`
(how a `tokenizer.json` maps to tiktoken is described there and in
docs/tokenizer-backends.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from packcli.core.choices import TOKENIZER_BACKENDS as BACKENDS
from packcli.core.errors import PackcliError
from packcli.tokenize.bpe_convert import Conversion, load_or_convert
from packcli.tokenize.bpe_encoders import (
    GIGATOKEN_SCHEMES,
    Encoder,
    GigatokenEncoder,
    GigatokenUnavailable,
    HFEncoder,
    TiktokenEncoder,
    gigatoken_version,
    ranks_file_bytes,
)
from packcli.tokenize.cache import Store
from packcli.tokenize.tokenizer import encode_texts
from packcli.tokenize.tokenizer import fingerprint as tokenizing_fingerprint

# --------------------------------------------------------------------------- identity check


def hard_strings(tokenizer) -> list[str]:
    """Texts where a conversion most plausibly differs: added/special tokens inside text
    (matched or, for special ones not parsed, merged with the text around them), unicode,
    whitespace runs, very long words, empty strings."""
    added = sorted(tokenizer.backend_tokenizer.get_added_tokens_decoder().values(), key=lambda t: t.content)
    texts = [
        "",
        " ",
        "  ",
        "\n",
        "\t",
        "\r\n",
        "\n\n\n",
        " \n ",
        "   \t\t  \n\n  x  ",
        "x   ",
        "   x",
        "a  b   c    d",
        "\u00a0\u00a0x\u3000y\u2028z\u0085",
        "\x00\x01\x7f",
        "Hello, world! It's 2024: don't, I'VE, you'LL 'S 'ſ",
        "The quick brown fox jumps over the lazy dog.",
        "def f(x):\n    return x ** 2  # square\n\n\n\tpass\n",
        "naïve café résumé Ångström",
        "cafe\u0301 e\u0301\u0301 >\u0338 \u212b \u1e9b\u0323",
        "ﬁ ① ² ｆｕｌｌ",
        "日本語のテキスト、中文文本。한국어 텍스트",
        "مرحبا بالعالم שלום עולם",
        "Ελληνικά Русский текст ქართული",
        "👍🏽 👨‍👩‍👧‍👦 🇫🇷 e\u200dx \ufeffbom",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀 \U0001fae8 \U0010fffd",
        "1234567890 3.14159 1,000,000 ٣٤٥ ௧௨",
        "ALLCAPS lowercase MiXeD camelCaseWord snake_case_word",
        "a" * 3000,
        "ab" * 2000,
        "x" + "é" * 1000,
        "9" * 2000,
        "!" * 1500,
        " " * 3000,
        "\n" * 1000,
        "abcdefghijklmnopqrstuvwxyz" * 80,
        "".join(chr(0x4E00 + (i * 37) % 20000) for i in range(2000)),
    ]
    for token in added:
        c = token.content
        texts += [c, c + c, f"a{c}b", f" {c} ", f"x {c}\n{c}y", c[:-1], c[1:], f"{c[:-1]} {c}", f"é{c}é", f"\n{c}\n\n"]
    if len(added) > 1:
        texts.append("".join(t.content for t in added[:50]))
    texts += _special_tokens_in_context(added)
    return texts


def _special_tokens_in_context(added) -> list[str]:
    """Special tokens where, written as text, their characters merge with their neighbours
    (the default: records cannot write control tokens), beside and around the non-special
    ones (which still match inside them, or are hidden by them), in a chat-like line."""
    specials = [t.content for t in added if t.special][:50]
    others = [t.content for t in added if not t.special][:20]
    texts = []
    for c in specials:
        texts += [
            f"x{c}y",
            f"{c}.",
            f"'{c}'s",
            f"  {c}  x",
            f"1{c}2",
            f"{c}\n\n",
            f"{c[0]}{c}{c[-1]}",
            f"日{c}本",
            f"{c}{c[:-1]}",
        ]
    for c in specials[:5]:
        for n in others:
            texts += [n + c, c + n, f"{n} {c} {n}", c[: len(c) // 2] + n + c[len(c) // 2 :]]
    if specials:
        first, last = specials[0], specials[-1]
        texts.append(f"{first}user\nSay {last} and {first}assistant\n please{last}\n{first}")
    return texts


def first_difference(tokenizer, encoder, texts: Sequence[str]) -> str | None:
    """None if the encoder gives the tokenizer's ids on every text, else a description."""
    texts = list(texts)
    if not texts:
        return None
    want_flat, want_len = encode_texts(tokenizer, texts, encoder.parse_special_tokens)
    got_flat, got_len = encoder.encode_batch(texts)
    if np.array_equal(want_len, got_len) and np.array_equal(want_flat, got_flat):
        return None
    want_ends, got_ends = np.cumsum(want_len), np.cumsum(got_len)
    for i in range(len(texts)):
        a = want_flat[want_ends[i] - want_len[i] : want_ends[i]]
        b = got_flat[got_ends[i] - got_len[i] : got_ends[i]]
        if not np.array_equal(a, b):
            return f"text {i} ({texts[i][:40]!r}...): {len(a)} ids from the tokenizer, {len(b)} from {encoder.backend}"
    return "the outputs differ"


# --------------------------------------------------------------------------- entry point


def make_encoder(
    tokenizer,
    backend: str = "auto",
    sample_texts: Sequence[str] = (),
    *,
    cache_dir: Path | None = None,
    threads: int | None = None,
    fingerprint: str | None = None,
    parse_special_tokens: bool = False,
    store: Store | None = None,
    small_input: bool = False,
) -> Encoder:
    """The encoder for a run.

    - "hf": the Hugging Face tokenizer, as `packcli.tokenize.tokenizer.encode_texts`.
    - "tiktoken": the converted encoding; PackcliError if the tokenizer does not convert
      or gives different ids on `sample_texts` or the hard strings.
    - "auto": "gigatoken" (the same ranks, encoded by gigatoken) if it is installed, has a
      scheme for exactly this pre-tokenizer pattern and is identical on `sample_texts` and
      the hard strings; else "tiktoken" under the same condition; else "hf". `.reason` says
      why a faster one was passed over.

    The conversion and the hard strings' verdict come from the start-up cache (`store`,
    else one over `cache_dir`, else the default one). With a cached verdict and an exact
    conversion (`Conversion.exact`) the sample is not encoded twice either, so a warm run
    needs nothing of the Hugging Face tokenizer. `threads` defaults to the cores available
    (or RAYON_NUM_THREADS); `fingerprint` (packcli.tokenize.tokenizer.fingerprint) saves computing
    it; `parse_special_tokens` as in `packcli.tokenize.tokenizer.encode_texts`, for both backends.
    `small_input`: "auto" takes tiktoken, not gigatoken, whose encoder is slower to build.
    """
    if backend not in BACKENDS:
        raise PackcliError(f"--tokenizer-backend must be one of {', '.join(BACKENDS)}, not {backend!r}", usage=True)
    if backend == "hf":
        return HFEncoder(tokenizer, parse_special_tokens=parse_special_tokens)
    store = store if store is not None else Store.of(cache_dir)
    fingerprint = fingerprint or tokenizing_fingerprint(tokenizer)
    result = load_or_convert(tokenizer, store, fingerprint)
    if isinstance(result, str):
        if backend == "tiktoken":
            raise PackcliError(f"--tokenizer-backend tiktoken: this tokenizer cannot be converted: {result}")
        return HFEncoder(
            tokenizer, reason=f"not convertible to tiktoken: {result}", parse_special_tokens=parse_special_tokens
        )
    reason: str | None = None
    candidates = _candidates(backend, result)
    if small_input and GigatokenEncoder in candidates:
        candidates = [TiktokenEncoder]
        reason = "a small input: tiktoken's encoder builds faster than gigatoken's"
    for kind in candidates:
        encoder, difference = _checked_encoder(
            kind, tokenizer, result, store, fingerprint, sample_texts, threads, parse_special_tokens
        )
        if encoder is not None:
            encoder.reason = reason  # why a faster candidate was passed over, if one was
            return encoder
        reason = difference
    if backend == "tiktoken":
        raise PackcliError(f"--tokenizer-backend tiktoken: {reason}")
    return HFEncoder(tokenizer, reason=reason, parse_special_tokens=parse_special_tokens)


def fits_sample(
    encoder: Encoder,
    tokenizer,
    sample_texts: Sequence[str],
    *,
    fingerprint: str,
    store: Store,
    parse_special_tokens: bool,
) -> bool:
    """Whether an encoder made for one input serves another (a mixture's next source) as
    make_encoder would judge it: the Hugging Face encoder always; a converted one when it
    gives the tokenizer's ids on this input's sample, which make_encoder too only checks
    where the conversion is not exact or the hard strings' verdict is not cached."""
    if not isinstance(encoder, TiktokenEncoder):
        return True
    result = load_or_convert(tokenizer, store, fingerprint)
    if isinstance(result, str):
        return False
    verdict_key = f"{fingerprint.split(':', 1)[-1]}-{'parsed' if parse_special_tokens else 'text'}"
    if isinstance(encoder, GigatokenEncoder):
        verdict_key += f"-gigatoken-{gigatoken_version()}"
    known, verdict = store.load("identity", verdict_key)
    if known and verdict is not None:
        return False
    return _identity_difference(tokenizer, encoder, sample_texts, check_sample=not (known and result.exact)) is None


def _candidates(backend: str, conversion: Conversion) -> list[type[TiktokenEncoder]]:
    """gigatoken first under auto when it is installed and takes the conversion (its pattern
    and ranks a merge list was made from); then tiktoken."""
    takes = conversion.exact and conversion.pattern in GIGATOKEN_SCHEMES
    return (
        [GigatokenEncoder, TiktokenEncoder]
        if backend == "auto" and takes and gigatoken_version()
        else [TiktokenEncoder]
    )


def _checked_encoder(
    kind: type[TiktokenEncoder],
    tokenizer,
    conversion: Conversion,
    store: Store,
    fingerprint: str,
    sample_texts: Sequence[str],
    threads: int | None,
    parse_special_tokens: bool,
) -> tuple[TiktokenEncoder | None, str | None]:
    """(the encoder, None) if it gives the tokenizer's ids on the sample and the hard strings,
    else (None, why). The hard strings' verdict is cached per encoder (and gigatoken version)."""
    options: dict = {"threads": threads, "parse_special_tokens": parse_special_tokens}
    if kind is GigatokenEncoder:
        options["ranks_file"] = _cached_ranks_file(conversion, store, fingerprint)
    try:
        encoder = kind(tokenizer, conversion, **options)
    except GigatokenUnavailable as exc:
        return None, str(exc)
    verdict_key = f"{fingerprint.split(':', 1)[-1]}-{'parsed' if parse_special_tokens else 'text'}"
    if kind is GigatokenEncoder:
        verdict_key += f"-gigatoken-{gigatoken_version()}"
    known, verdict = store.load("identity", verdict_key)
    known = known and (verdict is None or isinstance(verdict, str))
    reason = _identity_difference(tokenizer, encoder, sample_texts, check_sample=not (known and conversion.exact))
    if reason is None and not known:
        verdict = _hard_strings_difference(tokenizer, encoder)
        store.save("identity", verdict_key, verdict)
    reason = reason or verdict
    if reason is not None:
        encoder.close()
        return None, reason
    return encoder, None


def _cached_ranks_file(conversion: Conversion, store: Store, fingerprint: str) -> bytes:
    """gigatoken's ranks file from the start-up cache (a run saves building it: 0.1-0.2 s)."""
    key = fingerprint.split(":", 1)[-1]
    hit, stored = store.load("gigatoken", key)
    if hit and isinstance(stored, bytes):
        return stored
    ranks_file = ranks_file_bytes(conversion)
    store.save("gigatoken", key, ranks_file)
    return ranks_file


def _identity_difference(tokenizer, encoder, sample_texts: Sequence[str], *, check_sample: bool) -> str | None:
    """Why the encoder is not the tokenizer on the input sample, or None."""
    if not check_sample:
        return None
    difference = first_difference(tokenizer, encoder, list(sample_texts))
    return (
        None
        if difference is None
        else f"{encoder.backend} ids differ from the tokenizer's on the input sample: {difference}"
    )


def _hard_strings_difference(tokenizer, encoder) -> str | None:
    """Why the encoder is not the tokenizer on the hard strings, or None (the verdict cached)."""
    difference = first_difference(tokenizer, encoder, hard_strings(tokenizer))
    return (
        None
        if difference is None
        else f"{encoder.backend} ids differ from the tokenizer's on the hard strings: {difference}"
    )
