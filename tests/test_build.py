"""The package as pip builds it: a wheel that carries the bundled tokenizer and demo
corpus and every stage's package, and a build that warns about nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import packcli

ROOT = Path(__file__).resolve().parent.parent

BUILD = """
import json, sys
from hatchling import build
wheel, editable = sys.argv[1:3]
print(json.dumps({"wheel": build.build_wheel(wheel), "editable": build.build_editable(editable)}))
"""


def test_the_wheel_ships_the_assets_and_every_package_without_a_warning(tmp_path):
    (tmp_path / "wheel").mkdir()
    (tmp_path / "editable").mkdir()
    command = [sys.executable, "-W", "error", "-c", BUILD, str(tmp_path / "wheel"), str(tmp_path / "editable")]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""  # pip shows the backend's warnings to every user who installs
    built = json.loads(run.stdout.splitlines()[-1])
    with zipfile.ZipFile(tmp_path / "wheel" / built["wheel"]) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    for asset in ("demo.jsonl", "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"):
        assert f"packcli/assets/{asset}" in names
    packages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "packcli").rglob("__init__.py"))
    assert packages and set(packages) <= names
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "packcli").rglob("*.py")}
    assert {n for n in names if n.endswith(".py")} == modules
    assert not any(n.startswith(("tests/", "scripts/", "docs/", "benchmarks/")) or "__pycache__" in n for n in names)
    assert f"Version: {packcli.__version__}" in metadata and "License-Expression: Apache-2.0" in metadata
    with zipfile.ZipFile(tmp_path / "editable" / built["editable"]) as editable:
        assert any(n.endswith(".pth") for n in editable.namelist())
