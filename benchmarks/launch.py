"""Run one command and write its wall time and resource usage as JSON: the harness's launcher.

    python -I -S launch.py RESULT.json COMMAND [ARG...]

The measured command is the launcher's child, not the harness's. A process's peak RSS as
Linux reports it (`ru_maxrss`) starts at the resident size of the process it was spawned
from, since exec keeps the high-water mark of the memory it replaces; this launcher holds
only the standard library's few modules (a few MB), so the figure is the command's own and
not the harness's, however large the harness has grown. `os.wait4` gives the command's
rusage, with the processes it waited for (workers) in its CPU time and in its peak (the
largest single process). Standard library only: it runs under any program's interpreter.
"""

import json
import os
import sys
import time


def main() -> int:
    result, command = sys.argv[1], sys.argv[2:]
    started = time.perf_counter()
    pid = os.posix_spawnp(command[0], command, os.environ)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    with open(result, "w") as out:
        json.dump(
            {
                "exit": os.waitstatus_to_exitcode(status),
                "wall_s": wall,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "user_s": usage.ru_utime,
                "system_s": usage.ru_stime,
                "peak_rss_mb": usage.ru_maxrss / 1024,
            },
            out,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
