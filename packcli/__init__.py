"""packcli: pack raw text corpora into training-ready token shards for causal LMs."""

from packcli.errors import PackcliError

__version__ = "0.1.0"

__all__ = ["PackcliError", "PackedSequences", "__version__", "pack_sequences"]


def __getattr__(name: str):
    """The library API, imported on first use so `packcli --help` stays instant."""
    if name in ("pack_sequences", "PackedSequences"):
        from packcli import api

        return getattr(api, name)
    raise AttributeError(f"module 'packcli' has no attribute {name!r}")
