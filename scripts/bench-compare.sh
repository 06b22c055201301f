#!/usr/bin/env bash
# bench-compare.sh REV_BEFORE REV_AFTER: the serving path's Go benchmarks at
# two revisions, in one markdown table of medians of alternating runs.
#
# Each revision is checked out in a temporary git worktree (removed at the
# end) and each benchmark's package test binary is built once per revision;
# the package is found by the benchmark's name (`func BenchmarkX(b
# *testing.B)` in a _test.go file), so a benchmark that moved between the two
# revisions is still compared. Then, ROUNDS times, every benchmark runs once
# with the "before" binary and once with the "after" one, in alternating order
# (before first in odd rounds, after first in even ones), so that the
# machine's drift falls on both sides alike. The table gives, per benchmark
# and unit (ns/op, B/op, allocs/op, and custom units such as KB/proxy), the
# median of the ROUNDS runs of each side and the change.
#
# The benchmarks (name:benchtime) cover what a proxy is served: proxyless and
# sidecar generation, a VirtualService push to 1,000 proxyless proxies and to
# 1,000 sidecars, an EDS-only push, 500 connected proxies' memory, the model's
# build and its rebuild after one endpoint change. About 10-12 minutes with
# the defaults on 2 cores. Settings (environment):
#   ROUNDS=5            runs of each side
#   BENCHES="..."       space-separated name:benchtime list (default below)
#   OUT=dir             where the raw outputs and the table go (default: a new
#                       directory under ${TMPDIR:-/tmp}); before.txt and
#                       after.txt are benchstat input
# If benchstat is on PATH (go install golang.org/x/perf/cmd/benchstat@latest),
# its comparison is printed after the table.
#
# Example: scripts/bench-compare.sh c14296b main
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 REV_BEFORE REV_AFTER" >&2
	exit 2
fi
cd "$(dirname "$0")/.."
repo=$(pwd)
rounds=${ROUNDS:-5}
benches=${BENCHES:-"BenchmarkGenerateOneProxy:10x BenchmarkGenerateOneSidecar:10x BenchmarkFullPush1000Proxies10Groups:20x BenchmarkSidecarPush1000VMs:10x BenchmarkEDSPush1000Proxies:20x BenchmarkMemoryPerProxy:1x BenchmarkBuild:20x BenchmarkRebuildOneEntry:200x"}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench-compare.XXXXXX")}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-compare-wt.XXXXXX")

sha_before=$(git rev-parse --verify "$1^{commit}")
sha_after=$(git rev-parse --verify "$2^{commit}")

cleanup() {
	for side in before after; do
		if [ -d "$work/$side" ]; then
			git -C "$repo" worktree remove --force "$work/$side" >/dev/null 2>&1 || true
		fi
	done
	rm -rf "$work"
}
trap cleanup EXIT

