# Lakestream. `make demo` runs the main job on a file:// store; `make test`
# is the contributor's loop (lint and every package's tests under -race,
# the long runs left out, about 10 minutes on 2 cores); `make test-all` is
# the whole suite, which CI runs.
SHELL := /bin/bash
TOOLS ?= $(CURDIR)/.tools
export LAKEFS_TOOLS := $(TOOLS)
export PATH := $(TOOLS)/bin:$(PATH)
GO ?= go

# Every build, vet and test here (and the binaries tests build) leaves out
# the GCS SDK's gRPC DirectPath (xDS, envoy's control plane), which a
# JSON-API client never uses: the SDK's documented build tag. The
# Dockerfile builds with it too; internal/codecheck's TestBinarySizes keeps
# the binaries within their stated sizes. Tools are installed as their
# authors build them (GOFLAGS= on each go install).
BUILD_TAGS := disable_grpc_modules
export GOFLAGS := -tags=$(BUILD_TAGS) $(GOFLAGS)

.PHONY: all build image test test-all lint fmt-check vet staticcheck unit unit-all pytest tools tools-all demo example bench bench-quick bench-peers soak sim seaweedfs clean

all: build

build:
	$(GO) build -buildvcs=auto -o bin/ ./cmd/...

# The Kubernetes image (Dockerfile); VERSION is what lakefs-csi reports
# (GetPluginInfo, --version).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
IMAGE ?= lakestream/lakestream:$(VERSION)
image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

# What make test needs; make test-all also needs helm (tools-all).
tools: $(TOOLS)/bin/versitygw $(TOOLS)/bin/fake-gcs-server $(TOOLS)/azurite/node_modules/.bin/azurite-blob $(TOOLS)/bin/staticcheck $(TOOLS)/bin/toxiproxy-server
tools-all: tools $(TOOLS)/bin/helm

$(TOOLS)/bin/versitygw:
	GOFLAGS= GOBIN=$(TOOLS)/bin $(GO) install github.com/versity/versitygw/cmd/versitygw@v1.8.0

# The GCS and Azure emulators the store and integration tests start.
# v1.56.0 is the first fake-gcs-server that enforces ifGenerationMatch=0 on
# simple uploads; Azurite 3.36+ needs a newer Node than Debian's 20.
$(TOOLS)/bin/fake-gcs-server:
	GOFLAGS= GOBIN=$(TOOLS)/bin $(GO) install github.com/fsouza/fake-gcs-server@v1.56.1

$(TOOLS)/azurite/node_modules/.bin/azurite-blob:
	command -v npm >/dev/null || { apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null; }
	npm install --silent --no-audit --no-fund --prefix $(TOOLS)/azurite azurite@3.35.0

# The fault-injecting TCP proxy between the chaos run's processes and
# their store (this kernel has no netem). Its installed name is "server".
$(TOOLS)/bin/toxiproxy-server:
	GOFLAGS= GOBIN=$(TOOLS)/toxiproxy $(GO) install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0
	mkdir -p $(TOOLS)/bin && mv $(TOOLS)/toxiproxy/server $@

$(TOOLS)/bin/staticcheck:
	GOFLAGS= GOBIN=$(TOOLS)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

# helm renders deploy/kubernetes's chart in the csi tests (3-7 min to build
# on 2 cores with an empty module cache).
$(TOOLS)/bin/helm:
	GOFLAGS= GOBIN=$(TOOLS)/bin $(GO) install helm.sh/helm/v3/cmd/helm@v3.19.5

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck: $(TOOLS)/bin/staticcheck
	$(TOOLS)/bin/staticcheck -tags $(BUILD_TAGS) ./...

# -short skips what internal/longtest marks long; docs/TESTING.md lists
# what each command runs and the test each guarantee keeps in make test.
unit: tools
	$(GO) test -race -short -timeout 20m ./...

unit-all: tools-all
	$(GO) test -race -timeout 40m ./...

lint: fmt-check vet staticcheck

# The Python package (python/): a virtualenv over Debian's Python, whose
# packages it sees (python3-torch, -numpy, -pytest: no package index is
# reached), the package installed into it as a user would, then its tests
# against the binaries just built, over real kernel mounts.
PYTHON ?= /usr/bin/python3
VENV := $(TOOLS)/venv
pytest: build
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv --system-site-packages $(VENV)
	$(VENV)/bin/pip install --quiet --no-build-isolation --no-deps --no-index ./python
	LAKESTREAM_BIN=$(CURDIR)/bin $(VENV)/bin/python -m pytest -q python/tests

test: lint unit pytest

test-all: lint unit-all pytest

example: build
	./scripts/example.sh

# The chaos run for SOAK (default 20m) of process and network faults on
# versitygw, then on SeaweedFS (built by scripts/seaweedfs.sh on first use,
# ~6 min); SOAK_SERVERS picks others (versitygw, seaweedfs,
# fake-gcs-server, azurite). Each prints a summary table (faults by kind,
# self-exits by role and cause, zombies and how each ended, steps, bytes,
# mismatches, duplicates, losses, longest stall) and every stall over 10 s
# attributed; a stall over 120 s from the store being back, or over 60 s
# from a network fault healing, fails it (docs/RELIABILITY.md, Liveness and
# Network faults).
SOAK ?= 20m
SOAK_SERVERS ?= versitygw,seaweedfs
soak: tools seaweedfs
	set -o pipefail; LAKEFS_SOAK=$(SOAK) LAKEFS_CHAOS_SERVERS=$(SOAK_SERVERS) $(GO) test -race -count=1 -run 'TestChaos$$' -timeout 4h -v ./integration/ | \
		grep --line-buffered -v -e 'INTERNAL ERROR' -e 'IAM service' -e 'signal'

seaweedfs:
	TOOLS=$(TOOLS) ./scripts/seaweedfs.sh

# The protocol simulation (sim/, docs/RELIABILITY.md "Simulation") over
# SEEDS fresh seeds from SIM_FIRST (default: drawn from the time), then a
# table: seeds, simulated hours, commits, faults by kind, invariants
# checked, failures (each with its seed and how to replay it). make test
# runs it for two minutes. About 0.25 s a seed on 2 cores without -race.
SEEDS ?= 1000
SIM_FIRST ?= 0
sim:
	cd sim && $(GO) test -count=1 -timeout 0 -run 'TestSim$$' -seeds $(SEEDS) -first $(SIM_FIRST)

demo: build
	./scripts/demo.sh

# The benchmark report (docs/bench/REPORT.md, rows.json and the PNGs),
# about 71 minutes (projected) on a 2-core VM, loopback only; it prints
# its projection first (--dry-run: only that). BENCH_FLAGS passes flags to the generator
# (bin/lakefs-bench report --help). Re-render without measuring:
# bin/lakefs-bench report --from docs/bench/rows.json.
bench: build tools bench-peers
	bin/lakefs-bench report --out docs/bench $(BENCH_FLAGS)

# A reduced grid with short windows (<= 10 minutes) into bin/bench-quick,
# to check the harness; the committed report is always a full run.
BENCH_QUICK ?= --quick --windows 1 --window 1s --producers 1,4 --payloads 1MiB \
	--repeats 1 --long-run 3s --latency-steps 10 --cost-window 10s
bench-quick: build tools bench-peers
	bin/lakefs-bench report --out bin/bench-quick $(BENCH_QUICK) $(BENCH_FLAGS)

# The read peers the report compares with (Debian packages).
bench-peers:
	@command -v s3fs >/dev/null && command -v rclone >/dev/null || \
		{ apt-get update && apt-get install -y s3fs rclone; }

clean:
	rm -rf bin
