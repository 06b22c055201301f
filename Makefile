# vmesh: the two commands a newcomer needs are `make run` and `make test`.
GO       ?= go
BIN      := bin/vmesh
DATA_DIR ?= .vmesh-data
# Every fuzz target in the tree runs this many executions in `make test`
# (a count, never a duration: see scripts/fuzz.sh).
FUZZ_EXECS ?= 3000x
SHELL       := bash
.SHELLFLAGS := -eo pipefail -c

.PHONY: build run test test-deps test-unit test-tools fuzz fault bench bench-replicas lint fmt demo clean package package-test print-ldflags

# The build names itself (vmesh version, GET /version, vmesh_build_info):
# internal/buildinfo reads these, else the Go toolchain's build info.
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS   = -X github.com/vmesh/vmesh/internal/buildinfo.version=$(VERSION) \
            -X github.com/vmesh/vmesh/internal/buildinfo.revision=$(REVISION) \
            -X github.com/vmesh/vmesh/internal/buildinfo.dirty=$(if $(findstring -dirty,$(VERSION)),true,false)

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/vmesh

print-ldflags:
	@echo '$(LDFLAGS)'

## package: the Debian packages vmesh and vmesh-agent in dist/ (nfpm as a library, tools/package)
package: build
	rm -f dist/*.deb
	cd tools/package && $(GO) test -count=1 ./... && $(GO) run . -binary $(CURDIR)/$(BIN) -version '$(VERSION)' -out $(CURDIR)/dist

## package-test: install, check, verify, remove and purge the packages in a throwaway copy of this
## machine (root; what .ci/run does); then check that doing so leaves an installed vmesh untouched
package-test: package
	VMESH_REVISION=$(REVISION) bash scripts/package-test.sh dist
	bash scripts/package-test-isolation.sh dist

## run: serve the bundled quickstart config (xDS on 127.0.0.1:15010, HTTP on 127.0.0.1:15014)
run:
	$(GO) run -ldflags '$(LDFLAGS)' ./cmd/vmesh serve --config-dir examples/quickstart --data-dir $(DATA_DIR)

## test: install the test dependencies, fuzz every target briefly, then every test with the race detector
## against real ZooKeeper, Consul and git; ends with "N passed, N failed, N skipped" (CI=true: a skip fails)
test: test-deps test-tools fuzz test-unit

test-deps:
	bash scripts/test-deps.sh

# The summary formatter is its own module under tools/, tested first.
test-tools:
	cd tools/testsummary && $(GO) test -count=1 ./... && $(GO) build -o $(CURDIR)/bin/testsummary .

test-unit: test-tools
	PATH="$(CURDIR)/.bin:$$PATH" $(GO) test -json -race -count=1 -timeout 20m ./... | bin/testsummary

fuzz:
	FUZZ_EXECS=$(FUZZ_EXECS) bash scripts/fuzz.sh

## istio-verdicts: rebuild the Istio corpus and Istio's own verdicts on it (tools/istio-oracle; downloads istio.io/istio)
istio-verdicts:
	cd tools/istio-oracle && $(GO) run .

## istio-xds: regenerate Istio's own xDS for the oracle corpus into xds/testdata/istio-oracle (tools/istio-xds-oracle; downloads istio.io/istio)
istio-xds:
	cd tools/istio-xds-oracle && $(GO) run . -out $(CURDIR)/xds/testdata/istio-oracle

## gatewayapi-verdicts: the Kubernetes API server's own validation (k8s.io/apiextensions-apiserver: the Gateway API CRDs' schema and CEL rules) of gatewayapi/testdata/conformance and gatewayapi/testdata/invalid, into gatewayapi/testdata/upstream (tools/gatewayapi-oracle)
.PHONY: gatewayapi-verdicts
gatewayapi-verdicts:
	cd tools/gatewayapi-oracle && $(GO) run . -root $(CURDIR)

## istio-mcp: record Istio's own MCP server's responses to a VirtualService created, changed, deleted into filestore/mcpsource/testdata (tools/istio-mcp-server; downloads istio.io/istio)
istio-mcp:
	cd tools/istio-mcp-server && $(GO) run . record -out $(CURDIR)/filestore/mcpsource/testdata

.PHONY: istio-load-server bench-istio

## istio-load-server: build the load harness's Istio server mode (tools/istio-load-server; downloads istio.io/istio) into bin/
istio-load-server:
	cd tools/istio-load-server && $(GO) build -o $(CURDIR)/bin/istio-load-server .

## bench-istio: vmesh, Istio, and go-control-plane's SnapshotCache and LinearCache+MuxCache side by side, proxyless then Envoy sidecars, then vmesh and Istio with one ingress gateway and 1,000 VirtualServices bound to it (BENCHMARKS.md; ~17 min)
BENCH_ISTIO_FLAGS ?= -services 1000 -endpoints 10 -virtual-services 100 -proxies 100 -changes 5
bench-istio: istio-load-server
	$(GO) build -o bin/vmesh-load ./cmd/vmesh-load
	bin/vmesh-load $(BENCH_ISTIO_FLAGS) -servers vmesh,istio,baseline,linear -istio-server bin/istio-load-server -envoy 0 -json bin/bench-istio-proxyless.json
	bin/vmesh-load $(BENCH_ISTIO_FLAGS) -servers vmesh,istio,baseline,linear -istio-server bin/istio-load-server -envoy 1 -shape sidecar-vm -json bin/bench-istio-sidecars.json
	bin/vmesh-load $(BENCH_ISTIO_FLAGS) -virtual-services 1000 -proxies 10 -servers vmesh,istio -istio-server bin/istio-load-server -envoy 1 -shape router -kinds virtualservice -json bin/bench-istio-router.json

# The fault-injection suite (also part of test-unit): bad input, registry and
# control-plane outages, floods, churn, revocation and memory after departures,
# and the trust-boundary attacks (README "Threat model"): exec probes, JWKS
# fetches, forged shared state, DNS rebinding and a saturated HTTP port,
# capture failing closed while the agent is down, credentials in argv.
FAULT_TESTS := ^(TestFault.*|TestDirSourceDeviceLinkAndHugeFileAreNotRead|TestDirSourceFIFOLeavesFolderLive|TestDirSourceSymlinkLoopLeavesFolderLive|TestDirSourceProblemsAndLogsBounded|TestDecodeProblemsBoundedWithoutDocumentLimit|TestDirSourceEmptyFolderHeld|TestGitSourceRestartDuringOutage|TestGitSourceStalledRemote|TestGitSourceEmptyCommitHeld|TestGitSourceBlobLimits|TestServeRestartDuringGitOutage|TestServeStartsWithBadEntries|TestWebhookFloodBounded|TestWebhookConcurrencyLimited|TestSecureStreamsEndOnRevocationAndExpiry|TestSecureDeltaStreamEndsOnRevocation|TestDepartedProxiesAreFreed|TestInternedNamesAreReleased|TestClosedStreamsLeaveNothingInTheCache|TestTrafficShiftsFailNoCall|TestExecProbe.*|TestEnvoyReadsFreshOutDir|TestAgentExitsOnRevocation|TestAgentPackageKeepsCaptureUntilRemoval|TestUnreadableRevocationListFailsClosed|TestVMInNetns)$$

## fault: only the fault-injection suite, with the race detector
fault: test-tools
	PATH="$(CURDIR)/.bin:$$PATH" $(GO) test -json -race -count=1 -run '$(FAULT_TESTS)' ./filestore/ ./cmd/internal/controlplane/ ./xds/ ./cmd/vmesh/ ./ca/ ./registries/... ./writers/... ./agents/... | bin/testsummary

## bench: Go benchmarks of the hot paths (results go to BENCHMARKS.md)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 3x ./store/ ./filestore/ ./model/ ./xds/... ./ca/ ./registries/... ./writers/... ./internal/cowmap/ ./cmd/vmesh-load/internal/loadgen/
	$(GO) build -o bin/vmesh-load ./cmd/vmesh-load
	bin/vmesh-load -services 1000 -proxies 200 -changes 3 -json bench-load.json

## bench-replicas: three `vmesh serve` processes sharing state through a real ZooKeeper, then a real
## Consul, 1,000 proxyless gRPC proxies on each (build tag replicabench; ~1 min a run; REPLICA_RUNS=3 for medians)
REPLICA_RUNS ?= 1
bench-replicas: test-deps
	PATH="$(CURDIR)/.bin:$$PATH" VMESH_REPLICA_RUNS=$(REPLICA_RUNS) $(GO) test -tags replicabench -count=1 -timeout 60m -run '^TestReplicaLoad$$' -v ./cmd/vmesh-load/internal/loadgen/

## lint: gofmt, go vet and staticcheck (pinned in tools/staticcheck, built into bin/)
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	cd tools/testsummary && $(GO) vet ./...
	cd tools/staticcheck && $(GO) build -o $(CURDIR)/bin/staticcheck honnef.co/go/tools/cmd/staticcheck
	bin/staticcheck ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin dist $(DATA_DIR)

## demo: vmesh + two proxyless gRPC backends + a client printing the live traffic split
demo:
	bash examples/quickstart/demo.sh
