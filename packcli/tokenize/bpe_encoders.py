"""The encoders of a run's text: the Hugging Face tokenizer, and the byte-identical fast
paths over a tokenizer converted to tiktoken's ranks (tiktoken's own, and gigatoken's).

Each has `encode_batch(texts) -> (flat int32 ids, int64 lengths)`, the contract of
`packcli.tokenize.tokenizer.encode_texts`. Which one a run gets, and the check that it
gives the tokenizer's ids, is `packcli.tokenize.fastbpe.make_encoder`'s.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
import time
import unicodedata
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import numpy as np

from packcli.core.errors import PackcliError, needs_extra
from packcli.tokenize.bpe_convert import Conversion, build_encoding
from packcli.tokenize.cache import LazyTokenizer
from packcli.tokenize.tokenizer import encode_texts, literal_alternation


class Encoder(Protocol):
    backend: str
    reason: str | None
    parse_special_tokens: bool

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]: ...


class HFEncoder:
    """The Hugging Face path (packcli.tokenize.tokenizer.encode_texts)."""

    backend = "hf"

    def __init__(self, tokenizer, reason: str | None = None, *, parse_special_tokens: bool = False):
        if isinstance(tokenizer, LazyTokenizer):  # loaded here, once, before any worker is forked
            tokenizer.loaded()
        self.tokenizer = tokenizer
        self.reason = reason
        self.parse_special_tokens = parse_special_tokens

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return encode_texts(self.tokenizer, list(texts), self.parse_special_tokens)


@functools.lru_cache(maxsize=1)
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
        self.tokenizer = tokenizer
        self.conversion = conversion
        self.reason: str | None = None
        self.parse_special_tokens = parse_special_tokens
        self._encode_ranks = self._ranks_encoder(conversion)
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

    # What the encoder raises on a text it cannot take (a lone surrogate): that text goes to hf.
    unencodable: tuple[type[Exception], ...] = (UnicodeEncodeError,)

    def _ranks_encoder(self, conversion: Conversion):
        """text -> uint32 ranks, with no special tokens (their strings are text here)."""
        core, no_specials = build_encoding(conversion)._core_bpe, set[str]()
        return lambda text: np.frombuffer(core.encode_to_tiktoken_buffer(text, no_specials), dtype=np.uint32)

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
        encode_ranks = self._encode_ranks
        if self._simple:
            return self._to_ids(encode_ranks(text))
        parts = []
        for piece in self._pieces(text):
            if isinstance(piece, int):
                parts.append(np.array([piece], dtype=np.int32))
            else:
                parts.append(self._to_ids(encode_ranks(piece)))
        if not parts:
            return np.zeros(0, dtype=np.int32)
        return np.concatenate(parts)

    def _to_ids(self, ranks: np.ndarray) -> np.ndarray:
        """int32 ids, so the batch is joined without a conversion (ranks are below 2**31:
        the view is exact and copies nothing)."""
        return ranks.view(np.int32) if self._rank_to_id is None else self._rank_to_id[ranks]

    def _encode_chunk(self, texts: Sequence[str]):
        """Arrays for a run of texts; the index of any text tiktoken cannot take (a lone
        surrogate, or characters the normalizer mirror does not know) goes to `hf`."""
        arrays: list[np.ndarray | None] = []
        to_hf: list[int] = []
        unknown = self._unknown_re
        for i, text in enumerate(texts):
            if unknown is not None and not text.isascii() and unknown.search(text):
                to_hf.append(i)
                arrays.append(None)
                continue
            try:
                arrays.append(self._encode_one(text))
            except self.unencodable:
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
            flat, lengths = encode_texts(self.tokenizer, [texts[i] for i in hf_positions], self.parse_special_tokens)
            ends = np.cumsum(lengths)
            for k, i in enumerate(hf_positions):
                arrays[i] = flat[ends[k] - lengths[k] : ends[k]]
        lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=n)
        return np.concatenate(arrays).astype(np.int32, copy=False), lengths


# Pre-tokenizer patterns gigatoken implements as a named scheme, matched by exact string:
# its "qwen2" scheme is compiled from this pattern (the string is in its library), and
# any other pattern, however similar, stays on tiktoken.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GIGATOKEN_SCHEMES = {QWEN2_PATTERN: "qwen2"}


class GigatokenUnavailable(Exception):
    """gigatoken is not installed, has no scheme for the pattern, or refused the ranks."""


def gigatoken_version() -> str | None:
    """The installed gigatoken's version, or None (not installed: the tiktoken path)."""
    from importlib import metadata

    try:
        return metadata.version("gigatoken")
    except metadata.PackageNotFoundError:
        return None


