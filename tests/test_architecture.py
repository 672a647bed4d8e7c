"""The package's layers, as docs/architecture.md draws them, held against every import statement.

Every form counts: module-level, function-level and `if TYPE_CHECKING:` imports alike, so a
layer cannot be crossed lazily. `packcli/__init__.py` (the lazy public API) stands above
every layer, and so do the old module names the page lists (deprecated aliases)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "packcli"


def layer_table() -> dict[str, set[str]]:
    """package -> the packages it may import, in the order of the table's rows."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Packages", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for line in section.splitlines():
        match = re.match(r"\| `(\w+)` \|.*\|([^|]*)\|\s*$", line)
        if match:
            table[match.group(1)] = {name.strip() for name in match.group(2).split(",") if name.strip()}
    return table


def old_names() -> list[str]:
    """The flat modules the page's opening paragraph keeps as old names (`packcli/hf.py`)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    opening = text.split("```", 1)[0]
    return sorted(set(re.findall(r"`packcli/(\w+)\.py`", opening)) - {"__init__"})


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if "assets" not in p.parts}


def imports_of(path: Path, known: dict[str, Path], own: str | None = None) -> set[str]:
    """The packcli modules `path` imports, wherever the statement stands."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "packcli":
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [name if name in known else str(node.module) for name in names]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            raise AssertionError(f"{path}: relative import; packcli imports absolutely")
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names if alias.name.split(".")[0] == "packcli"]
        for name in names:
            while name not in known and "." in name:
                name = name.rsplit(".", 1)[0]
            found.add(name)
    return found - {own or module_name(path)}


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(path, known) for name, path in known.items()}


def package_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and parts[1] in old_names()):
        return None  # packcli itself, or an old name, above every layer
    return parts[1]


def test_the_table_is_ordered_and_names_every_package():
    table = layer_table()
    on_disk = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert set(table) == on_disk
    above: set[str] = set()
    for package, allowed in table.items():
        assert allowed <= above, f"{package} may import {sorted(allowed - above)}, which stand below it"
        above.add(package)


@pytest.mark.parametrize("package", sorted(layer_table()))
def test_each_package_says_what_it_may_import_as_the_table_does(package):
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text(encoding="utf-8"))) or ""
    match = re.search(r"May import: (.*?)\.\s*$", doc, re.S)
    assert match, f"packcli/{package}/__init__.py: no 'May import:' line"
    said = set() if match.group(1) == "nothing of packcli" else {n.strip() for n in match.group(1).split(",")}
    assert said == layer_table()[package]


def crossings(graph: dict[str, set[str]], table: dict[str, set[str]]) -> list[str]:
    """Imports from a package the table does not allow its importer."""
    found = []
    for module, targets in sorted(graph.items()):
        source = package_of(module)
        if source is None or source == "__main__":
            continue
        for target in sorted(targets):
            destination = package_of(target)
            if destination is not None and destination != source and destination not in table[source]:
                found.append(f"{module} -> {target}")
    return found


def test_no_import_crosses_a_layer_upwards():
    assert crossings(import_graph(), layer_table()) == []


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_back():
    graph = import_graph()
    graph["packcli"] = set()  # the lazy public API stands above everything by design
    assert strongly_connected(graph) == []


def test_the_checker_sees_cycles_and_crossings(tmp_path):
    """The checks above fail on what they are meant to catch, lazy and type-only imports included."""
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []
    source = tmp_path / "errors.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from packcli.write.manifest import Manifest\n"
        "def f():\n    from packcli.plan import rows\n"
    )
    known = {"packcli.plan.rows": source, "packcli.write.manifest": source, "packcli.core.errors": source}
    found = imports_of(source, known, "packcli.core.errors")
    assert found == {"packcli.plan.rows", "packcli.write.manifest"}
    graph = {"packcli.core.errors": found, "packcli.plan.rows": {"packcli.core.errors"}}
    assert crossings(graph, layer_table()) == [
        "packcli.core.errors -> packcli.plan.rows",
        "packcli.core.errors -> packcli.write.manifest",
    ]


