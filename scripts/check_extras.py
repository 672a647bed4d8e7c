"""Check that every extra installs, alone and together, quickly and without moving the core back.

    python scripts/check_extras.py                    # every extra alone, every pair, and `all`
    python scripts/check_extras.py --extras mds,energon --limit 60
    make check-extras                                 # the same, in the project's venv

For `pip install packcli` and then for each extra of pyproject.toml alone, each pair of
them and `all`, pip resolves the local project in a fresh virtual environment made for
this run (`pip install --dry-run --ignore-installed --report R`, the package index
reachable; nothing is installed), and this prints how long the resolve took and the
versions of numpy, transformers, tokenizers and huggingface-hub it would install. Exit
status 1 when a combination would install one of them older than plain
`pip install packcli` does, or its resolve takes longer than `--limit` seconds (60) or
fails. The development extras (`test`, `bench`) are left out unless named with
`--extras`.

The run has a pip cache of its own, empty at the start and kept across its resolves (as
a user's cache is after the first install): the first resolve that needs a package pays
for fetching its metadata. Resolves run one after the other, so their times are not
shared; a loaded machine makes them slower, not faster.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    try:
        import tomli as tomllib
    except ImportError:  # `make install` has no tomli on 3.10: pip's own copy
        from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
WATCHED = ("numpy", "transformers", "tokenizers", "huggingface-hub")
DEV_EXTRAS = ("test", "bench")


def user_extras(pyproject: dict) -> list[str]:
    """The extras a user installs: all of pyproject.toml's but `all` and the development ones."""
    extras = pyproject["project"].get("optional-dependencies", {})
    return [name for name in extras if name not in (*DEV_EXTRAS, "all")]


def combinations(extras: list[str], with_all: bool) -> list[tuple[str, ...]]:
    """Plain, each extra alone, each pair, then `all`."""
    combos: list[tuple[str, ...]] = [()]
    combos += [(name,) for name in extras]
    combos += list(itertools.combinations(extras, 2))
    if with_all:
        combos.append(("all",))
    return combos


def version_key(text: str) -> tuple:
    """A version comparable with another: packaging's where it is installed, else its numbers."""
    try:
        from packaging.version import Version

        return (Version(text),)
    except ImportError:  # pragma: no cover
        import re

        return tuple(int(n) for n in re.findall(r"\d+", text.split("+")[0]))


class Resolver:
    """A fresh venv with a current pip, in which pip resolves the project with given extras."""

    def __init__(self, work: Path, project: Path, limit: float):
        self.work, self.project, self.limit = work, project, limit
        self.venv = work / "venv"
        self.cache = work / "pip-cache"
        subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
        self.python = self.venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        # the venv's own pip may be old; the resolver a user gets today is the current one
        self._pip(["install", "--quiet", "--upgrade", "pip"], timeout=600, check=True)
        self.version = self._pip(["--version"], timeout=60, check=True).stdout.split(" from ")[0]

    def _pip(self, args: list[str], timeout: float, check: bool = False) -> subprocess.CompletedProcess:
        env = {**os.environ, "PIP_CACHE_DIR": str(self.cache), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        env.pop("PIP_REQUIRE_VIRTUALENV", None)
        return subprocess.run(
            [str(self.python), "-m", "pip", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
            env=env,
        )

    def resolve(self, extras: tuple[str, ...]) -> dict:
        """{"extras", "seconds", "versions" (name -> version), "error"}: one dry-run resolve,
        stopped at twice the limit (then only "over" is known)."""
        target = str(self.project) + (f"[{','.join(extras)}]" if extras else "")
        report = self.work / "report.json"
        report.unlink(missing_ok=True)
        args = ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), target]
        started = time.perf_counter()
        result: dict = {"extras": list(extras), "versions": {}, "error": None}
        try:
            run = self._pip(args, timeout=2 * self.limit)
        except subprocess.TimeoutExpired:
            result["seconds"] = time.perf_counter() - started
            result["error"] = f"no resolve after {2 * self.limit:.0f} s (stopped)"
            return result
        result["seconds"] = time.perf_counter() - started
        if run.returncode != 0:
            result["error"] = (run.stderr.strip().splitlines() or ["pip failed"])[-1]
            return result
        installs = json.loads(report.read_text(encoding="utf-8"))["install"]
        versions = {
            item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"] for item in installs
        }
        result["versions"] = {name: versions.get(name) for name in WATCHED}
        return result


def verdict(result: dict, base: dict, limit: float) -> list[str]:
    """What is wrong with one combination's resolve: empty when nothing."""
    problems = []
    if result["error"]:
        problems.append(result["error"])
    elif result["seconds"] > limit:
        problems.append(f"resolved in {result['seconds']:.0f} s, over {limit:.0f} s")
    for name in WATCHED:
        theirs, ours = result["versions"].get(name), base["versions"].get(name)
        if theirs and ours and version_key(theirs) < version_key(ours):
            problems.append(f"{name} {theirs} < {ours}")
    return problems


def label(extras: tuple[str, ...] | list[str]) -> str:
    return f"packcli[{','.join(extras)}]" if extras else "packcli"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extras", help="comma-separated extras to combine (default: every user extra)")
    parser.add_argument("--limit", type=float, default=60.0, help="most seconds a resolve may take (default 60)")
    parser.add_argument("--no-pairs", action="store_true", help="each extra alone and `all` only")
    parser.add_argument("--json", type=Path, help="also write every result to this file")
    args = parser.parse_args(argv)

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared = pyproject["project"].get("optional-dependencies", {})
    extras = args.extras.split(",") if args.extras else user_extras(pyproject)
    unknown = [name for name in extras if name not in declared]
    if unknown:
        parser.error(f"no such extra in pyproject.toml: {', '.join(unknown)}")
    combos = combinations(extras, with_all="all" in declared and not args.extras)
    if args.no_pairs:
        combos = [c for c in combos if len(c) < 2]

    header = f"{'install':<40} {'seconds':>7}  " + "  ".join(f"{name:<15}" for name in WATCHED) + "  verdict"
    results, failed = [], 0
    with tempfile.TemporaryDirectory(prefix="packcli-check-extras-") as work:
        resolver = Resolver(Path(work), ROOT, args.limit)
        print(f"# {resolver.version}, Python {sys.version.split()[0]}, {os.cpu_count()} cores", flush=True)
        print(header, flush=True)
        base: dict | None = None
        for combo in combos:
            result = resolver.resolve(combo)
            if base is None:
                base = result
                if result["error"]:
                    print(f"{label(combo)}: {result['error']}", file=sys.stderr)
                    return 1
            problems = verdict(result, base, args.limit)
            result["problems"] = problems
            failed += bool(problems)
            results.append(result)
            versions = "  ".join(f"{result['versions'].get(name) or '-':<15}" for name in WATCHED)
            print(
                f"{label(combo):<40} {result['seconds']:>7.1f}  {versions}  {'; '.join(problems) or 'ok'}", flush=True
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    slowest = max(results, key=lambda r: r["seconds"])
    print(
        f"{len(results)} resolves, {failed} failed; slowest {label(slowest['extras'])} "
        f"in {slowest['seconds']:.1f} s (limit {args.limit:.0f} s)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
