"""packcli: pack raw text corpora into training-ready token shards for causal LMs."""

from packcli.errors import PackcliError

__version__ = "0.1.0"

__all__ = ["PackcliError", "__version__"]
