#!/usr/bin/env bash
# Installs the Debian packages `make package` built (vmesh, vmesh-agent),
# checks their files, users and units, runs the installed control plane
# from its packaged config once, then removes and purges them, checking what
# each step must keep and must remove. Needs root and dpkg; systemd need not
# be PID 1 (CI, containers). Usage: scripts/package-test.sh [DIST_DIR]
#
# It never touches this machine's installation: it runs itself inside
# scripts/sandbox-root.sh (overlays of /etc, /usr, /var and /root, an empty
# /run, its own network namespace), so a vmesh installed here, configured or
# left in config-files state, keeps its /etc/vmesh, /var/lib/vmesh, users,
# units and capture rules byte for byte (scripts/package-test-isolation.sh
# checks that).
set -euo pipefail
dist=${1:-dist}
fail() { echo "package-test: FAIL: $*" >&2; exit 1; }
step() { echo "package-test: $*"; }

[[ $(id -u) == 0 ]] || fail "needs root (dpkg -i)"
if [[ $dist != --in-sandbox ]]; then
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	dist=$(cd "$dist" && pwd)
	exec "$here/sandbox-root.sh" bash "$here/package-test.sh" --in-sandbox "$dist"
fi
dist=${2:?}
shopt -s nullglob
cp_deb=("$dist"/vmesh_*.deb)
agent_deb=("$dist"/vmesh-agent_*.deb)
shopt -u nullglob
[[ ${#cp_deb[@]} == 1 && ${#agent_deb[@]} == 1 ]] || fail "want one vmesh_*.deb and one vmesh-agent_*.deb in $dist (make package)"

purge() { dpkg -P vmesh vmesh-agent >/dev/null 2>&1 || true; }
serve_pid=
cleanup() {
	if [[ -n $serve_pid ]]; then
		kill "$serve_pid" 2>/dev/null || true
		wait "$serve_pid" 2>/dev/null || true
	fi
	purge
}
trap cleanup EXIT
# Inside the sandbox, a vmesh installed on the machine (or left in
# config-files state) is the sandbox's copy: purge it there and start clean.
purge

step "dpkg -i ${cp_deb[0]} ${agent_deb[0]}"
dpkg -i "${cp_deb[0]}" "${agent_deb[0]}"

step "dpkg -L: the files"
for want in vmesh:/usr/bin/vmesh vmesh:/usr/lib/systemd/system/vmesh.service vmesh:/etc/vmesh/vmesh.yaml vmesh:/etc/vmesh/mesh \
	vmesh-agent:/usr/lib/vmesh-agent/vmesh vmesh-agent:/usr/lib/systemd/system/vmesh-agent.service \
	vmesh-agent:/etc/default/vmesh-agent vmesh-agent:/etc/vmesh/bundle; do
	pkg=${want%%:*} path=${want#*:}
	dpkg -L "$pkg" | grep -qx "$path" || fail "dpkg -L $pkg does not list $path"
	[[ -e $path ]] || fail "$path is listed but not installed"
done
dpkg-query -W -f='${Conffiles}\n' vmesh | grep -q ' /etc/vmesh/vmesh.yaml ' || fail "/etc/vmesh/vmesh.yaml is not a conffile"
dpkg-query -W -f='${Conffiles}\n' vmesh-agent | grep -q ' /etc/default/vmesh-agent ' || fail "/etc/default/vmesh-agent is not a conffile"

step "the system user and its state directory"
uid=$(id -u vmesh) || fail "no vmesh user"
(( uid < 1000 )) || fail "vmesh is not a system user (uid $uid)"
[[ $(getent passwd vmesh | cut -d: -f7) == /usr/sbin/nologin ]] || fail "vmesh has a login shell"
[[ $(stat -c '%U:%G %a' /var/lib/vmesh) == "vmesh:vmesh 750" ]] || fail "/var/lib/vmesh is $(stat -c '%U:%G %a' /var/lib/vmesh)"
[[ $(stat -c '%G %a' /etc/vmesh/vmesh.yaml) == "vmesh 640" ]] || fail "/etc/vmesh/vmesh.yaml is $(stat -c '%G %a' /etc/vmesh/vmesh.yaml)"
[[ $(id -u vmesh-proxy 2>/dev/null) == 1337 ]] || fail "no vmesh-proxy user with UID 1337 (Envoy's, which the capture exempts)"

step "both units enabled, neither started"
for u in vmesh vmesh-agent; do
	[[ -L /etc/systemd/system/multi-user.target.wants/$u.service ]] || fail "$u.service not enabled"
done

step "systemd-analyze verify"
systemd-analyze verify /usr/lib/systemd/system/vmesh.service /usr/lib/systemd/system/vmesh-agent.service

step "unit hardening (systemd-analyze security --offline=yes)"
# has UNIT LINE...: every LINE is a whole line of UNIT.
has() {
	local unit=$1 line
	shift
	for line; do grep -qxF -- "$line" "$unit" || fail "$unit lacks $line"; done
}
# exposure UNIT MAX: systemd's exposure score of UNIT is at most MAX.
exposure() {
	local score
	score=$(systemd-analyze security --offline=yes "$1" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\) .*/\1/p')
	[[ -n $score ]] || fail "no exposure score for $1"
	awk -v s="$score" -v m="$2" 'BEGIN { exit !(s <= m) }' || fail "$1: exposure $score, want at most $2"
	echo "package-test: $1: exposure $score"
}
common=(NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes PrivateDevices=yes PrivateMounts=yes
	ProtectKernelTunables=yes ProtectKernelModules=yes ProtectKernelLogs=yes ProtectControlGroups=yes ProtectClock=yes
	ProtectHostname=yes RestrictNamespaces=yes RestrictSUIDSGID=yes RestrictRealtime=yes LockPersonality=yes
	SystemCallArchitectures=native SystemCallFilter=@system-service)
cp_unit=/usr/lib/systemd/system/vmesh.service agent_unit=/usr/lib/systemd/system/vmesh-agent.service
has "$cp_unit" "${common[@]}" User=vmesh CapabilityBoundingSet= AmbientCapabilities= MemoryDenyWriteExecute=yes \
	"RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX"
# The agent stays UID 0 with five capabilities (the unit says why) and no
# MemoryDenyWriteExecute (Envoy, which it starts, needs W+X memory).
has "$agent_unit" "${common[@]}" "CapabilityBoundingSet=CAP_NET_ADMIN CAP_SETUID CAP_SETGID CAP_KILL CAP_CHOWN" \
	"RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK"
! grep -q '^User=' "$agent_unit" || fail "$agent_unit sets User=: a non-root agent would pass its ambient capabilities to Envoy and probes"
! grep -q '^MemoryDenyWriteExecute=yes' "$agent_unit" || fail "$agent_unit denies W+X memory, which Envoy needs"
exposure "$cp_unit" 2.0
exposure "$agent_unit" 3.5

# status_of HOST:PORT PATH prints the HTTP status of GET PATH (bash only, no curl).
status_of() {
	local line
	exec 3<>"/dev/tcp/${1%:*}/${1##*:}" || return 0
	printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$2" "$1" >&3
	read -r line <&3 || true
	exec 3<&-
	line=${line#* }
	echo "${line%% *}"
}

step "the installed control plane serves from the packaged config, as the vmesh user"
log=$(mktemp)
runuser -u vmesh -- /usr/bin/vmesh serve --config /etc/vmesh/vmesh.yaml \
	--http-addr 127.0.0.1:0 --xds-addr 127.0.0.1:0 --secure-addr 127.0.0.1:0 2>"$log" &
serve_pid=$!
addr=
for _ in $(seq 100); do
	addr=$(sed -n 's/.*"msg":"vmesh serving","http":"\([^"]*\)".*/\1/p' "$log")
	[[ -n $addr ]] && break
	kill -0 "$serve_pid" 2>/dev/null || { cat "$log" >&2; fail "vmesh serve exited"; }
	sleep 0.1
done
[[ -n $addr ]] || { cat "$log" >&2; fail "no vmesh serving line"; }
ready=
for _ in $(seq 100); do
	if [[ $(status_of "$addr" /ready) == 200 ]]; then ready=1; break; fi
	sleep 0.1
done
[[ -n $ready ]] || { cat "$log" >&2; fail "/ready never answered 200"; }
version=$(/usr/bin/vmesh version --server "$addr")
echo "$version"
client=$(sed -n 's/^client: vmesh //p' <<<"$version")
server=$(sed -n "s/^server $addr: vmesh //p" <<<"$version")
[[ -n $client && $client == "$server" ]] || fail "client ($client) and server ($server) differ"
# VMESH_REVISION: the commit the packages were built from (make package-test sets it).
if [[ -n ${VMESH_REVISION:-} ]]; then
	[[ $client == *"(${VMESH_REVISION:0:12}, "* ]] || fail "vmesh version does not name revision $VMESH_REVISION: $client"
fi
kill "$serve_pid"; wait "$serve_pid" || true; serve_pid=
rm -f "$log"
[[ -d /var/lib/vmesh/ca ]] || fail "the CA wrote nothing under /var/lib/vmesh"

step "dpkg -i again (upgrade path; postinst is idempotent)"
dpkg -i "${cp_deb[0]}" "${agent_deb[0]}"
[[ $(id -u vmesh) == "$uid" ]] || fail "the vmesh user changed"

step "dpkg -r: binaries and units go, config and state stay"
echo "# edited by the admin" >>/etc/vmesh/vmesh.yaml
dpkg -r vmesh vmesh-agent
for gone in /usr/bin/vmesh /usr/lib/vmesh-agent/vmesh /usr/lib/systemd/system/vmesh.service /usr/lib/systemd/system/vmesh-agent.service; do
	[[ ! -e $gone ]] || fail "$gone still there after dpkg -r"
done
grep -q "edited by the admin" /etc/vmesh/vmesh.yaml || fail "dpkg -r lost /etc/vmesh/vmesh.yaml"
[[ -e /etc/default/vmesh-agent ]] || fail "dpkg -r lost /etc/default/vmesh-agent"
[[ -d /var/lib/vmesh/ca ]] || fail "dpkg -r removed the state in /var/lib/vmesh"
for p in vmesh vmesh-agent; do
	[[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$p") == "rc " ]] || fail "$p is not in config-files state after dpkg -r"
done

step "dpkg -P: config, state, user and enablement go"
dpkg -P vmesh vmesh-agent
for gone in /var/lib/vmesh /etc/vmesh /etc/default/vmesh-agent \
	/etc/systemd/system/multi-user.target.wants/vmesh.service /etc/systemd/system/multi-user.target.wants/vmesh-agent.service; do
	[[ ! -e $gone && ! -L $gone ]] || fail "$gone still there after dpkg -P"
done
! getent passwd vmesh >/dev/null || fail "the vmesh user is still there after dpkg -P"
! getent group vmesh >/dev/null || fail "the vmesh group is still there after dpkg -P"
! getent passwd vmesh-proxy >/dev/null || fail "the vmesh-proxy user is still there after dpkg -P"
! dpkg -s vmesh >/dev/null 2>&1 || fail "dpkg still knows vmesh"
step "ok"
