# Every target installs what it needs into .venv first, so a fresh clone needs only python3.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test bench assets clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Pack the bundled sample corpus with the bundled tokenizer (offline), then show its stats.
demo: $(STAMP)
	$(BIN)/packcli pack packcli/assets/demo.jsonl --tokenizer packcli:demo --seq-len 1024 \
		-o demo-out --overwrite
	$(BIN)/packcli verify demo-out
	$(BIN)/packcli stats demo-out

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python scripts/bench_kernels.py

# Rebuild the bundled tokenizer and demo corpus from the project's own docs and code.
assets: $(STAMP)
	$(BIN)/python scripts/build_demo_assets.py

clean:
	rm -rf $(VENV) demo-out bench-out .pytest_cache
