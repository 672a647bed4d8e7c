"""One `packcli export`, timed in the process from the call to its return, imports excluded.

    python export.py megatron|nanotron|mds|mds-zstd|energon SOURCE OUT

SOURCE is a packed npy output; OUT an empty directory (megatron writes OUT/data.bin and
OUT/data.idx). Figures: `seconds`, `cpu_s_export` (user and system of every thread).
"""

from __future__ import annotations

import os
import sys
import time

import _common


def main() -> None:
    kind, source, out = sys.argv[1:4]
    module = kind.split("-")[0]
    function = _common.find(
        f"export_{module}", f"packcli.export.{module}", f"packcli.export_{module}", f"packcli.{module}"
    )
    if kind == "megatron":
        call = lambda: function(source, os.path.join(out, "data"))  # noqa: E731
    elif kind.startswith("mds"):
        call = lambda: function(source, out, overwrite=True, compression="zstd" if kind == "mds-zstd" else None)  # noqa: E731
    else:
        call = lambda: function(source, out, overwrite=True)  # noqa: E731
    before = os.times()
    started = time.perf_counter()
    call()
    seconds = time.perf_counter() - started
    after = os.times()
    cpu = sum(getattr(after, f) - getattr(before, f) for f in ("user", "system", "children_user", "children_system"))
    _common.emit({"seconds": seconds, "cpu_s_export": cpu})


if __name__ == "__main__":
    main()
