#!/usr/bin/env bash
# A Dubbo fleet on ZooKeeper joins the mesh unchanged, then a VirtualService
# moves its consumers from Greeter 1.0.0 to 2.0.0: 10% first, then all of it,
# then the 1.0.0 providers stop. The providers' only registration is the
# ZooKeeper node Dubbo writes; vmesh generates the ServiceEntries and
# WorkloadEntries. The script checks its own output and exits 1 on a
# mismatch, 77 when ZooKeeper (java + Debian's zookeeper jars) is missing.
# Needs go, curl and awk.
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/lib.sh
# Every port is the kernel's choice: vmesh and the providers bind port 0 and
# print what they got; ZooKeeper gets a port freeport just released.
PORTS=() # the providers' ports: two 1.0.0 providers, one 2.0.0

# JAVA and ZOOKEEPER_JAR override where java and Debian's zookeeper.jar
# (whose manifest names every dependency) are found.
java=$(command -v "${JAVA:-java}" || true)
[ -n "$java" ] || missing "java not found (Debian package zookeeperd)"
jar=${ZOOKEEPER_JAR:-}
if [ -z "$jar" ]; then
  for j in /usr/share/java/zookeeper.jar /usr/share/zookeeper/zookeeper.jar; do [ -f "$j" ] && jar=$j && break; done
fi
[ -n "$jar" ] && [ -f "$jar" ] || missing "ZooKeeper jar not found (Debian package zookeeperd)"


zk_ok() { [ "$(exec 3<>"/dev/tcp/127.0.0.1/$zk_port" && printf ruok >&3 && timeout 2 cat <&3)" = imok ]; }
# count KIND: how many objects of KIND vmesh holds.
count() { objects "$1" | grep -c . || true; }
# entries_are N: vmesh holds N WorkloadEntries (a function, so until_ok
# evaluates it on each try).
entries_are() { test "$(count WorkloadEntry)" -eq "$1"; }

step "build"
go build -o "$work/vmesh" ./cmd/vmesh
go build -o "$work/provider" ./examples/dubbo-migration/provider
go build -o "$work/client" ./examples/dubbo-migration/client

step "ZooKeeper (the registry the Dubbo fleet already uses)"
# ZooKeeper cannot bind port 0: it gets a port the kernel just released.
start_zookeeper() {
  zk_port=$(freeport)
  mkdir -p "$work/zk/data"
  cat > "$work/zk/zoo.cfg" <<EOF
tickTime=500
dataDir=$work/zk/data
clientPort=$zk_port
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok
EOF
  "$java" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dzookeeper.log.dir="$work/zk" \
    -Dzookeeper.admin.enableServer=false -cp "$jar" org.apache.zookeeper.server.ZooKeeperServerMain \
    "$work/zk/zoo.cfg" > "$work/zk/zookeeper.log" 2>&1 &
  server_pid=$!
  pids+=($server_pid)
}
start_retrying ZooKeeper "$work/zk/zookeeper.log" start_zookeeper zk_ok
echo "ZooKeeper on 127.0.0.1:$zk_port"

