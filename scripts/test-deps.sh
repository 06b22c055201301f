#!/usr/bin/env bash
# Installs what vmesh's integration tests run against. Idempotent: each step
# is skipped when its result is already there, so `make test-deps` is cheap
# on a prepared machine and complete on a fresh one (CI=true).
#
#   - ZooKeeper: Debian's zookeeperd (Java). Tests start
#     org.apache.zookeeper.server.ZooKeeperServerMain from its jars on a free
#     loopback port; the system service is not needed and is stopped.
#   - iproute2 (ip): the vm-fleet guide's test makes its hosts with it.
#   - nftables, iptables, bind9-dnsutils (nft, iptables-save, dig): the
#     agent's capture and DNS tests (agents/capture, agents/dnsproxy) install
#     real rules in network namespaces and query the DNS proxy with dig.
#   - Chromium: Debian's chromium (/usr/bin/chromium), the headless browser
#     the web console's test (cmd/internal/console) drives through chromedp.
#   - Prometheus: Debian's prometheus (/usr/bin/prometheus). The console's
#     graph test (cmd/internal/console) runs it on a free loopback port with
#     its storage in a temporary directory, scraping grpc-go apps; the
#     packaged service is not needed and is stopped.
#   - Node.js and npm (Debian's nodejs, npm when missing; grpc-js-xds asks
#     for node >= 10.10), then `npm ci` in tools/grpc-node: the pinned
#     @grpc/grpc-js and @grpc/grpc-js-xds the grpc-node end-to-end test
#     (xds/grpc/grpcnode_e2e_test.go) runs.
#   - Consul: the dev agent built from the Go module proxy as a Go tool
#     (github.com/hashicorp/consul v1.14.11, tools/consul/go.mod). It is built
#     once per machine into a cache outside the clone, keyed by version
#     ($VMESH_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/vmesh), and linked
#     as .bin/consul. About 4 minutes on 2 cores the first time.
#
# Every step prints what it does and how long it took; a long build prints a
# line every 30 seconds so a slow machine is never silent.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
start=$SECONDS

sudo_() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
# say MESSAGE: a progress line with the time since test-deps started.
say() { printf 'test-deps [%3ds]: %s\n' "$((SECONDS - start))" "$*"; }
# step NAME CMD...: run CMD, printing NAME when it starts, every 30 s while it
# runs, and with its duration when it ends; its output is shown only if it fails.
step() {
	local name=$1 t0=$SECONDS log rc=0 pid
	shift
	log=$(mktemp)
	say "$name ..."
	"$@" >"$log" 2>&1 &
	pid=$!
	while ! wait_for "$pid" 30; do say "$name: still running ($((SECONDS - t0))s)"; done
	wait "$pid" || rc=$?
	if [ "$rc" -ne 0 ]; then
		tail -n 40 "$log" >&2
		rm -f "$log"
		say "$name: FAILED after $((SECONDS - t0))s (exit $rc)"
		exit "$rc"
	fi
	rm -f "$log"
	say "$name: done in $((SECONDS - t0))s"
}
# wait_for PID SECONDS: true once PID has exited, false after SECONDS.
wait_for() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
	done
	return 1
}

