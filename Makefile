# Two entry points do all set-up on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install lock system-deps demo check test bench clean

# System tools the integration tests and the demo drive: jq, Debian's Prometheus (server and
# promtool) for the analysis checks, and PostgreSQL for a Prefect server under a fleet's load
# (kubectl ships with the image), at the versions pinned in system-packages.lock. Neither server is
# started as a service: the demo, the tests and the benchmarks run their own on loopback.
SYSTEM_PINS = $$(grep -v '^\#' system-packages.lock)
system-deps:
	@missing=$$(for pin in $(SYSTEM_PINS); do \
	  [ "$$(dpkg-query -W -f='$${Package}=$${Version}' "$${pin%%=*}" 2>/dev/null)" = "$$pin" ] || echo "$$pin"; done); \
	[ -z "$$missing" ] || { echo "installing $$missing" && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --allow-downgrades $$missing >/dev/null; }

# exactly the versions in uv.lock (a fresh machine installs what CI tested); `make lock` refreshes it
$(STAMP): pyproject.toml uv.lock
	@command -v uv >/dev/null || python3 -m pip install -q 'uv>=0.5'
	UV_COMPILE_BYTECODE=1 UV_PROJECT_ENVIRONMENT=$(VENV) uv sync -q --frozen --extra dev --python python3.11
	@touch $(STAMP)

install: $(STAMP)

# re-resolve every dependency within pyproject.toml's ranges and rewrite uv.lock (commit it)
lock:
	@command -v uv >/dev/null || python3 -m pip install -q 'uv>=0.5'
	uv lock --upgrade
	@apt-get update -qq && for pin in $(SYSTEM_PINS); do \
	  pkg=$${pin%%=*}; echo "$$pkg=$$(apt-cache policy $$pkg | awk '/Candidate:/ {print $$2}')"; done > system-packages.pins && \
	  { grep '^#' system-packages.lock; cat system-packages.pins; } > system-packages.new && \
	  mv system-packages.new system-packages.lock && rm system-packages.pins

demo: install system-deps
	$(VENV)/bin/rollout demo

# the inner loop, a minute or two: the pure core, the gateway against its fake API server, the
# twin validators, the agent's and the CLI's in-process tests and the import contracts, every
# property on a small sample (the `check` hypothesis profile), then mypy --strict with its
# incremental cache (tests/test_types.py, which `make test` runs, starts from an empty one); what
# is marked slow or needs a kubesim, a Prefect API or a Prometheus is left to `make test` (the
# markers: tests/conftest.py, pyproject.toml)
CHECK_TESTS = tests/core tests/gateway tests/twins tests/agent tests/cli tests/test_import_contracts.py \
	tests/test_gateway_seam.py
CHECK_MARKERS = not slow and not kubesim and not prefect and not prometheus
check: install
	HYPOTHESIS_PROFILE=check $(PY) -m pytest -q -p no:cacheprovider -n 2 -m "$(CHECK_MARKERS)" $(CHECK_TESTS)
	$(PY) -m mypy

# eight workers, a test file each at a time: most of a flow test waits on kubesim's clock, so a
# clean clone's run used 160-175 % of the two CPUs with six (24-25 min), seven (21-22) and eight (18-20);
# the long files start first (tests/conftest.py's order, which xdist keeps only with
# --no-loadscope-reorder); `--durations` names the slowest. First, once, the byte code of our
# packages and pytest's rewritten test modules, which each worker and each `rollout` the tests
# start would otherwise compile again where PYTHONDONTWRITEBYTECODE is set (a worker's collection:
# 11 CPU-seconds without them, 5 with)
test: install system-deps
	PYTHONDONTWRITEBYTECODE= $(PY) -m compileall -q rollout rollout_cli flows kubesim kubelet_rollout_agent >/dev/null
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -p no:cacheprovider --collect-only -m "not prefect" >/dev/null
	$(PY) -m pytest -q -p no:cacheprovider -n 8 --dist loadfile --no-loadscope-reorder --durations=25

bench: install
	$(PY) bench/kubesim_scale.py

clean:
	rm -rf $(VENV) build *.egg-info
