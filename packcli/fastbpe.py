"""A byte-identical fast path for byte-level BPE tokenizers, through `tiktoken`.

`make_encoder(tokenizer, backend, sample_texts)` returns an object with
`encode_batch(texts) -> (flat int32 ids, int64 lengths)`, the same contract as
`packcli.tokenizing.encode_texts` (no special tokens added; special-token strings in the
text are ordinary text unless `parse_special_tokens`, and added tokens that are not special
are matched exactly as the Hugging Face tokenizer matches them).

The `tiktoken` backend is used only when the tokenizer converts *and* the converted
encoding gives the same ids as the tokenizer on the sample of the input and on a fixed
set of hard strings (see `hard_strings`). Anything else stays on the Hugging Face
tokenizer (`hf`), with the reason in `Encoder.reason`.

How a `tokenizer.json` maps to tiktoken (docs/tokenizer-backends.md has the full list):

- model: BPE with every one of the 256 byte-level characters in the vocabulary, no
  dropout, no subword prefix or word suffix. tiktoken ranks are built from the merge
  order (bytes first, then each merge result in the order of its first merge), so the
  merge priority is the tokenizer's own; `rank_to_id` maps back to the tokenizer's ids
  when they differ.
- pre-tokenizer: `ByteLevel(use_regex=True)` (the GPT-2 pattern, `add_prefix_space`
  mirrored in Python), or `Sequence[Split(Regex, Isolated), ByteLevel(use_regex=False,
  add_prefix_space=False)]` (Llama 3, Qwen, tekken-style): the split pattern is used as
  is.
- normalizer: none, or one of NFC/NFD/NFKC/NFKD, mirrored with `unicodedata` (texts with
  characters this Python's Unicode tables do not know go to the Hugging Face tokenizer).
- added tokens: matched in Python exactly as `tokenizers` does (first the non-normalized
  ones on the raw text, leftmost-longest, then the normalized ones on the normalized
  pieces); the text between them goes to tiktoken. Special ones are matched only with
  `parse_special_tokens`; otherwise a match of one stays text, as with tokenizers'
  `encode_special_tokens` (it still hides a non-special token inside it, as there).
- `ignore_merges=True` is tiktoken's own behaviour (a piece that is in the vocabulary is
  one token). With `ignore_merges=False`, every vocabulary token must come out of the
  tokenizer's own BPE as itself, which is checked on the whole vocabulary.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import re
import unicodedata
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from packcli.choices import TOKENIZER_BACKENDS as BACKENDS
from packcli.errors import PackcliError

CACHE_FORMAT = 2

# tokenizers' ByteLevel pre-tokenizer with use_regex=True (src/pre_tokenizers/byte_level.rs).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
NORMALIZERS = ("NFC", "NFD", "NFKC", "NFKD")
# A special token tiktoken is given so that its special-token regex is never empty. It is
# never *allowed*, so if a text contains it, it is encoded as ordinary text.
_PLACEHOLDER_SPECIAL = "<|packcli-placeholder-never-allowed|>"


class Encoder(Protocol):
    backend: str
    reason: str | None
    parse_special_tokens: bool

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]: ...


class Inconvertible(Exception):
    """The tokenizer has no provably equivalent tiktoken encoding; the message says why."""


# --------------------------------------------------------------------------- conversion


@functools.lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, the alphabet of byte-level BPE."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


@dataclass
class AddedTokenSpec:
    content: str
    id: int
    special: bool
    normalized: bool


@dataclass
class Conversion:
    """Everything needed to build the tiktoken encoding; pickled in the cache."""

    pattern: str
    mergeable_ranks: dict[bytes, int]
    rank_to_id: np.ndarray | None  # None when every rank equals the tokenizer's id
    added: list[AddedTokenSpec]
    normalizer: str | None  # one of NORMALIZERS or None
    prefix_space: bool  # ByteLevel add_prefix_space: " " before every piece not starting with one
    notes: list[str] = field(default_factory=list)


def convert(tokenizer) -> Conversion:
    """The tiktoken equivalent of a loaded fast tokenizer, or Inconvertible(reason)."""
    backend = tokenizer.backend_tokenizer
    spec = json.loads(backend.to_str())
    notes: list[str] = []

    if spec.get("truncation"):
        raise Inconvertible("the tokenizer truncates (tokenizer.json sets truncation)")
    if spec.get("padding"):
        raise Inconvertible("the tokenizer pads (tokenizer.json sets padding)")

    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        raise Inconvertible(f"the model is {model.get('type')}, not BPE")
    if model.get("dropout"):
        raise Inconvertible("BPE dropout is set (encoding is random)")
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise Inconvertible("the BPE model uses a subword prefix or word suffix")

    normalizer = _normalizer_form(spec.get("normalizer"))
    pattern, prefix_space = _pre_tokenizer_pattern(spec.get("pre_tokenizer"))

    alphabet = bytes_to_unicode()
    vocab: dict[str, int] = model.get("vocab") or {}
    missing = [b for b, c in alphabet.items() if c not in vocab]
    if missing:
        raise Inconvertible(f"the vocabulary lacks {len(missing)} of the 256 byte-level tokens (not byte-level BPE)")
    # token string -> its bytes (None if it holds a character outside the byte-level alphabet)
    table = dict.fromkeys(range(324), 256)
    table.update({ord(c): b for b, c in alphabet.items()})
    token_bytes: dict[str, bytes | None] = {}
    for tok in vocab:
        try:
            token_bytes[tok] = tok.translate(table).encode("latin-1")
        except UnicodeEncodeError:
            token_bytes[tok] = None

    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model.get("merges") or []]
    ignore_merges = bool(model.get("ignore_merges"))

    # Ranks: the 256 bytes (in id order: their ranks never decide a merge), then every
    # merge result in the order of its first merge, so tiktoken (which merges the pair
    # whose result ranks lowest) follows the merge list. A result made again by a later
    # merge must be made by consecutive merges, or the two orders could disagree.
    ranks: dict[bytes, int] = {}
    rank_ids: list[int] = []
    for b in sorted(range(256), key=lambda b: vocab[alphabet[b]]):
        ranks[bytes([b])] = len(rank_ids)
        rank_ids.append(vocab[alphabet[b]])
    last_result = None
    for left, right in merges:
        result = left + right
        as_bytes = token_bytes.get(result)
        if as_bytes is None or left not in vocab or right not in vocab:
            raise Inconvertible(f"merge {left!r} + {right!r} is not of byte-level vocabulary tokens")
        if as_bytes in ranks:
            if as_bytes != last_result:
                raise Inconvertible(f"token {result!r} is made by merges that are not consecutive in the merge list")
            continue
        ranks[as_bytes] = len(rank_ids)
        rank_ids.append(vocab[result])
        last_result = as_bytes

    # Vocabulary tokens no merge makes. Without ignore_merges the tokenizer can never
    # output them, so they are left out. With ignore_merges a piece equal to one of them
    # is that token, which needs it in the ranks (ranked last, so it wins no merge).
    unmade = sorted(
        (i, tok) for tok, i in vocab.items() if token_bytes[tok] is not None and token_bytes[tok] not in ranks
    )
    if unmade and ignore_merges:
        for i, tok in unmade:
            ranks[token_bytes[tok]] = len(rank_ids)
            rank_ids.append(i)
        notes.append(f"{len(unmade)} vocabulary tokens are made by no merge (reachable as whole pieces only)")
    elif unmade:
        notes.append(f"{len(unmade)} vocabulary tokens are made by no merge and never output; left out")

    if not ignore_merges:
        _check_tokens_encode_to_themselves(backend, ranks, rank_ids)

    merge_pairs = {(token_bytes[left], token_bytes[right]) for left, right in merges}
    missing_merges = _splits_that_are_not_merges(ranks, merge_pairs)
    if missing_merges:
        notes.append(
            f"{len(missing_merges)} two-token splits of vocabulary tokens are not merges "
            "(a merge list not made from tiktoken ranks); each was probed"
        )

    rank_to_id = np.asarray(rank_ids, dtype=np.int32)
    if np.array_equal(rank_to_id, np.arange(len(rank_to_id), dtype=np.int32)):
        rank_to_id = None
    elif len(np.unique(rank_to_id)) != len(rank_to_id):
        raise Inconvertible("two ranks map to the same token id")

    added = _added_tokens(backend)
    conversion = Conversion(
        pattern=pattern,
        mergeable_ranks=ranks,
        rank_to_id=rank_to_id,
        added=added,
        normalizer=normalizer,
        prefix_space=prefix_space,
        notes=notes,
    )
    encoding = build_encoding(conversion)  # the pattern must compile for tiktoken's regex engine
    _probe_missing_merges(backend.model, encoding, conversion, missing_merges)
    return conversion


def _splits_that_are_not_merges(ranks: dict[bytes, int], merge_pairs: set) -> list[tuple[bytes, bytes]]:
    """(a, b) with a, b and a+b all ranked but (a, b) not a merge. tiktoken merges any
    adjacent pair whose concatenation is ranked; the tokenizer only merges listed pairs. A
    merge list made from tiktoken ranks (Llama 3, Qwen, tekken) lists every such split."""
    missing = []
    for token in ranks:
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks and (left, right) not in merge_pairs:
                missing.append((left, right))
    return missing


def _probe_missing_merges(model, encoding, conversion: Conversion, missing: list[tuple[bytes, bytes]]) -> None:
    """Words where a missing merge could make tiktoken differ, encoded both ways (below the
    pre-tokenizer). A difference means the two algorithms really disagree: refuse."""
    if not missing:
        return
    alphabet = bytes_to_unicode()
    core = encoding._core_bpe
    to_id = (
        (lambda ranks: ranks)
        if conversion.rank_to_id is None
        else (lambda ranks: [int(conversion.rank_to_id[r]) for r in ranks])
    )
    for left, right in missing:
        token = left + right
        for word in (
            token + token,
            left + token,
            token + right,
            right + token,
            token + left,
            left + left + right,
            left + right + right,
            b"a" + token,
            token + b"s",
            b" " + token,
        ):
            text = "".join(alphabet[b] for b in word)
            if [t.id for t in model.tokenize(text)] != to_id(core.encode_single_piece(word)):
                raise Inconvertible(
                    f"{left!r} + {right!r} is not a merge, yet tiktoken's BPE merges it: the two differ on {word!r}"
                )


def _normalizer_form(normalizer) -> str | None:
    if normalizer is None:
        return None
    kind = normalizer.get("type")
    if kind == "Sequence":
        parts = normalizer.get("normalizers") or []
        if not parts:
            return None
        if len(parts) == 1:
            return _normalizer_form(parts[0])
        raise Inconvertible(f"normalizer Sequence of {len(parts)} steps cannot be mirrored")
    if kind in NORMALIZERS:
        return kind
    raise Inconvertible(f"normalizer {kind} cannot be mirrored")


def _pre_tokenizer_pattern(pre) -> tuple[str, bool]:
    """(split pattern, add_prefix_space) for the two byte-level shapes, else Inconvertible."""
    if pre is None:
        raise Inconvertible("no pre-tokenizer (not byte-level BPE)")
    kind = pre.get("type")
    if kind == "ByteLevel":
        if not pre.get("use_regex", True):
            raise Inconvertible("ByteLevel pre-tokenizer without a regex split")
        return GPT2_PATTERN, bool(pre.get("add_prefix_space"))
    if kind == "Sequence":
        steps = pre.get("pretokenizers") or []
        if len(steps) == 2 and steps[0].get("type") == "Split" and steps[1].get("type") == "ByteLevel":
            split, byte_level = steps
            regex = (split.get("pattern") or {}).get("Regex")
            if regex is None:
                raise Inconvertible("Split pre-tokenizer on a plain string, not a regex")
            if split.get("behavior") != "Isolated" or split.get("invert"):
                raise Inconvertible(
                    f"Split pre-tokenizer behaviour {split.get('behavior')} (invert={split.get('invert')})"
                )
            if byte_level.get("use_regex", True):
                raise Inconvertible("ByteLevel after Split also splits with its own regex")
            if byte_level.get("add_prefix_space"):
                raise Inconvertible("ByteLevel after Split adds a prefix space to every piece")
            return regex, False
        shape = ", ".join(step.get("type", "?") for step in steps)
        raise Inconvertible(f"pre-tokenizer Sequence[{shape}] is not Split(regex) + ByteLevel")
    raise Inconvertible(f"pre-tokenizer {kind} is not byte-level")


def _check_tokens_encode_to_themselves(backend, ranks: dict[bytes, int], rank_ids: list[int]) -> None:
    """Without ignore_merges, tiktoken still outputs a piece that is in its ranks as one
    token. That is right only if the tokenizer's BPE turns every such token into itself."""
    alphabet = bytes_to_unicode()
    model = backend.model
    for as_bytes, rank in ranks.items():
        if len(as_bytes) < 2:
            continue
        word = "".join(alphabet[b] for b in as_bytes)
        got = [t.id for t in model.tokenize(word)]
        if got != [rank_ids[rank]]:
            raise Inconvertible(
                f"token {word!r} does not encode to itself with the tokenizer's merges (ignore_merges=false)"
            )


