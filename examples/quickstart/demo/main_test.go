package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmesh/vmesh/internal/testenv"
)

// TestDemo runs the demo against vmesh (the vmesh serve command) serving a copy of the quickstart
// (its backends on ports the kernel picked), waits for the printed split to
// show 80/20, then edits the VirtualService and waits for it to show all-v2.
func TestDemo(t *testing.T) {
	backends := defaultBackends()
	for i := range backends {
		backends[i].addr = "127.0.0.1:0"
	}
	listeners, err := listen(backends)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"greeter.yaml", "workloads.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "config", f))
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		for i, def := range defaultBackends() {
			_, port, _ := strings.Cut(def.addr, ":")
			_, got, _ := strings.Cut(listeners[i].Addr().String(), ":")
			text = strings.ReplaceAll(text, "grpc: "+port, "grpc: "+got)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vm := testenv.StartVMesh(t, "--config-dir", dir)
	ctx := context.Background()

	demoCtx, stop := context.WithTimeout(ctx, 2*time.Minute)
	defer stop()
	pr, pw := io.Pipe()
	var out strings.Builder
	ran := make(chan error, 1)
	go func() {
		_, err := run(demoCtx, io.MultiWriter(pw, &out), vm.XDSAddr, 500*time.Millisecond, backends, listeners)
		pw.CloseWithError(fmt.Errorf("demo ended: %v", err))
		ran <- err
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		buf := make([]byte, 0, 4096)
		chunk := make([]byte, 1024)
		for {
			n, err := pr.Read(chunk)
			buf = append(buf, chunk[:n]...)
			for {
				i := strings.IndexByte(string(buf), '\n')
				if i < 0 {
					break
				}
				lines <- string(buf[:i])
				buf = buf[i+1:]
			}
			if err != nil {
				return
			}
		}
	}()
	// waitFor reads printed split lines until one satisfies ok.
	waitFor := func(what string, ok func(v1, v2, failed int) bool) {
		t.Helper()
		for line := range lines {
			if v1, v2, failed, parsed := parseSplit(line); parsed && v1+v2 >= 50 && ok(v1, v2, failed) {
				return
			}
		}
		t.Fatalf("the demo never printed %s:\n%s", what, out.String())
	}
	waitFor("an 80/20 split", func(v1, v2, _ int) bool {
		share := float64(v1) / float64(v1+v2)
		return share > 0.7 && share < 0.9
	})
	data, err := os.ReadFile(filepath.Join(dir, "greeter.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(strings.Replace(string(data), "weight: 80", "weight: 0", 1), "weight: 20", "weight: 100", 1)
	if err := os.WriteFile(filepath.Join(dir, "greeter.yaml"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("all calls on v2", func(v1, _, _ int) bool { return v1 == 0 })
	stop()
	for range lines {
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
}

var splitLine = regexp.MustCompile(`^(?:\s+(v1|v2)\s+\d+%\s*#*)+\s+\((\d+) calls, (\d+) failed\)$`)
var shareOf = regexp.MustCompile(`(v1|v2)\s+(\d+)%`)

// parseSplit reads one line split.Render printed: the calls v1 and v2
// answered (from their shares of the total) and the failed calls.
func parseSplit(line string) (v1, v2, failed int, ok bool) {
	m := splitLine.FindStringSubmatch(line)
	if m == nil {
		return 0, 0, 0, false
	}
	total, _ := strconv.Atoi(m[2])
	failed, _ = strconv.Atoi(m[3])
	for _, s := range shareOf.FindAllStringSubmatch(line, -1) {
		pct, _ := strconv.Atoi(s[2])
		if s[1] == "v1" {
			v1 = total * pct / 100
		} else {
			v2 = total * pct / 100
		}
	}
	return v1, v2, failed, true
}
