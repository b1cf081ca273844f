# The two commands of README.md: `make run` (the product, with its demo) and `make test` (the suite).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The web server's port of `make run`: `PORT=8001 make run` when 8000 is taken.
PORT   ?= 8000

.PHONY: run test install migrate demo docs screenshots clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,docs]"
	touch $(STAMP)

install: $(STAMP)

migrate: install
	$(BIN)/python manage.py migrate --noinput

demo: migrate
	$(BIN)/python manage.py demo

# The demo cluster served by the Kubernetes API emulator, the sync and the web server; Ctrl-C stops all.
run: migrate
	$(BIN)/python manage.py run_demo --port $(PORT) --install-prometheus

# The whole suite in TEST_WORKERS processes (pytest-xdist; each has its own test database, Redis database,
# emulators, Prometheus and browser), each worker given more tests as it finishes (the longest are handed out
# first; a module whose fixtures are made once per module goes whole to one worker: tests/conftest.py); the
# slowest tests printed.
# Bytecode is kept (in .venv/pycache, even where PYTHONDONTWRITEBYTECODE is set): each worker, and every process a
# test starts, would else compile the console and rewrite the tests' asserts again (about 7 s of CPU each).
TEST_WORKERS ?= 3
test: install
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# The documentation (docs/, mkdocs.yml) on http://127.0.0.1:8002, rebuilt as you edit; CI builds it strictly.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:$(or $(DOCS_PORT),8002)

# The documentation's pictures, remade from the demo (Debian's Chromium); commit the PNGs in docs/img/.
screenshots: install
	$(BIN)/python docs/screenshots.py

clean:
	rm -rf $(VENV) db.sqlite3 db.sqlite3-wal db.sqlite3-shm staticfiles site
