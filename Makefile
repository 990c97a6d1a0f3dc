# Two entry points for a fresh machine (each sets up its own virtual environment):
#   make demo   -- the main job
#   make test   -- the import contracts and types (make lint), then the whole test suite (what CI runs)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.unifl-installed
DEV_STAMP := $(VENV)/.unifl-dev-installed

.PHONY: demo test test-fast test-full test-fate fate-venv lint bench build devices fuzz wheel check-wheel clean gpu-proxies \
	gpu-baseline

demo: build
	$(BIN)/unifl demo

# tests run on every core (pytest-xdist: one worker per CPU); TEST_WORKERS=0 runs them in one process
TEST_WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -q -rs -p no:cacheprovider -n $(TEST_WORKERS)

test: build $(DEV_STAMP) lint
	$(PYTEST) -m "not slow"

# while you work: core through phe_sdk, the configs and the scheduler, and every backend that needs
# no hardware toolchain against cpu (cpu, native, generic); no RTL, CUDA, FATE or Ray (CONTRIBUTING.md)
test-fast: build $(DEV_STAMP)
	$(PYTEST) -m "not slow and not rtl and not cuda_toolchain and not fate and not ray and not gpu" \
	  -k "not fpga and not qat and not gpu_host" tests/core tests/phe_sdk tests/configs tests/scheduler \
	  tests/backends/test_equivalence.py

# the architecture (pyproject.toml [tool.importlinter]: layers, backends on core only, no cycles),
# the types ([tool.mypy]; unifl and tools), ruff ([tool.ruff]) and clang-format (.clang-format) on
# the C, C++ and CUDA sources; docs/architecture.md explains the first two.  Needs the venv, not the
# build.
lint: $(DEV_STAMP)
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy
	$(BIN)/ruff check
	$(BIN)/clang-format --dry-run --Werror $$(git ls-files '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh')

test-full: build $(DEV_STAMP)
	UNIFL_FULL=1 $(PYTEST)

# ---- FATE plugin: FATE lives in its own venv (pyfate pins pydantic 1, we use 2) -------
# torch==2.13.0 first: where a CPU wheel is on pip's find-links (or PyTorch's CPU index is set) it
# is taken instead of PyPI's CUDA build.  unifl itself comes from the tree (PYTHONPATH), not pip.
FATE_VENV  ?= .venv-fate
FATE_STAMP := $(FATE_VENV)/.fate-installed
FATE_PINS  := pyfate==2.2.0 pandas==2.2.3 "setuptools<81" torch==2.13.0 gmpy2==2.3.2 PyYAML==6.0.3 \
 rich==13.7.1 pytest==9.0.3 pytest-xdist==3.8.0 execnet==2.1.2 phe==1.5.0 matplotlib==3.10.7

$(FATE_STAMP): Makefile
	$(PYTHON) -m venv $(FATE_VENV)
	$(FATE_VENV)/bin/python -m pip install -q torch==2.13.0
	$(FATE_VENV)/bin/python -m pip install -q $(FATE_PINS)
	touch $(FATE_STAMP)

# FATE-Flow 2.2.0 and its client in the same venv.  fate_flow pins typing-extensions==4.8.0 and torch
# 2.13 needs >=4.10, so pip cannot resolve them together (it backtracks into GBs of CUDA wheels before
# giving up): install both --no-deps, then their own requirements listed here, pinned to what ran
# (lab-notes/fate-flow-2.2.0.md), with FATE's pins repeated so nothing they need moves.
# `fate_flow init` (done by tests/fate/test_flow.py through unifl.fate.flow) binds this venv's
# fate_flow to one home: $(FATE_FLOW_HOME), under build/.
FATE_FLOW_STAMP := $(FATE_VENV)/.fate-flow-installed
FATE_FLOW_HOME  ?= $(CURDIR)/build/fate-flow/home
FATE_FLOW_REQS  := "apsw==3.54.1.0" Flask==2.2.5 Werkzeug==3.1.9 grpcio==1.62.1 grpcio-tools==1.62.1 \
 requests==2.25.1 urllib3==1.26.18 cachetools==3.0.0 filelock==3.3.1 pydantic==1.10.12 webargs==8.7.1 \
 peewee==3.17.1 python-dotenv==0.13.0 networkx==3.6.1 psutil==7.2.2 casbin-peewee-adapter==0.0.2 \
 casbin==1.43.0 PyMySQL==1.2.4 kazoo==2.11.0 shortuuid==1.0.13 cos-python-sdk-v5==1.9.27 \
 ruamel.yaml==0.16.0 boto3==1.44.5 requests-toolbelt==1.0.0 click==8.5.1 protobuf==4.24.4

