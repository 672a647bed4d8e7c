"""The output directory: who may write it, what is ours in it, and how it becomes complete.

- A lock (`.packcli.lock`, holding the pid, with an exclusive `flock`) keeps a second
  `pack` out of a directory another one is writing; the kernel drops the flock when its
  process dies, so a stale lock is simply taken over.
- `manifest.json` is written last, atomically: its presence means the output is complete.
- `.packcli-run.json` records what the shards depend on, so `--resume` refuses anything
  but the interrupted run's job and keeps its finished shards (and its complete spill).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from packcli.core import storage
from packcli.core.errors import PackcliError
from packcli.core.storage import MANIFEST_FILE

LOCK_FILE = ".packcli.lock"
RUN_FILE = ".packcli-run.json"
SPILL_DIR = ".packcli-spill"
T = TypeVar("T")
Json = dict[str, Any]
OWNED_PREFIXES = (
    "shard-",
    ".shard-",
    MANIFEST_FILE,
    "." + MANIFEST_FILE,
    "report.json",
    ".report.json",
    RUN_FILE,
    SPILL_DIR,
    LOCK_FILE,
)
SAMPLE_BYTES = 1 << 16


class OutputLock:
    """An exclusive claim on an output directory for the length of one run."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> OutputLock:
        import fcntl  # lazy: POSIX-only, so the module still imports where there is none

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            holder = _read_pid(self.path)
            who = f" (pid {holder})" if holder else ""
            raise PackcliError(
                f"output directory {self.path.parent} is in use by another packcli run{who}; "
                "wait for it to finish, or choose another --output"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self, remove: bool = True) -> None:
        if self._fd is None:
            return
        if remove:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
        os.close(self._fd)  # closing drops the flock
        self._fd = None


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def has_entries(path: Path) -> bool:
    return path.is_dir() and any(p.name != LOCK_FILE for p in path.iterdir())


