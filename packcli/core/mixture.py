"""A training mixture as written: sources with weights or epochs, from a TOML file or the
command line, checked before anything is read.

    seed = 7                     # optional: the sampling seed (else --seed)
    target_tokens = 50_000_000   # optional: real tokens of the training output
    max_epochs = 4               # optional: no source is taken more often than this

    [[source]]
    name = "web"
    paths = ["web/*.jsonl.zst"]  # relative to the file's directory, or URLs
    weight = 0.7                 # a share of the tokens the weighted sources take together

    [[source]]
    name = "chat"
    paths = ["chat.jsonl"]
    messages_field = "messages"  # the source's own input fields, as pack names them
    epochs = 2.5                 # every document twice, and a seeded half once more

How weights, epochs and the target resolve into documents is plan/mixture.py's; this
module only says what was asked, and where in the file it was asked, so that a bad value
is one line naming the file and line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packcli.core.errors import PackcliError

# A source's own input options: pack's option names in snake case. `holdout_key` names the
# field --holdout hashes in this source's records (sources often name their ids apart).
SOURCE_FIELDS = (
    "text_field",
    "prompt_field",
    "completion_field",
    "messages_field",
    "chat_template",
    "train_on",
    "ids_field",
    "labels_field",
    "holdout_key",
)
SOURCE_KEYS = ("name", "paths", "weight", "epochs", *SOURCE_FIELDS)
TOP_KEYS = ("seed", "target_tokens", "max_epochs", "source")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
MAX_SOURCES = 1 << 15  # segment_source is an index into the manifest's sources
_TOML_LINE = re.compile(r"\(at line (\d+), column (\d+)\)")


@dataclass(frozen=True)
class SourceSpec:
    """One source of a mixture: its documents (`paths`), its input fields, and how much
    of it to take (`weight` or `epochs`; neither means every document once)."""

    name: str
    paths: tuple[str, ...]
    fields: dict[str, Any] = field(default_factory=dict)
    weight: float | None = None
    epochs: float | None = None

    @property
    def fixed_epochs(self) -> float | None:
        """The epochs asked for, where they are fixed (a source without a weight: 1.0 by default)."""
        if self.weight is not None:
            return None
        return 1.0 if self.epochs is None else self.epochs


@dataclass(frozen=True)
class MixSpec:
    """A mixture: its sources in order (a source's index is its `segment_source` value)."""

    sources: tuple[SourceSpec, ...]
    seed: int | None = None
    target_tokens: int | None = None
    max_epochs: float | None = None
    origin: str = "--source"  # the mixture file's path, or where the inline form came from

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sources]

    @property
    def paths(self) -> list[str]:
        """Every source's paths, sources in order."""
        return [path for s in self.sources for path in s.paths]

    def to_dict(self) -> dict[str, Any]:
        """The mixture as resolved options record it (what changes the shards)."""
        return {
            "seed": self.seed,
            "target_tokens": self.target_tokens,
            "max_epochs": self.max_epochs,
            "sources": [
                {"name": s.name, "paths": list(s.paths), "weight": s.weight, "epochs": s.epochs, **s.fields}
                for s in self.sources
            ],
        }


def load_mix(path: str | Path) -> MixSpec:
    """The mixture in a TOML file; a file that does not parse, or a key or value that is
    wrong, is a usage error naming the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _usage(f"--mix {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _usage(f"--mix {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    data = _parse_toml(path, text)
    whole = _Lines(path, text)
    lines = whole.top()
    unknown = [key for key in data if key not in TOP_KEYS]
    if unknown:
        raise lines.error(unknown[0], f"unknown key {unknown[0]!r} (top-level keys: {', '.join(TOP_KEYS)})")
    tables = data.get("source")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise _usage(f"{path}: no [[source]] tables (a mixture needs at least one source)")
    base = path.parent
    sources = [_source_from_table(table, i, whole, base) for i, table in enumerate(tables)]
    spec = MixSpec(
        tuple(sources),
        seed=_integer(data, "seed", lines, minimum=None),
        target_tokens=_integer(data, "target_tokens", lines, minimum=1),
        max_epochs=_number(data.get("max_epochs"), "max_epochs", lines.error_at("max_epochs"), positive=True),
        origin=str(path),
    )
    _check_names(spec, whole)
    return spec


def inline_mix(sources: list[str], weights: list[str], epochs: list[str]) -> MixSpec:
    """The mixture of repeated `--source NAME=PATH` (a name given again adds a path),
    `--weight NAME=W` and `--epochs NAME=E`."""
    paths: dict[str, list[str]] = {}
    for given in sources:
        name, value = _assignment("--source", given, "NAME=PATH")
        paths.setdefault(name, []).append(value)
    amounts: dict[str, dict[str, float]] = {name: {} for name in paths}
    for flag, given_values in (("--weight", weights), ("--epochs", epochs)):
        key = flag[2:]
        for given in given_values:
            name, value = _assignment(flag, given, f"NAME={key[0].upper()}")
            if name not in paths:
                raise _usage(f"{flag} {given}: no --source named {name!r}")
            if key in amounts[name]:
                raise _usage(f"{flag} {name}: given twice")
            amounts[name][key] = _number_text(value, f"{flag} {name}")
    specs = []
    for name, own in paths.items():
        amount = amounts[name]
        if "weight" in amount and "epochs" in amount:
            raise _usage(f"source {name!r}: --weight and --epochs exclude each other (one says how much to take)")
        specs.append(SourceSpec(name, tuple(own), {}, amount.get("weight"), amount.get("epochs")))
    spec = MixSpec(tuple(specs), origin="--source")
    _check_names(spec, None)
    return spec


# ----------------------------------------------------------------------------- one source


def _source_from_table(table: dict[str, Any], index: int, lines: _Lines, base: Path) -> SourceSpec:
    where = lines.source(index)
    unknown = [key for key in table if key not in SOURCE_KEYS]
    if unknown:
        raise where.error(unknown[0], f"unknown key {unknown[0]!r} in [[source]] (keys: {', '.join(SOURCE_KEYS)})")
    name = table.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise where.error("name", f"[[source]] {index + 1} needs a name of letters, digits, '_', '.' or '-'")
    paths = table.get("paths")
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
        raise where.error("paths", f"source {name!r}: paths must be a list of files, globs, directories or URLs")
    fields: dict[str, Any] = {}
    for key in SOURCE_FIELDS:
        if key in table:
            value = table[key]
            if not isinstance(value, str) or not value:
                raise where.error(key, f"source {name!r}: {key} must name a field (a non-empty string)")
            fields[key] = str(base / value) if key == "chat_template" and not Path(value).is_absolute() else value
    weight = _number(table.get("weight"), f"source {name!r}: weight", where.error_at("weight"))
    epochs = _number(table.get("epochs"), f"source {name!r}: epochs", where.error_at("epochs"))
    if weight is not None and epochs is not None:
        raise where.error(
            "epochs", f"source {name!r}: weight and epochs exclude each other (one says how much to take)"
        )
    return SourceSpec(name, tuple(_relative_to(base, p) for p in paths), fields, weight, epochs)


def _relative_to(base: Path, path: str) -> str:
    """A path of the file, as pack reads it: relative ones from the file's directory."""
    if path == "-" or "://" in path or Path(path).is_absolute():
        return path
    return str(base / path) if str(base) not in ("", ".") else path