$(FATE_FLOW_STAMP): $(FATE_STAMP)
	$(FATE_VENV)/bin/python -m pip install -q --no-deps fate_flow==2.2.0 fate_client==2.2.0
	$(FATE_VENV)/bin/python -m pip install -q $(FATE_FLOW_REQS) $(FATE_PINS)
	touch $(FATE_FLOW_STAMP)

# FATE's venv with FATE-Flow, without running the tests (e.g. to try docs/fate.md's commands)
fate-venv: $(FATE_STAMP) $(FATE_FLOW_STAMP)

# the kit and FATE's launcher, then real FATE-Flow jobs (tests/fate/test_flow.py: starts a standalone
# server on free ports of 127.0.0.1, home $(FATE_FLOW_HOME), and always stops it), on one worker
# per core.  The FATE-Flow module keeps its one server on one worker (xdist_group); the launcher's
# jobs share nothing (the "guest:9999" of --parties is a role and party id, not a port; each job
# has its own data_dir and federation session), so they spread like the kit's tests.
test-fate: build $(FATE_STAMP) $(FATE_FLOW_STAMP)
	PYTHONPATH=$(CURDIR) UNIFL_FATE_FLOW_HOME=$(FATE_FLOW_HOME) $(FATE_VENV)/bin/python -m pytest -q -rs \
	  -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup tests/fate/test_kit.py tests/fate/test_party.py tests/fate/test_jobs.py \
	  tests/fate/test_tutorial.py tests/fate/test_flow.py
# ------------------------------------------------------------------------------------------------

# compile-time figures of the CUDA kernels, no GPU needed (nvcc, cuobjdump and nvdisasm from
# requirements-cuda.txt): fails when a cooperative kernel spills or has a stack frame over 2 KiB,
# or when the 32x32->64 products fall under 30 % of what the 2048-bit cooperative MontMult issues
# (its main loop: 8 trips of 8 words; the loop for word counts that are not a multiple of 8: none)
# or of one trip of its main loop; prints registers/occupancy per kernel and the IMAD slots of that
# MontMult against the 4n² model (docs/backends/gpu.md, "Proxies")
gpu-proxies: $(DEV_STAMP)
	@mkdir -p bench/results
	$(BIN)/python -m tools.gpu.proxies --check --montmult 'k_mul_g<32>' --bits 2048 --span '#0=8' \
	  --span '#1=0' --lanes 8 --min-share 0.30 --json bench/results/gpu_proxies.json

# the baseline of bench/gpu_checks.sh, prepared where git and nvcc are (no GPU needed): the tree at
# 72c8f0e (the cooperative kernels as measured on an H200) with its CUDA library in build/gpu-baseline, and this
# tree's library; carry both to the GPU machine (docs/backends/gpu.md, "GPU checks")
gpu-baseline: $(DEV_STAMP)
	PYTHON=$(abspath $(BIN))/python UNIFL_CUDA_ARCHS=$${UNIFL_CUDA_ARCHS:-90} bash bench/gpu_checks.sh prepare

bench: build $(DEV_STAMP)
	$(BIN)/unifl bench

devices: build
	$(BIN)/unifl devices

