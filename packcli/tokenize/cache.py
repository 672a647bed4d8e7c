"""The start-up cache: everything packcli derives from a tokenizer, kept between runs.

Loading a large tokenizer, converting it for tiktoken and checking the conversion cost
seconds on every run, for results that depend only on the tokenizer's files and on the
versions of the code. Entries live in `$PACKCLI_CACHE_DIR`, else `$XDG_CACHE_HOME/packcli`,
else `~/.cache/packcli`, one file per (kind, key):

- `facts/<files fingerprint>.pkl`: vocabulary size, special tokens and ids, whether the
  tokenizer puts BOS first, the special-token strings and the manifest's fingerprint
  (`TokenizerFacts`), keyed by the tokenizer *files* (read, not loaded);
- `tiktoken/<fingerprint>.pkl`: the tiktoken conversion or the reason there is none;
- `identity/<fingerprint>-<parse>.pkl`: the verdict of the hard-string identity check.

An entry is trusted only if its checksum, format number, packcli/tokenizers/tiktoken
versions and key all match; anything else (truncated, corrupt, stale) is a miss and is
rebuilt. Writes go to a temporary file renamed into place, so a reader never sees half an
entry and two processes writing the same entry at once both leave a whole one. An
unwritable directory only costs the work next time.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

FORMAT = 1
MAGIC = b"packcli-cache\n"
DIGEST_BYTES = 32
HASHED_FILE_LIMIT = 1 << 26  # larger files in a tokenizer directory (model weights) count by name, size and mtime


def cache_root() -> Path:
    explicit = os.environ.get("PACKCLI_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "packcli"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


_STAMP: dict[str, Any] | None = None


def stamp() -> dict[str, Any]:
    """What an entry must have been written by: this format and these package versions."""
    global _STAMP
    if _STAMP is None:
        from packcli.core.version import __version__

        _STAMP = {
            "format": FORMAT,
            "packcli": __version__,
            "tokenizers": _version("tokenizers"),
            "tiktoken": _version("tiktoken"),
        }
    return _STAMP


class Store:
    """One cache directory (None: caching off, every lookup a miss, nothing written)."""

    def __init__(self, root: Path | str | None):
        self.root = Path(root) if root is not None else None

    @classmethod
    def default(cls, enabled: bool = True) -> Store:
        return cls(cache_root() if enabled else None)

    @classmethod
    def of(cls, where: Store | Path | str | None) -> Store:
        """A store as given, one over a directory, or the default one for None."""
        if isinstance(where, Store):
            return where
        return cls.default() if where is None else cls(where)

    def path(self, kind: str, key: str) -> Path | None:
        return None if self.root is None else self.root / kind / f"{key}.pkl"

    def load(self, kind: str, key: str) -> tuple[bool, Any]:
        """(True, value) for a sound entry, (False, None) for a miss."""
        path = self.path(kind, key)
        if path is None:
            return False, None
        try:
            data = path.read_bytes()
        except OSError:
            return False, None
        head = len(MAGIC) + DIGEST_BYTES
        if len(data) <= head or not data.startswith(MAGIC):
            return False, None
        payload = data[head:]
        if hashlib.sha256(payload).digest() != data[len(MAGIC) : head]:
            return False, None
        try:
            entry = pickle.loads(payload)
        except Exception:  # written by code that no longer unpickles
            return False, None
        if not isinstance(entry, dict) or entry.get("stamp") != stamp() or entry.get("key") != (kind, key):
            return False, None
        return True, entry.get("value")

    def save(self, kind: str, key: str, value: Any) -> None:
        path = self.path(kind, key)
        if path is None:
            return
        payload = pickle.dumps({"stamp": stamp(), "key": (kind, key), "value": value}, pickle.HIGHEST_PROTOCOL)
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, path)
            tmp = None
        except OSError:
            pass  # an unwritable cache only costs the work next time
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


def files_fingerprint(location: str) -> str | None:
    """sha256 of the files a local tokenizer is loaded from (a directory's regular files,
    or a tokenizer.json and the tokenizer_config.json beside it); None for a Hub name."""
    path = Path(location)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file())
    elif path.is_file():
        files = [path] + [p for p in (path.with_name("tokenizer_config.json"),) if p.is_file() and p != path]
    else:
        return None
    digest = hashlib.sha256(b"directory\0" if path.is_dir() else b"file\0")  # loaded differently
    try:
        for file in files:
            info = file.stat()
            digest.update(file.name.encode("utf-8", "surrogateescape") + b"\0")
            if info.st_size > HASHED_FILE_LIMIT:
                digest.update(f"{info.st_size}:{info.st_mtime_ns}\0".encode())
                continue
            with open(file, "rb") as f:
                digest.update(hashlib.file_digest(f, "sha256").digest())
    except OSError:
        return None
    return digest.hexdigest()


@dataclass(frozen=True)
class TokenizerFacts:
    """What a run needs of a tokenizer besides encoding with it."""

    fingerprint: str  # the manifest's: sha256 of the tokenizer's full serialisation
    vocab_size: int
    tokens: dict[str, str | None]  # eos_token, bos_token, pad_token, unk_token
    ids: dict[str, int | None]  # eos_token_id, ...
    adds_bos: bool
    special_strings: tuple[str, ...]


class LazyTokenizer:
    """A tokenizer known from its cached facts, loaded on first use of anything else.

    `len()`, the special tokens and their ids answer from the cache; any other attribute
    loads the tokenizer (once), so code that needs it gets it and code that does not
    never pays for it."""

    def __init__(self, facts: TokenizerFacts, load):
        self._tokenizer = None
        self._load = load
        self.facts = facts
        for name, token in facts.tokens.items():
            setattr(self, name, token)
        for name, token_id in facts.ids.items():
            setattr(self, name, token_id)

    def __len__(self) -> int:
        return self.facts.vocab_size

    @property
    def is_loaded(self) -> bool:
        return self._tokenizer is not None

    def loaded(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = self._load()
        return self._tokenizer

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_tokenizer", "_load", "facts"):
            raise AttributeError(name)
        return getattr(self.loaded(), name)
