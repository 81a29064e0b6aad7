# Two entry points do all set-up on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install lock system-deps demo test bench clean

# System tools the integration tests and the demo drive: jq, and Debian's Prometheus (server and
# promtool) for the analysis checks (kubectl ships with the image). Never started as a service:
# the demo and the tests run their own on loopback.
system-deps:
	@command -v jq >/dev/null || { (apt-get update -qq && apt-get install -y -qq jq) >/dev/null; }
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus) >/dev/null; }

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

demo: install system-deps
	$(VENV)/bin/rollout demo

# two workers, a test file each at a time: most of a flow test is waiting on kubesim's clock
test: install system-deps
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile

bench: install
	$(PY) bench/kubesim_scale.py

clean:
	rm -rf $(VENV) build *.egg-info
