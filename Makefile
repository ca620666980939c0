# Two commands for a new machine:  make lab  (set up, open the labs)  and  make test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.nanlab-installed
PYTEST_ARGS ?= -n 2 --dist loadfile

.PHONY: setup lab labs test lint bench clean-venv

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install nanlab with everything the labs and tests need

labs: setup  ## after editing solutions/: sync each .py/.ipynb pair, run it (store the checked outputs), regenerate labs/
	$(BIN)/python -m nanlab course execute
	$(BIN)/python -m nanlab course build

lab: setup  ## open the student labs in JupyterLab (no news prompt: jupyter/labconfig)
	JUPYTER_CONFIG_PATH=$(CURDIR)/jupyter $(BIN)/jupyter lab labs/

lint: setup
	$(BIN)/ruff check .

test: setup  ## ruff (notebook sources too), the notebook sync checks, unit tests and every notebook under nbval
	$(BIN)/ruff check .
	$(BIN)/python -m nanlab course check
	NANLAB_PROGRESS=$$(mktemp -d)/progress.json OMP_NUM_THREADS=1 \
		$(BIN)/python -m pytest $(PYTEST_ARGS) tests solutions labs --nbval-lax

bench: setup  ## benchmarks: print numbers, assert nothing
	for f in bench/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean-venv:
	rm -rf $(VENV)
