"""An output directory on an object store: built in a local staging directory, published
shard by shard.

Object stores have no `flock` and no atomic rename, so the rules differ from a local
output: the staging directory (local, named after the URL) carries the lock, so two runs
on one machine cannot share a remote output; runs on different machines are not kept
apart. A shard is uploaded once it is complete (an object appears whole or not at all;
an npy shard counts as done when all its files are there), removed locally after, and
`manifest.json` is uploaded last: its presence means the output is complete.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from packcli.core import storage
from packcli.write import outdir
from packcli.write.columns import NPY_FILES
from packcli.write.shards import ShardInfo

Json = dict[str, Any]


def prepare(remote: storage.RemoteDir, staging: Path, identity: Json, overwrite: bool) -> None:
    """A fresh run: the remote directory emptied of an earlier output (only with
    --overwrite), the staging directory emptied, the run record written."""
    for name in outdir.replaceable(str(remote), [n for n in remote.names() if n != outdir.LOCK_FILE], overwrite):
        remote.remove(name)
    outdir.prepare_output(staging, overwrite=True)
    remote.write_json(outdir.RUN_FILE, identity)


def check_resumable(remote: storage.RemoteDir, identity: Json) -> None:
    outdir.check_run_record(
        identity,
        str(remote),
        f"{remote}/{outdir.RUN_FILE}",
        lambda: remote.exists(outdir.RUN_FILE),
        lambda: remote.read_json(outdir.RUN_FILE),
    )


def _complete(remote: storage.RemoteDir, name: str, fmt: str, npy_files: tuple[str, ...]) -> bool:
    if fmt == "parquet":
        return remote.exists(name)
    return all(remote.exists(f"{name}/{file}") for file in npy_files)


def completed_shards(
    remote: storage.RemoteDir,
    staging: Path,
    fmt: str,
    shard_name: Callable[[int], str],
    npy_files: tuple[str, ...] = NPY_FILES,
) -> int:
    """Shards numbered from 0 without a gap that are fully uploaded (an npy shard: every
    one of `npy_files`); later ones and the report are removed. The finished ones are
    fetched into staging: the resumed run counts their rows and checksums them as a
    local resume does."""
    outdir.completed_shards(staging, shard_name)  # stale local shards and temporaries go
    count = 0
    while _complete(remote, shard_name(count), fmt, npy_files):
        count += 1
    for name in remote.names():
        if name.startswith(".shard-") or name == "report.json" or (name.startswith("shard-") and _index(name) >= count):
            remote.remove(name)
    for index in range(count):
        local = staging / shard_name(index)
        if not local.exists():
            remote.get(shard_name(index), local)
    return count


def _index(name: str) -> int:
    digits = name[len("shard-") :].split(".")[0]
    return int(digits) if digits.isdigit() else -1


def publish(remote: storage.RemoteDir, staging: Path, shards: list[ShardInfo], start: int, done: int) -> int:
    """Upload shards[start:] (those below `done` are already there) and drop the local
    copies; returns how many shards are published."""
    for index in range(start, len(shards)):
        local = staging / shards[index].path
        if index >= done:
            remote.put(local, shards[index].path)
        outdir.remove_path(local)
    return len(shards)


def finish(remote: storage.RemoteDir, staging: Path) -> None:
    """report.json, then manifest.json (last: its presence means complete)."""
    for name in ("report.json", storage.MANIFEST_FILE):
        remote.put(staging / name, name)
