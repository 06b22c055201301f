#!/usr/bin/env bash
# make demo: vmesh on the quickstart config, two proxyless gRPC greeter
# backends and a client printing the live v1/v2 split. Edit
# examples/quickstart/config/greeter.yaml (the weights) while it runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
data=$(mktemp -d)
go build -o "$data/vmesh" ./cmd/vmesh
go build -o "$data/demo" ./examples/quickstart/demo
"$data/vmesh" serve --config-dir examples/quickstart --data-dir "$data" --log-level warn &
vmesh_pid=$!
trap 'kill $vmesh_pid 2>/dev/null; wait $vmesh_pid 2>/dev/null; rm -rf "$data"' EXIT
printf 'waiting for vmesh to load the config'
for _ in $(seq 100); do
  if curl -fs 127.0.0.1:15014/ready >/dev/null 2>&1; then break; fi
  printf '.'; sleep 0.1
done
echo " ready"
echo "edit examples/quickstart/config/greeter.yaml (weights 80/20) and watch the split change; Ctrl-C to stop"
"$data/demo" "$@"