step "the Dubbo providers register themselves in ZooKeeper, as Dubbo does"
provider_pids=()
start_provider() { # VERSION: a provider on a port of the kernel's choosing, appended to PORTS
  local n=${#PORTS[@]} log port
  log="$work/provider-$n.log"
  "$work/provider" --zk "127.0.0.1:$zk_port" --application greeter-provider --version "$1" \
    --addr "127.0.0.1:0" > "$log" 2>&1 &
  pids+=($!)
  provider_pids+=($!)
  port=$(listening "$log" 'serving tri://127\.0\.0\.1:([0-9]+), registered') || { cat "$log"; fail "provider $1 did not register"; }
  PORTS+=("$port")
  sed -E 's/registered .*providers\/(.{60}).*/registered \/dubbo\/com.acme.Greeter\/providers\/\1.../' "$log"
}
start_provider 1.0.0
start_provider 1.0.0
start_provider 2.0.0
# Greeter 1.0.0's ServiceEntry is numbered by its providers' lowest port.
LOW=$(( PORTS[0] < PORTS[1] ? PORTS[0] : PORTS[1] ))

step "vmesh reading ZooKeeper (--registry zookeeper=...) and a config directory with no YAML yet"
mkdir -p "$work/config"
start_vmesh --registry "zookeeper=127.0.0.1:$zk_port" --config-dir "$work/config" \
  --data-dir "$work/data" --debounce-quiet 50ms
until_ok 300 curl -fs "$HTTP/ready" || { cat "$work/vmesh.log"; fail "vmesh never became ready"; }

step "what vmesh generated from the providers' nodes (curl $HTTP/debug/config)"
until_ok 100 entries_are 3 || { objects; fail "vmesh did not generate three WorkloadEntries"; }
objects | tee "$work/objects.txt"
grep -Eq "^  ServiceEntry +default/com.acme.greeter.v-1-0-0 +\(registry:zookeeper" "$work/objects.txt" || fail "no ServiceEntry for Greeter 1.0.0"
grep -Eq "^  ServiceEntry +default/com.acme.greeter.v-2-0-0 +\(registry:zookeeper" "$work/objects.txt" || fail "no ServiceEntry for Greeter 2.0.0"
for i in 0 1; do
  grep -Eq "^  WorkloadEntry +default/com.acme.greeter.v-1-0-0-127.0.0.1-${PORTS[i]} +127.0.0.1:${PORTS[i]} " "$work/objects.txt" || fail "no WorkloadEntry for the provider on ${PORTS[i]}"
done
se=$(curl -fs "$HTTP/debug/config?kind=ServiceEntry" | tr -d '\n ' | grep -o '"spec":{"hosts":\["com.acme.greeter.v-1-0-0"\][^}]*}[^}]*}[^}]*}}' || true)
echo "the ServiceEntry of Greeter 1.0.0: $se"
[[ $se == *'"ports":[{"number":'"$LOW"',"protocol":"GRPC","name":"grpc-tri"}]'* ]] ||
  fail "the 1.0.0 ServiceEntry does not expose grpc-tri on $LOW (the providers' lowest port)"
we=$(curl -fs "$HTTP/debug/config?kind=WorkloadEntry" | tr -d '\n ' | grep -o '"spec":{"address":"127.0.0.1","ports":{"grpc-tri":'"$LOW"'}[^}]*}[^}]*}' || true)
echo "its WorkloadEntry on $LOW (labels are the URL's parameters): $we"
[[ $we == *'"version":"1.0.0"'* && $we == *'"application":"greeter-provider"'* ]] || fail "the WorkloadEntry lacks the version and application labels"

step "a consumer calls Greeter 1.0.0 through vmesh: all calls reach the 1.0.0 providers"
"$work/client" --xds "$XDS" --target "com.acme.greeter.v-1-0-0:$LOW" --every 1s --duration 120s > "$work/client.log" 2>&1 &
pids+=($!)
wait_split '^  1\.0\.0 100% #+ +\([0-9]+ calls, 0 failed\)$'
grep -m1 "first reply" "$work/client.log"

step "canary: 10% of the calls to 2.0.0 (cp examples/dubbo-migration/config/canary-10.yaml into the config dir)"
cp examples/dubbo-migration/config/canary-10.yaml "$work/config/greeter.yaml"
wait_split '^  1\.0\.0  (8[4-9]|9[0-6])% #+ +2\.0\.0 +([4-9]|1[0-6])% #* +\([0-9]+ calls, 0 failed\)$'
sleep 1
tail -n 1 "$work/client.log" | grep -Eq '^  1\.0\.0  (8[0-9]|9[0-7])% .* 2\.0\.0 +([3-9]|1[0-9]|20)% ' || fail "the 90/10 split did not hold"
tail -n 1 "$work/client.log"

step "cut-over: every call to 2.0.0, and the 1.0.0 host kept by a ServiceEntry file (config/cutover.yaml)"
sed "s/number: 15221/number: $LOW/" examples/dubbo-migration/config/cutover.yaml > "$work/config/greeter.yaml"
wait_split '^  2\.0\.0 100% #+ +\([0-9]+ calls, 0 failed\)$'

step "the 1.0.0 providers stop: their ZooKeeper nodes go, and so do their endpoints"
kill "${provider_pids[0]}" "${provider_pids[1]}"
until_ok 100 entries_are 1 || { objects; fail "the 1.0.0 WorkloadEntries were not removed"; }
objects | tee "$work/objects.txt"
grep -Eq "^  ServiceEntry +default/com.acme.greeter.v-1-0-0 +\(dir:.* greeter.yaml:[0-9]+\)" "$work/objects.txt" ||
  fail "the 1.0.0 ServiceEntry does not come from the config file"
sleep 1.2
wait_split '^  2\.0\.0 100% #+ +\([0-9]+ calls, 0 failed\)$'
# From the first good line on, no interval may have a failed call.
if sed -n '/calls, 0 failed)$/,$p' "$work/client.log" | grep -E '[1-9][0-9]* failed\)'; then
  fail "calls failed during the migration"
fi
if [ -n "$(warnings)" ]; then echo "vmesh's log (warnings and errors):"; warnings | tail -n 20; fi
if grep -q '"level":"ERROR"' "$work/vmesh.log"; then fail "vmesh logged errors"; fi
echo
echo "OK: the Dubbo providers joined the mesh from their ZooKeeper nodes alone; the consumers of Greeter 1.0.0 moved 90/10, then wholly, to 2.0.0 without a failed call"
