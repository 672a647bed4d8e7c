"""mosaicml-streaming, the library the MDS export is read back with (and compared against)."""

from __future__ import annotations

import importlib.util
import sys
import types


def streaming_base() -> types.ModuleType:
    """`streaming.base`, where MDSWriter and StreamingDataset live.

    The package's `__init__` also imports `streaming.vision`, which needs torchvision;
    where torchvision is missing, or built for another torch (it then fails with
    "operator torchvision::nms does not exist"), the import fails although nothing here
    uses vision. Then the package is entered without its `__init__`: a bare module with
    the package's path, from which `streaming.base` imports as usual.
    """
    try:
        import streaming.base

        return streaming.base
    except (ImportError, RuntimeError) as exc:
        if not _failed_on_vision(exc):
            raise
    for name in [name for name in sys.modules if name == "streaming" or name.startswith("streaming.")]:
        del sys.modules[name]
    spec = importlib.util.find_spec("streaming")
    package = types.ModuleType("streaming")
    package.__path__ = list(spec.submodule_search_locations or []) if spec else []
    package.__spec__ = spec
    sys.modules["streaming"] = package
    from streaming import base

    return base


def _failed_on_vision(exc: BaseException) -> bool:
    if isinstance(exc, ImportError):
        return (exc.name or "").startswith("torchvision")
    return "torchvision" in str(exc)