# --- ZooKeeper -------------------------------------------------------------
if [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1; then
	say "zookeeper: present (/usr/share/java/zookeeper.jar)"
else
	step "zookeeper: apt-get update" sudo_ apt-get update -q
	step "zookeeper: apt-get install zookeeperd" \
		sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends zookeeperd
	# Tests run their own servers; the packaged service would hold port 2181.
	if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet zookeeper 2>/dev/null; then
		sudo_ systemctl stop zookeeper || true
	fi
fi

# --- iproute2 --------------------------------------------------------------
# examples/vm-fleet runs its guide in network namespaces (ip netns, veths, a
# bridge); unshare and nsenter come with util-linux, dpkg is essential.
if command -v ip >/dev/null 2>&1; then
	say "iproute2: present ($(command -v ip))"
else
	step "iproute2: apt-get update" sudo_ apt-get update -q
	step "iproute2: apt-get install iproute2" \
		sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends iproute2
fi

# --- nftables, iptables, dig ---------------------------------------------
# agents/capture tests both backends (nft, and iptables-legacy/-nft) and list
# what is left with nft list ruleset / iptables-save; the DNS tests run dig.
missing=()
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v iptables-save >/dev/null 2>&1 || missing+=(iptables)
command -v dig >/dev/null 2>&1 || missing+=(bind9-dnsutils)
if [ "${#missing[@]}" -eq 0 ]; then
	say "nft, iptables, dig: present"
else
	step "capture tools: apt-get update" sudo_ apt-get update -q
	step "capture tools: apt-get install ${missing[*]}" \
		sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# --- Chromium --------------------------------------------------------------
# cmd/internal/console's browser test runs it headless, offline, with a fresh
# profile; nothing else of the browser is needed.
if [ -x /usr/bin/chromium ]; then
	say "chromium: present (/usr/bin/chromium)"
else
	step "chromium: apt-get update" sudo_ apt-get update -q
	step "chromium: apt-get install chromium" \
		sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
fi

# --- Prometheus ------------------------------------------------------------
# The console's graph test runs the real server against grpc-go apps'
# OpenTelemetry metrics; it starts its own, so the packaged service (which
# would hold port 9090 and scrape this machine) is stopped.
if [ -x /usr/bin/prometheus ]; then
	say "prometheus: present (/usr/bin/prometheus)"
else
	step "prometheus: apt-get update" sudo_ apt-get update -q
	step "prometheus: apt-get install prometheus" \
		sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus
	if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
		sudo_ systemctl stop prometheus || true
	fi
fi

# --- Node.js, npm, grpc-node ---------------------------------------------
missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -eq 0 ]; then
	say "node, npm: present ($(node --version), npm $(npm --version))"
else
	step "node: apt-get update" sudo_ apt-get update -q
	step "node: apt-get install ${missing[*]}" \
		sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# npm ci installs exactly package-lock.json; skipped when it already has
# (npm's record of the install is newer than the lock file).
gn="$root/tools/grpc-node"
if [ -f "$gn/node_modules/@grpc/grpc-js-xds/package.json" ] && [ "$gn/node_modules/.package-lock.json" -nt "$gn/package-lock.json" ]; then
	say "grpc-node: present (tools/grpc-node/node_modules)"
else
	step "grpc-node: npm ci (tools/grpc-node)" npm ci --prefix "$gn" --no-audit --no-fund
fi

# --- Consul ----------------------------------------------------------------
consul_version="v1.14.11"
cache="${VMESH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmesh}/consul-${consul_version}"
cached="$cache/consul"
# Read the whole output (no grep -q, no head): with pipefail, a reader that
# stops early kills the writer with SIGPIPE and fails the pipeline.
consul_ok() { [ -x "$1" ] && "$1" version 2>/dev/null | grep "Consul ${consul_version}" >/dev/null; }
if consul_ok "$cached"; then
	say "consul: present ($cached)"
else
	say "consul: building ${consul_version} into $cached (a few minutes the first time)"
	mkdir -p "$cache"
	cd "$root/tools/consul"
	# go.mod pins the tool; `go get -tool` only when it is missing.
	grep -q '^tool github.com/hashicorp/consul' go.mod ||
		step "consul: go get -tool" go get -tool "github.com/hashicorp/consul@${consul_version}"
	step "consul: download modules" go mod download
	step "consul: go build" go build -o "$cached.tmp" github.com/hashicorp/consul
	mv "$cached.tmp" "$cached"
	cd "$root"
	say "consul: $("$cached" version | sed -n 1p)"
fi
mkdir -p "$root/.bin"
ln -sfn "$cached" "$root/.bin/consul"
say "consul: $root/.bin/consul -> $cached"
say "ready"
