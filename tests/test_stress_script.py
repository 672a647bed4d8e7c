"""scripts/stress_test.py starts its load, runs what it is given, and always ends the load.
(The full run, `make test` five times under load, is for a person to start: it takes long.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "stress_test.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def loader_pids(stdout: str) -> list[int]:
    match = re.search(r"^load: (\d+) busy loop\(s\), pids ([\d ]+)$", stdout, re.MULTILINE)
    assert match, stdout
    pids = [int(p) for p in match.group(2).split()]
    assert len(pids) == int(match.group(1))
    return pids


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_zero_runs_start_and_stop_the_load():
    result = run("--runs", "0", "--load", "2")
    assert result.returncode == 0, result.stderr
    assert "0 of 0 runs passed" in result.stdout
    assert all(gone(pid) for pid in loader_pids(result.stdout))


def test_a_run_that_passes_and_one_that_fails(tmp_path):
    ok = run("--runs", "2", "--load", "1", "--command", f"{sys.executable} -c pass")
    assert ok.returncode == 0 and "2 of 2 runs passed" in ok.stdout and ok.stdout.count(": passed in") == 2
    failing = run("--runs", "1", "--load", "1", "--command", f"{sys.executable} -c 'raise SystemExit(3)'")
    assert failing.returncode == 1 and "FAILED (exit 3)" in failing.stdout and "0 of 1 runs passed" in failing.stdout
    assert all(gone(pid) for pid in loader_pids(ok.stdout) + loader_pids(failing.stdout))
