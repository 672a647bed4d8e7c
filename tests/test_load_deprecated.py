"""The old names of packcli.load's modules (packcli/hf.py, packcli/torch_data.py): they
import, with a DeprecationWarning that names the new path, and give the new module."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import packcli
from packcli.core.version import __version__

OLD_NAMES = [("packcli.hf", "packcli.load.hf"), ("packcli.torch_data", "packcli.load.torch")]
# a name users imported from each: (old module, new module, name)
IMPORTED = [("packcli.hf", "packcli.load.hf", "load"), ("packcli.torch_data", "packcli.load.torch", "PackedDataset")]


def _forget(monkeypatch, old: str) -> None:
    """`old` as never imported in this process (an earlier import keeps it in sys.modules)."""
    monkeypatch.delitem(sys.modules, old, raising=False)
    monkeypatch.delattr(packcli, old.split(".")[1], raising=False)


@pytest.mark.parametrize(("old", "new"), OLD_NAMES)
def test_an_old_name_warns_and_is_the_new_module(monkeypatch, old, new):
    moved = importlib.import_module(new)
    _forget(monkeypatch, old)
    with pytest.warns(DeprecationWarning) as caught:
        module = importlib.import_module(old)
    (warning,) = [w for w in caught if w.category is DeprecationWarning]
    assert f"{old} is deprecated: import {new} instead" in str(warning.message)
    assert module is moved and sys.modules[old] is moved and getattr(packcli, old.split(".")[1]) is moved


@pytest.mark.parametrize(("old", "new", "name"), IMPORTED)
def test_a_name_imported_from_an_old_module_is_the_new_module_s(monkeypatch, old, new, name):
    moved = importlib.import_module(new)
    _forget(monkeypatch, old)
    namespace: dict = {}
    with pytest.warns(DeprecationWarning, match=f"import {new} instead"):
        exec(f"from {old} import {name}", namespace)
    assert namespace[name] is getattr(moved, name)


@pytest.mark.parametrize(("old", "new"), OLD_NAMES)
def test_the_warning_points_at_the_import_and_names_the_release_that_removes_it(monkeypatch, old, new):
    """Reported where the user's code imports the old name (shown by Python's default
    filters for a script), and the removal is the next minor release after this one."""
    _forget(monkeypatch, old)
    with pytest.warns(DeprecationWarning) as caught:
        exec(f"import {old}", {"__name__": "user_script"})
    (warning,) = [w for w in caught if w.category is DeprecationWarning]
    assert warning.filename == "<string>" and warning.lineno == 1
    major, minor = (int(part) for part in __version__.split(".")[:2])
    assert f"removed in packcli {major}.{minor + 1}.0" in str(warning.message)


def test_a_script_sees_the_warning_under_python_s_default_filters():
    script = "from packcli.torch_data import PackedDataset\nimport packcli.hf\n"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    lines = [line for line in run.stderr.splitlines() if "DeprecationWarning" in line]
    assert [line.split(": DeprecationWarning")[0] for line in lines] == ["<string>:1", "<string>:2"]
