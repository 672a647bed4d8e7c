"""Load a Hugging Face tokenizer, resolve its special ids, and encode batches to flat arrays.

Token ids leave this module as one flat int32 array plus per-sequence lengths, so that
nothing downstream handles Python lists of ints.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packcli.core.errors import PackcliError
from packcli.tokenize.cache import LazyTokenizer, Store, TokenizerFacts, files_fingerprint

BUNDLED_NAME = "packcli:demo"
BUNDLED_DIR = Path(__file__).resolve().parents[1] / "assets" / "tokenizer"


@dataclass(frozen=True)
class SpecialIds:
    eos_id: int | None
    bos_id: int | None
    pad_id: int


def resolve_tokenizer_path(spec: str) -> str:
    """Map the bundled name to its directory; refuse local-looking paths that do not exist
    (so a typo fails at once instead of being tried on the Hub)."""
    if spec == BUNDLED_NAME:
        return str(BUNDLED_DIR)
    path = Path(spec).expanduser()
    if path.exists():
        return str(path)
    if spec.startswith((".", "/", "~")) or spec.endswith(".json") or os.sep + os.sep in spec:
        raise PackcliError(f"tokenizer not found: {spec!r} is not an existing directory or file")
    return spec


def load_tokenizer(spec: str, *, via_transformers: bool = False) -> Any:
    """A fast (Rust-backed) tokenizer: a local directory, a tokenizer.json file or a Hub name.

    A local tokenizer.json that transformers would use unchanged loads as a `TokenizerFile`,
    without importing transformers (3-4 s of every run). Everything else, and every call
    with `via_transformers=True` (chat templates, decoding), loads through transformers."""
    location = resolve_tokenizer_path(spec)
    if not via_transformers:
        plain = _plain_tokenizer_file(Path(location))
        if plain is not None:
            return plain
    from packcli.tokenize import source as tokenizer_source

    if Path(location).exists():
        tokenizer_source.check_local(Path(location))
    else:
        tokenizer_source.check_hub_name(spec)
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers  # lazy: seconds to import, and a plain tokenizer.json or --ids-field needs none of it

    try:
        if location.endswith(".json") and Path(location).is_file():
            tokenizer = _load_tokenizer_file(Path(location), transformers.PreTrainedTokenizerFast)
        else:
            cls = _named_tokenizer_class(Path(location), transformers)
            if cls is None:  # a Hub name, or a directory that does not name its class
                from transformers import AutoTokenizer

                cls = AutoTokenizer
            tokenizer = cls.from_pretrained(location)
    except PackcliError:
        raise
    except Exception as exc:  # transformers raises many types for a bad directory or name
        said = " ".join(str(exc).split()) or type(exc).__name__  # every line: the first may end mid-sentence
        raise PackcliError(f"cannot load tokenizer {spec!r}: {said[:400]}") from exc
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise PackcliError(f"tokenizer {spec!r} has no fast (Rust) version; packcli needs one")
    _no_length_changes(backend)
    return tokenizer


def load_with_facts(
    spec: str, store: Store, *, via_transformers: bool = False, eager: bool = False
) -> tuple[Any, TokenizerFacts]:
    """The tokenizer and its facts; from the start-up cache, keyed by the tokenizer's files,
    the tokenizer is a `LazyTokenizer`, loaded only if something needs more than the facts
    (at once with `eager`). Chat templates load through transformers, never from the cache."""
    key = None if via_transformers else files_fingerprint(resolve_tokenizer_path(spec))
    if key is not None:
        hit, facts = store.load("facts", key)
        if hit and isinstance(facts, TokenizerFacts):
            lazy = LazyTokenizer(facts, lambda: load_tokenizer(spec))
            if eager:
                lazy.loaded()
            return lazy, facts
    tokenizer = load_tokenizer(spec, via_transformers=via_transformers)
    facts = tokenizer_facts(tokenizer)
    if key is not None:
        store.save("facts", key, facts)
    return tokenizer, facts


def tokenizer_facts(tokenizer: Any) -> TokenizerFacts:
    """What a run needs of a loaded tokenizer besides encoding with it."""
    return TokenizerFacts(
        fingerprint=fingerprint(tokenizer),
        vocab_size=len(tokenizer),
        tokens={key: getattr(tokenizer, key, None) for key in _SPECIAL_KEYS},
        ids={key + "_id": getattr(tokenizer, key + "_id", None) for key in _SPECIAL_KEYS},
        adds_bos=adds_bos_by_default(tokenizer),
        special_strings=tuple(special_token_strings(tokenizer)),
    )


def _no_length_changes(backend: Any) -> None:
    """Lengths are packcli's business (--seq-len, --overlong): a tokenizer.json that
    truncates or pads would silently cut or fill documents."""
    backend.no_truncation()
    backend.no_padding()


# tokenizer_config.json keys that do not change how transformers builds the tokenizer from
# tokenizer.json. Anything else (add_bos_token, add_prefix_space, legacy, a model-specific
# class...) may rewrite its post-processor or pre-tokenizer, so it goes through transformers.
_PLAIN_CLASSES = (None, "PreTrainedTokenizerFast", "TokenizersBackend")
_PLAIN_KEYS = {
    "backend",
    "tokenizer_class",
    "model_max_length",
    "clean_up_tokenization_spaces",
    "model_input_names",
    "padding_side",
    "truncation_side",
    "chat_template",
    "added_tokens_decoder",
    "errors",
}
_SPECIAL_KEYS = ("eos_token", "bos_token", "pad_token", "unk_token")


class TokenizerFile:
    """The part of a transformers fast tokenizer packcli uses outside chat templates, over a
    bare `tokenizers.Tokenizer`."""

    def __init__(self, backend: Any, specials: dict[str, str | None]):
        self.backend_tokenizer = backend
        for key in _SPECIAL_KEYS:
            token = specials.get(key)
            setattr(self, key, token)
            setattr(self, key + "_id", None if token is None else backend.token_to_id(token))

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int | None]:
        return [self.backend_tokenizer.token_to_id(t) for t in tokens]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """As transformers encodes (special tokens written in the text are matched)."""
        with special_tokens_split(self.backend_tokenizer, False):
            return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids


def _plain_tokenizer_file(location: Path) -> TokenizerFile | None:
    """A TokenizerFile when `location` (a directory or a tokenizer.json) is one transformers
    would load unchanged; None when it must go through transformers."""
    if location.is_dir():
        file, config_path = location / "tokenizer.json", location / "tokenizer_config.json"
        if not config_path.is_file() or any(
            (location / n).exists() for n in ("special_tokens_map.json", "added_tokens.json")
        ):
            return None
    elif location.name.endswith(".json") and location.is_file():
        file, config_path = location, location.with_name("tokenizer_config.json")
    else:
        return None
    try:
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    except (OSError, ValueError):
        return None
    if not file.is_file() or not isinstance(config, dict) or config.get("tokenizer_class") not in _PLAIN_CLASSES:
        return None
    if set(config) - _PLAIN_KEYS - set(_SPECIAL_KEYS):
        return None
    specials: dict[str, str | None] = {}
    for key in _SPECIAL_KEYS:
        value = config.get(key)
        if isinstance(value, dict):  # AddedToken serialised as a dict
            value = value.get("content")
        if value is not None and not isinstance(value, str):
            return None
        specials[key] = value
    from tokenizers import Tokenizer  # lazy: a warm run from the start-up cache needs none of it

    try:
        backend = Tokenizer.from_file(str(file))
    except Exception:  # let transformers report it, in its words
        return None
    added = {t.content: (i, t.special) for i, t in backend.get_added_tokens_decoder().items()}
    # transformers adds a special token the file lacks, which would change ids and the fingerprint
    if any(token is not None and not added.get(token, (None, False))[1] for token in specials.values()):
        return None
    for index, token in (config.get("added_tokens_decoder") or {}).items():
        content = token.get("content") if isinstance(token, dict) else None
        if not (
            isinstance(content, str) and str(index).isdigit() and added.get(content, (None, False))[0] == int(index)
        ):
            return None
    _no_length_changes(backend)
    return TokenizerFile(backend, specials)


def _named_tokenizer_class(directory: Path, transformers: Any) -> Any:
    """The class a local directory's tokenizer_config.json names, found without AutoTokenizer:
    importing the auto classes imports PyTorch when it is installed, seconds for nothing."""
    config = directory / "tokenizer_config.json"
    if not (config.is_file() and (directory / "tokenizer.json").is_file()):
        return None
    try:
        name = json.loads(config.read_text(encoding="utf-8")).get("tokenizer_class")
    except (ValueError, OSError):
        return None
    if not isinstance(name, str) or not name.isidentifier():
        return None
    for candidate in (name if name.endswith("Fast") else name + "Fast", name):
        cls = getattr(transformers, candidate, None)
        if cls is not None and hasattr(cls, "from_pretrained"):
            return cls
    return None


def _load_tokenizer_file(path: Path, fast_class: Any) -> Any:
    """A bare tokenizer.json: special tokens come from a tokenizer_config.json beside it, if any."""
    kwargs = {}
    config = path.with_name("tokenizer_config.json")
    if config.is_file():
        settings = json.loads(config.read_text(encoding="utf-8"))
        for key in ("eos_token", "bos_token", "pad_token", "unk_token", "chat_template"):
            value = settings.get(key)
            if isinstance(value, dict):  # AddedToken serialised as a dict
                value = value.get("content")
            if value is not None:
                kwargs[key] = value
    return fast_class(tokenizer_file=str(path), **kwargs)


def token_id(tokenizer: Any, token: str, what: str) -> int:
    """The id of a token string that must be in the vocabulary as a whole token."""
    ids = tokenizer.convert_tokens_to_ids([token])
    unk = tokenizer.unk_token_id
    if not ids or ids[0] is None or (unk is not None and ids[0] == unk and token != tokenizer.unk_token):
        raise PackcliError(f"{what} {token!r} is not a token of the tokenizer's vocabulary")
    return int(ids[0])


def resolve_special_ids(
    tokenizer: Any, *, eos_token: str | None, pad_id: int | None, need_eos: bool, need_bos: bool
) -> SpecialIds:
    vocab_size = len(tokenizer)
    eos_id = token_id(tokenizer, eos_token, "--eos-token") if eos_token else tokenizer.eos_token_id
    if eos_id is None and need_eos:
        raise PackcliError("the tokenizer has no EOS token; name one with --eos-token TOKEN (or pass --no-eos)")
    bos_id = tokenizer.bos_token_id
    if bos_id is None and need_bos:
        raise PackcliError("--bos was asked for but the tokenizer has no BOS token")
    if pad_id is None:
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    if pad_id is None:
        raise PackcliError("no pad id: the tokenizer has neither a pad nor an EOS token; pass --pad-id N")
    for name, value in (("EOS id", eos_id), ("BOS id", bos_id), ("pad id", pad_id)):
        if value is not None and not 0 <= value < vocab_size:
            raise PackcliError(f"{name} {value} is outside the vocabulary (size {vocab_size})")
    return SpecialIds(eos_id=eos_id, bos_id=bos_id, pad_id=int(pad_id))


def adds_bos_by_default(tokenizer: Any) -> bool:
    """Whether the tokenizer itself puts BOS first (Llama does, GPT-2 and Qwen do not)."""
    bos = tokenizer.bos_token_id
    if bos is None:
        return False
    with_special = tokenizer.encode("a", add_special_tokens=True)
    return bool(with_special) and with_special[0] == bos


def fingerprint(tokenizer: Any) -> str:
    """Identifies the exact vocabulary, merges, normalisation and added tokens."""
    digest = hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode("utf-8"))
    return "sha256:" + digest.hexdigest()


def encode_texts(tokenizer: Any, texts: list[str], parse_special_tokens: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Encode a batch on all of the tokenizer's threads, without special tokens added.

    Special-token strings written in the texts are ordinary text unless `parse_special_tokens`
    (a record cannot forge a document boundary or a chat turn); added tokens that are not
    special are words of the vocabulary and always match.

    Lengths come from `len(encoding)`, which builds no list, and each encoding's ids list
    is built once and chained straight into numpy: half the GIL-holding time per token of
    a generator over every id that built each list twice (scripts/bench_pipeline.py)."""
    backend = tokenizer.backend_tokenizer
    with special_tokens_split(backend, not parse_special_tokens):
        encodings = backend.encode_batch_fast(texts, add_special_tokens=False)
    lengths = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))
    ids = itertools.chain.from_iterable(e.ids for e in encodings)
    return np.fromiter(ids, dtype=np.int32, count=int(lengths.sum())), lengths


