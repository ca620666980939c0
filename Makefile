# Two commands for a new machine:  make lab  (set up, open the labs)  and  make test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Two installs, a stamp each: `make lab` installs nanlab[course] (the labs, no test tools),
# `make test` nanlab[test] (the course, every other extra and the test tools)
STAMP  := $(VENV)/.nanlab-installed
LAB_STAMP := $(VENV)/.nanlab-course
PYTEST_ARGS ?= -n 2 --dist loadfile
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

test: setup  ## ruff (notebook sources too), the notebook sync checks, unit tests (another CPU kernel path) and every notebook under nbval
	$(BIN)/ruff check .
	$(BIN)/python -m nanlab course check
	NANLAB_PROGRESS=$$(mktemp -d)/progress.json OMP_NUM_THREADS=1 $(OTHER_KERNELS) \
		$(BIN)/python -m pytest $(PYTEST_ARGS) tests
	NANLAB_PROGRESS=$$(mktemp -d)/progress.json OMP_NUM_THREADS=1 $(NOTEBOOK_KERNELS) \
		$(BIN)/python -m pytest $(PYTEST_ARGS) solutions labs --nbval-lax

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
