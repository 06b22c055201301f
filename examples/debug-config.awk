# debug-config.awk: one line per object of vmesh's /debug/config (kind, name,
# address:ports of a WorkloadEntry, health, origin). Reads the indented JSON.
/^    \{/ { kind=""; ns=""; name=""; src=""; file=""; line=""; healthy=""; addr=""; ports=""; inorigin=0; inports=0 }
/^      "kind": /      { kind=$2 }
/^      "namespace": / { ns=$2 }
/^      "name": /      { name=$2 }
/^      "healthy": /   { healthy=$2 }
/^      "origin": \{/  { inorigin=1 }
inorigin && /^        "source": / { src=$2 }
inorigin && /^        "file": /   { file=$2 }
inorigin && /^        "line": /   { line=$2 }
/^      \}/ { inorigin=0 }
/^        "address": / { addr=$2 }
/^        "ports": \{/ { inports=1; next }
inports && /^        \}/ { inports=0 }
inports { p=$2; gsub(/[",]/, "", p); ports = ports (ports=="" ? "" : ",") p }
/^    \}/ && kind != "" {
  gsub(/[",]/, "", kind); gsub(/[",]/, "", ns); gsub(/[",]/, "", name); gsub(/[",]/, "", src); gsub(/[",]/, "", file); gsub(/[",]/, "", line); gsub(/[",]/, "", healthy); gsub(/[",]/, "", addr)
  out = sprintf("  %-14s %-52s", kind, ns "/" name)
  if (addr != "") out = out sprintf(" %s:%s", addr, ports)
  if (healthy != "") out = out " healthy=" healthy
  out = out "  (" src (file != "" ? " " file ":" line : "") ")"
  print out
}
