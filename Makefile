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

.PHONY: install lab test unit notebooks lint outputs check clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

install: $(STAMP)

lab: install
	@echo "Starting JupyterLab on 127.0.0.1:$(PORT); open the URL it prints (Ctrl-C twice to stop)."
	IPP_NONINTERACTIVE= $(VENV)/bin/jupyter lab --ip=127.0.0.1 --port=$(PORT) \
		--ServerApp.root_dir=notebooks $(ALLOW_ROOT)

lint: install
	$(VENV)/bin/ruff check helpers tests notebooks benchmarks

unit: install
	$(PY) -m pytest tests

notebooks: install
	$(PY) -m pytest --nbval --nbval-current-env --nbval-cell-timeout=240 \
		--nbval-sanitize-with tests/sanitize.cfg $(NOTEBOOKS)

test: lint
	$(PY) -m pytest tests --nbval --nbval-current-env --nbval-cell-timeout=240 \
		--nbval-sanitize-with tests/sanitize.cfg $(NOTEBOOKS)

# the day before a workshop: is this machine ready? (a table; exit status 1 on a blocker)
check: install
	$(PY) -m helpers.preflight

# re-execute notebooks in place after editing them (NB=path to do one)
outputs: install
	$(PY) tests/execute_notebooks.py $(or $(NB),$(NOTEBOOKS))

clean:
	rm -rf $(VENV) *.egg-info
