#!/usr/bin/env bash
# Installs what vmesh's integration tests run against. Idempotent: each step
# is skipped when its result is already there, so `make test-deps` is cheap
# on a prepared machine and complete on a fresh one (CI=true).
#
#   - ZooKeeper: Debian's zookeeperd (Java). Tests start
#     org.apache.zookeeper.server.ZooKeeperServerMain from its jars on a free
#     loopback port; the system service is not needed and is stopped.
#   - Consul: the dev agent built from the Go module proxy as a Go tool
#     (github.com/hashicorp/consul v1.14.11, tools/consul/go.mod) into
#     .bin/consul. About 4 minutes on 2 cores the first time.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

sudo_() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# --- ZooKeeper -------------------------------------------------------------
if [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1; then
	echo "test-deps: zookeeper: present (/usr/share/java/zookeeper.jar)"
else
	echo "test-deps: zookeeper: installing zookeeperd"
	sudo_ apt-get update -q
	sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends zookeeperd
	# Tests run their own servers; the packaged service would hold port 2181.
	if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet zookeeper 2>/dev/null; then
		sudo_ systemctl stop zookeeper || true
	fi
fi

# --- Consul ----------------------------------------------------------------
consul_bin="$root/.bin/consul"
consul_version="v1.14.11"
# Read the whole output (no grep -q, no head): with pipefail, a reader that
# stops early kills the writer with SIGPIPE and fails the pipeline.
if [ -x "$consul_bin" ] && "$consul_bin" version 2>/dev/null | grep "Consul ${consul_version}" >/dev/null; then
	echo "test-deps: consul: present ($consul_bin)"
else
	echo "test-deps: consul: building ${consul_version} into $consul_bin (a few minutes the first time)"
	mkdir -p "$root/.bin"
	(
		cd "$root/tools/consul"
		# go.mod pins the tool; `go get -tool` only when it is missing.
		grep -q '^tool github.com/hashicorp/consul' go.mod ||
			go get -tool "github.com/hashicorp/consul@${consul_version}"
		go build -o "$consul_bin.tmp" github.com/hashicorp/consul
	)
	mv "$consul_bin.tmp" "$consul_bin"
	"$consul_bin" version | sed -n 1p
fi
