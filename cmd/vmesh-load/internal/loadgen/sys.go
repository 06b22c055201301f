package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"syscall"
	"time"
)

// RaiseFileLimit raises the open-file limit (each simulated proxy holds a
// connection; server children inherit the limit): the soft limit to the
// hard one, and when need is above the hard limit, both to need (which
// needs CAP_SYS_RESOURCE, e.g. root, and is bounded by fs.nr_open). It
// returns the resulting soft limit.
func RaiseFileLimit(need uint64) (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("loadgen: getrlimit: %w", err)
	}
	if need > rl.Max {
		want := syscall.Rlimit{Cur: need, Max: need}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
			return need, nil
		}
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return rl.Cur, fmt.Errorf("loadgen: setrlimit: %w", err)
		}
	}
	return rl.Cur, nil
}

// FileLimitNeed is the open-file limit a run needs: one descriptor per
// connection, in the harness and in the server child, and some to spare.
func FileLimitNeed(o Options) uint64 {
	return uint64((o.Proxies+o.StreamsPerConn-1)/o.StreamsPerConn) + 1024
}

// connsPerSourceAddr is how many connections the harness opens from one
// loopback source address: below the kernel's ephemeral port range
// (32768-60999 by default), so that more connections than ports to the one
// server address spread over 127.0.0.1, 127.0.0.2, ...
const connsPerSourceAddr = 20000

// SelfCPU returns the CPU time (user and system) this process has used.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProfileServer returns an Options.OnServer or OnConnect hook that takes a
// CPU profile of the vmesh child (which must run with pprof) over the given
// duration from when the hook is called (as the changes start, or as the
// proxies start to connect), and writes it to path.
func ProfileServer(path string, d time.Duration, progress io.Writer) func(context.Context, *Child) func() {
	if progress == nil {
		progress = io.Discard
	}
	return func(ctx context.Context, c *Child) func() {
		if c.Kind != ServerVmesh {
			return nil
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := fetchProfile(ctx, c.Addrs.HTTP, path, d); err != nil {
				fmt.Fprintf(progress, "vmesh: profile: %v\n", err)
				return
			}
			fmt.Fprintf(progress, "vmesh: CPU profile written to %s\n", path)
		}()
		return func() { <-done }
	}
}

// HeapProfileWhenSynced returns an Options.OnServer hook that writes a heap
// profile of the vmesh child (which must run with pprof) to path once its
// proxies are synced: what holding the connected proxies costs.
func HeapProfileWhenSynced(path string, progress io.Writer) func(context.Context, *Child) func() {
	if progress == nil {
		progress = io.Discard
	}
	return func(ctx context.Context, c *Child) func() {
		if c.Kind == ServerVmesh {
			writeHeapProfile(ctx, c, path, progress)
		}
		return nil
	}
}

// HeapProfileAfterChanges returns an Options.OnServer hook that writes a
// heap profile of the vmesh child (which must run with pprof) to path once
// the changes are done. With a profile from HeapProfileWhenSynced as the
// base (go tool pprof -sample_index=alloc_space -diff_base), it shows what
// the changes allocated: both profiles follow a forced collection, so
// neither lags behind the allocations.
func HeapProfileAfterChanges(path string, progress io.Writer) func(context.Context, *Child) func() {
	if progress == nil {
		progress = io.Discard
	}
	return func(ctx context.Context, c *Child) func() {
		if c.Kind != ServerVmesh {
			return nil
		}
		return func() { writeHeapProfile(ctx, c, path, progress) }
	}
}

func writeHeapProfile(ctx context.Context, c *Child, path string, progress io.Writer) {
	url := fmt.Sprintf("http://%s/debug/pprof/heap?gc=1", c.Addrs.HTTP)
	if err := fetch(ctx, url, path); err != nil {
		fmt.Fprintf(progress, "vmesh: heap profile: %v\n", err)
		return
	}
	fmt.Fprintf(progress, "vmesh: heap profile written to %s\n", path)
}

func fetchProfile(ctx context.Context, httpAddr, path string, d time.Duration) error {
	return fetch(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", httpAddr, int(d.Seconds())), path)
}

func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ProfileHarnessDuringChanges returns an Options.OnServer hook that takes a
// CPU profile of the harness itself (the simulated proxies) while vmesh's
// changes are measured, over at most the given duration, and writes it to
// path.
func ProfileHarnessDuringChanges(path string, d time.Duration, progress io.Writer) func(context.Context, *Child) func() {
	if progress == nil {
		progress = io.Discard
	}
	return func(ctx context.Context, c *Child) func() {
		if c.Kind != ServerVmesh {
			return nil
		}
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintf(progress, "harness: profile: %v\n", err)
			return nil
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			fmt.Fprintf(progress, "harness: profile: %v\n", err)
			return nil
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fmt.Fprintf(progress, "harness: profile: %v\n", err)
				return
			}
			fmt.Fprintf(progress, "harness: CPU profile written to %s\n", path)
		}()
		return func() { <-done }
	}
}

// BothHooks returns an Options.OnServer hook that runs a and b (either may
// be nil) and waits for both.
func BothHooks(a, b func(context.Context, *Child) func()) func(context.Context, *Child) func() {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return func(ctx context.Context, c *Child) func() {
		da, db := a(ctx, c), b(ctx, c)
		return func() {
			if da != nil {
				da()
			}
			if db != nil {
				db()
			}
		}
	}
}
