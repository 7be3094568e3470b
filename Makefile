# The two commands of the course: `make lab` (learn) and `make test` (check every notebook).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.course-installed
PORT ?= 8888
ALLOW_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb)) $(sort $(wildcard notebooks/solutions/*.ipynb))
# stored outputs are compared run after run: no progress bars, outputs grouped by engine
export IPP_NONINTERACTIVE := 1

.PHONY: install lab-settings lab lab-args browser test unit notebooks lint outputs check gpu-check world-sizes lessons-at clean cluster-up cluster-down

# PyTorch: any release in pyproject.toml's range; one the Python above already has (a site's
# module, a conda environment) is used through --system-site-packages, not installed again.
# TORCH=2.13.0 asks for that release exactly (make clean install TORCH=2.13.0).
TORCH ?=
$(PY):
	$(PYTHON) -m venv $$($(PYTHON) helpers/machine/torch_build.py --venv-args) $(VENV)

# which PyTorch build (CPU where there is no NVIDIA GPU): helpers/machine/torch_build.py, COURSE_TORCH
$(STAMP): pyproject.toml helpers/machine/torch_build.py | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	torch_args=$$($(PY) helpers/machine/torch_build.py) && \
		$(PY) -m pip install --quiet $$torch_args -e ".[test,mpi]" $(if $(TORCH),"torch==$(TORCH)")
	touch $@

# JupyterLab's settings for the course: never ask about (or fetch) Jupyter news on first start
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json
define write_lab_settings
	mkdir -p $(dir $(LAB_OVERRIDES))
	printf '%s\n' '{"@jupyterlab/apputils-extension:notification":' \
		'  {"fetchNews": "false", "checkForUpdates": false}}' > $(LAB_OVERRIDES)
endef
$(LAB_OVERRIDES): | $(STAMP)
	$(write_lab_settings)

install: $(STAMP) $(LAB_OVERRIDES)

# the settings alone, into an environment made elsewhere (Binder's postBuild)
lab-settings:
	$(write_lab_settings)

# the repository is the root (README, helpers/ and notebooks/ all reachable); opens notebook 00
LAB_ARGS = --ip=127.0.0.1 --ServerApp.root_dir=. \
	--LabApp.default_url=/lab/tree/notebooks/00_cluster.ipynb $(ALLOW_ROOT)

lab-args:  # for tests/test_browser.py, which starts JupyterLab the way `make lab` does
	@echo $(LAB_ARGS)

lab: install
	@echo "Starting JupyterLab on 127.0.0.1:$(PORT); open the URL it prints (Ctrl-C twice to stop)."
	IPP_NONINTERACTIVE= $(VENV)/bin/jupyter lab --port=$(PORT) $(LAB_ARGS)

lint: install
	$(VENV)/bin/ruff check helpers tests notebooks benchmarks

unit: install
	$(PY) -m pytest tests

notebooks: install
	$(PY) -m pytest --nbval --nbval-current-env --nbval-cell-timeout=240 \
		--nbval-sanitize-with tests/sanitize.cfg $(NOTEBOOKS)

# the browser suite is `make browser` (CI runs both)
# (the slowest 15 steps are listed at the end: the budget is 10 minutes)
test: lint
	$(PY) -m pytest tests --ignore=tests/test_browser.py --nbval --nbval-current-env \
		--nbval-cell-timeout=240 --nbval-sanitize-with tests/sanitize.cfg --durations=15 \
		$(NOTEBOOKS)

# every lesson notebook run top to bottom in a real browser, Run All from the menu, with the
# stop button and a kernel shutdown in 00 (about 4 minutes); CI runs it after `make test`
browser: install
	COURSE_BROWSER_ALL=1 $(PY) -m pytest tests/test_browser.py --durations=0 --durations-min=1

# the day before a workshop: is this machine ready? (a table; exit status 1 on a blocker);
# CLASS=20: and for 20 learners at once, each with a kernel and a cluster?
check: install
	COURSE_CLASS_SIZE=$(CLASS) $(PY) -m helpers.machine.preflight

# on a machine with one NVIDIA GPU: one report of what runs there (benchmarks/gpu_check.py says
# how to run it with the machine's own PyTorch, from wheels saved by benchmarks/gpu_wheels.sh)
gpu-check: install
	$(PY) benchmarks/gpu_check.py --out gpu-check.md

# every lesson at every world size from 1 to 8 and 16, a table (SIZES=8 for one size)
SIZES ?= 1-8,16
world-sizes: install
	$(PY) benchmarks/world_sizes.py --sizes $(SIZES)

# every lesson at another world size, outputs not compared, errors fail (CI: 8, a GPU node's ranks)
RANKS ?= 8
LESSONS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
lessons-at: install
	COURSE_WORLD_SIZE=$(RANKS) $(PY) -m pytest --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=480 --durations=5 $(LESSONS)

# re-execute notebooks in place after editing them (NB=path to do one)
outputs: install
	$(PY) tests/execute_notebooks.py $(or $(NB),$(NOTEBOOKS))

# a throwaway Slurm cluster of two nodes on this machine (root; network namespaces), for the
# Slurm tests and for trying the notebooks on Slurm: `make cluster-up && source .cluster/env`
cluster-up:
	bash .ci/slurm-cluster up

cluster-down:
	bash .ci/slurm-cluster down

clean:
	rm -rf $(VENV) *.egg-info
