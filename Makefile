# lm-assets: `make demo` runs the whole asset graph on the shipped sample crawl; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# CPU wheel by default; on a CUDA machine e.g. TORCH_SPEC="torch==2.13.0 --index-url <your CUDA index>".
TORCH_SPEC ?= torch==2.13.0
DAGSTER_HOME ?= $(CURDIR)/.dagster_home
export DAGSTER_HOME
export OMP_NUM_THREADS ?= 1

.PHONY: install install-dev demo test ui ui-postgres bench bench-smoke sample-crawl quality-model clean

# The package and what it runs on: all that `make demo` and `make ui` need.
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e .
	touch $@

# With the dev extra: the tests' references and servers (pytest, moto, PostgreSQL's binaries, Playwright, PEFT, TRL).
install-dev: $(VENV)/.dev-installed

$(VENV)/.dev-installed: $(VENV)/.installed
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

$(DAGSTER_HOME)/dagster.yaml: deploy/dagster.yaml
	@mkdir -p $(DAGSTER_HOME)
	@cp deploy/dagster.yaml $@

demo: install $(DAGSTER_HOME)/dagster.yaml
	@$(BIN)/python -m lm_assets.app.demo

# Two workers, each taking whole files (a file's tests share its module fixtures). More would not fit
# everywhere: a training test starts up to eight processes. PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= 2
test: install-dev
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile

# The UI's defaults are the sample crawl's profile, which `make demo` runs with (lm_assets/defs/common/sample_defaults.py:
# the offline toxicity model, a small vocabulary, short sequences, the training settings). dagster dev runs under
# lm_assets.app.process_tree, so that a stop (Ctrl-C, or SIGTERM to make's group) ends its webserver, daemon
# and code servers too.
UI_DEFAULTS = LM_ASSETS_LAUNCHPAD_DEFAULTS=$${LM_ASSETS_LAUNCHPAD_DEFAULTS-sample}
DAGSTER_DEV = $(BIN)/python -m lm_assets.app.process_tree -- \
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p $${PORT:-3000}

ui: install $(DAGSTER_HOME)/dagster.yaml
	$(UI_DEFAULTS) $(DAGSTER_DEV)

# The UI and daemon on the production instance's storage (deploy/dagster-production.yaml): a local
# PostgreSQL server (the dev extra's pgserver binaries) under $(POSTGRES_HOME), stopped when the UI exits.
# A shell killed by a signal skips its EXIT trap: Ctrl-C or SIGTERM makes it exit, once the UI has stopped.
# The traps are set before the server starts, so that a stop while it starts stops it too; the stop ignores
# further signals, so that a second Ctrl-C (or make passing SIGTERM on) cannot cut it short.
POSTGRES_HOME ?= $(CURDIR)/.dagster_home_postgres
# The environment is read into a variable first: `eval "$$(...)"` would go on after the server failed, on
# the SQLite instance that DAGSTER_HOME names otherwise; check-instance refuses anything but PostgreSQL.
ui-postgres: install-dev
	@trap 'trap "" INT TERM HUP; $(BIN)/lm-assets postgres-home $(POSTGRES_HOME) --stop' EXIT && \
	trap exit INT TERM HUP && \
	environment="$$($(BIN)/lm-assets postgres-home $(POSTGRES_HOME))" || exit 1; eval "$$environment" && \
	$(BIN)/lm-assets check-instance --postgres && \
	$(UI_DEFAULTS) $(DAGSTER_DEV)

# The bench extra: datatrove, trafilatura, lm-eval and the other packages bench/ imports.
$(VENV)/.bench-installed: $(VENV)/.dev-installed
	$(BIN)/pip install --quiet -e ".[dev,bench]"
	touch $@

bench: $(VENV)/.bench-installed
	$(BIN)/python bench/curation.py

# Every bench script in its tiny mode (seconds each, offline), writing only under a temporary $OUT.
bench-smoke: $(VENV)/.bench-installed
	PYTHON=$(BIN)/python bash bench/smoke.sh

sample-crawl: install
	$(BIN)/python scripts/build_sample_crawl.py --out data/sample-crawl

# The shipped quality classifier, retrained from the labelled pages in lm_assets/quality_model/ (same bytes every time).
quality-model: install
	$(BIN)/python scripts/build_quality_model.py

clean:
	-$(BIN)/lm-assets postgres-home $(POSTGRES_HOME) --stop 2>/dev/null
	rm -rf storage $(DAGSTER_HOME) $(POSTGRES_HOME)
