# Two entry points do all set-up on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install system-deps demo test bench clean

# System tools the integration tests drive: jq (kubectl ships with the image).
system-deps:
	@command -v jq >/dev/null || { (apt-get update -qq && apt-get install -y -qq jq) >/dev/null; }

$(STAMP): pyproject.toml
	@command -v uv >/dev/null || python3 -m pip install -q uv
	uv venv -q --allow-existing $(VENV) --python python3.11
	UV_COMPILE_BYTECODE=1 uv pip install -q --python $(PY) -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/rollout demo

# two workers, a test file each at a time: most of a flow test is waiting on kubesim's clock
test: install system-deps
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile

bench: install
	$(PY) bench/kubesim_scale.py

clean:
	rm -rf $(VENV) build *.egg-info
