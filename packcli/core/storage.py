"""Paths on object stores and other fsspec filesystems (`s3://`, `gs://`, `az://`, `hf://`).

A plain path (or `file://`) keeps the local code path: readers open it with `open`, and
nothing here imports fsspec. A URL is resolved to its fsspec filesystem, which takes
credentials from its own standard environment (AWS_* variables and profiles for s3fs,
GOOGLE_APPLICATION_CREDENTIALS for gcsfs, ...). A URL that carries credentials itself
(user:secret@ or a query string) is refused, so no secret reaches a log, the manifest or
the report.

Remote output is written through `RemoteDir`: shards are built in a local staging
directory and uploaded one by one as each completes; `manifest.json` goes last, so its
presence means the output is complete, as on a local disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from packcli.core.errors import PackcliError, needs_extra

MANIFEST_FILE = "manifest.json"  # written last, atomically: its presence means the output is complete

SAMPLE_BYTES = 1 << 16
_GLOB_CHARS = frozenset("*?[")


def is_remote(path: str) -> bool:
    """A URL with a scheme other than file:// (one letter is a Windows drive, not a scheme)."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and len(scheme) > 1 and scheme.isidentifier() and scheme != "file"


def local_path(path: str) -> str:
    """A file:// URL as a plain path; anything else unchanged."""
    return path[len("file://") :] if path.startswith("file://") else path


def check_url(url: str) -> None:
    """Credentials come from the filesystem's environment, never from the URL."""
    parts = urlsplit(url)
    if "@" in parts.netloc or parts.query:
        raise PackcliError(
            f"{redact(url)}: credentials in a URL are refused; give them through the filesystem's "
            "standard environment (for s3: AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)",
            usage=True,
        )


def redact(url: str) -> str:
    """The URL without user information, query or fragment: what logs and records may show."""
    if not is_remote(url):
        return url
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}"


def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) for a URL."""
    check_url(url)
    with needs_extra("remote", "object-store paths need fsspec"):
        import fsspec
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise PackcliError(f"{redact(url)}: no filesystem for this URL ({exc})") from None


def open_input(path: str) -> Any:  # a BufferedReader, or the filesystem's file object
    """A binary file object, local or remote; OSError when it cannot be opened."""
    if not is_remote(path):
        return open(local_path(path), "rb")
    fs, inner = filesystem(path)
    try:
        return fs.open(inner, "rb")
    except FileNotFoundError:
        raise
    except Exception as exc:  # each filesystem has its own errors: shown as an OSError
        raise OSError(f"{type(exc).__name__}: {exc}") from None


def size(path: str) -> int:
    if not is_remote(path):
        return os.path.getsize(local_path(path))
    fs, inner = filesystem(path)
    return int(fs.size(inner))


def exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(local_path(path))
    fs, inner = filesystem(path)
    return bool(fs.exists(inner))


def input_identity(url: str) -> dict[str, Any]:
    """What --resume compares for a remote input: size, the store's version tag and the
    first and last 64 KiB (no mtime: stores give it with different precisions)."""
    fs, inner = filesystem(url)
    info = fs.info(inner)
    total = int(info.get("size") or 0)
    digest = hashlib.sha256()
    with fs.open(inner, "rb") as f:
        digest.update(f.read(SAMPLE_BYTES))
        if total > SAMPLE_BYTES:
            f.seek(max(SAMPLE_BYTES, total - SAMPLE_BYTES))
            digest.update(f.read(SAMPLE_BYTES))
    tag = info.get("ETag") or info.get("etag") or info.get("md5Hash") or info.get("etag_header")
    return {"path": redact(url), "size": total, "etag": str(tag) if tag else None, "sample_sha256": digest.hexdigest()}


def expand_remote(given: str, keep: Callable[[str], bool]) -> list[str]:
    """A remote file, directory (every file below it, hidden ones left out) or glob, as
    sorted URLs of the files `keep` accepts."""
    fs, inner = filesystem(given)
    shown = redact(given)
    try:
        if _GLOB_CHARS & set(inner):
            found = [p for p in fs.glob(inner) if fs.isfile(p)]
        elif fs.isdir(inner):
            found = fs.find(inner)
        elif fs.isfile(inner):
            return [given]
        else:
            raise PackcliError(f"{shown}: no such file or directory")
    except PackcliError:
        raise
    except Exception as exc:
        raise PackcliError(f"{shown}: cannot list ({type(exc).__name__}: {exc})") from None
    root = inner.rstrip("/") + "/"
    urls = [
        fs.unstrip_protocol(p)
        for p in sorted(found)
        if keep(p) and not any(part.startswith(".") for part in p[len(root) :].split("/"))
    ]
    if not urls:
        raise PackcliError(f"{shown}: no input files found there")
    return urls


def staging_dir(url: str, tmp_dir: str | None) -> Path:
    """The local directory where a remote output's shards and spill are built: the same
    for the same URL, so --resume finds a complete spill again on this machine."""
    base = Path(tmp_dir) if tmp_dir else Path(tempfile.gettempdir())
    return base / f"packcli-stage-{hashlib.sha256(redact(url).encode()).hexdigest()[:16]}"


class RemoteDir:
    """An output directory on an fsspec filesystem, seen as a flat set of names."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.fs, self.root = filesystem(self.url)
        self.root = self.root.rstrip("/")

    def __str__(self) -> str:
        return redact(self.url)

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def names(self) -> list[str]:
        """The entries directly inside (files and prefixes), sorted."""
        self.fs.invalidate_cache()
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        return sorted({str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries} - {""})

    def exists(self, name: str) -> bool:
        self.fs.invalidate_cache()
        return bool(self.fs.exists(self._path(name)))

    def read_json(self, name: str) -> Any:
        with self.fs.open(self._path(name), "rb") as f:
            return json.loads(f.read().decode("utf-8"))

    def put(self, local: Path, name: str) -> None:
        """Upload a file, or a directory's files (an npy shard); the caller removes `local`."""
        try:
            if local.is_dir():
                for file in sorted(local.iterdir()):
                    self.fs.put_file(str(file), self._path(f"{name}/{file.name}"))
            else:
                self.fs.put_file(str(local), self._path(name))
        except Exception as exc:
            raise PackcliError(f"uploading {name} to {self} failed ({type(exc).__name__}: {exc})") from None

    def get(self, name: str, local: Path) -> None:
        if self.fs.isdir(self._path(name)):
            local.mkdir(parents=True, exist_ok=True)
            for entry in self.fs.ls(self._path(name), detail=False):
                self.fs.get_file(entry, str(local / str(entry).rsplit("/", 1)[-1]))
        else:
            self.fs.get_file(self._path(name), str(local))

    def remove(self, name: str) -> None:
        path = self._path(name)
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def write_json(self, name: str, data: Any) -> None:
        with self.fs.open(self._path(name), "wb") as f:
            f.write((json.dumps(data, indent=2) + "\n").encode("utf-8"))


