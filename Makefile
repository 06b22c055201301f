# vmesh: the two commands a newcomer needs are `make run` and `make test`.
GO       ?= go
BIN      := bin/vmesh
DATA_DIR ?= .vmesh-data
# Fuzz targets run briefly in `make test`: package:Target.
FUZZ_TARGETS := ./filestore:FuzzDecode ./ca:FuzzVerifyToken ./ca:FuzzCheckCSR ./xds:FuzzDecodeDiscoveryRequest
FUZZ_TIME    ?= 10s

.PHONY: build run test test-deps test-unit fuzz bench lint fmt demo clean

build:
	$(GO) build -o $(BIN) ./cmd/vmesh

## run: serve the bundled quickstart config (xDS on 127.0.0.1:15010, HTTP on 127.0.0.1:15014)
run:
	$(GO) run ./cmd/vmesh serve --config-dir examples/quickstart --data-dir $(DATA_DIR)

## test: every test with the race detector, against real ZooKeeper, Consul and git, then a short fuzz of each target
test: test-deps test-unit fuzz

test-deps:
	bash scripts/test-deps.sh

test-unit:
	PATH="$(CURDIR)/.bin:$$PATH" $(GO) test -race -count=1 -timeout 20m ./...

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		if grep -rqs "func $$name(" $$pkg/*_test.go; then \
			echo "fuzz $$pkg $$name ($(FUZZ_TIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZ_TIME) -fuzzminimizetime 10x $$pkg; \
		else echo "fuzz target $$name missing in $$pkg"; exit 1; fi; \
	done

## bench: Go benchmarks of the hot paths (results go to BENCHMARKS.md)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 3x ./filestore/ ./model/ ./xds/... ./ca/ ./registries/... ./internal/cowmap/ ./internal/loadgen/
	$(GO) build -o bin/vmesh-load ./cmd/vmesh-load
	bin/vmesh-load -services 1000 -proxies 200 -changes 3 -json bench-load.json

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin $(DATA_DIR)

## demo: vmesh + two proxyless gRPC backends + a client printing the live traffic split
demo:
	bash examples/quickstart/demo.sh