def _added_tokens(backend) -> list[AddedTokenSpec]:
    specs = []
    for token_id, token in sorted(backend.get_added_tokens_decoder().items()):
        if not token.content:
            continue
        for flag in ("lstrip", "rstrip", "single_word"):
            if getattr(token, flag, False):
                raise Inconvertible(f"added token {token.content!r} sets {flag}")
        specs.append(
            AddedTokenSpec(
                content=token.content, id=int(token_id), special=bool(token.special), normalized=bool(token.normalized)
            )
        )
    return specs


def build_encoding(conversion: Conversion):
    import tiktoken

    top = max(conversion.mergeable_ranks.values()) + 1
    try:
        return tiktoken.Encoding(
            "packcli-converted",
            pat_str=conversion.pattern,
            mergeable_ranks=conversion.mergeable_ranks,
            special_tokens={_PLACEHOLDER_SPECIAL: top},
        )
    except Exception as exc:  # a pattern tiktoken's regex engine does not accept, mostly
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Inconvertible(f"tiktoken does not accept the conversion: {first}") from exc


# --------------------------------------------------------------------------- cache


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "packcli" / "tiktoken"


def _versions() -> dict:
    import tiktoken
    import tokenizers

    return {"format": CACHE_FORMAT, "tiktoken": tiktoken.__version__, "tokenizers": tokenizers.__version__}