@contextmanager
def special_tokens_split(backend: Any, split: bool) -> Iterator[None]:
    """The `tokenizers` flag that makes special tokens in the text plain text (non-special
    added tokens still match), set for one call: transformers resets it on every call it
    makes, so the state of the shared tokenizer is never relied on."""
    before = backend.encode_special_tokens
    if before == split:
        yield
        return
    backend.encode_special_tokens = split
    try:
        yield
    finally:
        backend.encode_special_tokens = before


def special_token_strings(tokenizer: Any) -> list[str]:
    """The texts of the tokenizer's special added tokens (BOS, EOS, chat markup...)."""
    added = tokenizer.backend_tokenizer.get_added_tokens_decoder().values()
    return sorted({t.content for t in added if t.special and t.content})


def literal_alternation(contents: list[str]) -> re.Pattern[str] | None:
    """Leftmost-longest matching of literals, as tokenizers' aho-corasick does: the regex
    finds the leftmost start, and longer alternatives are tried first there."""
    if not contents:
        return None
    ordered = sorted(set(contents), key=lambda s: (-len(s), s))
    return re.compile("|".join(re.escape(s) for s in ordered))


class SpecialTokenFinder:
    """Finds special-token strings in record text, for the report's count and for chat
    contents, which need the careful path (`packcli.tokenize.chat.ChatSequences`)."""

    def __init__(self, contents: list[str]):
        self.contents = list(contents)
        self.pattern = literal_alternation(self.contents)

    @classmethod
    def of(cls, tokenizer: Any) -> SpecialTokenFinder:
        return cls(special_token_strings(tokenizer))

    def found(self, text: str) -> bool:
        return self.pattern is not None and self.pattern.search(text) is not None

    def records_with(self, *columns: Sequence[str]) -> int:
        """How many records (positions across the columns) hold one in any column."""
        if self.pattern is None:
            return 0
        search = self.pattern.search
        return sum(1 for texts in zip(*columns) if any(search(text) for text in texts))


def add_boundary_tokens(
    flat: np.ndarray, lengths: np.ndarray, bos_id: int | None, eos_id: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Put BOS before and EOS after every sequence (either may be None)."""
    extra = (bos_id is not None) + (eos_id is not None)
    if extra == 0:
        return flat, lengths
    n = len(lengths)
    new_lengths = lengths + extra
    new_ends = np.cumsum(new_lengths)
    new_starts = new_ends - new_lengths
    out = np.empty(int(new_ends[-1]) if n else 0, dtype=np.int32)
    keep = np.ones(len(out), dtype=bool)
    if bos_id is not None:
        out[new_starts] = bos_id
        keep[new_starts] = False
    if eos_id is not None:
        out[new_ends - 1] = eos_id
        keep[new_ends - 1] = False
    out[keep] = flat
    return out, new_lengths


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
