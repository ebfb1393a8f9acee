# Two set-up commands on a fresh machine: `make run` and `make test`; each makes its own venv.
VENV ?= .venv
PYTHON ?= python3
# The CPU build lies on this project's machines; elsewhere pick the torch build you want.
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: run test bench clean

$(BIN)/internalize: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check "$(TORCH)" -e '.[test]'
	touch $@

run: $(BIN)/internalize
	$(BIN)/internalize run logicot

test: $(BIN)/internalize
	$(BIN)/python -m pytest -q -n auto

bench: $(BIN)/internalize
	$(BIN)/internalize bench --out benchmarks/bench.json
	$(BIN)/python benchmarks/logicot_curricula.py

clean:
	rm -rf $(VENV) runs
