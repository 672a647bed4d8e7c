"""Shared fixtures: tokenizers built in the test (no downloads), a CLI runner, and
`packed(...)`, which runs `packcli pack` and checks the output with the same
invariant checker `packcli verify` uses before a test looks at it; and the turns that
let a test marked `alone` run with no other test beside it.

`make test` runs the suite on every core (pytest-xdist, `--dist loadfile`): each test file
runs whole, in order, in one worker process, beside the files other workers run. So every
test must bear another test running at the same time in another process: it writes only
under its own `tmp_path` (or `tmp_path_factory`), listens on a free port (never a fixed
one), and looks for nothing by a fixed name in the system's temporary directory or the
checkout. Every worker collects the whole suite and must find the same tests: no time,
random value or set order in a parameter or its id. A test that measures what a neighbour
disturbs (the peak memory of a run, how long something takes) is marked
`@pytest.mark.alone`: no other test runs while it does. A test that needs the kernels
compiled is marked `@pytest.mark.compiled` (see `pytest_pyfunc_call`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from typer.testing import CliRunner

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ["COLUMNS"] = "100"  # Rich output stable whatever the terminal

from helpers import word_level_tokenizer, write_chatml_tokenizer

from packcli.cli.app import app
from packcli.core import jit
from packcli.tokenize.tokenizer import BUNDLED_DIR, load_tokenizer

# Hypothesis fails an example that takes over 200 ms (its deadline) and a data generation it
# finds slow (the too_slow health check): timings, which the other workers, or every core
# kept busy (`make stress`), stretch, and which no test here is about. The profile CI gets
# (Hypothesis loads it where CI is set) has neither; the rest of the current one is kept.
settings.register_profile(
    "untimed", settings(settings.default, deadline=None, suppress_health_check=[HealthCheck.too_slow])
)
settings.load_profile("untimed")


# The files that take longest go out first, so that none of them starts when the other
# workers are nearly done (the suite's end waits for its last file): the blocks of README.md
# and docs/, the kill -9 runs, the Ray cluster's tests. The other files keep their order.
LONGEST_FIRST = ("test_docs.py", "test_reliability.py", "test_engine_ray.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the tests of LONGEST_FIRST's files ahead, in that order; a stable sort, so every
    worker collects the same order (xdist checks) and each file's tests keep theirs."""

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)


# ----------------------------------------------------------------------------- running alone


