#!/usr/bin/env bash
# Checks that scripts/package-test.sh never touches a real installation. In a
# sandbox of its own (scripts/sandbox-root.sh) it makes a machine where the
# packages are installed and configured, with an edited config and a CA in
# /var/lib/vmesh, runs package-test.sh there, and compares /etc/vmesh,
# /var/lib/vmesh, /etc/default/vmesh-agent, the users and dpkg's state before
# and after, byte for byte; then the same with the packages removed but not
# purged (config-files state), which an earlier package-test purged.
# Needs root. Usage: scripts/package-test-isolation.sh [DIST_DIR]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fail() { echo "package-test-isolation: FAIL: $*" >&2; exit 1; }
step() { echo "package-test-isolation: $*"; }

if [[ ${1:-} != --in-sandbox ]]; then
	dist=$(cd "${1:-dist}" && pwd)
	exec "$here/sandbox-root.sh" bash "$here/package-test-isolation.sh" --in-sandbox "$dist"
fi
dist=${2:?}
cp_deb=("$dist"/vmesh_*.deb)
agent_deb=("$dist"/vmesh-agent_*.deb)

# state prints everything of an installation that package-test must leave
# alone: every path under the config and state directories with its mode,
# owner and size, every file's digest, the users, and dpkg's view.
state() {
	local p
	for p in /etc/vmesh /var/lib/vmesh /etc/default/vmesh-agent; do
		[[ -e $p ]] || { echo "absent $p"; continue; }
		find "$p" -printf '%p %M %u:%g %s %l\n' | sort
		find "$p" -type f -print0 | sort -z | xargs -0 -r sha256sum
	done
	getent passwd vmesh vmesh-proxy || true
	getent group vmesh || true
	dpkg-query -W -f='${Package} ${db:Status-Abbrev} ${Version}\n' vmesh vmesh-agent 2>/dev/null || true
}

# unchanged_by_package_test LABEL runs package-test.sh and fails when the
# installation's state differs afterwards.
unchanged_by_package_test() {
	local before after
	before=$(state)
	step "$1: package-test.sh on this installation"
	bash "$here/package-test.sh" "$dist" >/dev/null || fail "$1: package-test.sh failed"
	after=$(state)
	if [[ $before != "$after" ]]; then
		diff <(echo "$before") <(echo "$after") >&2 || true
		fail "$1: package-test.sh changed the installation (diff above)"
	fi
	step "$1: unchanged ($(wc -l <<<"$before") lines of state compared)"
}

step "an installed, configured vmesh with an edited config and a CA"
dpkg -i "${cp_deb[0]}" "${agent_deb[0]}" >/dev/null
echo "# edited by the admin" >>/etc/vmesh/vmesh.yaml
install -d -o vmesh -g vmesh -m 0700 /var/lib/vmesh/ca
head -c 64 /dev/urandom | install -o vmesh -g vmesh -m 0600 /dev/stdin /var/lib/vmesh/ca/root-key.pem
for p in vmesh vmesh-agent; do
	[[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$p") == "ii " ]] || fail "$p is not installed and configured"
done
unchanged_by_package_test "installed"

step "the same packages removed, config and state left (config-files state)"
dpkg -r vmesh vmesh-agent >/dev/null
for p in vmesh vmesh-agent; do
	[[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$p") == "rc " ]] || fail "$p is not in config-files state"
done
unchanged_by_package_test "config-files"
step "ok"
