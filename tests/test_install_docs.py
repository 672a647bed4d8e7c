"""docs/install.md's table of extras against pyproject.toml, and README's install lines."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS = PYPROJECT["project"]["optional-dependencies"]
HEADER = ["extra", "adds", "what for"]


def requirement_key(text: str) -> tuple[str, tuple[str, ...], str]:
    """A requirement as name, extras and version specifier; its environment marker aside
    (the table gives `tomli>=2` for `tomli>=2; python_version < '3.11'`)."""
    requirement = Requirement(text)
    return canonicalize_name(requirement.name), tuple(sorted(requirement.extras)), str(requirement.specifier)


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def extras_table(markdown: str) -> dict[str, tuple[list[str], str]]:
    """The table whose header is `| extra | adds | what for |`: extra -> (the backticked
    requirements it adds, what it is for)."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and cells(line) == HEADER)
    table: dict[str, tuple[list[str], str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        extra, adds, what_for = cells(line)
        name = extra.strip("`")
        assert name not in table, f"{name} twice in the table"
        table[name] = (re.findall(r"`([^`]+)`", adds), what_for)
    return table


def test_extras_table_parses_rows():
    text = "intro\n\n| extra | adds | what for |\n|---|---|---|\n| `a` | `x>=1`, `y[z]<2` | this |\n\nafter |\n"
    assert extras_table(text) == {"a": (["x>=1", "y[z]<2"], "this")}


def test_the_table_of_extras_matches_pyproject():
    """Every extra of pyproject.toml is a row of docs/install.md's table, no other, each
    adding exactly its requirements and saying what it is for."""
    table = extras_table((ROOT / "docs" / "install.md").read_text(encoding="utf-8"))
    assert sorted(table) == sorted(EXTRAS)
    for name, requirements in EXTRAS.items():
        documented, what_for = table[name]
        assert sorted(map(requirement_key, documented)) == sorted(map(requirement_key, requirements)), name
        assert what_for, f"{name}: what it is for is empty"


def test_all_is_every_user_extra():
    (requirement,) = EXTRAS["all"]
    parsed = Requirement(requirement)
    assert canonicalize_name(parsed.name) == "packcli"
    assert sorted(parsed.extras) == sorted(set(EXTRAS) - {"all", "test", "bench"})


def test_readme_installs_only_declared_extras_and_links_the_table():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"pip install '?packcli\[([^\]]+)\]", section)
    assert named, "README's Install section names no extra"
    for group in named:
        for name in group.split(","):
            assert name in EXTRAS, f"README installs packcli[{name}], which pyproject.toml lacks"
    assert "docs/install.md" in section


def test_the_readers_install_without_their_dependencies():
    """The readers no extra may carry (tests/readers.txt) go into the test venv with
    --no-deps, so they cannot move numpy, transformers or huggingface-hub."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^READERS := --no-deps -r tests/readers\.txt$", makefile, re.M)
    recipe = makefile.split("$(TEST_STAMP): $(STAMP)", 1)[1].split("\n\n", 1)[0]
    lines = recipe.splitlines()
    test_extra = next(i for i, line in enumerate(lines) if "-e '.[test]'" in line)
    readers = next(i for i, line in enumerate(lines) if "$(READERS)" in line)
    assert test_extra < readers  # after the test extra, which holds what they import
    for name in EXTRAS:
        for requirement in EXTRAS[name]:
            assert requirement_key(requirement)[0] != "mosaicml-streaming", f"the {name} extra carries streaming"
