"""docs/examples/Makefile under GNU make: manifest.json as the target makes make exact.

Up to date means nothing runs; one touched input re-packs only its output; -j2 runs two
packs at once (each waits at a FIFO only the other one opens, so neither could finish
alone); a bad record or Ctrl-C leaves no manifest.json, so make packs again next time."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from pausing import stop_at

from packcli.inspect.verify import verify_dir

ROOT = Path(__file__).resolve().parent.parent
MAKE = shutil.which("make")
SAFETY_TIMEOUT = 300  # seconds: only a hung run reaches it
pytestmark = pytest.mark.skipif(MAKE is None, reason="GNU make is not installed")


@pytest.fixture
def project(tmp_path) -> Path:
    """The example Makefile with its data, and `packcli` being this checkout's."""
    here = tmp_path / "project"
    shutil.copytree(ROOT / "docs" / "examples", here, ignore=shutil.ignore_patterns("packed", "out", "__pycache__"))
    shim = tmp_path / "bin" / "packcli"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m packcli "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return here


def environment(project: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{project.parent / 'bin'}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.pop("MAKEFLAGS", None)
    env.pop("MFLAGS", None)
    env.update(extra)
    return env


def make(project: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MAKE, *args],
        cwd=project,
        env=env or environment(project),
        capture_output=True,
        text=True,
        timeout=SAFETY_TIMEOUT,
    )


SFT = Path("packed/sft/manifest.json")
PRETRAIN = Path("packed/pretrain/manifest.json")
MIX = Path("packed/mix")  # the mixture of both: its target is MIX/train/manifest.json


def up_to_date(project: Path, target: Path) -> bool:
    """make's own answer (-q: question mode, runs nothing)."""
    return make(project, "-q", str(target)).returncode == 0


def newer(path: Path, than: Path) -> None:
    """Give `path` a modification time after `than`'s, without depending on the clock's resolution."""
    later = than.stat().st_mtime_ns + 2_000_000_000
    os.utime(path, ns=(later, later))


def test_make_packs_then_has_nothing_to_do_then_repacks_only_what_changed(project):
    first = make(project)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("packcli pack") == 3
    for target in (SFT, PRETRAIN, MIX / "train", MIX / "validation"):
        verify_dir(project / target.parent if target.name == "manifest.json" else project / target)
    again = make(project)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout and "packcli" not in again.stdout
    pretrain_before = (project / PRETRAIN).stat().st_mtime_ns
    newer(project / "data" / "sft.jsonl", project / SFT)
    newer(project / "data" / "sft.jsonl", project / MIX / "train" / "manifest.json")
    assert not up_to_date(project, SFT) and up_to_date(project, PRETRAIN)
    assert not up_to_date(project, MIX / "train" / "manifest.json")  # the mixture reads it too
    third = make(project)
    assert third.returncode == 0, third.stderr
    assert "packed/sft" in third.stdout and "packed/pretrain" not in third.stdout and "packed/mix" in third.stdout
    assert (project / PRETRAIN).stat().st_mtime_ns == pretrain_before
    checks = make(project, "verify", "stats")
    assert checks.returncode == 0 and checks.stdout.count("ok: packed/") == 4 and "efficiency" in checks.stdout


def test_make_j2_runs_two_packs_at_once(project, tmp_path):
    """Each pack waits at one FIFO, the SFT one to read it, the pretraining one to write it:
    opening a FIFO blocks until its other end is opened, so neither gets past the open
    unless the other runs at the same moment. Serially, make would never finish."""
    fifo = tmp_path / "rendezvous"
    os.mkfifo(fifo)
    wrapper = tmp_path / "bin" / "packcli-together"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  *"-o packed/sft "*) exec 3< "{fifo}" ;;\n'
        f'  *"-o packed/pretrain "*) exec 3> "{fifo}" ;;\n'
        "esac\n"
        "exec 3>&-\n"
        'exec packcli "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    both = make(project, "-j2", f"PACKCLI={wrapper}")
    assert both.returncode == 0, both.stderr
    for target in (SFT, PRETRAIN):
        verify_dir(project / target.parent)


def test_a_failing_pack_leaves_its_target_out_of_date(project):
    data = project / "data" / "sft.jsonl"
    good = data.read_text()
    data.write_text(good + '{"prompt": "no completion here"}\n')
    first = make(project, "-k")  # -k: the other output is still built
    assert first.returncode != 0 and "sft.jsonl:6" in first.stderr
    assert not (project / SFT).exists() and not up_to_date(project, SFT) and up_to_date(project, PRETRAIN)
    data.write_text(good)
    assert make(project).returncode == 0
    data.write_text(good + '{"prompt": "no completion here"}\n')
    newer(data, project / SFT)
    failed = make(project)
    assert failed.returncode != 0
    assert "sft.jsonl:6" in failed.stderr and "missing field 'completion'" in failed.stderr
    # The bad record is found before the earlier output is replaced: that output stays whole,
    # and older than its input, so make still takes the target as out of date.
    assert not up_to_date(project, SFT)
    if (project / SFT).exists():
        assert (project / SFT).stat().st_mtime_ns < data.stat().st_mtime_ns
    assert up_to_date(project, PRETRAIN)
    data.write_text(good)
    fixed = make(project)
    assert fixed.returncode == 0 and "packed/sft" in fixed.stdout and "packed/pretrain" not in fixed.stdout
    verify_dir(project / SFT.parent)


@pytest.mark.parametrize("point", ["written", "report.json-tmp", "manifest.json-tmp"])
def test_ctrl_c_under_make_leaves_nothing_make_takes_as_built(project, tmp_path, point):
    """Ctrl-C reaches make and the pack it runs (one process group), at the named point of the pack."""
    stopped = stop_at([MAKE], point, signal.SIGINT, tmp_path, env=environment(project), cwd=project, group=True)
    assert stopped.returncode != 0
    assert "interrupted by SIGINT" in stopped.stderr and "incomplete" in stopped.stderr
    assert not (project / SFT).exists() and not up_to_date(project, SFT)
    leftovers = [
        p.name for p in (project / SFT.parent).iterdir() if p.name.endswith(".tmp") or p.name.startswith(".shard-")
    ]
    assert leftovers == []
    again = make(project)
    assert again.returncode == 0, again.stderr
    report = json.loads((project / SFT.parent / "report.json").read_text())
    assert report["documents"]["read"] == 5
    verify_dir(project / SFT.parent)
