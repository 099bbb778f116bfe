# Lakestream. `make demo` runs the main job on a file:// store; `make test`
# runs every check CI runs.
SHELL := /bin/bash
TOOLS ?= $(CURDIR)/.tools
export LAKEFS_TOOLS := $(TOOLS)
export PATH := $(TOOLS)/bin:$(PATH)
GO ?= go

.PHONY: all build test lint fmt-check vet staticcheck unit tools demo example bench clean

all: build

build:
	$(GO) build -o bin/ ./cmd/...

tools: $(TOOLS)/bin/versitygw $(TOOLS)/bin/staticcheck

$(TOOLS)/bin/versitygw:
	GOBIN=$(TOOLS)/bin $(GO) install github.com/versity/versitygw/cmd/versitygw@v1.8.0

$(TOOLS)/bin/staticcheck:
	GOBIN=$(TOOLS)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck: $(TOOLS)/bin/staticcheck
	$(TOOLS)/bin/staticcheck ./...

unit: tools
	$(GO) test -race -timeout 30m ./...

lint: fmt-check vet staticcheck

test: lint unit

example: build
	./scripts/example.sh

demo: build
	./scripts/demo.sh

clean:
	rm -rf bin
