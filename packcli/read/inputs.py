"""From what the user typed to the exact list of files to read: files, directories,
globs, stdin, and `datasets.save_to_disk` directories (read as their Arrow files); the
same on object stores and other fsspec filesystems (storage.py), where a directory is
every supported file below it."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Sequence

from packcli.core import storage
from packcli.core.errors import PackcliError
from packcli.read.checks import one_line

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
JSON_SUFFIXES = (".json", ".json.gz", ".json.zst")
SUPPORTED_SUFFIXES = (*JSONL_SUFFIXES, *JSON_SUFFIXES, ".parquet", ".arrow")
STDIN = "-"
STDIN_NAME = "<stdin>"
DATASET_STATE = "state.json"  # these two make a directory a `datasets.save_to_disk` dataset
DATASET_INFO = "dataset_info.json"
DATASET_DICT = "dataset_dict.json"  # a DatasetDict: one save_to_disk dataset per split

_GLOB_CHARS = frozenset("*?[")


def _is_supported(path: str) -> bool:
    return path.lower().endswith(SUPPORTED_SUFFIXES)


def supported_list() -> str:
    return ", ".join(SUPPORTED_SUFFIXES)


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _is_dataset(directory: str) -> bool:
    """save_to_disk writes both files; a folder of data that happens to hold a state.json is not a dataset."""
    return all(os.path.isfile(os.path.join(directory, name)) for name in (DATASET_STATE, DATASET_INFO))


def _is_dataset_dict(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, DATASET_DICT))


def _is_dataset_metadata(path: str) -> bool:
    """The JSON files save_to_disk writes next to its data: never records."""
    directory, name = os.path.split(path)
    directory = directory or "."
    if name == DATASET_DICT:
        return True
    return name in (DATASET_STATE, DATASET_INFO) and _is_dataset(directory)


def _dataset_files(directory: str) -> list[str]:
    """The Arrow files of a save_to_disk directory, in the order its state.json gives."""
    state_path = os.path.join(directory, DATASET_STATE)
    try:
        with open(state_path, "rb") as f:
            names = [entry["filename"] for entry in json.load(f)["_data_files"]]
    except OSError as e:
        raise PackcliError(f"{state_path}: cannot open ({e.strerror or one_line(e)})") from None
    except (ValueError, KeyError, TypeError):
        raise PackcliError(f"{state_path}: not a datasets state.json (no '_data_files' list of file names)") from None
    paths = []
    for name in names:
        path = os.path.join(directory, str(name))
        if not os.path.isfile(path):
            raise PackcliError(f"{path}: listed in {state_path} but missing")
        paths.append(path)
    return paths


def _dataset_dict_refused(directory: str) -> PackcliError:
    """A DatasetDict holds several splits; reading them all into one output is rarely meant."""
    try:
        with open(os.path.join(directory, DATASET_DICT), "rb") as f:
            splits = [str(s) for s in json.load(f)["splits"]]
    except (OSError, ValueError, KeyError, TypeError):
        splits = []
    choices = ", ".join(os.path.join(directory, s) for s in splits) or "a split's directory"
    return PackcliError(f"{directory}: a datasets DatasetDict; give one split as input ({choices})")


def _files_in_directory(directory: str) -> list[str]:
    """Hidden files and folders are left out, as a shell glob would leave them out. A
    save_to_disk dataset inside counts as its data files, at its place in the sorted order."""
    if _is_dataset_dict(directory):
        raise _dataset_dict_refused(directory)
    if _is_dataset(directory):
        return _dataset_files(directory)
    found: list[tuple[str, list[str]]] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not _is_hidden(d)]
        for name in list(dirs):
            sub = os.path.join(root, name)
            if _is_dataset_dict(sub):
                raise _dataset_dict_refused(sub)
            if _is_dataset(sub):
                found.append((sub + os.sep, _dataset_files(sub)))
                dirs.remove(name)
        found.extend(
            (path, [path])
            for path in (os.path.join(root, name) for name in files if not _is_hidden(name) and _is_supported(name))
        )
    return [path for _, paths in sorted(found) for path in paths]


def _given_file(given: str) -> str:
    if not _is_supported(given):
        raise PackcliError(f"{given}: unsupported file type (supported: {supported_list()})")
    if _is_dataset_metadata(given):
        directory = os.path.dirname(given) or "."
        raise PackcliError(f"{given}: metadata of a datasets save_to_disk directory; give the directory ({directory})")
    return given


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """Turn what the user typed into the exact list of files to read, failing early on typos."""
    if not inputs:
        raise PackcliError("no inputs given")
    paths: list[str] = []
    for given in inputs:
        if given == STDIN:
            paths.append(given)
        elif storage.is_remote(given):
            paths.extend(storage.expand_remote(given, _is_supported))
        elif os.path.isdir(given):
            found = _files_in_directory(given)
            if not found:
                raise PackcliError(f"{given}: directory has no {supported_list()} files")
            paths.extend(found)
        elif os.path.isfile(given):  # checked before globbing: 'shard[1].jsonl' may be a real name
            paths.append(_given_file(given))
        elif _GLOB_CHARS & set(given):
            found = sorted(
                p
                for p in glob.glob(given, recursive=True)
                if os.path.isfile(p) and _is_supported(p) and not _is_dataset_metadata(p)
            )
            if not found:
                raise PackcliError(f"{given}: pattern matches no {supported_list()} files")
            paths.extend(found)
        elif os.path.exists(given):
            raise PackcliError(f"{given}: not a regular file or directory")
        else:
            raise PackcliError(f"{given}: no such file or directory")
    return paths