# binary SIDE BENCH prints the test binary holding BENCH at SIDE and the
# package folder it runs in, building the binary on first use; nothing when
# that revision has no such benchmark.
binary() {
	local side=$1 name=$2 file dir bin
	file=$(grep -rlE --include='*_test.go' "^func ${name}\(b \*testing\.B\)" "$work/$side" | head -n 1 || true)
	[ -n "$file" ] || return 0
	dir=$(dirname "$file")
	bin="$work/bin-$side/$(echo "${dir#"$work/$side/"}" | tr / _).test"
	if [ ! -x "$bin" ]; then
		mkdir -p "$work/bin-$side"
		(cd "$work/$side" && go test -c -o "$bin" "./${dir#"$work/$side/"}") >&2
	fi
	echo "$bin $dir"
}

for side in before after; do
	sha=$sha_before
	[ "$side" = after ] && sha=$sha_after
	git worktree add --detach "$work/$side" "$sha" >/dev/null 2>&1
done

echo "building the test binaries of $(git rev-parse --short "$sha_before") and $(git rev-parse --short "$sha_after")" >&2
declare -A bins
for spec in $benches; do
	name=${spec%%:*}
	for side in before after; do
		bins[$side:$name]=$(binary "$side" "$name")
	done
done

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
: >"$out/before.txt"
: >"$out/after.txt"
for round in $(seq 1 "$rounds"); do
	order="before after"
	[ $((round % 2)) -eq 0 ] && order="after before"
	for spec in $benches; do
		name=${spec%%:*}
		benchtime=${spec#*:}
		for side in $order; do
			read -r bin dir <<<"${bins[$side:$name]}" || true
			if [ -z "${bin:-}" ]; then
				continue
			fi
			echo "round $round/$rounds: $side $name ($benchtime)" >&2
			(cd "$dir" && "$bin" -test.run '^$' -test.bench "^${name}\$" -test.benchtime "$benchtime" -test.benchmem -test.count 1) |
				grep -E '^(Benchmark|goos|goarch|pkg|cpu)' >>"$out/$side.txt" || true
			bin=""
		done
	done
done
elapsed=$(($(date +%s) - start))
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

{
	echo "Before: \`$1\` ($(git rev-parse --short "$sha_before")); after: \`$2\` ($(git rev-parse --short "$sha_after")). Medians of $rounds alternating runs of each side (\`scripts/bench-compare.sh\`, $((elapsed / 60)) min $((elapsed % 60)) s)."
	echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(go version | cut -d' ' -f3-); load average $load_start at the start, $load_end at the end."
	echo
	echo "| benchmark | unit | before | after | change |"
	echo "|---|---|---:|---:|---:|"
	awk '
		function median(key,    n, i, j, t, a) {
			n = split(vals[key], a, " ")
			for (i = 2; i <= n; i++) {
				t = a[i] + 0
				for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]
				a[j + 1] = t
			}
			if (n == 0) return ""
			if (n % 2) return a[(n + 1) / 2] + 0
			return (a[n / 2] + a[n / 2 + 1]) / 2
		}
		function show(v, unit) {
			if (v == "") return "—"
			if (unit == "ns/op") {
				if (v >= 1e9) return sprintf("%.3f s", v / 1e9)
				if (v >= 1e6) return sprintf("%.2f ms", v / 1e6)
				if (v >= 1e3) return sprintf("%.2f µs", v / 1e3)
				return sprintf("%.0f ns", v)
			}
			if (unit == "B/op") {
				if (v >= 1048576) return sprintf("%.2f MiB", v / 1048576)
				if (v >= 1024) return sprintf("%.1f KiB", v / 1024)
				return sprintf("%.0f B", v)
			}
			if (v >= 1e4) return sprintf("%.2fk", v / 1e3)
			return sprintf("%.4g", v)
		}
		FNR == 1 { side = (FILENAME ~ /before\.txt$/) ? "before" : "after" }
		/^Benchmark/ {
			name = $1
			sub(/-[0-9]+$/, "", name)
			for (i = 3; i + 1 <= NF; i += 2) {
				key = name SUBSEP $(i + 1)
				if (!(key in seen)) { seen[key] = 1; order[++nkeys] = key }
				vals[key SUBSEP side] = vals[key SUBSEP side] " " $i
			}
		}
		END {
			for (k = 1; k <= nkeys; k++) {
				split(order[k], p, SUBSEP)
				b = median(order[k] SUBSEP "before")
				a = median(order[k] SUBSEP "after")
				change = "—"
				if (b != "" && a != "" && b != 0) change = sprintf("%+.1f %%", (a - b) / b * 100)
				printf "| `%s` | %s | %s | %s | %s |\n", p[1], p[2], show(b, p[2]), show(a, p[2]), change
			}
		}
	' "$out/before.txt" "$out/after.txt"
} | tee "$out/table.md"

if command -v benchstat >/dev/null 2>&1; then
	echo
	echo '```'
	benchstat "$out/before.txt" "$out/after.txt" || true
	echo '```'
fi
echo >&2
echo "raw outputs and the table: $out" >&2
