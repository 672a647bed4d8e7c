"""What pyproject.toml declares against what the code imports: every third-party import
under packcli/ is a dependency (base, or the extra its `needs_extra` block names), a
missing extra ends in one line naming it, and a plain install runs every command."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import write_jsonl
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import packcli
from packcli.core.errors import PackcliError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "packcli"
TESTS = ROOT / "tests"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
DISTRIBUTIONS = importlib.metadata.packages_distributions()

# Imported inside `try/except ImportError` with a fallback, and declared nowhere on purpose:
# flash-attn is built against the user's CUDA toolkit, which no extra can install.
USED_WHEN_PRESENT = {"flash_attn"}


@dataclass(frozen=True)
class Import:
    file: str
    line: int
    name: str  # top-level import name
    scope: str  # enclosing function, or "<module>"
    extra: str | None = None  # the extra named by the enclosing `with needs_extra(...)`
    what: str | None = None  # its message: who needs which library
    used_when_present: bool = False  # inside try/except ImportError that falls back


class ImportScanner(ast.NodeVisitor):
    """Every absolute import of a file, top-level and inside functions, with the
    `needs_extra` block or the ImportError fallback around it."""

    def __init__(self, file: str):
        self.file = file
        self.imports: list[Import] = []
        self.skipped: list[tuple[int, str]] = []  # pytest.importorskip("name")
        self.scope = ["<module>"]
        self.context: dict = {}

    def _add(self, node, module: str) -> None:
        self.imports.append(Import(self.file, node.lineno, module.split(".")[0], self.scope[-1], **self.context))

    def visit_Import(self, node):
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node):
        if node.level == 0 and node.module:
            self._add(node, node.module)

    def visit_FunctionDef(self, node):
        self.scope.append(node.name if self.scope[-1] == "<module>" else f"{self.scope[-1]}.{node.name}")
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_With(self, node):
        calls = [item.context_expr for item in node.items if isinstance(item.context_expr, ast.Call)]
        needs = [c for c in calls if _call_name(c) == "needs_extra"]
        if not needs:
            return self.generic_visit(node)
        extra, what = (ast.literal_eval(arg) for arg in needs[0].args)
        self._visit_body(node.body, extra=extra, what=what)

    def visit_Try(self, node):
        falls_back = any(
            _catches_import_error(h) and not any(isinstance(s, ast.Raise) for s in h.body) for h in node.handlers
        )
        if not falls_back:
            return self.generic_visit(node)
        self._visit_body(node.body, used_when_present=True)
        for part in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(part)

    def visit_Call(self, node):
        if _call_name(node) == "importorskip" and node.args and isinstance(node.args[0], ast.Constant):
            self.skipped.append((node.lineno, node.args[0].value.split(".")[0]))
        self.generic_visit(node)

    def _visit_body(self, body, **context):
        saved, self.context = self.context, {**self.context, **context}
        for statement in body:
            self.visit(statement)
        self.context = saved


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in ("ImportError", "ModuleNotFoundError") for t in types)


def scan(path: Path) -> ImportScanner:
    scanner = ImportScanner(path.relative_to(ROOT).as_posix())
    scanner.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return scanner


def third_party(name: str, local: set[str] = frozenset()) -> bool:
    return name not in sys.stdlib_module_names and name != "packcli" and name not in local and name != "__future__"


def declared(extra: str | None = None) -> set[str]:
    """Canonical distribution names of the base dependencies, plus those of `extra`
    (an extra that lists `packcli[a,b]` includes the extras a and b). Markers are not
    evaluated: `tomli; python_version < '3.11'` declares tomli."""
    names = set()
    todo = [*PYPROJECT["project"]["dependencies"], *PYPROJECT["project"]["optional-dependencies"].get(extra, [])]
    while todo:
        requirement = Requirement(todo.pop())
        name = canonicalize_name(requirement.name)
        if name == "packcli":
            for part in requirement.extras:
                todo.extend(PYPROJECT["project"]["optional-dependencies"][part])
        else:
            names.add(name)
    return names


def undeclared(imp: Import, allowed: set[str]) -> str | None:
    """Why `imp` breaks the declarations, or None."""
    where = f"{imp.file}:{imp.line} imports {imp.name}"
    if canonicalize_name(imp.name) in allowed:
        return None  # declared under its import name (maybe for another Python, so not installed)
    if imp.name not in DISTRIBUTIONS:
        return f"{where}, which is not installed here, so its distribution cannot be checked"
    dists = {canonicalize_name(d) for d in DISTRIBUTIONS[imp.name]}
    if dists & allowed:
        return None
    place = f"the {imp.extra!r} extra" if imp.extra else "[project] dependencies"
    return f"{where} (distribution {', '.join(sorted(dists))}), not declared in {place}"


PACKAGE_IMPORTS = [imp for path in sorted(PACKAGE.rglob("*.py")) for imp in scan(path).imports if third_party(imp.name)]


def test_the_scan_sees_function_level_and_optional_imports():
    found = {(imp.file, imp.name, imp.scope, imp.extra, imp.used_when_present) for imp in PACKAGE_IMPORTS}
    assert ("packcli/load/torch_batch.py", "torch", "<module>", "torch", False) in found
    assert ("packcli/load/hf.py", "datasets", "rows_to_dataset", "hf", False) in found
    assert ("packcli/cli/render.py", "matplotlib", "matplotlib_figure", "plot", False) in found
    assert ("packcli/cli/console.py", "rich", "progress", None, False) in found
    assert ("packcli/load/torch_attention.py", "flash_attn", "_flash_varlen", None, True) in found


def test_every_import_under_packcli_is_declared():
    extras = PYPROJECT["project"]["optional-dependencies"]
    problems = []
    for imp in PACKAGE_IMPORTS:
        if imp.used_when_present:
            if imp.name not in USED_WHEN_PRESENT:
                problems.append(
                    f"{imp.file}:{imp.line} imports {imp.name} when present: declare it in an extra "
                    "and import it under needs_extra, or say in USED_WHEN_PRESENT why it is declared nowhere"
                )
            continue
        if imp.extra is not None and imp.extra not in extras:
            problems.append(f"{imp.file}:{imp.line}: needs_extra names {imp.extra!r}, which pyproject.toml lacks")
            continue
        problems.append(undeclared(imp, declared(imp.extra)))
    problems = [p for p in problems if p]
    assert not problems, "\n".join(problems)


def readers() -> set[str]:
    """Canonical names of the readers `make install-test` installs without their
    dependencies (tests/readers.txt)."""
    lines = (TESTS / "readers.txt").read_text(encoding="utf-8").splitlines()
    return {canonicalize_name(Requirement(line).name) for line in lines if line.strip() and not line.startswith("#")}


def test_every_import_of_the_suite_is_in_the_test_extra():
    """`make test` installs the test extra and the readers of tests/readers.txt and
    nothing else, so no test can skip for a library it forgot."""
    # the checkout's own: the tests' helpers and the benchmark harness (benchmarks/)
    local = {"tests", "benchmarks"} | {path.stem for path in TESTS.glob("*.py")}
    allowed = declared("test") | readers()
    problems = []
    for path in sorted(TESTS.glob("*.py")):
        scanner = scan(path)
        names = [(imp.line, imp.name) for imp in scanner.imports] + scanner.skipped
        for line, name in names:
            if third_party(name, local):
                problems.append(undeclared(Import(scanner.file, line, name, "<module>", extra="test"), allowed))
    problems = [p for p in problems if p]
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- missing extras


def _rows():
    return packcli.pack_sequences([[5, 6, 7], [8, 9]], 8, pad_id=0).rows


@pytest.fixture(scope="module")
def parquet_out(tmp_path_factory) -> Path:
    """A packed Parquet output, written before any library is made unimportable."""
    from typer.testing import CliRunner

    from packcli.cli.app import app

    tmp = tmp_path_factory.mktemp("parquet")
    path = write_jsonl(tmp / "in.jsonl", [{"input_ids": [5, 6, 7]}, {"input_ids": [8]}])
    result = CliRunner().invoke(
        app,
        [
            "pack",
            str(path),
            "-o",
            str(tmp / "out"),
            "--ids-field",
            "input_ids",
            "--eos-token",
            "1",
            "--pad-id",
            "0",
            "--seq-len",
            "8",
        ],
    )
    assert result.exit_code == 0, result.output
    return tmp / "out"


def _importing(module: str):
    """A trigger that imports `module` afresh (one imported already would not run again)."""

    def trigger(parquet_out, monkeypatch):
        monkeypatch.delitem(sys.modules, module, raising=False)
        importlib.import_module(module)

    return trigger


def _hf_load_parquet(parquet_out, monkeypatch):
    from packcli.load import hf

    hf.load(parquet_out)


def _hf_rows_to_dataset(parquet_out, monkeypatch):
    from packcli.load import hf

    hf.rows_to_dataset(_rows())


def _packed_seq_params(parquet_out, monkeypatch):
    from packcli.load.torch import PackedBatch

    PackedBatch.from_rows(_rows()).packed_seq_params()


def _plot(parquet_out, monkeypatch):
    from packcli.cli import render

    render.matplotlib_figure()


def _export_mds_brotli(parquet_out, monkeypatch):
    from packcli.export.mds import export_mds

    export_mds(parquet_out, parquet_out.parent / "mds-br", compression="br")


def _export_mds_snappy(parquet_out, monkeypatch):
    from packcli.export.mds import export_mds

    export_mds(parquet_out, parquet_out.parent / "mds-snappy", compression="snappy")


def _remote_url(parquet_out, monkeypatch):
    from packcli.core import storage

    storage.filesystem("s3://bucket/key")


def _ray_engine(parquet_out, monkeypatch):
    from packcli.engine import ray_tasks as engine_ray

    engine_ray.connect(None, 1)


def _gigatoken(parquet_out, monkeypatch):
    from packcli.tokenize import bpe_encoders

    monkeypatch.setitem(sys.modules, "gigatoken.gigatoken_rs", None)  # imported already by an earlier test
    bpe_encoders.gigatoken_bpe_class()  # under `auto`, a missing extra means tiktoken (tests/test_tokenize_fastbpe.py)


def site_module(file: str) -> str:
    """packcli/load/torch.py -> load/torch"""
    return Path(file).relative_to("packcli").with_suffix("").as_posix()


# Each `needs_extra` block under packcli/, by (module, function), and a call that reaches it.
TRIGGERS = {
    ("load/torch_attention", "<module>"): _importing("packcli.load.torch_attention"),
    ("load/torch_batch", "<module>"): _importing("packcli.load.torch_batch"),
    ("load/torch_collate", "<module>"): _importing("packcli.load.torch_collate"),
    ("load/torch_dataset", "<module>"): _importing("packcli.load.torch_dataset"),
    ("load/torch_pairs", "<module>"): _importing("packcli.load.torch_pairs"),
    ("load/hf", "load"): _hf_load_parquet,
    ("load/hf", "rows_to_dataset"): _hf_rows_to_dataset,
    ("cli/render", "matplotlib_figure"): _plot,
    ("export/mds", "_brotli"): _export_mds_brotli,
    ("export/mds", "_snappy"): _export_mds_snappy,
    ("core/storage", "filesystem"): _remote_url,
    ("engine/ray_tasks", "connect"): _ray_engine,
    ("load/torch_batch", "packed_seq_params"): _packed_seq_params,
    ("tokenize/bpe_encoders", "gigatoken_bpe_class"): _gigatoken,
}
SITES = sorted({(site_module(imp.file), imp.scope) for imp in PACKAGE_IMPORTS if imp.extra})


def test_every_optional_import_has_a_trigger():
    assert sorted(TRIGGERS) == SITES


@pytest.mark.parametrize("site", SITES, ids=[f"{m}.{f}" for m, f in SITES])
def test_a_missing_extra_names_itself(site, parquet_out, monkeypatch):
    imports = [imp for imp in PACKAGE_IMPORTS if (site_module(imp.file), imp.scope) == site and imp.extra]
    (extra,), (what,) = {imp.extra for imp in imports}, {imp.what for imp in imports}
    for name in {imp.name for imp in imports}:
        # `import name` (and of any submodule, imported already by an earlier test or not) now raises ImportError
        for loaded in [name, *(key for key in sys.modules if key.startswith(name + "."))]:
            monkeypatch.setitem(sys.modules, loaded, None)
    with pytest.raises(PackcliError) as raised:
        TRIGGERS[site](parquet_out, monkeypatch)
    assert str(raised.value) == f"{what}: pip install 'packcli[{extra}]'"
    assert extra in PYPROJECT["project"]["optional-dependencies"]


# ----------------------------------------------------------------------------- plain install


def base_closure() -> set[str]:
    """Canonical names of the installed distributions `pip install packcli` brings:
    the base dependencies and, recursively, theirs (markers evaluated, extras followed)."""
    seen: set[tuple[str, str]] = set()
    todo = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        for extra in ("", *requirement.extras):
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            try:
                requires = importlib.metadata.distribution(name).requires or []
            except importlib.metadata.PackageNotFoundError:
                continue
            for text in requires:
                sub = Requirement(text)
                if sub.marker is None or sub.marker.evaluate({"extra": extra}):
                    todo.append(sub)
    return {name for name, _ in seen} | {"packcli"}


PLAIN_INSTALL = r"""
import json, sys
spec = json.load(sys.stdin)
for name in spec["blocked"]:
    sys.modules.setdefault(name, None)  # not in a plain install: importing it fails

