"""Where a --tokenizer comes from, checked before transformers is asked: errors that name
the file expected and what is wrong with it, and a Hub name tried once, fast.

transformers' own messages for a bad local tokenizer name the symptom ("'added_tokens'",
a JSON syntax error about a valid JSON file, a sentence that lists nothing), and
huggingface_hub retries an unreachable Hub for most of a minute before failing.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from packcli.core.errors import PackcliError

DEFAULT_ENDPOINT = "https://huggingface.co"
CONNECT_TIMEOUT = 3.0  # seconds; a reachable Hub answers a TCP connect in far less
# Files from which transformers can build a tokenizer when there is no tokenizer.json.
SLOW_FILES = ("tokenizer.model", "spiece.model", "vocab.json", "vocab.txt", "tiktoken.model", "sentencepiece.bpe.model")
OFFLINE_VALUES = ("1", "ON", "YES", "TRUE")


def check_local(location: Path) -> None:
    """A local directory or .json file that cannot be a tokenizer: one line naming the file."""
    if location.is_dir():
        file = location / "tokenizer.json"
        if file.is_file():
            check_tokenizer_json(file)
        elif not any((location / name).is_file() for name in SLOW_FILES):
            present = sorted(p.name for p in location.iterdir())[:5]
            raise PackcliError(
                f"tokenizer directory {location} has no tokenizer.json (nor any of {', '.join(SLOW_FILES)}); "
                f"it holds {', '.join(present) if present else 'nothing'}"
            )
    elif location.is_file() and location.name.endswith(".json"):
        check_tokenizer_json(location)


def check_tokenizer_json(file: Path) -> None:
    """A tokenizers file is a JSON object with a `model`; anything else is named for what it is."""
    try:
        data = json.loads(file.read_bytes())
    except (OSError, ValueError) as exc:
        raise PackcliError(f"tokenizer file {file} is not valid JSON ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict):
        raise PackcliError(f"tokenizer file {file} holds a JSON {type(data).__name__}, not a tokenizers object")
    if "model" not in data:
        if "tokenizer_class" in data or "added_tokens_decoder" in data or "chat_template" in data:
            raise PackcliError(
                f"{file} is a tokenizer_config.json, not a tokenizer: pass the directory that holds it "
                "and its tokenizer.json, or the tokenizer.json itself"
            )
        keys = ", ".join(repr(k) for k in list(data)[:5]) or "none"
        raise PackcliError(
            f"tokenizer file {file} has no 'model' (keys: {keys}); a tokenizer.json as the tokenizers "
            "library saves it is expected"
        )


def offline() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in OFFLINE_VALUES


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT


def _proxy() -> str | None:
    """The HTTPS proxy requests would go through (then it is the proxy that must answer)."""
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        value = os.environ.get(name)
        if value:
            return value if "://" in value else f"http://{value}"
    return None


def reachable(url: str, timeout: float = CONNECT_TIMEOUT) -> bool:
    """Whether a TCP connection to the URL's host opens within `timeout` (no request is sent)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def cached(name: str) -> bool:
    """Whether the Hub cache holds this repository's tokenizer files."""
    from huggingface_hub import try_to_load_from_cache  # lazy: only a Hub name needs it

    for filename in ("tokenizer_config.json", "tokenizer.json"):
        try:
            if isinstance(try_to_load_from_cache(name, filename), str):
                return True
        except Exception:  # a name that is no valid repository id is simply not cached
            return False
    return False


def check_hub_name(spec: str) -> None:
    """A name that is no local path goes to the Hub: where the Hub cannot be reached, it is
    loaded from the cache without a network call, or refused at once in one line (instead of
    huggingface_hub's retries)."""
    if offline():
        if not cached(spec):
            raise PackcliError(_hub_error(spec, "HF_HUB_OFFLINE is set and the Hub cache does not hold it"))
        return
    if reachable(_proxy() or endpoint()):
        return
    if cached(spec):  # from the cache, without the retries of a Hub that is not there
        import huggingface_hub.constants

        os.environ["HF_HUB_OFFLINE"] = "1"
        huggingface_hub.constants.HF_HUB_OFFLINE = True  # read from the environment when it was imported
        return
    proxy = _proxy()
    through = (
        f" through the proxy at {urlsplit(proxy).hostname}:{urlsplit(proxy).port or ''}" if proxy else ""
    )  # no credentials
    raise PackcliError(_hub_error(spec, f"the Hugging Face Hub ({endpoint()}) is unreachable{through}"))


def _hub_error(spec: str, why: str) -> str:
    return (
        f"tokenizer {spec!r} is not a local path, and as a Hub name it cannot be loaded: {why}; "
        f"for a directory in the current one, pass ./{spec}"
    )
