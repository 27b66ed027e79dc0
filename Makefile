# The two commands: `make demo` and `make test`. Both set up .venv on a fresh machine first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench setup chromium docs

# Each step says what it does first: the quiet installs take minutes on a first run.
$(BIN)/streampart: pyproject.toml
	@echo "setting up $(VENV) (first run: ~3 min; again only when pyproject.toml changes)"
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv
	@echo "installing streampart and its dependencies (pyspark, deltalake, …) into $(VENV) …"
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e ".[dev]"
	@# Precompiled at install: the image sets PYTHONDONTWRITEBYTECODE=1, so a module without a .pyc
	@# is compiled again by every process that imports it — every Spark Python worker included.
	@# A .pyc older than its source is ignored (compiled in memory), so nothing depends on these.
	@echo "precompiling streampart's modules …"
	$(BIN)/python -m compileall -q ingest metastore scheduler streampart
	@# The Spark driver's class archive (streampart/class_archive.py): Spark starts in ~40% less CPU.
	@# It says what it does and how long it may take; without one (out of time, a JDK without
	@# dynamic archives) it says why and how to build it again, and the set-up goes on.
	$(BIN)/python -m streampart.class_archive
	touch $(BIN)/streampart

# The Delta Sharing client the tests read shares with (tests/catalogs): a virtualenv of its own, as
# delta-sharing pins pyarrow <= 23 and the project's pyarrow is newer.
SHARING_VENV := .venv-sharing
$(SHARING_VENV)/bin/delta-sharing-ready: $(BIN)/streampart
	@echo "setting up $(SHARING_VENV): the Delta Sharing client the tests read shares with …"
	test -x $(SHARING_VENV)/bin/python || $(PY) -m venv $(SHARING_VENV)
	$(BIN)/uv pip install --quiet --python $(SHARING_VENV)/bin/python "delta-sharing==1.4.2"
	touch $@

setup: $(BIN)/streampart $(SHARING_VENV)/bin/delta-sharing-ready

demo: setup
	$(BIN)/streampart demo

# The status page's tests drive Debian's Chromium (headless): installed here when missing, as root.
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		echo "chromium is missing and cannot be installed here: the status page's tests will fail"

# Three workers (pytest-xdist) on two cores, a test file each at a time: each has its own
# SparkSession, broker and clusters (session fixtures), and a file's module fixtures stay on one
# worker. A third worker fills the cores while another waits (for a lease, an outage, a process
# starting): 13 min instead of 17 on the build machine. The slowest 25 tests and the suite's time
# are printed last.
test: setup chromium
	$(BIN)/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder --durations=25

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

bench: setup
	$(BIN)/python -m bench

# The documentation site (mkdocs.yml), built strictly into site/: a broken link, a missing anchor or a
# page left out of the navigation fails it. Its generated pages come from the code first.
docs: setup
	$(BIN)/python -m streampart.config_reference > docs/configuration.md
	$(BIN)/python -m streampart.reference_docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
