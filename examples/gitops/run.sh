#!/usr/bin/env bash
# GitOps with vmesh: a local git repository is the source of truth. A branch
# changes routing; `vmesh diff` shows which proxies it changes before the
# merge; after the merge and a webhook, `vmesh status` shows every proxy
# running the new commit. The script checks its own output and exits 1 on a
# mismatch.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/lib.sh
# Every port is the kernel's choice: vmesh binds port 0 and prints what it
# got; the greeter backends, whose ports go into the repository before they
# start, get ports freeport just released.

step "build"
go build -o "$work/vmesh" ./cmd/vmesh
go build -o "$work/demo" ./examples/quickstart/demo

step "a git repository holding the quickstart config"
repo="$work/mesh-config"
mkdir -p "$repo/mesh"
cp examples/quickstart/config/*.yaml "$repo/mesh/"
backend_ports=($(freeport 2))
V1=127.0.0.1:${backend_ports[0]}
V2=127.0.0.1:${backend_ports[1]}
sed -i "s/grpc: 18061/grpc: ${V1##*:}/; s/grpc: 18062/grpc: ${V2##*:}/" "$repo/mesh/workloads.yaml"
git -C "$repo" init --quiet --initial-branch=main
git -C "$repo" -c user.email=ops@example.com -c user.name=ops add -A
git -C "$repo" -c user.email=ops@example.com -c user.name=ops commit --quiet -m "greeter: 80/20"
first=$(git -C "$repo" rev-parse --short=12 HEAD)
echo "main is at $first"

step "vmesh serving the repository (poll every 10m: only the webhook brings changes in time)"
start_vmesh --git-repo "$repo" --git-ref main --git-path mesh --git-interval 10m --data-dir "$work/data"
until_ok 300 curl -fs "$HTTP/ready" || fail "vmesh never became ready"

step "greeter backends and a client, connected through vmesh"
"$work/demo" --xds "$XDS" --v1-addr "$V1" --v2-addr "$V2" --duration 60s --every 2s > "$work/demo.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do grep -q " calls, " "$work/demo.log" 2>/dev/null && break; sleep 0.1; done
grep -q " calls, " "$work/demo.log" || { cat "$work/demo.log"; fail "the client never got through"; }
"$work/vmesh" status --server "$HTTP"

step "a branch shifting greeter to 50/50: what will it change?"
git -C "$repo" checkout --quiet -b canary
sed -i 's/weight: 80/weight: 50/; s/weight: 20/weight: 50/' "$repo/mesh/greeter.yaml"
git -C "$repo" -c user.email=dev@example.com -c user.name=dev commit --quiet -am "greeter: 50/50"
# The gate a pull request's CI runs: exit 1 when some proxy's config changes.
gate=0
"$work/vmesh" diff --exit-code --git-repo "$repo" --git-path mesh --to canary --server "$HTTP" > "$work/diff.txt" || gate=$?
cat "$work/diff.txt"
[[ $gate == 1 ]] || fail "vmesh diff --exit-code exited $gate on a change, want 1"
gate=0
"$work/vmesh" diff --exit-code --git-repo "$repo" --git-path mesh --from canary --to HEAD > /dev/null || gate=$?
[[ $gate == 0 ]] || fail "vmesh diff --exit-code exited $gate on a commit that changes nothing, want 0"
grep -q "proxy demo-client (grpc)" "$work/diff.txt" || fail "diff does not list the client"
grep -q "weighted_clusters.clusters\[0\].weight: 80 -> 50" "$work/diff.txt" || fail "diff does not show the weight change"

step "merge, webhook, and every proxy on the new commit"
git -C "$repo" checkout --quiet main
git -C "$repo" merge --quiet --ff-only canary
merged=$(git -C "$repo" rev-parse --short=12 HEAD)
curl -fs -X POST "$HTTP/webhook/git" >/dev/null
for _ in $(seq 100); do
  "$work/vmesh" status --server "$HTTP" > "$work/status.txt"
  grep -q "demo-client.*SYNCED r[0-9]*@$merged" "$work/status.txt" && break
  sleep 0.1
done
cat "$work/status.txt"
grep -q "demo-client.*SYNCED r[0-9]*@$merged" "$work/status.txt" || fail "the client is not SYNCED on $merged"
# The window the ACK fell in mixes both splits; the one after it is all new.
acked_at=$(wc -l < "$work/demo.log")
lines_past() { test "$(wc -l < "$work/demo.log")" -ge "$1"; }
until_ok 100 lines_past $((acked_at + 2)) || fail "the client stopped printing its split"
sed -n "$((acked_at + 2))p" "$work/demo.log"
sed -n "$((acked_at + 2))p" "$work/demo.log" | grep -Eq "v1  (4[0-9]|5[0-9])%" || fail "the split did not move to about 50/50"
echo
echo "OK: diff showed the change before the merge; the client ACKed the routes of commit $merged (types the merge did not change keep their version); traffic is split 50/50"
