"""The command line: help, exit codes, and one clear line for every error path."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import write_jsonl


@pytest.fixture
def doc(tmp_path):
    return write_jsonl(tmp_path / "docs.jsonl", [{"text": "w1 w2"}, {"question": "q", "answer": "a"}])


def one_error_line(result, code=1) -> str:
    assert result.exit_code == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_help_lists_commands_and_every_algorithm(cli):
    from packcli.plan.kernels.pack import ALGORITHMS

    result = cli("--help")
    assert result.exit_code == 0
    for command in ("pack", "stats", "verify"):
        assert command in result.stdout
    pack_help = cli("pack", "--help").stdout
    for algorithm in ALGORITHMS:
        assert algorithm in pack_help


def commands():
    import typer

    from packcli.cli.app import app

    return typer.main.get_command(app).commands


# pack's options that are not about reading and tokenizing the input.
PACK_ONLY = {
    "inputs",
    "output",
    "seq_len",
    "mode",
    "algorithm",
    "remainder",
    "shuffle",
    "seed",
    "pad_to_multiple_of",
    "format",
    "rows_per_shard",
    "overwrite",
    "resume",
    "tmp_dir",
    "engine",
    "ray_address",
    "json_output",
    "debug",
    "mix",
    "source",
    "weight",
    "epochs",
    "holdout",
    "holdout_key",
}


def test_stats_takes_every_input_option_of_pack_defined_alike():
    from dataclasses import fields

    from packcli.cli.options import INPUT_OPTIONS
    from packcli.engine.local import PackOptions

    pack = {p.name: p for p in commands()["pack"].params}
    stats = {p.name: p for p in commands()["stats"].params}
    input_options = set(pack) - PACK_ONLY
    assert input_options == set(INPUT_OPTIONS)  # what both commands hand to PackOptions
    assert set(INPUT_OPTIONS) <= {f.name for f in fields(PackOptions)}
    missing = input_options - set(stats)
    assert not missing, f"stats lacks pack's input options {sorted(missing)}"
    for name in input_options:
        a, b = pack[name], stats[name]
        assert (a.opts, a.secondary_opts, a.default, a.help, a.metavar, a.rich_help_panel) == (
            b.opts,
            b.secondary_opts,
            b.default,
            b.help,
            b.metavar,
            b.rich_help_panel,
        ), name
        assert a.type_descriptor.annotation == b.type_descriptor.annotation, name


def test_help_shows_every_choice_from_the_core_in_panels(cli):
    from packcli.cli.options import INPUT, OUTPUT, PACKING, RUN, TOKENIZATION
    from packcli.core import options
    from packcli.plan.kernels import pack as kernels
    from packcli.tokenize import fastbpe
    from packcli.write import manifest

    core = {
        "mode": options.MODES,
        "algorithm": kernels.ALGORITHMS,
        "format": manifest.FORMATS,
        "tokenizer_backend": fastbpe.BACKENDS,
        "overlong": options.OVERLONG_POLICIES,
        "remainder": options.REMAINDER_POLICIES,
        "on_bad_record": options.BAD_RECORD_POLICIES,
    }
    params = {p.name: p for p in commands()["pack"].params}
    text = cli("pack", "--help").stdout
    for name, values in core.items():
        metavar = "<" + "|".join(values) + ">"
        assert params[name].metavar == metavar and metavar in text, name
    assert kernels.ALGORITHMS == ("nf", "ff", "ffd", "bfd", "spfhp", "lpfhp")
    panels = [text.index(f"\n{panel}:\n") for panel in (INPUT, TOKENIZATION, PACKING, OUTPUT, RUN)]
    assert panels == sorted(panels)
    assert all(p.rich_help_panel for p in params.values() if p.name != "inputs")
    stats_text = cli("stats", "--help").stdout
    for name in ("overlong", "on_bad_record", "tokenizer_backend"):
        assert params[name].metavar in stats_text


@pytest.mark.parametrize(
    "option, message",
    [
        (("--overlong", "fold"), "--overlong must be one of split, truncate, drop, error, not 'fold'"),
        (("--tokenizer-backend", "fast"), "--tokenizer-backend must be one of auto, hf, tiktoken"),
        (("--on-bad-record", "ignore"), "--on-bad-record must be one of fail, skip"),
    ],
)
def test_stats_bad_choice_exits_2_with_one_line(cli, doc, word_tokenizer, option, message):
    line = one_error_line(cli("stats", doc, "--tokenizer", word_tokenizer, "--seq-len", 8, *option), code=2)
    assert message in line


def test_help_is_light():
    """`packcli --help` must not import the heavy libraries."""
    code = "import sys; from packcli.cli.app import app; print(sorted(m for m in ('numpy','numba','transformers','pyarrow') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_version_and_module_entry_point():
    result = subprocess.run([sys.executable, "-m", "packcli", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("packcli ")


def test_missing_text_field_names_field_and_keys(cli, doc, tmp_path, word_tokenizer):
    result = cli("pack", doc, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 8)
    line = one_error_line(result)
    assert "docs.jsonl:2" in line and "'text'" in line and "'question'" in line and "'answer'" in line
    assert not (tmp_path / "o" / "manifest.json").exists()
    assert not list((tmp_path / "o").glob("*shard*"))


def test_skip_bad_records_counts_them(cli, doc, tmp_path, word_tokenizer):
    result = cli(
        "pack",
        doc,
        "-o",
        tmp_path / "o",
        "--tokenizer",
        word_tokenizer,
        "--seq-len",
        8,
        "--on-bad-record",
        "skip",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    documents = json.loads(result.stdout)["documents"]
    assert documents["read"] == 2 and documents["skipped"] == 1
    assert "docs.jsonl:2" in documents["skipped_examples"][0]


def test_malformed_json_names_file_and_line(cli, tmp_path, word_tokenizer):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "w1"}\n{"text": "w2"\n')
    line = one_error_line(cli("pack", path, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 8))
    assert "bad.jsonl:2" in line


def test_tokenizer_without_eos(cli, doc, tmp_path, no_eos_tokenizer):
    line = one_error_line(cli("pack", doc, "-o", tmp_path / "o", "--tokenizer", no_eos_tokenizer, "--seq-len", 8))
    assert "no EOS token" in line and "--eos-token" in line
    # ...and it works once an EOS is named
    ok = cli(
        "pack",
        doc,
        "-o",
        tmp_path / "o2",
        "--tokenizer",
        no_eos_tokenizer,
        "--seq-len",
        8,
        "--eos-token",
        "<s>",
        "--on-bad-record",
        "skip",
    )
    assert ok.exit_code == 0, ok.stderr


def test_eos_token_not_in_vocabulary(cli, doc, tmp_path, word_tokenizer):
    line = one_error_line(
        cli("pack", doc, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 8, "--eos-token", "<nope>")
    )
    assert "'<nope>' is not a token" in line


def test_pad_id_outside_vocabulary(cli, doc, tmp_path, word_tokenizer):
    line = one_error_line(
        cli("pack", doc, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 8, "--pad-id", 5000)
    )
    assert "pad id 5000 is outside the vocabulary" in line


def test_unknown_tokenizer_path(cli, doc, tmp_path):
    line = one_error_line(cli("pack", doc, "-o", tmp_path / "o", "--tokenizer", tmp_path / "nope", "--seq-len", 8))
    assert "tokenizer not found" in line and "nope" in line


def test_a_directory_that_is_no_tokenizer(cli, doc, tmp_path):
    (tmp_path / "empty").mkdir()
    line = one_error_line(cli("pack", doc, "-o", tmp_path / "o", "--tokenizer", tmp_path / "empty", "--seq-len", 8))
    assert "has no tokenizer.json" in line and "empty" in line


@pytest.mark.parametrize(
    "option, message",
    [
        (("--seq-len", "0"), "--seq-len must be between 1"),
        (("--seq-len", "99999999"), "--seq-len must be between 1"),
        (("--algorithm", "magic"), "--algorithm must be one of"),
        (("--mode", "zip"), "--mode must be one of"),
        (("--overlong", "fold"), "--overlong must be one of"),
        (("--remainder", "keep"), "--remainder must be one of"),
        (("--format", "csv"), "--format must be one of"),
        (("--buffer-size", "0"), "--buffer-size must be at least 1"),
        (("--rows-per-shard", "0"), "--rows-per-shard must be at least 1"),
        (("--on-bad-record", "ignore"), "--on-bad-record must be one of"),
        (("--truncation-side", "middle"), "--truncation-side must be one of left, right"),
        (("--pad-to-multiple-of", "3"), "--seq-len 8 is not a multiple of --pad-to-multiple-of 3"),
        (("--pad-to-multiple-of", "0"), "--pad-to-multiple-of must be at least 1"),
        (("--pad-to-multiple-of", "4", "--mode", "concat"), "--pad-to-multiple-of applies to bin mode only"),
    ],
)
def test_bad_usage_exits_2(cli, doc, tmp_path, word_tokenizer, option, message):
    args = ["pack", doc, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", "8"]
    if option[0] == "--seq-len":
        args = args[:-2]
    line = one_error_line(cli(*args, *option), code=2)
    assert message in line
    assert not (tmp_path / "o").exists()


def test_missing_required_option_exits_2(cli, doc):
    assert cli("pack", doc, "--seq-len", 8).exit_code == 2


def test_non_empty_output_needs_overwrite(cli, tmp_path, word_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "w1"}])
    args = ("pack", path, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 8)
    assert cli(*args).exit_code == 0
    line = one_error_line(cli(*args))
    assert "not empty" in line and "--overwrite" in line
    assert cli(*args, "--overwrite").exit_code == 0
    (tmp_path / "o" / "notes.txt").write_text("mine")
    line = one_error_line(cli(*args, "--overwrite"))
    assert "notes.txt" in line and (tmp_path / "o" / "notes.txt").exists()


def test_output_that_is_a_file(cli, tmp_path, word_tokenizer):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "w1"}])
    line = one_error_line(cli("pack", path, "-o", path, "--tokenizer", word_tokenizer, "--seq-len", 8))
    assert "not a directory" in line


def test_missing_input_and_no_documents(cli, tmp_path, word_tokenizer):
    line = one_error_line(
        cli("pack", tmp_path / "none.jsonl", "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 8)
    )
    assert "none.jsonl" in line
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    line = one_error_line(cli("pack", empty, "-o", tmp_path / "o2", "--tokenizer", word_tokenizer, "--seq-len", 8))
    assert "no documents" in line
    assert not (tmp_path / "o2" / "manifest.json").exists()


def test_pack_prints_a_table_and_stats_and_verify_agree(cli, tmp_path, word_tokenizer):
    from helpers import random_texts

    path = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in random_texts(50)])
    result = cli("pack", path, "-o", tmp_path / "o", "--tokenizer", word_tokenizer, "--seq-len", 64)
    assert "efficiency" in result.stdout and result.stderr == ""
    verified = cli("verify", tmp_path / "o")
    assert verified.exit_code == 0 and verified.stdout.startswith("ok: ")
    stats = json.loads(cli("stats", tmp_path / "o", "--json").stdout)
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    for key in (
        "rows",
        "real_tokens",
        "padding_tokens",
        "efficiency",
        "label_tokens",
        "sequences_per_row",
        "fill_per_row",
    ):
        assert stats[key] == report[key], key


def test_the_process_ends_with_the_commands_code_after_atexit_handlers(tmp_path):
    """`main` skips the interpreter's teardown (flow.exit_now): the exit code, the output
    and other libraries' atexit handlers (coverage, Ray) must all survive it."""
    code = (
        "import atexit, sys; atexit.register(lambda: print('atexit ran', flush=True)); "
        "sys.argv = ['packcli'] + sys.argv[1:]; from packcli.cli.app import main; main()"
    )
    shown = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True)
    assert shown.returncode == 0
    assert "Usage" in shown.stdout and shown.stdout.rstrip().endswith("atexit ran")
    failed = subprocess.run(
        [sys.executable, "-c", code, "stats", str(tmp_path / "none")], capture_output=True, text=True
    )
    assert failed.returncode == 1 and failed.stderr.count("\n") == 1 and "atexit ran" in failed.stdout
    usage = subprocess.run([sys.executable, "-c", code, "pack", "--no-such-option"], capture_output=True, text=True)
    assert usage.returncode == 2


def test_pack_allocates_from_the_system_and_block_arrays_from_a_reusing_pool():
    """`pack` makes Arrow's default pool the system's (mimalloc kept what each shard writer
    thread freed), unless the user chose one; per-block arrays still come from mimalloc, and
    Parquet encoding from jemalloc, whose blocks the shard writer threads share."""
    code = (
        "import sys; from packcli.core.flow import arrow_from_system, pooled_empty; arrow_from_system(); "
        "import pyarrow as pa; from packcli.core.flow import arrow_pool; a = pooled_empty(1 << 20, 'int32'); "
        "print(pa.default_memory_pool().backend_name, pa.mimalloc_memory_pool().bytes_allocated() >= a.nbytes, "
        "arrow_pool('jemalloc').backend_name)"
    )
    env = {name: value for name, value in os.environ.items() if name != "ARROW_DEFAULT_MEMORY_POOL"}
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert shown.stdout.split() == ["system", "True", "jemalloc"]
    chosen = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**env, "ARROW_DEFAULT_MEMORY_POOL": "jemalloc"},
    )
    assert chosen.stdout.split() == ["jemalloc", "True", "jemalloc"]
