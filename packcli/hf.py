"""The old name of `packcli.load.hf`, kept until packcli 0.2.0 removes it.

Importing it warns (DeprecationWarning, naming the new path) and gives `packcli.load.hf`
itself: every name is the same object."""

import sys
import warnings

from packcli.load import hf as moved

warnings.warn(
    "packcli.hf is deprecated: import packcli.load.hf instead (packcli.hf is removed in packcli 0.2.0)",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = moved
