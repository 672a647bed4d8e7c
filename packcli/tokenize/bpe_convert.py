"""Conversion of a byte-level BPE `tokenizer.json` to an equivalent tiktoken encoding, and
its cache. `packcli.tokenize.fastbpe` uses it; `load_or_convert` is the entry point.

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

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

import numpy as np
import tiktoken

from packcli.tokenize import tokenizer as tokenizing
from packcli.tokenize.cache import Store

# tokenizers' ByteLevel pre-tokenizer with use_regex=True (src/pre_tokenizers/byte_level.rs).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
NormalForm = Literal["NFC", "NFD", "NFKC", "NFKD"]
NORMALIZERS: tuple[NormalForm, ...] = ("NFC", "NFD", "NFKC", "NFKD")
# A special token tiktoken is given so that its special-token regex is never empty. It is
# never *allowed*, so if a text contains it, it is encoded as ordinary text.
_PLACEHOLDER_SPECIAL = "<|packcli-placeholder-never-allowed|>"


class Inconvertible(Exception):
    """The tokenizer has no provably equivalent tiktoken encoding; the message says why."""


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
    normalizer: NormalForm | None
    prefix_space: bool  # ByteLevel add_prefix_space: " " before every piece not starting with one
    notes: list[str] = field(default_factory=list)
    # Every two-token split of a token is a merge (a merge list made from tiktoken ranks):
    # the two BPEs are then the same algorithm, not merely found equal on the probes.
    exact: bool = True


def convert(tokenizer) -> Conversion:
    """The tiktoken equivalent of a loaded fast tokenizer, or Inconvertible(reason)."""
    backend = tokenizer.backend_tokenizer
    spec = json.loads(backend.to_str())
    model = _bpe_model(spec)
    normalizer = _normalizer_form(spec.get("normalizer"))
    pattern, prefix_space = _pre_tokenizer_pattern(spec.get("pre_tokenizer"))
    vocab: dict[str, int] = model.get("vocab") or {}
    token_bytes = _token_bytes(vocab)
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model.get("merges") or []]
    ignore_merges = bool(model.get("ignore_merges"))

    ranks, rank_ids = _merge_ranks(vocab, merges, token_bytes)
    notes = _rank_unmade_tokens(vocab, token_bytes, ranks, rank_ids, ignore_merges)
    if not ignore_merges:
        _check_tokens_encode_to_themselves(backend, ranks, rank_ids)
    merge_pairs = {(token_bytes[left], token_bytes[right]) for left, right in merges}
    missing_merges = _splits_that_are_not_merges(ranks, merge_pairs)
    if missing_merges:
        notes.append(
            f"{len(missing_merges)} two-token splits of vocabulary tokens are not merges "
            "(a merge list not made from tiktoken ranks); each was probed"
        )

    conversion = Conversion(
        pattern=pattern,
        mergeable_ranks=ranks,
        rank_to_id=_rank_to_id(rank_ids),
        added=_added_tokens(backend),
        normalizer=normalizer,
        prefix_space=prefix_space,
        notes=notes,
        exact=not missing_merges,
    )
    encoding = build_encoding(conversion)  # the pattern must compile for tiktoken's regex engine
    _probe_missing_merges(backend.model, encoding, conversion, missing_merges)
    return conversion


def _bpe_model(spec: dict) -> dict:
    """The model section of a tokenizer.json, if it is a plain deterministic BPE."""
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
    return model


def _token_bytes(vocab: dict[str, int]) -> dict[str, bytes | None]:
    """Token string -> its bytes (None if it holds a character outside the byte-level
    alphabet); Inconvertible unless all 256 byte-level tokens are in the vocabulary."""
    alphabet = tokenizing.bytes_to_unicode()
    missing = [b for b, c in alphabet.items() if c not in vocab]
    if missing:
        raise Inconvertible(f"the vocabulary lacks {len(missing)} of the 256 byte-level tokens (not byte-level BPE)")
    table = dict.fromkeys(range(324), 256)
    table.update({ord(c): b for b, c in alphabet.items()})
    token_bytes: dict[str, bytes | None] = {}
    for tok in vocab:
        try:
            token_bytes[tok] = tok.translate(table).encode("latin-1")
        except UnicodeEncodeError:
            token_bytes[tok] = None
    return token_bytes


def _merge_ranks(
    vocab: dict[str, int], merges: list[tuple[str, ...]], token_bytes: dict[str, bytes | None]
) -> tuple[dict[bytes, int], list[int]]:
    """(bytes -> rank, rank -> token id). Ranks: the 256 bytes (in id order: their ranks
    never decide a merge), then every merge result in the order of its first merge, so
    tiktoken (which merges the pair whose result ranks lowest) follows the merge list. A
    result made again by a later merge must be made by consecutive merges, or the two
    orders could disagree."""
    alphabet = tokenizing.bytes_to_unicode()
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
    return ranks, rank_ids


def _rank_unmade_tokens(
    vocab: dict[str, int],
    token_bytes: dict[str, bytes | None],
    ranks: dict[bytes, int],
    rank_ids: list[int],
    ignore_merges: bool,
) -> list[str]:
    """Vocabulary tokens no merge makes. Without ignore_merges the tokenizer can never
    output them, so they are left out. With ignore_merges a piece equal to one of them is
    that token, which needs it in the ranks (ranked last, so it wins no merge). Returns
    the notes to report."""
    unmade = sorted(
        (i, as_bytes)
        for tok, i in vocab.items()
        if (as_bytes := token_bytes[tok]) is not None and as_bytes not in ranks
    )
    if unmade and ignore_merges:
        for i, as_bytes in unmade:
            ranks[as_bytes] = len(rank_ids)
            rank_ids.append(i)
        return [f"{len(unmade)} vocabulary tokens are made by no merge (reachable as whole pieces only)"]
    if unmade:
        return [f"{len(unmade)} vocabulary tokens are made by no merge and never output; left out"]
    return []


def _rank_to_id(rank_ids: list[int]) -> np.ndarray | None:
    """The rank -> id table, or None when every rank is its token's id."""
    rank_to_id = np.asarray(rank_ids, dtype=np.int32)
    if np.array_equal(rank_to_id, np.arange(len(rank_to_id), dtype=np.int32)):
        return None
    if len(np.unique(rank_to_id)) != len(rank_to_id):
        raise Inconvertible("two ranks map to the same token id")
    return rank_to_id


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
    alphabet = tokenizing.bytes_to_unicode()
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


def _normalizer_form(normalizer) -> NormalForm | None:
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
        return cast(NormalForm, kind)
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
    alphabet = tokenizing.bytes_to_unicode()
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


def load_or_convert(tokenizer, cache: Store | Path | None = None, fingerprint: str | None = None) -> Conversion | str:
    """The conversion, or the reason there is none, cached per tokenizer fingerprint
    (`packcli.tokenize.tokenizer.fingerprint`, computed here if not given) in the start-up cache
    (`packcli.tokenize.cache`; a directory, or the default one for None)."""
    store = Store.of(cache)
    key = (fingerprint or tokenizing.fingerprint(tokenizer)).split(":", 1)[-1]
    hit, stored = store.load("tiktoken", key)
    if hit and isinstance(stored, (Conversion, str)):
        return stored
    try:
        result: Conversion | str = convert(tokenizer)
    except Inconvertible as exc:
        result = str(exc)
    store.save("tiktoken", key, result)
    return result