@contextlib.contextmanager
def turn(config: pytest.Config, alone: bool) -> Iterator[None]:
    """Waits until the test may run, and holds its turn while it does: any number of tests
    at once, or one `alone` test with none beside it.

    A readers-writer lock between the xdist workers of one run, on two files in the
    temporary directory they share: every test holds `turns.lock` shared, an `alone` test
    holds it exclusive. The `turns.gate` each test passes first is held by an `alone` test
    while it waits, so that the other workers' next tests queue behind it instead of
    keeping the shared lock held forever. In a run without workers nothing runs beside a
    test, and there is nothing to wait for."""
    if not hasattr(config, "workerinput"):
        yield
        return
    shared = Path(config.option.basetemp).parent  # the workers' own are popen-gw0, popen-gw1, ... in it
    with open(shared / "turns.gate", "a") as gate, open(shared / "turns.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)  # behind an `alone` test that waits for its turn
        if alone:
            fcntl.flock(lock, fcntl.LOCK_EX)
            fcntl.flock(gate, fcntl.LOCK_UN)
        else:
            fcntl.flock(gate, fcntl.LOCK_UN)
            fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Each test's setup, call and teardown in its turn (see `turn`)."""
    with turn(item.config, alone=item.get_closest_marker("alone") is not None):
        return (yield)


# ----------------------------------------------------------------------------- compiled kernels


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Runs a test marked `compiled` in a child pytest without NUMBA_DISABLE_JIT when this
    process has it (`make cov`), and passes if the child does.

    Such a test checks numba's own objects, or what a kernel does at a scale (a million
    lengths) that the kernels run as Python, under coverage, take many minutes over; the
    kernels' lines are covered by the tests of their small cases all the same."""
    if pyfuncitem.get_closest_marker("compiled") is None or not jit.DISABLE_JIT:
        return None
    env = {name: value for name, value in os.environ.items() if name != "NUMBA_DISABLE_JIT"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", pyfuncitem.nodeid]
    child = subprocess.run(command, env=env, cwd=pyfuncitem.config.rootpath, capture_output=True, text=True)
    assert child.returncode == 0, child.stdout[-3000:] + child.stderr[-2000:]
    assert "1 passed" in child.stdout, child.stdout[-3000:]
    return True


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels() -> None:
    """Kernels run compiled here whatever the size of the work (a small run in a process of
    its own runs their interpreted twins, which tests/test_core_jit.py checks)."""
    from packcli.core import jit

    jit.SMALL_WORK = -1


@pytest.fixture(scope="session", autouse=True)
def start_up_cache(tmp_path_factory) -> Path:
    """The start-up cache of every test run in a temporary directory, never the user's."""
    path = tmp_path_factory.mktemp("packcli-cache")
    os.environ["PACKCLI_CACHE_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def word_tokenizer(tmp_path_factory) -> Path:
    """Vocabulary of 300: ids fit in uint16. EOS is `</s>` (id 1), no pad (falls back to EOS)."""
    return word_level_tokenizer(tmp_path_factory.mktemp("tok") / "word", 300)


@pytest.fixture(scope="session")
def big_tokenizer(tmp_path_factory) -> Path:
    """Vocabulary of 70,000: more than uint16 holds, so npy input_ids must be uint32."""
    return word_level_tokenizer(tmp_path_factory.mktemp("tok") / "big", 70_000, pad=True)


@pytest.fixture(scope="session")
def no_eos_tokenizer(tmp_path_factory) -> Path:
    return word_level_tokenizer(tmp_path_factory.mktemp("tok") / "noeos", 300, eos=False)


@pytest.fixture(scope="session")
def bos_tokenizer(tmp_path_factory) -> Path:
    return word_level_tokenizer(tmp_path_factory.mktemp("tok") / "bos", 300, bos=True)


@pytest.fixture(scope="session")
def demo_tokenizer() -> Path:
    return BUNDLED_DIR


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args, input=None):
        return runner.invoke(app, [str(a) for a in args], input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def packed(cli, tmp_path):
    """Run `packcli pack` (expecting success) and check the output like `packcli verify`."""
    from packcli.inspect.verify import verify_dir

    counter = {"n": 0}

    def run(inputs, *options, out: Path | None = None) -> Path:
        if out is None:
            counter["n"] += 1
            out = tmp_path / f"out{counter['n']}"
        inputs = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        result = cli("pack", *inputs, "-o", out, *options)
        assert result.exit_code == 0, result.output + result.stderr
        from packcli.write.manifest import split_outputs

        for output in split_outputs(out) or [out]:  # --holdout: DIR/train and DIR/validation
            verify_dir(output)
        return out

    return run


@pytest.fixture(scope="session")
def demo():
    """The bundled tokenizer through transformers (the tests decode with it)."""
    return load_tokenizer(str(BUNDLED_DIR), via_transformers=True)


@pytest.fixture(scope="session")
def chatml_tokenizer(tmp_path_factory):
    """A byte-level BPE with ChatML special tokens, trained in the test."""
    return write_chatml_tokenizer(tmp_path_factory.mktemp("tok") / "chatml")


# ----------------------------------------------------------------------------- object stores

S3_BUCKET = "corpus"  # the bucket s3_server creates


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 in server mode on a free port; s3fs and boto3 find it through the standard
    AWS_* environment, with dummy credentials."""
    import boto3
    import s3fs
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    patch = pytest.MonkeyPatch()
    for name, value in {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        patch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()  # an instance made for another server would be reused
    boto3.client("s3").create_bucket(Bucket=S3_BUCKET)
    yield boto3.client("s3")
    patch.undo()
    server.stop()