def test_every_package_and_module_is_reachable_by_its_folder_name():
    """A flat module beside the packages would hide a stage again."""
    flat = sorted(p.stem for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert flat == old_names() == ["hf", "torch_data"]
    counts = defaultdict(int)
    for name in modules():
        counts[package_of(name)] += 1
    assert all(counts[package] > 1 for package in layer_table())


def test_every_module_is_named_in_its_package_row():
    """The table says what each package owns: a new module that it does not name is a stale page."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.split("## Packages", 1)[1].split("\n## ", 1)[0].splitlines():
        match = re.match(r"\| `(\w+)` \|(.*)\|[^|]*\|\s*$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    unnamed = [
        f"{package}/{path.name}"
        for package in rows
        for path in sorted((PACKAGE / package).glob("*.py"))
        if path.name != "__init__.py" and f"`{path.stem}`" not in rows[package]
    ]
    assert unnamed == []


def test_nothing_in_the_package_imports_an_old_name():
    """The old names are for users' imports only: the package uses the modules themselves."""
    graph = import_graph()
    old = {f"packcli.{name}" for name in old_names()}
    assert [module for module, targets in sorted(graph.items()) if targets & old] == []


def private_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) of each underscored name `path` imports from another packcli module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("packcli"):
            found += [
                (str(node.module), alias.name)
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
    return found


def njit_functions(path: Path) -> set[str]:
    """The functions of a module decorated with Numba's njit (called or bare)."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Name) and target.id == "njit":
                    found.add(node.name)
    return found


KERNELS = "packcli.plan.kernels"


def private_crossings(known: dict[str, Path]) -> list[str]:
    """Each import of another module's private name that is not a Numba kernel (nor, inside
    plan/kernels, a kernel module's name)."""
    return [
        f"{module} imports {source}.{name}"
        for module, path in known.items()
        for source, name in private_imports(path)
        if not (module.startswith(KERNELS) and source.startswith(KERNELS))
        and (source not in known or name not in njit_functions(known[source]))
    ]


def test_only_kernels_are_imported_by_their_private_names():
    """A private name stays in its module, except a Numba kernel: kernels are private
    functions over plain arrays that the public wrappers (in other modules too) call. Inside
    plan/kernels the kernel modules also share the private constants their compiled code
    reads (a run table's column indices) and the kernels defined per JIT setting."""
    assert private_crossings(modules()) == []


def test_the_private_import_checker_sees_a_helper_but_not_a_kernel(tmp_path):
    kernels = tmp_path / "kernels.py"
    kernels.write_text("@njit(cache=True)\ndef _kernel(a):\n    return a\n\n\ndef _helper(a):\n    return a\n")
    user = tmp_path / "user.py"
    user.write_text("from packcli.kernels import _helper, _kernel\n")
    assert private_imports(user) == [("packcli.kernels", "_helper"), ("packcli.kernels", "_kernel")]
    assert njit_functions(kernels) == {"_kernel"}
    inside = tmp_path / "inside.py"
    inside.write_text("from packcli.plan.kernels.runs import _R_ROWS\n")
    known = {"packcli.kernels": kernels, "packcli.user": user, "packcli.plan.kernels.fit": inside}
    assert private_crossings(known) == ["packcli.user imports packcli.kernels._helper"]


MAX_MODULE_LINES = 600
MAX_BODY_LINES = 80


def body_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function's body from its first statement after the docstring to its end."""
    body = function.body
    has_docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    first = body[1] if has_docstring and len(body) > 1 else body[0]
    assert function.end_lineno is not None
    return function.end_lineno - first.lineno + 1


def oversized(paths: list[Path]) -> list[str]:
    """Each module over MAX_MODULE_LINES and each function whose body is over MAX_BODY_LINES."""
    found = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_MODULE_LINES:
            found.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and body_lines(node) > MAX_BODY_LINES:
                found.append(f"{path.name}:{node.lineno} {node.name}: {body_lines(node)} lines")
    return found


def test_the_size_checker_sees_long_modules_and_bodies(tmp_path):
    """At the limits nothing is found (a body of MAX_BODY_LINES after its docstring, a module
    of MAX_MODULE_LINES); one line over either is."""
    statements = "\n".join(f"    x{i} = {i}" for i in range(MAX_BODY_LINES))
    short = tmp_path / "short.py"
    text = f'def f():\n    """Doc."""\n{statements}\n'
    short.write_text(text + "\n" * (MAX_MODULE_LINES - len(text.splitlines())))
    assert len(short.read_text().splitlines()) == MAX_MODULE_LINES
    assert oversized([short]) == []
    long = tmp_path / "long.py"
    text = f"def g():\n{statements}\n    return 0\n"
    long.write_text(text + "\n" * (MAX_MODULE_LINES + 1 - len(text.splitlines())))
    assert oversized([long]) == [f"long.py: {MAX_MODULE_LINES + 1} lines", f"long.py:1 g: {MAX_BODY_LINES + 1} lines"]


def test_every_module_and_function_body_is_short():
    """A module holds one idea (at most 600 lines), a function one step (a body of at most 80)."""
    assert oversized(sorted(modules().values())) == []
