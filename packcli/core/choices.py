"""The values each choice option takes, in a module that imports nothing.

The modules that act on these names import them from here, and so does the CLI, which
shows them in `--help` without loading numpy or numba.
"""

MODES = ("bin", "concat")
ALGORITHMS = ("nf", "ff", "ffd", "bfd", "spfhp", "lpfhp")
REMAINDER_POLICIES = ("pad", "drop")
OVERLONG_POLICIES = ("split", "truncate", "drop", "error")
TRUNCATION_SIDES = ("left", "right")
FORMATS = ("parquet", "npy")
TOKENIZER_BACKENDS = ("auto", "hf", "tiktoken")
BAD_RECORD_POLICIES = ("fail", "skip")
ROLES = ("system", "user", "assistant", "tool")
TRAIN_ON_TURNS = ("last", "all")  # --train-on beside a list of roles: the last assistant turn, or every content
REASONING_DELIMITERS = ("<think>", "</think>")  # --mask-reasoning's block, unless --reasoning-open/--reasoning-close
DEFAULT_BATCH_SIZE = 8  # stats: the pad-to-longest baseline's batch, as a padding collator's
ENGINES = ("local", "ray")
COLOR_CHOICES = ("auto", "always", "never")  # show: colour on a terminal only, always, never
