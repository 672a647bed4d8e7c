"""The per-kind record validators every reader shares, so a record is judged the same way
whatever file it came from, and the one-line wording of what is wrong with it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from packcli.core.choices import ROLES as CHAT_ROLES  # the roles a turn may have, as --train-on names them

FieldKind = Literal["text", "ids", "messages", "any", "scalar", "text_or_messages", "weight", "weight_or_absent"]
FIELD_KINDS = ("text", "ids", "messages", "any", "scalar", "text_or_messages", "weight", "weight_or_absent")
# Kinds a record may lack, or hold null for: the value is then None (a --weight-field with --default-weight).
OPTIONAL_KINDS = ("weight_or_absent",)
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


def _as_text_or_messages(value: Any, name: str) -> str | list:
    """A preference pair's field: a string, or a list of messages (the conversational form)."""
    if type(value) is list:
        return _as_messages(value, name)
    if type(value) is str:
        return _as_text(value, name)
    raise _wrong_type(f"field {name!r}", value, "a string or a list of messages")


def _as_weight(value: Any, name: str) -> float:
    """A loss weight: a finite number, 0 or more (0 drops the record)."""
    if type(value) not in (int, float):  # bool is not a weight, though Python calls it an int
        raise _wrong_type(f"field {name!r}", value, "a non-negative number (a loss weight)")
    weight = float(value)
    if weight != weight or weight in (float("inf"), float("-inf")):
        raise RecordProblem("bad weight", f"field {name!r} is {value}, not a finite number")
    if weight < 0:
        raise RecordProblem("bad weight", f"field {name!r} is {value:g}, a negative weight")
    return weight


def _as_weight_or_absent(value: Any, name: str) -> float | None:
    return None if value is None else _as_weight(value, name)


VALIDATORS: dict[str, Callable[[Any, str], Any]] = {
    "text": _as_text,
    "ids": _as_ids,
    "messages": _as_messages,
    "any": _as_any,
    "scalar": _as_scalar,
    "text_or_messages": _as_text_or_messages,
    "weight": _as_weight,
    "weight_or_absent": _as_weight_or_absent,
}


def check_encodable(value: Any, name: str, kind: str) -> None:
    """json.loads accepts "\\ud800"; such text would only blow up later, in the tokenizer."""
    if type(value) is str:
        strings = [value]
    else:
        strings = [message[key] for message in value for key in ("role", "content")]
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
