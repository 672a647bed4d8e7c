"""The packcli programs a benchmark measures: the working tree's and one commit's.

A program is an installed packcli: the interpreter of its environment and the `packcli`
command beside it. The working tree's is the environment the harness runs in (`.venv`, an
editable install). A commit's is built from a clean archive of that commit (`git archive
REF | tar -x`), installed into a venv of its own with `pip install DIR`, as a user installs
it, and kept under `bench-out/envs/<commit>/` for the next comparison.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]

# The optional tokenizer backend: installed into a commit's environment when the commit
# declares it, so that both sides of a comparison encode with the same backends.
SAME_EXTRAS = ("fast",)


class BenchError(Exception):
    """A benchmark that cannot go on: a program that will not install, an input missing."""


@dataclass(frozen=True)
class Program:
    """One installed packcli: `label` names it in tables ("new", "old"), `commit` in records."""

    label: str
    prefix: Path  # the environment's root: bin/python, bin/packcli
    commit: str
    extras: tuple[str, ...] = ()

    @property
    def python(self) -> str:
        return str(self.prefix / "bin" / "python")

    @property
    def packcli(self) -> str:
        return str(self.prefix / "bin" / "packcli")

    def environ(self, cache: Path) -> dict[str, str]:
        """The environment of this program's children: nothing of the harness's Python path,
        and a start-up cache of its own (two versions sharing one would rebuild each
        other's entries, and every run would start cold). Bytecode is cached, as an
        installed package's is."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PACKCLI_CACHE_DIR")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["XDG_CACHE_HOME"] = str(cache)
        env["PYTHONUNBUFFERED"] = "1"
        env["TOKENIZERS_PARALLELISM"] = "true"
        env["HF_HUB_OFFLINE"] = "1"
        return env


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def working_tree(label: str = "new") -> Program:
    """The harness's own environment, whose packcli is the working tree's (editable install);
    its commit is HEAD, marked `+dirty` when the tree differs from it."""
    prefix = Path(sys.prefix)
    if not (prefix / "bin" / "packcli").exists():
        raise BenchError(f"no packcli command in {prefix}: run the harness with the project's .venv")
    commit = git("rev-parse", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "+dirty"
    return Program(label, prefix, commit, ("bench",))


def commit_program(ref: str, cache_dir: Path, label: str = "old", log=print) -> Program:
    """The packcli of commit `ref`, installed from a clean archive into its own venv under
    `cache_dir/<commit>/` (built once, then reused)."""
    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    home = cache_dir / commit
    stamp = home / ".installed"
    prefix = home / "venv"
    if stamp.is_file():
        extras = tuple(stamp.read_text().split())
        return Program(label, prefix, commit, extras)
    shutil.rmtree(home, ignore_errors=True)
    source = home / "src"
    source.mkdir(parents=True)
    log(f"installing {commit[:12]} into {prefix} (a clean archive, then pip install)", flush=True)
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", commit], stdout=subprocess.PIPE)
    assert archive.stdout is not None
    with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
        tar.extractall(source, filter="data")
    if archive.wait() != 0:
        raise BenchError(f"git archive {commit} failed")
    extras = declared_extras(source / "pyproject.toml", SAME_EXTRAS)
    target = f"{source}[{','.join(extras)}]" if extras else str(source)
    base = getattr(sys, "_base_executable", sys.executable)
    steps = [
        [base, "-m", "venv", str(prefix)],
        [str(prefix / "bin" / "python"), "-m", "pip", "install", "--quiet", target],
    ]
    with open(home / "install.log", "w") as out:
        for step in steps:
            if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                raise BenchError(f"{' '.join(step)} failed: see {home / 'install.log'}")
    stamp.write_text(" ".join(extras))
    return Program(label, prefix, commit, extras)


def declared_extras(pyproject: Path, wanted: tuple[str, ...]) -> tuple[str, ...]:
    """Those of `wanted` that the project's pyproject.toml declares as extras."""
    if not pyproject.is_file():
        return ()
    project = tomllib.loads(pyproject.read_text()).get("project", {})
    declared = project.get("optional-dependencies", {})
    return tuple(name for name in wanted if name in declared)