def is_complete(output: Path | str | RemoteDir) -> bool:
    """Whether a packcli output, a local directory or a remote one (a RemoteDir or a URL),
    is complete: its manifest is there, and it is written last, so nothing else is missing."""
    if isinstance(output, str) and is_remote(output):
        output = RemoteDir(output)
    if isinstance(output, RemoteDir):
        return output.exists(MANIFEST_FILE)
    return (Path(output) / MANIFEST_FILE).is_file()


def incomplete_output(output: Path | str | RemoteDir, hint: str = "") -> PackcliError:
    """The one error for an output whose manifest is missing (a run that did not finish,
    or a directory that is no packcli output), with what to do when the caller knows."""
    return PackcliError(f"{output}: no {MANIFEST_FILE}, so this is not a complete packcli output{hint}")


def load_per_segment(path: Path, n_segments: int, what: str) -> Any:
    """An array saved beside a spill with one value per segment (group ids, pair sides,
    weights), refused with what to do when it is unreadable or of another length."""
    import numpy as np

    try:
        values = np.load(path)
    except (OSError, ValueError) as exc:
        raise PackcliError(f"{path}: cannot read the spill's {what} ({exc}); start again with --overwrite") from exc
    if values.shape != (n_segments,):
        raise PackcliError(f"{path}: {len(values):,} {what} for {n_segments:,} segments; start again with --overwrite")
    return values


@contextmanager
def fetched_output(path: str) -> Iterator[str]:
    """A remote packed output as a local copy, for `verify` and `stats` (removed after);
    a local path as it is."""
    if not is_remote(path):
        yield path
        return
    remote = RemoteDir(path)
    if not is_complete(remote):
        raise incomplete_output(remote)
    with tempfile.TemporaryDirectory(prefix="packcli-fetch-") as tmp:
        local = Path(tmp) / "out"
        local.mkdir()
        for name in remote.names():
            if not name.startswith("."):
                remote.get(name, local / name)
        yield str(local)