from typer.testing import CliRunner
from packcli.cli.app import app
from packcli.core.errors import PackcliError

results = {}
for key, args in spec["commands"].items():
    result = CliRunner().invoke(app, args)
    results[key] = [result.exit_code, result.stdout[-2000:], result.stderr[-2000:]]
for key, module in (("torch_data", "packcli.load.torch"), ("hf", "packcli.load.hf")):
    try:
        __import__(module)
        if key == "hf":
            import packcli, packcli.load.hf
            packcli.load.hf.pack_dataset([[5, 6, 7]], seq_len=8, eos_id=1)
        results[key] = [0, "", ""]
    except PackcliError as exc:
        results[key] = [1, "", str(exc)]
print(json.dumps(results))
"""


def test_a_plain_install_runs_every_command(tmp_path):
    """With every library outside the base dependencies' closure unimportable (as after
    `pip install packcli`), pack (text and chat), stats, verify and export work, and the
    optional parts name their extra. Every export target is written without its reader's
    library (mosaicml-streaming, megatron-energon, datatrove are blocked). A library a feature needs but no base dependency
    requires (jinja2 for chat templates) fails here."""
    closure = base_closure()
    blocked = sorted(
        name
        for name, dists in DISTRIBUTIONS.items()
        if not {canonicalize_name(d) for d in dists} & closure and name.isidentifier()
    )
    assert "torch" in blocked and "datasets" in blocked and "matplotlib" in blocked
    assert {"streaming", "megatron", "datatrove"} <= set(blocked)
    demo = (Path(packcli.__file__).parent / "assets" / "demo.jsonl").read_text(encoding="utf-8").splitlines()[:20]
    text = tmp_path / "text.jsonl"
    text.write_text("\n".join(demo) + "\n", encoding="utf-8")
    chat = write_jsonl(
        tmp_path / "chat.jsonl",
        [
            {
                "messages": [
                    {"role": "user", "content": f"question {i}"},
                    {"role": "assistant", "content": f"answer {i}"},
                ]
            }
            for i in range(12)
        ],
    )
    out, chat_out = str(tmp_path / "out"), str(tmp_path / "chat-out")
    demo_tok = ["--tokenizer", "packcli:demo"]
    commands = {
        "pack": ["pack", str(text), "-o", out, *demo_tok, "--seq-len", "1024"],
        "pack chat": ["pack", str(chat), "-o", chat_out, *demo_tok, "--seq-len", "256", "--messages-field", "messages"],
        "verify": ["verify", out],
        "verify chat": ["verify", chat_out],
        "stats": ["stats", out],
        "stats raw": ["stats", str(text), *demo_tok, "--seq-len", "512"],
        "export": ["export", "megatron", out, str(tmp_path / "mega")],
        "export mds": ["export", "mds", out, str(tmp_path / "mds"), "--compression", "zstd"],
        "export energon": ["export", "energon", out, str(tmp_path / "energon")],
        "export nanotron": ["export", "nanotron", out, str(tmp_path / "nanotron")],
        "plot": ["stats", out, "--plot", str(tmp_path / "p.png")],
        "show": ["show", out, "--html", str(tmp_path / "show.html")],
        "show chat": ["show", chat_out, "--tokens", "--json"],
        "show raw": ["show", str(chat), *demo_tok, "--messages-field", "messages", "--seq-len", "256"],
    }
    spec = json.dumps({"blocked": blocked, "commands": commands})
    run = subprocess.run(
        [sys.executable, "-c", PLAIN_INSTALL], input=spec, capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.splitlines()[-1])
    exports = ("export", "export mds", "export energon", "export nanotron")  # no reader library needed
    shows = ("show", "show chat", "show raw")
    for key in ("pack", "pack chat", "verify", "verify chat", "stats", "stats raw", *exports, *shows):
        assert results[key][0] == 0, (key, results[key])
    assert (
        results["plot"][:1] == [1]
        and results["plot"][2] == "error: --plot needs matplotlib: pip install 'packcli[plot]'\n"
    )
    assert results["torch_data"] == [1, "", "packcli.load.torch needs PyTorch: pip install 'packcli[torch]'"]
    assert results["hf"] == [1, "", "packcli.load.hf needs datasets: pip install 'packcli[hf]'"]
