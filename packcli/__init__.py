"""packcli: pack raw text corpora into training-ready token shards for causal LMs."""

from packcli.core.errors import PackcliError
from packcli.core.version import __version__

__all__ = ["PackcliError", "PackedSequences", "__version__", "pack_pairs", "pack_sequences"]


def __getattr__(name: str):
    """The library API, imported on first use so `packcli --help` stays instant."""
    if name in ("pack_sequences", "PackedSequences"):
        from packcli.engine import memory as api

        return getattr(api, name)
    if name == "pack_pairs":
        from packcli.engine.memory_pairs import pack_pairs

        return pack_pairs
    raise AttributeError(f"module 'packcli' has no attribute {name!r}")
