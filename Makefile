# Two commands for a new machine:  make lab  (set up, open the labs)  and  make test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Two installs, a stamp each: `make lab` installs nanlab[course] (the labs, no test tools),
# `make test` nanlab[test] (the course, every other extra and the test tools)
STAMP  := $(VENV)/.nanlab-installed
LAB_STAMP := $(VENV)/.nanlab-course
# Unit tests a test at a time (worksteal: no worker idles while the other ends a long file;
# the fault runs they share are trained once, tests/shared_runs.py); the slowest listed.
PYTEST_ARGS ?= -n 2 --dist worksteal --durations=20
# Notebooks a file at a time: each notebook's cells share one kernel.
NOTEBOOK_ARGS ?= -n 2 --dist loadfile --durations=20
# A run near a numerical threshold fails a few steps earlier or later on another CPU, so
# `make test` proves two kernel paths: the unit tests on this one (below), the notebooks
# on the machine's own. Where PyTorch picks its AVX-512 kernels: AVX2 (PyTorch's own
# kernels, MKL and oneDNN capped at AVX2); elsewhere PyTorch's DEFAULT kernels (on x86,
# no AVX; on ARM the test that checks the two paths differ skips if they do not).
OTHER_KERNELS ?= $(shell $(BIN)/python -c "import torch; print( \
	'ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2' \
	if torch.backends.cpu.get_cpu_capability() == 'AVX512' else 'ATEN_CPU_CAPABILITY=default')")
# the notebooks' path: the machine's own unless set (the reverse of the above:
# make test OTHER_KERNELS= NOTEBOOK_KERNELS="ATEN_CPU_CAPABILITY=avx2 ...")
NOTEBOOK_KERNELS ?=

.PHONY: setup setup-lab lab labs test lint bench clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

$(LAB_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e ".[course]"
	touch $(LAB_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e ".[test]"
	touch $(STAMP) $(LAB_STAMP)

setup: $(STAMP)  ## create .venv and install nanlab with everything the labs and tests need

setup-lab: $(LAB_STAMP)  ## create .venv and install nanlab with what the labs need (nanlab[course])

labs: setup-lab  ## after editing solutions/: sync each .py/.ipynb pair, run it (store the checked outputs), regenerate labs/
	$(BIN)/python -m nanlab course execute
	$(BIN)/python -m nanlab course build

lab: setup-lab  ## open the student labs in JupyterLab (no news prompt: jupyter/labconfig)
	JUPYTER_CONFIG_PATH=$(CURDIR)/jupyter $(BIN)/jupyter lab labs/

lint: setup
	$(BIN)/ruff check .

# Each lab once, with its solution put in at every check (conftest.py): labs/ is generated
# from solutions/ (course check, byte for byte) and differs only in the exercises' bodies,
# so running both folders trained every lab twice. One run proves what both did: the lab
# top to bottom with its stubs, every check "not done yet"; at each check the solution's
# code, the check "passed", and every nbval-tagged output of the solution. (Measured:
# tests/test_exercise_checks.py runs single check cells in a stubbed namespace, not the
# labs, so it proves neither.) `pytest --nbval-lax solutions labs` still runs them apart.
test: setup  ## ruff (notebook sources too), the notebook sync checks, unit tests (another CPU kernel path) and every notebook under nbval
	$(BIN)/ruff check .
	$(BIN)/python -m nanlab course check
	NANLAB_PROGRESS=$$(mktemp -d)/progress.json OMP_NUM_THREADS=1 $(OTHER_KERNELS) \
		$(BIN)/python -m pytest $(PYTEST_ARGS) tests
	NANLAB_PROGRESS=$$(mktemp -d)/progress.json OMP_NUM_THREADS=1 $(NOTEBOOK_KERNELS) \
		$(BIN)/python -m pytest $(NOTEBOOK_ARGS) labs --nbval-lax --labs-with-solutions

# The documentation site (mkdocs.yml, docs/): the library and the docs extra are all it needs
DOCS_STAMP := $(VENV)/.nanlab-docs
.PHONY: docs

$(DOCS_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)  ## build the documentation site into site/, offline and strict (a broken link or anchor, or a page missing from the navigation, fails)
	$(BIN)/mkdocs build --strict

bench: setup  ## benchmarks: print numbers, assert nothing
	for f in bench/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean-venv:
	rm -rf $(VENV)
