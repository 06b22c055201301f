#!/usr/bin/env bash
# A fleet registered in Consul becomes a mesh service with no YAML: three
# instances of `inventory`, each with a gRPC health check Consul runs, are
# reached by a proxyless gRPC client through vmesh; a failing health check
# takes an instance out of the split and a passing one brings it back;
# /debug/registries shows the adapter's state. The script checks its own
# output and exits 1 on a mismatch, 77 when the consul binary is missing.
# Needs go, curl and awk.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/lib.sh
# Every port is the kernel's choice: vmesh and the instances bind port 0 and
# print what they got; Consul gets ports freeport just released.
PORTS=() # the instances' ports

# CONSUL overrides the consul binary (default: .bin/consul from
# `make test-deps`, else consul on PATH).
consul=${CONSUL:-}
if [ -z "$consul" ]; then
  if [ -x .bin/consul ]; then consul=$PWD/.bin/consul; else consul=consul; fi
fi
consul=$(command -v "$consul" || true)
[ -n "$consul" ] || missing "consul binary not found in .bin/consul or PATH"


# passing: how many inventory instances Consul reports passing.
passing() { curl -fs "http://$consul_http/v1/health/service/inventory?passing=true" | grep -o '"ServiceID": *"inventory-[0-9]"' | sort -u | wc -l; }
# entry ID: the /debug/config line of instance ID's WorkloadEntry.
entry() { objects WorkloadEntry | grep -E "^  WorkloadEntry +default/inventory-[^ ]*$1 " || true; }
# Conditions until_ok polls (functions, so they are evaluated on each try).
passing_is() { test "$(passing)" -eq "$1"; }
healthy_entries_are() { test "$(objects WorkloadEntry | grep -c 'healthy=true')" -eq "$1"; }
entry_has() { entry "$1" | grep -q -- "$2"; }
entry_gone() { test -z "$(entry "$1")"; }

step "build"
go build -o "$work/vmesh" ./cmd/vmesh
go build -o "$work/backend" ./examples/consul-fleet/backend
go build -o "$work/client" ./examples/consul-fleet/client

step "a Consul dev agent (the registry the fleet already uses)"
# Consul cannot report ports it picked itself: it gets ports the kernel just
# released.
start_consul() {
  local ports
  ports=($(freeport 5))
  consul_http=127.0.0.1:${ports[0]}
  rm -rf "$work/consul"
  "$consul" agent -dev -bind 127.0.0.1 -client 127.0.0.1 -advertise 127.0.0.1 -node fleet -datacenter dc1 \
    -http-port "${ports[0]}" -dns-port -1 -grpc-port "${ports[1]}" -server-port "${ports[2]}" \
    -serf-lan-port "${ports[3]}" -serf-wan-port "${ports[4]}" -hcl 'ports { grpc_tls = -1 https = -1 }' \
    -data-dir "$work/consul" -log-level warn > "$work/consul.log" 2>&1 &
  server_pid=$!
  pids+=($server_pid)
}
consul_leader() { curl -fs "http://$consul_http/v1/status/leader" | grep -q 127.0.0.1; }
start_retrying Consul "$work/consul.log" start_consul consul_leader
echo "Consul on $consul_http"

step "three inventory instances, registered in Consul with a gRPC health check each"
for i in 1 2 3; do
  "$work/backend" --id "inventory-$i" --addr "127.0.0.1:0" > "$work/inventory-$i.log" 2>&1 &
  pids+=($!)
  eval "backend_$i=$!"
  port=$(listening "$work/inventory-$i.log" "inventory-$i serving on 127\.0\.0\.1:([0-9]+)")
  PORTS+=("$port")
  cat > "$work/inventory-$i.json" <<EOF
{
  "service": {
    "id": "inventory-$i",
    "name": "inventory",
    "address": "127.0.0.1",
    "port": $port,
    "tags": ["version=v1"],
    "meta": {"protocol": "grpc"},
    "check": {"id": "inventory-$i-health", "name": "gRPC health", "grpc": "127.0.0.1:$port", "interval": "1s", "timeout": "1s"}
  }
}
EOF
  "$consul" services register -http-addr "$consul_http" "$work/inventory-$i.json"
done
echo "the service definition of inventory-1 (consul services register inventory-1.json):"
cat "$work/inventory-1.json"
until_ok 150 passing_is 3 || { curl -s "http://$consul_http/v1/health/service/inventory"; fail "Consul does not report the three instances passing"; }
# The ServiceEntry is numbered by the instances' lowest port.
LOW=$(printf '%s\n' "${PORTS[@]}" | sort -n | head -n 1)
echo "Consul: 3 inventory instances passing"

step "vmesh with only --registry consul=$consul_http: no config directory, no YAML"
start_vmesh --registry "consul=$consul_http" --data-dir "$work/data" --debounce-quiet 50ms
until_ok 300 curl -fs "$HTTP/ready" || { cat "$work/vmesh.log"; fail "vmesh never became ready"; }
until_ok 100 healthy_entries_are 3 ||
  { objects; fail "vmesh does not have three healthy WorkloadEntries"; }
