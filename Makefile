# Two commands on a fresh machine: `make demo` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Development and CI machines have no GPU: take torch's CPU build (see requirements/cpu.txt).
CONSTRAINTS ?= requirements/cpu.txt

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	rm -rf .demo
	$(BIN)/python -m examples.digits.train --out .demo/checkpoints/digits-a.pt --seed 1
	$(BIN)/python -m examples.digits.train --out .demo/checkpoints/digits-b.pt --seed 2
	cd .demo && ../$(BIN)/evalsentry register checkpoints/digits-a.pt --model digits --stage production
	cd .demo && ../$(BIN)/evalsentry register checkpoints/digits-b.pt --model digits
	cd .demo && ../$(BIN)/evalsentry registry list

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .demo .evalsentry .pytest_cache .mypy_cache .ruff_cache