def load_or_convert(tokenizer, cache_dir: Path | None = None, fingerprint: str | None = None) -> Conversion | str:
    """The conversion, or the reason there is none, cached per tokenizer fingerprint
    (`packcli.tokenizing.fingerprint`, computed here if not given)."""
    from packcli import tokenizing

    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = (fingerprint or tokenizing.fingerprint(tokenizer)).split(":", 1)[-1]
    path = cache_dir / f"{key}.pkl"
    versions = _versions()
    try:
        with open(path, "rb") as f:
            stored = pickle.load(f)
        if stored.get("versions") == versions:
            return stored["result"]
    except Exception:  # missing, truncated or from another version: convert again
        pass
    try:
        result: Conversion | str = convert(tokenizer)
    except Inconvertible as exc:
        result = str(exc)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump({"versions": versions, "result": result}, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs the conversion next time
    return result


# --------------------------------------------------------------------------- encoders


class HFEncoder:
    """The Hugging Face path (packcli.tokenizing.encode_texts)."""

    backend = "hf"

    def __init__(self, tokenizer, reason: str | None = None, *, parse_special_tokens: bool = False):
        self.tokenizer = tokenizer
        self.reason = reason
        self.parse_special_tokens = parse_special_tokens

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        from packcli.tokenizing import encode_texts

        return encode_texts(self.tokenizer, list(texts), self.parse_special_tokens)


def _unknown_chars_regex():
    """Characters unassigned in this Python's Unicode tables: their normalization may
    differ from the tokenizer's (newer) tables, so texts holding them go to the tokenizer."""
    ranges, start = [], None
    for cp in range(0x110001):
        unknown = cp < 0x110000 and unicodedata.category(chr(cp)) == "Cn"
        if unknown and start is None:
            start = cp
        elif not unknown and start is not None:
            ranges.append((start, cp - 1))
            start = None
    parts = "".join(f"\\U{a:08x}-\\U{b:08x}" if a != b else f"\\U{a:08x}" for a, b in ranges)
    return re.compile(f"[{parts}]")


class TiktokenEncoder:
    """Encodes with the converted tiktoken encoding on a pool of threads."""

    backend = "tiktoken"

    def __init__(
        self, tokenizer, conversion: Conversion, *, threads: int | None = None, parse_special_tokens: bool = False
    ):
        from packcli.tokenizing import literal_alternation

        self.tokenizer = tokenizer
        self.conversion = conversion
        self.reason = None
        self.parse_special_tokens = parse_special_tokens
        self.encoding = build_encoding(conversion)
        self._core = self.encoding._core_bpe
        self._no_specials: set = set()
        self._rank_to_id = conversion.rank_to_id
        self.threads = max(1, threads or _available_cores())
        self._pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None
        # A match of a special token that is not parsed stays text, but still hides any
        # token inside it; a pass where every token is skipped needs no matching at all.
        self._added_id = {
            t.content: (None if t.special and not parse_special_tokens else t.id) for t in conversion.added
        }
        raw = [t.content for t in conversion.added if not t.normalized]
        norm = [t.content for t in conversion.added if t.normalized]
        self._raw_re = literal_alternation(raw) if any(self._added_id[c] is not None for c in raw) else None
        self._norm_re = literal_alternation(norm) if any(self._added_id[c] is not None for c in norm) else None
        self._unknown_re = _unknown_chars_regex() if conversion.normalizer else None
        self._simple = (
            self._raw_re is None and self._norm_re is None and not conversion.normalizer and not conversion.prefix_space
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- one text -> list of pieces: str (ordinary text) or int (an added token's id)

    def _pieces(self, text: str) -> list:
        pieces: list = []
        for part in self._split(text, self._raw_re):
            if isinstance(part, int):
                pieces.append(part)
                continue
            if self.conversion.normalizer:
                part = unicodedata.normalize(self.conversion.normalizer, part)
            pieces.extend(self._split(part, self._norm_re))
        if self.conversion.prefix_space:
            pieces = [p if isinstance(p, int) or p.startswith(" ") else " " + p for p in pieces]
        return pieces

    def _split(self, text: str, pattern) -> list:
        if not text:
            return []
        if pattern is None:
            return [text]
        out: list = []
        pos = 0
        for m in pattern.finditer(text):
            token_id = self._added_id[m.group()]
            if token_id is None:
                continue
            if m.start() > pos:
                out.append(text[pos : m.start()])
            out.append(token_id)
            pos = m.end()
        if pos < len(text):
            out.append(text[pos:])
        return out

    def _encode_one(self, text: str) -> np.ndarray:
        core = self._core
        if self._simple:
            return self._to_ids(np.frombuffer(core.encode_to_tiktoken_buffer(text, self._no_specials), dtype=np.uint32))
        parts = []
        for piece in self._pieces(text):
            if isinstance(piece, int):
                parts.append(np.array([piece], dtype=np.int64))
            else:
                ranks = np.frombuffer(core.encode_to_tiktoken_buffer(piece, self._no_specials), dtype=np.uint32)
                parts.append(self._to_ids(ranks).astype(np.int64))
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(parts)

    def _to_ids(self, ranks: np.ndarray) -> np.ndarray:
        return ranks if self._rank_to_id is None else self._rank_to_id[ranks]

    def _encode_chunk(self, texts: Sequence[str]):
        """Arrays for a run of texts; the index of any text tiktoken cannot take (a lone
        surrogate, or characters the normalizer mirror does not know) goes to `hf`."""
        arrays, to_hf = [], []
        unknown = self._unknown_re
        for i, text in enumerate(texts):
            if unknown is not None and not text.isascii() and unknown.search(text):
                to_hf.append(i)
                arrays.append(None)
                continue
            try:
                arrays.append(self._encode_one(text))
            except UnicodeEncodeError:
                to_hf.append(i)
                arrays.append(None)
        return arrays, to_hf

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        texts = list(texts)
        n = len(texts)
        if n == 0:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        bounds = _balanced_bounds(texts, self.threads * 4 if self._pool is not None else 1)
        chunks = [texts[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        if self._pool is not None and len(chunks) > 1:
            results = list(self._pool.map(self._encode_chunk, chunks))
        else:
            results = [self._encode_chunk(c) for c in chunks]
        arrays: list = []
        hf_positions: list[int] = []
        for start, (chunk_arrays, to_hf) in zip(bounds[:-1], results):
            arrays.extend(chunk_arrays)
            hf_positions.extend(start + i for i in to_hf)
        if hf_positions:
            from packcli.tokenizing import encode_texts

            flat, lengths = encode_texts(self.tokenizer, [texts[i] for i in hf_positions], self.parse_special_tokens)
            ends = np.cumsum(lengths)
            for k, i in enumerate(hf_positions):
                arrays[i] = flat[ends[k] - lengths[k] : ends[k]]
        lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=n)
        return np.concatenate(arrays).astype(np.int32, copy=False), lengths


def _balanced_bounds(texts: list[str], parts: int) -> list[int]:
    """Cut points splitting texts into about `parts` runs of similar total length."""
    n = len(texts)
    parts = max(1, min(parts, n))
    if parts == 1:
        return [0, n]
    sizes = np.fromiter((len(t) for t in texts), dtype=np.int64, count=n) + 16
    cum = np.cumsum(sizes)
    targets = cum[-1] * np.arange(1, parts) / parts
    cuts = np.searchsorted(cum, targets, side="left") + 1
    return sorted({0, *[int(c) for c in cuts if 0 < c < n], n})


def _available_cores() -> int:
    for name in ("RAYON_NUM_THREADS", "RAYON_RS_NUM_CPUS"):
        value = os.environ.get(name)
        if value and value.isdigit() and int(value) > 0:
            return int(value)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


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
    from packcli.tokenizing import encode_texts

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
            return f"text {i} ({texts[i][:40]!r}...): {len(a)} ids from the tokenizer, {len(b)} from tiktoken"
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
) -> Encoder:
    """The encoder for a run.

    - "hf": the Hugging Face tokenizer, as `packcli.tokenizing.encode_texts`.
    - "tiktoken": the converted encoding; PackcliError if the tokenizer does not convert
      or gives different ids on `sample_texts` or the hard strings.
    - "auto": "tiktoken" if it converts and is identical on `sample_texts` and the hard
      strings, else "hf" with `.reason` saying why.

    `cache_dir` defaults to default_cache_dir(); `threads` to the cores available (or
    RAYON_NUM_THREADS); `fingerprint` (packcli.tokenizing.fingerprint) saves computing it twice;
    `parse_special_tokens` as in `packcli.tokenizing.encode_texts`, for both backends.
    """
    if backend not in BACKENDS:
        raise PackcliError(f"--tokenizer-backend must be one of {', '.join(BACKENDS)}, not {backend!r}", usage=True)
    if backend == "hf":
        return HFEncoder(tokenizer, parse_special_tokens=parse_special_tokens)
    result = load_or_convert(tokenizer, cache_dir, fingerprint)
    if isinstance(result, str):
        if backend == "tiktoken":
            raise PackcliError(f"--tokenizer-backend tiktoken: this tokenizer cannot be converted: {result}")
        return HFEncoder(
            tokenizer, reason=f"not convertible to tiktoken: {result}", parse_special_tokens=parse_special_tokens
        )
    encoder = TiktokenEncoder(tokenizer, result, threads=threads, parse_special_tokens=parse_special_tokens)
    sample = list(sample_texts)
    for name, texts in (("the input sample", sample), ("the hard strings", hard_strings(tokenizer))):
        difference = first_difference(tokenizer, encoder, texts)
        if difference is not None:
            encoder.close()
            reason = f"tiktoken ids differ from the tokenizer's on {name}: {difference}"
            if backend == "tiktoken":
                raise PackcliError(f"--tokenizer-backend tiktoken: {reason}")
            return HFEncoder(tokenizer, reason=reason, parse_special_tokens=parse_special_tokens)
    return encoder