echo "curl $HTTP/debug/config, one line per object:"
objects | tee "$work/objects.txt"
grep -Eq "^  ServiceEntry +default/inventory +\(registry:consul" "$work/objects.txt" || fail "no ServiceEntry for inventory"
se=$(curl -fs "$HTTP/debug/config?kind=ServiceEntry" | tr -d '\n ' | grep -o '"spec":{"hosts":\["inventory.service.consul"\][^}]*}[^}]*}[^}]*}}' || true)
echo "its spec: $se"
[[ $se == *'"ports":[{"number":'"$LOW"',"protocol":"GRPC","name":"grpc"}]'* ]] ||
  fail "the ServiceEntry does not expose grpc on $LOW (the instances' lowest port)"
we=$(curl -fs "$HTTP/debug/config?kind=WorkloadEntry" | tr -d '\n ' | grep -o '"spec":{"address":"127.0.0.1","ports":{"grpc":'"${PORTS[0]}"'}[^}]*}[^}]*}' || true)
echo "inventory-1's WorkloadEntry (labels from tags and meta, datacenter as locality): $we"
[[ $we == *'"version":"v1"'* ]] || fail "the tag version=v1 is not a label of inventory-1's WorkloadEntry"

step "the adapter's state (curl $HTTP/debug/registries)"
curl -fs "$HTTP/debug/registries" | tee "$work/registries.json"
tr -d '\n ' < "$work/registries.json" | grep -q '"type":"consul","target":"'"$consul_http"'","connected":true' ||
  fail "/debug/registries does not show the consul adapter connected"
tr -d '\n ' < "$work/registries.json" | grep -q '"serviceEntries":1,"workloadEntries":3' ||
  fail "/debug/registries does not count 1 ServiceEntry and 3 WorkloadEntries"

step "a proxyless gRPC client calls inventory.service.consul through vmesh: all three answer"
"$work/client" --xds "$XDS" --target "inventory.service.consul:$LOW" --every 1s --duration 120s > "$work/client.log" 2>&1 &
pids+=($!)
# about a third each (round robin), and no failed call
third='(2[4-9]|3[0-9]|4[0-2])% #*'
three="^  inventory-1  $third +inventory-2  $third +inventory-3  $third +\\([0-9]+ calls, 0 failed\\)\$"
wait_split "$three"

step "inventory-2's health check fails (its health service says NOT_SERVING): it leaves the split"
kill -USR1 "$backend_2"
until_ok 150 passing_is 2 || fail "Consul does not see inventory-2 failing"
echo "Consul: inventory-2 critical"
until_ok 100 entry_has inventory-2 healthy=false ||
  fail "vmesh did not mark inventory-2 unhealthy"
entry inventory-2
two='^  inventory-1 +(4[0-9]|5[0-9])% #* +inventory-3 +(4[0-9]|5[0-9])% #* +\([0-9]+ calls, 0 failed\)$'
wait_split "$two"
sleep 1
tail -n 1 "$work/client.log" | grep -Eq "$two" || fail "inventory-2 is back in the split while its check fails"

step "inventory-2 passes again: it rejoins"
kill -USR2 "$backend_2"
until_ok 150 passing_is 3 || fail "Consul does not see inventory-2 passing"
until_ok 100 entry_has inventory-2 healthy=true ||
  fail "vmesh did not mark inventory-2 healthy"
entry inventory-2
wait_split "$three"

step "inventory-3 is deregistered from Consul: it leaves the mesh"
"$consul" services deregister -http-addr "$consul_http" -id inventory-3
until_ok 100 entry_gone inventory-3 || fail "vmesh kept inventory-3's WorkloadEntry"
objects WorkloadEntry
wait_split '^  inventory-1 +(4[0-9]|5[0-9])% #* +inventory-2 +(4[0-9]|5[0-9])% #* +\([0-9]+ calls, 0 failed\)$'
curl -fs "$HTTP/debug/registries" | tr -d '\n ' | grep -q '"serviceEntries":1,"workloadEntries":2' ||
  fail "/debug/registries does not count the 2 remaining WorkloadEntries"

# From the first good line on, no interval may have a failed call.
if sed -n '/calls, 0 failed)$/,$p' "$work/client.log" | grep -E '[1-9][0-9]* failed\)'; then
  fail "calls failed"
fi
if [ -n "$(warnings)" ]; then echo "vmesh's log (warnings and errors):"; warnings | tail -n 20; fi
if grep -q '"level":"ERROR"' "$work/vmesh.log"; then fail "vmesh logged errors"; fi
echo
echo "OK: Consul's inventory instances became a mesh service with no YAML; a failing health check took one out of the split and a passing one brought it back, without a failed call"
