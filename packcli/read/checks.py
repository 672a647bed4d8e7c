"""The per-kind record validators every reader shares, so a record is judged the same way
whatever file it came from, and the one-line wording of what is wrong with it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from packcli.core.choices import ROLES as CHAT_ROLES  # the roles a turn may have, as --train-on names them

FieldKind = Literal["text", "ids", "messages", "any", "scalar"]
FIELD_KINDS = ("text", "ids", "messages", "any", "scalar")
INT64_MAX = np.iinfo(np.int64).max
_MAX_DETAIL = 160  # long library messages would bury the location in the one-line error
_MAX_KEYS_SHOWN = 10

Validator = Callable[[Any, str], Any]  # (value, field name) -> the value to keep, or raises RecordProblem
Check = tuple[str, str, Validator]  # (field name, kind, validator)


class RecordProblem(Exception):
    """A record that cannot be used: `reason` is the stable count key, `problem` the detail."""

    def __init__(self, reason: str, problem: str):
        super().__init__(problem)
        self.reason, self.problem = reason, problem


def one_line(text: object) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= _MAX_DETAIL else line[: _MAX_DETAIL - 3] + "..."


def describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def key_list(keys: Sequence[Any]) -> str:
    shown = ", ".join(one_line(repr(k))[:40] for k in list(keys)[:_MAX_KEYS_SHOWN])
    more = len(keys) - _MAX_KEYS_SHOWN
    return shown + (f", ... ({more} more)" if more > 0 else "") if keys else "none"


def _wrong_type(what: str, value: Any, expected: str) -> RecordProblem:
    if value is None:
        return RecordProblem("wrong type", f"{what} is null")
    return RecordProblem("wrong type", f"{what} is {describe(value)}, expected {expected}")


def _as_text(value: Any, name: str) -> str:
    if type(value) is str:
        if value:
            return value
        raise RecordProblem("empty text", f"field {name!r} is empty")
    raise _wrong_type(f"field {name!r}", value, "a string")


def _as_ids(value: Any, name: str) -> np.ndarray:
    if type(value) is not list:
        raise _wrong_type(f"field {name!r}", value, "a list of integers")
    if not value:
        raise RecordProblem("empty field", f"field {name!r} is an empty list")
    if set(map(type, value)) != {int}:  # bool and float would be silently converted by numpy
        i, item = next((i, x) for i, x in enumerate(value) if type(x) is not int)
        raise _wrong_type(f"field {name!r} item {i}", item, "an integer")
    try:
        return np.array(value, dtype=np.int64)
    except OverflowError:
        i = next(i for i, x in enumerate(value) if not -INT64_MAX - 1 <= x <= INT64_MAX)
        raise RecordProblem("wrong type", f"field {name!r} item {i} does not fit in int64") from None


SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
}


def _as_messages(value: Any, name: str) -> list:
    """Turns as {"role", "content"}; ShareGPT's {"from", "value"} is mapped to them."""
    if type(value) is not list:
        raise _wrong_type(f"field {name!r}", value, "a list of messages")
    if not value:
        raise RecordProblem("empty field", f"field {name!r} is an empty list")
    normalized = []
    for i, message in enumerate(value):
        if type(message) is not dict:
            raise _wrong_type(f"field {name!r} item {i}", message, "an object with 'role' and 'content'")
        if "role" not in message and "from" in message and "value" in message:
            message = _from_sharegpt(message, name, i)
        for key in ("role", "content"):
            if key not in message:
                raise RecordProblem(
                    "missing field",
                    f"field {name!r} item {i} has no {key!r} (keys present: {key_list(list(message))})",
                )
            if type(message[key]) is not str:
                raise _wrong_type(f"field {name!r} item {i} {key!r}", message[key], "a string")
        if (
            message["role"] not in CHAT_ROLES
        ):  # judged as ShareGPT's 'from' is: a misspelt role would drop turns silently
            raise RecordProblem(
                "unknown role",
                f"field {name!r} item {i} 'role' is {message['role']!r}, not one of {', '.join(CHAT_ROLES)}",
            )
        normalized.append(message)
    return normalized


def _from_sharegpt(message: dict, name: str, i: int) -> dict:
    speaker = message["from"]
    role = SHAREGPT_ROLES.get(speaker) if type(speaker) is str else None
    if role is None:
        raise RecordProblem(
            "wrong type", f"field {name!r} item {i} 'from' is {speaker!r}, not one of {', '.join(SHAREGPT_ROLES)}"
        )
    return {"role": role, "content": message["value"]}


def _as_any(value: Any, name: str) -> Any:
    if value is None:
        raise _wrong_type(f"field {name!r}", value, "a value")
    return value


def _as_scalar(value: Any, name: str) -> Any:
    """--group-by values: any JSON scalar, null included (a group of its own)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise _wrong_type(f"field {name!r}", value, "a string, number, boolean or null")


VALIDATORS: dict[str, Callable[[Any, str], Any]] = {
    "text": _as_text,
    "ids": _as_ids,
    "messages": _as_messages,
    "any": _as_any,
    "scalar": _as_scalar,
}


def check_encodable(value: Any, name: str, kind: str) -> None:
    """json.loads accepts "\\ud800"; such text would only blow up later, in the tokenizer."""
    strings = [value] if kind == "text" else [message[key] for message in value for key in ("role", "content")]
    for string in strings:
        if string.isascii():  # the common case, and free: a flag on the str
            continue
        try:
            string.encode("utf-8")
        except UnicodeEncodeError as e:
            raise RecordProblem(
                "invalid UTF-8",
                f"field {name!r} holds an unpaired surrogate ({string[e.start]!r}), not valid text",
            ) from None
