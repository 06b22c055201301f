package loadgen

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Latency summarises a set of latencies.
type Latency struct {
	N   int           `json:"n"`
	P50 time.Duration `json:"p50"`
	P99 time.Duration `json:"p99"`
	Max time.Duration `json:"max"`
}

// Summarize returns the nearest-rank p50, p99 and max of ds; ds is not
// modified. An empty input gives the zero Latency.
func Summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return Latency{N: len(s), P50: Percentile(s, 50), P99: Percentile(s, 99), Max: s[len(s)-1]}
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted: the smallest value with at least p% of the values at or below it.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// ProcStats is what /proc says about a process at one moment.
type ProcStats struct {
	// CPU is user plus system time consumed so far, including that of
	// the process's children it has waited for (the git commands of
	// vmesh's git source).
	CPU time.Duration
	// RSS is the resident set size now; PeakRSS the high-water mark (VmHWM).
	RSS, PeakRSS int64
	// Threads is the number of OS threads.
	Threads int
}

// userHZ is the unit of the times in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux architecture Go supports).
const userHZ = 100

// ReadProcStats reads CPU time and memory of process pid from /proc.
func ReadProcStats(pid int) (ProcStats, error) {
	var st ProcStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, fmt.Errorf("loadgen: %w", err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return st, fmt.Errorf("loadgen: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); utime, stime, cutime and cstime are fields
	// 14 to 17.
	if len(f) < 15 {
		return st, fmt.Errorf("loadgen: short /proc/%d/stat", pid)
	}
	var ticks int64
	for _, field := range f[11:15] {
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return st, fmt.Errorf("loadgen: /proc/%d/stat: bad cpu times %q", pid, f[11:15])
		}
		ticks += n
	}
	st.CPU = time.Duration(ticks) * time.Second / userHZ

	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, fmt.Errorf("loadgen: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			st.RSS = n * 1024
		case "VmHWM":
			st.PeakRSS = n * 1024
		case "Threads":
			st.Threads = int(n)
		}
	}
	return st, nil
}

// Bytes renders a byte count with a binary unit: B, KiB, MiB or GiB.
func Bytes(b int64) string {
	switch f := float64(b); {
	case b < 0:
		return "-" + Bytes(-b)
	case b < 1<<10:
		return fmt.Sprintf("%d B", b)
	case b < 1<<20:
		return fmt.Sprintf("%.1f KiB", f/(1<<10))
	case b < 1<<30:
		return fmt.Sprintf("%.1f MiB", f/(1<<20))
	default:
		return fmt.Sprintf("%.2f GiB", f/(1<<30))
	}
}

// MiB renders bytes in MiB with one decimal.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
