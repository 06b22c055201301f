#!/usr/bin/env bash
# Runs a command as root in a throwaway copy of this machine: a private mount
# and network namespace where /etc, /usr, /var and /root are overlays of the
# machine's own (writes land in a temporary directory, deleted afterwards),
# /run is empty (no systemd, no daemons' sockets are reachable) and only a
# loopback interface exists. dpkg, useradd, systemctl, nft and iptables run
# inside it change nothing of the real installation. Sandboxes nest (the
# overlays stack). Usage: scripts/sandbox-root.sh COMMAND [ARG...]
set -euo pipefail
fail() { echo "sandbox-root: $*" >&2; exit 1; }
(( $# > 0 )) || fail "usage: $0 COMMAND [ARG...]"
[[ $(id -u) == 0 ]] || fail "needs root (mount and network namespaces)"
for tool in unshare mount ip; do
	command -v "$tool" >/dev/null || fail "needs $tool"
done

upper=$(mktemp -d "${TMPDIR:-/tmp}/vmesh-sandbox.XXXXXX")
trap 'rm -rf "$upper"' EXIT

# The mounts live and die with the namespace: when the command ends, the
# overlays are gone and only $upper, removed above, held their writes.
setup='set -e
for d in etc usr var root; do
	mkdir -p "$SANDBOX_UPPER/$d" "$SANDBOX_UPPER/$d.work"
	mount -t overlay overlay -o "lowerdir=/$d,upperdir=$SANDBOX_UPPER/$d,workdir=$SANDBOX_UPPER/$d.work" "/$d"
done
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/lock
ip link set lo up
exec "$@"'
rc=0
SANDBOX_UPPER=$upper unshare --mount --net --propagation private -- bash -c "$setup" sandbox-root "$@" || rc=$?
exit "$rc"
