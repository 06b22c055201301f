# Shared by the examples' run.sh scripts (source it after `cd` to the
# repository root). It defines step/fail/missing, a work directory removed
# on exit with every process whose pid is added to pids, helpers to wait for
# ports, commands, split lines and /debug/config objects, and the ports:
# servers that can bind port 0 do and print what they got (vmesh's "vmesh
# serving" log line, the backends' "serving" lines); the others get ports
# the kernel picked a moment before they start (freeport).
#
# A failing script prints the command that failed and the last 30 lines of
# vmesh's log ($work/vmesh.log).

set -E # the ERR trap below also fires inside functions
step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
# missing: a test dependency is absent; exit 77 so the Go test can tell.
missing() { echo "MISSING: $* (install with: make test-deps)" >&2; exit 77; }

work=$(mktemp -d)
pids=()
cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && [ -s "$work/vmesh.log" ]; then
    echo "--- the last 30 lines of vmesh's log ($work/vmesh.log):" >&2
    tail -n 30 "$work/vmesh.log" >&2
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
trap 'echo "FAIL: \`$BASH_COMMAND\` exited $? (${BASH_SOURCE[0]}:$LINENO)" >&2' ERR

# freeport [N]: N loopback TCP ports (default 1) the kernel picked, one per
# line, released just before it returns. Give each to its server at once.
freeport() {
  [ -x "$work/freeport" ] || go build -o "$work/freeport" ./examples/internal/freeport
  "$work/freeport" "${1:-1}"
}
# start_retrying NAME LOG START READY: for servers that cannot bind port 0.
# START starts one in the background on ports freeport just gave and sets
# server_pid; READY tells it answers. Up to 30 s for READY; a server that
# exits first most likely lost a port to another process meanwhile, so START
# runs again, three times at most.
start_retrying() {
  local name=$1 log=$2 start=$3 ready=$4 try
  for try in 1 2 3; do
    "$start"
    for _ in $(seq 300); do
      "$ready" 2>/dev/null && return 0
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$server_pid" 2>/dev/null && { tail -20 "$log" || true; fail "$name did not answer within 30 s"; }
    tail -3 "$log" 2>/dev/null || true
    echo "$name exited at start (try $try of 3)"
  done
  tail -20 "$log" 2>/dev/null || true
  fail "$name exited at start three times"
}
# until_ok TRIES CMD...: run CMD every 0.1s until it succeeds.
until_ok() {
  local n=$1; shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}
# listening LOG REGEX: wait (up to 30s) for a line of LOG matching REGEX,
# whose first parenthesised group is an address; print the address.
listening() {
  local line
  for _ in $(seq 300); do
    line=$(grep -Em1 "$2" "$1" 2>/dev/null || true)
    if [[ $line =~ $2 ]]; then echo "${BASH_REMATCH[1]}"; return 0; fi
    sleep 0.1
  done
  cat "$1" >&2
  fail "no line matching /$2/ in $1"
}
# start_vmesh ARGS...: start vmesh serve on ports of the kernel's choosing,
# logging to $work/vmesh.log, and set HTTP, XDS and SECURE to the addresses
# its "vmesh serving" line names.
start_vmesh() {
  "$work/vmesh" serve --http-addr 127.0.0.1:0 --xds-addr 127.0.0.1:0 --secure-addr 127.0.0.1:0 \
    --log-level info "$@" > "$work/vmesh.log" 2>&1 &
  pids+=($!)
  local line
  line=$(listening "$work/vmesh.log" '("msg":"vmesh serving".*)')
  HTTP=$(sed -E 's/.*"http":"([^"]+)".*/\1/' <<<"$line")
  XDS=$(sed -E 's/.*"xds":"([^"]+)".*/\1/' <<<"$line")
  SECURE=$(sed -E 's/.*"secure":"([^"]+)".*/\1/' <<<"$line")
  echo "vmesh: http $HTTP, xds $XDS, secure $SECURE"
}
# warnings: vmesh's log lines at WARN and ERROR.
warnings() { grep -E '"level":"(WARN|ERROR)"' "$work/vmesh.log" || true; }
# wait_split PATTERN [LOG]: wait (up to 20s) for the last line of LOG
# (default $work/client.log) to match PATTERN.
wait_split() {
  local log=${2:-$work/client.log}
  for _ in $(seq 200); do
    tail -n 1 "$log" | grep -Eq "$1" && { tail -n 1 "$log"; return 0; }
    sleep 0.1
  done
  cat "$log"
  fail "no split line matching /$1/ in $log"
}
# objects [KIND]: one line per object in vmesh's /debug/config at $HTTP.
objects() { curl -fs "$HTTP/debug/config?kind=${1:-}" | awk -f examples/debug-config.awk; }
