# Two entry points for a fresh clone: `make demo` and `make test`, sharing one venv. `make demo` needs
# only the core install (torch, pydantic, numpy: what runs inside torch.compile); `make test` adds every
# extra (dev pulls in offline, models and train; baselines adds nvMatmulHeuristics where its wheel exists), so
# it exercises everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned for the CPU install: a bare `torch` (or an open range) pulls a multi-GB CUDA
# build. pyproject.toml declares torch>=2.11 so GPU machines keep the torch they have.
TORCH_PIN := torch==2.13.0
CORE_STAMP := $(VENV)/.core-installed
STAMP := $(VENV)/.installed

.PHONY: demo test bench fuzz install wheel clean

$(CORE_STAMP): pyproject.toml setup.py Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_PIN)
	$(BIN)/pip install --quiet -e .
	touch $(CORE_STAMP)

$(STAMP): $(CORE_STAMP)
	$(BIN)/pip install --quiet -e '.[dev,baselines]'
	touch $(STAMP)

install: $(STAMP)

demo: $(CORE_STAMP)
	$(BIN)/kernel-select demo

# On every core (pytest-xdist); each file's tests stay on one worker, so a module's fixtures are built once.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile

bench: $(STAMP)
	$(BIN)/python -m pytest -q tests/benchmarks --benchmark-only --benchmark-columns=min,median,max,rounds

# The LUT property suite with 10x the ci examples, randomized (each run tries new inputs).
fuzz: $(STAMP)
	KERNEL_SELECT_FUZZ=10 $(BIN)/python -m pytest -q -p no:cacheprovider tests/lut/test_properties.py

# A wheel and an sdist in dist/, carrying models/ and luts/ (see setup.py).
wheel: $(STAMP)
	$(BIN)/pip wheel --no-deps --no-build-isolation --quiet -w dist .
	$(BIN)/python -c "from setuptools import build_meta; build_meta.build_sdist('dist')"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist
