#!/usr/bin/env bash
# Runs every fuzz target in the tree (every `func FuzzX(f *testing.F)` in a
# _test.go file: the list is found, not kept by hand) for a fixed number of
# executions, $FUZZ_EXECS (default 3000x). A count, not a duration: Go 1.26's
# coordinator fails a time-limited run at its deadline now and then
# (golang/go#75804: it compares the deadline's error with its child
# context's before the child is cancelled); with a count there is no
# deadline context at all, so the race cannot happen, and a loaded machine
# only makes the run slower.
#
# Each target must have a seed corpus in testdata/fuzz/<Target> and must
# really fuzz: its output has to show the executions it was asked for.
set -euo pipefail
cd "$(dirname "$0")/.."
execs=${FUZZ_EXECS:-3000x}
want=${execs%x}

mapfile -t targets < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . |
	sed -E 's#^\./(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+)\(.*#\1 \2#' | sort -u)
[ "${#targets[@]}" -gt 0 ] || { echo "fuzz: no fuzz targets found" >&2; exit 1; }
echo "fuzz: ${#targets[@]} targets, $execs executions each"
start=$SECONDS
n=0
for t in "${targets[@]}"; do
	pkg=${t% *} name=${t#* }
	n=$((n + 1))
	corpus="$pkg/testdata/fuzz/$name"
	if [ -z "$(ls -A "$corpus" 2>/dev/null)" ]; then
		echo "fuzz: $pkg $name has no seed corpus in $corpus" >&2
		exit 1
	fi
	t0=$SECONDS
	echo "fuzz [$n/${#targets[@]}] ./$pkg $name ($(ls "$corpus" | wc -l) seeds in $corpus)"
	log=$(mktemp)
	if ! go test -run '^$' -fuzz "^$name\$" -fuzztime "$execs" -fuzzminimizetime 10x "./$pkg" >"$log" 2>&1; then
		cat "$log"
		rm -f "$log"
		echo "fuzz: ./$pkg $name FAILED" >&2
		exit 1
	fi
	# The last progress line names the executions done: prove it fuzzed.
	done_execs=$(grep -Eo 'execs: [0-9]+' "$log" | tail -n 1 | grep -Eo '[0-9]+' || echo 0)
	rm -f "$log"
	if [ "$done_execs" -lt "$want" ]; then
		echo "fuzz: ./$pkg $name ran $done_execs of $want executions" >&2
		exit 1
	fi
	echo "fuzz [$n/${#targets[@]}] ./$pkg $name: $done_execs executions, ok in $((SECONDS - t0))s"
done
echo "fuzz: ${#targets[@]} targets passed in $((SECONDS - start))s"