class GigatokenEncoder(TiktokenEncoder):
    """The tiktoken path with gigatoken encoding the pieces: the same converted ranks, and
    a pre-tokenizer scheme whose pattern is the tokenizer's own (GIGATOKEN_SCHEMES). It
    releases the GIL, so the pool of threads runs in parallel like tiktoken's."""

    backend = "gigatoken"
    unencodable = (UnicodeEncodeError, TypeError)  # gigatoken: TypeError on a lone surrogate
    # gigatoken keeps every distinct pre-token it has encoded (about 60 MB per million) and
    # never empties that cache: once the process has grown this much since the encoder was
    # built, it is built afresh (0.3-0.45 s), so memory is bounded on any corpus. Its table
    # doubles as it grows, so a process peaks at about twice the bound (measured with 256
    # MB: docs/benchmarks/tokenizer-2026-11-23b.md); 128 MB leaves room for one worker per
    # core beside the main process.
    renew_after_bytes = 128 << 20

    def __init__(self, tokenizer, conversion: Conversion, *, ranks_file: bytes | None = None, **options):
        self._ranks_file = ranks_file if ranks_file is not None else ranks_file_bytes(conversion)
        self._renew_lock = threading.Lock()
        self.renewals = 0
        super().__init__(tokenizer, conversion, **options)

    def _ranks_encoder(self, conversion: Conversion):
        # The first build may be refused (its stderr silenced, before any thread of ours
        # runs); a renewal rebuilds what was built once, with the reader thread writing.
        quiet = not hasattr(self, "_rss_at_build")
        self._rss_at_build = _rss_bytes()
        return retried_while_borrowed(_gigatoken_bpe(conversion, self._ranks_file, quiet=quiet).encode)

    def _encode_chunk(self, texts: Sequence[str]):
        if _rss_bytes() - self._rss_at_build > self.renew_after_bytes:
            with self._renew_lock:  # one thread renews; the others keep the encoder they hold
                if _rss_bytes() - self._rss_at_build > self.renew_after_bytes:
                    self._encode_ranks = self._ranks_encoder(self.conversion)
                    self.renewals += 1
        return super()._encode_chunk(texts)


BORROW_RETRIES = 100_000


def retried_while_borrowed(encode):
    """gigatoken's `encode`, called again when it raises "Already borrowed": its encoder
    refuses a call that comes while another thread's call holds it (rarely: 6 in 128,400
    calls of the hard strings on 4 threads), before doing anything, so the same call made
    again gives the same ids. Any other error, or a borrow that never ends, is raised."""

    def call(text):
        for _ in range(BORROW_RETRIES):
            try:
                return encode(text)
            except RuntimeError as exc:
                if "Already borrowed" not in str(exc):
                    raise
                time.sleep(0)  # let the thread that holds it finish its call
        return encode(text)

    return call


def _rss_bytes() -> int:
    """This process's resident memory, or 0 where /proc is not there (nothing is renewed)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def ranks_file_bytes(conversion: Conversion) -> bytes:
    """The ranks as a `.tiktoken` file (base64 token, space, rank), gigatoken's input."""
    import binascii

    b2a = binascii.b2a_base64
    return b"".join([b2a(token, newline=False) + b" %d\n" % rank for token, rank in conversion.mergeable_ranks.items()])


def _gigatoken_bpe(conversion: Conversion, ranks_file: bytes, *, quiet: bool = True):
    """gigatoken's BPE over the converted ranks, without special tokens (their strings are text)."""
    import tempfile

    scheme = GIGATOKEN_SCHEMES.get(conversion.pattern)
    if scheme is None:
        raise GigatokenUnavailable("gigatoken has no scheme for this pre-tokenizer pattern")
    if not conversion.exact:  # gigatoken rebuilds each token's merge from the ranks, as tiktoken's own files allow
        raise GigatokenUnavailable("gigatoken takes only ranks a merge list was made from (as Qwen's)")
    try:
        bpe_class = gigatoken_bpe_class()
    except PackcliError as exc:
        raise GigatokenUnavailable(f"gigatoken is not importable: {exc}") from exc
    with tempfile.TemporaryDirectory(prefix="packcli-gigatoken-") as tmp:
        path = Path(tmp) / "ranks.tiktoken"
        path.write_bytes(ranks_file)
        with _quiet_stderr() if quiet else contextlib.nullcontext():  # a refusal is a Rust panic, printed on stderr
            try:
                return bpe_class.from_tiktoken(str(path), scheme, {})
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # its loader's errors, panics included (not Exception subclasses)
                raise GigatokenUnavailable(f"gigatoken refused the converted ranks: {exc}") from exc


def gigatoken_bpe_class():
    """gigatoken's BPE class, or PackcliError naming the extra (`auto` then stays on tiktoken)."""
    with needs_extra("fast", "packcli's gigatoken encoder needs gigatoken"):
        from gigatoken.gigatoken_rs import BPETokenizer
    return BPETokenizer


@contextlib.contextmanager
def _quiet_stderr():
    """File descriptor 2 to /dev/null for the duration (only while no other thread writes)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


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
