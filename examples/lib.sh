# Shared by the examples' run.sh scripts (source it after `cd` to the
# repository root). It defines step/fail/missing, a work directory removed
# on exit with every process whose pid is added to pids, and helpers to wait
# for ports, commands, split lines and /debug/config objects.

step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
# missing: a test dependency is absent; exit 77 so the Go test can tell.
missing() { echo "MISSING: $* (install with: make test-deps)" >&2; exit 77; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# freeport prints a loopback TCP port nothing listens on, below the kernel's
# ephemeral range (32768-60999) so no outgoing connection can be holding it.
freeport() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 12000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  fail "no free port"
}
# until_ok TRIES CMD...: run CMD every 0.1s until it succeeds.
until_ok() {
  local n=$1; shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}
# wait_split PATTERN: wait (up to 20s) for a line of $work/client.log
# matching PATTERN.
wait_split() {
  for _ in $(seq 200); do
    tail -n 1 "$work/client.log" | grep -Eq "$1" && { tail -n 1 "$work/client.log"; return 0; }
    sleep 0.1
  done
  cat "$work/client.log"
  fail "no split line matching /$1/"
}
# objects [KIND]: one line per object in vmesh's /debug/config at $HTTP.
objects() { curl -fs "$HTTP/debug/config?kind=${1:-}" | awk -f examples/debug-config.awk; }