# coverage-guided fuzzing (atheris) of every parser of peer/user input: >= 10^5 inputs per harness,
# 0 crashes; prints inputs and seconds per harness.  FUZZ_RUNS=2000 for a quick pass.
FUZZ_RUNS ?= 100000
fuzz: build $(DEV_STAMP)
	$(BIN)/python fuzz/run.py --runs $(FUZZ_RUNS)

# (re)build the compiled parts in place; cheap when nothing changed.  Once per venv, `unifl devices
# --remedy` lists the backends and, for one that a missing system package keeps unavailable (pip's
# PoCL cannot build kernels on a CPU its LLVM does not know, e.g. AMD Zen 5), installs that package
# when run as root, else prints the one command to run.
REMEDY_STAMP := $(VENV)/.unifl-remedies-checked
build: $(STAMP)
	$(BIN)/python setup.py -q build_ext --inplace --parallel 2
	@[ -e $(REMEDY_STAMP) ] || { $(BIN)/python -m unifl devices --remedy && touch $(REMEDY_STAMP); }

$(STAMP): requirements.txt requirements-cuda.txt setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	@# nvcc (250 MB of wheels, minutes of compiling) only where the kernels can run or are asked for
	@if [ "$$UNIFL_REQUIRE_CUDA_BUILD" = 1 ] || [ "$$UNIFL_CUDA_BUILD" = 1 ] || \
	    [ -e /dev/nvidiactl ] || [ -e /proc/driver/nvidia/version ]; then \
	  echo "$(BIN)/python -m pip install -q -r requirements-cuda.txt"; \
	  $(BIN)/python -m pip install -q -r requirements-cuda.txt; \
	else \
	  echo "unifl: no NVIDIA GPU driver here: the CUDA toolchain and kernels are skipped (the gpu"; \
	  echo "unifl: kernel bodies are still built and tested on the CPU); UNIFL_CUDA_BUILD=1 builds them"; \
	fi
	UNIFL_REGISTER_ONLY=1 $(BIN)/python -m pip install -q --no-build-isolation -e .   # `build` compiles
	touch $(STAMP)

# ---- the installable package: an sdist and a wheel in dist/ (the wheel carries the compiled
# extensions; UNIFL_CUDA_BUILD=1 adds the CUDA kernels, left out here as on any machine without a
# GPU), then a clean venv installs the wheel with the fpga extra and runs `unifl devices` and
# `unifl demo` in a folder outside the source tree (CI runs this).  One epoch, not the demo's three:
# what this checks is the wheel (extensions, kernel sources, configs, data, entry points), which the
# first epoch reaches whole, and each epoch costs the fpga stand-in (PoCL) about 45 s at 2048 bits
WHEEL_VENV := build/wheel-venv
wheel: $(DEV_STAMP)
	rm -rf dist
	env -u UNIFL_REQUIRE_CUDA_BUILD UNIFL_CUDA_BUILD=0 $(BIN)/python -m build --no-isolation -o dist .

check-wheel: wheel
	@# the sdist carries sources only, never what an in-place build left in the tree (MANIFEST.in)
	@! tar tzf dist/unifl-*.tar.gz | grep -E '\.so$$|_build_info\.json$$' || \
	  { echo "check-wheel: the sdist carries build outputs (above)"; exit 1; }
	rm -rf $(WHEEL_VENV) build/wheel-run
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install -q "$$(ls dist/unifl-*.whl)[fpga]"
	mkdir -p build/wheel-run
	cd build/wheel-run && ../wheel-venv/bin/unifl devices && ../wheel-venv/bin/unifl demo --epochs 1
	@echo "check-wheel: the wheel $$(ls dist/*.whl) installed in a clean venv and ran the demo"

# the tests, lint, baselines and Ray: not needed by `make demo`, so a first demo does not wait for them
$(DEV_STAMP): $(STAMP) requirements-dev.txt
	$(BIN)/python -m pip install -q -r requirements-dev.txt
	touch $(DEV_STAMP)

clean:
	rm -rf build $(VENV) .mypy_cache unifl/backends/*/*.so
