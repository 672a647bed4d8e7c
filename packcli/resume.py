"""Interrupted runs: what a run was, so `--resume` can refuse anything else and keep the
shards that were finished.

A run writes `.packcli-run.json` into the output directory before its first shard. It
names everything the shards depend on: the resolved options, the tokenizer's
fingerprint, and each input's size, mtime and a hash of its first and last 64 KiB.
`--resume` runs the same deterministic job again, skipping the writing of the shards
that exist (their rows are regenerated, counted and dropped), so the result is
byte-identical to an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from packcli.errors import PackcliError

RUN_FILE = ".packcli-run.json"
SAMPLE_BYTES = 1 << 16


def input_identity(path: str) -> dict:
    if path == "-":
        return {"path": "-"}
    stat = os.stat(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(SAMPLE_BYTES))
        if stat.st_size > SAMPLE_BYTES:
            f.seek(max(SAMPLE_BYTES, stat.st_size - SAMPLE_BYTES))
            digest.update(f.read(SAMPLE_BYTES))
    return {"path": path, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sample_sha256": digest.hexdigest()}


def run_identity(options: dict, paths: list[str], tokenizer_fingerprint: str | None, version: str) -> dict:
    return {
        "packcli_version": version,
        "options": options,
        "tokenizer_fingerprint": tokenizer_fingerprint,
        "inputs": [input_identity(p) for p in paths],
    }


def save_run(out_dir: Path, identity: dict) -> None:
    from packcli.pipeline import write_json_atomic

    write_json_atomic(out_dir / RUN_FILE, identity)


def check_resumable(out_dir: Path, identity: dict) -> None:
    """Refuse, naming the first difference, unless this is the interrupted run's job."""
    if any(entry.get("path") == "-" for entry in identity["inputs"]):
        raise PackcliError("--resume cannot check input read from stdin; give the input as files")
    path = out_dir / RUN_FILE
    if not path.is_file():
        raise PackcliError(f"cannot resume: {out_dir} holds no record of an interrupted packcli run")
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        raise PackcliError(f"cannot resume: {path} is unreadable ({exc})") from exc
    difference = _first_difference(previous, identity)
    if difference:
        raise PackcliError(f"refusing to resume: {difference} differs from the interrupted run's")


def _first_difference(old: dict, new: dict) -> str | None:
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


def completed_shards(out_dir: Path, shard_name) -> int:
    """How many shards, numbered from 0 without a gap, are finished; the rest is removed."""
    from packcli.shards import remove_path

    count = 0
    while (out_dir / shard_name(count)).exists():
        count += 1
    for entry in out_dir.iterdir():
        name = entry.name
        if name.startswith(".shard-") or (name.startswith("shard-") and _index(name) >= count):
            remove_path(entry)
    for name in ("report.json", ".report.json.tmp", ".manifest.json.tmp"):
        remove_path(out_dir / name)
    return count


def _index(name: str) -> int:
    digits = name[len("shard-") :].split(".")[0]
    return int(digits) if digits.isdigit() else -1
