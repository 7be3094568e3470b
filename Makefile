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

.PHONY: install lab-settings lab lab-args browser test unit notebooks lint outputs check gpu-check world-sizes lessons-at clean cluster-up cluster-down hub hub-install hub-test

# PyTorch: any release in pyproject.toml's range; one the Python above already has (a site's
# module, a conda environment) is used through --system-site-packages, not installed again.
# TORCH=2.13.0 asks for that release exactly (make clean install TORCH=2.13.0).
TORCH ?=
$(PY):
	$(PYTHON) -m venv $$($(PYTHON) helpers/machine/torch_build.py --venv-args) $(VENV)

# which PyTorch build (CPU where there is no NVIDIA GPU): helpers/machine/torch_build.py, COURSE_TORCH
$(STAMP): pyproject.toml helpers/machine/torch_build.py | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	torch_args=$$($(PY) helpers/machine/torch_build.py $(if $(TORCH),--exact)) && \
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
	$(PY) -m pytest tests --ignore=tests/test_browser.py --ignore=tests/test_hub.py --nbval --nbval-current-env \
		--nbval-cell-timeout=240 --nbval-sanitize-with tests/sanitize.cfg --durations=15 \
		$(NOTEBOOKS)

# every lesson notebook run top to bottom in a real browser, Run All from the menu, with the
# stop button and a kernel shutdown in 00 (about 4 minutes); CI runs it after `make test`
browser: install
	COURSE_BROWSER_ALL=1 $(PY) -m pytest tests/test_browser.py --durations=0 --durations-min=1

# the day before a workshop: is this machine ready? (a table; exit status 1 on a blocker);
# CLASS=20: and for 20 learners at once, each with a kernel and a cluster (RANKS_EACH=, GPUS=:
# as make hub would give them)?
check: install
	COURSE_CLASS_SIZE=$(CLASS) COURSE_CLASS_RANKS=$(RANKS_EACH) COURSE_CLASS_GPUS=$(GPUS) \
		$(PY) -m helpers.machine.preflight

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

# a workshop server: the course for several local accounts through JupyterHub (as root; README,
# "Running a workshop"): make hub LEARNERS="ada bob" [RANKS_EACH=4 THREADS_EACH= GPUS= HUB_PORT=
# HUB_IP= HUB_SSL_CERT= HUB_SSL_KEY=]
HUB_PREFIX ?= /opt/distributed-course
HUB_VENV := $(HUB_PREFIX)/venv
HUB_PYTHON ?=
HUB_IP ?= 127.0.0.1
HUB_PORT ?= 8000
LEARNERS ?=
RANKS_EACH ?= 4
THREADS_EACH ?=
GPUS ?=
LAB_ARGS_EACH ?=
HUB_SSL_CERT ?=
HUB_SSL_KEY ?=
PROXY := configurable-http-proxy@5.3.0
HUB_ENV = COURSE_HUB_PREFIX=$(HUB_PREFIX) COURSE_HUB_LEARNERS="$(LEARNERS)" \
	COURSE_HUB_RANKS=$(RANKS_EACH) COURSE_HUB_THREADS=$(THREADS_EACH) COURSE_HUB_GPUS=$(GPUS) \
	COURSE_HUB_IP=$(HUB_IP) COURSE_HUB_PORT=$(HUB_PORT) COURSE_HUB_LAB_ARGS="$(LAB_ARGS_EACH)" \
	COURSE_HUB_SSL_CERT=$(HUB_SSL_CERT) COURSE_HUB_SSL_KEY=$(HUB_SSL_KEY)

# its environment, where every account can run it: a venv from a Python all may run (not one
# under /root), the course installed in it (not editable: a learner needs no access to this
# folder), JupyterHub's proxy from npm, and the course's files that each learner gets a copy of
HUB_STAMP := $(HUB_PREFIX)/.installed
hub-install: $(HUB_STAMP)
$(HUB_STAMP): pyproject.toml README.md $(shell find helpers notebooks -type f -not -path '*/.*' \
		-not -path '*__pycache__*')
	@[ "$$(id -u)" = 0 ] || { echo "make hub: run it as root (sudo make hub ...): JupyterHub \
	starts each learner's JupyterLab as their own account"; exit 1; }
	@command -v npm >/dev/null || { echo "make hub: JupyterHub's proxy comes from npm, which \
	is missing (Debian: apt-get install npm)"; exit 1; }
	@python=$$($(PYTHON) helpers/machine/hub.py shared-python $(HUB_PYTHON)) || exit 1; \
		mkdir -p -m 755 $(HUB_PREFIX) && \
		{ [ -x $(HUB_VENV)/bin/python ] || $$python -m venv $(HUB_VENV); }
	$(HUB_VENV)/bin/python -m pip install --quiet --upgrade pip
	torch_args=$$($(HUB_VENV)/bin/python helpers/machine/torch_build.py \
		$(if $(TORCH),,--local-cpu)) && \
		$(HUB_VENV)/bin/python -m pip install --quiet $$torch_args ".[hub]" \
		$(if $(TORCH),"torch==$(TORCH)")
	$(HUB_VENV)/bin/python -m pip install --quiet --no-deps --force-reinstall .
	rm -rf build
	npm install --silent --no-fund --no-audit --prefix $(HUB_PREFIX)/proxy $(PROXY)
	rm -rf $(HUB_PREFIX)/course.new && mkdir -p $(HUB_PREFIX)/course.new && \
		cp -r notebooks README.md $(HUB_PREFIX)/course.new/ && \
		find $(HUB_PREFIX)/course.new -mindepth 1 -name '.*' -prune -exec rm -rf {} + && \
		rm -rf $(HUB_PREFIX)/course && mv $(HUB_PREFIX)/course.new $(HUB_PREFIX)/course
	$(MAKE) --no-print-directory lab-settings VENV=$(HUB_VENV)
	mkdir -p -m 700 $(HUB_PREFIX)/state
	chmod -R a+rX $(HUB_VENV) $(HUB_PREFIX)/proxy $(HUB_PREFIX)/course
	touch $@

# each learner's share first (a table; a class that cannot work stops here, before any install),
# then the hub, in the foreground (Ctrl-C stops it and every learner's JupyterLab)
hub:
	@$(HUB_ENV) $(PYTHON) helpers/machine/hub.py plan
	@$(MAKE) --no-print-directory hub-install
	@echo "Starting JupyterHub on $(if $(HUB_SSL_CERT),https,http)://$(HUB_IP):$(HUB_PORT) for: $(LEARNERS)"
	cd $(HUB_PREFIX)/state && $(HUB_ENV) $(HUB_VENV)/bin/jupyterhub \
		-f $(CURDIR)/helpers/machine/jupyterhub_config.py

# two learners logged in at once through a real hub and a real browser (root, Chromium, npm,
# openssl; about 2 minutes with its install): notebooks 00 and 02 each, each other's cluster
# probed; and the hub over HTTPS. CI runs it
hub-test: install
	COURSE_HUB_TEST=1 $(PY) -m pytest tests/test_hub.py -s --durations=0 --durations-min=1

# a throwaway Slurm cluster of two nodes on this machine (root; network namespaces), for the
# Slurm tests and for trying the notebooks on Slurm: `make cluster-up && source .cluster/env`
cluster-up:
	bash .ci/slurm-cluster up

cluster-down:
	bash .ci/slurm-cluster down

clean:
	rm -rf $(VENV) *.egg-info
