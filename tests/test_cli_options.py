"""Option coercion without pydantic: the same values and errors as typer's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from helpers import write_jsonl
from typer import _coercion
from typer._click import Context
from typer._click.exceptions import BadParameter

from packcli.cli import app
from packcli.cli_options import _PlainParam

ROOT = Path(__file__).resolve().parents[1]

TEXTS = ["x.jsonl", "", " a b ", "-", "日本", "12"]
NUMBERS = ["12", "-3", "007", "0", "+5", " 12", "12 ", "1_000", "1.0", "1.5", "0x10", "abc", "", "٣", "9" * 20]


def _params(command: str) -> dict:
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    ctx = Context(click_command)
    return {param.name: (param, ctx) for param in click_command.get_params(ctx)}


def _coerced(runtime, value, param, ctx):
    try:
        return runtime.coerce(value, param=param, ctx=ctx)
    except BadParameter as exc:
        return f"error: {exc.message}"


@pytest.mark.parametrize(
    ("command", "name", "values"),
    [
        ("pack", "tokenizer", [*TEXTS, None]),
        ("pack", "seq_len", [*NUMBERS, 12, None]),
        ("pack", "seed", NUMBERS),
        ("pack", "eos", [True, False, "true", "no", "1", None]),
        ("pack", "bos", [True, None]),
        ("pack", "help", [False, None]),
        ("pack", "inputs", [tuple(TEXTS), ("a",), (), None]),
        ("stats", "seq_len", [("512", "1024"), ("12", "1.5"), ("abc",), (), None]),
    ],
)
def test_plain_coercion_gives_what_typers_adapters_give(command, name, values):
    param, ctx = _params(command)[name]
    assert isinstance(param._runtime_param, _PlainParam)
    typers = _coercion.build_runtime_param(param.type_descriptor)
    for value in values:
        assert _coerced(param._runtime_param, value, param, ctx) == _coerced(typers, value, param, ctx), value


def test_a_pack_run_imports_no_pydantic(tmp_path):
    corpus = write_jsonl(tmp_path / "in.jsonl", [{"text": f"doc {i}"} for i in range(5)])
    script = (
        "import sys\n"
        "from packcli.cli import main\n"
        "sys.argv = ['packcli', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    assert not exit.code, exit.code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))\n"
    )
    args = [corpus, "--tokenizer", "packcli:demo", "--seq-len", "64", "--seed", "3", "--workers", "1"]
    result = subprocess.run(
        [sys.executable, "-c", script, "pack", *map(str, args), "-o", str(tmp_path / "out")],
        env={**os.environ, "PACKCLI_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.splitlines()[-1] == "[]"
    assert (tmp_path / "out" / "manifest.json").exists()