def _check_names(spec: MixSpec, lines: _Lines | None) -> None:
    if len(spec.sources) > MAX_SOURCES:
        raise _usage(f"{spec.origin}: {len(spec.sources):,} sources; at most {MAX_SOURCES:,}")
    seen: set[str] = set()
    for i, source in enumerate(spec.sources):
        if source.name in seen:
            message = f"two sources are named {source.name!r} (a source's name is its key in the report)"
            raise lines.source(i).error("name", message) if lines is not None else _usage(message)
        seen.add(source.name)
    if "-" in spec.paths and len(spec.paths) > 1:
        raise _usage(f"{spec.origin}: stdin (-) can be a mixture's only input, not one of several")


# ----------------------------------------------------------------------------- values


def _number(value: Any, what: str, error: Any, positive: bool = False) -> float | None:
    """A non-negative finite number (positive with `positive`), or None when not given."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{what} must be a number, not {value!r}")
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        raise error(f"{what} must be a finite number, not {value!r}")
    if number < 0 or (positive and number == 0):
        raise error(f"{what} must be {'positive' if positive else 'at least 0'}, not {value!r}")
    return number


def _number_text(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _usage(f"{what} must be a number, not {text!r}") from None
    number = _number(value, what, _usage)
    assert number is not None
    return number


def _integer(data: dict[str, Any], key: str, lines: _Lines, minimum: int | None) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise lines.error(key, f"{key} must be a whole number, not {value!r}")
    if minimum is not None and value < minimum:
        raise lines.error(key, f"{key} must be at least {minimum}, not {value}")
    return int(value)


def _assignment(flag: str, given: str, form: str) -> tuple[str, str]:
    name, sep, value = given.partition("=")
    if not sep or not NAME.fullmatch(name) or not value:
        raise _usage(f"{flag} {given!r}: expected {form} (a name of letters, digits, '_', '.' or '-')")
    return name, value


def _parse_toml(path: Path, text: str) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10 has no TOML reader of its own
        raise _usage("--mix needs Python 3.11 or later (its tomllib reads the mixture file)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = _TOML_LINE.search(message)
        if found is None:
            end = message.find("(at end of document)")
            if end < 0:
                raise _usage(f"{path}: not a valid mixture file ({message})") from None
            lines = max(1, len(text.splitlines()))
            raise _usage(f"{path}:{lines}: {message[:end].strip().rstrip('.')} (at the end of the file)") from None
        detail = message[: found.start()].strip().rstrip(".")
        raise _usage(f"{path}:{found.group(1)}: {detail} (column {found.group(2)})") from None


class _Lines:
    """Where keys stand in the file, for errors: the line of a top-level key, or of a key
    inside the i-th [[source]] table (the table's header line when the key is absent)."""

    def __init__(self, path: Path, text: str, first: int = 0, last: int | None = None):
        self.path, self.text = path, text
        self.rows = text.splitlines()
        self.first, self.last = first, len(self.rows) if last is None else last

    def _headers(self) -> list[int]:
        return [i for i, row in enumerate(self.rows) if re.match(r"\s*\[\[\s*source\s*\]\]", row)]

    def top(self) -> _Lines:
        """The lines before the first table, where top-level keys stand."""
        headers = self._headers()
        return _Lines(self.path, self.text, 0, headers[0] if headers else None)

    def source(self, index: int) -> _Lines:
        headers = self._headers()
        if index >= len(headers):
            return self
        end = headers[index + 1] if index + 1 < len(headers) else len(self.rows)
        return _Lines(self.path, self.text, headers[index], end)

    def line_of(self, key: str) -> int:
        pattern = re.compile(rf"\s*\"?{re.escape(key)}\"?\s*=")
        for i in range(self.first, self.last):
            if pattern.match(self.rows[i]):
                return i + 1
        return self.first + 1

    def error(self, key: str, message: str) -> PackcliError:
        return _usage(f"{self.path}:{self.line_of(key)}: {message}")

    def error_at(self, key: str) -> Any:
        return lambda message: self.error(key, message)


def _usage(message: str) -> PackcliError:
    return PackcliError(message, usage=True)
