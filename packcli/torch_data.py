"""The old name of `packcli.load.torch`, kept until packcli 0.2.0 removes it.

Importing it warns (DeprecationWarning, naming the new path) and gives `packcli.load.torch`
itself: every name is the same object."""

import sys
import warnings

from packcli.load import torch as moved

warnings.warn(
    "packcli.torch_data is deprecated: import packcli.load.torch instead (packcli.torch_data is removed in packcli 0.2.0)",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = moved