def claim_output(path: Path) -> OutputLock:
    """Create the directory if needed and lock it; a file in its place is an error."""
    if path.exists() and not path.is_dir():
        raise PackcliError(f"output {path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        return OutputLock(path).acquire()
    except OSError as exc:
        raise PackcliError(f"cannot write to output directory {path}: {exc.strerror or exc}") from exc


def prepare_output(path: Path, overwrite: bool) -> None:
    """An empty directory, or one of our own outputs to replace (only with --overwrite)."""
    entries = sorted(p.name for p in path.iterdir() if p.name != LOCK_FILE)
    for name in replaceable(str(path), entries, overwrite):
        remove_path(path / name)
    probe = path / ".packcli-write-test"
    try:
        try:
            probe.write_bytes(b"")
        finally:
            probe.unlink(missing_ok=True)  # also when a signal lands between the two
    except OSError as exc:
        raise PackcliError(f"cannot write to output directory {path}: {exc.strerror or exc}") from exc


def replaceable(where: str, entries: list[str], overwrite: bool) -> list[str]:
    """The entries to remove, manifest first (a half-replaced directory never looks
    complete); refused when the directory is not empty without --overwrite, or not ours."""
    foreign = [name for name in entries if not name.startswith(OWNED_PREFIXES)]
    if foreign:  # first: --overwrite would refuse too, so it is not what to suggest
        raise PackcliError(
            f"output directory {where} holds files packcli did not write ({', '.join(foreign[:3])}); "
            "packcli never deletes them (not even with --overwrite): choose another --output, or move them away"
        )
    if entries and not overwrite:
        raise PackcliError(
            f"output directory {where} is not empty; pass --overwrite to replace it, or --resume to continue an interrupted run"
        )
    return sorted(entries, key=lambda n: n != MANIFEST_FILE)


def remove_path(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()


def write_json_atomic(path: Path, data: Json) -> None:
    """Written whole under a temporary name, then renamed; on any failure or signal the
    temporary file goes and `path` is as it was."""
    from packcli.core.pause import pause

    tmp = path.with_name("." + path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        pause(f"{path.name}-tmp")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def guarded(out_dir: Path, action: Callable[..., T], *args: Any) -> T:
    """Writing errors (a full disk above all) as one line naming the directory."""
    try:
        return action(*args)
    except OSError as exc:
        raise PackcliError(f"writing to {out_dir} failed: {exc.strerror or exc}; no manifest was written") from exc


# ----------------------------------------------------------------------------- resume


def input_identity(path: str) -> Json:
    if path == "-":
        return {"path": "-"}
    if storage.is_remote(path):
        return storage.input_identity(path)
    stat = os.stat(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(SAMPLE_BYTES))
        if stat.st_size > SAMPLE_BYTES:
            f.seek(max(SAMPLE_BYTES, stat.st_size - SAMPLE_BYTES))
            digest.update(f.read(SAMPLE_BYTES))
    return {"path": path, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sample_sha256": digest.hexdigest()}


def run_identity(options: Json, paths: list[str], tokenizer_fingerprint: str | None, version: str) -> Json:
    return {
        "packcli_version": version,
        "options": options,
        "tokenizer_fingerprint": tokenizer_fingerprint,
        "inputs": [input_identity(p) for p in paths],
    }


def identity_hash(identity: Json) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def save_run(out_dir: Path, identity: Json) -> None:
    write_json_atomic(out_dir / RUN_FILE, identity)


def check_resumable(out_dir: Path, identity: Json) -> None:
    """Refuse, naming the first difference, unless this is the interrupted run's job."""
    path = out_dir / RUN_FILE
    check_run_record(
        identity, str(out_dir), str(path), path.is_file, lambda: json.loads(path.read_text(encoding="utf-8"))
    )


def check_run_record(
    identity: Json, where: str, record: str, exists: Callable[[], bool], read: Callable[[], Json]
) -> None:
    """check_resumable for an output anywhere: `where` the output and `record` its run
    record as messages name them, `exists` and `read` the record's."""
    if any(entry.get("path") == "-" for entry in identity["inputs"]):
        raise PackcliError("--resume cannot check input read from stdin; give the input as files")
    if not exists():
        raise PackcliError(f"cannot resume: {where} holds no record of an interrupted packcli run")
    try:
        previous = read()
    except (ValueError, OSError) as exc:
        raise PackcliError(f"cannot resume: {record} is unreadable ({exc})") from exc
    compare_runs(previous, identity)


def compare_runs(previous: Json, identity: Json) -> None:
    """Refuse, naming the first difference, unless `identity` is the recorded run's job."""
    difference = _first_difference(previous, identity)
    if difference:
        raise PackcliError(f"refusing to resume: {difference} differs from the interrupted run's")


def _first_difference(old: Json, new: Json) -> str | None:
    if old.get("packcli_version") != new["packcli_version"]:
        return f"packcli version ({new['packcli_version']} vs {old.get('packcli_version')})"
    if old.get("tokenizer_fingerprint") != new["tokenizer_fingerprint"]:
        return "the tokenizer"
    old_options, new_options = old.get("options", {}), new["options"]
    for key in sorted((set(old_options) | set(new_options)) - {"inputs"}):  # inputs: compared below
        if old_options.get(key) != new_options.get(key):
            flag = "--" + key.replace("_", "-")
            return f"{flag} ({new_options.get(key)!r} vs {old_options.get(key)!r})"
    old_inputs, new_inputs = old.get("inputs", []), new["inputs"]
    if [i.get("path") for i in old_inputs] != [i["path"] for i in new_inputs]:
        return "the list of input files"
    for before, now in zip(old_inputs, new_inputs):
        if before != now:
            return f"input {now['path']} (changed since)"
    return None


def completed_shards(out_dir: Path, shard_name: Callable[[int], str]) -> int:
    """How many shards, numbered from 0 without a gap, are finished; the rest is removed."""
    count = 0
    while (out_dir / shard_name(count)).exists():
        count += 1
    for entry in out_dir.iterdir():
        name = entry.name
        if name.startswith(".shard-") or (name.startswith("shard-") and _shard_index(name) >= count):
            remove_path(entry)
    for name in ("report.json", ".report.json.tmp", f".{MANIFEST_FILE}.tmp"):
        remove_path(out_dir / name)
    return count


def _shard_index(name: str) -> int:
    digits = name[len("shard-") :].split(".")[0]
    return int(digits) if digits.isdigit() else -1
