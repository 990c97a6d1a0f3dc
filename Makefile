# Two entry points for a fresh machine (each sets up its own virtual environment):
#   make demo   -- the main job
#   make test   -- the whole test suite (what CI runs)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.unifl-installed

.PHONY: demo test test-full bench build devices clean

demo: build
	$(BIN)/unifl demo

test: build
	$(BIN)/python -m pytest -q -rs -m "not slow" -p no:cacheprovider

test-full: build
	UNIFL_FULL=1 $(BIN)/python -m pytest -q -rs -p no:cacheprovider

bench: build
	$(BIN)/unifl bench

devices: build
	$(BIN)/unifl devices

# (re)build the compiled parts in place; cheap when nothing changed
build: $(STAMP)
	$(BIN)/python setup.py -q build_ext --inplace

$(STAMP): requirements.txt requirements-cuda.txt setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q -r requirements-cuda.txt   # nvcc for the gpu kernels (no GPU needed)
	$(BIN)/python -m pip install -q --no-build-isolation -e .
	touch $(STAMP)

clean:
	rm -rf build $(VENV) unifl/backends/*/*.so
